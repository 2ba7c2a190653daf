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
costs one kernel launch; without it, a dozen torch ops and still no host read.
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


def device_summaries_forced() -> bool:
    """Whether ``FORGEVIZ_SUMMARIES=device`` asks for this path on CPU tensors too (tests, benchmarks).

    >>> isinstance(device_summaries_forced(), bool)
    True
    """
    return os.environ.get("FORGEVIZ_SUMMARIES", "") == "device"


class _Buffer:
    """One device's rows, kept across passes (grown by doubling), and where they are read back."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.rows = torch.zeros(0, ROW, dtype=torch.float64, device=device)
        self.host: Optional[torch.Tensor] = None
        self.used = 0
        self.views: list[tuple] = []  # per row: (row, its stats, its counts, its values), made once per row
        self.boundaries: dict = {}  # dtype → torch.bucketize's boundaries on this device
        self.one = torch.ones((), dtype=torch.float64, device=device)
        blank = [0.0] * ROW
        blank[0], blank[1] = math.inf, -math.inf  # what a min and a max start from
        self.blank = torch.tensor(blank, dtype=torch.float64).to(device)

    def take(self) -> tuple:
        """A blank row's views; grows the buffer (between passes' reads, never during a copy)."""
        if self.used == len(self.views):
            grown = self.blank.repeat(max(64, 2 * self.used), 1)
            grown[: self.used].copy_(self.rows[: self.used])
            self.rows = grown
            self.views = [(row, row[:_BUCKETS], row[_BUCKETS:_VALUES], row[_VALUES:]) for row in grown]
        row = self.views[self.used]
        self.used += 1
        return row


class DeviceSummaries:
    """Summaries of gradients, computed where they live and read back once per backward pass.

    ``add(grad)`` gives a TensorSummary whose shape and dtype are there now and whose numbers arrive
    when the pass's one read-back is done: at ``flush()`` on CPU, at the first ``poll()`` after the
    copy's CUDA event on CUDA (``wait()`` blocks for it). The same gradient seen twice in a pass (one
    Node's grad_input is the next one's grad_output; a view with the same shape, strides and offset)
    is summarised once.

    >>> pending = DeviceSummaries()
    >>> s = pending.add(torch.tensor([3., -4.] * 40))
    >>> s.norm is None, pending.flush(), round(s.norm, 4), s.histogram.counts[28], s.histogram.counts[4]
    (True, None, 31.6228, 40, 40)
    """

    def __init__(self, triton: Optional[bool] = None) -> None:
        self._buffers: dict = {}  # device → _Buffer
        self._rows: list[tuple] = []  # (summary, buffer, row index, squared) waiting for the read-back
        self._seen: dict = {}  # (data_ptr, shape, stride, dtype) → (weakref to the tensor, version, summary)
        self._reading: list[tuple] = []  # (event or None, buffer, its rows, how many) copies in flight
        self._triton = _triton_kernel() if triton is None or triton else None
        self.summarised = 0  # gradients summarised so far (each counted once per pass)
        self._interpreted = os.environ.get("TRITON_INTERPRET") == "1"  # Triton then runs on CPU tensors too

    def __bool__(self) -> bool:
        """Whether summaries wait for ``flush()`` or ``poll()``."""
        return bool(self._rows or self._reading)

    def add(self, grad: torch.Tensor) -> TensorSummary:
        """``grad``'s summary, numbers to come; launches its reductions and reads nothing back."""
        key = (grad.data_ptr(), grad.shape, grad.stride(), grad.dtype)
        hit = self._seen.get(key)
        # The first tensor still alive means its memory was not reused by another gradient.
        if hit is not None and hit[0]() is not None and hit[1] == grad._version:
            return hit[2]
        summary = TensorSummary(list(grad.shape), dtype_name(grad.dtype), str(grad.device), grad.numel())
        self._seen[key] = (weakref.ref(grad), grad._version, summary)
        if grad.numel() == 0 or grad.layout != torch.strided or grad.dtype not in _FLOATS:
            return summary  # nothing to reduce (callers send other dtypes to summary.summarize)
        buffer = self._buffers.get(grad.device)
        if buffer is None:
            buffer = self._buffers[grad.device] = _Buffer(grad.device)
        index = buffer.used
        row, stats, counts, values = buffer.take()
        with untraced(), torch.no_grad():
            # (a small tensor's values are kept in memory order: its memory must be in row-major order)
            flat = None
            if self._triton is not None and (grad.is_cuda or self._interpreted) and (
                    grad.numel() > SMALL_NUMEL or grad.is_contiguous()):
                flat = _dense_flat(grad)
            if flat is not None:
                self._triton(flat, row)
                squared = True
            else:
                _reduce(grad, stats, counts, values, buffer)
                squared = False
        self._rows.append((summary, buffer, index, squared))
        self.summarised += 1
        return summary

    def flush(self) -> None:
        """End of a backward pass: one copy per device of its rows to the host. On CPU the summaries
        are filled now; on CUDA the copy is ``non_blocking`` into pinned memory and ``poll()`` fills
        them once its event says it is done."""
        self.wait()  # the previous pass's copy: long done by now, and its host memory is reused
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
                buffer.host[:used].copy_(buffer.rows[:used], non_blocking=cuda)
                event = None
                if cuda:
                    event = torch.cuda.Event()
                    event.record()
                buffer.rows[:used].copy_(buffer.blank)  # ordered after the copy on the same stream
                self._reading.append((event, buffer, items))
        self.poll()

    def poll(self) -> bool:
        """Fill the summaries whose copy is done; True when none is left in flight."""
        still = []
        for event, buffer, items in self._reading:
            if event is not None and not event.query():
                still.append((event, buffer, items))
                continue
            numbers = buffer.host.tolist() if len(items) > 64 else None
            for summary, _, index, squared in items:
                _fill(summary, numbers[index] if numbers is not None else buffer.host[index].tolist(), squared)
        self._reading = still
        return not still

    def wait(self) -> None:
        """Block until every copy in flight is done, then fill its summaries."""
        for event, _, _ in self._reading:
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


def _reduce(g: torch.Tensor, stats: torch.Tensor, counts: torch.Tensor, values: torch.Tensor,
            buffer: _Buffer) -> None:
    """The torch path: reductions into ``stats``, bucket counts into ``counts`` and a small tensor's
    values into ``values``, none read back. Ten aten ops (a small tensor: two or three more), each paid
    per gradient, thousands of times a step."""
    inf = math.inf  # scalars go to kernels as arguments: a torch.tensor(inf, device=...) would be a copy
    boundaries = buffer.boundaries.get(g.dtype)
    if boundaries is None:  # once per dtype and device
        boundaries = buffer.boundaries[g.dtype] = torch.tensor(_boundaries(g.dtype), dtype=g.dtype).to(g.device)
    torch.stack([g.nan_to_num(inf, inf, inf).amin(), g.nan_to_num(-inf, -inf, -inf).amax(),
                 g.sum(dtype=torch.float64), torch.linalg.vector_norm(g, dtype=torch.float64),
                 torch.isnan(g).sum()], out=stats)
    flat = g if g.is_contiguous() else _dense_flat(g)  # (bucketize copies a strided input, and warns)
    flat = g.reshape(-1) if flat is None else flat
    counts.index_put_((torch.bucketize(flat, boundaries, right=True),), buffer.one, accumulate=True)
    if g.numel() <= SMALL_NUMEL:
        values[: g.numel()].copy_(g.reshape(-1))


def _fill(summary: TensorSummary, row: list[float], squared: bool) -> None:
    lo, hi, total, squares, nan_count = row[:_BUCKETS]
    buckets = row[_BUCKETS:_VALUES]
    numel = summary.numel
    if not math.isfinite(lo):  # no finite value at all
        lo = hi = math.nan
    summary.min, summary.max = wire_float(lo), wire_float(hi)
    summary.mean = wire_float(total / numel)
    summary.norm = wire_float(math.sqrt(squares) if squared else squares)
    summary.nan_count = int(nan_count)
    summary.inf_count = int(buckets[0]) + int(buckets[-1]) - summary.nan_count
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
