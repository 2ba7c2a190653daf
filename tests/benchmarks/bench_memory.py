"""Memory tracking overhead: a training loop with tracking off, native, dispatch-mode, and torch.profiler.

Run: ``.venv/bin/python tests/benchmarks/bench_memory.py``. Rounds are interleaved and the
medians reported as ratios to "off", measured in one run on one machine, each MLP in a fresh
process (``bench_memory.py 256 32`` runs one).

``bench_memory.py models`` runs issue 27's memory targets' models on the CPU (the GPT-2 shape of
``bench_capture.py gpt2``, and the ResNet-18-like CNN at batch 16): off, ``memory_trace()`` and
torch.profiler(profile_memory=True), interleaved, by this thread's CPU time with one torch thread (steps
of about a second: per-op costs are a small part of them, as on a GPU's large steps).

``bench_memory.py pieces 256 32`` says where ``memory_trace()``'s cost per step goes: each Python piece of
the tracker (claims, op naming, the backward's site and walk, gradients, optimizer state, root calls)
timed by the CPU time of this thread (``time.thread_time``: a loaded machine's waits do not count), one
thread of torch, the best of 5 runs of 200 steps. The totals are timed without the wrappers, and each
piece less what a wrapped call that does nothing measures (a thread clock read can be a system call:
1.4 µs on a VM, where the totals once held ~90 µs a step of the wrappers' own reads).
"""

from __future__ import annotations

import collections
import contextlib
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


def pieces(width: int, batch: int, steps: int = 200) -> None:
    """Print memory_trace()'s per-step cost, piece by piece (see the module's docstring)."""
    from forgeviz._capture import ledger_native, session as sess
    from forgeviz._capture.memory import MemoryTracker

    torch.set_num_threads(1)  # thread_time sees this thread only: the ops' work too, then
    model, opt, x, y = mlp(width, batch)
    train(model, opt, x, y, 5)
    spent: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    originals: list[tuple[object, str, object]] = []

    def wrap(owner, name: str, label: str) -> None:
        inner = getattr(owner, name)
        originals.append((owner, name, inner))

        def timed(*args, **kwargs):
            start = time.thread_time_ns()
            try:
                return inner(*args, **kwargs)
            finally:
                spent[label] += time.thread_time_ns() - start
                calls[label] += 1
        setattr(owner, name, timed)

    def best(recording) -> tuple[float, dict, dict]:
        runs = []
        for _ in range(5):
            spent.clear()
            calls.clear()
            with recording():
                start = time.thread_time_ns()
                train(model, opt, x, y, steps)
                runs.append((time.thread_time_ns() - start, dict(spent), dict(calls)))
        return min(runs, key=lambda run: run[0])

    # The totals first, unwrapped: a read of the thread's CPU clock can be a system call (1.4 µs on a
    # VM), which the wrappers below make twice per call.
    off = best(contextlib.nullcontext)[0]
    mode = best(lambda: sess.get_session().recording(record_grads=False))[0]
    trace = best(forgeviz.memory_trace)[0]
    for name in ["claim_saved", "before_backward", "after_backward", "set_site", "_sync_grads", "_step_pre",
                 "_after_step", "root_call", "root_return"]:
        wrap(MemoryTracker, name, f"tracker.{name}")
    wrap(ledger_native.NativeLedger, "after_op", "ledger.after_op")
    wrap(sess, "user_location", "user_location (the mode's)")
    try:
        _, spent_in, called = best(forgeviz.memory_trace)
    finally:
        for owner, name, inner in reversed(originals):
            setattr(owner, name, inner)
    # What a piece's figure holds of the clock reads themselves: a wrapped call that does nothing.
    noop_spent: collections.Counter = collections.Counter()
    spent, calls = noop_spent, collections.Counter()

    class Probe:
        def nothing(self) -> None:
            pass
    wrap(Probe, "nothing", "nothing")
    probe = Probe()
    for _ in range(10_000):
        probe.nothing()
    clock = noop_spent["nothing"] / 10_000
    us = lambda ns: ns / steps / 1e3  # noqa: E731
    print(f"MLP {width} wide, batch {batch}, one thread, CPU time per step: off {us(off):.0f} µs; "
          f"the capture mode alone +{us(mode - off):.0f} µs ({mode / off:.2f}x); memory_trace() "
          f"+{us(trace - off):.0f} µs ({trace / off:.2f}x), +{us(trace - mode):.0f} µs of it memory's own; "
          f"its pieces (less {clock / 1e3:.2f} µs a call, the clock's own reads; set_site holds _sync_grads):")
    for label, ns in sorted(spent_in.items(), key=lambda kv: -kv[1]):
        print(f"  {label:30s} {us(ns - clock * called[label]):6.1f} µs/step in {called[label] / steps:4.1f} calls")


def models(rounds: int = 5) -> None:
    """Print memory_trace() and the profiler against off on the GPT-2 shape and the ResNet-18-like CNN."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench_capture import real_model

    torch.set_num_threads(1)  # thread_time sees this thread only: the ops' work too, then
    for name in ("gpt2", "resnet"):
        model, opt, x, y, loss_fn = real_model(name, "cpu")
        if name == "resnet":  # batch 16 on a CPU, not a GPU's 128: a step of about a second
            x, y = x[:16], y[:16]
        steps = 2
        train(model, opt, x, y, steps, loss_fn)  # warm up

        def arm(recording):
            def run() -> float:
                with recording():
                    start = time.thread_time()
                    train(model, opt, x, y, steps, loss_fn)
                    return time.thread_time() - start
            return run

        cpu = [torch.profiler.ProfilerActivity.CPU]
        arms = {"off": arm(contextlib.nullcontext), "memory_trace()": arm(forgeviz.memory_trace),
                "torch.profiler(memory)": arm(lambda: torch.profiler.profile(activities=cpu, profile_memory=True))}
        times: dict[str, list[float]] = {k: [] for k in arms}
        for r in range(rounds):
            for k in list(arms)[r % 3:] + list(arms)[:r % 3]:  # each arm first in turn
                times[k].append(arms[k]())
        base = statistics.median(times["off"])
        print(f"{name}: off {base / steps * 1e3:.0f} ms/step of thread time; "
              + ", ".join(f"{k} {statistics.median(v) / base:.3f}x" for k, v in times.items() if k != "off")
              + f" ({rounds} rounds of {steps} steps, medians, interleaved)")


if __name__ == "__main__":
    torch.set_num_threads(2)
    if sys.argv[1:2] == ["models"]:
        models()
    elif sys.argv[1:2] == ["pieces"]:
        pieces(*(int(a) for a in sys.argv[2:4]))
    elif len(sys.argv) == 1:
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
