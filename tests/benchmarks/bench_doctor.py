"""What the doctor (forgeviz/_capture/doctor/) costs a training loop on top of forgeviz's capture.

Arms, interleaved round by round (the order rotating) in one process per model, timed in CPU time of
the one thread torch runs on, and reported as ratios:

  off                 plain torch
  capture             the cell under ``%load_ext forgeviz``: the TorchFunctionMode, module paths and
                      gradient records (as bench_capture.py's default arm)
  capture + doctor    ...and the doctor, as while a side panel is open: its optimizer step hooks, module
                      forward hook, per-op in-place check, backward checks, and its checks after the cell

The loop is the five-step one (zero_grad, forward, loss, backward, step) with ``losses.append(loss.item())``,
10 steps a cell. Models: the benchmark MLP (``_bench.mlp``) and the small residual CNN of the tests
(``scenarios.make_cnn``, batch 16 of 3×32×32).

Run: ``.venv/bin/python tests/benchmarks/bench_doctor.py`` (``bench_doctor.py mlp 256 32`` or
``bench_doctor.py cnn 16`` for one). Not a test: timings are noisy, so nothing here asserts.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from _bench import mlp  # first: it puts this checkout on sys.path

from forgeviz._capture.doctor import disable_doctor, enable_doctor
from forgeviz._capture.session import get_session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the scenarios the tests share
from scenarios import make_cnn  # noqa: E402 - after the path it needs

ROUNDS = int(os.environ.get("FORGEVIZ_BENCH_ROUNDS", "60"))
STEPS = 10


def rotated(variants: dict[str, Callable[[], None]], rounds: int) -> dict[str, list[float]]:
    """CPU seconds of this thread for each run of each variant, the order rotating every round: on a
    shared machine, wall time carries other processes' load and whichever arm runs first pays for
    the previous one's garbage (torch runs on this one thread: ``torch.set_num_threads(1)``)."""
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            start = time.thread_time()
            variants[name]()
            times[name].append(time.thread_time() - start)
    return times


def low(samples: list[float]) -> float:
    """The 10th percentile: a run with little interference from outside."""
    return sorted(samples)[len(samples) // 10]


def cell_loop(model, opt, x, y, loss_fn, namespace: dict) -> None:
    """A cell's training loop: the five steps, the loss logged as a float."""
    losses = namespace["losses"]
    for _ in range(STEPS):
        opt.zero_grad()
        out = model(x)
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    namespace["loss"], namespace["out"] = loss, out


def case(kind: str, *sizes: int) -> dict[str, float]:
    if kind == "mlp":
        width, batch = sizes
        model, opt, x, y = mlp(width, batch)
        loss_fn = torch.nn.functional.mse_loss
    else:
        (batch,) = sizes
        model = make_cnn(seed=0)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        torch.manual_seed(1)
        x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
        loss_fn = torch.nn.functional.cross_entropy
    namespace = {"model": model, "opt": opt, "x": x, "y": y, "losses": []}
    session = get_session()

    def off():
        cell_loop(model, opt, x, y, loss_fn, namespace)

    def cell(doctor: bool):
        def run():
            session.install()
            if doctor:
                enable_doctor(session).begin_cell(1)
            session.enter()
            cell_loop(model, opt, x, y, loss_fn, namespace)
            session.exit()
            if doctor:
                session.doctor.end_cell(namespace, None, 1)
                disable_doctor(session)
            session.uninstall()
            del namespace["losses"][:]
        return run

    off()  # warm up
    cell(True)()
    times = rotated({"off": off, "capture": cell(False), "capture + doctor": cell(True)}, ROUNDS)
    median = {name: statistics.median(t) for name, t in times.items()}
    p10 = {name: low(t) for name, t in times.items()}
    return {"off_ms_per_step": median["off"] / STEPS * 1e3,
            "capture_ms_per_step": median["capture"] / STEPS * 1e3,
            "capture": median["capture"] / median["off"],
            "doctor_over_capture": median["capture + doctor"] / median["capture"],
            "doctor_over_capture_p10": p10["capture + doctor"] / p10["capture"],
            "doctor_us_per_step": (median["capture + doctor"] - median["capture"]) / STEPS * 1e6}


if __name__ == "__main__":
    torch.set_num_threads(1)
    if len(sys.argv) == 1:
        for args in (["mlp", "256", "32"], ["mlp", "1024", "256"], ["cnn", "16"]):  # each in a fresh process
            subprocess.run([sys.executable, __file__, *args], check=True)
    else:
        kind, sizes = sys.argv[1], [int(a) for a in sys.argv[2:]]
        r = case(kind, *sizes)
        name = f"MLP {sizes[0]} wide, batch {sizes[1]}" if kind == "mlp" else f"CNN, batch {sizes[0]} of 3x32x32"
        print(f"{name}: off {r['off_ms_per_step']:.2f} ms/step, capture {r['capture_ms_per_step']:.2f} ms/step "
              f"({r['capture']:.2f}x off); capture + doctor / capture = {r['doctor_over_capture']:.3f}x median, "
              f"{r['doctor_over_capture_p10']:.3f}x 10th percentile ({r['doctor_us_per_step']:+.0f} us/step)")
