"""The dispatch-mode ledger: a TorchDispatchMode sees every op's outputs, on any device.

Each new storage gets an alloc event and a ``weakref.finalize`` that records its free exactly when
torch releases it. The events are Python arrays, merged when there are more than ``max_events``.
"""

from __future__ import annotations

import array
import time
import weakref
from typing import Callable, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..model import memory as m
from .fault import boundary, guarded
from .ledger import CLAIMABLE, TYPECODES, LedgerStats, StorageRecord, intern
from .own import FINALIZER_BYTES, deep_bytes
from .session import current_module_path, leave_traceback
from .source import cell_number, user_location
from .summary import dtype_name
from .untraced import untraced


class _AllocMode(TorchDispatchMode):
    """Sees each op's outputs (below autograd) and hands new storages to the ledger."""

    def __init__(self, ledger: "DispatchLedger") -> None:
        super().__init__()
        self.ledger = ledger

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        try:
            out = func(*args, **(kwargs or {}))  # the user's op; its errors are torch's
        except BaseException as exc:
            leave_traceback(exc)  # its traceback, as without forgeviz
            raise
        with boundary(self.ledger.fault, "tracking an op's new storages"):  # tracking never breaks an op
            self.ledger.saw_outputs(func, out)
        return out


class DispatchLedger:
    """Storages of every device, seen at the dispatcher; events as Python arrays.

    >>> ledger = DispatchLedger(1024, print)
    >>> ledger.begin(); x = torch.ones(256); ledger.end()
    >>> ledger.stats().live_bytes == x.untyped_storage().nbytes()
    True
    """

    backend = "dispatch"
    wants_sites = False  # sees each op itself
    late_categories = False  # an event per recategorisation, dated when it happens

    def __init__(self, max_events: int, fault: Callable[[str], None]) -> None:
        self.max_events = max_events
        self.fault = fault
        self.default_cell: Optional[int] = None
        self.cells: list[m.CellMark] = []
        self._columns = {name: array.array(TYPECODES[kind]) for name, kind in m.EVENT_COLUMNS}
        self._live: dict[int, StorageRecord] = {}  # storage data pointer → record
        self._finalizers: dict[int, weakref.finalize] = {}
        self._next_sid = 0
        self._ops: dict[str, int] = {}
        self._modules: dict[str, int] = {}
        self._dropped = 0
        self._peak_bytes = 0
        self._peak_time = 0.0
        self._live_bytes = 0
        self._t0 = time.perf_counter()
        self._mode: Optional[_AllocMode] = None

    # --- recording ------------------------------------------------------------------------
    def begin(self) -> None:
        self._mode = _AllocMode(self)
        self._mode.__enter__()

    def end(self) -> None:
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)

    def close(self) -> None:
        for fin in self._finalizers.values():
            fin.detach()
        self._finalizers.clear()

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
                self.track(storage, m.TEMPORARY, op, tuple(t.shape), t.dtype, where)

    # --- storages -------------------------------------------------------------------------
    def track(self, storage, category: int, op: Optional[str], shape: tuple, dtype: torch.dtype,
              where: Optional[tuple] = None, when: Optional[float] = None) -> Optional[StorageRecord]:
        key = storage.data_ptr()
        if key in self._live:
            return None
        nbytes = storage.nbytes()
        filename, line = where if where is not None else user_location(4)
        module = current_module_path()
        rec = StorageRecord(self._next_sid, nbytes, dtype_name(dtype), tuple(shape), category, op,
                            module, cell_number(filename) or (self.default_cell if filename else None), line, filename)
        self._next_sid += 1
        self._live[key] = rec
        self._live_bytes += nbytes
        self._finalizers[key] = weakref.finalize(storage, self._freed, key, rec.sid)
        self._emit(m.ALLOC, rec, when)
        return rec

    @guarded("recording a storage's free")  # a finalizer: its error would print under the user's cell
    def _freed(self, key: int, sid: int) -> None:
        rec = self._live.get(key)
        if rec is None or rec.sid != sid:
            return
        del self._live[key]
        self._finalizers.pop(key, None)
        self._live_bytes -= rec.nbytes
        self._emit(m.FREE, rec)

    def lookup(self, key: int) -> Optional[StorageRecord]:
        return self._live.get(key)

    def _relabel(self, rec: StorageRecord, category: Optional[int], node: Optional[int] = None,
                 node_name: Optional[str] = None) -> None:
        """Give a live storage a new category and/or the autograd node that saved it."""
        if node is not None and rec.node is None:
            rec.node, rec.node_name = node, node_name
        if category is not None and rec.category != category:
            rec.category = category
            self._emit(m.RECATEGORIZE, rec)

    def recategorize(self, tensor: torch.Tensor, category: int, only_from: tuple = ()) -> None:
        if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided or tensor.is_meta:
            return
        storage = tensor.untyped_storage()
        rec = self._live.get(storage.data_ptr())
        if rec is None:
            if storage.nbytes():
                self.track(storage, category, None, tuple(tensor.shape), tensor.dtype)
            return
        if only_from and (rec.own if rec.claims else rec.category) not in only_from:
            return
        if rec.claims:
            if category in CLAIMABLE:
                rec.own = category
                return
            rec.claims = 0
        self._relabel(rec, category)

    def recategorize_all(self, tensors: list, category: int) -> None:
        for t in tensors:
            self.recategorize(t, category)

    def claim(self, t: torch.Tensor, nid: int, grad_fn) -> Optional[tuple[int, int]]:
        key = t.untyped_storage().data_ptr()
        rec = self._live.get(key)
        if rec is None:
            return None
        if rec.claims:
            rec.claims += 1
            return key, rec.sid
        if rec.category not in CLAIMABLE:
            return None
        rec.own, rec.claims = rec.category, 1
        self._relabel(rec, m.ACTIVATION, nid, grad_fn.name())
        return key, rec.sid

    def release(self, key: int, sid: int) -> None:
        rec = self._live.get(key)
        if rec is None or rec.sid != sid or not rec.claims:
            return
        rec.claims -= 1
        if not rec.claims:
            self._relabel(rec, rec.own)

    def release_all(self, claims: list) -> None:
        for key, sid in claims:
            self.release(key, sid)

    def own_bytes(self) -> int:
        """What this ledger holds for itself: its event columns, records and finalizers."""
        columns = sum(col.buffer_info()[1] * col.itemsize for col in self._columns.values())
        tables = deep_bytes([self._live, self._ops, self._modules, self.cells])
        return columns + tables + FINALIZER_BYTES * len(self._finalizers)

    def live(self) -> list[tuple[int, StorageRecord]]:
        return list(self._live.items())

    def find(self, sid: int) -> tuple[StorageRecord, bool]:
        rec = next((r for r in self._live.values() if r.sid == sid), None)
        if rec is not None:
            return rec, True
        c, ops, modules = self._columns, self.ops, self.modules
        for i in range(len(c["storage"])):
            if c["storage"][i] == sid:
                op = ops[c["op"][i]] if c["op"][i] < len(ops) else None
                module = modules[c["module"][i]] if c["module"][i] < len(modules) else None
                return StorageRecord(sid, int(c["bytes"][i]), "?", (), c["category"][i], op, module,
                                     c["cell"][i] or None, c["line"][i] or None, None), False
        raise KeyError(f"no storage {sid} in this timeline")

    # --- events ---------------------------------------------------------------------------
    @property
    def ops(self) -> list[str]:
        return list(self._ops)

    @property
    def modules(self) -> list[str]:
        return list(self._modules)

    @property
    def _count(self) -> int:
        return len(self._columns["time"])

    def stats(self) -> LedgerStats:
        return LedgerStats(self._count, self._dropped, self._live_bytes, self._peak_bytes, self._peak_time)

    def _emit(self, action: int, rec: StorageRecord, when: Optional[float] = None) -> None:
        c = self._columns
        c["time"].append(time.perf_counter() - self._t0 if when is None else when)
        c["bytes"].append(float(rec.nbytes))
        c["storage"].append(rec.sid)
        c["node"].append(m.NO_ID if rec.node is None else rec.node & 0xFFFFFFFF)
        c["op"].append(intern(self._ops, rec.op))
        c["module"].append(intern(self._modules, rec.module))
        c["cell"].append(min(rec.cell or 0, m.NO_SMALL))
        c["line"].append(min(rec.line or 0, m.NO_SMALL))
        c["action"].append(action)
        c["category"].append(rec.category)
        if action == m.ALLOC and self._live_bytes > self._peak_bytes:
            self._peak_bytes, self._peak_time = self._live_bytes, c["time"][-1]
        if self._count > self.max_events:
            self._compact()

    def _compact(self) -> None:
        """Merge the older half of the history: storages alloc'd and freed there vanish; the
        ones still alive are re-emitted as allocs at the cut, so totals stay exact."""
        c = self._columns
        cut = self._count // 2
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

    def columns(self, start: int = 0, end: Optional[int] = None) -> dict[str, bytes]:
        # Copies: a memoryview would pin the arrays, and a free recorded meanwhile (a finalizer can
        # run at any allocation) could not append to them.
        return {name: col[start:end].tobytes() for name, col in self._columns.items()}

    def publish(self, count: int) -> None:
        """Nothing to do: this ledger never rewrites an event (the native one may, until published)."""

    # --- cells ----------------------------------------------------------------------------
    def mark_cell(self, cell: int) -> None:
        self.cells.append(m.CellMark(cell, time.perf_counter() - self._t0, self._count))

    def name_cell(self, cell: int) -> None:
        if self.cells and self.cells[-1].cell == 0:
            self.cells[-1].cell = cell

    def cell_marks(self) -> list[m.CellMark]:
        return list(self.cells)
