"""The stride/view model: how tensors map onto their storage. Plain data, no torch.

These dataclasses are the ONE definition of the wire format of the stride view
(``src/model/wire.ts`` is generated from them by ``forgeviz.model.tsgen``).

Units: ``stride``, ``storage_offset`` and ``extent`` of a tensor count elements of *that tensor's*
dtype, as torch does. A storage strip counts elements of the strip's dtype (its first tensor's).
A tensor reads strip element ``(storage_offset + Σ iₖ·strideₖ) · element_size // strip.element_size``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterator, Literal, Optional, Sequence

# How many values one message carries at most: the first display and every later page.
MAX_WINDOW = 1024
# The initial window of a tensor's logical grid: the last two dims up to 16 each,
# leading dims up to 4 each, while the box stays within MAX_WINDOW.
GRID_INNER = 16
GRID_LEADING = 4
# The initial window of a storage strip.
STRIP_WINDOW = 256
# Address sets are compared exactly up to this many elements per tensor; beyond, by extent.
EXACT_OVERLAP_NUMEL = 1_000_000


@dataclass
class Fact:
    """One statement about a tensor's layout, with its reason in plain words."""

    key: str  # stable id, e.g. "contiguous", "memory_format", "expand", "numpy_strides"
    label: str
    value: str
    reason: str


@dataclass
class ViewVerdict:
    """What ``.view(shape)``, ``.reshape(shape)`` or ``.contiguous()`` would do.

    Found by running the op on a meta twin (same shape, stride, offset and dtype, no data),
    so it is torch's answer, not a guess.
    """

    op: Literal["view", "reshape", "contiguous"]
    shape: list[int]  # the requested shape; for contiguous the tensor's own shape
    works: bool
    copies: bool  # a new storage is allocated
    result_stride: Optional[list[int]]
    bytes: int  # newly allocated bytes: 0 when the result is a view
    reason: str  # plain words
    torch_message: str  # torch's own error message when it fails, else ""


@dataclass
class ValueWindow:
    """Values of a box of logical indices, row-major, formatted as short text.

    Covers ``start[k] <= i[k] < start[k] + size[k]`` for every dim k.
    """

    start: list[int]
    size: list[int]
    values: list[str]


@dataclass
class PanelPart:
    """A component of a tensor whose layout has no strides, e.g. a COO tensor's indices."""

    name: str
    shape: list[int]
    dtype: str
    note: str
    values: Optional[list[str]]  # flattened, for small parts only


@dataclass
class LayoutPanel:
    """What to show instead of a stride diagram: this layout has no strides, and what it has."""

    layout: str  # e.g. "sparse_coo", "sparse_csr", "nested", "mkldnn"
    title: str
    explanation: str
    parts: list[PanelPart]


@dataclass
class TensorLayout:
    """One tensor of a stride diagram."""

    id: int
    name: str  # what the user called it: the expression or variable name
    kind: Literal["tensor", "numpy"]
    shape: list[int]
    stride: Optional[list[int]]  # None when the layout has no strides (see ``panel``)
    storage_offset: int
    numel: int
    dtype: str
    element_size: int
    device: str
    layout: str  # torch's layout name: "strided", "sparse_coo", ...
    strip: int  # index into StrideLayout.strips, -1 when there is no storage to draw
    has_data: bool  # False for meta tensors: the layout is real, the values do not exist
    is_contiguous: bool
    memory_format: str  # "contiguous", "channels_last", "channels_last_3d", "ambiguous", "none"
    extent: Optional[list[int]]  # [lowest, highest] storage element read; None if empty or strideless
    facts: list[Fact]
    verdicts: list[ViewVerdict]  # view(-1), reshape(-1), contiguous()
    window: Optional[ValueWindow]  # the values first shown; None without data
    panel: Optional[LayoutPanel]


@dataclass
class StorageStrip:
    """One storage, drawn as a 1-D strip of elements of ``dtype``."""

    id: int
    nbytes: int
    length: int  # nbytes // element_size
    dtype: str
    element_size: int
    device: str
    data_ptr: str  # hex address, "" without data
    copy: bool  # a different storage from the first tensor's: its data was copied
    tensors: list[int]
    has_data: bool
    window_start: int
    values: list[str]  # strip elements [window_start, window_start + len(values))


@dataclass
class Overlap:
    """Two tensors on one strip, and how many storage elements both read."""

    a: int
    b: int
    elements: int
    exact: bool  # False: counted from extents only (too large to compare address sets)


@dataclass
class StrideLayout:
    """A stride diagram: tensors, the storages they read, and where they overlap."""

    version: int
    tensors: list[TensorLayout]
    strips: list[StorageStrip]
    overlaps: list[Overlap]
    max_window: int  # the most values one reply carries
    message: Optional[str]


# Messages between the browser and the kernel.
@dataclass
class ValuesRequest:
    """Values of a box of a tensor's logical grid (at most ``max_window`` of them)."""

    type: Literal["values"]
    request_id: int
    tensor: int
    start: list[int]
    size: list[int]


@dataclass
class ValuesReply:
    """The values of the requested box (clipped to the tensor)."""

    type: Literal["values"]
    request_id: int
    tensor: int
    window: ValueWindow


@dataclass
class StorageRequest:
    """Elements ``[start, start + count)`` of a strip (count at most ``max_window``)."""

    type: Literal["storage"]
    request_id: int
    strip: int
    start: int
    count: int


@dataclass
class StorageReply:
    """The requested strip elements (clipped to the storage)."""

    type: Literal["storage"]
    request_id: int
    strip: int
    start: int
    values: list[str]


@dataclass
class TryRequest:
    """Try ``.view(shape)`` or ``.reshape(shape)`` of a tensor (on its meta twin)."""

    type: Literal["try"]
    request_id: int
    tensor: int
    op: Literal["view", "reshape"]
    shape: list[int]


@dataclass
class TryReply:
    """torch's answer for the tried op."""

    type: Literal["try"]
    request_id: int
    tensor: int
    verdict: ViewVerdict


# What the view shows beyond its data (``save(state=...)``, and what a browser view reports).
@dataclass
class PinnedCell:
    """A cell whose address mapping stays shown: ``tensor``'s logical cell at ``index``, or, when
    ``index`` is None, ``element`` of the storage strip ``tensor`` reads (in the strip's elements)."""

    tensor: str  # a tensor's name, as the view labels it
    index: Optional[list[int]] = None
    element: Optional[int] = None


@dataclass
class StridesViewState:
    """The stride view's units and pinned cell."""

    units: Literal["elements", "bytes"] = "elements"
    pinned: Optional[PinnedCell] = None


WIRE_TYPES = [
    Fact, ViewVerdict, ValueWindow, PanelPart, LayoutPanel, TensorLayout, StorageStrip, Overlap,
    StrideLayout, ValuesRequest, ValuesReply, StorageRequest, StorageReply, TryRequest, TryReply,
    PinnedCell, StridesViewState,
]


# --- the address rule --------------------------------------------------------------------------
def storage_index(index: Sequence[int], stride: Sequence[int], offset: int) -> int:
    """The storage element a logical index reads: ``offset + Σ iₖ·strideₖ``.

    >>> storage_index((1, 2), (1, 4), 0)   # t.T[1, 2] for t = arange(12).reshape(3, 4)
    9
    """
    return offset + sum(i * s for i, s in zip(index, stride))


def logical_indices(shape: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Every logical index in row-major order.

    >>> list(logical_indices((2, 2)))
    [(0, 0), (0, 1), (1, 0), (1, 1)]
    """
    return itertools.product(*(range(n) for n in shape))


def addresses(shape: Sequence[int], stride: Sequence[int], offset: int) -> list[int]:
    """The storage element of every logical element, row-major.

    >>> addresses((2, 3), (0, 1), 4)   # an expand: both rows read the same three elements
    [4, 5, 6, 4, 5, 6]
    """
    return [storage_index(i, stride, offset) for i in logical_indices(shape)]


def extent(shape: Sequence[int], stride: Sequence[int], offset: int) -> Optional[list[int]]:
    """``[lowest, highest]`` storage element read, or None for an empty tensor.

    >>> extent((3, 4), (1, 3), 2)
    [2, 13]
    """
    if any(n == 0 for n in shape):
        return None
    return [offset, offset + sum((n - 1) * s for n, s in zip(shape, stride))]


def row_major_strides(shape: Sequence[int]) -> list[int]:
    """The strides of a fresh contiguous tensor of this shape.

    >>> row_major_strides((2, 3, 4))
    [12, 4, 1]
    """
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return out[::-1]


def is_row_major(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """torch's ``is_contiguous()`` rule: size-1 dims may have any stride, empty tensors always are.

    >>> is_row_major((4, 3), (1, 4)), is_row_major((1, 3), (99, 1)), is_row_major((0, 2), (5, 5))
    (False, True, True)
    """
    if any(n == 0 for n in shape):
        return True
    expected = 1
    for n, s in zip(reversed(shape), reversed(stride)):
        if n != 1:
            if s != expected:
                return False
            expected *= n
    return True


def shape_tuple_text(shape: Sequence[int]) -> str:
    """``(3, 4)`` as torch prints a shape tuple; ``()`` for a 0-d tensor.

    >>> shape_tuple_text([12]), shape_tuple_text([]), shape_tuple_text([3, 4])
    ('(12,)', '()', '(3, 4)')
    """
    return str(tuple(shape))


def initial_window(shape: Sequence[int]) -> tuple[list[int], list[int]]:
    """The box of logical indices shown first: ``(start, size)``.

    >>> initial_window((10000, 1000))
    ([0, 0], [16, 16])
    >>> initial_window((5, 6, 7, 8, 9))
    ([0, 0, 0, 0, 0], [1, 3, 4, 8, 9])
    """
    size = [0] * len(shape)
    total = 1
    for k in range(len(shape) - 1, -1, -1):
        cap = GRID_INNER if k >= len(shape) - 2 else GRID_LEADING
        want = min(shape[k], cap)
        while want > 1 and total * want > MAX_WINDOW:
            want -= 1
        size[k] = want
        total *= max(want, 1)
    return [0] * len(shape), size


def format_value(value: object) -> str:
    """A cell's text: ints whole, floats to 4 significant digits, as torch prints them.

    >>> [format_value(v) for v in (3, 2.5, 1/3, float("nan"), -float("inf"), True, 1+2j, 1e20)]
    ['3', '2.5', '0.3333', 'nan', '-inf', 'True', '1+2j', '1e+20']
    """
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, complex):
        re, im = format_value(value.real), format_value(abs(value.imag))
        return f"{re}{'-' if value.imag < 0 or math.copysign(1, value.imag) < 0 else '+'}{im}j"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if value.is_integer() and abs(value) < 1e6:
            return str(int(value))
        return f"{value:.4g}"
    return str(value)


# --- the .view rule, in words ------------------------------------------------------------------
def view_strides(shape: Sequence[int], stride: Sequence[int],
                 new_shape: Sequence[int]) -> tuple[Optional[list[int]], Optional[tuple[int, int]]]:
    """The strides ``.view(new_shape)`` gets by the documented rule, or the pair of old dims it
    cannot merge.

    A run of old dims can act as one dim only where ``stride[i] == stride[i+1]·size[i+1]``;
    size-1 dims are ignored. Each new dim must lie inside one such run. Returns
    ``(strides, None)`` when the view works, ``(None, (i, i+1))`` when a new dim would have to
    span old dims i and i+1, and ``(None, None)`` when the element counts differ.

    >>> view_strides((4, 3), (1, 4), (12,))       # t.T.view(12)
    (None, (0, 1))
    >>> view_strides((4, 3), (1, 4), (2, 2, 3))   # t.T.view(2, 2, 3)
    ([2, 1, 4], None)
    """
    numel = math.prod(shape)
    if numel != math.prod(new_shape):
        return None, None
    if numel == 0 or not shape:
        return row_major_strides(new_shape), None
    # Runs of old dims that are adjacent in memory, innermost first; size-1 dims never break a run.
    dims = [k for k in range(len(shape)) if shape[k] != 1]
    runs: list[tuple[int, int, int]] = []  # (first dim, last dim, numel), stride of the run = stride[last]
    if not dims:
        runs.append((len(shape) - 1, len(shape) - 1, 1))
    for k in reversed(dims):
        if runs and stride[k] == stride[runs[-1][0]] * shape[runs[-1][0]]:
            first, last, n = runs[-1]
            runs[-1] = (k, last, n * shape[k])
        else:
            runs.append((k, k, shape[k]))
    new_stride = [0] * len(new_shape)
    d = len(new_shape) - 1
    for run_index, (first, last, n) in enumerate(runs):
        base, covered = stride[last], 1
        while d >= 0 and (covered < n or new_shape[d] == 1):
            new_stride[d] = covered * base
            covered *= new_shape[d]
            d -= 1
        if covered != n:
            outer = runs[run_index + 1][1] if run_index + 1 < len(runs) else first
            return None, (outer, first)
    while d >= 0:  # leading size-1 dims of the new shape
        new_stride[d] = 1
        d -= 1
    return new_stride, None


def explain_view(shape: Sequence[int], stride: Sequence[int], new_shape: Sequence[int]) -> str:
    """Why ``.view(new_shape)`` works or fails, in plain words.

    >>> explain_view((4, 3), (1, 4), (12,))
    'dims 0 and 1 (sizes 4 and 3, strides 1 and 4) are not next to each other in memory: one dim spanning both
    would need stride[0] = stride[1]·size[1] = 12, but it is 1. A view never moves data, so it cannot merge them.'
    """
    result, clash = view_strides(shape, stride, new_shape)
    if result is not None:
        return (f"every new dim walks memory with one stride: the view gets stride {shape_tuple_text(result)} "
                "and shares the storage")
    if clash is None:
        return (f"the new shape {shape_tuple_text(new_shape)} holds {math.prod(new_shape)} elements, "
                f"but the tensor has {math.prod(shape)}")
    i, j = clash
    return (f"dims {i} and {j} (sizes {shape[i]} and {shape[j]}, strides {stride[i]} and {stride[j]}) "
            f"are not next to each other in memory: one dim spanning both would need "
            f"stride[{i}] = stride[{j}]·size[{j}] = {stride[j] * shape[j]}, but it is {stride[i]}. "
            "A view never moves data, so it cannot merge them.")


def contiguity_reason(shape: Sequence[int], stride: Sequence[int]) -> str:
    """Why ``is_contiguous()`` says what it says.

    >>> contiguity_reason((4, 3), (1, 4))
    'row-major order for shape (4, 3) needs stride (3, 1); this tensor has (1, 4)'
    """
    expected = row_major_strides(shape)
    if is_row_major(shape, stride):
        if list(stride) == expected:
            return f"stride {shape_tuple_text(stride)} is row-major order for shape {shape_tuple_text(shape)}"
        return (f"stride {shape_tuple_text(stride)} differs from {shape_tuple_text(expected)} only on size-1 or empty "
                "dims, which torch ignores")
    return (f"row-major order for shape {shape_tuple_text(shape)} needs stride {shape_tuple_text(expected)}; "
            f"this tensor has {shape_tuple_text(stride)}")
