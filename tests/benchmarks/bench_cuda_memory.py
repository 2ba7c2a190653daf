"""On a GPU: the CUDA history path's overhead on a real training step, and a small real snapshot fixture.

Run on a machine with CUDA: ``.venv/bin/python tests/benchmarks/bench_cuda_memory.py [--record]``.

- Prints the step time with history recording off / ``forgeviz.memory_trace(device="cuda")`` /
  ``torch.profiler(profile_memory=True)``, interleaved rounds, medians as ratios to "off".
- ``--record`` writes ``tests/fixtures/cuda_snapshot.pickle``: a few steps of a small MLP, a tensor
  freed and ``empty_cache()`` (a segment returned), and a caught OOM, recorded with the cell stamped
  through ``_set_memory_metadata``. ``tests/test_memory_cuda.py`` parses it whenever it exists.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import torch

from _bench import interleaved, mlp, train  # first: it puts this checkout on sys.path

import forgeviz
from forgeviz._capture.cuda_memory import CELL_METADATA

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cuda_snapshot.pickle"
ROUNDS, STEPS = 9, 20


def setup(width: int, batch: int):
    model, opt, x, y = mlp(width, batch, device="cuda")

    def loop():
        train(model, opt, x, y, STEPS)
        torch.cuda.synchronize()

    return model, opt, loop


def overhead(width: int, batch: int) -> dict[str, float]:
    _, _, loop = setup(width, batch)
    loop()

    def traced():
        with forgeviz.memory_trace(device="cuda"):
            loop()

    def profiled():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA], profile_memory=True):
            loop()

    variants = {"off": loop, "forgeviz memory_trace(device='cuda')": traced,
                "torch.profiler(profile_memory)": profiled}
    medians = interleaved(variants, ROUNDS)
    base = medians["off"]
    return {name: t / base for name, t in medians.items()} | {"off_ms_per_step": base / STEPS * 1e3}


def record() -> None:
    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=100_000)
    try:
        torch.cuda.memory._set_memory_metadata(CELL_METADATA.format(1))
        _, _, loop = setup(256, 32)
        torch.cuda.memory._set_memory_metadata(CELL_METADATA.format(2))
        loop()
        torch.cuda.memory._set_memory_metadata(CELL_METADATA.format(3))
        scratch = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")
        del scratch
        torch.cuda.empty_cache()
        torch.cuda.memory._set_memory_metadata(CELL_METADATA.format(4))
        try:
            torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError:
            pass
        snapshot = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_bytes(pickle.dumps(snapshot))
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size} bytes, {len(snapshot['device_traces'][0])} entries)")


if __name__ == "__main__":
    if not torch.cuda.is_available():
        sys.exit("bench_cuda_memory.py needs a CUDA device")
    if "--record" in sys.argv:
        record()
    print(torch.cuda.get_device_name())
    for width, batch in [(1024, 256), (256, 32)]:
        result = overhead(width, batch)
        print(f"MLP {width} wide, batch {batch}: off {result.pop('off_ms_per_step'):.2f} ms/step; "
              + ", ".join(f"{k} {v:.3f}x" for k, v in result.items()))
