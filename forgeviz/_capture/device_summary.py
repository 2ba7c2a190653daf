"""Gradient summaries computed on the gradient's device, with no host read until the pass ends.

Each gradient gets a row of one device buffer (float64): the min and max of its finite values, its sum,
its sum of squares (or norm), its NaN count and a histogram whose bins are fixed in advance, so that
binning never waits for a host read of min and max. The buffer is copied to the host once per backward
(on CUDA to pinned memory, ``non_blocking``), and the summaries are filled in when that copy is done.

Bins: sign × log2 magnitude, two binades per bin (``edges()``): for each sign, magnitudes below 2^-20,
then [2^-20, 2^-18) … [2^6, 2^8), then 2^8 and above, plus a bin for exact zeros: 33 bins, every finite
value counted (no sample). On the negative side the same magnitudes, mirrored: bin i is always
[edges[i], edges[i+1]).

With Triton (it ships with torch's CUDA wheels; ``TRITON_INTERPRET=1`` runs it on CPU tensors) a gradient
costs one kernel launch. Without it, small gradients (BATCH_NUMEL) wait in a batch that is reduced with a
dozen torch ops for all of them (about one op a gradient: its flat view), and a large or float64 one takes
nine to eleven ops of its own; still no host read.
"""

from __future__ import annotations

import math
import os
import weakref
from typing import Optional

import torch

from ..model.graph import Histogram, TensorSummary
from .device_layout import _BUCKETS, _VALUES, BINS, HIGH_EXPONENT, LOW_EXPONENT  # noqa: F401 - BINS: with its edges()
from .summary import SMALL_NUMEL, dtype_name, wire_float
from .untraced import untraced

ROW = _VALUES + SMALL_NUMEL  # then a small tensor's values
_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


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


def _boundaries(dtype: torch.dtype) -> list[float]:
    """torch.bucketize's boundaries (right=True): the edges but the last, then +inf, so that -inf is
    bucket 0, the bins are 1..BINS, and +inf and NaN are bucket BINS + 1."""
    return edges(dtype)[:-1] + [math.inf]


def _to_device(values: list, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A tensor of ``values`` on ``device`` with no wait for it: on CUDA, from pinned memory with a
    ``non_blocking`` copy (a copy from pageable memory would wait; the caching host allocator keeps the
    pinned block until the copy is done)."""
    cuda = device.type == "cuda"
    host = torch.tensor(values, dtype=dtype, pin_memory=cuda)
    return host.to(device, non_blocking=True) if cuda else host


class _Buffer:
    """One device's rows, kept across passes (grown by doubling), and where they are read back."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.rows = torch.zeros(0, ROW, dtype=torch.float64, device=device)
        self.host: Optional[torch.Tensor] = None
        self.used = 0
        self.views: tuple = ()  # a view of each row, made once per row
        self.columns: tuple = ()  # the rows' min, max, sum, sum of squares, counts from NaN's, flat: made once
        self.boundaries: dict = {}  # dtype (None: the batch path's) → torch.bucketize's boundaries on this device
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
            self.columns = (grown[:, 0], grown[:, 1], grown[:, 2], grown[:, 3], grown[:, _BUCKETS - 1:], grown.view(-1))
        first = self.used
        self.used += n
        return first


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
# Before torch.bucketize (but for a float64 gradient): NaN becomes -inf, and -inf this, which is below
# every finite float32, float16 or bfloat16 value, so that NaN has a bucket of its own (the row's NaN
# count), left of -inf's.
_NEG_INF = -1e300


class DeviceSummaries:
    """Summaries of gradients, computed where they live and read back once per backward pass.

    ``add(grad)`` gives a TensorSummary whose shape and dtype are there now and whose numbers arrive
    when the pass's one read-back is done: at ``flush()`` on CPU, at the first ``poll()`` after the
    copy's CUDA event on CUDA (``wait()`` blocks for it). The same gradient seen twice in a pass (one
    Node's grad_input is the next one's grad_output; a view with the same shape, strides and offset)
    is summarised once. Small gradients wait in a batch (BATCH_NUMEL, BATCH_ELEMENTS) and are reduced
    together; ``add_leaf`` waits for the pass's end and summarises the parameter's ``.grad`` then.

    >>> pending = DeviceSummaries()
    >>> s = pending.add(torch.tensor([3., -4.] * 40))
    >>> s.norm is None, pending.flush(), round(s.norm, 4), s.histogram.counts[28], s.histogram.counts[4]
    (True, None, 31.6228, 40, 40)
    """

    def __init__(self, triton: Optional[bool] = None) -> None:
        self._buffers: dict = {}  # device → _Buffer
        self._rows: list[tuple] = []  # (summary, buffer, row index, squared, nan_in_last) waiting for the read-back
        self._seen: dict = {}  # (data_ptr, shape, stride, dtype) → (weakref to the tensor, version, summary)
        self._reading: list[tuple] = []  # (event or None, buffer, its items, the host rows): copies in flight
        self._batches: dict = {}  # device → [(flat, summary, version)], waiting to be reduced together
        self._batched = 0  # elements waiting in those batches
        self._leaves: list[tuple] = []  # (summary, parameter, key) whose .grad is summarised when the pass ends
        self._triton = _triton_kernel() if triton is None or triton else None
        self.summarised = 0  # gradients summarised so far (each counted once per pass)
        self.held = 0  # the most elements a batch held, this object's lifetime (bench_capture.py ops)
        self._interpreted = os.environ.get("TRITON_INTERPRET") == "1"  # Triton then runs on CPU tensors too

    def __bool__(self) -> bool:
        """Whether summaries wait for ``flush()`` or ``poll()``."""
        return bool(self._rows or self._reading or self._batched or self._leaves)

    def _summary(self, grad: torch.Tensor) -> tuple:
        """(key, the summary already made for ``grad`` this pass or a new one, whether it is new)."""
        key = (grad.data_ptr(), grad.shape, grad.stride(), grad.dtype)
        hit = self._seen.get(key)
        # The first tensor still alive means its memory was not reused by another gradient.
        if hit is not None and hit[0]() is not None and hit[1] == grad._version:
            return key, hit[2], False
        summary = TensorSummary(list(grad.shape), dtype_name(grad.dtype), str(grad.device), grad.numel())
        self._seen[key] = (weakref.ref(grad), grad._version, summary)
        return key, summary, True

    def add(self, grad: torch.Tensor) -> TensorSummary:
        """``grad``'s summary, numbers to come; launches its reductions (or queues it in a batch) and
        reads nothing back."""
        key, summary, new = self._summary(grad)
        if new:
            self._launch(grad, summary)
        return summary

    def add_leaf(self, grad: torch.Tensor, parameter: torch.Tensor) -> TensorSummary:
        """The summary of the gradient that AccumulateGrad is about to make ``parameter``'s ``.grad``
        (it had none): its numbers are those of ``parameter.grad`` when the pass ends, summarised with
        the other parameters' in batches. Nothing holds ``grad`` meanwhile: a second reference would
        make AccumulateGrad copy it instead of keeping it."""
        key, summary, new = self._summary(grad)
        if new:
            self._leaves.append((summary, weakref.ref(parameter), key[1:]))
        return summary

    def _launch(self, grad: torch.Tensor, summary: TensorSummary) -> None:
        if grad.numel() == 0 or grad.layout != torch.strided or grad.dtype not in _FLOATS:
            return  # nothing to reduce (callers send other dtypes to summary.summarize)
        with untraced(), torch.no_grad():
            # (a small tensor's values are kept in memory order: its memory must be in row-major order)
            flat = None
            if self._triton is not None and (grad.is_cuda or self._interpreted) and (
                    grad.numel() > SMALL_NUMEL or grad.is_contiguous()):
                flat = _dense_flat(grad)
            if flat is None and grad.numel() <= BATCH_NUMEL and grad.dtype != torch.float64:
                if grad.numel() <= SMALL_NUMEL and not grad.is_contiguous():
                    flat = grad.reshape(-1)  # (a copy, in row-major order: its values are kept)
                else:
                    flat = _dense_flat(grad)
                    flat = grad.reshape(-1) if flat is None else flat
                self._batches.setdefault(grad.device, []).append((flat, summary, grad._version, grad))
                self._batched += flat.numel()
                self.summarised += 1
                if self._batched >= BATCH_ELEMENTS or len(self._batches[grad.device]) >= BATCH_TENSORS:
                    self._reduce_batches()
                return
            buffer = self._buffer(grad.device)
            index = buffer.used
            row = buffer.take()
            if flat is not None:
                self._triton(flat, row)
                squared, nan_in_last = True, False
            else:
                _reduce(grad, row, buffer)
                squared, nan_in_last = False, grad.dtype == torch.float64
        self._rows.append((summary, buffer, index, squared, nan_in_last))
        self.summarised += 1

    def _buffer(self, device: torch.device) -> "_Buffer":
        buffer = self._buffers.get(device)
        if buffer is None:
            buffer = self._buffers[device] = _Buffer(device)
        return buffer

    def _reduce_batches(self) -> None:
        """Every waiting batch reduced into consecutive rows of its device's buffer."""
        self.held = max(self.held, self._batched)
        batches, self._batches, self._batched = self._batches, {}, 0
        with untraced(), torch.no_grad():
            for device, items in batches.items():
                kept = []
                for item in items:
                    if item[3]._version == item[2]:
                        kept.append(item)
                    else:  # changed in place since add(): its numbers would not be the gradient's
                        self.summarised -= 1
                if not kept:
                    continue
                kept.sort(key=lambda item: item[0].numel() > SMALL_NUMEL)  # small ones first (_reduce_batch)
                buffer = self._buffer(device)
                base = buffer.reserve(len(kept))
                _reduce_batch([item[0] for item in kept], base, buffer)
                self._rows.extend((item[1], buffer, base + i, True, False) for i, item in enumerate(kept))

    def flush(self) -> None:
        """End of a backward pass: the parameters' ``.grad`` and the waiting batches reduced, then one
        copy per device of its rows to the host. On CPU the summaries are filled now; on CUDA the copy
        is ``non_blocking`` into pinned memory and ``poll()`` fills them once its event says it is done."""
        self.wait()  # the previous pass's copy: long done by now, and its host memory is reused
        leaves, self._leaves = self._leaves, []
        for summary, parameter, (shape, stride, dtype) in leaves:
            grad = parameter()
            grad = None if grad is None else grad.grad
            # .grad as accumulated (AccumulateGrad kept the incoming gradient, or copied it: same values)
            if grad is not None and grad.shape == shape and grad.dtype == dtype:
                self._launch(grad, summary)
        if self._batched:
            self._reduce_batches()
        rows, self._rows = self._rows, []
        self._seen.clear()
        by_buffer: dict = {}
        for item in rows:
            by_buffer.setdefault(id(item[1]), (item[1], []))[1].append(item)
        with untraced(), torch.no_grad():
            for buffer, items in by_buffer.values():
                used, buffer.used = buffer.used, 0
                cuda = buffer.device.type == "cuda"
                if buffer.host is None or len(buffer.host) < used:
                    buffer.host = torch.empty(len(buffer.rows), ROW, dtype=torch.float64, pin_memory=cuda)
                host, rows_used = buffer.host[:used], buffer.rows[:used]
                host.copy_(rows_used, non_blocking=cuda)
                event = None
                if cuda:
                    event = torch.cuda.Event()
                    event.record()
                rows_used.copy_(buffer.blank)  # ordered after the copy on the same stream
                self._reading.append((event, buffer, items, host))
        self.poll()

    def poll(self) -> bool:
        """Fill the summaries whose copy is done; True when none is left in flight."""
        still = []
        for reading in self._reading:
            event, buffer, items, host = reading
            if event is not None and not event.query():
                still.append(reading)
                continue
            numbers = host.tolist()  # (one read, not one a row)
            for summary, _, index, squared, nan_in_last in items:
                _fill(summary, numbers[index], squared, nan_in_last)
        self._reading = still
        return not still

    def wait(self) -> None:
        """Block until every copy in flight is done, then fill its summaries."""
        for event, *_ in self._reading:
            if event is not None:
                event.synchronize()
        self.poll()


def _dense_flat(grad: torch.Tensor) -> Optional[torch.Tensor]:
    """``grad``'s memory as a flat tensor when its elements fill it exactly, in any order (a summary
    does not depend on the order), else None."""
    if grad.is_contiguous():
        return grad.view(-1)
    expected = 1  # dense: the strides, smallest first, are each the product of the sizes before
    for stride, size in sorted(zip(grad.stride(), grad.shape)):
        if size != 1 and stride != expected:
            return None
        expected *= size
    return grad.as_strided((grad.numel(),), (1,))


def _boundaries_on(buffer: _Buffer, dtype: Optional[torch.dtype]) -> torch.Tensor:
    """torch.bucketize's boundaries on ``buffer``'s device, made once: for a ``dtype`` (the per-gradient
    path), or None: float32's (which bin float16 and bfloat16 alike) in float64, NaN's bucket first (_NEG_INF)."""
    boundaries = buffer.boundaries.get(dtype)
    if boundaries is None:
        values = _boundaries(dtype) if dtype is not None else [_NEG_INF] + _boundaries(torch.float32)
        boundaries = buffer.boundaries[dtype] = _to_device(values, dtype or torch.float64, buffer.device)
    return boundaries


def _reduce(g: torch.Tensor, row: torch.Tensor, buffer: _Buffer) -> None:
    """The per-gradient torch path (a large or a float64 gradient): its reductions, bucket counts and (a
    small tensor's) values into its ``row``, none read back. Nine aten ops (float64: eleven)."""
    inf = math.inf  # scalars go to kernels as arguments: a torch.tensor(inf, device=...) would be a copy
    flat = g if g.is_contiguous() else _dense_flat(g)  # (bucketize copies a strided input, and warns)
    flat = g.reshape(-1) if flat is None else flat
    stats = [g.nan_to_num(inf, inf, inf).amin(), g.nan_to_num(-inf, -inf, -inf).amax(),
             g.sum(dtype=torch.float64), torch.linalg.vector_norm(g, dtype=torch.float64)]
    if g.dtype == torch.float64:  # no value is free to stand for NaN: NaN shares +inf's bucket, and is counted
        torch.stack([*stats, torch.isnan(g).sum()], out=row[:_BUCKETS])
        buckets, counts = torch.bucketize(flat, _boundaries_on(buffer, g.dtype), right=True), row[_BUCKETS:_VALUES]
    else:  # NaN gets a bucket of its own: the row's NaN count, just before the buckets
        torch.stack(stats, out=row[:_BUCKETS - 1])
        buckets = torch.bucketize(flat.nan_to_num(-inf, inf, _NEG_INF), _boundaries_on(buffer, None), right=True)
        counts = row[_BUCKETS - 1:_VALUES]
    counts.index_put_((buckets,), buffer.one, accumulate=True)
    if g.numel() <= SMALL_NUMEL:
        row[_VALUES:_VALUES + g.numel()].copy_(g.reshape(-1))


def _reduce_batch(flats: list, base: int, buffer: _Buffer) -> None:
    """Gradients (flat, float32/16/bf16, in any mix) reduced together into rows ``base``.. of ``buffer``:
    about fifteen aten ops for the whole batch, whatever its size. The small ones (SMALL_NUMEL) come first:
    their values, the start of the concatenation, are kept too."""
    inf, device = math.inf, buffer.device
    small = [f.numel() for f in flats if f.numel() <= SMALL_NUMEL]
    numels = [f.numel() for f in flats]
    total = sum(numels)
    x = torch.cat(flats, out=torch.empty(total, dtype=torch.float64, device=device))  # exact for these dtypes
    # the row of each element: base + the gradient's place in the batch (base rows of no element first)
    rows = torch.repeat_interleave(_to_device([0] * base + numels, torch.int64, device), output_size=total)
    lo, hi, total_sum, squares, counts, flat_rows = buffer.columns
    lo.scatter_reduce_(0, rows, x.nan_to_num(inf, inf, inf), "amin")  # finite values only
    hi.scatter_reduce_(0, rows, x.nan_to_num(-inf, -inf, -inf), "amax")
    total_sum.index_add_(0, rows, x)
    squares.index_add_(0, rows, x * x)
    # buckets: NaN (the row's NaN count), -inf, the BINS bins, +inf
    buckets = torch.bucketize(x.nan_to_num(-inf, inf, _NEG_INF), _boundaries_on(buffer, None), right=True)
    counts.index_put_((rows, buckets), buffer.one, accumulate=True)
    if small:
        where = [(base + k) * ROW + _VALUES + j for k, n in enumerate(small) for j in range(n)]
        flat_rows.index_copy_(0, _to_device(where, torch.int64, device), x[: len(where)])


def _fill(summary: TensorSummary, row: list[float], squared: bool, nan_in_last: bool = False) -> None:
    lo, hi, total, squares, nan_count = row[:_BUCKETS]
    buckets = row[_BUCKETS:_VALUES]
    numel = summary.numel
    if not math.isfinite(lo):  # no finite value at all
        lo = hi = math.nan
    summary.min, summary.max = wire_float(lo), wire_float(hi)
    summary.mean = wire_float(total / numel)
    summary.norm = wire_float(math.sqrt(squares) if squared else squares)
    summary.nan_count = int(nan_count)
    summary.inf_count = int(buckets[0]) + int(buckets[-1]) - (summary.nan_count if nan_in_last else 0)
    counts = [int(c) for c in buckets[1:-1]]
    if numel <= SMALL_NUMEL:
        summary.values = [wire_float(v) for v in row[_VALUES:_VALUES + numel]]
    elif any(counts):
        summary.histogram = Histogram(wire_float(lo), wire_float(hi), counts,
                                      [wire_float(e) for e in edges(_DTYPE_OF[summary.dtype])])


_DTYPE_OF = {dtype_name(d): d for d in _FLOATS}


def _triton_kernel():
    """The one-launch summary kernel, or None where Triton is not installed (or FORGEVIZ_TRITON=0)."""
    if os.environ.get("FORGEVIZ_TRITON", "1") == "0":
        return None
    try:
        from . import device_summary_triton
    except ImportError:
        return None
    return device_summary_triton.summarize_into
