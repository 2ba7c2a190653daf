"""Shared fixtures: a real IPython shell running real cells, with forgeviz loaded."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def ipython():
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance()


class Notebook:
    """Runs cells in the shell like a notebook does (pre/post_run_cell fire, counts advance)."""

    def __init__(self, shell) -> None:
        self.shell = shell

    def run(self, code: str):
        result = self.shell.run_cell(code, store_history=True)
        return result

    def ok(self, code: str):
        result = self.run(code)
        if result.error_before_exec or result.error_in_exec:
            raise AssertionError(f"cell failed: {result.error_before_exec or result.error_in_exec!r}\n{code}")
        return result.result

    def __getitem__(self, name: str):
        return self.shell.user_ns[name]


@pytest.fixture
def nb(ipython):
    """A notebook with ``%load_ext forgeviz`` run and torch imported; unloaded afterwards."""
    notebook = Notebook(ipython)
    notebook.ok("%load_ext forgeviz")
    notebook.ok("import torch, forgeviz")
    yield notebook
    notebook.run("%unload_ext forgeviz")
    for name in [k for k in ipython.user_ns if not k.startswith("_") and k not in ("In", "Out", "exit", "quit", "get_ipython")]:
        del ipython.user_ns[name]
    gc.collect()


@pytest.fixture
def plain_nb(ipython):
    """A notebook without forgeviz, for side-by-side comparisons."""
    notebook = Notebook(ipython)
    notebook.ok("import torch")
    return notebook


S1 = """\
x = torch.tensor([2.], requires_grad=True)
y = torch.tensor([3.], requires_grad=True)
z = x * y
w = z + x
loss = w ** 2
"""


def by_label(graph, label: str):
    matches = [n for n in graph.nodes if n.label == label]
    assert len(matches) == 1, f"expected one node labelled {label!r}, got {[n.label for n in graph.nodes]}"
    return matches[0]


def make_cnn(seed: int = 0) -> torch.nn.Module:
    """A small residual CNN written by hand (no torchvision on CPU)."""
    torch.manual_seed(seed)

    class Block(torch.nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn1 = torch.nn.BatchNorm2d(c)
            self.conv2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn2 = torch.nn.BatchNorm2d(c)

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(out)) + x)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.layer1 = torch.nn.Sequential(Block(8), Block(8))
            self.head = torch.nn.Linear(8, 10)

        def forward(self, x):
            x = self.layer1(torch.relu(self.stem(x)))
            return self.head(x.mean(dim=(2, 3)))

    return Net()
