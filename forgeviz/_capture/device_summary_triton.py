"""The Triton kernels of device_summary: one launch summarises one gradient into its buffer row
(``summarize_into``), or many gradients of one dtype, each into its own row (``summarize_many``: the
parameters' ``.grad`` at a pass's end), its histogram from at most BINNED_BLOCKS of its blocks.

Imported only where Triton is installed (it ships with torch's CUDA wheels); ``TRITON_INTERPRET=1``
runs them on CPU tensors, which is how tests/test_device_summary.py checks them without a GPU.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .device_layout import _BUCKETS, _VALUES, BINS, BINS_PER_SIGN, LOW_EXPONENT
from .summary import SMALL_NUMEL

_BLOCK = 1024
_HIST = triton.next_power_of_2(BINS + 4)  # the buckets (-inf, the bins, +inf, NaN) and one for padding
# Programs a tensor at most: each loops over its share of the blocks, keeping its partial figures in
# registers, and adds them into the row once. (One program a block, each adding its figures into the same
# row, queued ~70 float64 atomics a block on one address each: on an H100 that took a third of a GPT-2
# step, 27 ms of 83, in those queues.)
_PROGRAMS = 512
_WARPS = 8  # a program's warps: 4 values a thread a block, fewer registers a thread, more loads in flight
# The blocks a gradient's histogram bins at most: every block of one up to BINNED_BLOCKS blocks (65,536
# values), else one in every ceil(blocks / BINNED_BLOCKS), spread over the tensor. Binning is most of a
# block's work (the bucket from the exponent bits, the histogram); min, max, sum, norm and the NaN and
# infinity counts still take every value. (The CPU's one-pass summary bins a strided sample of 4,096.)
BINNED_BLOCKS = 64
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
_ELEMENT = {torch.float32: tl.float32, torch.float64: tl.float64, torch.float16: tl.float16,
            torch.bfloat16: tl.bfloat16}


@triton.jit
def _bucket(x, inside, HIST: tl.constexpr, PER_SIGN: tl.constexpr, LOW: tl.constexpr):
    """Each value's bucket (float64 ``x``): -inf, the bins, +inf, NaN; HIST - 1 (never counted) outside."""
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
    return tl.where(inside, bucket, HIST - 1).to(tl.int32)


@triton.jit
def _add_into(row_ptr, lo, hi, total, squares, counts, nans, above, below, HIST: tl.constexpr,
              BUCKETS: tl.constexpr, PER_SIGN: tl.constexpr):
    """A program's partial figures (lanes of min, max, sum, sum of squares and NaN, +inf and -inf counts;
    the bins' counts) added into its row: one atomic an address."""
    tl.atomic_min(row_ptr, tl.min(lo, 0).to(tl.float64))
    tl.atomic_max(row_ptr + 1, tl.max(hi, 0).to(tl.float64))
    tl.atomic_add(row_ptr + 2, tl.sum(total, 0))
    tl.atomic_add(row_ptr + 3, tl.sum(squares, 0))
    bins = tl.arange(0, HIST)
    tl.atomic_add(row_ptr + BUCKETS + bins, counts.to(tl.float64), mask=(bins >= 1) & (bins <= 2 * PER_SIGN + 1))
    tl.atomic_add(row_ptr + BUCKETS, tl.sum(below, 0).to(tl.float64))
    tl.atomic_add(row_ptr + BUCKETS + 2 * PER_SIGN + 2, tl.sum(above, 0).to(tl.float64))
    tl.atomic_add(row_ptr + BUCKETS + 2 * PER_SIGN + 3, tl.sum(nans, 0).to(tl.float64))


@triton.jit
def _fresh(BLOCK: tl.constexpr, HIST: tl.constexpr, WIDE: tl.constexpr):
    """A program's partial figures before its first block: lanes of min, max (float64 if WIDE, else
    float32: exact for every dtype but float64), sum, sum of squares (float64); the bins' counts; lanes of
    NaN, +inf and -inf counts."""
    lo = tl.full([BLOCK], float("inf"), tl.float64 if WIDE else tl.float32)
    hi = tl.full([BLOCK], -float("inf"), tl.float64 if WIDE else tl.float32)
    total, squares = tl.zeros([BLOCK], tl.float64), tl.zeros([BLOCK], tl.float64)
    nans, above, below = tl.zeros([BLOCK], tl.int32), tl.zeros([BLOCK], tl.int32), tl.zeros([BLOCK], tl.int32)
    return lo, hi, total, squares, tl.zeros([HIST], tl.int32), nans, above, below


@triton.jit
def _accumulate(x_ptr, start, n, row_ptr, binned, lo, hi, total, squares, counts, nans, above, below,
                BLOCK: tl.constexpr, HIST: tl.constexpr, VALUES: tl.constexpr, SMALL: tl.constexpr,
                PER_SIGN: tl.constexpr, LOW: tl.constexpr, WIDE: tl.constexpr):
    """The block of ``BLOCK`` values from element ``start`` added into a program's partial figures; its
    values binned too if ``binned``."""
    offsets = start + tl.arange(0, BLOCK)
    inside = offsets < n
    # compared in float32 (exact for float32, float16, bfloat16; float64's in float64), summed in float64
    x = tl.load(x_ptr + offsets, mask=inside, other=0.0).to(tl.float64 if WIDE else tl.float32)
    finite = inside & (x == x) & (tl.abs(x) < float("inf"))
    lo = tl.minimum(lo, tl.where(finite, x, float("inf")))
    hi = tl.maximum(hi, tl.where(finite, x, -float("inf")))
    wide = x.to(tl.float64)
    total += wide
    squares += wide * wide
    nans += (x != x).to(tl.int32)
    above += (x == float("inf")).to(tl.int32)
    below += (x == -float("inf")).to(tl.int32)
    if binned:
        counts += tl.histogram(_bucket(wide, inside, HIST, PER_SIGN, LOW), HIST)
    if n <= SMALL:  # (then one block)
        tl.store(row_ptr + VALUES + offsets, wide, mask=inside)
    return lo, hi, total, squares, counts, nans, above, below


@triton.jit
def _summarize_kernel(x_ptr, row_ptr, n, iterations, stride, FIXED: tl.constexpr, BLOCK: tl.constexpr,
                      HIST: tl.constexpr, BUCKETS: tl.constexpr, VALUES: tl.constexpr, SMALL: tl.constexpr,
                      PER_SIGN: tl.constexpr, LOW: tl.constexpr, WIDE: tl.constexpr):
    """Program p of P takes the blocks p, p + P, ...: ``iterations`` of them at most (FIXED, when not 0:
    the interpreter's loops need a Python int); of those, it bins the blocks 0, stride, 2 * stride, ..."""
    lo, hi, total, squares, counts, nans, above, below = _fresh(BLOCK, HIST, WIDE)
    program, programs = tl.program_id(0), tl.num_programs(0)
    for i in range(0, FIXED if FIXED > 0 else iterations):
        block = program + i * programs
        lo, hi, total, squares, counts, nans, above, below = _accumulate(
            x_ptr, block.to(tl.int64) * BLOCK, n, row_ptr, block % stride == 0, lo, hi, total, squares, counts,
            nans, above, below, BLOCK, HIST, VALUES, SMALL, PER_SIGN, LOW, WIDE)
    _add_into(row_ptr, lo, hi, total, squares, counts, nans, above, below, HIST, BUCKETS, PER_SIGN)


@triton.jit
def _summarize_many_kernel(table_ptr, rows_ptr, count, row_stride, FIXED: tl.constexpr, ELEMENT: tl.constexpr,
                           BLOCK: tl.constexpr, HIST: tl.constexpr, BUCKETS: tl.constexpr, VALUES: tl.constexpr,
                           SMALL: tl.constexpr, PER_SIGN: tl.constexpr, LOW: tl.constexpr,
                           BINNED: tl.constexpr, WIDE: tl.constexpr):
    """Programs (t, 0..G-1) share tensor t, whose data pointer, numel and row are table[t], table[count + t],
    table[2 * count + t]: program (t, g) takes its blocks g, g + G, ... (a small tensor's few blocks leave
    most of its programs idle, not a grid as wide as the largest tensor), and bins about BINNED of them."""
    t = tl.program_id(0)
    n = tl.load(table_ptr + count + t)
    x_ptr = tl.load(table_ptr + t).to(tl.pointer_type(ELEMENT))
    row_ptr = rows_ptr + tl.load(table_ptr + 2 * count + t) * row_stride
    program, programs = tl.program_id(1), tl.num_programs(1)
    if program * BLOCK < n:  # (an idle program adds nothing)
        lo, hi, total, squares, counts, nans, above, below = _fresh(BLOCK, HIST, WIDE)
        blocks = tl.cdiv(n, BLOCK)
        stride = tl.cdiv(blocks, BINNED)
        for i in range(0, FIXED if FIXED > 0 else tl.cdiv(blocks - program, programs)):
            block = program + i * programs
            lo, hi, total, squares, counts, nans, above, below = _accumulate(
                x_ptr, block.to(tl.int64) * BLOCK, n, row_ptr, block % stride == 0, lo, hi, total, squares,
                counts, nans, above, below, BLOCK, HIST, VALUES, SMALL, PER_SIGN, LOW, WIDE)
        _add_into(row_ptr, lo, hi, total, squares, counts, nans, above, below, HIST, BUCKETS, PER_SIGN)


def _fixed(iterations: int) -> int:
    """FIXED for a loop of ``iterations``: 0 compiled (a runtime bound, one kernel for every count),
    ``iterations`` interpreted."""
    return iterations if _INTERPRETED else 0


def binning_stride(n: int) -> int:
    """Of a gradient of ``n`` values, the kernels bin the blocks of _BLOCK values 0, k, 2k, ...: this k.

    >>> binning_stride(65_536), binning_stride(65_537), binning_stride(10**8)
    (1, 2, 1526)
    """
    return max(1, triton.cdiv(triton.cdiv(n, _BLOCK), BINNED_BLOCKS))


def summarize_into(flat: torch.Tensor, row: torch.Tensor) -> None:
    """One launch: ``flat``'s summary added into ``row`` (min/max slots start at ±inf, the rest at 0).
    Values are kept for small tensors in memory order, so call it with a contiguous ``flat`` for those."""
    n = flat.numel()
    blocks = triton.cdiv(n, _BLOCK)
    programs = min(blocks, _PROGRAMS)
    iterations = triton.cdiv(blocks, programs)
    _summarize_kernel[(programs,)](flat, row, n, iterations, binning_stride(n), FIXED=_fixed(iterations),
                                   BLOCK=_BLOCK, HIST=_HIST, BUCKETS=_BUCKETS, VALUES=_VALUES, SMALL=SMALL_NUMEL,
                                   PER_SIGN=BINS_PER_SIGN, LOW=LOW_EXPONENT, WIDE=flat.dtype == torch.float64,
                                   num_warps=_WARPS)


def summarize_many(table: torch.Tensor, count: int, most: int, dtype: torch.dtype, rows: torch.Tensor) -> None:
    """One launch for ``count`` dense gradients of ``dtype``, each added into its own row of ``rows``
    (a 2-D buffer). ``table`` (int64, on their device): their data pointers, then their numels, then
    their row indices; ``most``: the largest numel (the grid's width, known on the host)."""
    grid = (count, min(triton.cdiv(most, _BLOCK), _PROGRAMS))
    fixed = _fixed(triton.cdiv(triton.cdiv(most, _BLOCK), grid[1]))  # (interpreted: the largest's, masked)
    _summarize_many_kernel[grid](table, rows, count, rows.stride(0), FIXED=fixed, ELEMENT=_ELEMENT[dtype],
                                 BLOCK=_BLOCK, HIST=_HIST, BUCKETS=_BUCKETS, VALUES=_VALUES, SMALL=SMALL_NUMEL,
                                 PER_SIGN=BINS_PER_SIGN, LOW=LOW_EXPONENT, BINNED=BINNED_BLOCKS,
                                 WIDE=dtype == torch.float64, num_warps=_WARPS)
