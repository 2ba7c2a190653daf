"""A recorded run's memory stream (``record(memory=True)``): written a segment at a time from the CPU ledger's
events (:class:`MemorySegments`, on the writer's thread), read back as the memory view's own timeline
(:class:`RecordedMemory`, a source the memory widget draws like a tracker). numpy and pyarrow, no torch.

Past half the run's size budget each segment is written as its *outline* (``model.memory_outline.downsample``,
as a saved memory view is): the storages alive before it become stand-ins, one per category, and the segment
becomes a few points in time, at each the exact live bytes per category at the highest total in its slice of
time (the peak kept). Stand-ins have ids from :data:`STAND_IN` and no op, module or line.
"""

from __future__ import annotations

import json
import re
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..model import memory as m
from ..model.memory_outline import _arrays, downsample
from ..model.run import CUDA_MEMORY, MEMORY
from .format import SCHEMAS

STAND_IN = 0xF0000000  # the first storage id of the outline's stand-ins (the ledger's ids count from 0)
OUTLINE_EVENTS = 2048  # a segment's events at most once past half the budget...
OVER_BUDGET_EVENTS = 64  # ...and past the budget (memory goes on, coarser, as steps do)
_STEP_RE = re.compile(r"forgeviz step (\d+)")  # the recorder's _set_memory_metadata stamp (cuda_memory.STEP_METADATA)
_PREFIX = 0xFFFFFF00  # the storage ids of the state before a segment, inside downsample only


def step_of(first: int, count: int, bounds: list, current: int) -> np.ndarray:
    """The optimizer step of each event ``first … first + count - 1`` (absolute event numbers): ``bounds`` are
    ``(end, step)``, the events before ``end`` belong to ``step`` (in order); later ones to ``current``.

    >>> step_of(2, 5, [(3, 0), (5, 1)], 2).tolist()
    [0, 1, 1, 2, 2]
    """
    ends = np.array([b[0] for b in bounds] + [np.iinfo(np.int64).max], dtype=np.int64)
    steps = np.array([b[1] for b in bounds] + [current], dtype=np.int64)
    return steps[np.searchsorted(ends, np.arange(first, first + count), side="right")]


def _dictionary(indices: np.ndarray, table: list, none: int, index_type) -> pa.DictionaryArray:
    """Indices into ``table`` (``none`` for a missing one) as a dictionary-encoded column."""
    missing = indices == none
    safe = np.where(missing, 0, indices).astype(np.int64)
    return pa.DictionaryArray.from_arrays(pa.array(safe, index_type, mask=missing),
                                          pa.array(table if table else [""], pa.string()))


class MemorySegments:
    """Turns the recorder's memory payloads into the memory stream's record batches, thinning past the budget.

    A payload: ``columns`` (the ledger's column bytes), ``first`` (the absolute number of the first event),
    ``bounds`` and ``current`` (see :func:`step_of`), ``ops`` and ``modules`` (the ledger's string tables).

    >>> seg = MemorySegments(); e = {n: np.zeros(2, k) for n, k in m.EVENT_COLUMNS}
    >>> e["bytes"][:] = 8; e["action"][:] = [m.ALLOC, m.FREE]; e["op"][:] = m.NO_SMALL; e["module"][:] = m.NO_SMALL
    >>> b = seg.batch({"columns": {n: v.tobytes() for n, v in e.items()}, "first": 0, "bounds": [],
    ...                "current": 1, "ops": [], "modules": []}, used=0, budget=100)
    >>> b.column("action").to_pylist(), b.column("bytes").to_pylist(), seg.alive
    (['alloc', 'free'], [8, 8], {})
    """

    def __init__(self) -> None:
        self.alive: dict[int, list] = {}  # storage → [bytes, category] of what the stream holds alive
        self.thinned: list[list[int]] = []  # [from step, events per segment at most]
        self._next = STAND_IN

    def batch(self, payload: dict, used: int, budget: int) -> pa.RecordBatch:
        a = _arrays(payload["columns"])
        n = len(a["time"])
        steps = step_of(payload["first"], n, payload["bounds"], payload["current"])
        limit = 0 if used < budget / 2 and not self.thinned else (OUTLINE_EVENTS if used < budget
                                                                   else OVER_BUDGET_EVENTS)
        if limit and (not self.thinned or self.thinned[-1][1] != limit):
            self.thinned.append([int(steps[0]) if n else payload["current"], limit])
        if limit:
            a, steps = self._outline(a, steps, limit)
        self._replay(a)
        schema = SCHEMAS[MEMORY]
        columns = {
            "step": pa.array(steps, pa.int64()), "time": pa.array(a["time"], pa.float32()),
            "bytes": pa.array(a["bytes"].astype(np.int64), pa.int64()),
            "storage": pa.array(a["storage"], pa.uint32()),
            "node": pa.array(a["node"], pa.uint32(), mask=a["node"] == m.NO_ID),
            "action": _dictionary(a["action"], m.ACTIONS, -1, pa.int8()),
            "category": _dictionary(np.minimum(a["category"], len(m.CATEGORIES) - 1), m.CATEGORIES, -1, pa.int8()),
            "op": _dictionary(a["op"], payload["ops"], m.NO_SMALL, pa.int32()),
            "module": _dictionary(a["module"], payload["modules"], m.NO_SMALL, pa.int32()),
            "cell": pa.array(a["cell"], pa.uint16()), "line": pa.array(a["line"], pa.uint16()),
        }
        return pa.record_batch([columns[f.name] for f in schema], schema=schema)

    def _replay(self, a: dict) -> None:
        """Follow what the stream holds alive (an outline frees it and starts from stand-ins)."""
        alive = self.alive
        for sid, b, action, cat in zip(a["storage"].tolist(), a["bytes"].tolist(), a["action"].tolist(),
                                       a["category"].tolist()):
            if action == m.FREE:
                alive.pop(sid, None)
            elif action == m.ALLOC or sid in alive:
                alive[sid] = [b, cat]

    def _outline(self, a: dict, steps: np.ndarray, limit: int) -> tuple[dict, np.ndarray]:
        """The segment as frees of what was alive, then downsample()'s outline of the state before it plus
        the segment (its stand-ins renumbered from ``self._next``)."""
        n = len(a["time"])
        t0 = float(a["time"][0]) if n else 0.0
        totals = np.zeros(len(m.CATEGORIES))
        for b, cat in self.alive.values():
            totals[min(cat, len(totals) - 1)] += b
        before = [c for c in range(len(totals)) if totals[c] > 0]
        prefix = {"time": [t0] * len(before), "bytes": totals[before].tolist(),
                  "storage": [_PREFIX + c for c in before], "node": [m.NO_ID] * len(before),
                  "op": [m.NO_SMALL] * len(before), "module": [m.NO_SMALL] * len(before),
                  "cell": [a["cell"][0] if n else 0] * len(before), "line": [0] * len(before),
                  "action": [m.ALLOC] * len(before), "category": before}
        kinds = dict(m.EVENT_COLUMNS)
        joined = {name: np.concatenate([np.asarray(prefix[name], dtype=a[name].dtype), a[name]]).tobytes()
                  for name in kinds}
        out, index, _ = downsample(joined, max(limit - len(self.alive), 4))
        o = _arrays(out)
        storage = o["storage"].astype(np.int64) + self._next
        self._next = int(storage.max()) + 1 if len(storage) else self._next
        o = {**o, "storage": storage.astype(np.uint32)}
        ostep = steps[np.clip(index - len(before), 0, max(n - 1, 0))] if n else np.zeros(len(index), np.int64)
        # first the frees of everything the stream held alive: the stand-ins carry those bytes from here
        gone = list(self.alive.items())
        frees = {"time": np.full(len(gone), t0, np.float32),
                 "bytes": np.array([g[1][0] for g in gone], np.float64),
                 "storage": np.array([g[0] for g in gone], np.uint32), "node": np.full(len(gone), m.NO_ID, np.uint32),
                 "op": np.full(len(gone), m.NO_SMALL, np.uint16), "module": np.full(len(gone), m.NO_SMALL, np.uint16),
                 "cell": np.zeros(len(gone), np.uint16), "line": np.zeros(len(gone), np.uint16),
                 "action": np.full(len(gone), m.FREE, np.uint8),
                 "category": np.array([g[1][1] for g in gone], np.uint8)}
        self.alive = {}
        merged = {name: np.concatenate([frees[name].astype(o[name].dtype), o[name]]) for name in kinds}
        first_step = steps[0] if n else 0
        return merged, np.concatenate([np.full(len(gone), first_step, np.int64), ostep])


class RecordedMemory:
    """One rank's recorded memory stream, served to the memory view as a tracker serves its events.

    >>> src = RecordedMemory(SCHEMAS[MEMORY].empty_table(), {"device": "cpu"})
    >>> src.count, src.timeline().peak_bytes
    (0, 0)
    """

    dropped = 0  # nothing is merged after the fact: the file is what it is

    def __init__(self, table: pa.Table, meta: dict, message: Optional[str] = None) -> None:
        self.meta = meta
        self.message = message
        self.steps = table.column("step").to_numpy()
        self.ops, op = _encode(table.column("op"))
        self.modules, module = _encode(table.column("module"))
        node = pc.fill_null(table.column("node"), m.NO_ID)
        self._columns = {
            "time": table.column("time").to_numpy().astype("<f4"),
            "bytes": table.column("bytes").to_numpy().astype("<f8"),
            "storage": table.column("storage").to_numpy().astype("<u4"),
            "node": node.to_numpy().astype("<u4"), "op": op, "module": module,
            "cell": table.column("cell").to_numpy().astype("<u2"),
            "line": table.column("line").to_numpy().astype("<u2"),
            "action": _names(table.column("action"), m.ACTIONS),
            "category": _names(table.column("category"), m.CATEGORIES),
        }
        signed = np.where(self._columns["action"] == m.ALLOC, 1.0,
                          np.where(self._columns["action"] == m.FREE, -1.0, 0.0)) * self._columns["bytes"]
        self.live = np.cumsum(signed)  # live bytes after each event

    @property
    def count(self) -> int:
        return len(self.steps)

    def columns(self, start: int = 0, end: Optional[int] = None) -> dict[str, bytes]:
        return {name: self._columns[name][start:end].tobytes() for name, _ in m.EVENT_COLUMNS}

    def publish(self, count: int) -> None:
        """Nothing to do: a recorded stream never changes."""

    def peak_bytes(self) -> int:
        return int(self.live.max()) if self.count else 0

    def live_bytes(self) -> int:
        return int(self.live[-1]) if self.count else 0

    def timeline(self, device: Optional[str] = None, message: Optional[str] = None) -> m.MemoryTimeline:
        peak = int(np.argmax(self.live)) if self.count else -1
        recorded = self.meta.get("memory") or {}
        return m.MemoryTimeline(  # (the ledger's events are the CPU's, on a rank that trained on CUDA too)
            1, device or "cpu", self.count, 0, self.count, list(m.CATEGORIES),
            list(self.ops), list(self.modules), [], self.peak_bytes(),
            float(self._columns["time"][peak]) if peak >= 0 else 0.0, self.live_bytes(),
            int(recorded.get("baseline_bytes", 0)), message or self.message)

    def detail(self, sid: int) -> m.StorageDetail:
        hits = np.flatnonzero(self._columns["storage"] == sid)
        if not len(hits):
            raise KeyError(f"no storage {sid} in this recorded timeline")
        c = {name: col[hits[-1]] for name, col in self._columns.items()}
        known = lambda table, i: table[i] if i != m.NO_SMALL and i < len(table) else None  # noqa: E731
        return m.StorageDetail(sid, int(c["bytes"]), "?", [], m.CATEGORIES[int(c["category"])],
                               known(self.ops, int(c["op"])), known(self.modules, int(c["module"])),
                               int(c["cell"]) or None, int(c["line"]) or None, None,
                               None if c["node"] == m.NO_ID else int(c["node"]), None, None, int(c["action"]) != m.FREE)


def _encode(column: pa.ChunkedArray) -> tuple[list[str], np.ndarray]:
    """A dictionary column whose segments each have their own dictionary, as one table and uint16 indices
    (``NO_SMALL`` for None)."""
    encoded = pc.dictionary_encode(column.cast(pa.string())).combine_chunks() if len(column) else None
    if encoded is None:
        return [], np.zeros(0, "<u2")
    indices = pc.fill_null(encoded.indices, m.NO_SMALL).to_numpy(zero_copy_only=False)
    return encoded.dictionary.to_pylist(), np.minimum(indices, m.NO_SMALL).astype("<u2")


def _names(column: pa.ChunkedArray, names: list[str]) -> np.ndarray:
    """A dictionary column of ``names`` as their indices (u8)."""
    found = pc.index_in(column.cast(pa.string()), value_set=pa.array(names))
    return pc.fill_null(found, len(names) - 1).to_numpy(zero_copy_only=False).astype("u1")


_SEGMENT_KEYS = ("device", "address", "total_size", "allocated_size", "segment_type", "stream")
_BLOCK_KEYS = ("address", "size", "state")


def cuda_batch(payload: dict) -> pa.RecordBatch:
    """One segment of the CUDA history stream from a recorder's payload: ``snapshot`` (a
    ``torch.cuda.memory._snapshot()`` dict holding the entries since the last segment), ``device`` and ``step``
    (the step under way, for entries with no ``forgeviz step N`` stamp). Frames are not kept (a script's
    recording takes none); the segments keep what the parser reads.

    >>> b = cuda_batch({"snapshot": {"segments": [], "device_traces": [[{"action": "alloc", "addr": 8, "size": 4,
    ...     "stream": 0, "time_us": 5, "user_metadata": "forgeviz step 3"}]]}, "device": 0, "step": 1})
    >>> b.column("step").to_pylist(), b.column("action").to_pylist(), b.column("segments").to_pylist()
    ([3], ['alloc'], ['{"segments": [], "allocator_settings": {}}'])
    """
    snapshot, device = payload["snapshot"], payload["device"]
    entries = snapshot["device_traces"][device] if device < len(snapshot["device_traces"]) else []
    step, steps = payload["step"], []
    for e in entries:  # a stamp holds until the next one
        found = _STEP_RE.search(str(e.get("user_metadata") or ""))
        steps.append(int(found.group(1)) if found else step)
    segments = [{**{k: s[k] for k in _SEGMENT_KEYS if k in s},
                 "blocks": [{k: b[k] for k in _BLOCK_KEYS if k in b} for b in s.get("blocks", [])]}
                for s in snapshot["segments"] if s.get("device", device) == device]
    anchor = json.dumps({"segments": segments, "allocator_settings": snapshot.get("allocator_settings") or {}},
                        default=str)
    n = len(entries)
    columns = {
        "step": pa.array(steps, pa.int64()),
        "action": pa.array([e.get("action") for e in entries], pa.string()).dictionary_encode(),
        "addr": pa.array([e.get("addr") for e in entries], pa.uint64()),
        "size": pa.array([e.get("size", 0) for e in entries], pa.int64()),
        "stream": pa.array([e.get("stream", 0) for e in entries], pa.int64()),
        "time_us": pa.array([e.get("time_us", 0) for e in entries], pa.int64()),
        "device_free": pa.array([e.get("device_free") for e in entries], pa.int64()),
        "user_metadata": pa.array([e.get("user_metadata") or None for e in entries], pa.string()).dictionary_encode(),
        "device": pa.array([device] * n, pa.int16()),
        "segments": pa.array([None] * (n - 1) + [anchor] if n else [], pa.string()),
    }
    schema = SCHEMAS[CUDA_MEMORY]
    return pa.record_batch([columns[f.name].cast(f.type) for f in schema], schema=schema)


def cuda_snapshot_of(table: pa.Table) -> Optional[tuple[dict, int]]:
    """The recorded CUDA history as one ``_snapshot()`` dict (every entry, anchored at the last segment's
    state) and its device; None when the table is empty. What ``parse_snapshot`` reads, exactly as if one
    snapshot had been taken at the last segment.

    >>> b = cuda_batch({"snapshot": {"segments": [], "device_traces": [[{"action": "alloc", "addr": 8, "size": 4,
    ...     "stream": 0, "time_us": 5}]]}, "device": 0, "step": 1})
    >>> snapshot, device = cuda_snapshot_of(pa.Table.from_batches([b]))
    >>> snapshot["device_traces"][0][0]["addr"], device
    (8, 0)
    """
    if not table.num_rows:
        return None
    rows = table.drop_columns(["segments", "step"]).to_pylist()
    anchors = [s for s in table.column("segments").to_pylist() if s is not None]
    anchor = json.loads(anchors[-1]) if anchors else {"segments": [], "allocator_settings": {}}
    device = int(rows[-1]["device"])
    entries = []
    for row in rows:
        e = {k: v for k, v in row.items() if v is not None and k != "device"}
        e["frames"] = []
        entries.append(e)
    traces: list[list] = [[] for _ in range(device)] + [entries]
    return {"segments": anchor["segments"], "device_traces": traces,
            "allocator_settings": anchor["allocator_settings"]}, device
