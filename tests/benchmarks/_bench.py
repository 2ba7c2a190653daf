"""What the benchmarks share. Imported before forgeviz: they measure this checkout's forgeviz, never a
copy installed earlier into the venv (``pip install .`` is not editable, so an edit would otherwise
go unmeasured)."""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, ContextManager, Optional

import torch

ROOT = str(Path(__file__).resolve().parents[2])
if sys.path[:1] != [ROOT]:
    sys.path.insert(0, ROOT)

# A benchmark trains on one fixed batch for thousands of steps: the loss converges, the gradients and Adam's
# state sink into denormal floats, and the CPU's kernels on them slow down as the run goes on (the MLP's
# step went 1.02 -> 1.47 ms of thread time over six thousand steps, forgeviz on or off), which made a step
# look longer, and forgeviz's share of it smaller, the longer a run had trained. Flushed to zero, the step
# stays what it is at the start (1.02-1.03 ms over the same run). Numbers are not asserted here: only time.
FLUSHES_DENORMALS = torch.set_flush_denormal(True)


def mlp(width: int, batch: int, device: str = "cpu"):
    """The benchmark MLP (three Linear layers, ReLU between), Adam, and one batch: (model, opt, x, y)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                torch.nn.ReLU(), torch.nn.Linear(width, 10)).to(device)
    opt = torch.optim.Adam(model.parameters())
    return model, opt, torch.randn(batch, width, device=device), torch.randn(batch, 10, device=device)


def train(model, opt, x, y, steps: int, loss_fn: Callable = torch.nn.functional.mse_loss) -> None:
    """The five-step training loop, ``steps`` times."""
    for _ in range(steps):
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def memory_arms(loop: Callable[[], None], device: str,
                starts: Optional[dict[str, list[float]]] = None) -> dict[str, Callable[[], float]]:
    """``loop`` run inside forgeviz's memory timeline of ``device`` and inside torch.profiler with
    profile_memory=True: the memory arms bench_capture.py and bench_cuda_memory.py share.

    Each arm returns the seconds of ``loop`` alone: what a training loop pays per step while the
    timeline records (its steady state). Starting and finishing (the timeline's walk of the objects
    that exist, the profiler's start and its trace) is paid once per recording, not per step: its
    seconds go to ``starts[arm name]``, for the caller to print beside the ratios."""
    import forgeviz  # here, not above: this module must put the checkout on sys.path before forgeviz loads

    activities = [torch.profiler.ProfilerActivity.CPU]
    if device != "cpu":
        activities.append(torch.profiler.ProfilerActivity.CUDA)

    def timed(name: str, recording: Callable[[], ContextManager]) -> Callable[[], float]:
        def arm() -> float:
            begin = time.perf_counter()
            with recording():
                start = time.perf_counter()
                loop()
                looped = time.perf_counter() - start
            if starts is not None:
                starts.setdefault(name, []).append(time.perf_counter() - begin - looped)
            return looped
        return arm

    return {"memory timeline": timed("memory timeline", lambda: forgeviz.memory_trace(device=device)),
            "torch.profiler(memory)": timed("torch.profiler(memory)", lambda: torch.profiler.profile(
                activities=activities, profile_memory=True))}


def run_as_a_cell(session, loop: Callable[[], None], record_grads: bool = True) -> None:
    """``loop`` inside forgeviz's capture session as ``%load_ext forgeviz`` runs a cell: hooks
    installed, ops tagged, gradients recorded (or not); everything undone after."""
    session.install()
    session.record_grads = record_grads
    session.enter()
    try:
        loop()
    finally:
        session.exit()
        session.uninstall()
        session.record_grads = True


def interleaved(variants: dict[str, Callable[[], Optional[float]]], rounds: int) -> dict[str, float]:
    """Median seconds of each variant, run round-robin so that drift hits them all alike; each round starts
    one variant further on, so that none always follows the same one (on an H100 the first summarising
    arm after "capture, no summaries" measured 1.58x where the same path two arms later measured 1.42x)."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    order = list(variants.items())
    # FORGEVIZ_BENCH_PROGRESS=1 (gpu.sh): each arm's time as it ends, on stderr, so that a run an outer timeout
    # cuts (a lease is short) still says which arm took long and what the others measured
    progress = os.environ.get("FORGEVIZ_BENCH_PROGRESS") == "1"
    for round_ in range(rounds):
        shift = round_ % len(order)
        for name, fn in order[shift:] + order[:shift]:
            start = time.perf_counter()
            seconds = fn()  # an arm may time its own steady part (memory_arms): else the whole call
            times[name].append(seconds if isinstance(seconds, float) else time.perf_counter() - start)
            if progress:
                print(f"    round {round_}, {name}: {times[name][-1] * 1e3:.1f} ms", file=sys.stderr, flush=True)
    return {name: statistics.median(t) for name, t in times.items()}
