"""CUDA memory from the caching allocator's own history: allocated vs reserved, segments, OOMs.

With ``torch.cuda.memory._record_memory_history`` on, the allocator logs every action it takes; a
snapshot (``torch.cuda.memory._snapshot()``) returns that log (``device_traces``) and the segments as
they are now. forgeviz reads both and guesses nothing:

- allocated: ``alloc`` / ``free_completed`` entries; reserved: ``segment_alloc`` / ``segment_free``
  (and ``segment_map`` / ``segment_unmap`` with expandable segments);
- what ``empty_cache()`` released: the segment frees it caused;
- the state at an OOM: the ``oom`` entry (requested bytes, what CUDA still had free), plus a snapshot
  taken by an OOM observer at that moment;
- the cell: ``_set_memory_metadata`` stamps each entry with the running cell (``user_metadata``).

The history starts mid-way (blocks allocated before it have no entry), so the series are anchored at
the end, where the snapshot's segments give the exact allocated and reserved bytes.
"""

from __future__ import annotations

import array
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..model import memory as m
from .ledger import TYPECODES
from .source import cell_number, source_line

CELL_METADATA = "forgeviz cell {}"
STEP_METADATA = "forgeviz step {}"  # a recording's stamp (forgeviz/run/memory.py reads it back)
_CELL_RE = re.compile(r"forgeviz cell (\d+)")


@dataclass
class CudaSegment:
    """One cudaMalloc'd segment, and how its blocks use it."""

    address: int
    total_size: int
    allocated_size: int
    segment_type: str  # "small" or "large"
    stream: int
    blocks: int
    free_blocks: int
    largest_free: int  # the biggest single allocation this segment could still serve

    @property
    def fragmentation(self) -> float:
        """1 - largest free block / free bytes: 0 when the free memory is one block."""
        free = self.total_size - self.allocated_size
        return 0.0 if free <= 0 else 1.0 - self.largest_free / free


@dataclass
class CudaOom:
    """An allocation the caching allocator could not serve."""

    time: float
    requested: int
    device_free: int  # what CUDA itself still reported free
    allocated: int  # allocated and reserved bytes at that moment, from the history
    reserved: int
    cell: Optional[int]


@dataclass
class CudaTrace:
    """A CUDA history as forgeviz's event columns, plus what only CUDA has (reserved, segments, OOMs)."""

    device: int
    columns: dict[str, list]  # EVENT_COLUMNS names → values, one entry per alloc/free
    times: list[float] = field(default_factory=list)  # seconds since the first entry, one per entry
    allocated: list[int] = field(default_factory=list)  # bytes allocated after each entry
    reserved: list[int] = field(default_factory=list)  # bytes reserved after each entry
    segments: list[CudaSegment] = field(default_factory=list)  # at the snapshot
    ooms: list[CudaOom] = field(default_factory=list)
    released: list[tuple[float, int]] = field(default_factory=list)  # (time, bytes) of each segment_free
    files: dict[tuple[int, int], str] = field(default_factory=dict)  # (cell, line) → filename
    cells: list[tuple[int, float, int]] = field(default_factory=list)  # (cell, time, first event index)

    @property
    def peak_allocated(self) -> int:
        return max(self.allocated, default=0)

    @property
    def peak_reserved(self) -> int:
        return max(self.reserved, default=0)

    @property
    def reserved_unused(self) -> int:
        """Cached by the allocator but holding no tensor: what ``empty_cache()`` could give back."""
        return sum(s.total_size - s.allocated_size for s in self.segments)


def parse_snapshot(snapshot: dict, device: int = 0, categories: Optional[dict[int, int]] = None) -> CudaTrace:
    """Read a ``torch.cuda.memory._snapshot()`` dict into a :class:`CudaTrace`.

    ``categories`` maps block addresses (a tensor's ``untyped_storage().data_ptr()``) to a category
    index, for the storages forgeviz's hooks know now (parameters, gradients, optimizer state); it
    names the allocation still live at that address at the end. Any other allocation is a temporary.

    >>> trace = parse_snapshot({"segments": [], "device_traces": [[]]})
    >>> trace.peak_allocated, trace.reserved_unused
    (0, 0)
    """
    if not isinstance(snapshot, dict) or "segments" not in snapshot or "device_traces" not in snapshot:
        got = sorted(snapshot) if isinstance(snapshot, dict) else type(snapshot).__name__
        raise ValueError(f"expected a torch.cuda.memory._snapshot() dict with 'segments' and 'device_traces', "
                         f"got {got}")
    traces = snapshot["device_traces"]
    if not 0 <= device < len(traces):
        raise ValueError(f"device {device}: the snapshot has traces for devices 0..{len(traces) - 1}")
    categories = categories or {}
    segments = [_segment(s) for s in snapshot["segments"] if s.get("device", device) == device]
    entries = traces[device]

    # Anchor: the segments are the state at the end; walk the deltas back to the state at the start.
    blocks = _block_bytes(entries, snapshot["segments"], device, snapshot.get("allocator_settings") or {})
    end_allocated = sum(s.allocated_size for s in segments)
    end_reserved = sum(s.total_size for s in segments)
    allocated = end_allocated - sum(blocks)
    reserved = end_reserved - sum(_reserved_delta(e) for e in entries)

    t0 = entries[0].get("time_us", 0) if entries else 0
    cols: dict[str, list] = {name: [] for name, _ in m.EVENT_COLUMNS}
    out = CudaTrace(device, cols, segments=segments)
    live: dict[int, tuple[int, int, int, int]] = {}  # addr → (sid, category, cell, line)
    alloc_index: dict[int, int] = {}  # sid → index of its alloc event
    next_sid = 0
    cell = None
    for e, delta in zip(entries, blocks):
        action = e.get("action")
        when = (e.get("time_us", t0) - t0) / 1e6
        cell = _cell_of(e.get("user_metadata")) or cell
        if cell is not None and (not out.cells or out.cells[-1][0] != cell):
            out.cells.append((cell, when, len(cols["time"])))
        allocated += delta
        reserved += _reserved_delta(e)
        if action == "alloc":
            line_cell, line = _user_frame(e.get("frames") or [], out.files)
            rec = (next_sid, m.TEMPORARY, line_cell or cell or 0, line)
            next_sid += 1
            live[e["addr"]] = rec
            _append(cols, when, delta, rec, m.ALLOC)
            alloc_index[rec[0]] = len(cols["time"]) - 1
        elif delta < 0 and e.get("addr") in live:
            _append(cols, when, -delta, live.pop(e["addr"]), m.FREE)
        elif action == "segment_free":
            out.released.append((when, e["size"]))
        elif action == "oom":
            out.ooms.append(CudaOom(when, e.get("size", 0), e.get("device_free", 0), allocated, reserved, cell))
        out.times.append(when)
        out.allocated.append(allocated)
        out.reserved.append(reserved)
    for addr, (sid, _, _, _) in live.items():  # still live at the snapshot: the hooks' categories hold
        if addr in categories:
            cols["category"][alloc_index[sid]] = categories[addr]
    return out


def _segment(s: dict) -> CudaSegment:
    free = [b["size"] for b in s.get("blocks", []) if b.get("state") == "inactive"]
    return CudaSegment(s["address"], s["total_size"], s.get("allocated_size", 0), s.get("segment_type", "?"),
                       s.get("stream", 0), len(s.get("blocks", [])), len(free), max(free, default=0))


MIN_BLOCK = 512  # the caching allocator's smallest block, and what every block size is a multiple of
_ROUNDUP_START = 20  # log2 of 1 MiB: where roundup_power2_divisions' first interval starts


def _block_bytes(entries: list, raw_segments: list, device: int, settings: dict) -> list[int]:
    """The change in allocated bytes each entry makes, as ``torch.cuda.memory_allocated()`` counts them.

    A trace entry carries the size the caller asked for (1,280 bytes); torch counts the block that
    served it (1,536: rounded up to 512 bytes, or to ``roundup_power2_divisions``). A block still
    live at the snapshot has its exact size there; any other block's is rounded as the allocator
    rounds. (A large block the allocator did not split may have been bigger still: such a freed block
    is undercounted by less than 1 MiB.) A block stops counting at ``free_requested``, as torch's
    counter does; ``free_completed`` (the stream's events done) counts only when no request was seen.

    >>> _block_bytes([{"action": "alloc", "addr": 1, "size": 4}, {"action": "free_requested", "addr": 1}], [], 0, {})
    [512, -512]
    """
    live_blocks = {b["address"]: b["size"] for s in raw_segments if s.get("device", device) == device
                   for b in s.get("blocks", []) if b.get("state") == "active_allocated" and "address" in b}
    divisions = settings.get("roundup_power2_divisions") or {}
    last_alloc = {e.get("addr"): i for i, e in enumerate(entries) if e.get("action") == "alloc"}
    held: dict[int, int] = {}  # addr → bytes of its block, from its alloc to its free
    out = []
    for i, e in enumerate(entries):
        action, addr = e.get("action"), e.get("addr")
        if action == "alloc":
            exact = live_blocks.get(addr) if last_alloc.get(addr) == i else None
            held[addr] = exact or _round_size(e.get("size", 0), divisions)
            out.append(held[addr])
        elif action in ("free_requested", "free_completed") and addr in held:
            out.append(-held.pop(addr))
        elif action == "free_requested":  # its alloc is older than the history: torch rounded it too
            out.append(-_round_size(e.get("size", 0), divisions))
            held[addr] = 0  # its free_completed, to come, counts nothing more
        else:
            out.append(0)
    return out


def _round_size(size: int, divisions: dict) -> int:
    """The block the caching allocator gives a request of ``size`` bytes (its ``round_size``).

    >>> _round_size(1280, {}), _round_size(4, {}), _round_size(3 * 2**20 + 1, {"2": 4})
    (1536, 512, 3670016)
    """
    if size < MIN_BLOCK:
        return MIN_BLOCK
    interval = min(max(size.bit_length() - 1 - _ROUNDUP_START, 0), 15)
    split = int(divisions.get(str(1 << interval), 0) or 0)
    if split > 1 and size > MIN_BLOCK * split and size & (size - 1):
        floor = 1 << (size.bit_length() - 1)
        step = floor >> (split.bit_length() - 1)
        if step == 0:
            return floor << 1
        rounded = size & ~(step - 1)
        return size if rounded == size else rounded + step
    return -(-size // MIN_BLOCK) * MIN_BLOCK


def _reserved_delta(e: dict) -> int:
    action = e.get("action")
    if action in ("segment_alloc", "segment_map"):
        return e.get("size", 0)
    if action in ("segment_free", "segment_unmap"):
        return -e.get("size", 0)
    return 0


def _cell_of(metadata: Any) -> Optional[int]:
    if not metadata:
        return None
    match = _CELL_RE.search(str(metadata))
    return int(match.group(1)) if match else None


def _user_frame(frames: list, files: dict) -> tuple[Optional[int], int]:
    """(cell, line) of the first frame in a notebook cell (frames are innermost first)."""
    for frame in frames:
        cell = cell_number(frame.get("filename"))
        if cell is not None:
            line = min(int(frame.get("line", 0)), m.NO_SMALL)
            files[(cell, line)] = frame["filename"]
            return cell, line
    return None, 0


def _append(cols: dict, when: float, size: int, rec: tuple, action: int) -> None:
    sid, category, cell, line = rec
    for name, value in (("time", when), ("bytes", float(size)), ("storage", sid), ("node", m.NO_ID),
                        ("op", m.NO_SMALL), ("module", m.NO_SMALL), ("cell", min(cell, m.NO_SMALL)),
                        ("line", line), ("action", action), ("category", category)):
        cols[name].append(value)


def check_cuda_device(device: str) -> Optional[int]:
    """The CUDA device index ``device`` names (None for "cpu" or the current device), or a ValueError
    saying what is expected, or a RuntimeError when torch has no CUDA device.

    >>> check_cuda_device("cpu") is None
    True
    """
    if device == "cpu":
        return None
    if not isinstance(device, str) or not re.fullmatch(r"cuda(:\d+)?", device):
        raise ValueError(f"memory_trace(device=...): expected 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("CUDA memory history needs a CUDA device, and torch.cuda.is_available() is False "
                           f"(torch {torch.__version__}); CPU memory is tracked without it")
    return int(device.split(":")[1]) if ":" in device else None


class CudaHistory:
    """Records one CUDA device's allocator history, and snapshots it on demand and at an OOM.

    Raises ``RuntimeError`` saying so when torch has no CUDA device.

    >>> history = CudaHistory()  # doctest: +SKIP
    >>> history.start(); x = torch.ones(1024, device="cuda"); history.stop()  # doctest: +SKIP
    >>> history.trace().peak_allocated >= 4096  # doctest: +SKIP
    True
    """

    def __init__(self, device: Optional[int] = None, max_entries: int = 1_000_000,
                 known: Optional[Callable[[], dict[int, int]]] = None, context: Optional[str] = "alloc",
                 oom_snapshots: bool = True) -> None:
        """``context``: torch's ``_record_memory_history(context=...)``: "alloc" keeps each allocation's
        Python stack (the notebook maps it to a cell and line), None keeps none (cheaper: a recording).
        ``oom_snapshots``: snapshot the whole state at an OOM too (the trace's ``oom`` entry is kept either way)."""
        import torch

        check_cuda_device("cuda")
        self.device = torch.cuda.current_device() if device is None else device
        self.max_entries = max_entries
        self.context = context
        self.oom_snapshots_wanted = oom_snapshots
        self._known = known or (lambda: {})
        self.oom_snapshots: list[dict] = []
        self._recording = False
        self._observer_attached = False

    def start(self) -> None:
        import torch

        torch.cuda.memory._record_memory_history(enabled="all", context=self.context, stacks="python",
                                                 max_entries=self.max_entries, device=self.device)
        if self.oom_snapshots_wanted and not self._observer_attached:
            torch._C._cuda_attach_out_of_memory_observer(self._on_oom)
            self._observer_attached = True
        self._recording = True

    def stop(self) -> None:
        import torch

        if self._recording:
            torch.cuda.memory._record_memory_history(enabled=None, device=self.device)
            self._recording = False

    def take(self) -> dict:
        """A snapshot of the entries since the last ``take()`` (or ``start()``), then the history cleared, so
        each take costs what happened since the last one, not the whole ring. A host call, no device sync:
        the allocator's lock is held while its entries are copied. Entries another thread adds between
        the snapshot and the clear are lost (a recording takes at a step's end, where the training
        thread allocates nothing)."""
        import torch

        snapshot = torch.cuda.memory._snapshot(self.device)
        torch.cuda.memory._record_memory_history(enabled="all", context=self.context, stacks="python",
                                                 max_entries=self.max_entries, device=self.device,
                                                 clear_history=True)
        return snapshot

    def mark_step(self, step: int) -> None:
        """Stamp the entries that follow with a recording's optimizer step (``_set_memory_metadata``)."""
        import torch

        torch.cuda.memory._set_memory_metadata(STEP_METADATA.format(step))

    def mark_cell(self, cell: int) -> None:
        """Stamp the entries that follow with the cell (``_set_memory_metadata``)."""
        import torch

        torch.cuda.memory._set_memory_metadata(CELL_METADATA.format(cell))

    def _on_oom(self, device, alloc, device_allocated, device_free) -> None:
        # Runs inside the failing allocation: keep the state, raise nothing (torch raises the OOM).
        try:
            import torch

            self.oom_snapshots.append(torch.cuda.memory._snapshot(device))
        except Exception:  # noqa: BLE001 - the user's OutOfMemoryError is what they must see
            pass

    def trace(self) -> CudaTrace:
        """Snapshot now and read it, with the categories forgeviz's hooks know."""
        import torch

        return parse_snapshot(torch.cuda.memory._snapshot(self.device), self.device, self._known())

    @staticmethod
    def peak(device: Optional[int] = None, reset: bool = False) -> int:
        """``torch.cuda.max_memory_allocated``; ``reset=True`` starts a new peak from now."""
        import torch

        value = torch.cuda.max_memory_allocated(device)
        if reset:
            torch.cuda.reset_peak_memory_stats(device)
        return value


def allocated_and_peak(device: Optional[int] = None) -> tuple[int, int]:
    """``torch.cuda.memory_allocated(device)`` and ``max_memory_allocated(device)`` (0 and 0 before CUDA is in
    use) from one read of the allocator's statistics as a nested dict: each of those two flattens and sorts all
    of them (about 160) in Python, which a recording paid twice at every optimizer step.

    >>> live, peak = allocated_and_peak(); live <= peak
    True
    """
    import torch

    stats = torch.cuda.memory_stats_as_nested_dict(device).get("allocated_bytes", {}).get("all", {})
    return stats.get("current", 0), stats.get("peak", 0)


def history_once_in_use(max_entries: int) -> Callable[[], Optional[CudaHistory]]:
    """For a recording: a function that starts and returns the current CUDA device's history (no stacks, no
    OOM snapshot) once this process has initialised CUDA, and returns None until then. It never initialises
    CUDA itself (a torchrun rank picks its device with ``torch.cuda.set_device`` first).

    >>> history_once_in_use(1024)() if not __import__("torch").cuda.is_initialized() else None
    """
    def started() -> Optional[CudaHistory]:
        import torch

        if not torch.cuda.is_initialized():
            return None
        history = CudaHistory(max_entries=max_entries, context=None, oom_snapshots=False)
        history.start()
        return history

    return started


class CudaTimelineSource:
    """A parsed CUDA history, served to the memory timeline view like a tracker serves CPU events.

    >>> source = CudaTimelineSource(parse_snapshot({"segments": [], "device_traces": [[]]}))
    >>> source.count, source.timeline().cuda.peak_reserved
    (0, 0)
    """

    MAX_RESERVED_POINTS = 4000
    dropped = 0

    def __init__(self, trace: CudaTrace, message: Optional[str] = None) -> None:
        self.message = message  # said when the view's own message is None (a recorded run says which)
        self._use(trace)

    def _use(self, trace: CudaTrace) -> None:
        self.trace = trace
        self._arrays = {name: array.array(TYPECODES[kind], trace.columns[name]) for name, kind in m.EVENT_COLUMNS}

    @property
    def count(self) -> int:
        return len(self.trace.columns["time"])

    def columns(self, start: int = 0, end: Optional[int] = None) -> dict[str, bytes]:
        return {name: col[start:end].tobytes() for name, col in self._arrays.items()}

    def publish(self, count: int) -> None:
        """Nothing to do: a parsed history never changes."""

    def peak_bytes(self) -> int:
        """Peak allocated bytes (what ``torch.cuda.max_memory_allocated`` counts)."""
        return self.trace.peak_allocated

    def timeline(self, device: str = "cuda", message: Optional[str] = None) -> m.MemoryTimeline:
        message = message or self.message
        t = self.trace
        peak_index = max(range(len(t.allocated)), key=t.allocated.__getitem__, default=-1)
        times, reserved = self._reserved_steps()
        state = m.CudaState(
            t.device, times, reserved, t.peak_reserved, t.reserved_unused, [[w, b] for w, b in t.released],
            [m.CudaOomMark(o.time, o.requested, o.device_free, o.allocated, o.reserved, o.cell) for o in t.ooms],
            [m.CudaSegmentSummary(hex(s.address), s.total_size, s.allocated_size, s.largest_free,
                                  round(s.fragmentation, 4), s.segment_type) for s in t.segments])
        cells = [m.CellMark(cell, when, index) for cell, when, index in t.cells]
        return m.MemoryTimeline(
            1, f"cuda:{t.device}", self.count, 0, self.count, list(m.CATEGORIES), [], [], cells,
            t.peak_allocated, t.times[peak_index] if peak_index >= 0 else 0.0,
            t.allocated[-1] if t.allocated else 0, t.allocated[0] if t.allocated else 0, message, state)

    def _reserved_steps(self) -> tuple[list[float], list[int]]:
        """Reserved bytes where they change (segment events are rare), thinned to the cap by keeping
        each bucket's largest value, so the peak is never lost."""
        t = self.trace
        times, values = [], []
        for when, value in zip(t.times, t.reserved):
            if not values or value != values[-1]:
                times.append(when)
                values.append(value)
        if len(values) > self.MAX_RESERVED_POINTS:
            step = -(-len(values) // self.MAX_RESERVED_POINTS)
            buckets = [range(i, min(i + step, len(values))) for i in range(0, len(values), step)]
            picks = [max(b, key=values.__getitem__) for b in buckets]
            times, values = [times[i] for i in picks], [values[i] for i in picks]
        return times, values

    def detail(self, sid: int) -> m.StorageDetail:
        cols = self.trace.columns
        for i in range(self.count - 1, -1, -1):
            if cols["storage"][i] == sid:
                alive = cols["action"][i] != m.FREE
                cell, line = cols["cell"][i] or None, cols["line"][i] or None
                filename = self.trace.files.get((cols["cell"][i], cols["line"][i]))
                return m.StorageDetail(sid, int(cols["bytes"][i]), "?", [], m.CATEGORIES[cols["category"][i]], None,
                                       None, cell, line, source_line(filename, line), None, None, None, alive)
        raise KeyError(f"no storage {sid} in this CUDA history")


class LiveCudaSource(CudaTimelineSource):
    """The kernel's CUDA history, snapshotted again each time the view refreshes (after each cell).

    Every refresh re-reads the whole history (the allocator's ring buffer may have dropped its
    oldest entries), so the view is told to start over: ``dropped`` moves on each new snapshot.
    """

    def __init__(self, history: CudaHistory) -> None:
        self.history = history
        self.dropped = 0
        super().__init__(history.trace())

    def timeline(self, device: str = "cuda", message: Optional[str] = None) -> m.MemoryTimeline:
        trace = self.history.trace()
        if trace.columns != self.trace.columns or trace.reserved != self.trace.reserved:
            self._use(trace)
            self.dropped += 1
        return super().timeline(device, message)
