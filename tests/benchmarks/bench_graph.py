"""Overhead of forgeviz's autograd capture on a ResNet-18-like CNN, forward + backward, CPU.

Runs the variants interleaved (round-robin, shuffled each round) and reports medians and ratios
to the plain run, side by side in one process:

  off                 plain torch
  capture             forgeviz.capture(): op tags, module paths, gradient summaries on every Node
  capture+graph       ...plus building the graph model and its DOT (graphviz.Digraph) every step
  torchviz            torchviz.make_dot on every step (its DOT only; no rendering)

Usage: python tests/benchmarks/bench_graph.py [--rounds 15] [--batch 8] [--size 64]
Not a test: timings are noisy, so nothing here asserts.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch
from torch import nn

import _bench  # noqa: F401 - imported first for its effect: it puts this checkout on sys.path

import forgeviz
from forgeviz._capture.session import get_session
from forgeviz._capture.walk import build_graph
from forgeviz.api import names
from forgeviz.export import to_dot


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet18Like(nn.Module):
    """ResNet-18's layout ([2, 2, 2, 2] basic blocks, 64→512 channels), written by hand."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.layer4(self.layer3(self.layer2(self.layer1(self.stem(x)))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=64)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = ResNet18Like()
    inputs = torch.randn(args.batch, 3, args.size, args.size)
    target = torch.randint(0, 10, (args.batch,))
    try:
        from torchviz import make_dot
    except ImportError:
        make_dot = None

    def step(extra=None):
        model.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(inputs), target)
        if extra is not None:
            extra(loss)
        loss.backward()

    def off():
        step()

    def capture():
        with forgeviz.capture():
            step()

    def capture_graph():
        with forgeviz.capture():
            step(lambda loss: to_dot(build_graph([loss.grad_fn], get_session(), names()).graph))

    variants = {"off": off, "capture": capture, "capture+graph": capture_graph}
    if make_dot is not None:
        variants["torchviz"] = lambda: step(lambda loss: make_dot(loss, dict(model.named_parameters())).source)
    for fn in variants.values():  # warm up every path
        fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    order = list(variants)
    for _ in range(args.rounds):
        random.shuffle(order)
        for name in order:
            start = time.perf_counter()
            variants[name]()
            times[name].append(time.perf_counter() - start)

    with forgeviz.capture():
        loss = nn.functional.cross_entropy(model(inputs), target)
        graph = build_graph([loss.grad_fn], get_session(), names()).graph
    base = statistics.median(times["off"])
    print(f"ResNet-18-like, batch {args.batch}, {args.size}x{args.size}, {args.rounds} interleaved rounds, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads; graph: {len(graph.nodes)} nodes, "
          f"{len(graph.edges)} edges, {len(graph.modules)} modules")
    print(f"{'variant':<15}{'median ms':>11}{'ratio':>8}")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"{name:<15}{median * 1000:>11.1f}{median / base:>8.3f}")


if __name__ == "__main__":
    main()
