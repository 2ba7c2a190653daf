"""The native CPU ledger: the same events and categories as the dispatch-mode ledger, a fraction of the cost.

``native/cpu_ledger.cpp`` sees every CPU allocation and free at c10's allocator and keeps the
event columns itself. Python adds what only Python knows, at coarse points, never per event:

- where: the cell, line and module of each module call, optimizer step and backward pass (the
  tracker's hooks push them as sites), and, when forgeviz's TorchFunctionMode runs (every notebook
  cell), of each op called from Python (``after_op``);
- categories: the tracker's public hooks (parameters, gradients, optimizer state, inputs, saved
  activations), one call into the ledger each;
- shape and dtype, for storages a hook or an op's output named.

It sees CPU storages only; the dispatch-mode ledger sees every device.
"""

from __future__ import annotations

import array
import ctypes
import os
import weakref
from typing import Callable, Optional

import torch

from ..model import memory as m
from . import native
from .fault import boundary, guarded
from .grads import NODE_IDS
from .ledger import CLAIMABLE, LedgerStats, StorageRecord, intern
from .own import FINALIZER_BYTES, deep_bytes
from .session import current_module_path
from .source import cell_number, user_location
from .summary import dtype_name

_CLAIM_MASK = sum(1 << c for c in CLAIMABLE)
# Shapes and Node names remembered for hovering freed storages (live ones are always kept): a
# training loop frees thousands each step, and what is remembered must not grow with the steps.
_MAX_SHAPES = 4096
_MASKS: dict[tuple, int] = {}  # only_from categories → the ledger's bit mask
_NODE_NAMES: dict[type, str] = {}  # a Node class → its Nodes' name(), where its class says it
_ITEMSIZE = {"float32": 4, "float64": 8, "uint32": 4, "uint16": 2, "uint8": 1}


# the ledger functions the hooks extension calls, in the order its LedgerCalls lists them
_DIRECT_CALLS = ("fv_claim", "fv_name_fresh", "fv_sid_of", "fv_set_context", "fv_recategorize",
                 "fv_recategorize_many", "fv_release_many", "fv_forget_fresh")


def _direct_calls(lib) -> Optional[object]:
    """The gradient hooks extension (``native.hooks()``) bound to ``lib``'s hot functions, or None without it: its
    ``ledger_*`` calls take tensors as they are and cost a C call each, where ctypes converts every argument in
    Python (about 2 µs a call inside a training step; the memory timeline makes several an op).

    >>> _direct_calls(native.load()) is None or callable(_direct_calls(native.load()).ledger_claim)  # doctest: +SKIP
    True
    """
    hooks = native.hooks()
    if hooks is None:
        return None
    address = ctypes.c_void_p
    hooks.ledger_bind(tuple(ctypes.cast(getattr(lib, name), address).value for name in _DIRECT_CALLS))
    return hooks


class NativeLedger:
    """The C++ CPU allocator ledger, told by Python where its allocations come from.

    Raises ``RuntimeError`` (saying why) when the library cannot be built or loaded.

    >>> ledger = NativeLedger(1024, print)  # doctest: +SKIP
    >>> ledger.begin(); x = torch.ones(256); ledger.end()  # doctest: +SKIP
    >>> ledger.stats().live_bytes >= x.untyped_storage().nbytes()  # doctest: +SKIP
    True
    """

    backend = "native"
    wants_sites = True
    # Gradients: one pass over the parameters after a backward or before a step, instead of a
    # Python hook per parameter per backward (the ledger dates the category from the allocation).
    late_categories = True

    def __init__(self, max_events: int, fault: Callable[[str], None]) -> None:
        self.fault = fault
        self.default_cell: Optional[int] = None
        self.cells: list[m.CellMark] = []
        lib = self._lib = native.load()
        self._t0n = lib.fv_now()
        self._h = lib.fv_ledger_new(max_events, self._t0n)
        self._fresh = ctypes.c_int64.from_address(lib.fv_fresh_address(self._h))  # the ledger's counter
        self._direct = None  # the hot calls without ctypes (None: through ctypes, as before)
        with boundary(fault, "binding the ledger's calls to the gradient hooks library"):  # (ctypes then)
            self._direct = _direct_calls(lib)
        # The C++ ledger goes when this one does (its storages' frees then find no ledger to tell).
        weakref.finalize(self, lib.fv_ledger_delete, self._h)
        self._finalizers: dict[int, weakref.finalize] = {}  # storages Python tracks (not the allocator's)
        self._modules: dict[str, int] = {}
        # storage id → (shape, dtype) where known: the tensor's own torch.Size and torch.dtype, kept as
        # they are (made into a tuple and a name only when a record is read: ~20 are kept a step)
        self._shapes: dict[int, tuple[tuple, torch.dtype]] = {}
        self._node_names: dict[int, str] = {}
        self._names_cap = 2 * _MAX_SHAPES  # prune the two tables above beyond this many
        self._files: dict[tuple[int, int], str] = {}  # (cell, line) → filename, to show the source
        self._cuts_seen = 0
        self._sites: list[tuple] = []  # (cell, module, line, op) to restore after a call
        self._site = (0, m.NO_SMALL, 0, m.NO_SMALL)
        self._cell = 0
        self._op_names: list[str] = []
        self._op_ids: dict[str, int] = {}
        self._where_cache: dict[tuple, tuple[int, int, int]] = {}
        # optimizer steps under way: 1 between a step's pre and post hooks, 2 inside a subclass's step()
        # that calls super().step() (torch runs the global step hooks again for the parent's step)
        self._in_step = 0
        self._packed: dict[tuple, int] = {}  # (where, module, cell, op) → the ledger's packed site
        # Op names come from Python (after_op); FORGEVIZ_MEMORY_OPS=aten names the dispatcher op
        # instead (aten::mm inside backward too), for a RecordFunction callback on every op.
        lib.fv_record_ops(int(os.environ.get("FORGEVIZ_MEMORY_OPS") == "aten"))

    # --- recording ------------------------------------------------------------------------
    def begin(self) -> None:
        self._sites.clear()
        self._site = (self._cell, m.NO_SMALL, 0, m.NO_SMALL)
        self._lib.fv_set_context(self._h, *self._site)
        self._lib.fv_ledger_recording(self._h, 1)

    def end(self) -> None:
        self._lib.fv_ledger_recording(self._h, 0)
        self._in_step = 0  # a step that raised never ran its post hook

    def close(self) -> None:
        for fin in self._finalizers.values():
            fin.detach()
        self._finalizers.clear()

    def publish(self, count: int) -> None:
        self._lib.fv_publish(self._h, count)

    # --- sites: where allocations come from ---------------------------------------------------
    def _set_site(self, site: tuple[int, int, int, int]) -> None:
        if site != self._site:
            self._site = site
            (self._direct.ledger_set_context if self._direct is not None else self._lib.fv_set_context)(self._h, *site)

    def _where(self, where: Optional[tuple], module: Optional[str]) -> tuple[int, int, int]:
        # Called for every allocating op: the same few lines recur, step after step.
        key = (where, module, self._cell)
        found = self._where_cache.get(key)
        if found is None:
            if len(self._where_cache) > 100_000:
                self._where_cache.clear()
            found = self._where_cache[key] = self._locate(where, module)
        return found

    def _locate(self, where: Optional[tuple], module: Optional[str]) -> tuple[int, int, int]:
        filename, line = where if where is not None else (None, None)
        cell = cell_number(filename) or self._cell
        if filename and line:
            self._files[(cell, min(line, m.NO_SMALL))] = filename
        return cell, intern(self._modules, module), min(line or 0, m.NO_SMALL)

    def _op_id(self, name: Optional[str]) -> int:
        if name is None:
            return m.NO_SMALL
        op = self._op_ids.get(name)
        if op is None:
            op = self._op_ids[name] = self._lib.fv_intern(name.encode())
        return op

    def push_site(self, where: Optional[tuple], module: Optional[str], op: Optional[str] = None) -> None:
        self._sites.append(self._site)
        self._set_site((*self._where(where, module), self._op_id(op)))

    def push_module(self, module: Optional[str]) -> None:
        self._sites.append(self._site)
        cell, _, line, op = self._site
        self._set_site((cell, intern(self._modules, module), line, op))

    def pop_site(self) -> None:
        self._set_site(self._sites.pop() if self._sites else (self._cell, m.NO_SMALL, 0, m.NO_SMALL))

    def step_begins(self, where: tuple, name: str) -> None:
        # A step runs dozens of small ops per parameter: the step's line and "Adam.step" name
        # what they allocate (forgeviz's mode steps aside meanwhile, so no op is named one by one).
        self._in_step += 1
        if self._in_step > 1:  # super().step() inside the step: the outer step names what it allocates
            return
        self.push_site(where, None, name)
        self._forget_fresh()

    def step_ends(self) -> None:
        if not self._in_step:
            return
        self._in_step -= 1
        if not self._in_step:  # the step's allocations have their names: the next op must not claim them
            self._forget_fresh()
            self.pop_site()

    def _forget_fresh(self) -> None:
        (self._direct.ledger_forget_fresh if self._direct is not None else self._lib.fv_forget_fresh)(self._h)

    def after_op(self, out, where: tuple, op: Optional[str] = None) -> None:
        """Name what the op ``op`` called at ``where`` just allocated (its outputs and intermediates):
        the op, the line in the cell, and the outputs' shape and dtype."""
        module = current_module_path()
        key = (where, module, self._cell, op)
        site = self._packed.get(key)
        if site is None:  # the same few lines and ops recur, step after step
            if len(self._packed) > 100_000:
                self._packed.clear()
            cell, module_id, line = self._where(where, module)
            site = self._packed[key] = (self._op_id(op) | (cell & 0xFFFF) << 16 | (line & 0xFFFF) << 32
                                        | (module_id & 0xFFFF) << 48)
        if self._direct is not None:  # the calls below, in one C call
            self._direct.ledger_name_fresh(self._h, site, out, self._shapes)
            self._prune_names()
            return
        if isinstance(out, torch.Tensor):  # most ops: one output, which rides along with the naming call
            outputs = (out,) if out.layout == torch.strided else ()
        else:
            outputs = [t for t in (out if isinstance(out, (tuple, list)) else ())
                       if isinstance(t, torch.Tensor) and t.layout == torch.strided]
        # A CUDA or meta output's pointer is simply not in this CPU ledger.
        first = outputs[0] if outputs else None
        sid = self._lib.fv_name_fresh(self._h, site, first.untyped_storage().data_ptr() if first is not None else 0,
                                      float(first.numel() * first.element_size()) if first is not None else 0.0)
        if sid >= 0 and sid not in self._shapes:
            self._remember_shape(sid, first)
        for t in outputs[1:]:
            sid = self._lib.fv_sid_of(self._h, t.untyped_storage().data_ptr(), float(t.numel() * t.element_size()))
            if sid >= 0:
                self._remember_shape(sid, t)

    def allocated_since(self) -> bool:
        """Whether anything was allocated since the last after_op (a view or an in-place op: no)."""
        return self._fresh.value > 0

    # --- cells ----------------------------------------------------------------------------
    def mark_cell(self, cell: int) -> None:
        self._sync_cuts()
        self._cell = cell or (self.default_cell or 0)
        self.cells.append(m.CellMark(cell, self._lib.fv_now() - self._t0n, self.stats().count))
        self._in_step = 0  # a step that raised in the last cell never ran its post hook
        self._sites.clear()
        self._set_site((self._cell, m.NO_SMALL, 0, m.NO_SMALL))

    def name_cell(self, cell: int) -> None:
        if self.cells and self.cells[-1].cell == 0:
            self._lib.fv_patch_cell(self._h, self.cells[-1].index, 0, cell)
            self._files.update({(cell, line): f for (c, line), f in list(self._files.items()) if c == 0})
            self.cells[-1].cell = cell
        if self._cell == 0:
            self._cell = cell

    def cell_marks(self) -> list[m.CellMark]:
        self._sync_cuts()
        return list(self.cells)

    def _sync_cuts(self) -> None:
        """Move cell marks as the ledger merged older history (it compacts on its own)."""
        compactions = self._lib.fv_stats(self._h, (ctypes.c_double * 5)())
        while self._cuts_seen < compactions:
            cut = (ctypes.c_double * 3)()
            self._lib.fv_cut(self._h, self._cuts_seen, cut)
            index, kept, cut_time = int(cut[0]), int(cut[1]), cut[2]
            self.cells = [mark for mark in self.cells if mark.time >= cut_time]
            for mark in self.cells:
                mark.index = max(0, mark.index - index + kept)
            self._cuts_seen += 1
        self._forget_old_names()

    def _forget_old_names(self, hot: bool = False) -> None:
        """Keep the shapes and Node names of live storages and the most recent ones: a training run
        makes new storages and Nodes every step, and hovering a long-freed one may say less. On the
        ``hot`` path (an op) only past twice what stayed last time; when a view reads, past that."""
        cap = self._names_cap if hot else self._names_cap // 2
        if len(self._shapes) > cap or len(self._node_names) > cap:
            records = [rec for _, rec in self.live()]
            live = {rec.sid for rec in records}
            newest = max(self._shapes, default=0) - _MAX_SHAPES // 2
            self._shapes = {sid: v for sid, v in self._shapes.items() if sid in live or sid >= newest}
            live = {rec.node for rec in records}
            newest = max(self._node_names, default=0) - _MAX_SHAPES // 2
            self._node_names = {n: v for n, v in self._node_names.items() if n in live or n >= newest}
            # what stays is (mostly) alive: a graph of 10,000 saved storages must not prune at every op
            self._names_cap = 2 * max(_MAX_SHAPES, len(self._shapes), len(self._node_names))

    # --- the ledger's totals and tables -----------------------------------------------------
    def own_bytes(self) -> int:
        """What this ledger holds for itself: its C++ columns and tables, and its Python tables."""
        tables = [self._shapes, self._node_names, self._files, self._modules, self._op_ids, self._where_cache,
                  self._packed, self.cells]
        return int(self._lib.fv_own_bytes(self._h)) + deep_bytes(tables) + FINALIZER_BYTES * len(self._finalizers)

    def stats(self) -> LedgerStats:
        out = (ctypes.c_double * 5)()
        self._lib.fv_stats(self._h, out)
        return LedgerStats(int(out[0]), int(out[1]), int(out[2]), int(out[3]), out[4])

    @property
    def ops(self) -> list[str]:
        """The op names the ``op`` column indexes (the ledger's table only grows)."""
        for i in range(len(self._op_names), self._lib.fv_op_count()):
            name = self._lib.fv_op_name(i)
            # "autograd::engine::evaluate_function: MmBackward0" is the autograd Node running
            self._op_names.append(name.decode().removeprefix("aten::").removeprefix(
                "autograd::engine::evaluate_function: ") if name else "?")
        return self._op_names

    @property
    def modules(self) -> list[str]:
        return list(self._modules)

    # --- storages -------------------------------------------------------------------------
    def track(self, storage, category: int, op: Optional[str], shape: tuple, dtype: torch.dtype,
              where: Optional[tuple] = None, when: Optional[float] = None) -> Optional[StorageRecord]:
        key = storage.data_ptr()
        nbytes = storage.nbytes()
        if where is None:
            where = user_location(4)
        cell, module, line = (self._where(where, current_module_path()) if where != (None, None)
                              else (0, m.NO_SMALL, 0))
        sid = self._lib.fv_track(self._h, key, float(nbytes), category, op.encode() if op else None, module, cell,
                                 line, -1.0 if when is None else when)
        if sid < 0:
            return None
        name = dtype_name(dtype)
        self._shapes[sid] = (tuple(shape), dtype)
        # Not the allocator's (it existed before, or came from numpy): Python reports its free.
        self._finalizers[key] = weakref.finalize(storage, self._freed, key, sid)
        return StorageRecord(sid, nbytes, name, tuple(shape), category, op, None, cell or None, line or None,
                             where[0])

    @guarded("recording a storage's free")  # a finalizer: its error would print under the user's cell
    def _freed(self, key: int, sid: int) -> None:
        fin = self._finalizers.get(key)
        if fin is not None and not fin.alive:
            del self._finalizers[key]
        self._lib.fv_untrack(self._h, key, sid)

    def _record(self, r: native.FvRecord) -> StorageRecord:
        shape, dtype = self._shapes.get(r.sid, ((), None))
        ops, modules = self.ops, list(self._modules)
        cell, line = r.cell or None, r.line or None
        return StorageRecord(
            r.sid, int(r.bytes), "?" if dtype is None else dtype_name(dtype), tuple(shape), r.category,
            ops[r.op] if r.op < len(ops) else None,
            modules[r.module] if r.module < len(modules) else None, cell, line,
            self._files.get((r.cell, r.line)), None if r.node == m.NO_ID else r.node, self._node_names.get(r.node))

    def lookup(self, key: int) -> Optional[StorageRecord]:
        r = native.FvRecord()
        return self._record(r) if self._lib.fv_lookup(self._h, key, ctypes.byref(r)) else None

    def find(self, sid: int) -> tuple[StorageRecord, bool]:
        r = native.FvRecord()
        found = self._lib.fv_find(self._h, sid & 0xFFFFFFFF, ctypes.byref(r))  # 0: none, 1: live, 2: freed
        if found == 0:
            raise KeyError(f"no storage {sid} in this timeline")
        return self._record(r), found == 1

    def recategorize(self, tensor: torch.Tensor, category: int, only_from: tuple = ()) -> None:
        # The hooks' hot path (every gradient and optimizer state, every step): one call, no record.
        mask = _MASKS.get(only_from)
        if mask is None:
            mask = _MASKS[only_from] = sum(1 << c for c in only_from)
        if self._direct is not None:
            sid = self._direct.ledger_recategorize(self._h, tensor, category, m.NO_ID, mask)
            if sid == -2:
                return  # not a CPU tensor: this ledger is CPU memory; CUDA memory has the allocator's own history
        elif not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided or not tensor.is_cpu:
            return
        else:
            sid = self._lib.fv_recategorize(self._h, tensor.untyped_storage().data_ptr(), category, m.NO_ID, mask)
        if sid < 0:
            storage = tensor.untyped_storage()
            if storage.nbytes():
                self.track(storage, category, None, tuple(tensor.shape), tensor.dtype)
        else:
            self._remember_shape(sid, tensor)

    def recategorize_all(self, tensors: list, category: int) -> None:
        # After every backward, every parameter's .grad: one call into the ledger for all of them.
        if self._direct is not None:
            sids = self._direct.ledger_recategorize_many(self._h, tensors, category)  # (-2: not a CPU tensor)
        else:
            tensors = [t for t in tensors if t.layout == torch.strided and t.is_cpu]
            if not tensors:
                return
            ptrs = array.array("Q", [t.untyped_storage().data_ptr() for t in tensors])
            sids = array.array("q", bytes(8 * len(ptrs)))
            self._lib.fv_recategorize_many(self._h, ptrs.buffer_info()[0], len(ptrs), category, sids.buffer_info()[0])
        shapes = self._shapes
        for t, sid in zip(tensors, sids):
            if sid == -1:
                self.recategorize(t, category)  # not tracked yet: tracked now
            elif sid >= 0 and sid not in shapes:
                self._remember_shape(sid, t)

    def recategorize_grads(self, params: dict, category: int) -> bool:
        """The ``.grad`` of each live parameter among ``params`` (id → weakref) made ``category``, as
        :meth:`recategorize_all` of them does, in one C call; False (nothing done) without the hooks extension.

        >>> NativeLedger(1024, print).recategorize_grads({}, m.GRADIENT)  # doctest: +SKIP
        True
        """
        if self._direct is None:
            return False
        for sid, grad in self._direct.ledger_recategorize_grads(self._h, params, category, self._shapes):
            if sid < 0:
                self.recategorize(grad, category)  # not tracked yet: tracked now
            else:
                self._remember_shape(sid, grad)
        return True

    def claim(self, t: torch.Tensor, nid: int, grad_fn) -> Optional[tuple[int, int]]:
        # Every forward op with a grad_fn comes here: one call into the ledger, no record built.
        node = nid & 0xFFFFFFFF
        if self._direct is not None:  # (a tensor off the CPU: None)
            got = self._direct.ledger_claim(self._h, t, node, _CLAIM_MASK, m.ACTIVATION)
            if got is None:
                return None
            key, sid = got
        else:
            if not t.is_cpu:  # (is_cpu: a sixth of device.type's cost, on the hot path)
                return None
            key = t.untyped_storage().data_ptr()
            sid = self._lib.fv_claim(self._h, key, node, _CLAIM_MASK, m.ACTIVATION)
            if sid < 0:
                return None
        self._name_node(node, grad_fn)
        self._remember_shape(sid, t)
        return key, sid

    @property
    def claim_saved_directly(self) -> Optional[Callable]:
        """:meth:`claim_saved` with the gradient hooks extension, else None (MemoryTracker's own loop then)."""
        return self.claim_saved if self._direct is not None else None

    def claim_saved(self, grad_fn, names: list, claims: dict, gone_append: Callable[[int], None],
                    gone_key: str) -> None:
        """MemoryTracker.claim_saved's reads and claims for ``grad_fn`` in one call (native/grad_hooks.cpp's
        ledger_claim_saved): each of its saved tensors ``names`` claimed as :meth:`claim` does; ``claims[nid]``
        and the Node's NodeGone (``gone_append(nid)`` when it dies, at ``metadata[gone_key]``) set when one was,
        with the Node's name and the storages' shapes. Only with the hooks extension (``self._direct``)."""
        if self._direct.ledger_claim_saved(self._h, grad_fn, names, NODE_IDS, claims, gone_append, gone_key,
                                           _CLAIM_MASK, m.ACTIVATION, self._shapes, self._node_names):
            self._prune_names()

    def _prune_names(self) -> None:
        """The shapes and Node names tables pruned once past their cap (see _forget_old_names)."""
        if len(self._shapes) > self._names_cap or len(self._node_names) > self._names_cap:
            self._forget_old_names(hot=True)

    def _name_node(self, node: int, grad_fn) -> None:
        if node not in self._node_names:
            # a C++ Node's class is named as its name() (which demangles its C++ type at every call)
            cls = type(grad_fn)
            name = _NODE_NAMES.get(cls)
            if name is None:
                name = grad_fn.name()
                if cls.__name__ == name:
                    _NODE_NAMES[cls] = name
            self._node_names[node] = name
            if len(self._node_names) > self._names_cap:  # a long loop that nobody reads meanwhile
                self._forget_old_names(hot=True)

    def release(self, key: int, sid: int) -> None:
        self._lib.fv_release(self._h, key, sid)

    def release_all(self, claims: list) -> None:
        if claims and self._direct is not None:
            self._direct.ledger_release_many(self._h, claims)
        elif claims:
            keys, sids = array.array("Q", [k for k, _ in claims]), array.array("q", [s for _, s in claims])
            self._lib.fv_release_many(self._h, keys.buffer_info()[0], sids.buffer_info()[0], len(keys))

    def _remember_shape(self, sid: int, tensor: torch.Tensor) -> None:
        """The first tensor seen on a storage names its shape and dtype (the ledger knows bytes only)."""
        if sid not in self._shapes:  # (a plain tuple: the garbage collector untracks it, not a torch.Size)
            self._shapes[sid] = (tuple(tensor.shape), tensor.dtype)
            if len(self._shapes) > self._names_cap:
                self._forget_old_names(hot=True)

    def live(self) -> list[tuple[int, StorageRecord]]:
        cap = 256
        while True:
            ptrs, recs = (ctypes.c_uint64 * cap)(), (native.FvRecord * cap)()
            n = self._lib.fv_live(self._h, ptrs, recs, cap)
            if n <= cap:
                return [(ptrs[i], self._record(recs[i])) for i in range(n)]
            cap = n + 256  # more appeared between the two calls: ask again

    def columns(self, start: int = 0, end: Optional[int] = None) -> dict[str, bytes]:
        count = self.stats().count
        end = count if end is None else max(start, min(end, count))
        n = max(0, end - start)
        buffers = [ctypes.create_string_buffer(max(1, n * _ITEMSIZE[kind])) for _, kind in m.EVENT_COLUMNS]
        pointers = (ctypes.c_void_p * len(buffers))(*[ctypes.addressof(b) for b in buffers])
        got = self._lib.fv_copy(self._h, start, start + n, pointers)
        return {name: buf.raw[:got * _ITEMSIZE[kind]] for (name, kind), buf in zip(m.EVENT_COLUMNS, buffers)}
