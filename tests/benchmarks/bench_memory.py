"""Memory tracking overhead: a training loop with tracking off, native, dispatch-mode, and torch.profiler.

Run: ``.venv/bin/python tests/benchmarks/bench_memory.py``. Rounds are interleaved and the
medians reported as ratios to "off", measured in one run on one machine, each MLP in a fresh
process (``bench_memory.py 256 32`` runs one).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import torch

from _bench import interleaved, mlp, train  # first: it puts this checkout on sys.path

import forgeviz

ROUNDS = int(os.environ.get("FORGEVIZ_BENCH_ROUNDS", "9"))
STEPS = 10


def loop(model, opt, x, y) -> None:
    train(model, opt, x, y, STEPS)


def case(width: int, batch: int) -> dict[str, float]:
    model, opt, x, y = mlp(width, batch)
    loop(model, opt, x, y)  # warm up

    def off():
        loop(model, opt, x, y)

    from forgeviz._capture.memory_choice import make_tracker
    from forgeviz._capture.session import get_session

    session = get_session()
    session.uninstall()  # every arm starts from the same state
    trackers = {}
    for name in ["native", "dispatch"]:
        # seeded once (a gc walk), like %load_ext does; then per-step cost only
        start = time.perf_counter()
        trackers[name] = make_tracker(backend=name)
        trackers[name].start()
        trackers[name].stop()
        seed_ms = (time.perf_counter() - start) * 1e3

    def tracked(name):
        # The tracker with forgeviz's module stack (as memory_trace() and the kernel run it) but no
        # TorchFunctionMode: what tracking costs without naming each op, the floor of both.
        def run():
            session.install()
            trackers[name].start()
            loop(model, opt, x, y)
            trackers[name].stop()
            session.uninstall()
        return run

    def notebook(memory: bool):
        # What a notebook cell runs under %load_ext forgeviz: graph capture always, memory on or off.
        def run():
            session.install()
            if memory:
                trackers["native"].start()
            session.enter()
            loop(model, opt, x, y)
            session.exit()
            if memory:
                trackers["native"].stop()
            session.uninstall()  # every arm starts from the same state
        return run

    def trace_block():
        # What `with forgeviz.memory_trace():` runs per step (its seeding is timed on its own below):
        # the module stack, the tracker, and the TorchFunctionMode without gradient summaries.
        session.install()
        trackers["native"].start()
        session.record_grads = False
        session.enter()
        loop(model, opt, x, y)
        session.exit()
        session.record_grads = True
        trackers["native"].stop()
        session.uninstall()

    def profiler():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True):
            loop(model, opt, x, y)

    variants = {"off": off, "native ledger, no op naming": tracked("native"),
                "dispatch-mode tracker": tracked("dispatch"),
                "torch.profiler(profile_memory)": profiler, "memory_trace() block": trace_block,
                "cell, memory off": notebook(False),
                "cell, memory on": notebook(True)}
    medians = interleaved(variants, ROUNDS)
    entries = []
    for _ in range(5):  # memory_trace()'s fixed cost: a gc walk seeds what already exists
        start = time.perf_counter()
        with forgeviz.memory_trace():
            pass
        entries.append(time.perf_counter() - start)
    base = medians["off"]
    ratios = {name: t / base for name, t in medians.items()}
    # The memory timeline's own cost inside a notebook cell, where graph capture runs anyway.
    ratios["memory in a cell (on / off)"] = ratios["cell, memory on"] / ratios["cell, memory off"]
    return ratios | {"off_ms_per_step": base / STEPS * 1e3, "seed_ms": seed_ms,
                     "trace_ms": statistics.median(entries) * 1e3}


if __name__ == "__main__":
    torch.set_num_threads(2)
    if len(sys.argv) == 1:
        # Each MLP in a process of its own: after the large one, the small one's plain steps ran
        # 1.5x slower in the same process (allocator and cache state), which skewed every ratio.
        for width, batch in [(1024, 256), (256, 32)]:
            subprocess.run([sys.executable, __file__, str(width), str(batch)], check=True)
    else:
        width, batch = int(sys.argv[1]), int(sys.argv[2])
        result = case(width, batch)
        print(f"MLP {width} wide, batch {batch}: off {result.pop('off_ms_per_step'):.2f} ms/step, "
              f"seeding {result.pop('seed_ms'):.0f} ms once, an empty memory_trace() {result.pop('trace_ms'):.0f} ms; "
              + ", ".join(f"{k} {v:.3f}x" for k, v in result.items()))
