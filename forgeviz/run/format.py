"""The recorded-run format (version 1): what each rank writes, and the names of its files.

A run is a folder; each rank writes its own sub-folder ``rank<N>/`` (so ranks never share a file):

- ``meta.json``: the run's metadata (written when recording starts, rewritten when it ends; see
  :data:`META_KEYS`);
- ``grads.arrows``, ``graphs.arrows``, ``steps.arrows``, ``findings.arrows`` and, recorded with ``memory=True``,
  ``memory.arrows``: Arrow IPC *streams*, one record batch per segment, buffers compressed with zstd. A stream
  is append-only: a process killed mid-run leaves every segment before the one it was writing readable.
  pandas (``pyarrow.ipc.open_stream(f).read_pandas()``) and polars (``pl.read_ipc_stream``) read them directly.

This module imports pyarrow only (no torch): reading a run needs neither torch nor a kernel.
"""

from __future__ import annotations

import pyarrow as pa

from ..model.run import CUDA_MEMORY, FINDINGS, GRADS, GRAPHS, MEMORY, STEPS

COMPRESSION = "zstd"
SUFFIX = ".arrows"  # the Arrow IPC stream format's customary suffix

SCHEMAS: dict[str, pa.Schema] = {
    # One row per parameter (as the optimizer applied its gradient), per module (its parameters
    # together) and per Node (the gradient that arrived at it during backward: this rank's own, before
    # any all-reduce) of each recorded step.
    GRADS: pa.schema([
        ("step", pa.int64()),
        ("kind", pa.dictionary(pa.int8(), pa.string())),
        ("name", pa.string()),  # named_parameters name; module path; Node's torch name (AddmmBackward0)
        ("module", pa.string()),  # the owning module's path ("" the root); None where unknown
        ("norm", pa.float64()), ("min", pa.float64()), ("max", pa.float64()), ("mean", pa.float64()),
        ("numel", pa.int64()),
        # parameter rows: the sum of the gradient's bit patterns, folded (meta "fingerprint": "bit-sum";
        # recording.fingerprint), or in runs recorded before it, a CRC-32 of its bytes on the CPU (meta "crc32",
        # or none); equal for equal gradients, bit for bit. Made only to compare ranks: None in a run of one rank
        ("fingerprint", pa.uint32()),
        ("sharded", pa.bool_()),  # parameter rows: a DTensor shard (FSDP2): its local part, not compared
        ("graph", pa.int32()),  # node rows: the recorded graph (graphs stream) the Node belongs to
        ("node", pa.int32()),  # node rows: the Node's position in that graph's ``nodes``
    ]),
    # Each distinct autograd graph once: the graph view's ``graph`` trait as JSON (folded by module).
    GRAPHS: pa.schema([("graph", pa.int32()), ("step", pa.int64()), ("nodes", pa.int32()), ("json", pa.string())]),
    # One row per optimizer step: when it ended, and memory (bytes; None where not measured).
    STEPS: pa.schema([("step", pa.int64()), ("time", pa.float64()), ("live_bytes", pa.int64()),
                      ("peak_bytes", pa.int64())]),
    # What the doctor found on this rank while it recorded (rank_divergence is found across ranks, when read):
    # ``nonfinite-grad`` names the first Node whose gradients went NaN or infinite in a backward (parameter
    # None), or the first parameter whose applied gradient is not finite at a step (node None).
    FINDINGS: pa.schema([("step", pa.int64()), ("kind", pa.string()), ("parameter", pa.string()),
                         ("node", pa.string()), ("module", pa.string()), ("message", pa.string())]),
    # The memory timeline (``record(memory=True)``): one row per event of the CPU ledger, as the memory view's
    # columns (forgeviz/model/memory.py EVENT_COLUMNS), its strings dictionary-encoded. ``step``: the optimizer
    # step under way (0: storages that existed when recording began, seeded). Past half the budget a segment is
    # its outline (forgeviz/run/memory.py): stand-in storages (ids from STAND_IN) with the exact live bytes
    # per category at the highest point of each slice of time; the metadata says from which step.
    MEMORY: pa.schema([
        ("step", pa.int64()),
        ("time", pa.float32()),  # seconds since the memory trace began
        ("bytes", pa.int64()),
        ("storage", pa.uint32()),  # alloc, recategorizations and free of one storage share it
        ("node", pa.uint32()),  # the graph's Node id that saved it (an activation); None if none
        ("action", pa.dictionary(pa.int8(), pa.string())),  # alloc | free | recategorize
        ("category", pa.dictionary(pa.int8(), pa.string())),  # parameter, gradient, optimizer state, …
        ("op", pa.dictionary(pa.int32(), pa.string())),  # the op that made it (aten name); None if unknown
        ("module", pa.dictionary(pa.int32(), pa.string())),  # the module path whose forward made it
        ("cell", pa.uint16()),  # a notebook cell (0 in a script)
        ("line", pa.uint16()),  # the line of user code that made it (0 if unknown)
    ]),
    # A CUDA rank's caching-allocator history (``record(memory=True)`` once CUDA is in use): one row per entry of
    # ``torch.cuda.memory._snapshot()``'s ``device_traces`` (torch's own names and units), the entries taken since
    # the last segment. ``segments``: on each segment's last row, the snapshot's ``segments`` (and
    # ``allocator_settings``) as JSON, the state the history is anchored at; the reader parses the whole history
    # with the last one (forgeviz/_capture/cuda_memory.py parse_snapshot), as the notebook's CUDA timeline does.
    CUDA_MEMORY: pa.schema([
        ("step", pa.int64()),  # the optimizer step under way ("forgeviz step N" stamps; else the segment's)
        ("action", pa.dictionary(pa.int8(), pa.string())),  # alloc | free_requested | free_completed | segment_* | oom
        ("addr", pa.uint64()),  # None for an oom
        ("size", pa.int64()),  # bytes asked for (oom: requested)
        ("stream", pa.int64()),
        ("time_us", pa.int64()),  # the allocator's clock, microseconds
        ("device_free", pa.int64()),  # oom: what CUDA still had free; else None
        ("user_metadata", pa.dictionary(pa.int32(), pa.string())),  # _set_memory_metadata's string; None if none
        ("device", pa.int16()),
        ("segments", pa.string()),  # JSON, on a segment's last row only
    ]),
}

META_KEYS = (
    "format", "format_version", "forgeviz", "torch", "python", "device", "rank", "world_size", "command",
    "started", "grads", "budget_bytes", "memory",
    # written when recording ends (absent in a run that was killed):
    "finished", "steps", "segments", "bytes", "dropped_segments", "downsampled", "faults",
    # and only when they happened: the steps thinned while the writer was behind, and rows given up
    "writer_thinned", "dropped_steps", "terminated",
)
