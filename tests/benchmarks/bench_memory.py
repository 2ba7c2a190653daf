"""Memory tracking overhead: the five-step loop with tracking off / on / torch.profiler(profile_memory).

Run: ``.venv/bin/python tests/benchmarks/bench_memory.py``. Rounds are interleaved and the
medians reported as ratios to "off", measured in one run on one machine.
"""

from __future__ import annotations

import statistics
import time

import torch

import forgeviz

ROUNDS = 9
STEPS = 10


def loop(model, opt, x, y) -> None:
    for _ in range(STEPS):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def case(width: int, batch: int) -> dict[str, float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                torch.nn.ReLU(), torch.nn.Linear(width, 10))
    opt = torch.optim.Adam(model.parameters())
    x, y = torch.randn(batch, width), torch.randn(batch, 10)
    loop(model, opt, x, y)  # warm up

    def off():
        loop(model, opt, x, y)

    from forgeviz.capture.memory import MemoryTracker

    tracker = MemoryTracker()  # seeded once (a gc walk), like %load_ext does; then per-step cost only
    start = time.perf_counter()
    tracker.start()
    tracker.stop()
    seed_ms = (time.perf_counter() - start) * 1e3

    def tracked():
        tracker.start()
        loop(model, opt, x, y)
        tracker.stop()

    def profiler():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True):
            loop(model, opt, x, y)

    variants = {"off": off, "forgeviz tracking": tracked, "torch.profiler(profile_memory)": profiler}
    times = {name: [] for name in variants}
    for _ in range(ROUNDS):
        for name, fn in variants.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["off"])
    return {name: statistics.median(t) / base for name, t in times.items()} | {
        "off_ms_per_step": base / STEPS * 1e3, "seed_ms": seed_ms}


if __name__ == "__main__":
    torch.set_num_threads(2)
    for width, batch in [(1024, 256), (256, 32)]:
        result = case(width, batch)
        print(f"MLP {width} wide, batch {batch}: off {result.pop('off_ms_per_step'):.2f} ms/step, "
              f"seeding {result.pop('seed_ms'):.0f} ms once; "
              + ", ".join(f"{k} {v:.3f}x" for k, v in result.items()))
