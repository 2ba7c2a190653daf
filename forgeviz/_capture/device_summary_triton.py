"""The Triton kernels of device_summary: one launch summarises one gradient into its buffer row
(``summarize_into``), or many gradients of one dtype, each into its own row (``summarize_many``: the
parameters' ``.grad`` at a pass's end).

Imported only where Triton is installed (it ships with torch's CUDA wheels); ``TRITON_INTERPRET=1``
runs them on CPU tensors, which is how tests/test_device_summary.py checks them without a GPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .device_layout import _BUCKETS, _VALUES, BINS, BINS_PER_SIGN, LOW_EXPONENT
from .summary import SMALL_NUMEL

_BLOCK = 1024
_HIST = triton.next_power_of_2(BINS + 4)  # the buckets (-inf, the bins, +inf, NaN) and one for padding
_PROGRAMS = 256  # programs a tensor at most in summarize_many (each loops over its share of the blocks)
_ELEMENT = {torch.float32: tl.float32, torch.float64: tl.float64, torch.float16: tl.float16,
            torch.bfloat16: tl.bfloat16}


@triton.jit
def _summarize_block(x, inside, offsets, row_ptr, n, HIST: tl.constexpr, BUCKETS: tl.constexpr,
                     VALUES: tl.constexpr, SMALL: tl.constexpr, PER_SIGN: tl.constexpr, LOW: tl.constexpr):
    """One block's values (float64, ``inside`` the tensor) added into the row at ``row_ptr``."""
    finite = inside & (x == x) & (tl.abs(x) < float("inf"))
    tl.atomic_min(row_ptr, tl.min(tl.where(finite, x, float("inf")), 0))
    tl.atomic_max(row_ptr + 1, tl.max(tl.where(finite, x, -float("inf")), 0))
    tl.atomic_add(row_ptr + 2, tl.sum(x, 0))
    tl.atomic_add(row_ptr + 3, tl.sum(x * x, 0))
    # The bin from the exponent bits (exact, unlike log2): two binades per bin, clamped at both ends.
    # Negative values mirror torch.bucketize's [edge, next edge): a magnitude that is a power of two
    # belongs to the bin below it.
    bits = tl.abs(x).to(tl.int64, bitcast=True)
    exponent = ((bits >> 52) & 0x7FF) - 1023
    exponent = tl.where((x < 0) & ((bits & 0xFFFFFFFFFFFFF) == 0), exponent - 1, exponent)
    magnitude = tl.minimum(tl.maximum((exponent - LOW + 2 + 2048) // 2 - 1024, 0), PER_SIGN - 1)
    bucket = tl.where(x > 0, PER_SIGN + 2 + magnitude, PER_SIGN - magnitude)
    bucket = tl.where(x == 0, PER_SIGN + 1, bucket)
    bucket = tl.where(x == -float("inf"), 0, bucket)
    bucket = tl.where(x == float("inf"), 2 * PER_SIGN + 2, bucket)
    bucket = tl.where(x != x, 2 * PER_SIGN + 3, bucket)  # NaN: the last bucket
    bucket = tl.where(inside, bucket, HIST - 1)  # padding: never added
    counts = tl.histogram(bucket.to(tl.int32), HIST)
    bins = tl.arange(0, HIST)
    tl.atomic_add(row_ptr + BUCKETS + bins, counts.to(tl.float64), mask=bins < 2 * PER_SIGN + 4)
    if n <= SMALL:
        tl.store(row_ptr + VALUES + offsets, x, mask=inside)


@triton.jit
def _summarize_kernel(x_ptr, row_ptr, n, BLOCK: tl.constexpr, HIST: tl.constexpr, BUCKETS: tl.constexpr,
                      VALUES: tl.constexpr, SMALL: tl.constexpr, PER_SIGN: tl.constexpr, LOW: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    x = tl.load(x_ptr + offsets, mask=inside, other=0.0).to(tl.float64)  # exact for every float dtype
    _summarize_block(x, inside, offsets, row_ptr, n, HIST, BUCKETS, VALUES, SMALL, PER_SIGN, LOW)


@triton.jit
def _summarize_many_kernel(table_ptr, rows_ptr, count, row_stride, ELEMENT: tl.constexpr, BLOCK: tl.constexpr,
                           HIST: tl.constexpr, BUCKETS: tl.constexpr, VALUES: tl.constexpr, SMALL: tl.constexpr,
                           PER_SIGN: tl.constexpr, LOW: tl.constexpr):
    """Programs (t, 0..G-1) share tensor t, whose data pointer, numel and row are table[t], table[count + t],
    table[2 * count + t]: program (t, g) takes its blocks g, g + G, ... (a small tensor's few blocks leave
    most of its programs idle, not a grid as wide as the largest tensor)."""
    t = tl.program_id(0)
    n = tl.load(table_ptr + count + t)
    x_ptr = tl.load(table_ptr + t).to(tl.pointer_type(ELEMENT))
    row_ptr = rows_ptr + tl.load(table_ptr + 2 * count + t) * row_stride
    for start in range(tl.program_id(1) * BLOCK, n, tl.num_programs(1) * BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        inside = offsets < n
        x = tl.load(x_ptr + offsets, mask=inside, other=0.0).to(tl.float64)
        _summarize_block(x, inside, offsets, row_ptr, n, HIST, BUCKETS, VALUES, SMALL, PER_SIGN, LOW)


def summarize_into(flat: torch.Tensor, row: torch.Tensor) -> None:
    """One launch: ``flat``'s summary added into ``row`` (min/max slots start at ±inf, the rest at 0).
    Values are kept for small tensors in memory order, so call it with a contiguous ``flat`` for those."""
    n = flat.numel()
    _summarize_kernel[(triton.cdiv(n, _BLOCK),)](flat, row, n, BLOCK=_BLOCK, HIST=_HIST, BUCKETS=_BUCKETS,
                                                  VALUES=_VALUES, SMALL=SMALL_NUMEL, PER_SIGN=BINS_PER_SIGN,
                                                  LOW=LOW_EXPONENT)


def summarize_many(table: torch.Tensor, count: int, most: int, dtype: torch.dtype, rows: torch.Tensor) -> None:
    """One launch for ``count`` dense gradients of ``dtype``, each added into its own row of ``rows``
    (a 2-D buffer). ``table`` (int64, on their device): their data pointers, then their numels, then
    their row indices; ``most``: the largest numel (the grid's width, known on the host)."""
    grid = (count, min(triton.cdiv(most, _BLOCK), _PROGRAMS))
    _summarize_many_kernel[grid](table, rows, count, rows.stride(0), ELEMENT=_ELEMENT[dtype], BLOCK=_BLOCK,
                                 HIST=_HIST, BUCKETS=_BUCKETS, VALUES=_VALUES, SMALL=SMALL_NUMEL,
                                 PER_SIGN=BINS_PER_SIGN, LOW=LOW_EXPONENT)
