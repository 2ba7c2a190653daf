"""What recording (``forgeviz.record``) costs on top of capture (``forgeviz.capture``), and the bytes it
writes per step: arms interleaved round by round in one process (their order alternating), reported as
ratios of medians, of the training thread's CPU time (``time.thread_time``: what a shared machine's
other loads disturb least) and of wall time.

  capture            a training loop inside forgeviz.capture() (gradient summaries each step)
  capture + record   the same with a Recorder's hooks installed, writing to a temporary folder (the
                     writer and reader threads stay up across rounds, as in a real run)

It also prints the training thread's CPU time inside the recorder's own hooks per step (each hook timed
with thread_time): the part of the ratio that is recording's own, not the noise between arms.

Models: the benchmark MLP-256 at batch 32 and the GPT-2-shaped CPU model of bench_capture.py.
Run: ``.venv/bin/python tests/benchmarks/bench_record.py [mlp|gpt2]``. Not a test: nothing asserts.
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from _bench import mlp, train  # first: it puts this checkout on sys.path

import forgeviz
from forgeviz._capture.recording import Recorder

ROUNDS = int(os.environ.get("FORGEVIZ_BENCH_ROUNDS", "30"))
HOOKS = ("_step_begins", "_step_ends", "_before_backward", "_after_backward")


def timed_hooks(recorder: Recorder, spent: list[float]) -> None:
    """Wrap the recorder's hooks (on the instance) so that their thread time adds up in ``spent[0]``."""
    for name in HOOKS:
        hook = getattr(recorder, name)

        @functools.wraps(hook)
        def timed(*args, _hook=hook, **kwargs):
            start = time.thread_time()
            try:
                return _hook(*args, **kwargs)
            finally:
                spent[0] += time.thread_time() - start

        setattr(recorder, name, timed)


def case(name: str) -> None:
    torch.set_num_threads(1)  # one training thread: thread_time is then the step's CPU time
    if name == "gpt2":
        from bench_capture import real_model

        model, opt, x, y, loss_fn = real_model("gpt2", "cpu")
        steps, rounds = 2, max(3, ROUNDS // 5)
    else:
        model, opt, x, y = mlp(256, 32)
        loss_fn, steps, rounds = torch.nn.functional.mse_loss, 20, ROUNDS

    with tempfile.TemporaryDirectory() as folder, forgeviz.capture() as session:
        train(model, opt, x, y, 2, loss_fn)  # warm up
        recorder = Recorder(session, Path(folder) / "run")
        spent = [0.0]
        timed_hooks(recorder, spent)
        recorder.install()
        train(model, opt, x, y, 2, loss_fn)  # its first graph is built and written here, once
        recorder.uninstall()
        first, spent[0] = recorder.step, 0.0

        def arm(recording: bool) -> tuple[float, float]:
            if recording:
                recorder.install()
            thread, wall = time.thread_time(), time.perf_counter()
            train(model, opt, x, y, steps, loss_fn)
            thread, wall = time.thread_time() - thread, time.perf_counter() - wall
            if recording:
                recorder.uninstall()
            return thread, wall

        times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for k in range(rounds):
            for recording in (False, True) if k % 2 else (True, False):
                times[recording].append(arm(recording))
        hooks = spent[0] / (recorder.step - first)
        recorder.close()
        recorded_steps = recorder.step - 1
        written = recorder.writer.bytes

    def median(recording: bool, which: int) -> float:
        return statistics.median(t[which] for t in times[recording])

    base = median(False, 0) / steps
    print(f"{name}: a step {base * 1e3:.2f} ms of thread time under capture ({median(False, 1) / steps * 1e3:.2f} "
          f"ms wall); capture + record {median(True, 0) / median(False, 0):.3f}× thread, "
          f"{median(True, 1) / median(False, 1):.3f}× wall ({rounds} rounds of {steps} steps, medians); the "
          f"recorder's hooks {hooks * 1e6:.1f} µs a step on the training thread ({hooks / base:.1%} of a step); "
          f"{written / max(recorded_steps, 1) / 1024:.2f} KiB written per step ({recorded_steps} steps, "
          f"{recorder.writer.segments} segments)")


if __name__ == "__main__":
    for which in sys.argv[1:] or ["mlp", "gpt2"]:
        case(which)
