"""Tensor summaries: stats copied out of a tensor at the moment it is seen, never the tensor itself."""

from __future__ import annotations

import ctypes
import math

import torch

from ..model.graph import Histogram, TensorMeta, TensorSummary, WireFloat
from ..model.strides import format_value
from . import native
from .untraced import untraced

SMALL_NUMEL = 64  # exact values are kept for tensors this small
HISTOGRAM_BINS = 32
HISTOGRAM_SAMPLE = 4096  # larger tensors are histogrammed from an evenly strided sample this big


def wire_float(value: float) -> WireFloat:
    """A float for JSON: non-finite values become "NaN", "Infinity" or "-Infinity".

    >>> wire_float(float("nan")), wire_float(-float("inf")), wire_float(2.5)
    ('NaN', '-Infinity', 2.5)
    """
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def dtype_name(dtype: torch.dtype, names: dict = {}) -> str:  # noqa: B006 - a cache on purpose
    """``torch.float32`` → ``"float32"`` (asked on hot paths: remembered per dtype).

    >>> dtype_name(torch.bfloat16)
    'bfloat16'
    """
    name = names.get(dtype)
    if name is None:
        name = names[dtype] = str(dtype).removeprefix("torch.")
    return name


def tensor_meta(t: torch.Tensor) -> TensorMeta:
    """Shape, dtype and device only."""
    return TensorMeta(list(t.shape), dtype_name(t.dtype), str(t.device))


def summarize(t: torch.Tensor | None, *, histogram: bool = True) -> TensorSummary | None:
    """Copy the stats of ``t`` (and its values, if small) into a plain summary.

    Costs one pass over a float CPU tensor's memory when forgeviz's native library is loaded (as
    ``%load_ext forgeviz`` does), else a few torch reductions; never a copy of the data, except a
    float cast for integer dtypes.

    >>> s = summarize(torch.tensor([48., 32.]))
    >>> s.values, round(s.norm, 4), round(torch.tensor([48., 32.]).norm().item(), 4)
    ([48.0, 32.0], 57.6888, 57.6888)
    """
    if t is None:
        return None
    with torch._C.DisableTorchFunction():  # reading shape and strides must not reach a mode either
        summary = _summarize_natively(t, histogram)
    if summary is not None:
        return summary
    # Our own reductions must not reach a TorchFunctionMode (ours or the user's), autograd, nor the
    # memory timeline.
    with untraced(), torch.no_grad():
        return _summarize(t.detach(), histogram)


def _summarize(t: torch.Tensor, histogram: bool) -> TensorSummary:
    summary = TensorSummary(list(t.shape), dtype_name(t.dtype), str(t.device), t.numel())
    if t.numel() == 0 or t.layout != torch.strided or t.device.type == "meta" or t.is_quantized:
        return summary
    if t.is_complex():
        t = t.abs()
    if t.dtype in (torch.float32, torch.float64):
        x = t
    else:
        x = t.to(torch.float64 if t.dtype == torch.int64 else torch.float32)
    lo, hi = torch.aminmax(x)
    stats = torch.stack([lo.to(x.dtype), hi.to(x.dtype), x.sum(), torch.linalg.vector_norm(x)]).tolist()
    lo_v, hi_v, total, norm = stats
    finite = all(math.isfinite(v) for v in stats)
    if not finite:
        # Only now pay for the counts; finite stats come from the finite values alone.
        nan_mask = torch.isnan(x)
        inf_mask = torch.isinf(x)
        summary.nan_count = int(nan_mask.sum())
        summary.inf_count = int(inf_mask.sum())
        finite_values = x[~(nan_mask | inf_mask)]
        if finite_values.numel():
            lo_v, hi_v = (float(v) for v in torch.aminmax(finite_values))
        else:
            lo_v = hi_v = float("nan")
    summary.min, summary.max = wire_float(lo_v), wire_float(hi_v)
    summary.mean = wire_float(total / x.numel())
    summary.norm = wire_float(norm)
    if x.numel() <= SMALL_NUMEL:
        summary.values = [wire_float(float(v)) for v in x.reshape(-1).tolist()]
    elif histogram and math.isfinite(lo_v) and math.isfinite(hi_v):
        # A full histc costs ~15x the exact stats on a big gradient, so bin an evenly strided
        # sample instead; the counts then sum to the sample size, which the view reports.
        source = (x if finite else finite_values).reshape(-1)
        step = max(1, source.numel() // HISTOGRAM_SAMPLE)
        sample = source[::step].float()
        counts = torch.histc(sample, bins=HISTOGRAM_BINS, min=lo_v, max=hi_v if hi_v > lo_v else lo_v + 1)
        summary.histogram = Histogram(wire_float(lo_v), wire_float(hi_v), [int(c) for c in counts.tolist()])
    return summary


# What fv_summarize_tensor writes: min, max, sum, norm and the values; the histogram counts.
_Out, _Counts = ctypes.c_double * (4 + SMALL_NUMEL), ctypes.c_int64 * HISTOGRAM_BINS


def _summarize_natively(t: torch.Tensor, histogram: bool, lib=None) -> TensorSummary | None:
    """The summary from one pass over a float CPU tensor's memory (tensor_stats.cpp), or None when
    the native library is not loaded, the tensor is not one it reads, or it holds NaN or infinity
    (torch then counts those).

    Called for every gradient of every backward pass: one ctypes call that is handed the tensor's
    TensorImpl and reads its sizes, strides and dtype itself. ``lib``: the library to call (default the
    loaded one, which keeps the GIL; ``native.unlocked()`` releases it, for a thread beside training).
    """
    lib = lib or native.loaded()
    if lib is None:
        return None
    out, counts = _Out(), _Counts()
    bins = HISTOGRAM_BINS if histogram else 0
    if lib.fv_summarize_tensor(ctypes.c_void_p(t._cdata), HISTOGRAM_SAMPLE, bins, SMALL_NUMEL, out, counts) != 0:
        return None
    numel = t.numel()
    lo, hi, total, norm = out[:4]
    summary = TensorSummary(list(t.shape), dtype_name(t.dtype), "cpu", numel, norm, lo, hi, total / numel)
    if numel <= SMALL_NUMEL:
        summary.values = out[4:4 + numel]
    elif histogram:
        summary.histogram = Histogram(lo, hi, counts[:])
    return summary


class DeferredSummaries:
    """Summaries of tensors on an accelerator, computed there and read back together: for devices where
    a read costs more than the ops that avoid it (not CUDA: see grads._READ_AT_ONCE).

    Reading a number off such a device waits for everything queued before it: two reads per gradient
    (its stats, its histogram) would stall a backward pass once per gradient. Here each gradient gets
    only the reductions that need the whole tensor, plus a copy of its values (small tensors) or of an
    evenly strided sample; ``flush()`` bins every sample at once, reads all the numbers with one copy
    per device and fills the summaries in. Each op left per gradient is paid thousands of times a step.

    >>> pending = DeferredSummaries()
    >>> s = pending.summarize(torch.tensor([48., 32.]))
    >>> s.norm is None, pending.flush(), round(s.norm, 4)
    (True, None, 57.6888)
    """

    def __init__(self) -> None:
        # (summary, its six statistics as 0-d tensors, its values or sample, whether that is a sample)
        self._pending: list[tuple[TensorSummary, list[torch.Tensor], torch.Tensor | None, bool]] = []

    def __bool__(self) -> bool:
        """Whether summaries wait for ``flush()``."""
        return bool(self._pending)

    def summarize(self, t: torch.Tensor, histogram: bool = True) -> TensorSummary:
        """A summary of ``t`` whose numbers arrive at ``flush()`` (shape and dtype are there now)."""
        summary = TensorSummary(list(t.shape), dtype_name(t.dtype), str(t.device), t.numel())
        if t.numel() == 0 or t.layout != torch.strided or t.device.type == "meta" or t.is_quantized:
            return summary
        with untraced(), torch.no_grad():
            stats, kept = _reduce_on_device(t.detach(), histogram)
        self._pending.append((summary, stats, kept, kept is not None and t.numel() > SMALL_NUMEL))
        return summary

    def flush(self) -> None:
        """Read every pending summary's numbers: one device-to-host copy per device."""
        pending, self._pending = self._pending, []
        by_device: dict = {}
        for item in pending:
            by_device.setdefault(item[1][0].device, []).append(item)
        with untraced(), torch.no_grad():
            for items in by_device.values():
                _read_together(items)


_STATS = 6  # min and max of the finite values, sum, norm, NaN count, finite count


def _reduce_on_device(t: torch.Tensor, histogram: bool) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """``t``'s statistics as 0-d tensors on its device, and a float64 copy of its values (small
    tensors) or of its histogram sample (None without a histogram). No op here reads a number back to
    the host, and nothing kept shares ``t``'s memory."""
    if t.is_complex():
        t = t.abs()
    x = t if t.is_floating_point() else t.to(torch.float64 if t.dtype == torch.int64 else torch.float32)
    flat = x.reshape(-1)
    inf = math.inf  # scalars go to kernels as arguments: a torch.tensor(inf, device=...) would be a blocking copy
    # (torch.isfinite is four kernels; abs() < inf is two, and NaN is not below it)
    stats = [flat.nan_to_num(inf, inf, inf).amin(), flat.nan_to_num(-inf, -inf, -inf).amax(),
             flat.sum(dtype=torch.float64), torch.linalg.vector_norm(flat, dtype=torch.float64),
             torch.isnan(flat).sum(), (flat.abs() < inf).sum()]
    if flat.numel() <= SMALL_NUMEL:
        return stats, flat.to(torch.float64, copy=True)
    if not histogram:
        return stats, None
    return stats, flat[::max(1, flat.numel() // HISTOGRAM_SAMPLE)].to(torch.float64, copy=True)


def _read_together(items: list) -> None:
    """Bin every sample between its tensor's finite min and max (like torch.histc; a non-finite value
    adds nothing), then read all of one device's numbers in one copy."""
    count = len(items)
    stats = torch.stack([value for _, values, _, _ in items for value in values]).to(torch.float64)
    parts = [stats]
    samples = [(i, kept) for i, (_, _, kept, is_sample) in enumerate(items) if is_sample]
    if samples:
        device = stats.device
        lengths = [kept.numel() for _, kept in samples]
        values = torch.cat([kept for _, kept in samples])
        owner = torch.repeat_interleave(torch.arange(len(samples), device=device),
                                        torch.tensor(lengths, device=device))
        heads = stats.view(count, _STATS)[torch.tensor([i for i, _ in samples], device=device)]
        lo, hi = heads[:, 0][owner], heads[:, 1][owner]
        width = torch.where(hi > lo, hi - lo, torch.ones_like(hi))
        position = torch.nan_to_num(((values - lo) / width * HISTOGRAM_BINS).floor(), nan=0.0, posinf=0.0,
                                    neginf=0.0)
        slot = owner * HISTOGRAM_BINS + position.clamp(0, HISTOGRAM_BINS - 1).long()
        counts = torch.zeros(len(samples) * HISTOGRAM_BINS, dtype=torch.float64, device=device)
        parts.append(counts.scatter_add_(0, slot, torch.isfinite(values).double()))
    parts += [kept for _, _, kept, is_sample in items if kept is not None and not is_sample]
    numbers = torch.cat(parts).tolist()
    at_counts = count * _STATS
    at_values = at_counts + len(samples) * HISTOGRAM_BINS
    for i, (summary, _, kept, is_sample) in enumerate(items):
        head = numbers[i * _STATS:(i + 1) * _STATS]
        if is_sample:
            rest, at_counts = numbers[at_counts:at_counts + HISTOGRAM_BINS], at_counts + HISTOGRAM_BINS
        elif kept is not None:
            rest, at_values = numbers[at_values:at_values + kept.numel()], at_values + kept.numel()
        else:
            rest = []
        _fill(summary, head, rest, is_sample)


def _fill(summary: TensorSummary, head: list[float], rest: list[float], is_sample: bool) -> None:
    lo, hi, total, norm, nan_count, finite_count = head
    if not math.isfinite(lo):  # no finite value at all
        lo = hi = float("nan")
    summary.min, summary.max = wire_float(lo), wire_float(hi)
    summary.mean, summary.norm = wire_float(total / summary.numel), wire_float(norm)
    summary.nan_count, summary.inf_count = int(nan_count), summary.numel - int(finite_count) - int(nan_count)
    if is_sample:
        if math.isfinite(lo):  # else nothing was binned
            summary.histogram = Histogram(lo, hi, [int(c) for c in rest])
    elif rest:
        summary.values = [wire_float(v) for v in rest]


def brief(summary: TensorSummary | None) -> str | None:
    """A few characters for a badge: the values when there are ≤ 4, else the norm.

    >>> brief(summarize(torch.tensor([64.])))
    '64'
    """
    if summary is None:
        return None
    if summary.values is not None and len(summary.values) <= 4:
        text = ", ".join(format_number(v) for v in summary.values)
        return text if len(summary.values) == 1 else f"[{text}]"
    if summary.norm is None:
        return summary.dtype
    return f"‖g‖={format_number(summary.norm)}"


def format_number(value: WireFloat) -> str:
    """A wire float as a stride view writes a value: ``64``, ``0.25``, ``1.235e+06``, ``nan``.

    >>> [format_number(v) for v in (64.0, 0.25, 1234567.0, "NaN", "-Infinity")]
    ['64', '0.25', '1.235e+06', 'nan', '-inf']
    """
    if isinstance(value, str):
        return {"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}[value]
    return format_value(float(value))
