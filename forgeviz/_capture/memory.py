"""Track storage lifetimes from real ops, categorised from public hooks. Keeps no tensor alive.

A :class:`MemoryTracker` owns a storage ledger (``ledger.py``: the native CPU allocator ledger, or
a TorchDispatchMode with a ``weakref.finalize`` per storage) that records when storages come and
go. The tracker adds what each storage is. Categories come from public hooks, never from names:

- parameter: an ``nn.Parameter``'s storage (seeded, registration hooks, module forward pre-hooks);
- buffer: a module's buffer (running statistics, anything ``register_buffer`` keeps), found the same ways;
- gradient: a parameter's ``.grad`` after a backward pass;
- activation: a temporary (or older) storage while an autograd Node saves it for backward (its
  ``_saved_*`` attributes, read right after the op, with the capture session's TorchFunctionMode).
  It goes back to its own category, an event on the timeline, when the last Node that saved it
  frees its saved tensors (a backward without ``retain_graph``) or dies;
- optimizer state: tensors in ``optimizer.state`` after ``step()`` (optimizer step post-hook);
- input: tensors passed to a root module's ``forward``;
- temporary: any other op output; other: what already existed when tracking started.
"""

from __future__ import annotations

import array
import functools
import gc
import itertools
import operator
import time
import warnings
import weakref
from collections import defaultdict, deque
from typing import Any, Callable, NamedTuple, Optional

import torch
from torch.utils._pytree import tree_flatten

from ..model import memory as m
from . import native
from .fault import boundary, guarded
from .grads import NodeGone, iter_graph, node_id
from .ledger import TYPECODES, LedgerFactory, StorageLedger, StorageRecord
from .ledger_dispatch import DispatchLedger
from .modules import module_hooks
from .own import deep_bytes
from .saved import tensor_slots
from .session import current_module_path, get_session
from .source import source_line, user_location
from .storage import real_storage
from .untraced import untraced


class _Unlisten:
    """A hook handle that takes a tracker off the module stack's root listeners."""

    def __init__(self, listeners: list, tracker) -> None:
        self.listeners, self.tracker = listeners, tracker

    def remove(self) -> None:
        if self.tracker in self.listeners:
            self.listeners.remove(self.tracker)


def _ledger_stat(name: str, doc: str) -> property:
    """A read-only figure of the tracker's ledger's ``stats()``, by name."""
    return property(lambda tracker: getattr(tracker.ledger.stats(), name), doc=doc)


class MemoryTracker:
    """Allocation events of storages, categorised, as columns (kept by its ``ledger``).

    ``ledger`` builds the storage ledger (``ledger(max_events, fault)``): the dispatch-mode one by
    default; :func:`~forgeviz._capture.memory_choice.make_tracker` picks the fastest that works.

    >>> tracker = MemoryTracker()
    >>> with tracker:
    ...     x = torch.ones(1024, 1024)
    >>> tracker.live_bytes() - tracker.baseline_bytes == x.untyped_storage().nbytes()
    True
    """

    def __init__(self, max_events: int = 1_000_000, fault: Optional[Callable[[str], None]] = None,
                 seed: bool = True, ledger: Optional[LedgerFactory] = None,
                 carry: Optional[dict[int, StorageRecord]] = None) -> None:
        if not isinstance(max_events, int) or max_events < 16:
            raise ValueError(f"max_events: expected an int of at least 16, got {max_events!r}")
        self.max_events = max_events
        self.faults: list[str] = []
        # fault(message): a failure inside forgeviz, kept here and reported. It holds no reference
        # to the tracker, so the ledger that reports through it dies with the tracker, not at a gc pass.
        self.fault = _reporter(self.faults, fault)
        self.ledger: StorageLedger = (ledger or DispatchLedger)(max_events, self.fault)
        self.wants_sites = self.ledger.wants_sites  # forgeviz's mode tells it where each op comes from
        if self.wants_sites:  # per op: forgeviz's mode calls the ledger itself, with no call in between
            self.after_op = self.ledger.after_op
            self.allocated_since = self.ledger.allocated_since
        self.baseline_bytes = 0
        self._recording = False
        self._handles: list = []
        self._params: dict[int, weakref.ref] = {}  # id → Parameter (a WeakSet would compare tensors)
        self._modules_seen: dict[int, weakref.ref] = {}  # id → module whose parameters were read
        self._states_seen: dict[int, tuple] = {}  # id → (weakref, data_ptr) of categorised optimizer state
        self._module_depth = 0
        self._seed = seed
        # What an earlier tracker knew of the storages alive now (data pointer → record): the seed
        # keeps their categories, ops and lines (memory_choice.switch_to_native).
        self._carry = carry or {}
        self._grads_synced = False  # since the last optimizer step, by a backward's end (late categories)
        # Node id → (a _saved_* attribute to probe, [(data pointer, storage id)] it claimed as activations)
        self._claims: dict[int, tuple[str, list[tuple[int, int]]]] = {}
        self._gone: deque = deque()  # ids of claiming Nodes that died, to release
        self._gone_key = f"fv_claims_{next(_tracker_ids)}"  # its sentinel's key in a Node's metadata
        # claim_saved's reads and claims in one call, where the ledger has one (the native ledger, with the
        # gradient hooks extension built): see NativeLedger.claim_saved
        self._claim_direct = getattr(self.ledger, "claim_saved_directly", None)
        self._own: tuple[float, Optional[int]] = (0.0, None)  # (when, bytes) of the last own_bytes()

    # --- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> "MemoryTracker":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        """Seed with the storages that exist now, install the hooks, start the ledger."""
        if self._recording:
            return
        self._handles = []
        if self._seed:
            self._seed = False  # once: what exists at the first start is the baseline
            self._seed_existing()
        for p in self._live_params():
            self._watch_grad(p)
        from torch.nn.modules.module import (
            register_module_buffer_registration_hook,
            register_module_parameter_registration_hook,
        )
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        try:
            self._handles += [register_module_parameter_registration_hook(quiet(self._parameter_registered)),
                              register_module_buffer_registration_hook(quiet(self._buffer_registered)),
                              register_optimizer_step_post_hook(quiet(self._after_step))]
            if self.wants_sites:
                self._handles.append(register_optimizer_step_pre_hook(quiet(self._step_pre)))
            self._handles += self._module_hooks()
            self.ledger.begin()
        except BaseException:  # (the caller's fault boundary reports it) no hook of a failed start stays
            self._remove_hooks()
            raise
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
        try:
            self.ledger.end()
            self._release_gone()
            if self.ledger.late_categories:
                self._sync_grads()
        finally:  # (a fault above is the caller's boundary's to report) the hooks go regardless
            self._remove_hooks()

    def _remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def close(self) -> None:
        """Stop and forget every finalizer."""
        self.stop()
        self.ledger.close()

    def _module_hooks(self) -> list:
        """Module call hooks: parameters, inputs, the module depth (and, for a ledger that wants
        them, each call's site)."""
        pre, post = self._forward_pre, self._forward_post
        if self.wants_sites:
            # When forgeviz's module stack runs (every notebook cell, memory_trace), ride on its hooks:
            # told once per outermost call instead of two more Python hooks on every module call.
            modules = get_session().modules
            if modules.installed:
                modules.root_listeners.append(self)
                return [_Unlisten(modules.root_listeners, self)]
            pre, post = self._forward_pre_sited, self._forward_post_sited
        return [module_hooks.subscribe(quiet(pre), quiet(post))]

    @property
    def active(self) -> bool:
        return self._recording

    @property
    def backend(self) -> str:
        """Which ledger records: "native" or "dispatch"."""
        return self.ledger.backend

    @property
    def default_cell(self) -> Optional[int]:
        """The cell of code that IPython did not compile itself (``%%fv memory`` runs its own)."""
        return self.ledger.default_cell

    @default_cell.setter
    def default_cell(self, cell: Optional[int]) -> None:
        self.ledger.default_cell = cell

    # --- events ---------------------------------------------------------------------------
    @property
    def ops(self) -> list[str]:
        """The op names the ``op`` column indexes."""
        return self.ledger.ops

    @property
    def modules(self) -> list[str]:
        """The module paths the ``module`` column indexes."""
        return self.ledger.modules

    count = _ledger_stat("count", "Events kept (older ones merge past ``max_events``).")
    dropped = _ledger_stat("dropped", "Events merged away so far to stay within ``max_events``.")
    peak_bytes = _ledger_stat("peak_bytes", "The most tracked bytes alive at once so far.")
    peak_time = _ledger_stat("peak_time", "When that peak was, in seconds on the timeline.")

    def live_bytes(self) -> int:
        return self.ledger.stats().live_bytes

    def columns(self, start: int = 0, end: Optional[int] = None) -> dict[str, bytes]:
        """Events ``[start, end)`` of each column as little-endian bytes (copies)."""
        return self.ledger.columns(start, end)

    def own_bytes(self, max_age: float = 0.0) -> int:
        """What forgeviz holds to draw this timeline: its ledger, and the tracker's own tables
        (measured again when the last measure is older than ``max_age`` seconds: a walk of ~15 ms)."""
        when, value = self._own
        now = time.monotonic()
        if value is None or now - when > max_age:
            tables = [self._params, self._modules_seen, self._states_seen, self._claims, self.faults]
            value = self.ledger.own_bytes() + deep_bytes(tables) + get_session().own_bytes()
            self._own = (now, value)
        return value

    def column_arrays(self) -> dict[str, array.array]:
        """Every event column as an ``array.array`` (a copy).

        >>> tracker = MemoryTracker(seed=False)
        >>> with tracker:
        ...     x = torch.ones(8)
        >>> list(tracker.column_arrays()["bytes"])
        [32.0]
        """
        out = {}
        for (name, kind), raw in zip(m.EVENT_COLUMNS, self.columns().values()):
            out[name] = array.array(TYPECODES[kind])
            out[name].frombytes(raw)
        return out

    def timeline(self, device: str = "cpu", message: Optional[str] = None) -> m.MemoryTimeline:
        self._release_gone()
        if self.ledger.late_categories:
            self._sync_grads()
        cells = self.ledger.cell_marks()
        s = self.ledger.stats()
        return m.MemoryTimeline(1, device, s.count, s.dropped, self.max_events, list(m.CATEGORIES), self.ops,
                                self.modules, cells, s.peak_bytes, s.peak_time, s.live_bytes, self.baseline_bytes,
                                message, own_bytes=self.own_bytes(max_age=2.0))

    def records(self) -> list[StorageRecord]:
        """What is known of every live tracked storage."""
        self._release_gone()
        if self.ledger.late_categories:
            self._sync_grads()
        return [rec for _, rec in self.ledger.live()]

    def tracked_bytes(self) -> dict[int, int]:
        """Every live tracked storage: data pointer → nbytes (compare with :func:`live_storage_bytes`)."""
        self._release_gone()
        if self.ledger.late_categories:
            self._sync_grads()
        return {key: rec.nbytes for key, rec in self.ledger.live()}

    def detail(self, sid: int) -> m.StorageDetail:
        rec, alive = self.ledger.find(sid)
        return m.StorageDetail(rec.sid, rec.nbytes, rec.dtype, list(rec.shape), m.CATEGORIES[rec.category], rec.op,
                               rec.module, rec.cell, rec.line, source_line(rec.filename, rec.line), rec.node,
                               rec.node_name, None, alive)

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
        for module in (ref() for ref in list(self._modules_seen.values())):  # (a root's submodules too)
            for b in module.buffers() if module is not None else ():
                if b.device.type == device_type:
                    out[b.untyped_storage().data_ptr()] = m.BUFFER
        return out

    def publish(self, count: int) -> None:
        """The first ``count`` events were sent to a view (the native ledger then never rewrites them)."""
        self.ledger.publish(count)

    def mark_cell(self, cell: int) -> None:
        """A notebook cell starts now (0: its number is known only once it ran)."""
        self.ledger.mark_cell(cell)

    def name_cell(self, cell: int) -> None:
        """The cell last marked with 0 turned out to be ``cell`` (known once it ran)."""
        self.ledger.name_cell(cell)

    # --- where ops come from (a ledger that wants sites is told; the dispatch one sees each op) ----
    def after_op(self, out, where: tuple, op: Optional[str] = None) -> None:
        """The op ``op``, called from Python at ``where`` (filename, line), returned ``out``."""

    def allocated_since(self) -> bool:
        """Whether the ledger saw an allocation since the last ``after_op`` it was told of."""
        return False

    def set_site(self, where: Optional[tuple]) -> None:
        """Python code at ``where`` is about to run ops Python does not see (a backward pass); None: it ended."""
        if not self.wants_sites:
            return
        if where is None:  # a backward pass ended: its gradients are in .grad now
            self.ledger.pop_site()
            self._sync_grads()
            self._grads_synced = True
        else:  # autograd runs in C++, unseen by Python: its allocations are this line's backward
            self.ledger.push_site(where, current_module_path(), "backward")

    def claim_saved(self, grad_fn) -> None:
        """The tensors ``grad_fn`` saved for backward are activations of that autograd node, while
        it holds them (see :meth:`before_backward` and the Node's death).

        Read from the node's own ``_saved_*`` attributes right after the op made it (no
        saved_tensors_hooks: packing an op's own output would tie it to its grad_fn in a cycle gc
        cannot free, and a detached copy would break double backward).
        """
        if self._gone:
            self._release_gone()
        if grad_fn is None:
            return
        names = tensor_slots(grad_fn)
        if not names:
            return
        direct = self._claim_direct
        if direct is not None:  # the native ledger's: these reads and claims in one C call
            direct(grad_fn, names, self._claims, self._gone.append, self._gone_key)
            return
        nid = None
        claim = self.ledger.claim
        claimed: list[tuple[int, int]] = []
        probe = None
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
                    if nid in self._claims:  # an op that returned an older tensor (x.contiguous())
                        return
                got = claim(t, nid, grad_fn)
                if got is not None:
                    claimed.append(got)
                    probe = probe or name
        if claimed:
            self._claims[nid] = (probe, claimed)
            grad_fn.metadata[self._gone_key] = NodeGone(self._gone, nid)

    def before_backward(self, roots: list, armed=None):
        """The claiming Nodes a backward from ``roots`` may run: give them to :meth:`after_backward`.

        Their ids, from ``armed`` (the native hooks' pass armed for this backward: grads.NativePass, which
        walked the graph already) or walked in C++ when the gradient hooks library is loaded (no Python object
        per Node), with the roots to walk again in Python should the backward not free them all."""
        if not self._claims:
            return []
        if armed is not None:
            ids = armed.order()
        else:
            hooks = native.hooks()
            walked = hooks.walk(list(roots)) if hooks is not None else None
            if walked is None:  # (a root the library does not know)
                return self._claiming(roots)
            ids = walked[2]
        claims = self._claims
        return _Walked(roots, [nid for nid in ids if nid is not None and nid in claims])

    def _claiming(self, roots: list) -> list[tuple[Any, int]]:
        """(Node, id) of each claiming Node reachable from ``roots``."""
        claims = self._claims
        out = []
        for node in iter_graph(roots):
            nid = node.metadata.get("fv_id")
            if nid is not None and nid in claims:
                out.append((node, nid))
        return out

    def after_backward(self, nodes: list, freed_all: bool = False) -> None:
        """Of ``nodes``, those that freed their saved tensors (a backward without ``retain_graph``
        ran them) release what they claimed: it goes back to its own category. ``freed_all``: a
        ``backward()`` without ``inputs=`` returned, so all of them did (else each is asked, which
        raises for a freed one, at ~10 µs a raise). One call into the ledger for all of them."""
        claims = self._claims
        released: list[tuple[int, int]] = []
        if isinstance(nodes, _Walked):
            if freed_all:  # every Node it walked freed what it saved: no Node needs asking
                for nid in nodes.ids:
                    entry = claims.pop(nid, None)
                    if entry is not None:
                        released += entry[1]
                self.ledger.release_all(released)
                return
            nodes = self._claiming(nodes.roots)  # (a backward's edges outlive the tensors it frees)
        for node, nid in nodes:
            entry = claims.get(nid)
            if entry is None:
                continue
            if not freed_all:
                try:
                    getattr(node, entry[0])
                    continue  # it still holds them
                except RuntimeError:  # "Trying to backward through the graph a second time": freed
                    pass
            del claims[nid]
            released += entry[1]
        self.ledger.release_all(released)

    def _release_gone(self) -> None:
        """Claiming Nodes that died release what they claimed."""
        gone, claims = self._gone, self._claims
        released: list[tuple[int, int]] = []
        while gone:
            entry = claims.pop(gone.popleft(), None)
            if entry is not None:
                released += entry[1]
        self.ledger.release_all(released)

    # --- hooks ----------------------------------------------------------------------------
    def _forward_pre(self, module, args):
        with boundary(self.fault, "reading module parameters"):  # inside the user's model call
            self._adopt_module(module, recurse=False)
            if self._module_depth == 0:
                self._adopt_inputs(args)
        self._module_depth += 1

    def _forward_post(self, module, args, output):
        self._module_depth = max(0, self._module_depth - 1)

    def _forward_pre_sited(self, module, args):
        outermost = self._module_depth == 0
        self._forward_pre(module, args)
        with boundary(self.fault, "reading a module call's line"):  # inside the user's model call
            if outermost:  # model(x): its line stands for the whole forward (after_op refines it)
                self.ledger.push_site(user_location(2), current_module_path())
            else:
                self.ledger.push_module(current_module_path())

    @guarded("closing a module call's line")
    def _forward_post_sited(self, module, args, output):
        self._forward_post(module, args, output)
        self.ledger.pop_site()

    def root_call(self, module, args) -> None:
        """An outermost module call starts: its parameters, its inputs, and its line (the module
        stack tells its root listeners)."""
        with boundary(self.fault, "reading a module call"):  # inside the user's model call
            if not torch._C._are_functorch_transforms_active():  # torch.func's wrappers hold no memory
                self._adopt_module(module, recurse=True)
                self._adopt_inputs(args)
            self.ledger.push_site(user_location(2), current_module_path())

    @guarded("closing a module call")
    def root_return(self, module) -> None:
        self.ledger.pop_site()

    def _adopt_module(self, module, recurse: bool) -> None:
        """A module's parameters are parameters and its buffers buffers, read once per module (later
        ones come through _parameter_registered and _buffer_registered)."""
        seen = self._modules_seen.get(id(module))
        if seen is None or seen() is not module:
            for p in module.parameters(recurse=recurse):
                self._adopt_parameter(p)
            for b in module.buffers(recurse=recurse):
                self.ledger.recategorize(b, m.BUFFER)
            key = id(module)
            self._modules_seen[key] = weakref.ref(module, lambda _: self._modules_seen.pop(key, None))

    def _adopt_parameter(self, p: torch.Tensor) -> None:
        if not self._knows(p):
            self._remember(p)
            self._watch_grad(p)
            self.ledger.recategorize(p, m.PARAMETER)

    def _adopt_inputs(self, args) -> None:
        """Tensors passed to an outermost module call are its inputs (unless already something more)."""
        if not all(isinstance(a, torch.Tensor) for a in args):  # model(x): no pytree walk needed
            args = tree_flatten(args)[0]
        for a in args:
            self.ledger.recategorize(a, m.INPUT, only_from=(m.TEMPORARY, m.OTHER))

    def _parameter_registered(self, module, name, param):
        with boundary(self.fault, "reading a new parameter"):  # inside the user's module code
            if param is not None:
                self._adopt_parameter(param)
        return None

    def _buffer_registered(self, module, name, buffer):
        with boundary(self.fault, "reading a new buffer"):  # inside the user's module code
            if isinstance(buffer, torch.Tensor):
                self.ledger.recategorize(buffer, m.BUFFER)
        return None

    def _knows(self, p: torch.Tensor) -> bool:
        ref = self._params.get(id(p))
        return ref is not None and ref() is p

    def _remember(self, p: torch.Tensor) -> None:
        key = id(p)
        self._params[key] = weakref.ref(p, lambda _: self._params.pop(key, None))

    def _live_params(self) -> list:
        return [p for p in (r() for r in list(self._params.values())) if p is not None]

    def _watch_grad(self, p: torch.Tensor) -> None:
        # A ledger with late categories reads every .grad at once instead (_sync_grads).
        if not self.ledger.late_categories and p.requires_grad and p.is_leaf:
            self._handles.append(p.register_post_accumulate_grad_hook(self._grad_ready))

    def _grad_ready(self, p: torch.Tensor) -> None:
        with boundary(self.fault, "recording a gradient"):  # inside the user's backward
            if p.grad is not None:
                self.ledger.recategorize(p.grad, m.GRADIENT)

    def _step_pre(self, optimizer, args, kwargs) -> None:
        if not self._grads_synced:  # a backward forgeviz's mode did not see (else it synced then)
            self._sync_grads()
        self._grads_synced = False
        with boundary(self.fault, "reading an optimizer step's line"):  # inside the user's optimizer step
            self.ledger.step_begins(user_location(2), f"{type(optimizer).__name__}.step")

    @guarded("reading optimizer state")  # inside the user's optimizer step
    def _after_step(self, optimizer, args, kwargs) -> None:
        if self.wants_sites:
            self.ledger.step_ends()
        seen = self._states_seen
        # Most state is updated in place, step after step: each tensor is categorised once (again if it moved)
        hooks = native.hooks()
        state = optimizer.state
        if hooks is not None and type(state) in (dict, defaultdict):  # the loop below, in C
            unseen = hooks.unseen_state(state, seen)
        else:
            unseen = [value for values in state.values() for value in values.values()
                      if isinstance(value, torch.Tensor) and value.numel() > 1
                      and not _seen_as_it_is(seen.get(id(value)), value)]
        for value in unseen:
            self.ledger.recategorize(value, m.OPTIMIZER_STATE)
            seen[id(value)] = (weakref.ref(value), value.data_ptr())

    def _sync_grads(self) -> None:
        """Parameters' ``.grad`` are gradients (read all at once, where a hook per parameter costs)."""
        with boundary(self.fault, "recording gradients"):  # between the user's ops
            at_once = getattr(self.ledger, "recategorize_grads", None)  # (the native ledger's, in one C call)
            if at_once is not None and at_once(self._params, m.GRADIENT):
                return
            grads = [g for g in map(_grad_of, self._live_params()) if g is not None]
            if grads:
                self.ledger.recategorize_all(grads, m.GRADIENT)

    def _seed_existing(self) -> None:
        """Storages that exist now become baseline events at time 0, categorised."""
        with untraced():
            params, grads, states, buffers = set(), set(), set(), set()
            tensors = []
            for obj in _gc_objects(torch.nn.Module):
                if isinstance(obj, torch.Tensor):
                    tensors.append(obj)
                elif isinstance(obj, torch.optim.Optimizer):
                    for state in obj.state.values():
                        states.update(id(v) for v in state.values() if isinstance(v, torch.Tensor))
                elif isinstance(obj, torch.nn.Module):
                    buffers.update(id(b) for b in obj._buffers.values() if b is not None)
            found = []
            for t in tensors:
                # (a fake parameter that a compile's cache keeps alive, its .grad fake too, holds no memory)
                if isinstance(t, torch.nn.Parameter) and real_storage(t, meta=True) is not None:
                    params.add(id(t))
                    self._remember(t)
                    grad = t.grad  # a .grad that backward wrote and Python never read has no object in gc
                    if grad is not None:
                        grads.add(id(grad))
                        found.append(grad)
            listed = set(map(id, tensors))
            tensors.extend(g for g in found if id(g) not in listed)
            for t in tensors:
                storage = real_storage(t)  # never a compile cache's fake or functional tensor
                if storage is None:
                    continue
                category = (m.PARAMETER if id(t) in params else m.GRADIENT if id(t) in grads
                            else m.OPTIMIZER_STATE if id(t) in states else m.BUFFER if id(t) in buffers
                            else m.OTHER)
                op, where = None, (None, None)
                known = self._carry.get(storage.data_ptr())
                if known is not None and known.nbytes == storage.nbytes():
                    if category == m.OTHER:  # an activation's claim is not carried: its own category
                        category = known.own if known.category == m.ACTIVATION else known.category
                    op, where = known.op, (known.filename, known.line) if known.filename else (None, None)
                rec = self.ledger.track(storage, category, op, tuple(t.shape), t.dtype, where, 0.0)
                if rec is not None:
                    self.baseline_bytes += rec.nbytes
            del tensors
        self._carry = {}


def _reporter(faults: list[str], report: Optional[Callable[[str], None]]) -> Callable[[str], None]:
    """A fault callback that keeps each message in ``faults`` and passes it on to ``report``.

    >>> kept = []; fault = _reporter(kept, None); fault("oops"); kept
    ['oops']
    """
    def fault(message: str) -> None:
        faults.append(message)
        if report is not None:
            report(message)
    return fault


def _gc_objects(*more: type) -> list:
    """The tensors and optimizers (and instances of ``more``) among gc.get_objects(), quietly
    (isinstance on some lazily deprecated torch names warns). Decided once per type, and filtered
    at C speed: an isinstance per object cost ~80 ms on a kernel with torch loaded."""
    wanted = (torch.Tensor, torch.optim.Optimizer, *more)
    objects = gc.get_objects()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        keep = {t for t in set(map(type, objects)) if issubclass(t, wanted)}
    return list(itertools.compress(objects, map(keep.__contains__, map(type, objects))))


_tracker_ids = itertools.count(1)


class _Walked(NamedTuple):
    """What :meth:`MemoryTracker.before_backward` found in C++: the backward's roots, and the ids of
    the claiming Nodes they reach."""

    roots: list
    ids: list[int]


_grad_of = operator.attrgetter("grad")


def _seen_as_it_is(known: Optional[tuple], value: torch.Tensor) -> bool:
    """Whether ``known`` (a (weakref, data pointer) of ``_states_seen``) is ``value`` where it is now."""
    return known is not None and known[0]() is value and known[1] == value.data_ptr()


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


def live_storage_bytes() -> dict[int, int]:
    """Every live storage with data (``real_storage``) reachable from a gc walk: data pointer → nbytes."""
    out: dict[int, int] = {}
    for obj in _gc_objects():
        storage = real_storage(obj) if isinstance(obj, torch.Tensor) else None
        if storage is not None:
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
