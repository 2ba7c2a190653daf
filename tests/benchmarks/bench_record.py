"""What recording (``forgeviz.record``) costs on top of capture (``forgeviz.capture``), and the bytes it
writes per step: arms interleaved round by round in one process (their order alternating), reported as
ratios of medians, of the training thread's CPU time (``time.thread_time``: what a shared machine's
other loads disturb least) and of wall time.

  capture            a training loop inside forgeviz.capture() (gradient summaries each step)
  capture + record   the same with a Recorder's hooks installed, writing to a temporary folder (the
                     writer and reader threads stay up across rounds, as in a real run); with one rank, a
                     step whose .grad the backward before it summarised, unchanged since, takes those numbers
                     and reads nothing (``reused``: how many steps did)
  read at the step   the same with every step's gradients read again (the reader's hand-over), as with
                     more than one rank, or with .grad changed after the backward: a few MiB of them read at once
                     on the training thread, more beside step() where a core is free (grad_reader.cpp)
  read beside        read at the step, always by the native reader's thread beside step() (``set_inline_bytes(-1)``:
                     how every read went before; MLP-256's 0.5 MiB is read at once by default)
  + memory           the same with the memory timeline recorded too (``record(memory=True)``: a
                     MemoryTracker on the CPU ledger runs, and its events go to the memory stream)
  Python reader      read at the step, by the Python reader thread, as without the native reader
                     (grad_reader.cpp): what that library saves
  hooks idle         a Recorder installed whose three hooks do nothing: what installing them costs
  no hand-over       read at the step, with a native reader that takes no job (its read() gives None): what
                     handing the .grad tensors over and reading them beside the step cost, by difference

Each arm also says what the process's other threads spent per step (``time.process_time`` less the training
thread's: the native reader's reading and polling, the writer's compressing), which a machine whose other cores
are busy (a data loader's workers) pays for; and, counted by the native reader (``counters()``), its hand-overs
that had to wake it and those the step's end waited for (each a system call and, on a VM, an interrupt to another
CPU, paid by the training thread) and its polls (each a short sleep on the other core), per step: counts, which
the machines' noise leaves alone; and its thread's CPU time per hand-over, in all and reading. A rank of one makes
no fingerprints (nothing to compare them with); ``FORGEVIZ_BENCH_WORLD=2`` records as a rank of two, each
gradient's CRC-32 made too.

It also prints the training thread's CPU time inside the recorder's own hooks per step (each hook timed
with thread_time, less what a timed hook that does nothing measures: the clock reads' own cost; and, last,
less the idle arm's hooks, whose clock reads inside a step are cold and cost more than in a warm loop): the
part of the ratio that is recording's own, not the noise between arms; and the same from each round's third
step on: a round follows the other arms' rounds, a pause after which the native reader's thread sleeps and
the next two hand-overs each pay its wake-up, which a training loop's steady steps do not.

``bench_record.py steps [mlp|gpt2]`` times whole steps instead, no hook timed (``FORGEVIZ_BENCH_ROUNDS``
rounds, 200 by default, of 20 steps, the arms interleaved): capture, capture + record, the same with the hooks'
common case in Python (``Recorder.native_steps`` False: as without the native hooks' ``record_*``), read at the
step (as the reader chooses, and forced at once and beside the step: ``set_inline_bytes``), and hooks idle
(``FORGEVIZ_BENCH_WORLD=2``: as a rank of two, fingerprinted; ``FORGEVIZ_BENCH_WIDTH``: the MLP's, 256 by
default), each as µs a step added to capture's: the difference of the medians, and the median of each turn's
difference (paired: the arms of one turn run back to back, so a machine's drift slower than that
cancels). The timed hooks above add their own clock reads, and a 2% budget is about 30 µs of MLP-256's step: this
is the figure to compare with it.

``bench_record.py ddp [mlp|gpt2]`` runs real ranks instead: two processes under DistributedDataParallel (gloo on
loopback, one torch thread each), the arms interleaved alike on both (capture, capture + record, its hooks in
Python, hooks idle); each rank prints what each arm adds to capture's step, in wall time and in its thread's CPU
time, paired. On a 2-core VM two ranks and their gloo threads overfill the cores: its wall figures there swing by
hundreds of µs a step (MLP-256: a 4.5 ms step, 2.0 ms of it CPU), far more than recording's share; gpu.sh's ``ddp``
runs it where each rank has cores to itself.

``bench_record.py writer [mlp|gpt2]`` records one run without a break (``FORGEVIZ_BENCH_STEPS`` steps, 3000 by
default, after a warm-up run that imports what the writer needs) and prints the writer thread's CPU time per step,
stream by stream, and its segments' rows: the work a background thread does under the GIL beside the training
thread (on a machine whose cores are all busy, what training pays for it too). It also runs the same steps under
capture alone first, and prints for both the interpreter's garbage collections (count and pause by generation, in
whichever thread): each holds the GIL, and a full one (generation 2) takes a few hundred ms with torch loaded. Those
are rare (MLP-256: about one in 20,000 steps of a recording, before its rows waited untracked): count them over
``FORGEVIZ_BENCH_STEPS=20000`` or more. And for both, what the training thread waited per step (its wall time less
its CPU time: for the GIL while the writer holds it, or for a core), and its steps that waited over 1 ms: the
thread-time figures above cannot see those. ``FORGEVIZ_BENCH_DISK_MS``: a slow disk, each segment's write that much
longer (a sleep: no CPU), and ``FORGEVIZ_BENCH_SEGMENT_S``: segments that often (2 s by default): a writer that falls
behind; it then prints what the run kept (steps with rows, gradient steps, the metadata's ``writer_thinned`` and
what was dropped).

Models: the benchmark MLP-256 at batch 32 and the GPT-2-shaped CPU model of bench_capture.py.
Run: ``.venv/bin/python tests/benchmarks/bench_record.py [mlp|gpt2 ...] [cuda]``, or ``... steps [mlp|gpt2]``
(``FORGEVIZ_BENCH_THREADS=2``: torch's intra-op threads; with one, the thread's CPU time is the step's, and the
native reader has a core to itself). With ``cuda`` (gpu.sh's ``record``): the models on the GPU (GPT-2-small at seq
512, batch 8), whose parameters' gradients take the device path (summarised on the GPU, no host read); the arms
that are about the CPU's reader and ledger are left out, and each arm's wall time waits for the GPU
(``torch.cuda.synchronize``). ``FORGEVIZ_SUMMARIES=device`` runs that path on the CPU (its CPU cost, less the
launches' GPU time). ``FORGEVIZ_BENCH_PROFILE=1`` (gpu.sh's ``record-profile``) adds cProfile's busiest functions of
the capture and record arms' steps alone: on an H200 recording cost the MLP's step 1.47x of its CPU time, more than
its hooks' Python accounts for here.
Not a test: nothing asserts.
"""

from __future__ import annotations

import cProfile
import functools
import gc
import os
import pstats
import socket
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable, Iterator

import torch

from _bench import mlp, train  # first: it puts this checkout on sys.path

import forgeviz
from forgeviz._capture import native
from forgeviz._capture.memory_choice import make_tracker
from forgeviz._capture.recording import Recorder
from forgeviz.model.run import rank_folder
from forgeviz.run.writer import RunWriter

ROUNDS = int(os.environ.get("FORGEVIZ_BENCH_ROUNDS", "30"))
HOOKS = ("_step_begins", "_step_ends", "_after_backward")


def timed_hooks(recorder, spent: list[float], each: dict[str, float], calls: dict[str, int]) -> None:
    """Wrap the recorder's hooks (on the instance) so that their thread time adds up in ``spent[0]``, each
    hook's own in ``each[name]``, and its calls in ``calls[name]``; and, from the third step of a round on
    (``recorder.round_step``, set to 0 as a round starts), in ``recorder.steady[name]`` and
    ``recorder.steady_calls[name]``: a round's first steps follow the other arms' rounds, a pause after
    which the native reader's thread sleeps and each hand-over pays its wake-up."""
    recorder.round_step = 0
    recorder.steady, recorder.steady_calls = dict.fromkeys(HOOKS, 0.0), dict.fromkeys(HOOKS, 0)
    made = recorder.hooks  # (the native hooks' or the methods, as install() registers them)

    def timed_hook(hook: Callable, name: str) -> Callable:
        @functools.wraps(hook)
        def timed(*args, **kwargs):
            start = time.thread_time()
            try:
                return hook(*args, **kwargs)
            finally:
                took = time.thread_time() - start
                spent[0] += took
                each[name] += took
                calls[name] += 1
                if recorder.round_step >= 2:
                    recorder.steady[name] += took
                    recorder.steady_calls[name] += 1
                if name == "_step_ends":
                    recorder.round_step += 1

        return timed

    recorder.hooks = lambda: tuple(timed_hook(hook, name) for hook, name in zip(made(), HOOKS))


def clock_cost() -> float:
    """Seconds the timing wrapper itself adds to a call: its two reads of the thread's CPU clock (a system
    call on this VM, about a microsecond each), measured on hooks that do nothing, and taken off every
    hook's figure."""
    probe = type("Probe", (), {})()
    probe.hooks = lambda: tuple(lambda: None for _ in HOOKS)
    spent, each, calls = [0.0], dict.fromkeys(HOOKS, 0.0), dict.fromkeys(HOOKS, 0)
    timed_hooks(probe, spent, each, calls)
    hooks = probe.hooks()
    for _ in range(5_000):
        for hook in hooks:
            hook()
    return spent[0] / sum(calls.values())


def case(name: str, device: str = "cpu") -> None:
    # one training thread (FORGEVIZ_BENCH_THREADS: more): thread_time is then the step's CPU time
    torch.set_num_threads(int(os.environ.get("FORGEVIZ_BENCH_THREADS", "1")))
    cuda = device == "cuda"
    if name == "gpt2":
        from bench_capture import real_model

        model, opt, x, y, loss_fn = real_model("gpt2", device)
        steps, rounds = (10 if cuda else 2), max(3, ROUNDS // 5)
    else:
        model, opt, x, y = mlp(256, 32, device)
        loss_fn, steps, rounds = torch.nn.functional.mse_loss, 20, ROUNDS

    with tempfile.TemporaryDirectory() as folder, forgeviz.capture() as session:
        train(model, opt, x, y, 2, loss_fn)  # warm up
        tracker = make_tracker(2**18, fault=session.fault)
        tracker.start()  # (seeds what exists; stopped and started again around each memory arm)
        recorders = {}
        for arm_name, memory in (("record", None), ("idle", None)) if cuda else (
                ("record", None), ("read", None), ("beside", None), ("memory", tracker), ("python", None),
                ("idle", None), ("no hand-over", None)):
            def open_writer(rank: int, meta: dict, sub: str = arm_name) -> RunWriter:
                return RunWriter(Path(folder) / sub / rank_folder(rank), meta, session.fault)

            recorder = recorders[arm_name] = Recorder(session, open_writer, memory=memory)
            recorder.world = max(recorder.world, int(os.environ.get("FORGEVIZ_BENCH_WORLD", "1")))
            recorder._reuses = arm_name in ("record", "memory")  # (the others are about reading at the step)
            if arm_name == "python":
                if recorder._native_reader is None:  # not built: the record arm reads in Python already
                    recorder.close()
                    del recorders[arm_name]
                    continue
                recorder._native_reader = None
            if arm_name == "idle":
                recorder.native_steps = False  # (its methods are the hooks, which do nothing)
                for hook in HOOKS:
                    setattr(recorder, hook, lambda *args, **kwargs: None)
            if arm_name == "beside" and recorder._native_reader is None:
                recorder.close()
                del recorders[arm_name]
                continue
            if arm_name == "no hand-over" and recorder._native_reader is not None:
                recorder._native_reader = type("NoReader", (), {"read": staticmethod(lambda *args: None)})()
            recorder.spent, recorder.each, recorder.calls = [0.0], dict.fromkeys(HOOKS, 0.0), dict.fromkeys(HOOKS, 0)
            timed_hooks(recorder, recorder.spent, recorder.each, recorder.calls)
            recorder.install()
            train(model, opt, x, y, 2, loss_fn)  # its first graph is built and written here, once
            recorder.uninstall()
            recorder.first, recorder.spent[0] = recorder.step, 0.0
            recorder.each.update(dict.fromkeys(HOOKS, 0.0))
            recorder.calls.update(dict.fromkeys(HOOKS, 0))
            recorder.steady.update(dict.fromkeys(HOOKS, 0.0))
            recorder.steady_calls.update(dict.fromkeys(HOOKS, 0))
        tracker.stop()

        reader = native.reader()

        def counters() -> tuple[int, ...]:
            return reader.counters() if reader is not None else (0,) * 8

        # per arm: hand-overs, wake-ups, waits that blocked, polls, the reader's ns reading and its ns in all (as of
        # its last job), jobs read at once and the training thread's ns reading them
        reader_counts = {a: [0] * 8 for a in ("capture", *recorders)}

        def arm(which: str) -> tuple[float, float, float]:
            recorder = recorders.get(which)
            before = counters()
            if which == "memory":
                tracker.start()
            if recorder is not None:
                recorder.install()
                recorder.round_step = 0
            at_once = reader.set_inline_bytes(-1) if which == "beside" else None
            if cuda:
                torch.cuda.synchronize()
            profile = profiles.get(which)
            thread, wall, process = time.thread_time(), time.perf_counter(), time.process_time()
            if profile is not None:
                profile.enable()
            train(model, opt, x, y, steps, loss_fn)
            if cuda:
                torch.cuda.synchronize()
            if profile is not None:
                profile.disable()
            thread, wall = time.thread_time() - thread, time.perf_counter() - wall
            process = time.process_time() - process
            if recorder is not None:
                recorder.uninstall()
            if at_once is not None:
                reader.set_inline_bytes(at_once)
            if which == "memory":
                recorder._flush()  # (its last events, while the tracker still counts them)
                tracker.stop()
            reader_counts[which] = [total + now - then
                                    for total, now, then in zip(reader_counts[which], counters(), before)]
            return thread, wall, process - thread

        arms = ("capture", *recorders)
        times: dict[str, list[tuple[float, float, float]]] = {a: [] for a in arms}
        # FORGEVIZ_BENCH_PROFILE=1: cProfile around the capture and record arms' steps alone (no import, no warm-up),
        # printed after the figures: where recording's time goes (a GPU rank's hooks are Python)
        profiles = ({"capture": cProfile.Profile(), "record": cProfile.Profile()}
                    if os.environ.get("FORGEVIZ_BENCH_PROFILE") == "1" else {})
        for k in range(rounds):
            for which in arms[k % len(arms):] + arms[:k % len(arms)]:  # each arm first in turn
                times[which].append(arm(which))
        report = {}
        clock = clock_cost()
        for which, recorder in recorders.items():
            counted = max(recorder.calls["_after_backward"], 1)  # (steps: an idle recorder counts none)
            each = {name: (spent - clock * recorder.calls[name]) / counted for name, spent in recorder.each.items()}
            hooks = sum(each.values())
            steady = (sum(spent - clock * recorder.steady_calls[name] for name, spent in recorder.steady.items())
                      / recorder.steady_calls["_after_backward"] if recorder.steady_calls["_after_backward"] else None)
            recorder.close()
            report[which] = (hooks, each, recorder.writer.bytes / max(recorder.step - 1, 1), recorder.step - 1,
                             recorder.writer.segments, recorder.writer.meta.get("memory_downsampled"), steady,
                             recorder.reused)

    def median(which: str, column: int) -> float:
        return statistics.median(t[column] for t in times[which])

    base = median("capture", 0) / steps
    where = f"{device}, {torch.cuda.get_device_name()}" if cuda else device
    print(f"{name} ({where}): a step {base * 1e3:.2f} ms of thread time under capture "
          f"({median('capture', 1) / steps * 1e3:.2f} ms wall); {rounds} rounds of {steps} steps, medians, arms "
          f"interleaved; the hooks' figures less {clock * 1e6:.2f} µs a call, the timing's own clock reads; other "
          f"threads' CPU {median('capture', 2) / steps * 1e6:.0f} µs a step under capture")
    for which, label in (("record", "capture + record"), ("read", "capture + record, read at the step"),
                         ("beside", "capture + record, read beside the step"), ("memory", "capture + record + memory"),
                         ("python", "capture + record, Python reader"), ("idle", "hooks idle"),
                         ("no hand-over", "capture + record, no hand-over")):
        if which not in report:
            continue
        hooks, each, per_step, recorded, segments, thinned, steady, reused = report[which]
        handed, woke, blocked, polls, reading, busy, at_once, at_once_ns = reader_counts[which]
        print(f"  {label}: {median(which, 0) / median('capture', 0):.3f}× thread, "
              f"{median(which, 1) / median('capture', 1):.3f}× wall; vs capture + record "
              f"{median(which, 0) / median('record', 0):.3f}× thread, {median(which, 1) / median('record', 1):.3f}× "
              f"wall; the recorder's hooks {hooks * 1e6:.1f} µs a step ({hooks / base:.1%}"
              + (f"; from a round's third step on {steady * 1e6:.1f} µs, {steady / base:.1%}" if steady else "")
              + "); "
              f"{per_step / 1024:.2f} KiB written per step ({recorded} steps, {reused} reused, {segments} segments"
              f"{', memory thinned from ' + str(thinned) if thinned else ''}); other threads' CPU "
              f"{(median(which, 2) - median('capture', 2)) / steps * 1e6:+.0f} µs a step"
              + (f"; the native reader: of {handed} hand-overs {woke / handed:.0%} woke it and {blocked / handed:.0%} "
                 f"were waited for, {polls / handed:.1f} polls a hand-over, its CPU {busy / handed / 1e3:.0f} µs a "
                 f"hand-over, {reading / handed / 1e3:.0f} of them reading" if handed else "")
              + (f"; {at_once} reads at once, {at_once_ns / at_once / 1e3:.1f} µs each" if at_once else ""))
        print("    per hook, µs a step: " + ", ".join(f"{name} {spent * 1e6:.1f}" for name, spent in each.items()))
    if "idle" in report and "record" in report:
        # the idle arm's hooks do nothing: what they measure is the timing's own cost inside a step (its clock
        # reads, cold there, dearer than clock_cost's warm loop), which the record arm's figure holds too
        hooks, steady = report["record"][0] - report["idle"][0], None
        if report["record"][6] and report["idle"][6]:
            steady = report["record"][6] - report["idle"][6]
        later = "" if steady is None else f"; from a round's third step on {steady * 1e6:.1f} µs ({steady / base:.1%})"
        print(f"  the recorder's hooks less the idle arm's (the timing's cost inside a step): {hooks * 1e6:.1f} µs a "
              f"step ({hooks / base:.1%}){later}")
    for which, profile in profiles.items():  # (profiled steps run slower: places to look, not ratios)
        print(f"  cProfile, arm {which}, the busiest functions by their own time:")
        pstats.Stats(profile).sort_stats("tottime").print_stats(18)


def _steps_model(name: str, rounds: int) -> tuple:
    """(model, optimizer, x, y, loss_fn, steps a round, rounds) of the whole-step benchmarks: the GPT-2-shaped model
    (2 steps a round, 6 rounds) or the MLP (``FORGEVIZ_BENCH_WIDTH`` wide, 20 steps a round, ``rounds`` rounds);
    ``FORGEVIZ_BENCH_ROUNDS`` sets the rounds of either."""
    if name == "gpt2":
        from bench_capture import real_model

        return (*real_model("gpt2", "cpu"), 2, int(os.environ.get("FORGEVIZ_BENCH_ROUNDS", "6")))
    model, opt, x, y = mlp(int(os.environ.get("FORGEVIZ_BENCH_WIDTH", "256")), 32)
    return model, opt, x, y, torch.nn.functional.mse_loss, 20, int(os.environ.get("FORGEVIZ_BENCH_ROUNDS", rounds))


def _recorders(session, folder: str, names: tuple, arm: Callable[[str, Recorder], None],
               warm: Callable[[], None]) -> dict:
    """A Recorder per arm name, each writing to its own sub-folder of ``folder``, set up by ``arm(name, recorder)``
    (the arm "idle" with hooks that do nothing), installed for ``warm()`` (its first graph built and written there,
    once), then uninstalled."""
    recorders = {}
    for arm_name in names:
        def open_writer(rank: int, meta: dict, sub: str = arm_name) -> RunWriter:
            return RunWriter(Path(folder) / sub / rank_folder(rank), meta, session.fault)

        recorder = recorders[arm_name] = Recorder(session, open_writer)
        arm(arm_name, recorder)
        if arm_name == "idle":
            for hook in HOOKS:
                setattr(recorder, hook, lambda *args, **kwargs: None)
        recorder.install()
        warm()
        recorder.uninstall()
    return recorders


def _turns(recorders: dict, rounds: int) -> Iterator[str]:
    """The arm "capture" and each of ``recorders``' arms in turn, ``rounds`` times, each round starting one arm later
    (each arm first in turn); a recorder's hooks installed while the loop's body runs its arm."""
    arms = ("capture", *recorders)
    for k in range(rounds):
        for which in arms[k % len(arms):] + arms[:k % len(arms)]:
            recorder = recorders.get(which)
            if recorder is not None:
                recorder.install()
            try:
                yield which
            finally:
                if recorder is not None:
                    recorder.uninstall()


def whole_steps(name: str) -> None:
    """Whole training steps, no hook timed: what each arm adds to capture's step (medians of rounds of 20 steps
    of the training thread's CPU time, the arms interleaved, each first in turn)."""
    torch.set_num_threads(int(os.environ.get("FORGEVIZ_BENCH_THREADS", "1")))
    model, opt, x, y, loss_fn, steps, rounds = _steps_model(name, 200)
    with tempfile.TemporaryDirectory() as folder, forgeviz.capture() as session:
        train(model, opt, x, y, 5, loss_fn)
        reader = native.reader()
        inline = () if reader is None or not hasattr(reader, "set_inline_bytes") else ("at once", "beside")

        def arm(arm_name: str, recorder: Recorder) -> None:
            recorder.world = max(recorder.world, int(os.environ.get("FORGEVIZ_BENCH_WORLD", "1")))
            recorder._reuses = arm_name in ("record", "python")
            recorder.native_steps = arm_name not in ("python", "idle")

        recorders = _recorders(session, folder, ("record", "python", "read", *inline, "idle"), arm,
                               lambda: train(model, opt, x, y, 3, loss_fn))
        times: dict[str, list[float]] = {a: [] for a in ("capture", *recorders)}
        for which in _turns(recorders, rounds):
            at_once = (reader.set_inline_bytes(-1 if which == "beside" else 1 << 60)
                       if which in ("beside", "at once") else None)
            spent = time.thread_time()
            train(model, opt, x, y, steps, loss_fn)
            times[which].append(time.thread_time() - spent)
            if at_once is not None:
                reader.set_inline_bytes(at_once)
        for recorder in recorders.values():
            recorder.close()
    base = statistics.median(times["capture"]) / steps
    print(f"{name} (cpu): a step {base * 1e3:.2f} ms of thread time under capture; {rounds} rounds of {steps} steps, "
          "no hook timed; what each arm adds to capture's step:")
    for which, label in (("record", "capture + record"), ("python", "capture + record, hooks in Python"),
                         ("read", "capture + record, read at the step"),
                         ("at once", "capture + record, read at the step, at once"),
                         ("beside", "capture + record, read at the step, beside it"), ("idle", "hooks idle")):
        if which not in times:
            continue
        added = statistics.median(times[which]) / steps - base
        # paired: each round's arm less capture's in the same turn of the arms (a drift slower than a turn cancels)
        paired = statistics.median(a - c for a, c in zip(times[which], times["capture"])) / steps
        print(f"  {label}: {added * 1e6:+.1f} µs a step ({added / base:+.2%}), paired {paired * 1e6:+.1f} µs "
              f"({paired / base:+.2%}); {recorders[which].reused} steps reused")


def writer_cost(name: str) -> None:
    """The writer thread's CPU time per step, by stream, over one run recorded without a break."""
    torch.set_num_threads(int(os.environ.get("FORGEVIZ_BENCH_THREADS", "1")))
    if name == "gpt2":
        from bench_capture import real_model

        model, opt, x, y, loss_fn = real_model("gpt2", "cpu")
        steps = int(os.environ.get("FORGEVIZ_BENCH_STEPS", "12"))
    else:
        model, opt, x, y = mlp(256, 32)
        loss_fn, steps = torch.nn.functional.mse_loss, int(os.environ.get("FORGEVIZ_BENCH_STEPS", "3000"))
    spent: dict[str, list] = {}
    append = RunWriter._append
    disk = float(os.environ.get("FORGEVIZ_BENCH_DISK_MS", "0")) / 1e3
    every = {"segment_seconds": float(os.environ["FORGEVIZ_BENCH_SEGMENT_S"])} if "FORGEVIZ_BENCH_SEGMENT_S" in \
        os.environ else {}

    def timed_append(self, table: str, columns) -> None:
        start = time.thread_time()
        if disk:
            time.sleep(disk)
        append(self, table, columns)
        took = spent.setdefault(table, [0.0, 0])
        took[0] += time.thread_time() - start
        took[1] += 1

    collections: dict[str, dict[int, list]] = {"capture": {}, "record": {}}
    arm, started = ["capture"], [0.0]
    waits: dict[str, list[float]] = {"capture": [], "record": []}  # per step: wall time less thread time

    def waited_steps(count: int) -> None:
        """train()'s loop, each step's wall time less the training thread's CPU time kept: what it waited,
        for the GIL (the writer's thread holding it) or for a core."""
        wall, cpu, kept = time.perf_counter, time.thread_time, waits[arm[0]]
        for _ in range(count):
            w, c = wall(), cpu()
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            kept.append((wall() - w) - (cpu() - c))

    def collected(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            took = collections[arm[0]].setdefault(info["generation"], [0, 0.0])
            took[0] += 1
            took[1] += time.perf_counter() - started[0]

    RunWriter._append = timed_append
    try:
        with tempfile.TemporaryDirectory() as folder:
            with forgeviz.capture():
                train(model, opt, x, y, max(2, steps // 10), loss_fn)
                gc.collect()  # (each arm from a full collection: the first one in a process comes early regardless)
                gc.callbacks.append(collected)
                waited_steps(steps)
                gc.callbacks.remove(collected)
            with forgeviz.record(folder + "/warm-up"):
                train(model, opt, x, y, max(2, steps // 10), loss_fn)
            spent.clear()
            arm[0] = "record"
            gc.collect()
            gc.callbacks.append(collected)
            with forgeviz.record(folder + "/run", **every):
                start = time.thread_time()
                waited_steps(steps)
                step = (time.thread_time() - start) / steps
            gc.callbacks.remove(collected)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (what was dropped: printed below)
                run = forgeviz.open(folder + "/run")
            rows = len(run.frame())
            if disk or every:
                meta = run.meta(run.ranks[0])
                print(f"a disk {disk * 1e3:g} ms slower a segment, segments every {every.get('segment_seconds', 2)} s: "
                      f"{len(run.steps)} of {steps} steps have their row, {len(run.gradient_steps(run.ranks[0]))} "
                      f"their gradients; thinned {meta.get('writer_thinned')}, dropped {meta.get('dropped_segments')} "
                      f"segment(s) {meta.get('dropped_steps', '')}")
    finally:
        RunWriter._append = append
        if collected in gc.callbacks:
            gc.callbacks.remove(collected)
    total = sum(t for t, _ in spent.values())
    print(f"{name} (cpu): {steps} steps recorded, {step * 1e3:.2f} ms of training-thread time a step; the writer "
          f"thread's CPU {total / steps * 1e6:.1f} µs a step ({total / steps / step:.1%} of a step), "
          + ", ".join(f"{table} {t / steps * 1e6:.1f} µs ({n} segments)" for table, (t, n) in spent.items())
          + f"; {rows / steps:.1f} gradient rows a step")
    for which, by_generation in collections.items():
        paused = sum(t for _, t in by_generation.values())
        print(f"  garbage collections under {which}: "
              + (", ".join(f"generation {g} {n}× {t * 1e3:.0f} ms" for g, (n, t) in sorted(by_generation.items()))
                 or "none")
              + f"; {paused / steps * 1e6:.1f} µs a step")
    for which, waited in waits.items():
        long = sorted(w for w in waited if w > 1e-3)
        print(f"  the training thread's wait under {which} (wall less thread time): {sum(waited) / steps * 1e6:.1f} µs "
              f"a step; {len(long)} steps waited over 1 ms"
              + (f", the longest {long[-1] * 1e3:.2f} ms, median of those {statistics.median(long) * 1e3:.2f} ms"
                 if long else ""))


def ddp_steps(name: str) -> None:
    """Real ranks: two processes (``torch.multiprocessing.spawn``, gloo on loopback, a torch thread each) train
    ``name`` under DistributedDataParallel, each rank on its own batch; rounds of steps, the arms interleaved
    in the same order on both ranks (DDP keeps them in step): capture, capture + record (the step hooks' common case
    in C++), the same with the hooks in Python, and hooks idle. Each rank prints what each arm adds to capture's
    step in wall time (what DDP's all-reduce makes every rank wait for: the slower rank's) and the training thread's
    CPU time, medians of each round's difference from capture's in the same turn (paired)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(_ddp_rank, args=(name, port), nprocs=2)


def _ddp_rank(rank: int, name: str, port: int) -> None:
    """:func:`ddp_steps`' rank ``rank``."""
    import datetime

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=120))
    torch.set_num_threads(1)
    torch.manual_seed(0)  # the same weights on both ranks; each its own batch
    model, _, x, y, loss_fn, steps, rounds = _steps_model(name, 100)
    torch.manual_seed(1 + rank)
    x = torch.randn_like(x) if x.is_floating_point() else x
    model = DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters())
    with tempfile.TemporaryDirectory() as folder, forgeviz.capture() as session:
        train(model, opt, x, y, 5, loss_fn)
        recorders = _recorders(session, folder, ("record", "python", "idle"),
                               lambda arm_name, recorder: setattr(recorder, "native_steps", arm_name == "record"),
                               lambda: train(model, opt, x, y, 3, loss_fn))
        wall: dict[str, list[float]] = {a: [] for a in ("capture", *recorders)}
        cpu: dict[str, list[float]] = {a: [] for a in ("capture", *recorders)}
        for which in _turns(recorders, rounds):
            dist.barrier()  # (both ranks start the round together)
            started, spent = time.perf_counter(), time.thread_time()
            train(model, opt, x, y, steps, loss_fn)
            wall[which].append(time.perf_counter() - started)
            cpu[which].append(time.thread_time() - spent)
        world = recorders["record"].world
        for recorder in recorders.values():
            recorder.close()
    base, base_cpu = statistics.median(wall["capture"]) / steps, statistics.median(cpu["capture"]) / steps
    lines = [f"{name}, DDP rank {rank} of {world} (gloo, one torch thread): a step {base * 1e3:.2f} ms wall, "
             f"{base_cpu * 1e3:.2f} ms of its thread's CPU, under capture; {rounds} rounds of {steps} steps, paired:"]
    for which, label in (("record", "capture + record"), ("python", "capture + record, hooks in Python"),
                         ("idle", "hooks idle")):
        added = statistics.median(a - c for a, c in zip(wall[which], wall["capture"])) / steps
        added_cpu = statistics.median(a - c for a, c in zip(cpu[which], cpu["capture"])) / steps
        lines.append(f"  {label}: wall {added * 1e6:+.1f} µs a step ({added / base:+.2%}), its CPU "
                     f"{added_cpu * 1e6:+.1f} µs ({added_cpu / base_cpu:+.2%})")
    for r in range(2):  # (rank 0's lines first)
        dist.barrier()
        if r == rank:
            print("\n".join(lines), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1:2] == ["ddp"]:
        for which in sys.argv[2:] or ["mlp"]:
            ddp_steps(which)
        sys.exit()
    if sys.argv[1:2] == ["writer"]:
        for which in sys.argv[2:] or ["mlp"]:
            writer_cost(which)
        sys.exit()
    if sys.argv[1:2] == ["steps"]:
        for which in sys.argv[2:] or ["mlp"]:
            whole_steps(which)
        sys.exit()
    wanted = [a for a in sys.argv[1:] if a != "cuda"] or ["mlp", "gpt2"]
    for which in wanted:
        case(which, "cuda" if "cuda" in sys.argv[1:] else "cpu")
