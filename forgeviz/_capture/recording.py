"""Recording a training script (``forgeviz.record``, ``python -m forgeviz record``): per optimizer step, the
gradients the optimizer applies (read in a global optimizer step pre-hook, so after DDP's all-reduce,
clipping and anything the script did to ``.grad``), each module's parameters together, the gradient that
reached each Node during backward (this rank's own, from the session's records), each distinct autograd
graph once, and memory per step. Rows gather here and go to the run's writer (``forgeviz.run.writer.RunWriter``) a
segment at a time; the disk is the writer thread's.

What the training thread pays is kept to a few microseconds a step (recording costs at most 2% on top of
capture, issue 28): the native *reader* summarises and fingerprints (a few MiB of gradients at once, on the
training thread; more, when torch's threads leave a core free, on its own thread beside ``step()``), and it keeps
numbers, not rows: the writer's thread builds the columns of a segment (from the ``functools.partial`` of a row
builder and its numbers that stand in the segment's list, all its steps at once: grad_rows.grads_segment) as it
writes it.

- Parameters: the optimizer step pre-hook hands over each parameter (the native reader takes its ``.grad``
  and version counter in C++); the reader reads them then, or while ``step()`` runs (optimizers read ``.grad``,
  they do not write it), and the post-hook waits for it before ``step()`` returns, so ``zero_grad()`` and the
  next backward never race it. An optimizer that did change a ``.grad`` in place during ``step()`` (its
  version moved) has that step's parameter rows dropped, and its later steps read on the training thread,
  before ``step()``. The numbers stay with the native job until the writer's thread makes the rows. With one
  rank, a step whose ``.grad`` tensors are those the backward before it summarised, at the same versions, with no
  in-place op and none of their memory handed out since (``_EXPOSING``), reads nothing: its rows are that
  backward's numbers (``NativePass.leaf_stats``). With more than one rank each gradient is fingerprinted too (its
  bit patterns summed, :func:`fingerprint`, compared across ranks); with one, nothing is compared and none is made
  (a rank's world is asked again at each step until torch.distributed has started: mp.spawn's ranks start it after
  recording began).
  On a GPU (the device path, ``grads.device_route``) the pre-hook launches their summaries on the device
  (device_summary.py: with Triton one launch per dtype) and, with more than one rank, their fingerprints
  (each gradient's bit patterns summed, exactly), queued before ``step()``'s kernels, so ``step()`` cannot
  change what they read; one copy to pinned memory, no host read. The rows are made once a segment has
  waited for that read-back.
- Nodes: the native hooks' pass keeps its summaries in C++; ``node_stats`` takes five numbers per Node
  once a backward (and, for the gradients the device path summarised, their summaries, filled when the
  pass's one read-back is done), and the writer's thread turns them into rows.
- The graph: a signature of the Nodes' types, edges and parameters says whether this backward's graph is one
  already recorded; only a new one is built and written. The native hooks' pass has it from arming the graph
  (``NativePass.recorded``: no second walk, and no hook before backward); a pass the Python hooks recorded is
  walked after the backward (its Nodes and edges outlive it), in C++ where the library is built
  (``walk`` in grad_hooks.cpp).
- A writer that falls behind (a slow disk, a writer thread starved of CPU) loses nothing at first: a segment its
  queue has no room for is held back and handed over again, ahead of the next (:meth:`Recorder._hand`); meanwhile
  segments come further apart (fewer, larger writes), then the recording keeps every second step's gradient rows,
  every fourth, … (up to every 16th) until the queue has room again (:meth:`Recorder._keep_pace`; said in the
  metadata, ``writer_thinned``). Only rows held back past ``HELD_ROWS`` are given up, oldest first, counted and
  named by their steps (``dropped_steps``). A writer that stopped (a full disk: its fault told once) takes every
  segment and lets it go (RunWriter.submit), so nothing is held for it.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import platform
import queue
import sys
import threading
import time
import weakref
from _thread import allocate_lock
from datetime import datetime, timezone
from typing import Callable, Optional

import torch

from ..model.graph import graph_trait
from ..model.run import (
    CUDA_MEMORY,
    FINDINGS,
    FORMAT,
    FORMAT_VERSION,
    GRADS,
    GRAPHS,
    MEMORY,
    STEPS,
)
from . import native
from .cadence import EACH, Within, cadence_text
from .cuda_memory import allocated_and_peak
from .device_summary import DeviceSummaries
from .fault import boundary, report
from .grad_rows import (
    NONFINITE,
    _figures,
    _leaf_rows,
    _native_rows,
    _node_rows,
    _summary_row,
    grads_segment,
    nonfinite_parameters,
    parameter_rows,
)
from .grads import NODE_STATS_SIZE, NativePass, device_route, iter_graph, no_torch_function, routes_cpu
from .names import NameIndex
from .summary import _summarize_natively, summarize
from .untraced import untraced
from .walk import build_graph, reachable

_C10D_AVAILABLE = torch.distributed.is_available()
if _C10D_AVAILABLE:  # (not on every build of torch)
    from torch.distributed import distributed_c10d as _c10d

SEGMENT_ROWS = 8192  # a segment is written once this many rows wait...
SEGMENT_SECONDS = 2.0  # ...or this long after the last one (what a SIGKILL can lose at most)
BUDGET_BYTES = 256 * 2**20
MAX_GRAPHS = 32  # distinct graphs recorded per rank, at most
GRAPH_NODES = 20_000
# Rows of one stream held back while the writer's queue is full (about 100 bytes each), at most: past this the oldest
# held segment is given up (counted, its steps named in the metadata)
HELD_ROWS = 4 * SEGMENT_ROWS
# the writer's queue half full (or a segment held back) at a segment's hand-over: segments come twice as far apart
# (small ones, made by the clock: fewer, larger segments lose nothing), else the recording thins its gradient rows
# another step (every second step's, every fourth, …); each to MAX_LAG times at most; empty: one step back
MAX_LAG = 16
PASSES_KEPT = 8  # recent backward passes whose first non-finite Node can still be told (GradStore.nonfinite_found's)


def _exposing() -> set:
    """The functions (as a TorchFunctionMode is handed them) that give out a tensor's memory with no version
    counter to see writes through it: ``.data``, ``numpy()``, ``data_ptr()``, a storage, DLPack, ``set_()`` of
    another tensor onto its storage. One of them, or any in-place op (grad_hooks.cpp's ``may_write``: some move no
    version counter), called between a backward and the optimizer step after it means ``.grad`` may have changed
    unseen: the step reads it again (:meth:`Recorder._step_begins`)."""
    base, tensor = torch._C.TensorBase, torch.Tensor
    return {base.data.__get__, base.data.__set__, base.numpy, base.data_ptr, base.untyped_storage, base.set_,
            tensor.storage, tensor.__array__, tensor.__dlpack__}


_EXPOSING = _exposing()


def rank_and_world() -> tuple[int, int]:
    """This process's rank and world size: torch.distributed's once initialised, else torchrun's
    ``RANK`` / ``WORLD_SIZE``, else (0, 1)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def _distributed() -> bool:
    """Whether torch.distributed has started: a step asks while the world is one rank (mp.spawn's ranks start it
    after recording began, and their fingerprints are then wanted). ``is_initialized()`` is three Python calls
    (GroupMember.WORLD's class property, then _World.default_pg's); the default group's attribute is read here
    directly, where this torch keeps one (its _World: not a test's thread-local world).

    >>> _distributed()
    False
    """
    if not _C10D_AVAILABLE:
        return False
    world = _c10d._world
    return (world._default_pg if type(world) is _c10d._World else world.default_pg) is not None


def _native_steps_config() -> tuple:
    """What grad_hooks.cpp's record_step_begins, record_step_ends and record_after_backward (the common case of
    :class:`Recorder`'s three hooks) read of this module, in their order (its ``RecorderConfig``)."""
    return (GRADS, STEPS, SEGMENT_ROWS, _leaf_rows, _node_rows, _EXPOSING, _c10d if _C10D_AVAILABLE else None,
            _c10d._World if _C10D_AVAILABLE else None, functools.partial, NODE_STATS_SIZE, report, _native_rows)


def _rank_known() -> bool:
    """Whether :func:`rank_and_world` knows this process's rank yet (torch.distributed started, or a launcher's
    ``RANK``), rather than guessing rank 0."""
    return _distributed() or "RANK" in os.environ
_ACCUMULATE = torch._C._functions.AccumulateGrad


def fingerprint(grad: torch.Tensor, lib=None) -> int:
    """A gradient's fingerprint, which ranks compare (:func:`fold_bit_sum`): its elements' bit patterns summed
    as integers, exactly, in any order. Equal tensors (bit for bit) give equal numbers, however they lie in
    memory and on whichever device; a changed element changes it. The native reader makes the same number.
    ``lib``: forgeviz's native library, which sums a float CPU tensor in one call (else torch does).

    >>> a, b = torch.tensor([1., 2.]), torch.tensor([1., 3.])
    >>> fingerprint(a) == fingerprint(a.clone()) == fingerprint(torch.tensor([2., 1.])) != fingerprint(b)
    True
    """
    total = ctypes.c_uint64()
    if lib is not None and lib.fv_bit_sum_tensor(ctypes.c_void_p(grad._cdata), ctypes.byref(total)) == 0:
        return fold_bit_sum(total.value)
    with no_torch_function():
        return fold_bit_sum(int(bit_patterns(grad.detach()).sum(dtype=torch.int64)))


def _stats(grad: torch.Tensor, lib) -> tuple[float, float, float, float, int]:
    """(norm, min, max, mean, numel): one native pass for a float CPU tensor, torch ops otherwise."""
    s = _summarize_natively(grad, False, lib) if lib is not None else None
    if s is None:
        s = summarize(grad, histogram=False)
    return _figures(s)


def _read_one(grad: torch.Tensor, lib, fingerprinted: bool = True) -> tuple:
    """(norm, min, max, mean, numel, fingerprint or None when not ``fingerprinted``) of one gradient, in Python
    (and tensor_stats.cpp's pass); called inside ``untraced()`` and ``torch.no_grad()`` (the CPU ledger's pause
    is the thread's own)."""
    return (*_stats(grad, lib), fingerprint(grad, lib) if fingerprinted else None)


def read_parameters(step: int, params: list, lib=None, fingerprinted: bool = True) -> tuple[list[tuple], list[tuple]]:
    """The gradient rows of one optimizer step: a parameter row per ``(name, module, grad, sharded)`` of
    ``params`` and a module row per module, its parameters together (grads rows, in schema order); and
    a ``nonfinite-grad`` finding (findings row) for the first parameter whose gradient is not finite.
    ``fingerprinted``: whether each gradient's :func:`fingerprint` is made (ranks to compare; else its row has
    None).

    >>> rows, found = read_parameters(1, [("w", "fc", torch.tensor([3., 4.]), False),
    ...                                   ("b", "fc", torch.tensor([float("nan")]), False)])
    >>> [(r[1], r[2], r[4]) for r in rows[:1]], [(f[1], f[2]) for f in found]
    ([('parameter', 'w', 5.0)], [('nonfinite-grad', 'b')])
    """
    with untraced(), torch.no_grad():
        read = [(name, module, sharded, _read_one(grad, lib, fingerprinted)) for name, module, grad, sharded in params]
    return parameter_rows(step, read)


# The signed integer type of each element width: a gradient's fingerprint sums its bit patterns read as it
_INT_OF_WIDTH = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bit_patterns(grad: torch.Tensor) -> torch.Tensor:
    """``grad``'s elements' bit patterns, as signed integers of their width: a view, nothing copied (a sparse
    gradient's dense copy, a lazily negated or conjugated one's resolved copy; a complex one's real and imaginary
    parts, each an element).

    >>> bit_patterns(torch.tensor([1.0, -2.0])).tolist() == [0x3f800000, -0x40000000]
    True
    """
    if grad.layout != torch.strided:
        grad = grad.to_dense()
    if grad.is_complex():
        grad = torch.view_as_real(grad.resolve_conj())
    return grad.resolve_neg().view(_INT_OF_WIDTH[grad.element_size()])  # (a lazy negation's values, applied)


def fold_bit_sum(total: int) -> int:
    """A gradient's fingerprint: the 64-bit sum (wrapping) of its elements' bit patterns (:func:`bit_patterns`),
    folded to the fingerprint column's 32 bits. Integer sums are exact in any order, so equal gradients (bit for
    bit) give equal fingerprints on every rank however the device reduces; a changed value changes the sum.

    >>> fold_bit_sum(torch.tensor([1., 2.]).view(torch.int32).sum().item())  # 0x3f800000 + 0x40000000
    2139095040
    """
    total &= 0xFFFFFFFFFFFFFFFF
    return (total ^ (total >> 32)) & 0xFFFFFFFF


def _launch_bit_sums(grads: list) -> list[tuple]:
    """Each gradient's bit-pattern sum (:func:`fold_bit_sum`, before folding), launched on its device (an op a
    gradient, into one int64 tensor per device) and copied to the host (CUDA: pinned memory, ``non_blocking``):
    ``(positions in grads, host tensor, event or None)`` per device; read them with :func:`_bit_sums`."""
    by_device: dict = {}
    for k, g in enumerate(grads):
        by_device.setdefault(g.device, []).append(k)
    launched = []
    for device, positions in by_device.items():
        sums = torch.empty(len(positions), dtype=torch.int64, device=device)
        for slot, k in zip(sums.unbind(0), positions):
            bits = bit_patterns(grads[k])
            torch.sum(bits, list(range(bits.dim())), dtype=torch.int64, out=slot)  # (every dimension; 0-d too)
        cuda = device.type == "cuda"
        host = torch.empty(len(positions), dtype=torch.int64, pin_memory=cuda)
        host.copy_(sums, non_blocking=cuda)
        event = None
        if cuda:
            event = torch.cuda.Event()
            event.record()
        launched.append((positions, host, event))
    return launched


def _bit_sums(launched: list, count: int) -> list[Optional[int]]:
    """The fingerprints :func:`_launch_bit_sums` launched (``count`` gradients), once their copies are done."""
    prints: list[Optional[int]] = [None] * count
    for positions, host, event in launched:
        if event is not None:
            event.synchronize()  # (done: a segment's rows are built after its read-back)
        for k, total in zip(positions, host.tolist()):
            prints[k] = fold_bit_sum(total)
    return prints


def _device_parameter_rows(step: int, described: list, made: list, launched: Optional[list]) -> list[tuple]:
    """The parameter and module rows of a step read on the device path, once its read-back is done:
    ``made``, each gradient's summary; ``launched``, their fingerprints (None: one rank, nothing to compare)."""
    prints = _bit_sums(launched, len(made)) if launched is not None else [None] * len(made)
    read = [(d[0], d[1], d[2], (*_figures(s), fp)) for d, s, fp in zip(described, made, prints) if s.norm is not None]
    return parameter_rows(step, read)[0]


def _step_grads(params: list, described: list) -> list:
    """Each parameter's ``.grad``, a DTensor's as this rank's shard (each rank reads its own)."""
    return [g.to_local() if g is not None and d[2] else g for g, d in zip((p.grad for p in params), described)]


def _present(described: list, grads: list) -> list[tuple]:
    """``read_parameters``' ``params`` from a plan's (name, module, sharded) and the step's .grad tensors."""
    return [(d[0], d[1], g, d[2]) for d, g in zip(described, grads) if g is not None]


def _read_present(step: int, described: list, grads: list, lib, fingerprinted: bool) -> tuple[list[tuple], list[tuple]]:
    """:func:`read_parameters` of the parameters that have a gradient (on the reader thread)."""
    return read_parameters(step, _present(described, grads), lib, fingerprinted)


class _Job:
    """One job for the reader thread; :meth:`wait` gives its result (or raises its error). A lock, not a
    ``concurrent.futures.Future``: a step hands two jobs over and waits for them, and a Future's condition
    and callbacks cost the training thread several times what a lock does."""

    __slots__ = ("job", "args", "versions", "result", "error", "_done")

    def __init__(self, job: Callable, args: tuple, versions) -> None:
        self.job, self.args, self.versions = job, args, versions
        self.result = self.error = None
        self._done = allocate_lock()
        self._done.acquire()  # released by the reader once the job ran

    def run(self) -> None:
        try:
            self.result = self.job(*self.args)
        except Exception as error:  # noqa: BLE001 (given back to the hook that waits: a fault there)
            self.error = error
        finally:
            self.args = None
            self._done.release()

    def wait(self):
        with self._done:
            pass
        if self.error is not None:
            raise self.error
        return self.result

    def torn(self) -> bool:
        """Whether a ``.grad`` it read changed while it was read (its version moved)."""
        return self.versions is not None and \
            [None if g is None else g._version for g in self.versions[0]] != self.versions[1]


def _native_read_rows(reader, job, step: int, described: list, fingerprinted: bool) -> tuple[list[tuple], list[tuple]]:
    """The rows and findings of a native reader's ``job`` that left gradients to Python (``numbers`` gives
    those tensors back: another dtype or layout, or not finite), read here with :func:`_read_one`
    (``fingerprinted``: as the job was read)."""
    read = []
    for (name, module, sharded), got in zip(described, reader.numbers(job)):
        if got is None:
            continue
        if type(got) is tuple:
            lo, hi, total, norm, numel, fp = got
            read.append((name, module, sharded, (norm, lo, hi, total / numel, numel, fp)))
        else:
            with untraced(), torch.no_grad():
                read.append((name, module, sharded, _read_one(got, native.loaded(), fingerprinted)))
    return parameter_rows(step, read)


def _step_of(table: str, item) -> int:
    """The step of a row of ``table`` (its ``step`` field) or of a row builder (its first argument).

    >>> _step_of(STEPS, (7, 0.5, None, None)), _step_of(GRADS, functools.partial(_leaf_rows, 9, [], b""))
    (7, 9)
    """
    if type(item) is tuple:
        return item[1] if table == GRAPHS else item[0]
    return item.args[0]


class _Reader:
    """A thread that runs jobs in the order handed over (``queue.SimpleQueue``: one C call to put)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="forgeviz-record-read", daemon=True)
        self._thread.start()

    def submit(self, job: Callable, args: tuple, versions=None) -> _Job:
        handed = _Job(job, args, versions)
        self._jobs.put(handed)
        return handed

    def _run(self) -> None:
        jobs = self._jobs
        while True:
            job = jobs.get()
            if job is None:
                return
            job.run()
            del job  # (waiting for the next one, it would keep this one's gradients alive)

    def shutdown(self) -> None:
        self._jobs.put(None)
        self._thread.join()


class Recorder:
    """Records one rank into ``folder/rank<N>/`` while installed (see the module's docstring)."""

    def __init__(self, session, open_writer: Callable[[int, dict], object], every: int = 1,
                 command: Optional[list[str]] = None, budget_bytes: int = BUDGET_BYTES,
                 segment_seconds: float = SEGMENT_SECONDS, memory=None, cuda=None,
                 within: Optional[float] = None) -> None:
        """``open_writer(rank, metadata)``: the writer of this rank's part of the run (forgeviz.run's
        RunWriter, given by ``forgeviz.record``: capture records, the run package writes). ``memory``: a
        started MemoryTracker whose events are written, a segment at a time, to the memory stream.
        ``cuda``: a function returning a started CUDA allocator history once CUDA is in use, None before
        (``cuda_memory.history_once_in_use``; a test gives its own): asked at each backward and step until it
        gives one, whose entries since the last segment (``take()``) go to the cuda_memory stream. ``within``: the
        share of a ``"within P%"`` cadence the session summarises by (``every`` 1): a rank of one then records a
        step's parameter gradients only where the backward before it was summarised (their summaries, read then)."""
        self.session = session
        self.fault = session.fault  # (the step hooks report there)
        self._segment_seconds = segment_seconds  # as asked
        self.segment_seconds = segment_seconds  # as now: longer while the writer is behind (grad_hooks.cpp reads it)
        self.every = every  # parameters are recorded on steps 1, 1 + every, …; 0: none
        self.within = within  # (with every 1: one rank records the steps whose backward was summarised)
        self.budget = budget_bytes
        self.rank, self.world = rank_and_world()
        self.step = 1  # the optimizer step under way (steps are counted from 1 at optimizer.step())
        self.stride = 1  # every stride-th step records: the larger of the budget's and the writer's (_records_step)
        self.downsampled: list[list[int]] = []  # [from step, stride]: the size budget's, raised as it fills
        self._budget_stride = 1
        # [from step, stride]: every stride-th step kept while the writer's queue was behind (1: every step again)
        self.writer_thinned: list[list[int]] = []
        self._lag_stride = 1
        self._lag_spacing = 1  # segments this many times segment_seconds apart, while the writer is behind
        # table -> (rows and row builders held back while the writer's queue was full, their rows counted, whether
        # one is a builder); handed over again, ahead of the next of that table
        self._held: dict[str, tuple[list, int, bool]] = {}
        self.dropped_steps: list[list] = []  # [first step, last step, table] of rows given up (held past HELD_ROWS)
        self.terminated = ""  # how the process was ended, if a signal ended it ("SIGTERM after step 12")
        self.closed = False
        self.over_budget_at: Optional[int] = None
        self.torn_steps: list[int] = []  # steps whose parameter rows were dropped (.grad changed in step())
        self._records = bool(every)  # whether the step under way records (_records_step(), kept as it changes)
        self._t0 = time.perf_counter()
        self._last_flush = self._t0
        # rows in schema order (and in GRADS, row builders: rows the writer's thread builds, grads_segment)
        self._rows: dict[str, list] = {GRADS: [], STEPS: [], FINDINGS: []}
        self._later_rows = 0  # about how many rows the builders in self._rows[GRADS] build
        self._later = False  # whether self._rows[GRADS] holds a builder (one may build no row: none counted)
        # whether one of them holds summaries of the device path, whose numbers come with a pass's read-back
        self._later_on_device = False
        # step, graph, ids and described of the recent recorded backward passes, by pass: a pass's first non-finite
        # Node may be found after it (on CUDA, when its read-back is done)
        self._passes: dict[int, tuple] = {}
        self._names: dict[int, tuple] = {}  # id(parameter) -> (weakref, name, module path)
        # signature -> (graph id or None, described: per Node in the walk's order, (name, module, position in
        # the recorded graph or None))
        self._graphs: dict[tuple, tuple] = {}
        self._counting = None  # a weakref to the optimizer whose steps count
        # a step under way (its optimizer), and how many of its hooks' pairs run inside it: a subclass whose
        # step() calls super().step() runs the global step hooks twice once the parent's step is patched
        self._stepping: Optional[int] = None  # (an id: a step that raised must not keep its optimizer alive)
        self._nested = 0
        self._in_place: set[type] = set()  # optimizer classes seen changing .grad during step()
        # The native pass of the last backward, while the window from its end to the next step is open: when no
        # .grad changed since (the same tensors at the same versions, and no in-place op or _EXPOSING call), the
        # step's parameter rows are that pass's leaf summaries, and nothing is read again (one rank: no fingerprints)
        self._leaf_pass = None
        self._reuses = True  # (False: every step reads, as tests and bench_record compare)
        # whether the three hooks' common case runs in C++ where the native hooks are built (_hooks); False: all in
        # Python, as tests compare
        self.native_steps = True
        self._hooks: tuple = ()  # (step pre-hook, post-hook, after-backward callback) while installed
        self._plain = False  # _plain_now() as of the last hook handed to Python (or install()): grad_hooks.cpp reads it
        # (step, described, summaries) of the steps on the device path that took the backward's summaries: their
        # nonfinite-grad finding is made once the read-back filled them (_flush)
        self._reused_on_device: list[tuple] = []
        self.reused = 0  # steps whose parameter rows were the backward's summaries
        # reader jobs: a _Job (the Python reader's), or the native reader's (reader, job, step, described,
        # fingerprinted)
        self._reading: list = []
        self._reader = _Reader()
        self._native_reader = native.reader()  # the parameters' reader, in C++ (None: the Python reader's)
        self._cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        # whether the native reader may poll for the next step's hand-over, sparing this thread its wake-up: when
        # torch's threads leave it a core (see grad_reader.cpp's Worker). Asked again once a segment, not each
        # step (a cold call into torch inside the step: 2-3 us of a recorded MLP step's ~35)
        self._poll = self._reader_polls()
        # optimizer -> what its step hands over: (its param lists, their lengths, the parameters, their
        # (name, module, sharded), whether any is off the CPU); made again when its param_groups change
        self._plans: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        self._last_plan: Optional[tuple] = None  # (weakref to an optimizer, its plan): the one that stepped last
        self._cuda = torch.cuda.is_available()
        # which .grad tensors are summarised on their device (CUDA's; every float one with FORGEVIZ_SUMMARIES=device),
        # and the summaries of those (made at the first such step)
        self._route = device_route()
        self._route_cpu = routes_cpu(self._route)
        self._device_params: Optional[DeviceSummaries] = None
        self._handles: list = []
        self.memory = memory
        self.memory_lost = 0  # events the ledger merged before they were written (none unless it overflowed)
        self._cuda_wanted = cuda  # until CUDA is in use; then self.cuda, the history
        self.cuda = None
        self.cuda_overflowed: Optional[int] = None  # the step whose segment overflowed the history's ring
        if memory is not None:
            stats = memory.ledger.stats()
            self._mem_written = 0  # absolute event numbers (an event's index plus the events merged before it)
            self._mem_bounds = [(stats.count + stats.dropped, 0)]  # (end, step): step 0 is what existed before
        self._open_writer, self._command = open_writer, command
        self._started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        # The rank names the folder. Where torch.distributed has not started and no launcher set RANK (mp.spawn's
        # ranks start it inside the script, perhaps inside this block), the writer opens at the first backward or
        # step, by when DDP has started it (or at close): each rank then writes its own folder, not all of them rank0/
        self.writer = None
        if _rank_known():
            self._open()

    def _open(self) -> None:
        """Open this rank's writer, its folder named by the rank known now."""
        self._learn_rank()
        self.writer = self._open_writer(self.rank, self._meta(self._command))

    def _learn_rank(self) -> None:
        """The rank and world as torch.distributed (or the launcher) says now: at the writer's opening, at a step
        while the world is one rank, at close. A world only grows: a rank of one learns of the others, and one
        whose process group was destroyed keeps what it knew."""
        self.rank, world = rank_and_world()
        self.world = max(self.world, world)

    def _meta(self, command) -> dict:
        return {"format": FORMAT, "format_version": FORMAT_VERSION,
                "torch": torch.__version__, "python": platform.python_version(),
                "device": "cuda" if torch.cuda.is_available() else "cpu", "rank": self.rank,
                "world_size": self.world, "command": list(command if command is not None else sys.argv),
                "started": self._started,
                "grads": ("off" if not self.every else cadence_text(Within(self.within)) if self.within
                          else cadence_text(EACH if self.every == 1 else self.every)),
                "budget_bytes": self.budget, "finished": False, "fingerprint": "bit-sum",
                "memory": None if self.memory is None else {
                    "source": f"cpu ledger ({self.memory.backend})", "baseline_bytes": self.memory.baseline_bytes}}

    # --- lifecycle ---------------------------------------------------------------------------
    def install(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._hooks = self.hooks()
        self._plain = self._plain_now()
        self._handles = [register_optimizer_step_pre_hook(self._hooks[0]),
                         register_optimizer_step_post_hook(self._hooks[1])]
        self.session.after_backward_of.append(self._hooks[2])
        if self._cuda_wanted is not None:  # (until CUDA is in use: then its history records the first backward too)
            self.session.before_backward.append(self._cuda_before_backward)

    def hooks(self) -> tuple[Callable, Callable, Callable]:
        """What :meth:`install` registers: the optimizer step's pre-hook and post-hook, and the session's
        after-backward callback. Where the native hooks are built, grad_hooks.cpp's: the common case of a step in
        C++ (the same attributes changed the same way), and the rest by :meth:`_step_begins`, :meth:`_step_ends`
        and :meth:`_after_backward`, which are the hooks themselves without it (or with ``native_steps`` False).

        >>> class Session: fault = print
        >>> [callable(hook) for hook in Recorder(Session(), print).hooks()]
        [True, True, True]
        """
        # (a recorder the common case can never take, a GPU rank's say, registers its methods: C++ in front of them
        # would only add a call and a _plain_now() to each hook)
        lib = native.hooks() if self.native_steps and self._may_be_plain() else None
        if lib is None:
            return self._step_begins, self._step_ends, self._after_backward
        config = _native_steps_config()
        return (functools.partial(lib.record_step_begins, self, config),
                functools.partial(lib.record_step_ends, self, config),
                functools.partial(lib.record_after_backward, self, config))

    def _may_be_plain(self) -> bool:
        """What of :meth:`_plain_now` is set when the recorder is made (or before :meth:`install`): gradients on the
        CPU only (no CUDA here, none routed to the device path), no memory timeline, every step recorded, and (one
        rank) the backward's summaries reused."""
        return (not self._cuda and not self._route_cpu and self.memory is None and self.every == 1
                and (self._reuses or self.world > 1))

    def _plain_now(self) -> bool:
        """Whether what the native hooks' common case needs of the attributes that change only in this class's
        methods holds: :meth:`_may_be_plain`, an open writer, no CUDA history, nothing thinned by the size budget;
        and one rank, or several with the native reader (whose job the step hooks then hand over and wait for in
        C++). grad_hooks.cpp keeps it in ``_plain`` after each call it hands to Python (no other path changes them),
        and checks what changes step by step itself."""
        return (self._may_be_plain() and self.writer is not None and self._cuda_wanted is None
                and self._counting is not None and (self.world == 1 or self._native_reader is not None)
                and self.cuda is None and self.stride == 1 and self.over_budget_at is None)

    def uninstall(self) -> None:
        """Remove the hooks (the writer stays open: :meth:`install` again, or :meth:`close`)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._end_window()
        if self._hooks and self._hooks[2] in self.session.after_backward_of:
            self.session.after_backward_of.remove(self._hooks[2])
        self._hooks = ()  # (C++'s hold the recorder)
        self._plain = False
        if self._cuda_before_backward in self.session.before_backward:
            self.session.before_backward.remove(self._cuda_before_backward)

    def close(self, wait: float = 10.0, timeout: float = 60.0) -> None:
        """Remove the hooks, write what waits, and the final metadata (once: a second call does nothing). ``wait``:
        how long each stream's last segment may wait for room in the writer's queue; ``timeout``: how long the
        writes may take (a stuck disk: then the metadata says so)."""
        if self.closed:
            return
        self.closed = True
        self.uninstall()
        if self.writer is None:  # (no backward and no step ran)
            self._open()
        with boundary(self.session.fault, "writing the recording's last segment"):
            self._collect()
            self._flush(wait=wait)  # (what is held back waits for room now: a slow disk is no reason to lose it)
        if self.cuda is not None:
            with boundary(self.session.fault, "stopping the CUDA allocator history"):
                self.cuda.stop()
        self._reader.shutdown()
        if _distributed():  # it may have started after the writer opened (a script's own init inside the block)
            self._learn_rank()
            self.writer.meta["rank"] = self.rank
        self.writer.meta["world_size"] = self.world
        final = {"finished": True, "steps": self.step - 1, "downsampled": self.downsampled,
                 "over_budget_from_step": self.over_budget_at, "torn_steps": self.torn_steps}
        if self.terminated:
            final["terminated"] = self.terminated
        if self.writer_thinned:
            final["writer_thinned"] = self.writer_thinned
        if self.dropped_steps:
            final["dropped_steps"] = self.dropped_steps
        if self.memory_lost:
            final["memory_lost_events"] = self.memory_lost
        if self.cuda_overflowed:
            final["cuda_history_overflowed_at_step"] = self.cuda_overflowed
        self.writer.close(final, timeout)

    # --- per step ----------------------------------------------------------------------------
    def _end_window(self) -> None:
        """Close the window a backward opened, if open, its pass's leaf summaries unused (a step closes it as it
        asks the pass for them)."""
        leaf_pass, self._leaf_pass = self._leaf_pass, None
        if leaf_pass is not None:
            leaf_pass.watch_writes(None)

    def _reader_polls(self) -> bool:
        """Whether torch's intra-op threads leave the native reader a core to poll on (``_poll``): this rank's
        share of the cores, where it is not pinned to its own (torchrun's ``LOCAL_WORLD_SIZE`` ranks on this
        machine, each with as many threads: CPU DDP on every core has none to spare for polling)."""
        cores = self._cores
        if cores == (os.cpu_count() or cores):  # (a rank pinned to some cores has them to itself)
            cores //= max(1, int(os.environ.get("LOCAL_WORLD_SIZE") or 1))
        return torch.get_num_threads() < cores

    def _records_step(self) -> bool:
        """Whether the step under way records (kept in ``_records``: the hooks read that)."""
        return bool(self.every) and self.over_budget_at is None and (self.step - 1) % (self.every * self.stride) == 0

    # The optimizer's step hooks run inside every step: the fault boundary inline (as on the capture's hot paths),
    # not guarded's extra call.
    def _step_begins(self, optimizer, args, kwargs) -> None:
        try:
            if self._stepping == id(optimizer):  # super().step() inside a subclass's step(): the same step
                self._nested += 1
                return
            self._stepping = id(optimizer)
            if self.writer is None:
                self._open()
            if self._cuda_wanted is not None:
                self._cuda_in_use()
            if self._counting is None:
                self._counting = weakref.ref(optimizer)
            if not self._records:
                return  # (nor a window open: a backward opens one only before a step that records)
            if self.world == 1 and _distributed():
                self._learn_rank()
            # fingerprints are compared across ranks: with one rank none is made (a second pass over every
            # gradient's bytes)
            fingerprinted = self.world > 1
            plan = self._plan(optimizer)
            # the window the backward opened: closed as its pass's leaf summaries are asked for (leaf_stats,
            # leaf_summaries: None if a call in it may have written a .grad unseen), or here
            leaf_pass, self._leaf_pass = self._leaf_pass, None
            if leaf_pass is not None and (fingerprinted or plan[5]):  # (the bytes after the all-reduce; a shard)
                leaf_pass.watch_writes(None)
                leaf_pass = None
            if plan[4] or self._route_cpu:  # a parameter off the CPU
                self._read_on_device(plan, leaf_pass)
                return
            params, described = plan[2], plan[3]
            if leaf_pass is None and self.within and not fingerprinted:
                store = self.session.store
                if store.recorded != store.passes:  # the backward before was not summarised: nor is this step
                    return
            if leaf_pass is not None:
                stats = leaf_pass.leaf_stats(params)
                if stats is not None:  # .grad is as the backward summarised it: its numbers, no second read
                    self._rows[GRADS].append(functools.partial(_leaf_rows, self.step, described, stats))
                    self._later_rows += len(described)
                    self._later = True
                    self.reused += 1
                    return
            # the training thread's share: one list of the .grad tensors (and, for the Python reader, one of
            # their versions); names, summaries and fingerprints are the reader's
            reader = self._native_reader
            read_now = type(optimizer) in self._in_place
            if reader is not None and not read_now:
                # one call: the native reader takes each parameter's .grad itself (a DTensor's: this rank's
                # shard, handed over); None: no gradient to read
                poll = self._poll
                handle = (reader.read(_step_grads(params, described), False, poll, fingerprinted) if plan[5]
                          else reader.read(params, True, poll, fingerprinted))
                if handle is not None:
                    self._reading.append((reader, handle, self.step, described, fingerprinted))
                return
            grads = _step_grads(params, described) if plan[5] else [p.grad for p in params]
            if all(g is None for g in grads):  # (not grads.count(None): that compares tensors with ==)
                return
            if read_now:
                rows, found = read_parameters(self.step, _present(described, grads), native.loaded(), fingerprinted)
                self._rows[GRADS].extend(rows)
                self._rows[FINDINGS].extend(found)
            else:
                versions = [None if g is None else g._version for g in grads]
                self._read_behind(_read_present, (grads, versions), self.step, described, grads, native.unlocked(),
                                  fingerprinted)
        except Exception as exc:  # noqa: BLE001 - the boundary inline
            report(self.fault, "recording the gradients the optimizer applies", exc)

    def _read_on_device(self, plan: tuple, leaf_pass: Optional[NativePass]) -> None:
        """A step with parameters off the CPU: the gradients of the device path (CUDA's) summarised there and,
        with more than one rank, fingerprinted, with no host read; their rows are made once a segment waited for
        the read-back (:meth:`_flush`), a finding as soon as it says one is not finite. Others are read now.
        ``leaf_pass``: the backward's native pass, its window still open (one rank): when no call in it may have
        written a ``.grad`` unseen and every ``.grad`` is as the pass summarised it on its device, those summaries,
        and nothing is launched."""
        params, described = plan[2], plan[3]
        if leaf_pass is not None:
            summaries = leaf_pass.leaf_summaries(params)
            if summaries is not None:
                on_device = [d for d, s in zip(described, summaries) if s is not None]
                made = [s for s in summaries if s is not None]
                self._rows[GRADS].append(functools.partial(_device_parameter_rows, self.step, on_device, made, None))
                self._reused_on_device.append((self.step, on_device, made))  # (its finding: once they are read)
                self._later = self._later_on_device = True
                self._later_rows += len(made)
                self.reused += 1
                return
        grads = _step_grads(params, described) if plan[5] else [p.grad for p in params]
        route, now, on_device, taken = self._route, [], [], []
        for d, g in zip(described, grads):
            if g is not None:
                if route(g):
                    on_device.append(d)
                    taken.append(g)
                else:
                    now.append((d[0], d[1], g, d[2]))
        if now:  # (another device's, a sparse one: read at once, as before the device path)
            rows, found = read_parameters(self.step, now, native.loaded(), self.world > 1)
            self._rows[GRADS].extend(rows)
            self._rows[FINDINGS].extend(found)
        if not taken:
            return
        summaries = self._device_params
        if summaries is None:
            summaries = self._device_params = DeviceSummaries()
        with untraced(), torch.no_grad(), no_torch_function():
            made = summaries.add_many(taken)
            launched = _launch_bit_sums(taken) if self.world > 1 else None
        summaries.flush(on_nonfinite=functools.partial(self._nonfinite_parameters, self.step, on_device, made, []))
        self._rows[GRADS].append(functools.partial(_device_parameter_rows, self.step, on_device, made, launched))
        self._later = self._later_on_device = True
        self._later_rows += len(made)

    def _nonfinite_parameters(self, step: int, described: list, made: list, told: list) -> None:
        """A step's read-back on the device path counted NaN or infinity: its ``nonfinite-grad`` finding, once
        (``told``: a step whose gradients are on two devices has two read-backs)."""
        named = [(d[0], d[1]) for d, s in zip(described, made) if s.nan_count or s.inf_count]
        if named and not told:
            told.append(step)
            self._rows[FINDINGS].append(nonfinite_parameters(step, named))

    def _plan(self, optimizer) -> tuple:
        """What ``optimizer``'s steps hand over, made once (and again when its param_groups change)."""
        groups = optimizer.param_groups
        last = self._last_plan  # (the optimizer stepped last, most steps: no WeakKeyDictionary look-up)
        plan = last[1] if last is not None and last[0]() is optimizer else self._plans.get(optimizer)
        if plan is not None and len(plan[0]) == len(groups):
            for group, params, n in zip(groups, plan[0], plan[1]):
                if group["params"] is not params or len(params) != n:
                    break
            else:
                if last is None or plan is not last[1]:
                    self._last_plan = (weakref.ref(optimizer), plan)
                return plan
        lists = [group["params"] for group in groups]
        params = [p for group in lists for p in group]
        described = [(*self._name(p), hasattr(p, "to_local")) for p in params]
        plan = (lists, [len(group) for group in lists], params, described,
                any(p.device.type != "cpu" for p in params), any(d[2] for d in described))
        self._plans[optimizer] = plan
        self._last_plan = (weakref.ref(optimizer), plan)
        return plan

    def _read_behind(self, job: Callable, versions, *args) -> None:
        self._reading.append(self._reader.submit(job, args, versions))

    def _collect(self) -> bool:
        """Wait for the reader's jobs; their rows join the segment (a job whose ``.grad`` changed while it
        was read is dropped: returns whether one was)."""
        reading, self._reading = self._reading, []
        rows, torn_any = self._rows[GRADS], False
        for job in reading:
            if type(job) is tuple:  # the native reader's (reader, job, step, described, fingerprinted)
                reader, handle, step, described, fingerprinted = job
                changed, left = reader.wait(handle)
                if changed:
                    torn = step
                elif not left:  # every number is there, and finite (no finding): the writer makes the rows
                    rows.append(functools.partial(_native_rows, step, described, reader, handle))
                    self._later_rows += len(described)
                    self._later = True
                    continue
                else:
                    read, found = _native_read_rows(reader, handle, step, described, fingerprinted)
                    torn = None
            else:
                read, found = job.wait()
                torn = (read[0][0] if read else self.step) if job.torn() else None
            if torn is not None:
                torn_any = True
                if torn not in self.torn_steps:
                    self.torn_steps.append(torn)
                continue
            rows.extend(read)
            self._rows[FINDINGS].extend(found)
        return torn_any

    def _name(self, p) -> tuple[str, str]:
        known = self._names.get(id(p))
        if known is not None and known[0]() is p:
            return known[1], known[2]
        found = self.session.modules.parameters.lookup(p)
        name, module = (found[0], found[1]) if found else (f"param{len(self._names)}", "")
        self._names[id(p)] = (weakref.ref(p), name, module)
        return name, module

    def _step_ends(self, optimizer, args, kwargs) -> None:
        try:
            if self._nested and self._stepping == id(optimizer):
                self._nested -= 1
                return
            self._stepping = None
            if self._reading and self._collect() and type(optimizer) not in self._in_place:
                self._in_place.add(type(optimizer))
                self.session.fault(f"recording: {type(optimizer).__name__}.step() changed .grad in place while it was "
                                   f"read; step {self.torn_steps[-1]}'s parameter gradients are left out, and its "
                                   "later steps are read before step() runs")
            if self._counting is None or self._counting() is not optimizer:
                return  # a second optimizer's step is not another step
            live = peak = None
            if self._cuda and torch.cuda.is_initialized():
                live, peak = allocated_and_peak()
            else:
                traces = self.session.traces
                tracker = self.memory or (traces[0] if traces else None)  # or the kernel's timeline
                if tracker is not None:
                    stats = tracker.ledger.stats()
                    live, peak = stats.live_bytes, stats.peak_bytes
                    if tracker is self.memory:
                        self._mem_bounds.append((stats.count + stats.dropped, self.step))
            now = time.perf_counter()
            self._rows[STEPS].append((self.step, now - self._t0, live, peak))
            self.step += 1
            self._records = self._records_step()
            if self.cuda is not None:
                self.cuda.mark_step(self.step)
            if (len(self._rows[GRADS]) + self._later_rows >= SEGMENT_ROWS
                    or now - self._last_flush >= self.segment_seconds):
                self._flush(self.step - 1)
        except Exception as exc:  # noqa: BLE001 - the boundary inline
            report(self.fault, "counting an optimizer step", exc)

    def _flush(self, step: Optional[int] = None, wait: float = 0.0) -> None:
        """Hand what waits to the writer; ``step``: the step the CUDA entries taken now belong to, unless
        stamped (the one that just ended; by default the one under way); ``wait``: how long a full queue may keep
        this thread waiting (0: not at all, as in a training step: what it cannot take is held back)."""
        self._last_flush = time.perf_counter()
        backlog = self.writer.backlog  # (what the writer has not written of the segments before this one)
        handed = len(self._rows[GRADS]) + self._later_rows + self._held.get(GRADS, ((), 0))[1]
        if self._later_on_device:
            # every pass's read-back done first (on CUDA the last pass's copy, queued behind its backward: a wait
            # once a segment, after an optimizer step, never inside backward), so that no Node row goes unwritten
            with boundary(self.session.fault, "reading the device's gradient summaries back"):
                self.session.recorder.device.wait()
                if self._device_params is not None:
                    self._device_params.wait()
            self._later_on_device = False
            if self.session.store.nonfinite_found:  # (found as the read-back filled them)
                self._nonfinite_nodes()
            reused, self._reused_on_device = self._reused_on_device, []
            for step, described, made in reused:  # steps that took their backward's summaries: read back now
                self._nonfinite_parameters(step, described, made, [])
        for name, rows in self._rows.items():
            if rows or name in self._held:
                later = name == GRADS and self._later  # (rows the writer's thread builds first)
                self._hand(name, rows, len(rows) + (self._later_rows if name == GRADS else 0), later, wait)
                self._rows[name] = []
        for name in [name for name in self._held if name not in self._rows]:  # (graphs held back)
            self._hand(name, [], 0, False, wait)
        self._later_rows, self._later = 0, False
        self._poll = self._reader_polls()  # (torch.set_num_threads may have run since)
        if self.memory is not None:
            self._memory_segment(wait)
        if self.cuda is not None:
            self._cuda_segment(self.step if step is None else step, wait)
        self._budget()
        if not wait:  # (the last segment: no step follows to thin)
            self._keep_pace(backlog, handed)

    def _hand(self, name: str, rows: list, count: int, later: bool, wait: float = 0.0) -> None:
        """Hand ``rows`` of the stream ``name`` to the writer (``count``: about how many rows; ``later``: some are
        row builders, whose columns the writer's thread makes with grads_segment), after any of that stream held
        back. A queue with no room holds them back in turn, to be handed over with the next; rows held past
        HELD_ROWS are given up, the oldest segment first (counted in the writer's ``dropped``, their steps named)."""
        held = self._held.pop(name, None)
        if held is not None:
            rows, count, later = held[0] + rows, held[1] + count, held[2] or later
        if not rows:
            return
        if self.writer.submit(name, functools.partial(grads_segment, rows) if later else rows, wait):
            return  # (the writer thread turns rows into columns; or, writing stopped, lets them go)
        if count > HELD_ROWS and held is not None and held[0]:
            given_up = held[0]  # the oldest: what was held already
            self.writer.dropped += 1
            self.dropped_steps.append([_step_of(name, given_up[0]), _step_of(name, given_up[-1]), name])
            rows, count = rows[len(given_up):], count - held[1]
            later = later and any(type(r) is not tuple for r in rows)
        self._held[name] = (rows, count, later)

    def _keep_pace(self, backlog: float, handed: int) -> None:
        """After a segment's hand-over (``handed``: about how many gradient rows it had), ``backlog`` the writer's
        queue as it was before (RunWriter.backlog). Half full, or a segment held back: a small segment (the clock made
        it) makes the next come twice as far apart, a disk whose every write takes long then catches up on fewer,
        larger ones, losing nothing; a large one (or segments already MAX_LAG times further apart) thins the
        gradient rows another step (every second step's, then every fourth, …). Empty (the writer kept up): one
        step back, the thinning first (a writer slower than the steps settles between the two). Each change of the
        thinning is kept in ``writer_thinned``."""
        stride, spacing = self._lag_stride, self._lag_spacing
        if self.writer.broken:  # (its queue drains unwritten: nothing to keep pace with)
            return
        if self._held or backlog >= 0.5:
            if spacing < MAX_LAG and self._segment_seconds > 0 and handed < SEGMENT_ROWS // 2:
                spacing *= 2
            else:
                stride = min(stride * 2, MAX_LAG)
        elif backlog == 0:
            if stride > 1:
                stride //= 2
            else:
                spacing = max(spacing // 2, 1)
        self._lag_spacing = spacing
        self.segment_seconds = self._segment_seconds * spacing
        if stride != self._lag_stride:
            self._lag_stride = stride
            self.writer_thinned.append([self.step, stride])
            self._thin()

    def _thin(self) -> None:
        """Every ``stride``-th step records: the larger of the size budget's stride and the writer's."""
        self.stride = max(self._budget_stride, self._lag_stride)
        self._records = self._records_step()

    def _memory_segment(self, wait: float = 0.0) -> None:
        """The ledger's events since the last segment, handed to the writer (which thins them past the budget):
        their bytes are copied here, the rest happens on the writer's thread. A full queue (``wait``: :meth:`_flush`'s)
        leaves them with the ledger, for the next segment."""
        tracker = self.memory
        stats = tracker.ledger.stats()
        start = self._mem_written - stats.dropped  # the ledger merges older events: indices move back
        if start < 0:
            self.memory_lost += -start
            start = 0
        if stats.count <= start:
            return
        first = start + stats.dropped
        self._mem_bounds = [b for b in self._mem_bounds if b[0] > first]
        if not self.writer.submit(MEMORY, {"columns": tracker.columns(start, stats.count), "first": first,
                                           "bounds": list(self._mem_bounds), "current": self.step,
                                           "ops": list(tracker.ops), "modules": list(tracker.modules)}, wait):
            return  # (the writer is behind: these events go with the next segment, the ledger keeps them till then)
        tracker.publish(stats.count)
        self._mem_written = stats.count + stats.dropped

    def _cuda_before_backward(self) -> None:
        """Before a backward, while CUDA is not in use yet: start its history if it is now (then no more)."""
        if self._cuda_wanted is not None:
            self._cuda_in_use()
        if self._cuda_wanted is None:
            self.session.before_backward.remove(self._cuda_before_backward)

    def _cuda_in_use(self) -> None:
        """Start the CUDA history once this process uses CUDA (a step or a backward asks)."""
        with boundary(self.session.fault, "starting the CUDA allocator history"):
            if self.writer is None:
                self._open()
            history = self._cuda_wanted()
            if history is None:
                return
            self.cuda, self._cuda_wanted = history, None
            self.writer.meta["memory"] = {**(self.writer.meta.get("memory") or {}), "cuda_device": history.device,
                                          "cuda_from_step": self.step}
            history.mark_step(self.step)
        self._cuda_wanted = None  # (a history that failed to start is not asked for again)

    def _cuda_segment(self, step: int, wait: float = 0.0) -> None:
        """The allocator's entries since the last segment (a snapshot: a host call, no device sync), handed
        to the writer with the segments they are anchored at; the writer thread turns them into columns."""
        snapshot = self.cuda.take()
        traces = snapshot.get("device_traces") or []
        entries = traces[self.cuda.device] if self.cuda.device < len(traces) else []
        if len(entries) >= getattr(self.cuda, "max_entries", 2**62) and not self.cuda_overflowed:
            self.cuda_overflowed = self.step
            self.session.fault(f"recording: the CUDA allocator history filled its {len(entries):,} entries within "
                               f"one segment (step {self.step}); older entries of it were lost, so allocated "
                               "bytes before then are off. A smaller segment_seconds takes them more often")
        if entries and not self.writer.submit(CUDA_MEMORY, {"snapshot": snapshot, "device": self.cuda.device,
                                                              "step": step}, wait):
            self.writer.dropped += 1  # (the history's entries since the last segment: taken, and not kept here)

    def _budget(self) -> None:
        """Past half the budget, every second recorded step is kept; past three quarters every fourth, …;
        past the budget, no more gradient rows (steps and memory go on). Said in the metadata."""
        used = self.writer.bytes
        if used >= self.budget:
            if self.over_budget_at is None:
                self.over_budget_at = self.step
                self._records = False
            return
        wanted = 1
        while used >= self.budget * (1 - 0.5 ** wanted) and wanted < 16:
            wanted += 1
        stride = 2 ** (wanted - 1)
        if stride > self._budget_stride:
            self._budget_stride = stride
            self.downsampled.append([self.step, stride])
            self._thin()

    # --- per backward ------------------------------------------------------------------------
    # One hook, after the backward (its Nodes and edges are still there, their saved tensors not): the native
    # hooks' pass knows its graph's signature and Node order from arming it, so a step walks nothing again.
    def _after_backward(self, roots: list) -> None:
        if self._stepping is not None:  # a step that raised never ran its post hook
            self._stepping, self._nested = None, 0
        self._end_window()  # (a backward since: what the step applies is this one's)
        if self.writer is None:
            self._open()
        if self._cuda_wanted is not None:
            self._cuda_in_use()
        session = self.session
        store = session.store
        if not self._records or not session.record_grads or store.recorded != store.passes:
            if store.nonfinite_found:  # (an earlier pass's, found since)
                self._nonfinite_nodes()
            return
        index = store.recorded
        source, handed = store.recorded_by(index)  # (handed: with the native hooks, mostly none)
        if source is not None:  # its graph as the native hooks armed it, and their numbers
            # (the ids are the pass's own, read only when needed; the numbers now: a dead graph's Nodes are
            # forgotten, and the rows are the writer's). With one rank, the window to the next step opens in the
            # same call: a step after it may take the pass's leaf summaries
            if self.world == 1 and self._reuses:
                self._leaf_pass = source
                signature, stats, on_device = source.recorded(_EXPOSING)
            else:
                signature, stats, on_device = source.recorded()
            ids = source
        else:
            signature, ids = self._walk(roots)
        known = self._graphs.get(signature)
        if known is None:
            with untraced():
                known = self._graphs[signature] = self._new_graph(roots, _ids_of(ids))
        graph, described = known
        if graph is None:
            return
        if store.nonfinite_found or session.recorder.device.reading:
            # this pass's first non-finite Node, found as it ended, or (CUDA) to be found once its numbers come
            passes = self._passes
            passes[index] = (self.step, graph, ids, described)
            if len(passes) > PASSES_KEPT:
                del passes[next(iter(passes))]
            if store.nonfinite_found:  # (an earlier pass's too, found since)
                self._nonfinite_nodes()
        if source is not None:  # the native hooks' numbers: the five numbers a Node row keeps, per Node
            if handed:
                self._handed_over_rows(graph, _ids_of(ids), described, handed)
            count = len(stats) // NODE_STATS_SIZE + len(on_device)
            self._rows[GRADS].append(functools.partial(_node_rows, self.step, graph, described, stats, on_device))
            if on_device:
                self._later_on_device = True
            self._later_rows += count
            self._later = True
            return
        rows = self._rows[GRADS]  # Python hooks: from the session's records
        later = []  # (position, summary) of those whose numbers are still to come (the device path's)
        for position, nid in enumerate(ids):
            grads = store.get(nid) if nid is not None else None
            if not grads or not grads.records or grads.records[-1].backward_index != index:
                continue
            outputs = grads.records[-1].grad_outputs
            s = outputs[0] if outputs else None
            if s is None or described[position][2] is None:
                continue
            if s.norm is None:
                later.append((position, s))
                continue
            rows.append(_summary_row(self.step, graph, described, position, s))
        if later:
            rows.append(functools.partial(_node_rows, self.step, graph, described, b"", later))
            self._later_on_device, self._later = True, True
            self._later_rows += len(later)

    def _walk(self, roots: list) -> tuple:
        """(signature, Node ids in :func:`iter_graph`'s order) of a graph the Python hooks recorded: walked in
        C++ where the library is built (the signature the native hooks' pass gives), else in Python."""
        lib = native.hooks()
        walked = lib.walk(roots) if lib is not None else None
        if walked is not None:
            # a hash of its Nodes' names and edges in walk order and of the parameters they reach (64 bits:
            # two graphs that differ collide one time in 2**64), and how many Nodes
            return walked[:2], walked[2]
        with untraced():
            nodes = iter_graph(roots)
            # the graph's shape, cheaply: its Nodes' types in walk order and the parameters they reach
            signature = (tuple(map(type, nodes)), tuple(id(n.variable) for n in nodes if type(n) is _ACCUMULATE))
            return signature, [n.metadata.get("fv_id") for n in nodes]

    def _new_graph(self, roots: list, ids: list) -> tuple:
        """Describe a graph not seen before, and write it (up to MAX_GRAPHS): (graph id or None, described: per
        Node in the walk's order, ``ids``, its (name, module, position in the recorded graph's Nodes or None
        past its cut)). The recorded graph lists its Nodes nearest the output first (build_graph's order)."""
        nodes = iter_graph(roots)
        if [n.metadata.get("fv_id") for n in nodes] != ids:  # (never, unless the graph changed since it was armed)
            raise RuntimeError("the graph's Nodes are not those its backward ran")
        at = {id(n): k for k, n in enumerate(reachable(roots, GRAPH_NODES)[0])}
        described = []
        for node in nodes:
            tag = node.metadata.get("fv_op")
            if tag is None and hasattr(node, "variable"):  # a leaf's AccumulateGrad: named by its parameter
                described.append((*self._name(node.variable), at.get(id(node))))
            else:
                described.append((node.name(), tag[4][2] if tag and tag[4] else None, at.get(id(node))))
        described = tuple(described)
        recorded = sum(1 for g, _ in self._graphs.values() if g is not None)
        if recorded >= MAX_GRAPHS:
            return None, described
        live = build_graph(roots, self.session, NameIndex(), max_nodes=GRAPH_NODES)  # (ids the Nodes too)
        self._hand(GRAPHS, [(recorded, self.step, len(at), json.dumps(graph_trait(live.graph)))], 1, False)
        return recorded, described

    def _nonfinite_nodes(self) -> None:
        """The doctor's ``nonfinite-grad`` finding of each recorded backward whose first non-finite Node the
        store found since (``GradStore.nonfinite_found``: at the pass's end, or on CUDA once its read-back came)."""
        store = self.session.store
        found = store.nonfinite_found
        while found:
            index, nid = found.popleft()
            known = self._passes.get(index)
            entry = store.get(nid) if known is not None else None
            record = next((r for r in reversed(entry.records) if r.backward_index == index), None) if entry else None
            if record is not None:
                self._nonfinite_node(nid, record, *known)

    def _nonfinite_node(self, nid: int, record, step: int, graph: int, ids, described: tuple) -> None:
        """The ``nonfinite-grad`` finding of the backward of ``step``: Node ``nid``, its ``record``."""
        ids = _ids_of(ids)
        k = ids.index(nid) if nid in ids else None
        name, module = described[k][:2] if k is not None else ("a Node", None)
        received = not any(s is not None and (s.nan_count or s.inf_count) for s in record.grad_outputs)
        self._rows[FINDINGS].append((step, NONFINITE, None, name, module,
                                     f"{name}{' in ' + module if module else ''} was the first Node whose gradients "
                                     f"went NaN or infinite in the backward of step {step}"
                                     + (": the gradients it received were finite, the ones it sent were not"
                                        if received else "")))

    def _handed_over_rows(self, graph: int, ids: list, described: tuple, handed: list) -> None:
        """The rows of the Nodes whose gradients the native hooks handed to Python in this pass (``handed``:
        a small elementwise Node, whose local derivatives the graph view shows; one with NaN or infinity):
        the native pass has no numbers for them, their Python records do."""
        position = {n: k for k, n in enumerate(ids)}
        for nid, entry in handed:
            k = position.get(nid)
            outputs = entry.records[-1].grad_outputs
            s = outputs[0] if outputs else None
            if k is None or s is None or described[k][2] is None:
                continue
            self._rows[GRADS].append(_summary_row(self.step, graph, described, k, s))


def _ids_of(ids) -> list:
    """A graph's Node ids in walk order: ``ids`` itself, or the order of the native pass ``ids``."""
    return ids if type(ids) is list else ids.order()
