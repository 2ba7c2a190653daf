"""The stride/view diagram: an anywidget over the pure TS renderer."""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import traitlets

from .._capture.fault import boundary
from .._capture.session import CaptureSession
from .._capture.strides import Described, Frozen, describe, read_storage, read_window, try_layout
from .._capture.untraced import untraced
from ..model import strides as m
from ..model.strides import StrideLayout
from .base import RequestError, RequestWidget, Saved, esm


def _int_list(value: object, what: str, length: Optional[int] = None) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise RequestError(f"expected {what} as a list of integers, got {value!r:.80}")
    if length is not None and len(value) != length:
        raise RequestError(f"expected {what} with {length} entries (one per dim), got {len(value)}")
    return value


def _index(value: object, what: str, count: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < count:
        raise RequestError(f"expected {what} as an integer in [0, {count}), got {value!r:.40}")
    return value


class StridesWidget(RequestWidget):
    """How tensors map onto their storage. Create it with ``forgeviz.strides(t, t.T)``.

    It keeps weak references only. Under ``%load_ext forgeviz`` it re-reads its tensors after
    every cell and redraws when their values or layout changed (writes through any view show),
    while a view in the browser draws it (or before any view has said so).
    """

    _esm = esm("strides.js")
    layout = traitlets.Dict().tag(sync=True)
    requests = ("values", "storage", "try", "view", "gone")
    view_name = "strides"
    view_state_type = m.StridesViewState

    def __init__(self, values: Sequence[object], names: Sequence[str], session: CaptureSession) -> None:
        super().__init__(session)
        self._described: Optional[Described] = None
        self._signature: object = None
        self._describe(values, names)
        session.widgets.add(self)

    # The cell hooks refresh "dirty" widgets after each cell: a stride view checks (cheaply) while
    # a view draws it, not forever after its output was cleared or its cell re-run (a frontend that
    # never announced a view keeps it checked).
    @property
    def dirty(self) -> bool:
        return self._views is None or bool(self._views)

    @dirty.setter
    def dirty(self, _value: bool) -> None:
        pass

    @property
    def model(self) -> StrideLayout:
        """The plain StrideLayout being shown."""
        return self._described.layout

    def _describe(self, values, names, windows=None) -> None:
        with boundary(self._session.fault, "drawing the stride view") as guard:  # shown, never raised into the cell
            self._described = describe(values, names, windows)
            self.layout = dataclasses.asdict(self._described.layout)
            self._signature = self._read_signature()
        if guard.failed:
            self._warn(f"forgeviz: {guard.failed}")
            if self._described is None:
                drawn = StrideLayout(1, [], [], [], m.MAX_WINDOW, f"could not draw: {guard.failed}")
                self._described = Described(drawn, [], [], [])
                self.layout = dataclasses.asdict(self._described.layout)

    def _read_signature(self) -> object:
        """What the view shows, re-read cheaply: layouts plus the values of the visible windows."""
        d = self._described
        with untraced():
            out = []
            for entry in d.entries:
                t = entry.tensor()
                if t is None or entry.stride is None:
                    out.append(entry.frozen is not None or entry.stride is None)
                    continue
                has_data = t.device.type != "meta"
                out.append((tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.untyped_storage().data_ptr(),
                            tuple(read_window(t, *entry.window).values) if has_data else ()))
            for strip in d.layout.strips:
                ref = d.strip_refs[strip.id]
                if strip.has_data and ref is not None:
                    out.append(tuple(read_storage(ref(), d.strip_dtypes[strip.id], strip.device, strip.window_start,
                                                  len(strip.values))))
            return tuple(out)

    def refresh(self) -> None:
        """Redraw if a tensor's values or layout changed since the last drawing."""
        with boundary(self._session.fault, "re-reading the stride view") as guard:  # after every cell
            signature = self._read_signature()
        if guard.failed:
            return  # the drawing stays
        if signature == self._signature:
            return
        d = self._described
        values, names, windows = [], [], []
        for entry, layout in zip(d.entries, d.layout.tensors):
            t = entry.tensor()
            array = entry.array_ref() if entry.array_ref is not None else None
            if array is not None:
                values.append(array)
            elif t is not None:
                values.append(t)
            else:  # gone from the kernel: keep its last drawing, marked freed
                strip = d.layout.strips[layout.strip] if layout.strip >= 0 else None
                values.append(entry.frozen or Frozen(layout, strip))
            names.append(entry.name)
            windows.append(entry.window)
        previous = d.layout
        self._describe(values, names, windows)
        self._keep_lineage(previous)

    def _keep_lineage(self, previous: StrideLayout) -> None:
        """A temporary view (``t.T``) is re-read through its storage once it is gone, which loses
        torch's ``_base`` record; keep the lineage fact from the first drawing."""
        changed = False
        for old, new in zip(previous.tensors, self._described.layout.tensors):
            base = next((f for f in old.facts if f.key == "base"), None)
            if base is not None and old.name == new.name and not any(f.key == "base" for f in new.facts):
                at = next((i for i, f in enumerate(new.facts) if f.key == "bytes"), len(new.facts))
                new.facts.insert(at, base)
                changed = True
        if changed:
            self.layout = dataclasses.asdict(self._described.layout)

    def summary(self) -> str:
        """One line on what this view shows, from its model.

        >>> import forgeviz, torch
        >>> t = torch.arange(6).reshape(2, 3)
        >>> forgeviz.strides(t).summary()
        'forgeviz strides: t (2, 3) stride (3, 1), contiguous; 1 storage'
        """
        layout = self.model
        if not layout.tensors:
            return f"forgeviz strides: {layout.message or 'nothing to show'}"
        parts = []
        for t in layout.tensors[:4]:
            shape = "(" + ", ".join(map(str, t.shape)) + ("," if len(t.shape) == 1 else "") + ")"
            if t.stride is None:
                parts.append(f"{t.name} {shape} {t.layout}, no strides")
                continue
            stride = "(" + ", ".join(map(str, t.stride)) + ("," if len(t.stride) == 1 else "") + ")"
            parts.append(f"{t.name} {shape} stride {stride}" + (", contiguous" if t.is_contiguous else ""))
        more = f" and {len(layout.tensors) - 4} more" if len(layout.tensors) > 4 else ""
        storages = len(layout.strips)
        return f"forgeviz strides: {'; '.join(parts)}{more}; {storages} storage{'s' if storages != 1 else ''}"

    def _saved(self) -> Saved:
        """The layout trait: the visible windows of values it holds are what the view shows."""
        return Saved(self.summary(), {"layout": self.layout, "warnings": list(self.warnings)})

    def _check_view_state(self, state: dict) -> None:
        """Units are 'elements' or 'bytes'; a pinned cell names a tensor of this diagram and an index
        inside its shape, or an element of the storage it reads.

        >>> import torch, forgeviz
        >>> y = torch.zeros(2, 3)
        >>> forgeviz.strides(y)._check_view_state({"pinned": {"tensor": "y", "index": [2, 0]}})
        Traceback (most recent call last):
        ...
        ValueError: state['pinned']['index']: expected 2 integers within y's shape [2, 3], got [2, 0]
        """
        units = state.get("units", "elements")
        if units not in ("elements", "bytes"):
            raise ValueError(f"state['units']: expected 'elements' or 'bytes', got {units!r}")
        pinned = state.get("pinned")
        if pinned is None:
            return
        names = [f.name for f in dataclasses.fields(m.PinnedCell)]
        if not isinstance(pinned, dict) or any(k not in names for k in pinned):
            raise ValueError(f"state['pinned']: expected {{'tensor': name, 'index': [...]}} or "
                             f"{{'tensor': name, 'element': n}}, got {pinned!r:.120}")
        layout = self.model
        tensor = next((t for t in layout.tensors if t.name == pinned.get("tensor")), None)
        if tensor is None:
            raise ValueError(f"state['pinned']['tensor']: expected one of {[t.name for t in layout.tensors]}, "
                             f"got {pinned.get('tensor')!r}")
        index, element = pinned.get("index"), pinned.get("element")
        if (index is None) == (element is None):
            raise ValueError(f"state['pinned']: expected either 'index' (a cell of {tensor.name}) or 'element' "
                             f"(of its storage), got {pinned!r:.120}")
        if index is not None:
            if (not isinstance(index, list) or len(index) != len(tensor.shape)
                    or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n
                               for i, n in zip(index, tensor.shape))):
                raise ValueError(f"state['pinned']['index']: expected {len(tensor.shape)} integers within "
                                 f"{tensor.name}'s shape {tensor.shape}, got {index!r:.80}")
            if tensor.stride is None:
                raise ValueError(f"state['pinned']: {tensor.name} has no strides to map ({tensor.layout} layout)")
            return
        if tensor.strip < 0:
            raise ValueError(f"state['pinned']['element']: {tensor.name} reads no storage drawn here")
        strip = layout.strips[tensor.strip]
        if not isinstance(element, int) or isinstance(element, bool) or not 0 <= element < strip.length:
            raise ValueError(f"state['pinned']['element']: expected an integer in [0, {strip.length}) "
                             f"({tensor.name}'s storage, in {strip.dtype} elements), got {element!r:.40}")

    # --- requests from the browser --------------------------------------------------------
    def _view_appeared(self) -> None:
        self.refresh()  # what changed while no view drew it

    def _answer_values(self, request_id: int, content: dict) -> tuple[dict, None]:
        d = self._described
        tid = _index(content.get("tensor"), "tensor", len(d.entries))
        entry, layout = d.entries[tid], d.layout.tensors[tid]
        if layout.stride is None or not layout.has_data:
            raise RequestError(f"tensor {tid} ({layout.name}) has no values to read")
        start = _int_list(content.get("start"), "start", len(layout.shape))
        size = _int_list(content.get("size"), "size", len(layout.shape))
        if any(s < 0 for s in start) or any(z < 0 for z in size):
            raise RequestError(f"expected non-negative start and size, got {start} and {size}")
        if math.prod(size) > m.MAX_WINDOW:
            raise RequestError(f"expected a box of at most {m.MAX_WINDOW} values, got {math.prod(size)}")
        t = entry.tensor()
        if t is None:
            raise RequestError(f"{layout.name} no longer exists in the kernel")
        window = read_window(t, start, size)
        entry.window = (tuple(window.start), tuple(window.size))
        return {"type": "values", "request_id": request_id, "tensor": tid, "window": dataclasses.asdict(window)}, None

    def _answer_storage(self, request_id: int, content: dict) -> tuple[dict, None]:
        d = self._described
        sid = _index(content.get("strip"), "strip", len(d.layout.strips))
        strip = d.layout.strips[sid]
        start, count = content.get("start"), content.get("count")
        _int_list([start, count], "start and count")
        if start < 0 or not 0 <= count <= m.MAX_WINDOW:
            raise RequestError(f"expected start >= 0 and 0 <= count <= {m.MAX_WINDOW}, got {start} and {count}")
        ref = d.strip_refs[sid]
        storage = ref() if ref is not None else None
        if not strip.has_data or storage is None:
            raise RequestError(f"storage {sid} has no values to read (meta, or freed)")
        values = read_storage(storage, d.strip_dtypes[sid], strip.device, start, count)
        strip.window_start, strip.values = start, values
        return {"type": "storage", "request_id": request_id, "strip": sid, "start": start, "values": values}, None

    def _answer_try(self, request_id: int, content: dict) -> tuple[dict, None]:
        d = self._described
        tid = _index(content.get("tensor"), "tensor", len(d.entries))
        layout = d.layout.tensors[tid]
        op = content.get("op")
        if op not in ("view", "reshape"):
            raise RequestError(f"expected op 'view' or 'reshape', got {op!r}")
        shape = _int_list(content.get("shape"), "shape")
        if layout.stride is None:
            raise RequestError(f"{layout.name} has no strides, so .{op} cannot be tried")
        verdict = try_layout(layout.shape, layout.stride, op, shape, layout.element_size)
        return {"type": "try", "request_id": request_id, "tensor": tid, "verdict": dataclasses.asdict(verdict)}, None
