"""Read how tensors map onto their storage, and ask torch what views would do.

Everything torch-specific about the stride view lives here: layouts without strides, meta twins,
storage identity, reading values back through a storage without keeping the tensor alive.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import torch

from ..model import strides as m
from ..model.strides import (
    Fact,
    LayoutPanel,
    Overlap,
    PanelPart,
    StorageStrip,
    StrideLayout,
    TensorLayout,
    ValueWindow,
    ViewVerdict,
)
from .summary import dtype_name
from .untraced import untraced

try:  # numpy is optional for torch; without it there are simply no arrays to draw
    import numpy as np
except ImportError:  # pragma: no cover
    np = None

# Distinct storage elements are counted exactly while the extent spans at most this many.
EXACT_DISTINCT_SPAN = 4_000_000
PANEL_VALUES = 64  # a stride-less tensor's parts show values up to this many elements
CHANNELS_LAST = {4: ("channels_last", torch.channels_last), 5: ("channels_last_3d", torch.channels_last_3d)}


def accepts(value: object) -> bool:
    """True for what a stride view can draw: a tensor or a numpy array."""
    return isinstance(value, torch.Tensor) or (np is not None and isinstance(value, np.ndarray))



@dataclass
class Frozen:
    """The last drawing of a tensor whose storage is gone: kept as it was, marked freed."""

    tensor: TensorLayout
    strip: Optional[StorageStrip]


@dataclass
class Entry:
    """What a stride view remembers about one tensor. Weak references only."""

    name: str
    kind: str
    tensor_ref: Optional[weakref.ref]
    array_ref: Optional[weakref.ref]
    storage_ref: Optional[weakref.ref]
    shape: tuple
    stride: Optional[tuple]
    offset: int
    dtype: Optional[torch.dtype]
    device: Optional[torch.device]
    plain: bool  # values can be read straight from the storage (no conj/neg bit, not quantized)
    window: tuple = field(default=((), ()))  # the box of logical indices the browser shows
    frozen: Optional["Frozen"] = None  # set once the tensor and its storage are gone

    def tensor(self) -> Optional[torch.Tensor]:
        """The tensor itself, or an equal view rebuilt on its storage, or None when both are gone."""
        t = self.tensor_ref() if self.tensor_ref is not None else None
        if t is not None:
            return t
        if self.array_ref is not None:
            array = self.array_ref()
            if array is not None:
                return torch.from_numpy(array)
        storage = self.storage_ref() if self.storage_ref is not None else None
        if storage is None or not self.plain or self.stride is None:
            return None
        with torch.no_grad():
            return torch.empty(0, dtype=self.dtype, device=self.device).set_(
                storage, self.offset, self.shape, self.stride)


def _as_tensor(value: object) -> tuple[Optional[torch.Tensor], str, Optional[str]]:
    """(tensor, kind, problem). A numpy array becomes a zero-copy tensor over its memory."""
    if isinstance(value, torch.Tensor):
        return value, "tensor", None
    try:
        return torch.from_numpy(value), "numpy", None
    except (TypeError, ValueError, RuntimeError) as exc:
        return None, "numpy", str(exc)


def _panel(t: torch.Tensor) -> Optional[LayoutPanel]:
    """A panel for layouts whose strides do not exist or mean nothing. Checked before stride()."""
    def part(name: str, x: torch.Tensor, note: str) -> PanelPart:
        values = [m.format_value(v) for v in x.reshape(-1).tolist()] if x.numel() <= PANEL_VALUES else None
        return PanelPart(name, list(x.shape), dtype_name(x.dtype), note, values)

    layout = t.layout
    if layout == torch.sparse_coo:
        parts = [part("indices", t._indices(), f"{t.sparse_dim()} × nnz coordinates, one column per stored value"),
                 part("values", t._values(), "the stored values, nnz of them")]
        return LayoutPanel(
            "sparse_coo", "this layout has no strides",
            f"A sparse COO tensor stores only its {t._nnz()} non-zero entries as (indices, values) pairs "
            f"(coalesced: {t.is_coalesced()}). torch reports stride {tuple(t.stride())} for it, which "
            "means nothing, and it has no storage to draw.", parts)
    if layout in (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc):
        name = str(layout).removeprefix("torch.")
        compressed, plain = ((t.crow_indices(), t.col_indices()) if layout in (torch.sparse_csr, torch.sparse_bsr)
                             else (t.ccol_indices(), t.row_indices()))
        row = layout in (torch.sparse_csr, torch.sparse_bsr)
        parts = [part("crow_indices" if row else "ccol_indices", compressed,
                      f"where each {'row' if row else 'column'}'s entries start"),
                 part("col_indices" if row else "row_indices", plain, "the other coordinate of each entry"),
                 part("values", t.values(), "the stored values")]
        return LayoutPanel(name, "this layout has no strides",
                           f"A {name.upper().replace('SPARSE_', '')} tensor compresses one dimension into offsets; "
                           "torch raises if you ask for its strides.", parts)
    if t.is_nested:
        comps = t.unbind() if t.layout == torch.strided else []
        parts = [part(f"component {i}", c, f"shape {m.shape_tuple_text(list(c.shape))}")
                 for i, c in enumerate(comps[:8])]
        return LayoutPanel("nested", "this layout has no strides",
                           f"A nested tensor holds {t.size(0)} tensors of different shapes in one buffer; "
                           "it has no single shape or stride.", parts)
    if layout == torch._mkldnn:  # type: ignore[attr-defined]
        return LayoutPanel("mkldnn", "this layout has no strides",
                           "An MKLDNN (oneDNN) tensor keeps an opaque blocked layout chosen by the library. "
                           "torch reports a placeholder stride and no storage. "
                           f"Shape {m.shape_tuple_text(list(t.shape))}, "
                           f"dtype {dtype_name(t.dtype)}; call .to_dense() to see a strided copy.", [])
    if layout != torch.strided:
        return LayoutPanel(str(layout).removeprefix("torch."), "this layout has no strides",
                           f"torch layout {layout} has no strided storage to draw.", [])
    return None


def _outer_shape(t: torch.Tensor) -> tuple[list[int], int]:
    """Shape and element count, also for a nested tensor (whose components differ in shape)."""
    if t.is_nested:
        comps = t.unbind()
        return [len(comps)], sum(c.numel() for c in comps)
    return list(t.shape), t.numel()


def _has_data(t: torch.Tensor) -> bool:
    if t.device.type == "meta":
        return False
    try:
        from torch._subclasses.fake_tensor import FakeTensor
        return not isinstance(t, FakeTensor)
    except ImportError:  # pragma: no cover
        return True


def _memory_format(t: torch.Tensor) -> tuple[str, Optional[Fact]]:
    row = t.is_contiguous()
    if t.dim() not in CHANNELS_LAST:
        return ("contiguous" if row else "none"), None
    name, fmt = CHANNELS_LAST[t.dim()]
    cl = t.is_contiguous(memory_format=fmt)
    if row and cl:
        return "ambiguous", Fact("memory_format", "memory format", "ambiguous: contiguous and " + name,
                                 f"with these sizes both orders give valid strides {tuple(t.stride())} "
                                 "(this happens when C = 1 or the spatial dims are 1), so torch cannot tell "
                                 "which format the tensor is in")
    if cl:
        return name, Fact("memory_format", "memory format", name,
                          f"is_contiguous(memory_format=torch.{name}) is True: channels are the innermost dim "
                          f"(stride[1] = {t.stride(1)}), so pixels are stored channel after channel")
    if row:
        return "contiguous", Fact("memory_format", "memory format", "contiguous (NCHW)",
                                  "row-major order: each channel is a whole plane")
    return "none", Fact("memory_format", "memory format", "neither",
                        f"is_contiguous() and is_contiguous(memory_format=torch.{name}) are both False")


def _meta_twin(t: torch.Tensor) -> torch.Tensor:
    dtype = t.dtype if not t.is_quantized else torch.uint8
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=dtype, device="meta")


def try_op(twin: torch.Tensor, op: str, shape: Sequence[int], element_size: int) -> ViewVerdict:
    """Run ``.view(shape)``, ``.reshape(shape)`` or ``.contiguous()`` on a meta twin and report it.

    >>> twin = torch.empty_strided((4, 3), (1, 4), device="meta", dtype=torch.int64)
    >>> try_op(twin, "view", [12], 8).works, try_op(twin, "reshape", [12], 8).bytes
    (False, 96)
    """
    old_shape, old_stride = list(twin.shape), list(twin.stride())
    with untraced():
        try:
            if op == "view":
                result = twin.view(tuple(shape))
            elif op == "reshape":
                result = twin.reshape(tuple(shape))
            elif op == "contiguous":
                result = twin.contiguous()
            else:
                raise ValueError(f"expected op 'view', 'reshape' or 'contiguous', got {op!r}")
        except RuntimeError as exc:
            message = str(exc).splitlines()[0]
            return ViewVerdict(op, list(shape), False, False, None, 0,
                               m.explain_view(old_shape, old_stride, _resolve(shape, twin.numel())), message)
        copies = (result is not twin) if op == "contiguous" else (op == "reshape" and not result._is_view())
        new_shape = list(result.shape)
        nbytes = result.numel() * element_size if copies else 0
        if op == "contiguous":
            reason = ("already contiguous: .contiguous() returns the same tensor, no copy" if not copies else
                      f"not contiguous: .contiguous() allocates a new storage of {nbytes} bytes and copies "
                      f"into row-major order {m.shape_tuple_text(list(result.stride()))}")
        elif op == "reshape":
            reason = ("the strides allow a view, so .reshape returns one and shares the storage" if not copies else
                      f"no view is possible ({m.explain_view(old_shape, old_stride, new_shape)}), so .reshape "
                      f"copies: {nbytes} new bytes")
        else:
            reason = m.explain_view(old_shape, old_stride, new_shape)
        return ViewVerdict(op, list(shape), True, copies, list(result.stride()), nbytes, reason, "")


def try_layout(shape: Sequence[int], stride: Sequence[int], op: str, new_shape: Sequence[int],
               element_size: int) -> ViewVerdict:
    """:func:`try_op` for a layout given as numbers (a browser request).

    >>> try_layout([4, 3], [1, 4], "view", [2, 2, 3], 8).result_stride
    [2, 1, 4]
    """
    with untraced():
        twin = torch.empty_strided(tuple(shape), tuple(stride), device="meta")
    return try_op(twin, op, new_shape, element_size)


def _resolve(shape: Sequence[int], numel: int) -> list[int]:
    """Replace one -1 the way torch would, for the explanation only."""
    shape = list(shape)
    if shape.count(-1) == 1:
        rest = math.prod(s for s in shape if s != -1)
        shape[shape.index(-1)] = numel // rest if rest and numel % rest == 0 else -1
    return shape


def _address_set(shape: Sequence[int], stride: Sequence[int], offset: int, scale: tuple[int, int]) -> torch.Tensor:
    """Sorted distinct strip elements a strided box reads (scale = tensor bytes, strip bytes)."""
    idx = torch.full((), offset, dtype=torch.int64)
    for k, (n, s) in enumerate(zip(shape, stride)):
        view_shape = [1] * len(shape)
        view_shape[k] = n
        idx = idx + (torch.arange(n, dtype=torch.int64) * s).reshape(view_shape)
    idx = idx.reshape(-1)
    if scale[0] != scale[1]:
        idx = torch.div(idx * scale[0], scale[1], rounding_mode="floor")
    return torch.unique(idx)


def _facts(t: torch.Tensor, name: str, group: list[str], copy_of: Optional[str], stride: list[int],
           data_ptr: int, storage_ptr: int, nbytes: int, distinct: Optional[int],
           base_name: Optional[str]) -> list[Fact]:
    shape, es = list(t.shape), t.element_size()
    facts = []
    rule = m.is_row_major(shape, stride)
    contiguous = t.is_contiguous()
    reason = m.contiguity_reason(shape, stride)
    if rule != contiguous:  # never shown so far; torch wins if it ever happens
        reason = f"torch says is_contiguous() is {contiguous} ({reason})"
    facts.append(Fact("contiguous", "is_contiguous()", str(contiguous), reason))
    others = [g for g in group if g != name]
    if copy_of is not None:
        facts.append(Fact("storage", "storage", f"copy: its own storage, not {copy_of}'s",
                          f"untyped_storage().data_ptr() differs from {copy_of}'s, so its data was copied "
                          "and writes to one never show in the other"))
    elif others:
        facts.append(Fact("storage", "storage", "shared with " + ", ".join(others),
                          f"the same untyped_storage().data_ptr() ({hex(storage_ptr)}): writes through one "
                          "show in the others"))
    else:
        facts.append(Fact("storage", "storage", f"{nbytes} bytes", "no other tensor drawn here uses it"))
    if t._is_view():
        facts.append(Fact("base", "_base", base_name or "another tensor",
                          "a view: torch records the root of the view chain in ._base, not the tensor "
                          "this view was made from, so t.T.T._base is t._base when t is itself a view"))
    zero = [k for k, (n, s) in enumerate(zip(shape, stride)) if s == 0 and n > 1]
    if zero:
        dims = ", ".join(str(k) for k in zero)
        count = f"{distinct} distinct storage elements" if distinct is not None else "fewer storage elements"
        facts.append(Fact("expand", "stride 0", f"dim {dims}",
                          f"stepping along dim {dims} does not move in memory (expand/broadcast): "
                          f"{t.numel()} logical elements read {count}; no memory is repeated"))
    facts.append(Fact("bytes", "bytes", f"{t.numel() * es} logical, storage {nbytes}",
                      f"numel·element_size = {t.numel()}·{es}; the storage holds {nbytes} bytes"
                      + (f", of which this tensor reads {distinct * es}" if distinct is not None else "")))
    facts.append(Fact("numpy_strides", "strides in bytes", m.shape_tuple_text([s * es for s in stride]),
                      "torch counts strides in elements, numpy's .strides counts bytes "
                      f"(element_size {es})"))
    facts.append(Fact("data_ptr", "data_ptr()", hex(data_ptr) if data_ptr else "none",
                      f"storage start + storage_offset·element_size = {hex(storage_ptr)} + {t.storage_offset()}·{es}"
                      if data_ptr else "no data: a meta tensor has a layout but no memory"))
    overlap = torch._debug_has_internal_overlap(t) if t.device.type != "meta" else 0
    if overlap == 1:
        facts.append(Fact("writes", "in-place writes", "raise",
                          "several logical elements share one memory location, so torch refuses to write "
                          "through this view"))
    if t.is_conj():
        facts.append(Fact("conj", "conj bit", "set", "a lazy conjugate: storage holds the original values, "
                          "cells show the conjugated ones; .resolve_conj() would copy"))
    if t.is_neg():
        facts.append(Fact("neg", "neg bit", "set", "a lazy negation: storage holds the original values"))
    if t.is_quantized:
        scheme = t.qscheme()
        detail = (f"scale {t.q_scale():.4g}, zero_point {t.q_zero_point()}"
                  if scheme in (torch.per_tensor_affine, torch.per_tensor_symmetric)
                  else f"per-channel on dim {t.q_per_channel_axis()}")
        facts.append(Fact("quantized", "quantized", str(scheme).removeprefix("torch."),
                          f"storage holds {dtype_name(t.int_repr().dtype)} codes; cells show value = "
                          f"scale·(code − zero_point), {detail}"))
    return facts


@dataclass
class Described:
    layout: StrideLayout
    entries: list[Entry]
    strip_refs: list[Optional[weakref.ref]]
    strip_dtypes: list[Optional[torch.dtype]]


def describe(values: Sequence[object], names: Sequence[str],
             windows: Optional[Sequence[Optional[tuple]]] = None) -> Described:
    """Lay out each value over its storage. Values must pass :func:`accepts`."""
    with untraced(), torch.no_grad():
        return _describe(values, names, windows)


def _describe(values, names, windows) -> Described:
    tensors: list[TensorLayout] = []
    entries: list[Entry] = []
    strips: list[StorageStrip] = []
    strip_refs: list[Optional[weakref.ref]] = []
    strip_dtypes: list[Optional[torch.dtype]] = []
    strip_keys: dict[Any, int] = {}
    held: list = []  # storages kept only while describing, so identity keys stay valid
    live: list[Optional[torch.Tensor]] = []
    for i, (value, name) in enumerate(zip(values, names)):
        if isinstance(value, Frozen):
            live.append(None)
            old = dataclasses.replace(value.tensor, id=i, strip=-1)
            if value.strip is not None:
                key = ("frozen", id(value.strip))
                if key not in strip_keys:
                    strip_keys[key] = len(strips)
                    strips.append(dataclasses.replace(value.strip, id=len(strips), tensors=[], copy=False))
                    strip_refs.append(None)
                    strip_dtypes.append(None)
                old.strip = strip_keys[key]
                strips[old.strip].tensors.append(i)
            if not any(f.key == "freed" for f in old.facts):
                old.facts = [Fact("freed", "freed", "gone from the kernel",
                                  "no tensor uses this storage any more, so it was freed; the drawing "
                                  "shows its last values"), *old.facts]
            tensors.append(old)
            entries.append(Entry(name, old.kind, None, None, None, tuple(old.shape), None, 0, None, None, False,
                                 frozen=value))
            continue
        t, kind, problem = _as_tensor(value)
        live.append(t)
        if t is None:  # e.g. a numpy array with negative strides
            panel = LayoutPanel("numpy", "torch cannot view this array",
                                f"torch.from_numpy refused it: {problem}. numpy allows negative strides "
                                "(a[::-1]); torch has none, so flip() copies.", [])
            arr = value
            tensors.append(TensorLayout(i, name, "numpy", list(arr.shape), None, 0, int(arr.size), str(arr.dtype),
                                        int(arr.itemsize), "cpu", "numpy", -1, True, False, "none", None,
                                        [Fact("numpy_strides", "numpy strides (bytes)", str(arr.strides), "")],
                                        [], None, panel))
            entries.append(Entry(name, kind, None, None, None, tuple(arr.shape), None, 0, None, None, False))
            continue
        panel = _panel(t)
        tensor_ref = _weak(t) if kind == "tensor" else None
        array_ref = _weak(value) if kind == "numpy" else None
        if panel is not None:
            shape, numel = _outer_shape(t)
            tensors.append(TensorLayout(i, name, kind, shape, None, 0, numel, dtype_name(t.dtype),
                                        t.element_size(), str(t.device), str(t.layout).removeprefix("torch."),
                                        -1, _has_data(t), False, "none", None, [], [], None, panel))
            entries.append(Entry(name, kind, tensor_ref, array_ref, None, tuple(shape), None, 0, t.dtype,
                                 t.device, False))
            continue
        storage = t.untyped_storage()
        held.append(storage)
        ptr = storage.data_ptr()
        key = ("ptr", str(t.device), ptr) if ptr else ("obj", id(storage))
        if key not in strip_keys:
            strip_keys[key] = len(strips)
            strip_dtype = torch.uint8 if t.is_quantized else t.dtype
            es = torch.empty((), dtype=strip_dtype).element_size()
            has_data = _has_data(t)
            strips.append(StorageStrip(len(strips), storage.nbytes(), storage.nbytes() // es, dtype_name(strip_dtype),
                                       es, str(t.device), hex(ptr) if has_data and ptr else "", bool(strips), [],
                                       has_data, 0, []))
            strip_refs.append(_weak(storage))
            strip_dtypes.append(strip_dtype)
        sid = strip_keys[key]
        strips[sid].tensors.append(i)
        stride = list(t.stride())
        plain = not (t.is_conj() or t.is_neg() or t.is_quantized)
        entry = Entry(name, kind, tensor_ref, array_ref, _weak(storage), tuple(t.shape), tuple(stride),
                      t.storage_offset(), t.dtype, t.device, plain)
        fmt, fmt_fact = _memory_format(t)
        tensors.append(TensorLayout(
            i, name, kind, list(t.shape), stride, t.storage_offset(), t.numel(), dtype_name(t.dtype),
            t.element_size(), str(t.device), "strided", sid, _has_data(t), t.is_contiguous(), fmt,
            m.extent(list(t.shape), stride, t.storage_offset()), [fmt_fact] if fmt_fact else [], [], None, None))
        window = windows[i] if windows and i < len(windows) and windows[i] else m.initial_window(list(t.shape))
        entry.window = (tuple(window[0]), tuple(window[1]))
        entries.append(entry)

    first_strip = next((t.strip for t in tensors if t.strip >= 0), -1)
    for s in strips:
        s.copy = s.id != first_strip
    # Facts, verdicts and values need the whole group (sharing, copies, overlap).
    distinct_sets: dict[int, Optional[torch.Tensor]] = {}
    for layout, entry, t in zip(tensors, entries, live):
        if layout.strip < 0 or t is None:
            continue
        strip = strips[layout.strip]
        group = [tensors[j].name for j in strip.tensors]
        first_on_strip = tensors[strips[first_strip].tensors[0]].name if strip.copy and first_strip >= 0 else None
        addrs = _distinct(layout, strip)
        distinct_sets[layout.id] = addrs
        base = t._base if t._is_view() else None
        base_name = next((tensors[j].name for j, other in enumerate(live) if other is not None and other is base), None)
        storage = t.untyped_storage()
        layout.facts = [*layout.facts, *_facts(t, layout.name, group, first_on_strip, layout.stride,
                                               t.data_ptr() if layout.has_data else 0,
                                               storage.data_ptr(), storage.nbytes(),
                                               None if addrs is None else int(addrs.numel()), base_name)]
        twin = _meta_twin(t)
        es = t.element_size()
        layout.verdicts = [try_op(twin, "view", [-1], es), try_op(twin, "reshape", [-1], es),
                           try_op(twin, "contiguous", list(t.shape), es)]
        if layout.has_data:
            layout.window = read_window(t, *entry.window)
    for s in strips:
        if s.has_data and strip_refs[s.id] is not None:
            s.window_start = 0
            s.values = read_storage(strip_refs[s.id](), strip_dtypes[s.id], strips[s.id].device, 0,
                                    min(s.length, m.STRIP_WINDOW))
    overlaps = []
    for s in strips:
        ids = s.tensors
        for x in range(len(ids)):
            for y in range(x + 1, len(ids)):
                a, b = distinct_sets.get(ids[x]), distinct_sets.get(ids[y])
                if a is not None and b is not None:
                    overlaps.append(Overlap(ids[x], ids[y], int(torch.isin(a, b).sum()), True))
                else:
                    ea, eb = _strip_extent(tensors[ids[x]], s), _strip_extent(tensors[ids[y]], s)
                    both = 0 if ea is None or eb is None else max(0, min(ea[1], eb[1]) - max(ea[0], eb[0]) + 1)
                    overlaps.append(Overlap(ids[x], ids[y], both, False))
    del held
    layout = StrideLayout(1, tensors, strips, overlaps, m.MAX_WINDOW, None)
    return Described(layout, entries, strip_refs, strip_dtypes)


def _strip_extent(layout: TensorLayout, strip: StorageStrip) -> Optional[list[int]]:
    if layout.extent is None:
        return None
    lo, hi = layout.extent
    es, ss = layout.element_size, strip.element_size
    return [lo * es // ss, ((hi + 1) * es - 1) // ss]


def _distinct(layout: TensorLayout, strip: StorageStrip) -> Optional[torch.Tensor]:
    """The sorted strip elements a tensor reads, when small enough to list exactly."""
    if layout.extent is None:
        return torch.empty(0, dtype=torch.int64)
    span = layout.extent[1] - layout.extent[0] + 1
    if span > EXACT_DISTINCT_SPAN or layout.numel > m.EXACT_OVERLAP_NUMEL:
        return None
    return _address_set(layout.shape, layout.stride, layout.storage_offset, (layout.element_size, strip.element_size))


def _weak(obj: object) -> Optional[weakref.ref]:
    try:
        return weakref.ref(obj)
    except TypeError:
        return None


def _readable(t: torch.Tensor) -> torch.Tensor:
    if t.is_quantized:
        return t.dequantize()
    return t


def read_window(t: torch.Tensor, start: Sequence[int], size: Sequence[int]) -> ValueWindow:
    """Values of the box ``start[k] <= i[k] < start[k] + size[k]``, clipped to the shape.

    >>> read_window(torch.arange(12).reshape(3, 4).T, [1, 0], [2, 3]).values
    ['1', '5', '9', '2', '6', '10']
    """
    with untraced(), torch.no_grad():
        shape = list(t.shape)
        start = [max(0, min(int(s), n)) for s, n in zip(start, shape)]
        size = [max(0, min(int(z), n - s)) for z, s, n in zip(size, start, shape)]
        box = t[tuple(slice(s, s + z) for s, z in zip(start, size))] if shape else t
        flat = _readable(box).reshape(-1).tolist() if box.numel() else []
        if not shape:
            flat = [_readable(t).item()]
        return ValueWindow(start, size, [m.format_value(v) for v in flat])


def read_storage(storage, dtype: torch.dtype, device: str, start: int, count: int) -> list[str]:
    """Elements ``[start, start + count)`` of an untyped storage read as ``dtype`` (clipped)."""
    if storage is None:
        return []
    with untraced(), torch.no_grad():
        es = torch.empty((), dtype=dtype).element_size()
        length = storage.nbytes() // es
        start = max(0, min(start, length))
        count = max(0, min(count, length - start))
        flat = torch.empty(0, dtype=dtype, device=device).set_(storage, start, (count,), (1,))
        return [m.format_value(v) for v in flat.tolist()]
