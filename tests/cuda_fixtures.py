"""A CUDA allocator snapshot written by hand to torch's documented schema (``torch.cuda.memory._snapshot``
docstring): SYNTHETIC, not recorded on a GPU. Shared by the parser tests and the browser test."""

from __future__ import annotations

MiB = 2**20
A = 0x7F00_0000_0000  # a 20 MiB segment that existed before the history began
B = 0x7F00_4000_0000  # a 2 MiB segment made and released (empty_cache) inside it


def synthetic_snapshot() -> dict:
    """SYNTHETIC, by hand, to the documented schema: not recorded on a GPU."""
    def entry(action, addr, size, t, **extra):
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": [], **extra}

    trace = [
        entry("free_requested", A + 16 * MiB, 1 * MiB, 1_000),  # a block from before the history
        entry("free_completed", A + 16 * MiB, 1 * MiB, 1_000),
        entry("alloc", A, 8 * MiB, 2_000, user_metadata="forgeviz cell 3"),  # a parameter
        entry("alloc", A + 8 * MiB, 4 * MiB, 3_000, user_metadata="forgeviz cell 3"),  # a temporary
        entry("alloc", A + 12 * MiB, 4 * MiB, 4_000, user_metadata="forgeviz cell 4"),  # its gradient
        entry("free_requested", A + 8 * MiB, 4 * MiB, 5_000, user_metadata="forgeviz cell 4"),
        entry("free_completed", A + 8 * MiB, 4 * MiB, 5_000, user_metadata="forgeviz cell 4"),
        entry("segment_alloc", B, 2 * MiB, 6_000, user_metadata="forgeviz cell 5"),
        entry("alloc", B, 512, 6_000, user_metadata="forgeviz cell 5"),
        entry("free_completed", B, 512, 7_000, user_metadata="forgeviz cell 5"),
        entry("segment_free", B, 2 * MiB, 8_000, user_metadata="forgeviz cell 5"),  # empty_cache()
        {"action": "oom", "size": 64 * 2**30, "device_free": 2**30, "stream": 0, "time_us": 9_000, "frames": [],
         "user_metadata": "forgeviz cell 6"},
    ]
    segment_a = {
        "device": 0, "address": A, "total_size": 20 * MiB, "stream": 0, "segment_type": "large",
        "segment_pool_id": (0, 0), "allocated_size": 12 * MiB, "active_size": 12 * MiB,
        "blocks": [
            {"size": 8 * MiB, "requested_size": 8 * MiB, "address": A, "state": "active_allocated", "frames": []},
            {"size": 4 * MiB, "requested_size": 4 * MiB, "address": A + 8 * MiB, "state": "inactive", "frames": []},
            {"size": 4 * MiB, "requested_size": 4 * MiB, "address": A + 12 * MiB, "state": "active_allocated",
             "frames": []},
            {"size": 4 * MiB, "requested_size": 4 * MiB, "address": A + 16 * MiB, "state": "inactive", "frames": []},
        ],
    }
    return {"segments": [segment_a], "device_traces": [trace], "allocator_settings": {}}
