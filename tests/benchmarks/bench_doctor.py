"""What the doctor (forgeviz/_capture/doctor.py) costs a training loop on top of forgeviz's capture.

Arms, interleaved round by round in one process per model and reported as ratios:

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
import subprocess
import sys
from pathlib import Path

import torch

from _bench import interleaved, mlp  # first: it puts this checkout on sys.path

from forgeviz._capture.doctor import disable_doctor, enable_doctor
from forgeviz._capture.session import get_session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the scenarios the tests share
from scenarios import make_cnn  # noqa: E402 - after the path it needs

ROUNDS = int(os.environ.get("FORGEVIZ_BENCH_ROUNDS", "21"))
STEPS = 10


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
    medians = interleaved({"off": off, "capture": cell(False), "capture + doctor": cell(True)}, ROUNDS)
    return {"off_ms_per_step": medians["off"] / STEPS * 1e3,
            "capture_ms_per_step": medians["capture"] / STEPS * 1e3,
            "capture": medians["capture"] / medians["off"],
            "doctor_over_capture": medians["capture + doctor"] / medians["capture"]}


if __name__ == "__main__":
    torch.set_num_threads(2)
    if len(sys.argv) == 1:
        for args in (["mlp", "256", "32"], ["mlp", "1024", "256"], ["cnn", "16"]):  # each in a fresh process
            subprocess.run([sys.executable, __file__, *args], check=True)
    else:
        kind, sizes = sys.argv[1], [int(a) for a in sys.argv[2:]]
        r = case(kind, *sizes)
        name = f"MLP {sizes[0]} wide, batch {sizes[1]}" if kind == "mlp" else f"CNN, batch {sizes[0]} of 3x32x32"
        print(f"{name}: off {r['off_ms_per_step']:.2f} ms/step, capture {r['capture_ms_per_step']:.2f} ms/step "
              f"({r['capture']:.2f}x off); capture + doctor / capture = {r['doctor_over_capture']:.3f}x")
