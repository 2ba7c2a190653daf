"""The device summaries' Triton kernels against torch's own reads of the same memory, per call.

For each size and dtype: one launch of ``summarize_into`` (min, max, sum, sum of squares, NaN and ±inf
counts, a histogram of a spread sample) beside ``x.sum()`` and ``torch.linalg.vector_norm(x)`` (one read
of the tensor each: the bandwidth a summary could reach), and GPT-2-small's 148 parameter gradients in one
``summarize_many`` launch beside ``torch._foreach_norm``. Calls run back to back, timed with CUDA events
over many calls: small tensors measure what a launch costs the host (Triton's Python launcher), large
ones the kernel. With ``FORGEVIZ_KERNEL_VARIANTS=1`` each also runs at other program counts and warps
(``device_summary_triton._PROGRAMS`` and ``_WARPS``), to choose them.

On a machine without CUDA it runs tiny tensors under ``TRITON_INTERPRET=1`` (a check that it runs, not
figures). Run: ``python tests/benchmarks/bench_kernels.py`` (``tests/benchmarks/gpu.sh kernels``). Not a
test: nothing asserts.
"""

from __future__ import annotations

import os
import time

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # (read when the kernels are defined: before their import)

from _bench import ROOT  # noqa: E402,F401 - first: it puts this checkout on sys.path

from forgeviz._capture import device_summary_triton as kernels  # noqa: E402
from forgeviz._capture.device_summary import _Buffer, _to_device  # noqa: E402

CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if CUDA else "cpu")
VARIANTS = [(512, 8)] + ([(512, 4), (1024, 8), (2048, 8)] if os.environ.get("FORGEVIZ_KERNEL_VARIANTS") else [])


def per_call(fn, calls: int) -> float:
    """µs a call of ``fn``, ``calls`` back to back after one to warm up."""
    fn()
    if not CUDA:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end) / calls * 1e3


def variants(fn) -> list[float]:
    """``fn``'s µs a call at each (programs, warps) of VARIANTS."""
    times = []
    kept = kernels._PROGRAMS, kernels._WARPS
    try:
        for programs, warps in VARIANTS:
            kernels._PROGRAMS, kernels._WARPS = programs, warps
            times.append(per_call(fn, 40 if CUDA else 2))
    finally:
        kernels._PROGRAMS, kernels._WARPS = kept
    return times


def main() -> None:
    buffer = _Buffer(DEVICE)
    row = buffer.take()
    sizes = [1 << 12, 1 << 20, 3_145_728, 25_165_824, 100_663_296] if CUDA else [1 << 12, 70_000]
    print(f"summarize_into on {torch.cuda.get_device_name() if CUDA else 'CPU, interpreted'}, µs a call; "
          f"(programs, warps): {VARIANTS}")
    for n in sizes:
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(n, device=DEVICE, dtype=dtype)
            ours = variants(lambda: kernels.summarize_into(x, row))
            total = per_call(lambda: x.sum(), 40 if CUDA else 2)
            norm = per_call(lambda: torch.linalg.vector_norm(x), 40 if CUDA else 2)
            gbs = n * x.element_size() / ours[0] / 1e3
            print(f"  {n:>11,} {str(dtype)[6:]:9} kernel " + " ".join(f"{t:8.1f}" for t in ours)
                  + f" ({gbs:5.0f} GB/s)   sum {total:7.1f}   norm {norm:7.1f}")
    # GPT-2-small's parameters (at the CPU's size: a few of them), in one multi-tensor launch
    shapes = [(768,)] * 100 + [(768, 768)] * 24 + [(768, 3072)] * 24 if CUDA else [(768,)] * 3 + [(64, 96)] * 2
    grads = [torch.randn(s, device=DEVICE) for s in shapes]
    base = buffer.reserve(len(grads))
    table = _to_device([g.data_ptr() for g in grads] + [g.numel() for g in grads]
                       + list(range(base, base + len(grads))), torch.int64, DEVICE)
    most = max(g.numel() for g in grads)
    ours = variants(lambda: kernels.summarize_many(table, len(grads), most, torch.float32, buffer.rows))
    norms = per_call(lambda: torch._foreach_norm(grads), 40 if CUDA else 2)
    megabytes = sum(g.numel() for g in grads) * 4 / 1e6
    print(f"summarize_many, {len(grads)} gradients ({megabytes:.0f} MB) in one launch: "
          + " ".join(f"{t:.1f}" for t in ours) + f" µs; torch._foreach_norm {norms:.1f} µs")


if __name__ == "__main__":
    main()
