"""What graph capture costs a training loop: the cell of a notebook under ``%load_ext forgeviz``.

Arms, interleaved round by round in one process per MLP and reported as ratios to "off":

  off                        plain torch
  capture, no summaries      the TorchFunctionMode that tags ops, module paths (no gradient records)
  capture, torch summaries   ...plus every Node's gradients summarised with torch ops
  capture, native summaries  ...summarised in one pass by forgeviz's native library (the default)

Run: ``.venv/bin/python tests/benchmarks/bench_capture.py`` (or ``bench_capture.py 256 32`` for one
MLP). Not a test: timings are noisy, so nothing here asserts.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import torch

import _tree  # noqa: F401,I001 - this checkout's forgeviz, not an installed copy
from forgeviz.capture import native, summary
from forgeviz.capture.session import get_session

ROUNDS = int(os.environ.get("FORGEVIZ_BENCH_ROUNDS", "15"))
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
    native.load()
    session = get_session()
    one_pass = summary._summarize_natively

    def cell(record_grads: bool, native_summaries: bool = True):
        def run():
            summary._summarize_natively = one_pass if native_summaries else (lambda t, histogram: None)
            session.install()
            session.record_grads = record_grads
            session.enter()
            loop(model, opt, x, y)
            session.exit()
            session.uninstall()
            session.record_grads = True
            summary._summarize_natively = one_pass
        return run

    variants = {"off": lambda: loop(model, opt, x, y), "capture, no summaries": cell(False),
                "capture, torch summaries": cell(True, native_summaries=False),
                "capture, native summaries": cell(True)}
    times = {name: [] for name in variants}
    for _ in range(ROUNDS):
        for name, fn in variants.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["off"])
    return {name: statistics.median(t) / base for name, t in times.items()} | {"off_ms_per_step": base / STEPS * 1e3}


if __name__ == "__main__":
    torch.set_num_threads(2)
    if len(sys.argv) == 1:
        for width, batch in [(1024, 256), (256, 32)]:  # each in a fresh process
            subprocess.run([sys.executable, __file__, str(width), str(batch)], check=True)
    else:
        width, batch = int(sys.argv[1]), int(sys.argv[2])
        result = case(width, batch)
        print(f"MLP {width} wide, batch {batch}: off {result.pop('off_ms_per_step'):.2f} ms/step; "
              + ", ".join(f"{k} {v:.2f}x" for k, v in result.items()))
