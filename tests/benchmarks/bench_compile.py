"""What forgeviz costs a compiled training step (scenario T1), and what it does to Dynamo's work.

For each model (the benchmark MLP, and a GPT-2-shaped stack of attention blocks) and backend, one
compiled module trains under two arms, interleaved round by round:

  off          plain torch.compile
  on           the same, inside forgeviz's capture session as ``%load_ext forgeviz`` runs a cell:
               op tagging, module paths and every Node's gradients summarised
  on, no summaries   the same without gradient summaries (what issue 27's device summaries replace)

and Dynamo's own counters (graphs, graph breaks, recompiles) are read for a fresh compile with forgeviz
off and on. The target is a ratio of at most 1.05 and the same counters.

Run: ``.venv/bin/python tests/benchmarks/bench_compile.py [cpu|cuda] [inductor|aot_eager]``. Not a test:
timings are noisy, so nothing here asserts.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from torch._dynamo.utils import counters

from _bench import interleaved, mlp, run_as_a_cell  # first: it puts this checkout on sys.path

from forgeviz._capture.session import get_session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for its scenarios
from scenarios import make_blocks  # noqa: E402

ROUNDS = int(os.environ.get("FORGEVIZ_BENCH_ROUNDS", "15"))
STEPS = 10


def model(name: str, device: str):
    """(model, opt, x, y) for "mlp" (3 × Linear(256), batch 32) or "gpt" (4 blocks, d=256, seq 128, batch 8)."""
    if name == "mlp":
        return mlp(256, 32, device)
    net = make_blocks(n_layer=4, d=256, n_head=8).to(device)
    x = torch.randn(8, 128, 256, device=device)
    return net, torch.optim.AdamW(net.parameters()), x, torch.randn_like(x)


def dynamo_counts(name: str, device: str, backend: str, on: bool) -> dict:
    """Dynamo's counters for one fresh compile and two steps, forgeviz off or on."""
    torch._dynamo.reset()
    counters.clear()
    net, opt, x, y = model(name, device)
    compiled = torch.compile(net, backend=backend)

    def steps():
        for _ in range(2):
            torch.nn.functional.mse_loss(compiled(x), y).backward()

    run_as_a_cell(get_session(), steps) if on else steps()
    return {"graphs": counters["stats"]["unique_graphs"], "breaks": sum(counters["graph_break"].values()),
            "recompiles": sum(counters["recompiles"].values())}


def case(name: str, device: str, backend: str) -> dict:
    counts = {arm: dynamo_counts(name, device, backend, arm == "on") for arm in ("off", "on")}
    torch._dynamo.reset()
    net, opt, x, y = model(name, device)
    compiled = torch.compile(net, backend=backend)
    session = get_session()

    def loop():
        for _ in range(STEPS):
            loss = torch.nn.functional.mse_loss(compiled(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if device != "cpu":
            torch.cuda.synchronize()

    def cell(record_grads: bool):
        return lambda: run_as_a_cell(session, loop, record_grads)

    loop()
    cell(True)()  # every arm compiled and warm before timing
    medians = interleaved({"off": loop, "on": cell(True), "on, no summaries": cell(False)}, ROUNDS)
    return {"ratio": medians["on"] / medians["off"], "bare": medians["on, no summaries"] / medians["off"],
            "off_ms": medians["off"] / STEPS * 1e3, "counts": counts}


if __name__ == "__main__":
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    backends = sys.argv[2:] or ["inductor", "aot_eager"]
    if device == "cpu":
        torch.set_num_threads(2)
    where = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    for backend in backends:
        for name in ("mlp", "gpt"):
            r = case(name, device, backend)
            print(f"{name}, {backend}, {device} ({where}, torch {torch.__version__}): off {r['off_ms']:.2f} ms/step;"
                  f" on/off {r['ratio']:.3f}x (without gradient summaries {r['bare']:.3f}x);"
                  f" Dynamo off {r['counts']['off']}, on {r['counts']['on']}", flush=True)
