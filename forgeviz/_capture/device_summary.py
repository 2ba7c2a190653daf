"""Gradient summaries computed on the gradient's device, with no host read until the pass ends.

Each gradient gets a row of one device buffer (float64): the min and max of its finite values (on the
per-gradient torch path, in a side buffer of its dtype), its sum, its sum of squares (or
norm), its NaN and ±inf counts and a histogram whose bins are fixed in advance, so that
binning never waits for a host read of min and max. The buffer is copied to the host once per backward
(on CUDA to pinned memory, ``non_blocking``), and the summaries are filled in when that copy is done.

Bins: sign × log2 magnitude, two binades per bin (``edges()``): for each sign, magnitudes below 2^-20,
then [2^-20, 2^-18) … [2^6, 2^8), then 2^8 and above, plus a bin for exact zeros: 33 bins, every finite
value counted (the Triton kernels bin a spread sample of 64 blocks of a gradient past 65,536 values:
device_summary_triton.BINNED_BLOCKS; every value still counts towards min, max, sum, norm, NaN and
infinity). On the negative side the same magnitudes, mirrored: bin i is always
[edges[i], edges[i+1]).

With Triton (it ships with torch's CUDA wheels; ``TRITON_INTERPRET=1`` runs it on CPU tensors) a large
gradient costs one kernel launch; smaller ones (BATCH_NUMEL) wait in a batch that one launch of the
multi-tensor kernel reduces, and the parameters' ``.grad`` join it at a pass's end (a launch per dtype). Without it,
small gradients (BATCH_NUMEL) wait in a batch that is reduced with about thirteen torch ops for all of them
(a gradient itself costs no op: the batch gathers them with one ``torch._chunk_cat``), and a large or float64
one takes nine ops of its own (its flat view, bucketize, the counts, min and max of its finite values, each
with the non-finite ones replaced first, sum, norm), none holding it and none an atomic update of a few
addresses; still no host read.
"""

from __future__ import annotations

import math
import os
import weakref
from typing import Callable, Optional

import numpy as np
import torch

from ..model.graph import Histogram, TensorSummary
from . import native
from .device_layout import _BUCKETS, _NAN, _VALUES, BINS, HIGH_EXPONENT, LOW_EXPONENT  # noqa: F401 - BINS: with its edges()
from .summary import SMALL_NUMEL, dtype_name, wire_float
from .untraced import untraced_no_grad

ROW = _VALUES + SMALL_NUMEL  # then a small tensor's values
_no_torch_function = torch._C.DisableTorchFunction
_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_NUMPY_DTYPES = {torch.int64: np.int64, torch.float64: np.float64}
_DEVICE_NAMES: dict = {}  # torch.device → str(device), asked once per gradient (str() is the slow part)


def edges(dtype: torch.dtype = torch.float32) -> list[float]:
    """The BINS + 1 bin edges for gradients of ``dtype``: bin i holds the finite values in
    [edges[i], edges[i+1]) (the last bin also holds edges[-1]); the zero bin is [0, the smallest
    positive subnormal of ``dtype``), so it holds exact zeros only.

    >>> e = edges(); len(e), e[0] == torch.finfo(torch.float32).min, e[15:18] == [-2.0 ** -20, 0.0, 2.0 ** -149]
    (34, True, True)
    """
    info = torch.finfo(dtype)
    powers = [2.0 ** k for k in range(LOW_EXPONENT, HIGH_EXPONENT + 1, 2)]
    subnormal = info.smallest_normal * info.eps  # the smallest positive subnormal, with no torch op
    return [info.min, *(-p for p in reversed(powers)), 0.0, subnormal, *powers, info.max]


def _boundaries(edges_of: torch.dtype, dtype: torch.dtype) -> torch.Tensor:
    """torch.bucketize's boundaries (right=False: bucket i holds boundaries[i-1] < x <= boundaries[i]) in
    ``dtype``, for the bins of ``edges_of``: -inf, then each inner edge's predecessor in ``dtype`` (so that
    x > it means x >= the edge, for x of ``dtype``), the last edge, +inf. -inf is then bucket 0, the bins
    1..BINS, +inf BINS + 1, and NaN, which compares false with every boundary, BINS + 2: one bucket each.

    >>> values = torch.tensor([-math.inf, -1e-30, 0.0, 1.0, math.inf, math.nan])
    >>> torch.bucketize(values, _boundaries(torch.float32, torch.float32)).tolist()
    [0, 16, 17, 29, 34, 35]
    """
    inner = torch.tensor(edges(edges_of)[1:-1], dtype=dtype)
    below = torch.nextafter(inner, torch.tensor(-math.inf, dtype=dtype))
    return torch.cat([torch.tensor([-math.inf], dtype=dtype), below,
                      torch.tensor([torch.finfo(edges_of).max, math.inf], dtype=dtype)])


def _to_device(values: list, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A tensor of ``values`` on ``device`` with no wait for it: on CUDA, from pinned memory with a
    ``non_blocking`` copy (a copy from pageable memory would wait; the caching host allocator keeps the
    pinned block until the copy is done)."""
    cuda = device.type == "cuda"
    numpy_dtype = _NUMPY_DTYPES.get(dtype)
    if numpy_dtype is None:
        host = torch.tensor(values, dtype=dtype, pin_memory=cuda)
    else:  # (numpy reads a list of Python numbers in a third of torch.tensor's time: a table, a batch's indices)
        host = torch.from_numpy(np.array(values, dtype=numpy_dtype))
        host = host.pin_memory() if cuda else host
    return host.to(device, non_blocking=True) if cuda else host


class _Buffer:
    """One device's rows, kept across passes (grown by doubling), and where they are read back."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.rows = torch.zeros(0, ROW, dtype=torch.float64, device=device)
        self.host: Optional[torch.Tensor] = None
        self.used = 0
        self.views: tuple = ()  # a view of each row, made once per row
        # Each row's sum, sum of squares (0-d) and counts: views made once, so that the per-gradient
        # path writes into them with out= and no slicing op of its own
        self.sums: tuple = ()
        self.squares: tuple = ()
        self.counts: tuple = ()
        self.columns: tuple = ()  # the rows' min, max, sum, sum of squares, counts (2-D), all flat: made once
        self.boundaries: dict = {}  # dtype (None: the batch path's) → torch.bucketize's boundaries on this device
        # dtype → its side buffer: for each row of the per-gradient path, the min and max of its finite values
        # in the gradient's own dtype (exact in it), written there by torch.amin/amax's out=
        self.sides: dict = {}
        # (first row, the gradients' numels) → the batch's index tensors on this device: a training loop's
        # batches are the same every step, so they go up once (bounded: cleared when full)
        self.indices: dict = {}
        self.tables: dict = {}  # the same for Triton's multi-tensor launches: (pointers, numels, base) → table
        self.side_hosts: dict = {}
        self.one = torch.ones((), dtype=torch.float64, device=device)
        blank = [0.0] * ROW
        blank[0], blank[1] = math.inf, -math.inf  # what a min and a max start from
        self.blank = _to_device(blank, torch.float64, device)

    def take(self) -> torch.Tensor:
        """A blank row; grows the buffer (between passes' reads, never during a copy)."""
        self.reserve(1)
        return self.views[self.used - 1]

    def reserve(self, n: int) -> int:
        """The first of ``n`` consecutive blank rows, grown into when needed."""
        if self.used + n > len(self.views):
            grown = self.blank.repeat(max(64, 2 * (self.used + n)), 1)
            grown[: self.used].copy_(self.rows[: self.used])
            self.rows = grown
            self.views = grown.unbind(0)
            self.sums, self.squares = grown[:, 2].unbind(0), grown[:, 3].unbind(0)
            self.counts = grown[:, _BUCKETS:_VALUES].unbind(0)
            self.columns = (grown[:, 0], grown[:, 1], grown[:, 2], grown[:, 3], grown[:, _BUCKETS:_VALUES],
                            grown.view(-1))
            for dtype, (side, *_) in list(self.sides.items()):  # (rows of this pass kept)
                self.sides[dtype] = self._side(dtype, side[: self.used])
        first = self.used
        self.used += n
        return first

    def side(self, dtype: torch.dtype) -> tuple:
        """(side buffer, each row's minimum, each row's maximum: 0-d views) of ``dtype``, as many rows as the
        buffer. A row is read only once _reduce wrote both, so none is ever reset."""
        side = self.sides.get(dtype)
        if side is None:
            side = self.sides[dtype] = self._side(dtype, None)
        return side

    def _side(self, dtype: torch.dtype, old: Optional[torch.Tensor]) -> tuple:
        side = torch.empty(len(self.views), 2, dtype=dtype, device=self.device)
        if old is not None:
            side[: len(old)].copy_(old)
        return side, side[:, 0].unbind(0), side[:, 1].unbind(0)


# Gradients this small (and not float64) are reduced together, in batches: a few torch ops for the whole
# batch instead of ten a gradient. 2^18 elements: on a GPU such a gradient reads in well under a kernel
# launch's time, so launches, not bytes, are what it costs; larger ones keep a launch or a few of their own.
BATCH_NUMEL = 1 << 18
# A batch is reduced when it holds this many elements (or BATCH_TENSORS gradients), and when the pass ends.
# Its gradients are held until then: at most BATCH_ELEMENTS elements of gradients that backward would
# otherwise have freed (4 MiB of float32), plus, while it is reduced, a float64 copy and three int64/float64
# temporaries of its size (about 40 bytes an element: 40 MiB at most).
BATCH_ELEMENTS = 1 << 20
BATCH_TENSORS = 512
BATCH_INDICES = 256  # batches whose index tensors (a few KiB each), and launches whose tables, are kept on the device
class DeviceSummaries:
    """Summaries of gradients, computed where they live and read back once per backward pass.

    ``add(grad)`` gives a TensorSummary whose shape and dtype are there now and whose numbers arrive
    when the pass's one read-back is done: at ``flush()`` on CPU, at the first ``poll()`` after the
    copy's CUDA event on CUDA (``wait()`` blocks for it). The same gradient seen twice in a pass (one
    Node's grad_input is the next one's grad_output) is summarised once, and so is a view of it that
    holds every element of the same memory once (a ViewBackward0's reshape, a TBackward0's transpose):
    the view's summary has its own shape and the first one's numbers. Small gradients wait in a batch
    (BATCH_NUMEL, BATCH_ELEMENTS) and are reduced together; ``add_leaf`` waits for the pass's end and
    summarises the parameter's ``.grad`` then.

    >>> pending = DeviceSummaries()
    >>> s = pending.add(torch.tensor([3., -4.] * 40))
    >>> s.norm is None, pending.flush(), round(s.norm, 4), s.histogram.counts[28], s.histogram.counts[4]
    (True, None, 31.6228, 40, 40)
    """

    _native_config: tuple = ()  # (set below the class: what native/device_path.cpp reads)

    def __init__(self, triton: Optional[bool] = None) -> None:
        # (the native hooks' add and add_leaf, native/device_path.cpp, read and change the attributes below as
        # this class's methods do; they call _launch, _reduce_batches and _triton for the rest)
        self._buffers: dict = {}  # device → _Buffer
        # (summary, buffer, row index, side) waiting for the read-back; side: the dtype of the side buffer
        # holding the row's min and max (the per-gradient torch path), else None
        self._rows: list[tuple] = []
        # its memory (_memory) → (weakref to the first tensor seen there, its version, its summary)
        self._seen: dict = {}
        self._views: list[tuple] = []  # (the first summary, a view's): the view's numbers are the first's
        self._reading: list[tuple] = []  # (event or None, buffer, its items, the host rows): copies in flight
        self._batches: dict = {}  # (device, dtype) → [(gradient, summary, version)], waiting to be reduced together
        self._dense: dict = {}  # the same for Triton's multi-tensor kernel: (flat memory, summary, version, gradient)
        self._batched = 0  # elements waiting in those batches
        # (summary, parameter, shape, dtype, the gradient, its version; weakrefs): .grad summarised when the pass ends
        self._leaves: list[tuple] = []
        self._triton, self._triton_many = _triton_kernels() if triton is None or triton else (None, None)
        self.summarised = 0  # gradients summarised so far (each counted once per pass)
        self.held = 0  # the most elements a batch held, this object's lifetime (bench_capture.py ops)
        self._interpreted = os.environ.get("TRITON_INTERPRET") == "1"  # Triton then runs on CPU tensors too
        # Whether a kernel runs as torch's and numpy's ops on the CPU (the interpreter), not as a GPU launch: its
        # reductions then take untraced's and no_grad's switches as the torch path's do
        self._kernels_on_cpu = self._interpreted

    def __bool__(self) -> bool:
        """Whether summaries wait for ``flush()`` or ``poll()``."""
        return bool(self._rows or self._reading or self._batched or self._leaves)

    @property
    def reading(self) -> bool:
        """Whether a flushed pass's read-back is still in flight (on CUDA, until a ``poll()`` finds it done).

        >>> DeviceSummaries().reading
        False
        """
        return bool(self._reading)

    def _summary(self, grad: torch.Tensor, numel: int, dense: bool) -> tuple[TensorSummary, bool]:
        """(the summary already made for ``grad`` this pass, or for another view of its memory, or a new
        one; whether it is new). ``numel``: grad's; ``dense``: whether its elements fill its memory (_is_dense)."""
        shape, version = list(grad.shape), grad._version
        key = _memory(grad, numel, dense)
        hit = self._seen.get(key)
        # The first tensor still alive means its memory was not reused by another gradient.
        if hit is not None and hit[0]() is not None and hit[1] == version:
            first = hit[2]
            if first.shape == shape:
                return first, False
            view = TensorSummary(shape, first.dtype, first.device, first.numel)
            self._views.append((first, view))
            return view, False
        device = grad.device
        name = _DEVICE_NAMES.get(device)
        if name is None:
            name = _DEVICE_NAMES[device] = str(device)
        summary = TensorSummary(shape, dtype_name(grad.dtype), name, numel)
        self._seen[key] = (weakref.ref(grad), version, summary)
        return summary, True

    def add(self, grad: torch.Tensor) -> TensorSummary:
        """``grad``'s summary, numbers to come; launches its reductions (or queues it in a batch) and
        reads nothing back."""
        numel, contiguous, dense = _facts(grad)  # (read once: this is every gradient's path, without the library)
        summary, new = self._summary(grad, numel, dense)
        if new:
            self._launch(grad, summary, numel, contiguous, dense)
        return summary

    def add_leaf(self, grad: torch.Tensor, parameter: torch.Tensor) -> TensorSummary:
        """The summary of the gradient that AccumulateGrad is about to make ``parameter``'s ``.grad``
        (it had none): its numbers are those of ``parameter.grad`` when the pass ends, summarised with
        the other parameters' in batches. Nothing holds ``grad`` meanwhile: a second reference would
        make AccumulateGrad copy it instead of keeping it. (A weak one does not: when no AccumulateGrad runs,
        as under ``torch.autograd.grad``, ``.grad`` stays None and ``grad`` itself, returned to its caller, is
        summarised, if still alive and unchanged.)"""
        numel, _, dense = _facts(grad)
        summary, new = self._summary(grad, numel, dense)
        if new:
            self._leaves.append((summary, weakref.ref(parameter), grad.shape, grad.dtype, weakref.ref(grad),
                                 grad._version))
        return summary

    def add_many(self, grads: list) -> list[TensorSummary]:
        """The summaries of ``grads`` (a step's parameter gradients), numbers to come, as a pass's ``.grad`` are
        summarised at its end: with Triton, the dense ones of each device and dtype in one multi-tensor launch
        at ``flush()``; the others as :meth:`add` summarises them.

        >>> pending = DeviceSummaries(triton=False)
        >>> a, b = pending.add_many([torch.tensor([3., 4.]), torch.ones(2, 2)])
        >>> pending.flush(); a.norm, b.mean
        (5.0, 1.0)
        """
        summaries = []
        for grad in grads:
            numel, _, dense = _facts(grad)
            summary, new = self._summary(grad, numel, dense)
            if new:
                self._add_whole(grad, summary)
            summaries.append(summary)
        return summaries

    def _add_whole(self, grad: torch.Tensor, summary: TensorSummary) -> None:
        """``grad`` summarised with the others of its device and dtype in one launch when Triton reads it flat;
        else as any gradient."""
        if (self._triton_many is not None and self._triton_on(grad) and grad.numel()
                and grad.layout == torch.strided and grad.dtype in _FLOATS
                and (grad.is_contiguous() or grad.numel() > SMALL_NUMEL and _is_dense(grad))):
            self._dense.setdefault((grad.device, grad.dtype), []).append((grad, summary, grad._version, grad))
            self.summarised += 1
        else:
            self._launch(grad, summary)

    def _launch(self, grad: torch.Tensor, summary: TensorSummary, numel: Optional[int] = None,
                contiguous: Optional[bool] = None, dense: Optional[bool] = None) -> None:
        """``grad``'s reductions launched, or ``grad`` queued in a batch (``numel``, ``contiguous``, ``dense``: its
        facts, when the caller read them)."""
        if numel is None:
            numel, contiguous, dense = _facts(grad)
        dtype = grad.dtype
        if numel == 0 or grad.layout != torch.strided or dtype not in _FLOATS:
            return  # nothing to reduce (callers send other dtypes to summary.summarize)
        # Which path: read from its layout, views at most (no memory, and no op any mode should see); only
        # the reductions below pay for untraced's and no_grad's switches (a batched gradient is most of them)
        with _no_torch_function():
            # (a small tensor's values are kept in memory order: its memory must be in row-major order)
            flat = None
            if self._triton is not None and self._triton_on(grad) and (numel > SMALL_NUMEL or contiguous):
                # (the kernel reads memory: a contiguous gradient is its own flat view, no op needed)
                flat = grad if contiguous else grad.as_strided((numel,), (1,)) if dense else None
            batch = None
            if numel <= BATCH_NUMEL:
                if flat is not None and self._triton_many is not None:
                    # Held until its batch's one launch (a launch costs the CPU more than such a gradient
                    # costs the GPU to read): the kernel reads its memory then
                    batch = self._dense.setdefault((grad.device, dtype), [])
                    batch.append((flat, summary, grad._version, grad))
                elif flat is None and dtype != torch.float64:
                    # Held as it is: the batch gathers its elements (torch._chunk_cat reads any layout, in
                    # row-major order), so it costs no op here; a 0-d one needs a dimension to be gathered
                    batch = self._batches.setdefault((grad.device, dtype), [])
                    batch.append((grad.view(1) if grad.dim() == 0 else grad, summary, grad._version, grad))
            if batch is not None:
                self._batched += numel
                self.summarised += 1
                if self._batched >= BATCH_ELEMENTS or len(batch) >= BATCH_TENSORS:
                    self._reduce_batches()
                return
            if flat is not None and not self._kernels_on_cpu:
                # One Triton launch into a row made already: no op of torch's, nothing allocated, so neither
                # untraced's nor no_grad's switches (cold after a backward's kernels, those two took longer than
                # the rest of a large gradient's add: 32 of ~60 us, GPT-2's shape on the CPU, kernels stubbed)
                buffer = self._buffer(grad.device)
                index = buffer.used
                if index < len(buffer.views):  # (else grown below, under both)
                    buffer.used = index + 1
                    self._triton(flat, buffer.views[index])
                    self._rows.append((summary, buffer, index, None))
                    self.summarised += 1
                    return
        with untraced_no_grad():
            buffer = self._buffer(grad.device)
            index = buffer.used
            row = buffer.take()
            side = None
            if flat is not None:
                self._triton(flat, row)
            else:
                _reduce(grad, index, buffer)
                side = grad.dtype
        self._rows.append((summary, buffer, index, side))
        self.summarised += 1

    def _triton_on(self, grad: torch.Tensor) -> bool:
        return grad.is_cuda or self._interpreted

    def _buffer(self, device: torch.device) -> "_Buffer":
        buffer = self._buffers.get(device)
        if buffer is None:
            buffer = self._buffers[device] = _Buffer(device)
        return buffer

    def _reduce_batches(self) -> None:
        """Every waiting batch reduced into consecutive rows of its device's buffer."""
        self.held = max(self.held, self._batched)
        batches, self._batches, self._batched = self._batches, {}, 0
        dense, self._dense = self._dense, {}
        for (device, dtype), items in dense.items():
            kept = self._unchanged(items)
            if kept:
                self._launch_many(device, dtype, kept)
        if not batches:  # (Triton's path: every gradient in a dense batch, launched above)
            return
        with untraced_no_grad():
            for (device, _), items in batches.items():
                kept = self._unchanged(items)
                if not kept:
                    continue
                kept.sort(key=lambda item: item[0].numel() > SMALL_NUMEL)  # small ones first (_reduce_batch)
                buffer = self._buffer(device)
                base = buffer.reserve(len(kept))
                _reduce_batch([item[0] for item in kept], base, buffer)
                self._rows.extend((item[1], buffer, base + i, None) for i, item in enumerate(kept))

    def _unchanged(self, items: list) -> list:
        """The batch's (held, summary, version, gradient) items whose gradient is as add() saw it; one changed
        in place since (its numbers would not be the gradient's) is not summarised after all."""
        kept = [item for item in items if item[3]._version == item[2]]
        self.summarised -= len(items) - len(kept)
        return kept

    def _reduce_leaves(self, leaves: list) -> None:
        """The parameters' ``.grad`` (as accumulated: AccumulateGrad kept the incoming gradient, or copied
        it: same values): with Triton, those it reads flat join the batch's (one launch per device and
        dtype for all, when the batches are reduced); the others as any gradient."""
        for summary, parameter, shape, dtype, incoming, version in leaves:
            grad = parameter()
            grad = None if grad is None else grad.grad
            if grad is None or grad.shape != shape or grad.dtype != dtype:
                grad = incoming()  # no AccumulateGrad ran (torch.autograd.grad): the gradient it was given
                if grad is None or grad._version != version:
                    continue
            self._add_whole(grad, summary)  # (with the batch's gradients of its device and dtype: one launch)

    def _launch_many(self, device: torch.device, dtype: torch.dtype, items: list) -> None:
        """One launch of Triton's multi-tensor kernel: ``items``, (dense gradient, summary, ...) of one device and
        dtype, each into its own row."""
        with untraced_no_grad():
            buffer = self._buffer(device)
            base = buffer.reserve(len(items))
            # data pointers, numels, rows: sent from pinned memory, non_blocking (no wait); kept for the next
            # pass with the same ones (a training loop's allocator gives its gradients the same addresses
            # each step: no pinned block and no copy then). One loop, not a generator per list: a generator's
            # every step is a Python call (a small model's pass: 50 of its 175).
            pointers, numels, made, widest, row = [], [], [], 0, base
            for item in items:
                flat = item[0]
                numel = flat.numel()
                pointers.append(flat.data_ptr())
                numels.append(numel)
                widest = numel if numel > widest else widest
                made.append((item[1], buffer, row, None))
                row += 1
            numbers = (*pointers, *numels, base)
            table = buffer.tables.get(numbers)
            if table is None:
                if len(buffer.tables) >= BATCH_INDICES:
                    buffer.tables.clear()
                table = buffer.tables[numbers] = _to_device([*pointers, *numels, *range(base, row)], torch.int64,
                                                            device)
            self._triton_many(table, len(items), widest, dtype, buffer.rows)
            self._rows.extend(made)

    def flush(self, on_nonfinite: Optional[Callable[[], None]] = None) -> None:
        """End of a backward pass: the parameters' ``.grad`` and the waiting batches reduced, then one
        copy per device of its rows to the host. On CPU the summaries are filled now; on CUDA the copy
        is ``non_blocking`` into pinned memory and ``poll()`` fills them once its event says it is done.
        ``on_nonfinite()`` is called when they are filled, if one of them counted NaN or infinity (once per
        device that had such a gradient)."""
        self.wait()  # the previous pass's copy: long done by now, and its host memory is reused
        leaves, self._leaves = self._leaves, []
        if leaves:
            self._reduce_leaves(leaves)
        if self._batched or self._dense:
            self._reduce_batches()
        rows, self._rows = self._rows, []
        views, self._views = self._views, []
        self._seen.clear()
        by_buffer: dict = {}
        for item in rows:
            by_buffer.setdefault(id(item[1]), (item[1], []))[1].append(item)
        with untraced_no_grad():
            for buffer, items in by_buffer.values():
                used, buffer.used = buffer.used, 0
                cuda = buffer.device.type == "cuda"
                if buffer.host is None or len(buffer.host) < used:
                    buffer.host = torch.empty(len(buffer.rows), ROW, dtype=torch.float64, pin_memory=cuda)
                host, rows_used = buffer.host[:used], buffer.rows[:used]
                host.copy_(rows_used, non_blocking=cuda)
                sides = {}  # dtype → its side buffer's rows, on the host (the per-gradient path's min and max)
                for dtype in {item[3] for item in items if item[3] is not None}:
                    side = buffer.sides[dtype][0]
                    side_host = buffer.side_hosts.get(dtype)
                    if side_host is None or len(side_host) < used:
                        side_host = buffer.side_hosts[dtype] = torch.empty(side.shape, dtype=dtype, pin_memory=cuda)
                    sides[dtype] = side_host[:used]
                    sides[dtype].copy_(side[:used], non_blocking=cuda)
                event = None
                if cuda:
                    event = torch.cuda.Event()
                    event.record()
                rows_used.copy_(buffer.blank)  # ordered after the copies on the same stream
                mine = {id(item[0]) for item in items}  # the views whose numbers come with this copy
                self._reading.append((event, buffer, items, host, sides,
                                      [pair for pair in views if id(pair[0]) in mine], on_nonfinite))
        self.poll()

    def poll(self) -> bool:
        """Fill the summaries whose copy is done; True when none is left in flight."""
        still = []
        for reading in self._reading:
            event, buffer, items, host, sides, views, on_nonfinite = reading
            if event is not None and not event.query():
                still.append(reading)
                continue
            # (host-side work, no aten op: in C++ where the hooks' library is built, through numpy and lists here)
            fill = _native_fill()
            if fill is not None and not sides:
                nonfinite = fill(items, host.numpy(), _LAYOUT, Histogram, _WIRE_EDGES)
            else:
                nonfinite = _fill_rows(items, host.numpy(), {dtype: side.tolist() for dtype, side in sides.items()})
            for first, view in views:
                _share(first, view)
            if nonfinite and on_nonfinite is not None:
                on_nonfinite()
        self._reading = still
        return not still

    def wait(self) -> None:
        """Block until every copy in flight is done, then fill its summaries."""
        for event, *_ in self._reading:
            if event is not None:
                event.synchronize()
        self.poll()


# What native/device_path.cpp's add reads of this module (a class attribute: one look-up a call), with the two methods
# it stands for: replaced on the class or an instance, they are called instead
DeviceSummaries._native_config = (TensorSummary, SMALL_NUMEL, BATCH_NUMEL, BATCH_ELEMENTS, BATCH_TENSORS,
                                  DeviceSummaries.add, DeviceSummaries.add_leaf)


def _memory(grad: torch.Tensor, numel: Optional[int] = None, dense: Optional[bool] = None) -> tuple:
    """What makes two gradients one summary's numbers: the same memory, every element of it once, in any
    shape (the same elements in any order have the same min, max, sum, norm and counts); a small one's
    values are kept in row-major order, so only its contiguous views share. Others: the same view.
    (``numel``, ``dense``: grad's, and whether it is contiguous or, past SMALL_NUMEL, dense, if known.)

    >>> g = torch.ones(300, 400)
    >>> _memory(g) == _memory(g.t()) == _memory(g.view(-1)), _memory(g) == _memory(g[:, :200])
    (True, False)
    """
    if numel is None:
        numel, _, dense = _facts(grad)
    if dense:
        return grad.data_ptr(), numel, grad.dtype
    return grad.data_ptr(), grad.shape, grad.stride(), grad.dtype


def _facts(grad: torch.Tensor) -> tuple[int, bool, bool]:
    """(numel, contiguous, dense) of ``grad``: dense when contiguous, or past SMALL_NUMEL when its elements fill its
    memory in any order (:func:`_is_dense`; a small one's values are kept in row-major order).

    >>> g = torch.ones(300, 400)
    >>> _facts(g), _facts(g.t()), _facts(g[:, :200]), _facts(torch.ones(4, 4).t())
    ((120000, True, True), (120000, False, True), (60000, False, False), (16, False, False))
    """
    numel, contiguous = grad.numel(), grad.is_contiguous()
    return numel, contiguous, contiguous or numel > SMALL_NUMEL and _is_dense(grad)


def _share(first: TensorSummary, view: TensorSummary) -> None:
    """``view``'s numbers: ``first``'s (they summarise the same elements; the shapes differ)."""
    view.norm, view.min, view.max, view.mean = first.norm, first.min, first.max, first.mean
    view.nan_count, view.inf_count = first.nan_count, first.inf_count
    view.values, view.histogram = first.values, first.histogram


def _is_dense(grad: torch.Tensor) -> bool:
    """Whether ``grad``'s elements fill its memory exactly, in any order (a summary does not depend on the
    order); its first element is then at its memory's start."""
    if grad.is_contiguous():
        return True
    expected = 1  # dense: the strides, smallest first, are each the product of the sizes before
    for stride, size in sorted(zip(grad.stride(), grad.shape)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _dense_flat(grad: torch.Tensor) -> Optional[torch.Tensor]:
    """``grad``'s memory as a flat tensor when it is dense (``_is_dense``), else None."""
    if grad.is_contiguous():
        return grad.view(-1)
    return grad.as_strided((grad.numel(),), (1,)) if _is_dense(grad) else None


def _boundaries_on(buffer: _Buffer, dtype: Optional[torch.dtype]) -> torch.Tensor:
    """torch.bucketize's boundaries on ``buffer``'s device, made once: in ``dtype`` for its bins (the
    per-gradient path), or None: float32's bins (which bin float16 and bfloat16 alike) in float64 (the batch)."""
    boundaries = buffer.boundaries.get(dtype)
    if boundaries is None:
        values = _boundaries(dtype, dtype) if dtype is not None else _boundaries(torch.float32, torch.float64)
        boundaries = buffer.boundaries[dtype] = _to_device(values.tolist(), values.dtype, buffer.device)
    return boundaries


def _reduce(g: torch.Tensor, index: int, buffer: _Buffer) -> None:
    """The per-gradient torch path (a large or a float64 gradient), into row ``index`` of ``buffer``, none
    read back and ``g`` not held: nine aten ops (its flat view, bucketize, the counts, the min and the max of
    its finite values, each after a nan_to_num, sum, norm), + a copy for a strided one that is not dense, + a
    small one's values (float64 only). min and max are plain reductions, in ``g``'s dtype (exact), into its side
    buffer: per bucket, scatter_reduce_ made every value an atomic update of one of a few addresses, which on a
    GPU serialised (GPT-2's embedding gradient took seconds); the nan_to_num copy is transient, one at a time."""
    inf = math.inf
    flat = g.view(-1) if g.is_contiguous() else _dense_flat(g)  # (bucketize copies a strided input, and warns)
    flat = g.reshape(-1) if flat is None else flat
    buckets = torch.bucketize(flat, _boundaries_on(buffer, g.dtype))
    buffer.counts[index].index_put_((buckets,), buffer.one, accumulate=True)
    del buckets  # (int64: twice a float32 gradient's bytes, free before nan_to_num's copy, so the peak stays)
    _, lo, hi = buffer.side(g.dtype)
    torch.amin(flat.nan_to_num(inf, inf, inf), out=lo[index])  # finite values only (none: +inf)
    torch.amax(flat.nan_to_num(-inf, -inf, -inf), out=hi[index])
    torch.sum(flat, 0, dtype=torch.float64, out=buffer.sums[index])
    torch.linalg.vector_norm(flat, dtype=torch.float64, out=buffer.squares[index])
    if g.numel() <= SMALL_NUMEL:
        buffer.views[index][_VALUES:_VALUES + g.numel()].copy_(flat if g.is_contiguous() else g.reshape(-1))


def _reduce_batch(grads: list, base: int, buffer: _Buffer) -> None:
    """Gradients (any shape and layout, float32/16/bf16, one dtype) reduced together into rows ``base``..
    of ``buffer``: thirteen aten ops for the whole batch, whatever its size (+ its index tensors' copies the
    first time a batch of its shapes comes). The small ones (SMALL_NUMEL) come first: their values, the
    start of the concatenation, are kept too (+ two ops)."""
    inf, device = math.inf, buffer.device
    small = [g.numel() for g in grads if g.numel() <= SMALL_NUMEL]
    numels = [g.numel() for g in grads]
    total = sum(numels)
    # every element, row-major within each gradient, in float64 (exact for these dtypes): one op for all.
    # (index_reduce_ along dim 1 would take the (1, total) gathering with no view, one op less, but on the
    # CPU it ran 25 times slower than scatter_reduce_)
    x = torch._chunk_cat(grads, 0, 1, out=torch.empty(1, total, dtype=torch.float64, device=device)).view(-1)
    # the row of each element: base + the gradient's place in the batch (base rows of no element first)
    key = (base, tuple(numels))
    indices = buffer.indices.get(key)
    if indices is None:
        if len(buffer.indices) >= BATCH_INDICES:
            buffer.indices.clear()
        where = [(base + k) * ROW + _VALUES + j for k, n in enumerate(small) for j in range(n)]
        indices = buffer.indices[key] = (_to_device([0] * base + numels, torch.int64, device),
                                         _to_device(where, torch.int64, device) if where else None)
    repeats, where = indices
    rows = torch.repeat_interleave(repeats, output_size=total)
    lo, hi, total_sum, squares, counts, flat_rows = buffer.columns
    lo.scatter_reduce_(0, rows, x.nan_to_num(inf, inf, inf), "amin")  # finite values only
    hi.scatter_reduce_(0, rows, x.nan_to_num(-inf, -inf, -inf), "amax")
    total_sum.index_add_(0, rows, x)
    squares.index_add_(0, rows, x * x)
    buckets = torch.bucketize(x, _boundaries_on(buffer, None))  # -inf, the BINS bins, +inf, NaN
    counts.index_put_((rows, buckets), buffer.one, accumulate=True)
    if where is not None:
        flat_rows.index_copy_(0, where, x[: len(where)])


def _fill_rows(items: list, rows: np.ndarray, extremes: dict) -> bool:
    """The summaries of ``items`` (summary, buffer, row index, side) filled from their ``rows``: min, max, sum, sum
    of squares, the bucket counts (-inf, the bins, +inf, NaN), a small tensor's values. The arithmetic for all of
    them at once in numpy (float64, as one by one), then each summary's attributes, a non-finite number made a wire
    string only where there is one. An item of the per-gradient torch path (side: its dtype) takes its min and max
    from ``extremes[side][row]`` (its side buffer's row: those of its finite values), and its row holds the
    norm, not the sum of squares. Returns whether one counted NaN or infinity.

    >>> pending = DeviceSummaries(triton=False)
    >>> a, b = pending.add(torch.tensor([3.0, -4.0] * 40)), pending.add(torch.tensor([1.0, math.inf]))
    >>> pending.flush(); (round(a.norm, 4), a.min, a.mean), (b.max, b.inf_count, b.values)
    ((31.6228, -4.0, -0.5), (1.0, 1, [1.0, 'Infinity']))
    """
    index = np.fromiter((item[2] for item in items), np.int64, len(items))
    numel = np.fromiter((item[0].numel for item in items), np.float64, len(items))
    picked = rows[index]
    lo, hi, norm = picked[:, 0].copy(), picked[:, 1].copy(), np.sqrt(picked[:, 3])
    buckets = picked[:, _BUCKETS:_VALUES].astype(np.int64)
    bins = buckets[:, 1:-2].tolist()
    for k, (_, _, row, side) in enumerate(items):
        if side is not None:
            lo[k], hi[k] = extremes[side][row]  # (no finite value: +inf and -inf)
            norm[k] = picked[k, 3]
    none_finite = ~np.isfinite(lo)  # (no finite value at all: min and max NaN)
    lo[none_finite] = hi[none_finite] = math.nan
    mean = picked[:, 2] / numel
    finite = (np.isfinite(lo) & np.isfinite(hi) & np.isfinite(mean) & np.isfinite(norm)).tolist()
    nan_count, inf_count = buckets[:, -1].tolist(), (buckets[:, 0] + buckets[:, -2]).tolist()
    small = [k for k, item in enumerate(items) if item[0].numel <= SMALL_NUMEL]
    values = dict(zip(small, picked[small, _VALUES:].tolist())) if small else {}
    values_finite = dict(zip(small, np.isfinite(picked[small, _VALUES:]).tolist())) if small else {}
    for k, (summary, lo_k, hi_k, mean_k, norm_k) in enumerate(zip([item[0] for item in items], lo.tolist(),
                                                                   hi.tolist(), mean.tolist(), norm.tolist())):
        if not finite[k]:
            lo_k, hi_k, mean_k, norm_k = wire_float(lo_k), wire_float(hi_k), wire_float(mean_k), wire_float(norm_k)
        summary.min, summary.max, summary.mean, summary.norm = lo_k, hi_k, mean_k, norm_k
        summary.nan_count, summary.inf_count = nan_count[k], inf_count[k]
        n = summary.numel
        if n <= SMALL_NUMEL:
            kept = values[k][:n]
            summary.values = kept if all(values_finite[k][:n]) else [wire_float(v) for v in kept]
        elif any(bins[k]):
            summary.histogram = Histogram(lo_k, hi_k, bins[k], _WIRE_EDGES[summary.dtype])
    return any(nan_count) or any(inf_count)


# Each dtype's edges as the wire has them, made once and shared by its summaries' histograms (made afresh,
# they cost a pass of GPT-2's 554 gradients more than the rest of its summaries: ~20 ms of CPU, on an H100)
_WIRE_EDGES = {dtype_name(d): [wire_float(e) for e in edges(d)] for d in _FLOATS}
_LAYOUT = (ROW, _BUCKETS, _VALUES, SMALL_NUMEL)  # what native/device_path.cpp reads of a row


def _native_fill() -> Optional[Callable]:
    """native/device_path.cpp's ``fill_device_rows`` (:func:`_fill_rows` for rows with no side buffer, in C++) where
    the gradient hooks' library is built, else None."""
    hooks = native.hooks()
    return None if hooks is None else hooks.fill_device_rows


def _triton_kernels() -> tuple:
    """(the one-launch summary kernel, the multi-tensor one), or Nones where Triton is not installed (or
    FORGEVIZ_TRITON=0)."""
    if os.environ.get("FORGEVIZ_TRITON", "1") == "0":
        return None, None
    try:
        from . import device_summary_triton
    except ImportError:
        return None, None
    return device_summary_triton.summarize_into, device_summary_triton.summarize_many
