"""Graphs of real models, the kernel's side: what ``forgeviz.graph`` costs and sends, and what capture
costs a training step. The browser's side (first folded view, expand, pan) is measured in real
JupyterLab by ``bench_graph_browser.py``.

  graph()            forgeviz.graph(loss) on the GPT-2-small shape (12 blocks, d=768, seq 32), a
                     36-block model and a 10,000-op chain: median ms
  bytes              the first display's traits (graph + state) and the refresh after backward (state)
  training step      forward + backward + Adam step, interleaved off / capture (with gradient
                     summaries), as ratios: GPT-2-small shape (seq 64, batch 2), the ResNet-18-like
                     CNN of bench_graph.py, the 256-wide MLP

Run: ``.venv/bin/python tests/benchmarks/bench_graph_scale.py``. Not a test: nothing here asserts.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from _bench import interleaved, mlp, train  # first: it puts this checkout on sys.path

import forgeviz
from forgeviz._capture.session import get_session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_graph import ResNet18Like  # noqa: E402

from scenarios import make_gpt2  # noqa: E402

ROUNDS = int(os.environ.get("FORGEVIZ_BENCH_ROUNDS", "9"))


def median_ms(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def graph_figures() -> None:
    session = get_session()
    session.install()
    model = make_gpt2()
    idx = torch.randint(0, 1024, (1, 32))
    with session.recording():
        loss = torch.nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten())
    widget = forgeviz.graph(loss, namespace={"model": model, "loss": loss})
    first = len(json.dumps(widget.graph)) + len(json.dumps(widget.state))
    sent = {"graph": widget.graph}
    print(f"GPT-2-small shape, seq 32: {len(widget.model.nodes)} Nodes, {len(widget.model.modules)} modules, "
          f"{len(widget.model.repeats)} stack(s) of {[len(r.members) for r in widget.model.repeats]}")
    print(f"  forgeviz.graph(loss)            {median_ms(lambda: forgeviz.graph(loss, namespace={})):8.1f} ms")
    with session.recording():
        loss.backward()
    widget.refresh()
    print(f"  bytes, first display            {first:8,d}")
    print(f"  bytes, refresh after backward   {len(json.dumps(widget.state)):8,d}"
          f"  (graph re-sent: {widget.graph is not sent['graph']})")
    print(f"  refresh after backward          {median_ms(widget.refresh):8.1f} ms")
    deep = make_gpt2(n_layer=36, d=256, n_head=8)
    with session.recording():
        deep_loss = deep(idx).square().mean()
    print(f"  36 blocks (d=256): graph()      {median_ms(lambda: forgeviz.graph(deep_loss, namespace={})):8.1f} ms")
    with session.recording():
        h = torch.ones(3, requires_grad=True)
        for _ in range(10_000):
            h = h * 1.0001
    print(f"  10,000-op chain: graph()        {median_ms(lambda: forgeviz.graph(h, namespace={}), 3):8.1f} ms")


def step_overheads() -> None:
    session = get_session()

    def gpt2_case():
        model = make_gpt2()
        opt = torch.optim.Adam(model.parameters())
        idx = torch.randint(0, 1024, (2, 64))

        def step():
            loss = torch.nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
        return step

    def resnet_case():
        model = ResNet18Like()
        opt = torch.optim.Adam(model.parameters())
        x, y = torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))

        def step():
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return step

    def mlp_case():
        model, opt, x, y = mlp(256, 32)
        return lambda: train(model, opt, x, y, 10)

    print(f"training step, {ROUNDS} interleaved rounds, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"  {'model':<34}{'off ms':>9}{'capture ms':>12}{'ratio':>8}")
    cases = (("GPT-2-small shape, seq 64, batch 2", gpt2_case), ("ResNet-18-like, batch 8, 64x64", resnet_case),
             ("MLP 256 wide, 10 steps", mlp_case))
    for name, make in cases:
        step = make()

        def captured(step=step):
            with session.recording(record_grads=True):
                step()
        step()
        captured()
        times = interleaved({"off": step, "capture": captured}, ROUNDS)
        print(f"  {name:<34}{times['off'] * 1000:>9.1f}{times['capture'] * 1000:>12.1f}"
              f"{times['capture'] / times['off']:>8.3f}")


if __name__ == "__main__":
    graph_figures()
    step_overheads()
