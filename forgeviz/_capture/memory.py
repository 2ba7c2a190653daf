"""Track storage lifetimes from real ops, categorised from public hooks. Keeps no tensor alive.

A TorchDispatchMode sees every op's outputs below autograd; each new storage gets an alloc event
and a ``weakref.finalize`` that records its free exactly when torch releases it. Categories come
from public hooks, never from names:

- parameter: an ``nn.Parameter``'s storage (seeded, registration hooks, module forward pre-hooks);
- gradient: a parameter's ``.grad`` after a backward pass;
- activation: tensors an autograd Node saved for backward (its ``_saved_*`` attributes, read
  right after the op, with the capture session's TorchFunctionMode);
- optimizer state: tensors in ``optimizer.state`` after ``step()`` (optimizer step post-hook);
- input: tensors passed to a root module's ``forward``;
- temporary: any other op output; other: what already existed when tracking started.
"""

from __future__ import annotations

import array
import functools
import gc
import itertools
import time
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..model import memory as m
from .grads import node_id
from .session import get_session, untraced
from .source import cell_number, source_line, user_location
from .summary import dtype_name

TYPECODES = {"float32": "f", "float64": "d", "uint32": "I", "uint16": "H", "uint8": "B"}


@dataclass
class StorageRecord:
    """What the tracker knows of one live storage."""

    sid: int
    nbytes: int
    dtype: str
    shape: tuple
    category: int
    op: Optional[str]
    module: Optional[str]
    cell: Optional[int]
    line: Optional[int]
    filename: Optional[str]
    node: Optional[int] = None
    node_name: Optional[str] = None


class _AllocMode(TorchDispatchMode):
    """Sees each op's outputs (below autograd) and hands new storages to the tracker."""

    def __init__(self, tracker: "MemoryTracker") -> None:
        super().__init__()
        self.tracker = tracker

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))  # the user's op; its errors are torch's
        try:
            self.tracker.saw_outputs(func, out)
        except Exception as exc:  # noqa: BLE001 - tracking never breaks an op
            self.tracker.fault(f"tracking {func} failed: {exc!r}")
        return out


class MemoryTracker:
    """Allocation events of CPU (and any device's) storages, as columns.

    >>> tracker = MemoryTracker()
    >>> with tracker:
    ...     x = torch.ones(1024, 1024)
    >>> tracker.live_bytes() - tracker.baseline_bytes == x.untyped_storage().nbytes()
    True
    """

    def __init__(self, max_events: int = 1_000_000, fault: Optional[Callable[[str], None]] = None,
                 seed: bool = True) -> None:
        if not isinstance(max_events, int) or max_events < 16:
            raise ValueError(f"max_events: expected an int of at least 16, got {max_events!r}")
        self.max_events = max_events
        self._fault = fault
        self.faults: list[str] = []
        self._columns = {name: array.array(TYPECODES[kind]) for name, kind in m.EVENT_COLUMNS}
        self._live: dict[int, StorageRecord] = {}  # storage data pointer → record
        self._finalizers: dict[int, weakref.finalize] = {}
        self._next_sid = 0
        self._ops: dict[str, int] = {}
        self._modules: dict[str, int] = {}
        self.cells: list[m.CellMark] = []
        self._dropped = 0
        self._peak_bytes = 0
        self._peak_time = 0.0
        self.baseline_bytes = 0
        self._live_bytes = 0
        self._t0 = time.perf_counter()
        self._mode: Optional[_AllocMode] = None
        self._recording = False
        self._handles: list = []
        self._params: dict[int, weakref.ref] = {}  # id → Parameter (a WeakSet would compare tensors)
        self._modules_seen: dict[int, weakref.ref] = {}  # id → module whose parameters were read
        self._states_seen: dict[int, tuple] = {}  # id → (weakref, data_ptr) of categorised optimizer state
        self._module_depth = 0
        self._seed = seed
        self.default_cell: Optional[int] = None  # the cell of code that IPython did not compile itself

    # --- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> "MemoryTracker":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        """Seed with the storages that exist now, install the hooks, enter the dispatch mode."""
        if self._recording:
            return
        self._handles = []
        if self._seed:
            self._seed = False  # once: what exists at the first start is the baseline
            self._seed_existing()
        for p in self._live_params():
            self._watch_grad(p)
        from torch.nn.modules.module import register_module_parameter_registration_hook
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handles += [register_module_parameter_registration_hook(quiet(self._parameter_registered)),
                          register_optimizer_step_post_hook(quiet(self._after_step))]
        self._handles += self._module_hooks()
        self._begin()
        self._recording = True
        get_session().traces.append(self)

    def stop(self) -> None:
        """Stop recording and remove every hook. Frees of what was recorded are still recorded."""
        if not self._recording:
            return
        traces = get_session().traces
        if self in traces:
            traces.remove(self)
        self._recording = False
        self._end()
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def close(self) -> None:
        """Stop and forget every finalizer."""
        self.stop()
        for fin in self._finalizers.values():
            fin.detach()
        self._finalizers.clear()

    def _module_hooks(self) -> list:
        """Global module forward hooks: parameters, inputs and the module depth."""
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        return [register_module_forward_pre_hook(quiet(self._forward_pre)),
                register_module_forward_hook(quiet(self._forward_post), always_call=True)]

    def _begin(self) -> None:
        """Start seeing new storages: here, a TorchDispatchMode sees every op's outputs."""
        self._mode = _AllocMode(self)
        self._mode.__enter__()

    def _end(self) -> None:
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)

    @property
    def active(self) -> bool:
        return self._recording

    backend = "dispatch"
    wants_sites = False  # sees each op itself; the native tracker needs after_op/set_site

    def fault(self, message: str) -> None:
        self.faults.append(message)
        if self._fault is not None:
            self._fault(message)

    # --- events ---------------------------------------------------------------------------
    @property
    def ops(self) -> list[str]:
        """The op names the ``op`` column indexes."""
        return list(self._ops)

    @property
    def modules(self) -> list[str]:
        """The module paths the ``module`` column indexes."""
        return list(self._modules)

    @property
    def count(self) -> int:
        return len(self._columns["time"])

    @property
    def dropped(self) -> int:
        """Events merged away so far to stay within ``max_events``."""
        return self._dropped

    @property
    def peak_bytes(self) -> int:
        return self._peak_bytes

    @property
    def peak_time(self) -> float:
        return self._peak_time

    def live_bytes(self) -> int:
        return self._live_bytes

    def _index(self, table: dict[str, int], value: Optional[str]) -> int:
        if value is None:
            return m.NO_SMALL
        index = table.get(value)
        if index is None:
            if len(table) >= m.NO_SMALL - 1:
                return m.NO_SMALL
            index = table[value] = len(table)
        return index

    def _emit(self, action: int, rec: StorageRecord, when: Optional[float] = None) -> None:
        c = self._columns
        c["time"].append(time.perf_counter() - self._t0 if when is None else when)
        c["bytes"].append(float(rec.nbytes))
        c["storage"].append(rec.sid)
        c["node"].append(m.NO_ID if rec.node is None else rec.node & 0xFFFFFFFF)
        c["op"].append(self._index(self._ops, rec.op))
        c["module"].append(self._index(self._modules, rec.module))
        c["cell"].append(min(rec.cell or 0, m.NO_SMALL))
        c["line"].append(min(rec.line or 0, m.NO_SMALL))
        c["action"].append(action)
        c["category"].append(rec.category)
        if action == m.ALLOC and self._live_bytes > self._peak_bytes:
            self._peak_bytes, self._peak_time = self._live_bytes, c["time"][-1]
        if self.count > self.max_events:
            self._compact()

    def _track(self, storage, category: int, op: Optional[str], shape: tuple, dtype: torch.dtype,
               where: Optional[tuple] = None, when: Optional[float] = None) -> Optional[StorageRecord]:
        key = storage.data_ptr()
        if key in self._live:
            return None
        nbytes = storage.nbytes()
        filename, line = where if where is not None else user_location(4)
        module = _current_module()
        rec = StorageRecord(self._next_sid, nbytes, dtype_name(dtype), tuple(shape), category, op,
                            module, cell_number(filename) or (self.default_cell if filename else None), line, filename)
        self._next_sid += 1
        self._live[key] = rec
        self._live_bytes += nbytes
        self._finalizers[key] = weakref.finalize(storage, self._freed, key, rec.sid)
        self._emit(m.ALLOC, rec, when)
        return rec

    def _freed(self, key: int, sid: int) -> None:
        rec = self._live.get(key)
        if rec is None or rec.sid != sid:
            return
        del self._live[key]
        self._finalizers.pop(key, None)
        self._live_bytes -= rec.nbytes
        self._emit(m.FREE, rec)

    def _lookup(self, key: int) -> Optional[StorageRecord]:
        """The live record at data pointer ``key``, if tracked."""
        return self._live.get(key)

    def _relabel(self, key: int, rec: StorageRecord, category: Optional[int], node: Optional[int] = None,
                 node_name: Optional[str] = None) -> None:
        """Give a live storage a new category and/or the autograd node that saved it."""
        if node is not None and rec.node is None:
            rec.node, rec.node_name = node, node_name
        if category is not None and rec.category != category:
            rec.category = category
            self._emit(m.RECATEGORIZE, rec)

    def _note_tensor(self, rec: StorageRecord, tensor: torch.Tensor) -> None:
        """What a hook learnt of a storage's tensor (its shape and dtype)."""

    def _recategorize(self, tensor: torch.Tensor, category: int, only_from: tuple = ()) -> None:
        if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided or tensor.is_meta:
            return
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        rec = self._lookup(key)
        if rec is None:
            if storage.nbytes():
                self._track(storage, category, None, tuple(tensor.shape), tensor.dtype)
            return
        self._note_tensor(rec, tensor)
        if rec.category == category or (only_from and rec.category not in only_from):
            return
        self._relabel(key, rec, category)

    # --- hooks ----------------------------------------------------------------------------
    def saw_outputs(self, func, out) -> None:
        # The hot path: most outputs are one tensor, often a view of a storage already tracked.
        if isinstance(out, torch.Tensor):
            outputs = (out,)
        elif isinstance(out, (tuple, list)):
            outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        else:
            return
        where = None
        for t in outputs:
            if t.layout != torch.strided or t.is_meta:
                continue
            storage = t.untyped_storage()
            if storage.data_ptr() in self._live or storage.nbytes() == 0:
                continue
            with untraced():
                if where is None:
                    where = user_location(4)
                op = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
                self._track(storage, m.TEMPORARY, op, tuple(t.shape), t.dtype, where)

    def claim_saved(self, grad_fn) -> None:
        """The tensors ``grad_fn`` saved for backward are activations of that autograd node.

        Read from the node's own ``_saved_*`` attributes right after the op made it (no
        saved_tensors_hooks: packing an op's own output would tie it to its grad_fn in a cycle gc
        cannot free, and a detached copy would break double backward).
        """
        if grad_fn is None:
            return
        names = _SAVED_NAMES.get(type(grad_fn))
        if names is None:
            names = _SAVED_NAMES[type(grad_fn)] = _tensor_slots(grad_fn)
        if not names:
            return
        nid = None
        for name in names:
            try:
                value = getattr(grad_fn, name)
            except RuntimeError:  # already freed
                continue
            for t in (value if isinstance(value, (tuple, list)) else (value,)):
                if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.is_meta:
                    continue
                if nid is None:
                    nid = node_id(grad_fn)
                self._claim(t, nid, grad_fn)

    def _claim(self, t: torch.Tensor, nid: int, grad_fn) -> None:
        """``grad_fn`` (node ``nid``) saved ``t``: a temporary's storage is that node's activation."""
        key = t.untyped_storage().data_ptr()
        rec = self._lookup(key)
        if rec is None or rec.category not in _CLAIMABLE:
            return
        self._note_tensor(rec, t)
        self._relabel(key, rec, m.ACTIVATION, nid, grad_fn.name())

    def _forward_pre(self, module, args):
        try:
            self._adopt_module(module, recurse=False)
            if self._module_depth == 0:
                self._adopt_inputs(args)
        except Exception as exc:  # noqa: BLE001
            self.fault(f"reading module parameters failed: {exc!r}")
        self._module_depth += 1

    def _adopt_module(self, module, recurse: bool) -> None:
        """A module's parameters are parameters, read once per module (later ones come through
        _parameter_registered)."""
        seen = self._modules_seen.get(id(module))
        if seen is None or seen() is not module:
            for p in module.parameters(recurse=recurse):
                self._adopt_parameter(p)
            self._modules_seen[id(module)] = weakref.ref(module)

    def _adopt_parameter(self, p: torch.Tensor) -> None:
        if not self._knows(p):
            self._remember(p)
            self._watch_grad(p)
            self._recategorize(p, m.PARAMETER)

    def _adopt_inputs(self, args) -> None:
        """Tensors passed to an outermost module call are its inputs (unless already something more)."""
        if not all(isinstance(a, torch.Tensor) for a in args):  # model(x): no pytree walk needed
            args = tree_flatten(args)[0]
        for a in args:
            self._recategorize(a, m.INPUT, only_from=(m.TEMPORARY, m.OTHER))

    def _parameter_registered(self, module, name, param):
        try:
            if param is not None:
                self._adopt_parameter(param)
        except Exception as exc:  # noqa: BLE001
            self.fault(f"reading a new parameter failed: {exc!r}")
        return None

    def _forward_post(self, module, args, output):
        self._module_depth = max(0, self._module_depth - 1)

    def _knows(self, p: torch.Tensor) -> bool:
        ref = self._params.get(id(p))
        return ref is not None and ref() is p

    def _remember(self, p: torch.Tensor) -> None:
        key = id(p)
        self._params[key] = weakref.ref(p, lambda _: self._params.pop(key, None))

    def _live_params(self) -> list:
        return [p for p in (r() for r in list(self._params.values())) if p is not None]

    def _watch_grad(self, p: torch.Tensor) -> None:
        if p.requires_grad and p.is_leaf:
            self._handles.append(p.register_post_accumulate_grad_hook(self._grad_ready))

    def _grad_ready(self, p: torch.Tensor) -> None:
        try:
            if p.grad is not None:
                self._recategorize(p.grad, m.GRADIENT)
        except Exception as exc:  # noqa: BLE001
            self.fault(f"recording a gradient failed: {exc!r}")

    def _after_step(self, optimizer, args, kwargs) -> None:
        try:
            seen = self._states_seen
            for state in optimizer.state.values():
                for value in state.values():
                    if isinstance(value, torch.Tensor) and value.numel() > 1:
                        # Most state is updated in place, step after step: categorise it once.
                        known = seen.get(id(value))
                        if known is not None and known[0]() is value and known[1] == value.data_ptr():
                            continue
                        self._recategorize(value, m.OPTIMIZER_STATE)
                        seen[id(value)] = (weakref.ref(value), value.data_ptr())
        except Exception as exc:  # noqa: BLE001
            self.fault(f"reading optimizer state failed: {exc!r}")

    def _sync_grads(self) -> None:
        """Parameters' ``.grad`` are gradients (read all at once, where a hook per parameter costs)."""
        try:
            for p in self._live_params():
                if p.grad is not None:
                    self._recategorize(p.grad, m.GRADIENT)
        except Exception as exc:  # noqa: BLE001
            self.fault(f"recording gradients failed: {exc!r}")

    def mark_cell(self, cell: int) -> None:
        self.cells.append(m.CellMark(cell, time.perf_counter() - self._t0, self.count))

    def _seed_existing(self) -> None:
        """Storages that exist now become baseline events at time 0, categorised."""
        with untraced():
            params, grads, states = set(), set(), set()
            tensors = []
            for obj in _gc_objects():
                if isinstance(obj, torch.Tensor):
                    tensors.append(obj)
                elif isinstance(obj, torch.optim.Optimizer):
                    for state in obj.state.values():
                        states.update(id(v) for v in state.values() if isinstance(v, torch.Tensor))
            for t in tensors:
                if isinstance(t, torch.nn.Parameter):
                    params.add(id(t))
                    self._remember(t)
                    if t.grad is not None:
                        grads.add(id(t.grad))
            for t in tensors:
                if t.layout != torch.strided or t.device.type == "meta" or t.is_nested:
                    continue
                try:
                    storage = t.untyped_storage()
                except (RuntimeError, NotImplementedError):
                    continue
                if storage.nbytes() == 0:
                    continue
                category = (m.PARAMETER if id(t) in params else m.GRADIENT if id(t) in grads
                            else m.OPTIMIZER_STATE if id(t) in states else m.OTHER)
                rec = self._track(storage, category, None, tuple(t.shape), t.dtype, (None, None), 0.0)
                if rec is not None:
                    self.baseline_bytes += rec.nbytes
            del tensors

    def _compact(self) -> None:
        """Merge the older half of the history: storages alloc'd and freed there vanish; the
        ones still alive are re-emitted as allocs at the cut, so totals stay exact."""
        c = self._columns
        cut = self.count // 2
        cut_time = float(c["time"][cut])
        freed_before = {c["storage"][i] for i in range(cut) if c["action"][i] == m.FREE}
        keep_alloc = {}
        for i in range(cut):
            sid = c["storage"][i]
            if sid in freed_before:
                continue
            keep_alloc[sid] = i  # the last event before the cut carries its category
        new = {name: array.array(TYPECODES[kind]) for name, kind in m.EVENT_COLUMNS}
        for sid, i in sorted(keep_alloc.items(), key=lambda kv: kv[1]):
            for name in new:
                new[name].append(c[name][i])
            new["action"][-1] = m.ALLOC
            new["time"][-1] = cut_time
        for name in new:
            new[name].extend(c[name][cut:])
        self._dropped += cut - len(keep_alloc)
        self._columns = new
        self.cells = [mark for mark in self.cells if mark.time >= cut_time]
        for mark in self.cells:
            mark.index = mark.index - cut + len(keep_alloc)

    # --- reading ----------------------------------------------------------------------------
    def columns(self, start: int = 0, end: Optional[int] = None) -> dict[str, bytes]:
        """Events ``[start, end)`` of each column as little-endian bytes.

        Copies: a memoryview would pin the arrays, and a free recorded meanwhile (a finalizer can
        run at any allocation) could not append to them.
        """
        return {name: col[start:end].tobytes() for name, col in self._columns.items()}

    def timeline(self, device: str = "cpu", message: Optional[str] = None) -> m.MemoryTimeline:
        return m.MemoryTimeline(1, device, self.count, self.dropped, self.max_events, list(m.CATEGORIES),
                                self.ops, self.modules, list(self.cells), self.peak_bytes,
                                self.peak_time, self.live_bytes(), self.baseline_bytes, message)

    def records(self) -> list[StorageRecord]:
        """What is known of every live tracked storage."""
        return list(self._live.values())

    def known_storages(self, device_type: str) -> dict[int, int]:
        """Data pointer → category of the parameters, gradients and optimizer state the hooks know,
        on one device type (how a CUDA allocator history gets its categories)."""
        out: dict[int, int] = {}
        for ref, _ in list(self._states_seen.values()):
            state = ref()
            if state is not None and state.device.type == device_type:
                out[state.untyped_storage().data_ptr()] = m.OPTIMIZER_STATE
        for p in self._live_params():
            if p.device.type == device_type:
                out[p.untyped_storage().data_ptr()] = m.PARAMETER
                if p.grad is not None:
                    out[p.grad.untyped_storage().data_ptr()] = m.GRADIENT
        return out

    def tracked_bytes(self) -> dict[int, int]:
        """Every live tracked storage: data pointer → nbytes (compare with :func:`live_storage_bytes`)."""
        return {key: rec.nbytes for key, rec in self._live.items()}

    # --- where ops come from (the native tracker needs to be told; this one sees each op) --------
    def after_op(self, out, where: tuple, op: Optional[str] = None) -> None:
        """The op ``op``, called from Python at ``where`` (filename, line), returned ``out``."""

    def set_site(self, where: Optional[tuple]) -> None:
        """Python code at ``where`` is about to run ops Python does not see (a backward pass)."""

    def publish(self, count: int) -> None:
        """The first ``count`` events were sent to a view (the native ledger then never rewrites them)."""

    def name_cell(self, cell: int) -> None:
        """The cell last marked with 0 turned out to be ``cell`` (known once it ran)."""
        if self.cells and self.cells[-1].cell == 0:
            self.cells[-1].cell = cell

    def detail(self, sid: int) -> m.StorageDetail:
        rec = self._live_record(sid)
        alive = rec is not None
        if rec is None:
            rec = self._dead_record(sid)
        return m.StorageDetail(rec.sid, rec.nbytes, rec.dtype, list(rec.shape), m.CATEGORIES[rec.category], rec.op,
                               rec.module, rec.cell, rec.line, source_line(rec.filename, rec.line), rec.node,
                               rec.node_name, None, alive)

    def _live_record(self, sid: int) -> Optional[StorageRecord]:
        return next((r for r in self._live.values() if r.sid == sid), None)

    def _column_arrays(self) -> dict:
        """The event columns as arrays (the tracker's own, not copies: read, never change)."""
        return self._columns

    def _dead_record(self, sid: int) -> StorageRecord:
        c = self._column_arrays()
        ops, modules = self.ops, self.modules
        for i in range(len(c["storage"])):
            if c["storage"][i] == sid:
                op = ops[c["op"][i]] if c["op"][i] < len(ops) else None
                module = modules[c["module"][i]] if c["module"][i] < len(modules) else None
                return StorageRecord(sid, int(c["bytes"][i]), "?", (), c["category"][i], op, module,
                                     c["cell"][i] or None, c["line"][i] or None, None)
        raise KeyError(f"no storage {sid} in this timeline")


def _gc_objects() -> list:
    """The tensors and optimizers among gc.get_objects(), quietly (isinstance on some lazily
    deprecated torch names warns). Decided once per type, and filtered at C speed: an isinstance
    per object cost ~80 ms on a kernel with torch loaded."""
    wanted = (torch.Tensor, torch.optim.Optimizer)
    objects = gc.get_objects()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        keep = {t for t in set(map(type, objects)) if issubclass(t, wanted)}
    return list(itertools.compress(objects, map(keep.__contains__, map(type, objects))))


_SAVED_NAMES: dict[type, list[str]] = {}  # Node type → its _saved_* attribute names
_CLAIMABLE = (m.TEMPORARY, m.OTHER, m.ACTIVATION)  # what a saved tensor's storage may have been


def _tensor_slots(grad_fn) -> list[str]:
    """The ``_saved_*`` attributes of this Node type that can hold tensors: not its saved sizes,
    strides and scalars (AddmmBackward0 saves 8 things, 2 of them tensors), which cost a read each."""
    names = []
    for name in dir(grad_fn):
        if not name.startswith("_saved_"):
            continue
        try:
            value = getattr(grad_fn, name)
        except RuntimeError:  # freed already: keep it, its type is unknown
            names.append(name)
            continue
        items = value if isinstance(value, (tuple, list)) else (value,)
        if any(isinstance(t, torch.Tensor) for t in items) or value is None or not items:
            names.append(name)  # tensors, an optional tensor, or an empty tensor list
    return names


def quiet(hook: Callable) -> Callable:
    """``hook`` with its own tensor reads (``p.grad``, ``.untyped_storage()``) hidden from every
    TorchFunctionMode: hooks run outside forgeviz's mode handler, where each read would otherwise
    cost a trip through ``__torch_function__`` (a third of a small model's ops, before this).

    >>> quiet(lambda t: t.shape)(torch.ones(2))
    torch.Size([2])
    """
    @functools.wraps(hook)
    def run(*args, **kwargs):
        with torch._C.DisableTorchFunction():
            return hook(*args, **kwargs)
    return run


def _current_module() -> Optional[str]:
    try:
        current = get_session().modules.current()
    except Exception:  # noqa: BLE001
        return None
    if not current:
        return None
    _, root_type, path, _ = current
    return path if path else root_type


def live_storage_bytes() -> dict[int, int]:
    """Every live strided storage reachable from a gc walk: data pointer → nbytes."""
    out: dict[int, int] = {}
    for obj in _gc_objects():
        if isinstance(obj, torch.Tensor) and obj.layout == torch.strided and obj.device.type != "meta" \
                and not obj.is_nested:
            try:
                storage = obj.untyped_storage()
            except (RuntimeError, NotImplementedError):
                continue
            if storage.nbytes():
                out[storage.data_ptr()] = storage.nbytes()
    return out


def events_table(tracker: MemoryTracker) -> dict[str, Any]:
    """The events as a columnar table: numpy arrays when numpy is present, else lists."""
    columns = tracker.columns()
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        return {name: array.array(TYPECODES[kind], columns[name]).tolist() for name, kind in m.EVENT_COLUMNS}
    return {name: np.frombuffer(columns[name], dtype=kind) for name, kind in m.EVENT_COLUMNS}


def make_tracker(max_events: int = 1_000_000, fault: Optional[Callable[[str], None]] = None, seed: bool = True,
                 backend: Optional[str] = None) -> MemoryTracker:
    """The fastest tracker that works here: the native CPU ledger, else the dispatch-mode one.

    ``backend`` (or ``$FORGEVIZ_MEMORY_BACKEND``) is ``"native"``, ``"dispatch"`` or ``"auto"``.
    Under "auto", a native ledger that cannot load is reported once through ``fault`` and the
    dispatch-mode tracker is used instead.

    >>> make_tracker(backend="dispatch").backend
    'dispatch'
    """
    import os

    backend = backend or os.environ.get("FORGEVIZ_MEMORY_BACKEND") or "auto"
    if backend not in ("auto", "native", "dispatch"):
        raise ValueError(f"memory backend: expected 'auto', 'native' or 'dispatch', got {backend!r}")
    if backend != "dispatch":
        from .memory_native import NativeMemoryTracker

        try:
            return NativeMemoryTracker(max_events, fault, seed)
        except RuntimeError as exc:
            if backend == "native":
                raise
            if fault is not None and not _told_fallback:
                _told_fallback.append(str(exc))
                fault(f"the native memory tracker is unavailable ({exc}); using the dispatch-mode tracker, "
                      "which costs more per op")
    return MemoryTracker(max_events, fault, seed)


_told_fallback: list[str] = []
