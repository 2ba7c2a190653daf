"""What recording (``forgeviz.record``) costs on top of capture (``forgeviz.capture``), and the bytes it
writes per step: arms interleaved round by round in one process, reported as ratios.

  capture            a training loop inside forgeviz.capture() (gradient summaries each step)
  capture + record   the same with a Recorder's hooks installed, writing to a temporary folder (the
                     writer thread stays up across rounds, as in a real run)

Models: the benchmark MLP-256 at batch 32 and the GPT-2-shaped CPU model of bench_capture.py.
Run: ``.venv/bin/python tests/benchmarks/bench_record.py [mlp|gpt2]``. Not a test: nothing asserts.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch

from _bench import interleaved, mlp, train  # first: it puts this checkout on sys.path

import forgeviz
from forgeviz._capture.recording import Recorder

ROUNDS = int(os.environ.get("FORGEVIZ_BENCH_ROUNDS", "15"))


def case(name: str) -> None:
    if name == "gpt2":
        from bench_capture import real_model

        model, opt, x, y, loss_fn = real_model("gpt2", "cpu")
        steps, rounds = 2, max(3, ROUNDS // 3)
    else:
        model, opt, x, y = mlp(256, 32)
        loss_fn, steps, rounds = torch.nn.functional.mse_loss, 20, ROUNDS

    def loop():
        train(model, opt, x, y, steps, loss_fn)

    with tempfile.TemporaryDirectory() as folder, forgeviz.capture() as session:
        loop()  # warm up
        recorder = Recorder(session, Path(folder) / "run")

        def recorded():
            recorder.install()
            try:
                loop()
            finally:
                recorder.uninstall()

        times = interleaved({"capture": loop, "capture + record": recorded}, rounds)
        recorder.close()
        recorded_steps = recorder.step - 1
        written = recorder.writer.bytes
    base = times["capture"]
    print(f"{name}: a step {base / steps * 1e3:.2f} ms under capture; capture + record "
          f"{times['capture + record'] / base:.3f}× ({rounds} rounds of {steps} steps, medians); "
          f"{written / max(recorded_steps, 1) / 1024:.1f} KiB written per step ({recorded_steps} steps, "
          f"{recorder.writer.segments} segments)")


if __name__ == "__main__":
    for which in sys.argv[1:] or ["mlp", "gpt2"]:
        case(which)
