"""The memory-timeline model: allocator events as binary columns, plus small JSON tables.

Events travel as little-endian typed arrays, one per column (``EVENT_COLUMNS``, 30 bytes an
event), never as JSON. Strings (ops, module paths) travel once, in tables the columns index.
``src/model/wire.ts`` is generated from these dataclasses; a test checks the column spec too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

# Event actions.
ALLOC, FREE, RECATEGORIZE = 0, 1, 2
ACTIONS = ["alloc", "free", "recategorize"]

# Categories, in the stacking order of the timeline (bottom first). Each comes from a public hook.
# A category is a role with a lifetime: a storage that a live Node saves is an activation, and goes
# back to its own category (temporary, other) when the graph frees it or dies; "other" stays last.
CATEGORIES = ["parameter", "buffer", "optimizer state", "gradient", "activation", "input", "temporary", "other"]
PARAMETER, BUFFER, OPTIMIZER_STATE, GRADIENT, ACTIVATION, INPUT, TEMPORARY, OTHER = range(len(CATEGORIES))
# Okabe–Ito per category (the views and the plotly export), and a pattern each, so that colour is
# never the only cue.
CATEGORY_COLORS = ["#0072B2", "#F0E442", "#CC79A7", "#D55E00", "#009E73", "#E69F00", "#56B4E9", "#999999"]
CATEGORY_PATTERNS = ["solid", "dashes", "diagonal", "dots", "backdiagonal", "horizontal", "vertical", "cross"]

NO_ID = 0xFFFFFFFF  # "none" in a u32 column
NO_SMALL = 0xFFFF  # "none" in a u16 column

# (name, numpy/TypedArray type): the order is the order of the message buffers.
EVENT_COLUMNS = [
    ("time", "float32"),  # seconds since the trace started
    ("bytes", "float64"),  # storage nbytes (exact up to 2**53)
    ("storage", "uint32"),  # forgeviz's storage id: an alloc, its recategorizations and its free share it
    ("node", "uint32"),  # autograd node id (the graph view's id) that saved it, NO_ID if none
    ("op", "uint16"),  # index into MemoryTimeline.ops, NO_SMALL if unknown
    ("module", "uint16"),  # index into MemoryTimeline.modules, NO_SMALL if none
    ("cell", "uint16"),  # notebook execution count, 0 if unknown
    ("line", "uint16"),  # line in that cell, 0 if unknown
    ("action", "uint8"),
    ("category", "uint8"),
]
BYTES_PER_EVENT = 30


@dataclass
class CellMark:
    """Where a notebook cell started on the timeline."""

    cell: int
    time: float
    index: int  # event index of its first event


@dataclass
class StorageDetail:
    """What is known about one tracked storage (fetched on hover, never shipped per event)."""

    storage: int
    bytes: int
    dtype: str
    shape: list[int]
    category: str
    op: Optional[str]
    module: Optional[str]
    cell: Optional[int]
    line: Optional[int]
    source: Optional[str]
    node: Optional[int]
    node_name: Optional[str]
    name: Optional[str]  # a notebook variable holding it, when one does
    alive: bool


@dataclass
class CudaOomMark:
    """An allocation the CUDA caching allocator could not serve, and the state at that moment."""

    time: float
    requested: int
    device_free: int  # what CUDA itself still reported free
    allocated: int
    reserved: int
    cell: Optional[int]


@dataclass
class CudaSegmentSummary:
    """One cudaMalloc'd segment at the snapshot: how much of it tensors use, and how scattered the rest is."""

    address: str  # hex
    total: int
    allocated: int
    largest_free: int
    fragmentation: float  # 1 - largest free block / free bytes
    segment_type: str


@dataclass
class CudaState:
    """What only the CUDA allocator knows: reserved bytes over time, releases, OOMs, segments."""

    device: int
    reserved_time: list[float]  # a step series: reserved_bytes[i] holds from reserved_time[i] on
    reserved_bytes: list[int]
    peak_reserved: int
    reserved_unused: int  # cached but holding no tensor: what empty_cache() could give back
    released: list[list[float]]  # [time, bytes] of each segment the allocator returned to CUDA
    ooms: list[CudaOomMark]
    segments: list[CudaSegmentSummary]


@dataclass
class MemoryTimeline:
    """The JSON half of a timeline; the events themselves travel as binary columns."""

    version: int
    device: str
    count: int  # events in the columns
    dropped: int  # older events merged away to stay within ``max_events``
    max_events: int
    categories: list[str]
    ops: list[str]
    modules: list[str]
    cells: list[CellMark]
    peak_bytes: int
    peak_time: float
    live_bytes: int
    baseline_bytes: int  # bytes that already existed when tracking started (seeded)
    message: Optional[str]
    cuda: Optional[CudaState] = None  # a CUDA allocator history's own view, when the timeline is one
    own_bytes: int = 0  # what forgeviz itself holds for this timeline and the graphs' gradient records


@dataclass
class DetailRequest:
    """Asks what one storage is: shape, dtype, category, op, cell and line."""

    type: Literal["detail"]
    request_id: int
    storage: int


@dataclass
class DetailReply:
    """The storage's details."""

    type: Literal["detail"]
    request_id: int
    detail: StorageDetail


@dataclass
class MemoryViewState:
    """What the memory view shows beyond its data: x axis, zoom and pinned storage (``save(state=...)``).

    ``x`` is ``"time"`` (seconds since the first event) or ``"index"`` (event numbers); ``range`` the
    ``[start, end]`` shown in those units, None for the whole timeline; ``pinned`` the storage whose
    details are pinned, or None.
    """

    x: Literal["time", "index"] = "time"
    range: Optional[list[float]] = None
    pinned: Optional[int] = None


WIRE_TYPES = [CellMark, StorageDetail, CudaOomMark, CudaSegmentSummary, CudaState, MemoryTimeline, DetailRequest,
              DetailReply, MemoryViewState]
# Constants the TypeScript side gets verbatim.
TS_CONSTANTS = ["ACTIONS", "CATEGORIES", "CATEGORY_COLORS", "CATEGORY_PATTERNS", "EVENT_COLUMNS", "BYTES_PER_EVENT",
                "NO_ID", "NO_SMALL"]


def category_series(time, nbytes, storage, action, category, max_points: int = 4000):
    """Live bytes per category after each event, sampled to at most ``max_points`` points.

    Returns ``(times, {category name: [bytes, ...]})``. The sampled points are exact totals
    (every event is counted; only the points drawn are thinned).

    >>> t, s = category_series([0, 1, 2], [8, 4, 8], [0, 1, 0], [ALLOC, ALLOC, FREE], [TEMPORARY] * 3)
    >>> t, s["temporary"]
    ([0.0, 1.0, 2.0], [8, 12, 4])
    """
    n = len(time)
    step = max(1, -(-n // max_points))
    totals = [0] * len(CATEGORIES)
    current: dict[int, int] = {}
    times: list[float] = []
    series = {name: [] for name in CATEGORIES}
    for i in range(n):
        sid, b, a, c = storage[i], int(nbytes[i]), action[i], category[i]
        if a == ALLOC:
            current[sid] = c
            totals[c] += b
        elif a == FREE:
            totals[current.pop(sid, c)] -= b
        else:
            totals[current.get(sid, c)] -= b
            current[sid] = c
            totals[c] += b
        if i % step == 0 or i == n - 1:
            times.append(float(time[i]))
            for k, name in enumerate(CATEGORIES):
                series[name].append(totals[k])
    return times, series
