"""Gradients that flow through Nodes during backward, recorded by Node hooks.

Hooks are registered on every reachable Node just before a backward call and removed right after,
so a graph that never runs backward costs nothing here.
"""

from __future__ import annotations

import itertools
import logging
import os
import struct
import sys
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Union

import torch

from ..model.graph import GradRecord, Histogram, TensorSummary
from . import native
from .cadence import EACH, OFF, SHOWN, Cadence, SummaryBudget, Within
from .chain import LOCAL_DERIVATIVES, SMALL as CHAIN_NUMEL, local_derivatives
from .device_summary import DeviceSummaries
from .fault import boundary
from .summary import HISTOGRAM_BINS, HISTOGRAM_SAMPLE, SMALL_NUMEL, DeferredSummaries, summarize

log = logging.getLogger("forgeviz")

#: Where every Node's id comes from (node_id's, and the native hooks' and the CPU ledger's, which give Nodes ids in C++
#: from this same count): ids never repeat within the process.
NODE_IDS = itertools.count(1)


def node_id(node) -> int:
    """A stable id for a torch Node, kept in its own ``metadata`` dict (which lives as long as it)."""
    meta = node.metadata
    nid = meta.get("fv_id")
    if nid is None:
        nid = meta["fv_id"] = next(NODE_IDS)
    return nid


def iter_graph(roots: Iterable) -> list:
    """Every Node reachable from ``roots`` through ``next_functions``, iteratively (deep graphs OK).

    Order: depth-first from the roots, each Node once.
    """
    seen: set[int] = set()
    order = []
    stack = [r for r in roots if r is not None]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        order.append(node)  # holding it keeps id(node) unique during the walk
        for nxt, _ in node.next_functions:
            if nxt is not None and id(nxt) not in seen:
                stack.append(nxt)
    return order


def has_nonfinite(summaries: Iterable[Optional[TensorSummary]]) -> bool:
    return any(s is not None and (s.nan_count or s.inf_count) for s in summaries)


@dataclass(slots=True)  # one per Node of every backward: slots make and free it faster
class NodeGrads:
    records: list[GradRecord] = field(default_factory=list)
    first_nonfinite_pass: Optional[int] = None  # the pass in which this node was the first non-finite one
    # (backward index, per input the local derivative's values or None) of a small elementwise CPU
    # Node's last pass
    local: Optional[tuple[int, list]] = None


@dataclass(slots=True)
class LeafHistory:
    variable: weakref.ref
    # .grad after each pass; None = reset. (GradStore.leaf_history() gives them all made: inside the
    # store, a native pass's entry waits as (NativePass, made, slot).)
    values: list[Optional[TensorSummary]] = field(default_factory=list)


LEAF_HISTORY = 32  # passes of a leaf's .grad kept (twice as many at most wait until a reader trims them: _made_all)
MAX_UNREAD = 64  # natively recorded passes that wait to be read, at most


class NodeGone:
    """Kept in a Node's ``metadata``, a dict that dies with the Node: so does this, and it appends
    the Node's id to ``dead`` (no weakref to a Node is possible).

    >>> from collections import deque
    >>> dead = deque(); gone = NodeGone(dead, 7); del gone; list(dead)
    [7]
    """

    __slots__ = ("dead", "nid")

    def __init__(self, dead: deque, nid: int) -> None:
        self.dead, self.nid = dead, nid

    def __del__(self) -> None:
        self.dead.append(self.nid)  # thread-safe; a Node may die on an autograd thread


def _made(source, made: dict, slot: int) -> Optional[TensorSummary]:
    """The TensorSummary of a native pass's summary ``slot`` (made once: ``made`` keeps it; one the device
    path made is that object itself)."""
    if slot < 0:
        return None
    done = made.get(slot)
    if done is None:
        numbers = source.summary(slot)
        if type(numbers) is not tuple:
            done = made[slot] = numbers
            return done
        shape, dtype, numel, lo, hi, total, norm, values, counts = numbers
        histogram = None if counts is None else Histogram(lo, hi, counts)
        done = made[slot] = TensorSummary(list(shape), _DTYPES[dtype], "cpu", numel, norm, lo, hi, total / numel, 0, 0,
                                          values, histogram)
    return done


def _made_all(values: list) -> None:
    """A leaf history's entries, each a TensorSummary or None (a native pass leaves (source, made,
    slot) until the history is read), its last LEAF_HISTORY only (a pass appends and trims only once
    it holds twice as many: a slice deleted per leaf per pass was 5 us of a small step's backward).

    >>> values = [None] * (LEAF_HISTORY + 3); _made_all(values); len(values) == LEAF_HISTORY
    True
    """
    if len(values) > LEAF_HISTORY:
        del values[:-LEAF_HISTORY]
    for i, value in enumerate(values):
        if type(value) is tuple:
            values[i] = _made(*value)


class NativePass:
    """What the native hooks recorded in one pass, kept in C++ (native/grad_hooks.cpp) until read.

    >>> x = torch.tensor([2., 5.], requires_grad=True); y = (x * 3).sum()
    >>> lib = native.hooks()  # None where the library is not built
    >>> def rows():
    ...     armed = lib.arm([y.grad_fn], set(), iter(range(100, 200)), deque().append, print, 4096, 32, 64, 64,
    ...                     _DEVICE_NONE, print, print)
    ...     y.backward(); lib.finish(armed)
    ...     return [(outs, ins) for _, outs, ins in NativePass(lib, armed).rows()]
    >>> rows() if lib else [((0,), (1,)), ((1,), (2, -2)), ((2,), ())]  # summary slots, -2 for None
    [((0,), (1,)), ((1,), (2, -2)), ((2,), ())]
    """

    __slots__ = ("_lib", "_capsule")

    def __init__(self, lib, capsule) -> None:
        self._lib, self._capsule = lib, capsule

    def rows(self) -> list[tuple]:
        """(nid, grad_outputs' summary slots, grad_inputs' slots) per Node, in the order they ran."""
        return self._lib.rows(self._capsule)

    def forget(self, gone: set) -> int:
        """Drop the rows of the Nodes in ``gone``; returns how many rows are left."""
        return self._lib.forget(self._capsule, gone)

    def summary(self, slot: int) -> Union[tuple, TensorSummary]:
        """(shape, dtype code, numel, min, max, sum, norm, values or None, counts or None); on the device path,
        the TensorSummary that device_summary made (numbers to come)."""
        return self._lib.summary(self._capsule, slot)

    def node_stats(self, ids: Optional[list] = None) -> tuple[bytes, list]:
        """For each position ``k`` of ``ids`` (a graph's Node ids, None where a Node has none; by default the
        pass's own, :meth:`order`) whose Node ran and received a gradient: (k, numel, min, max, sum, norm) of
        that gradient, in position order, as six native doubles each (``struct.iter_unpack(NODE_STATS, ...)``
        reads them: see recording._node_rows); and (k, TensorSummary) of those the device path summarised
        (numbers to come)."""
        return self._lib.node_stats(self._capsule, ids)

    def shape(self) -> tuple[int, int]:
        """The armed graph's (signature, Node count), as the library's ``walk(roots)`` gives them: what a
        recording knows a graph by, with no second walk."""
        return self._lib.shape(self._capsule)

    def order(self) -> list[int]:
        """The armed graph's Node ids in the order of :func:`iter_graph` (the ``walk(roots)`` ids)."""
        return self._lib.order(self._capsule)

    def recorded(self, watch: Optional[set] = None) -> tuple[tuple[int, int], bytes, list]:
        """What a recording reads of the pass, in one call: (:meth:`shape`, *:meth:`node_stats`); with ``watch``,
        :meth:`watch_writes` of it too, in the same call."""
        return self._lib.recorded(self._capsule, watch)

    def leaf_stats(self, params: list) -> Optional[bytes]:
        """(min, max, sum, norm, numel) of each parameter's ``.grad`` as this pass summarised it, five native
        doubles each (numel -1: no ``.grad``). Closes the window (:meth:`watch_writes`) first: None if a call
        in it may have written a ``.grad`` unseen, or unless every ``.grad`` is still the tensor the pass's
        AccumulateGrad hook summarised, at the same version."""
        return self._lib.leaf_stats(self._capsule, params)

    def leaf_summaries(self, params: list) -> Optional[list]:
        """:meth:`leaf_stats` on the device path: the summary device_summary made of each parameter's ``.grad``
        in this pass (its numbers come with the pass's read-back), None for one with no ``.grad``; the window
        closed, None as :meth:`leaf_stats` gives it."""
        return self._lib.leaf_summaries(self._capsule, params)

    def watch_writes(self, functions: Optional[set]) -> int:
        """The library's window (grad_hooks.cpp's ``window``; one for the process, reached through the pass's
        library): how many calls that may write a ``.grad`` without moving its version the capture mode saw
        since the last call; then it watches ``functions`` and in-place ops, or nothing (None)."""
        return self._lib.window(functions)


NODE_STATS = "=6d"  # a struct format of one Node's numbers in :meth:`NativePass.node_stats`'s bytes
NODE_STATS_SIZE = struct.calcsize(NODE_STATS)  # their bytes a Node


class GradStore:
    """Bounded memory of what backward passes sent through each Node id.

    Keeps the last ``records_per_node`` passes of each Node while the Node lives, and after that
    only while a view shows it (``pinned()`` names those ids): a training loop makes a new graph
    every step, and without this the records of dead graphs would pile up to ``max_nodes``
    (least recently updated dropped first), about 2 KB each.

    A pass the native hooks recorded is kept as their numbers (``add_unread``) and made into records
    when anything reads the store: a training loop nobody looks at mid-run makes a pass of records
    per step that its next steps' pruning drops unread.

    >>> store = GradStore(); store.add(7, GradRecord(1, [], [])).records[-1].backward_index
    1
    """

    def __init__(self, max_nodes: int = 50_000, records_per_node: int = 8, prune_every: int = 256) -> None:
        self.max_nodes = max_nodes
        self.records_per_node = records_per_node
        self._nodes: "OrderedDict[int, NodeGrads]" = OrderedDict()
        self._leaves: dict[int, LeafHistory] = {}  # keyed by id(leaf tensor), checked by weakref
        # Passes the native hooks recorded, oldest first: (backward index, NativePass, the summaries
        # made so far, the ids of the Nodes it still has rows of).
        self._unread: list[tuple[int, NativePass, dict, set]] = []
        # whether the newest of them handed a Node's gradients to Python (recorded_by)
        self._newest_handed = False
        self.passes = 0  # backward passes armed for gradients, recorded or skipped by the cadence
        self.recorded = 0  # the latest of them that recorded (the cadence may skip some)
        self.pinned: Callable[[], set] = set  # the session names the ids its views show
        self.prune_every = prune_every
        self.dead: deque = deque()  # ids of recorded Nodes that died since the last prune
        # (pass, Node id) of each pass's first Node whose gradients went non-finite, as found (on CUDA, a poll
        # after the pass): recording.py takes them
        self.nonfinite_found: deque = deque(maxlen=64)
        self.first_nonfinite_of: OrderedDict[int, int] = OrderedDict()  # the same by pass, the last 64 (the doctor's)
        self._dead_but_shown: set[int] = set()

    @property
    def nodes(self) -> "OrderedDict[int, NodeGrads]":
        """Node id → its records, least recently updated first."""
        if self._unread:
            self._read_all()
        return self._nodes

    @property
    def leaves(self) -> dict[int, LeafHistory]:
        """id(leaf tensor) → its ``.grad`` history."""
        if self._unread:
            self._read_all()
        for entry in list(self._leaves.values()):  # (a list: a leaf that dies meanwhile leaves the dict)
            _made_all(entry.values)
        return self._leaves

    def watch(self, node, nid: int) -> None:
        """Drop ``nid``'s records some time after ``node`` dies (unless a view shows it)."""
        meta = node.metadata
        if "fv_gone" not in meta:
            meta["fv_gone"] = NodeGone(self.dead, nid)

    def add(self, nid: int, record: GradRecord) -> NodeGrads:
        if self._unread:  # earlier passes first
            self._read_all()
        return self._add(nid, record)

    def _add(self, nid: int, record: GradRecord) -> NodeGrads:
        nodes = self._nodes
        entry = nodes.get(nid)
        if entry is None:  # a new Node: every Node of a training step's new graph
            entry = nodes[nid] = NodeGrads([record])
            if len(nodes) > self.max_nodes:
                nodes.popitem(last=False)
            return entry
        nodes.move_to_end(nid)
        records = entry.records
        records.append(record)
        if len(records) > self.records_per_node:
            del records[: -self.records_per_node]
        return entry

    def add_unread(self, index: int, source: NativePass, nids: set, leaves: list, handed: bool = False) -> None:
        """A pass the native hooks recorded (``source``, the Nodes ``nids``): its records are made when
        the store is next read, and its leaves' histories get their entries now, each summary made
        when first read.

        ``leaves``: (kind, the .grad's summary slot, the leaf (the store keeps a weakref of it), the summary if the
        device path made it, else None) per AccumulateGrad, a slot below 0 standing for an undefined gradient.
        ``handed``: whether the pass handed any Node's gradients to its Python hook (recorded with :meth:`add`).

        A pass with ``records_per_node`` newer ones loses the rows of the Nodes that each of those
        recorded too (reading would drop them for the newer ones), and ``prune`` drops those of dead
        Nodes: a training loop's passes go unread. Past ``MAX_UNREAD`` passes the oldest is read.

        >>> class Source:  # what a NativePass gives
        ...     def rows(self): return [(7, (0,), ())]
        ...     def summary(self, slot): return ((2,), 0, 2, 1.0, 2.0, 3.0, 2.236, [1.0, 2.0], None)
        ...     def forget(self, gone): return 1
        >>> store = GradStore(); store.add_unread(1, Source(), {7}, [])
        >>> store.get(7).records[-1].grad_outputs[0].values
        [1.0, 2.0]
        """
        made: dict = {}  # the summaries made so far, shared by every reader
        histories = self._leaves  # (each pass, each parameter: _leaf_history's look-up inline)
        for kind, slot, leaf, summary in leaves:
            entry = histories.get(id(leaf))
            if entry is None or entry.variable() is not leaf:
                entry = self._leaf_history(leaf, create=True)
            values = entry.values
            if kind == _LEAF_WITHOUT_GRAD and values:
                values.append(None)  # .grad was reset (zero_grad) since the last pass
            # made when the history is read; the device path's, made already, kept as they are (a reference to
            # the pass would keep all its summaries)
            values.append(summary if summary is not None else (source, made, slot) if slot >= 0 else None)
            if len(values) >= 2 * LEAF_HISTORY:  # (trimmed to LEAF_HISTORY as it is read: _made_all)
                del values[:-LEAF_HISTORY]
        self._newest_handed = handed
        unread = self._unread
        unread.append((index, source, made, nids))
        depth = self.records_per_node
        if len(unread) > depth:
            # The pass that now has `depth` newer ones: a Node each of them recorded too would lose
            # this pass's record to them when read.
            behind = unread[-1 - depth][3]
            # Those the newest pass recorded first, then narrowed pass by pass: in a training loop that is each
            # parameter's AccumulateGrad (kept from one step's graph to the next), a handful, where intersecting
            # the whole pass with each newer one made a set per pass (8 us a step)
            newer = behind & nids
            for batch in unread[-depth:-1]:
                if not newer:
                    break
                newer &= batch[3]
            if newer:
                behind -= newer
                if not unread[-1 - depth][1].forget(newer):
                    del unread[-1 - depth]
        if len(unread) > MAX_UNREAD:
            index, source, made, _ = unread.pop(0)
            self._read(index, source, made)

    def _read_all(self) -> None:
        unread, self._unread = self._unread, []
        for index, source, made, _ in unread:
            self._read(index, source, made)

    def _read(self, index: int, source: NativePass, made: dict) -> None:
        for nid, outs, ins in source.rows():
            self._add(nid, GradRecord(index, [_made(source, made, k) for k in outs],
                                      [_made(source, made, k) for k in ins]))

    def prune(self, force: bool = False, keep_from: Optional[int] = None) -> None:
        """Forget dead Nodes that no view shows (every ``prune_every`` deaths, or when forced). ``keep_from``: the
        first backward pass whose numbers are still to come (CUDA: its copy in flight); the Nodes it and later
        passes recorded are kept to a later prune, so its first non-finite Node can still be found and told.

        >>> store = GradStore(); _ = store.add(7, GradRecord(3, [], [])); _ = store.add(8, GradRecord(2, [], []))
        >>> store.dead.extend([7, 8]); store.prune(force=True, keep_from=3); sorted(store.nodes)
        [7]
        """
        if not force and len(self.dead) < self.prune_every:
            return
        shown = self.pinned()
        candidates = self._dead_but_shown
        while self.dead:
            candidates.add(self.dead.popleft())
        if keep_from is not None:
            shown = set(shown) | self._recorded_since(keep_from, candidates)
        self._dead_but_shown = {nid for nid in candidates if nid in shown}
        gone = candidates - self._dead_but_shown
        for nid in gone:
            self._nodes.pop(nid, None)
        if self._unread and gone:  # unread rows of dead Nodes go unread
            self._unread = [batch for batch in self._unread if batch[1].forget(gone)]
            for batch in self._unread:
                batch[3].difference_update(gone)

    def _recorded_since(self, index: int, among: set) -> set:
        """The Nodes of ``among`` that backward pass ``index`` or a later one recorded (natively, or in Python)."""
        held: set = set()
        for found, _, _, nids in self._unread:
            if found >= index:
                held |= nids & among
        nodes = self._nodes
        for nid in among:
            entry = nodes.get(nid)
            if entry is not None and entry.records and entry.records[-1].backward_index >= index:
                held.add(nid)
        return held

    def unread_pass(self, index: int) -> Optional[NativePass]:
        """Backward pass ``index`` as the native hooks recorded it, while it waits unread, else None: a
        recording reads its numbers from there without making records nobody else reads.

        >>> GradStore().unread_pass(1) is None
        True
        """
        for found, source, _, _ in reversed(self._unread):
            if found == index:
                return source
        return None

    def recorded_by(self, index: int) -> tuple[Optional[NativePass], list[tuple[int, NodeGrads]]]:
        """Pass ``index`` as a recording reads it: the native hooks' pass while it waits unread, and the Nodes
        they handed to Python (:meth:`python_recorded`); (None, []) once it was read (its records are then the
        store's, every Node's) or when Python hooks recorded it. A few attribute reads when nothing was handed
        over (a training step's: this runs inside it).

        >>> GradStore().recorded_by(1)
        (None, [])
        """
        unread = self._unread
        if not unread or unread[-1][0] != index:  # (the newest pass waiting is the last one added)
            return None, []
        return unread[-1][1], self.python_recorded(index) if self._newest_handed else []

    def mark_first_nonfinite(self, index: int, source: NativePass) -> Optional[int]:
        """Give the first Node of native pass ``index`` (``source``; in the order backward ran them) whose
        gradients are not all finite its ``first_nonfinite_pass``, from the device path's summaries (filled
        since the pass ended); returns its id, or None. Reads the passes that wait: only for a pass that went
        NaN or infinite.

        >>> class Source:
        ...     def rows(self): return [(7, (), ())]
        >>> GradStore().mark_first_nonfinite(1, Source()) is None  # no Node with a gradient: nothing to mark
        True
        """
        found = next((batch for batch in self._unread if batch[0] == index), None)
        made = found[2] if found is not None else {}  # (a pass read already: its summaries made again)
        first = next((nid for nid, outs, ins in source.rows()
                      if has_nonfinite([_made(source, made, k) for k in outs + ins])), None)
        entry = self.get(first) if first is not None else None
        return self.found_nonfinite(index, first, entry) if entry is not None else None

    def found_nonfinite(self, index: int, nid: int, entry: NodeGrads) -> int:
        """Node ``nid`` (its ``entry``) was pass ``index``'s first whose gradients went NaN or infinite: so marked,
        and told to ``nonfinite_found`` (a recording, whose device summaries' numbers came after the pass). Returns
        ``nid``.

        >>> store = GradStore(); entry = store.add(7, GradRecord(3, [], []))
        >>> store.found_nonfinite(3, 7, entry), entry.first_nonfinite_pass, list(store.nonfinite_found)
        (7, 3, [(3, 7)])
        """
        entry.first_nonfinite_pass = index
        self.nonfinite_found.append((index, nid))
        found = self.first_nonfinite_of
        found[index] = nid
        if len(found) > 64:
            found.popitem(last=False)
        return nid

    def python_recorded(self, index: int) -> list[tuple[int, NodeGrads]]:
        """(Node id, entry) of the Nodes recorded in Python in pass ``index`` (all of them without the native
        hooks; with them, the Nodes whose gradients were not finite, which they hand over), newest first,
        without reading the passes that wait.

        >>> store = GradStore(); _ = store.add(7, GradRecord(1, [], [])); [nid for nid, _ in store.python_recorded(1)]
        [7]
        """
        found = []
        for nid, entry in reversed(self._nodes.items()):
            records = entry.records
            if not records or records[-1].backward_index != index:
                break
            found.append((nid, entry))
        return found

    def first_nonfinite(self, index: int) -> Optional[tuple[int, GradRecord]]:
        """(Node id, record) of the first Node whose gradients went NaN or infinite in pass ``index``, else
        None, among the Python-recorded Nodes of that pass (:meth:`python_recorded`).

        >>> GradStore().first_nonfinite(1) is None
        True
        """
        return next(((nid, e.records[-1]) for nid, e in self.python_recorded(index) if e.first_nonfinite_pass == index),
                    None)

    def get(self, nid: int) -> Optional[NodeGrads]:
        if self._unread:
            self._read_all()
        return self._nodes.get(nid)

    def leaf_history(self, leaf: torch.Tensor, create: bool = False) -> Optional[LeafHistory]:
        if self._unread:
            self._read_all()
        entry = self._leaf_history(leaf, create)
        if entry is not None:
            _made_all(entry.values)
        return entry

    def leaf_values(self, leaf: torch.Tensor) -> list:
        """``leaf``'s history, made if new, to append this pass's ``.grad`` to (a hook's, each pass): the
        passes that wait to be read go in first, but its entries are not made into summaries (what
        :meth:`leaf_history`, for a reader, does: 32 a leaf, a leaf each pass, a third of a small step's
        leaf hooks).

        >>> store, w = GradStore(), torch.zeros(2, requires_grad=True)
        >>> store.leaf_values(w).append(None); store.leaf_history(w).values
        [None]
        """
        if self._unread:
            self._read_all()
        return self._leaf_history(leaf, True).values

    def _leaf_history(self, leaf: torch.Tensor, create: bool) -> Optional[LeafHistory]:
        leaves = self._leaves
        entry = leaves.get(id(leaf))
        if entry is not None and entry.variable() is not leaf:
            entry = None  # the id was reused by another tensor
        if entry is None and create:
            key = id(leaf)
            entry = LeafHistory(weakref.ref(leaf, lambda _: leaves.pop(key, None)))
            leaves[key] = entry
        return entry


# Devices whose gradients are summarised and read at once (unless device_summary takes them: CUDA's float
# gradients by default). Elsewhere (XLA's lazy tensors, MPS: unmeasured) a read costs far more: read once a pass.
_READ_AT_ONCE = frozenset({"cpu", "cuda"})


def _on_device(grad: torch.Tensor) -> bool:
    return grad.device.type not in _READ_AT_ONCE


# Float gradients summarised on their device with no host read until the pass ends (device_summary.py):
# CUDA's by default (Triton's one launch a gradient, else the batched torch ops); CPU's too with
# FORGEVIZ_SUMMARIES=device (tests, benchmarks); none with FORGEVIZ_SUMMARIES=read (CUDA read at once,
# a host read per gradient, as before issue 27). Strided ones only: a sparse gradient (an Embedding's with
# sparse=True) has no memory of its own to reduce, and is summarised as it is, read at once.
_ON_DEVICE_DTYPES = frozenset({torch.float32, torch.float64, torch.float16, torch.bfloat16})


def _cuda_float(grad: torch.Tensor) -> bool:
    return grad.is_cuda and grad.dtype in _ON_DEVICE_DTYPES and grad.layout == torch.strided


def _never(grad: torch.Tensor) -> bool:
    return False


def _float(grad: torch.Tensor) -> bool:
    return grad.dtype in _ON_DEVICE_DTYPES and grad.device.type in ("cpu", "cuda") and grad.layout == torch.strided


def device_route(default: Callable[[torch.Tensor], bool] = _cuda_float) -> Callable[[torch.Tensor], bool]:
    """Which gradients are summarised on their device (device_summary.py) rather than read at once:
    ``default``'s (CUDA float ones), every float CPU or CUDA one with FORGEVIZ_SUMMARIES=device (tests and
    benchmarks run the GPU's path on the CPU so), none with FORGEVIZ_SUMMARIES=read.

    >>> device_route()(torch.ones(2))  # a CPU gradient is read at once, by default
    False
    """
    mode = _summaries_setting()
    return _float if mode == "device" else _never if mode == "read" else default


# os.environ.get of a variable that is not set raises and catches a KeyError inside (Mapping.get): ~7 us of a
# small training step's backward, which asks every pass. The mapping's own dict of encoded names and values is
# read instead, where CPython has one (it is kept in step with every write to os.environ).
_ENVIRON_DATA = getattr(os.environ, "_data", None)
_SUMMARIES_KEY = os.environ.encodekey("FORGEVIZ_SUMMARIES") if hasattr(os.environ, "encodekey") else None


def _summaries_setting() -> str:
    """``$FORGEVIZ_SUMMARIES`` (device, read or ""), read as it is now.

    >>> _summaries_setting() == os.environ.get("FORGEVIZ_SUMMARIES", "")
    True
    """
    if _ENVIRON_DATA is None or _SUMMARIES_KEY is None:
        return os.environ.get("FORGEVIZ_SUMMARIES", "")
    value = _ENVIRON_DATA.get(_SUMMARIES_KEY)
    return "" if value is None else os.environ.decodevalue(value)


def routes_cpu(route: Callable[[torch.Tensor], bool]) -> bool:
    """Whether ``device_route()``'s ``route`` sends CPU gradients to the device path too (FORGEVIZ_SUMMARIES=device).

    >>> routes_cpu(device_route())
    False
    """
    return route is _float


no_torch_function = torch._C.DisableTorchFunction  # (a name bound once: the hooks enter it per Node)
_PLAIN, _CHAIN, _LEAF_WITH_GRAD, _LEAF_WITHOUT_GRAD = 0, 1, 2, 3  # Node kinds, as grad_hooks.cpp reads them
_DTYPES = ("float32", "float64")  # grad_hooks.cpp's dtype codes
_CHAIN_NAMES = frozenset(LOCAL_DERIVATIVES)


# Which gradients the native hooks send to device_summary (grad_hooks.cpp's kDevice* codes), by on_device
_DEVICE_NONE, _DEVICE_CUDA, _DEVICE_ALL = 0, 1, 2
_DEVICE_CODES = {_never: _DEVICE_NONE, _cuda_float: _DEVICE_CUDA, _float: _DEVICE_ALL}


def _compiled_autograd() -> bool:
    """Whether torch's compiled autograd is on for the next backward: it asks every hook to describe
    itself, which only Python hooks can. (Its module's own flags: torch._dynamo.config reads cost
    ~20 us each.)"""
    compiled = sys.modules.get("torch._dynamo.compiled_autograd")
    return compiled is not None and bool(compiled.compiled_autograd_enabled or compiled.in_compiled_autograd_region)


class BackwardRecorder:
    """Arms Node hooks for one backward call and records summaries into a GradStore.

    With forgeviz's native gradient hooks built (native/grad_hooks.cpp), each Node gets a C++ hook
    that summarises float CPU gradients without Python, and calls :meth:`DeviceSummaries.add` for each
    gradient on the device path (CUDA's); the Python hooks here then run only for the gradients it hands
    over (other devices and dtypes, NaN and infinity on the CPU, small elementwise Nodes whose local
    derivatives are kept), and records are made when the store is next read.
    """

    def __init__(self, store: GradStore, on_fault: Callable[[str], None]) -> None:
        self.store = store
        self.on_fault = on_fault
        self.histograms = True
        # Summaries on the gradients' devices: its buffers last across passes; a pass's read-back (CUDA)
        # is filled in by the next poll() or flush()
        self.device = DeviceSummaries()
        self._reading_from = 0  # the pass whose device summaries were last flushed (read back once its copy is done)
        self._cadence: Cadence = EACH
        self._cadence_from = 0  # the pass count when it was set: every N counts from the next pass
        # a Within cadence's: which passes fit its share of the loop's time (its clock read as each pass begins)
        self.budget: Optional[SummaryBudget] = None
        # the pass the native hooks armed last (None when the latest arm() did not arm them): its Node order
        # spares a memory timeline a walk of its own (CaptureSession.backward_begins)
        self.armed: Optional[NativePass] = None

    @property
    def cadence(self) -> Cadence:
        """Which passes (and Nodes) record: see :func:`cadence_of` (which checks what is set here)."""
        return self._cadence

    @cadence.setter
    def cadence(self, value: Cadence) -> None:
        self._cadence, self._cadence_from = value, self.store.passes
        self.budget = SummaryBudget(value.share) if isinstance(value, Within) else None

    # Whether ``grad`` is summarised on its device and read back when the pass ends (a CPU or CUDA
    # gradient is read at once: see _READ_AT_ONCE). Tests stand in for such a device by replacing it;
    # the native hooks, which read CPU gradients at once, then stay off.
    deferred = staticmethod(_on_device)
    # Whether ``grad`` goes to device_summary (no host read in backward; read once a pass).
    on_device = staticmethod(_cuda_float)

    def arm(self, roots: list) -> Optional[Callable[[], None]]:
        """Register hooks on every Node reachable from ``roots`` (with the ``shown`` cadence, on those
        a view shows). Returns what to call when the backward call ends (even by raising): it removes
        them and completes the pass's records; None when the cadence skips this pass (it is counted).

        Everything a hook needs is bound here, once per pass: a small training step runs a hook per
        Node and a summary per gradient, so each attribute or dict lookup left in them is paid
        dozens of times a step.

        >>> x = torch.tensor([2.], requires_grad=True); y = x * 3
        >>> store = GradStore(); finish = BackwardRecorder(store, print).arm([y.grad_fn])
        >>> y.backward(); finish()
        >>> store.get(y.grad_fn.metadata["fv_id"]).records[-1].grad_inputs[0].values
        [3.0]
        """
        self.armed = None
        store = self.store
        store.passes += 1
        index = store.passes
        device = self.device
        cadence = self._cadence
        only = None  # the ids of the Nodes to hook, when not all
        if cadence != EACH:
            budget = self.budget
            if budget is not None:
                skipped = not budget.begins()
            else:  # (no hook at all on a skipped pass: it costs what it costs without forgeviz)
                skipped = cadence == OFF or (cadence != SHOWN and (index - 1 - self._cadence_from) % cadence)
            if not skipped and cadence == SHOWN:
                only = store.pinned()
                skipped = not only
            if skipped:
                if device.reading:  # (the latest recorded pass's read-back, a CUDA copy: filled once it is done)
                    device.poll()
                return None
        # the copies done fill their summaries; a pass whose numbers are still to come (CUDA: a copy in flight)
        # keeps its Nodes, so its first non-finite Node is found, and told by id, once they come
        store.prune(keep_from=self._reading_from if device.reading and not device.poll() else None)
        store.recorded = index
        histogram, deferred, fault, add = self.histograms, self.deferred, self.on_fault, store.add
        on_device = device_route(self.on_device)
        cuda = torch.cuda.is_initialized()
        leaf_path = on_device is _float or (on_device is _cuda_float and cuda)
        # One gradient is usually both one node's grad_input and the next node's grad_output:
        # summarise it once per pass. Keyed by id, confirmed by a weakref so a reused id misses.
        # Gradients on an accelerator are summarised there and read back when the pass ends.
        cache: dict = {}
        pending = DeferredSummaries()
        recorded: list = []  # (Node id, entry, record) in the order backward ran the Nodes
        nonfinite = False  # a summary so far counted NaN or infinity
        ref = weakref.ref

        def summary(grad: Optional[torch.Tensor]) -> Optional[TensorSummary]:
            nonlocal nonfinite
            if grad is None:
                return None
            hit = cache.get(id(grad))
            if hit is not None and hit[0]() is grad and hit[2] == grad._version:
                return hit[1]
            if on_device(grad):
                made = device.add(grad)
            elif deferred(grad):
                made = pending.summarize(grad, histogram=histogram)
            else:
                made = summarize(grad, histogram=histogram)
                if made is not None and (made.nan_count or made.inf_count):
                    nonfinite = True
            cache[id(grad)] = (ref(grad), made, grad._version)
            return made

        def leaf_summary(grad: Optional[torch.Tensor], parameter: torch.Tensor) -> Optional[TensorSummary]:
            """The summary of a gradient on its way to a parameter with no ``.grad``: on the device path
            that of ``.grad`` when the pass ends (device_summary.add_leaf), which holds nothing meanwhile."""
            if grad is None or not on_device(grad):
                return summary(grad)
            hit = cache.get(id(grad))
            if hit is not None and hit[0]() is grad and hit[2] == grad._version:
                return hit[1]
            made = device.add_leaf(grad, parameter)
            cache[id(grad)] = (ref(grad), made, grad._version)
            return made

        def node_hook(nid: int, chain_node=None, to_leaves=None):
            """``chain_node``: an elementwise Node whose local derivatives are kept too (see chain.py).
            ``to_leaves``: grad_input index → the parameter (with no .grad yet) it goes to."""
            def hook(grad_inputs, grad_outputs):
                # A fault here must never break the user's backward: record it and move on. Our reads of the
                # gradients (version, numel, summaries) are not the user's ops: no mode or subclass sees them.
                with boundary(fault, "recording gradients"), no_torch_function():  # reported, never raised
                    ins = ([summary(g) for g in grad_inputs] if not to_leaves else
                           [summary(g) if i not in to_leaves else leaf_summary(g, to_leaves[i])
                            for i, g in enumerate(grad_inputs)])
                    record = GradRecord(index, [summary(g) for g in grad_outputs], ins)
                    entry = add(nid, record)
                    recorded.append((nid, entry, record))
                    out = grad_outputs[0] if grad_outputs else None
                    # Its saved tensors live until this hook returns. Numbers, not tensors, are kept (a
                    # tensor per Node of a 10,000-op loop would outlive the loop); on an accelerator,
                    # reading them would wait for it, so the chain rule is shown for CPU gradients.
                    if (chain_node is not None and out is not None and out.numel() <= CHAIN_NUMEL and not deferred(out)
                            and not on_device(out)):
                        local = local_derivatives(chain_node, out)
                        entry.local = None if local is None else (
                            index, [d.tolist() if d is not None else None for d in local])
            return hook

        def leaf_hook(node, nid: int, was_none: bool):
            """The Node's record, then the leaf's ``.grad`` after this pass (and whether it was reset
            before it: ``was_none``, read as the backward starts), for the leaf's gradient history
            (scenario S2 of ../shared/SCENARIOS.md)."""
            record_node = node_hook(nid)

            def hook(grad_inputs, grad_outputs):
                record_node(grad_inputs, grad_outputs)  # summarises the incoming gradient first
                with boundary(fault, "recording leaf gradient"), no_torch_function():  # reported, never raised
                    leaf = node.variable
                    values = store.leaf_values(leaf)
                    if was_none and values:
                        values.append(None)  # .grad was reset (zero_grad) since the last pass
                    # AccumulateGrad has updated .grad by now (a post-accumulate hook may have reset it).
                    # A .grad that was None became the incoming gradient (kept, or copied into the
                    # parameter's layout): same values, so its summary, from the cache.
                    grad = leaf.grad
                    seen = grad_outputs[0] if was_none and grad_outputs and grad_outputs[0] is not None else grad
                    values.append(summary(seen) if grad is not None else None)
                    if len(values) >= 2 * LEAF_HISTORY:  # (trimmed to LEAF_HISTORY as it is read: _made_all)
                        del values[:-LEAF_HISTORY]

            return hook

        def python_hook(node, nid: int, kind: int):
            if kind >= _LEAF_WITH_GRAD:
                return leaf_hook(node, nid, kind == _LEAF_WITHOUT_GRAD)
            # On the device path, a gradient held until its batch is reduced would make AccumulateGrad
            # copy it rather than keep it as .grad: those are summarised as .grad at the pass's end. Only
            # for a leaf fed by this one edge ("fv_fed", set as the pass is armed): a leaf fed twice is
            # given the sum of its gradients, and x*y+x's Mul would show x's whole .grad as its own.
            to_leaves = None
            if leaf_path:
                with boundary(fault, "finding the parameters a Node's gradients go to"):
                    to_leaves = {i: f.variable for i, (f, _) in enumerate(node.next_functions)
                                 if type(f).__name__ == "AccumulateGrad" and f.variable.grad is None
                                 and f.metadata.get("fv_fed") == 1} or None
            return node_hook(nid, node if kind == _CHAIN else None, to_leaves)

        dead = store.dead
        armed = None
        # (the native hooks walk and hook the whole graph: a few shown Nodes get Python hooks instead). On the
        # device path they call device.add per gradient, not a Python hook per Node: GPT-2's backward on an H100
        # ran 532 Python hooks a step, and its GPU waited on them.
        device_code = _DEVICE_CODES.get(on_device)
        if device_code == _DEVICE_CUDA and not cuda:
            device_code = _DEVICE_NONE  # (no CUDA tensor yet: the C++ hooks then check no gradient's device)
        native_ok = only is None and deferred is _on_device and device_code is not None and not _compiled_autograd()
        lib = native.hooks() if native_ok else None
        if lib is not None:
            handed: dict = {}  # the Python hooks of Nodes whose gradients the C++ hooks handed over

            def hand_over(node, nid: int, kind: int, grad_inputs, grad_outputs) -> None:
                hook = handed.get(nid)
                if hook is None:
                    hook = handed[nid] = python_hook(node, nid, kind)
                hook(grad_inputs, grad_outputs)

            # the walk, the ids and the hooks, in C++; None: a root it does not know (on a fault, Python
            # hooks record this pass, as without the library)
            with boundary(fault, "arming native gradient hooks"):
                armed = lib.arm(list(roots), _CHAIN_NAMES, NODE_IDS, dead.append, hand_over,
                                HISTOGRAM_SAMPLE, HISTOGRAM_BINS if histogram else 0, SMALL_NUMEL, CHAIN_NUMEL,
                                device_code, device.add, device.add_leaf)
            if armed is not None:
                self.armed = NativePass(lib, armed)
        handles = []
        armed_pass = self.armed
        if armed is None:
            nodes = iter_graph(roots)
            if leaf_path:  # each leaf without .grad: how many edges feed it (fv_arm counts them in C++)
                with boundary(fault, "counting the gradients each parameter is given"):
                    fed: dict = {}
                    for node in nodes:
                        for f, _ in node.next_functions:
                            if type(f).__name__ == "AccumulateGrad":
                                fed[f] = fed.get(f, 0) + 1
                    for f, count in fed.items():
                        if f.variable.grad is None:
                            f.metadata["fv_fed"] = count
            for node in nodes:
                meta = node.metadata  # node_id() and GradStore.watch(), with one read of the dict
                nid = meta.get("fv_id")
                if only is not None and nid not in only:
                    continue
                if nid is None:
                    nid = meta["fv_id"] = next(NODE_IDS)
                if "fv_gone" not in meta:
                    meta["fv_gone"] = NodeGone(dead, nid)
                name = type(node).__name__  # a C++ Node's class is its name(): "MulBackward0"
                if name == "AccumulateGrad":
                    kind = _PLAIN  # on a fault: the Node is still recorded; its leaf history is not
                    with boundary(fault, "reading a leaf's gradient"):
                        kind = _LEAF_WITHOUT_GRAD if node.variable.grad is None else _LEAF_WITH_GRAD
                else:
                    kind = _CHAIN if name in LOCAL_DERIVATIVES else _PLAIN
                handles.append(node.register_hook(python_hook(node, nid, kind)))

        def finish() -> None:
            for handle in handles:
                handle.remove()
            if armed is not None:
                nids, leaves, faults = lib.finish(armed)
                for message in faults:
                    fault(message)
                native_pass.append(armed_pass)
                store.add_unread(index, native_pass[0], nids, leaves, bool(handed))
            if device:
                # CPU: filled now. CUDA: when the copy's event says so (a later device.poll()), and the first
                # non-finite Node is found then
                device.flush(on_nonfinite=first_nonfinite)
                self._reading_from = index  # (the copy of the pass before is done: flush waited for it)
            waited = bool(pending)
            if waited:
                pending.flush()
            if nonfinite or waited:
                first_nonfinite()

        native_pass: list = []  # the pass as the native hooks recorded it, once finished
        marked: list = []  # (this pass's first non-finite Node is found once)

        def first_nonfinite() -> None:
            """The first Node, in the order backward ran them, whose gradients are not all finite: among the
            Python hooks' Nodes (the native hooks hand over each CPU gradient that is not), else among the
            native hooks' rows (the device path's summaries stay there)."""
            if marked:
                return
            with boundary(fault, "finding the first non-finite gradient"):
                for nid, entry, record in recorded:
                    if has_nonfinite(record.grad_inputs + record.grad_outputs):
                        marked.append(store.found_nonfinite(index, nid, entry))
                        return
                if native_pass and store.mark_first_nonfinite(index, native_pass[0]) is not None:
                    marked.append(index)

        return finish
