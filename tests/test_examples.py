"""The example notebooks run top to bottom and show the numbers they promise."""

from __future__ import annotations

import nbformat
import pytest
import torch

from scenarios import ROOT, reset_shell


@pytest.fixture
def shell(ipython):
    yield ipython
    reset_shell(ipython)


def run_notebook(shell, name: str) -> None:
    nb = nbformat.read(ROOT / "examples" / name, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            result = shell.run_cell(cell.source, store_history=True)
            assert result.success, f"{name}: cell failed\n{cell.source}\n{result.error_in_exec!r}"


def test_autograd_example_tells_s1_and_s2_truthfully(shell):
    run_notebook(shell, "01_autograd.ipynb")
    ns = shell.user_ns
    assert ns["x"].grad.tolist() == [64.0] and ns["y"].grad.tolist() == [32.0]
    assert ns["a"].grad.tolist() == [4.0]  # after zero_grad and one more backward
    graph = ns["forgeviz"].graph(ns["loss"]).model
    labels = {n.label: n for n in graph.nodes}
    assert labels["x"].grad_brief == "64" and labels["y"].grad_brief == "32"
    assert {"x", "y", "z", "w", "loss"} == set(labels)
