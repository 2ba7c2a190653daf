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
import subprocess
import sys

import torch

from _bench import interleaved, mlp, train  # noqa: I001 - first: it puts this checkout on sys.path
from forgeviz.capture import native, summary
from forgeviz.capture.session import get_session

ROUNDS = int(os.environ.get("FORGEVIZ_BENCH_ROUNDS", "15"))
STEPS = 10


def case(width: int, batch: int) -> dict[str, float]:
    model, opt, x, y = mlp(width, batch)

    def loop():
        train(model, opt, x, y, STEPS)

    loop()  # warm up
    native.load()
    session = get_session()
    one_pass = summary._summarize_natively

    def cell(record_grads: bool, native_summaries: bool = True):
        def run():
            summary._summarize_natively = one_pass if native_summaries else (lambda t, histogram: None)
            session.install()
            session.record_grads = record_grads
            session.enter()
            loop()
            session.exit()
            session.uninstall()
            session.record_grads = True
            summary._summarize_natively = one_pass
        return run

    medians = interleaved({"off": loop, "capture, no summaries": cell(False),
                           "capture, torch summaries": cell(True, native_summaries=False),
                           "capture, native summaries": cell(True)}, ROUNDS)
    base = medians["off"]
    return {name: t / base for name, t in medians.items()} | {"off_ms_per_step": base / STEPS * 1e3}


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
