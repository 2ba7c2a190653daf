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


def test_views_example_tells_v1_to_v5_truthfully(shell):
    run_notebook(shell, "02_views_and_strides.ipynb")
    ns = shell.user_ns
    t, live = ns["t"], ns["live"]
    # V3: the write went through every view and the live drawing followed; the clone kept 0..3
    assert t[0].tolist() == [99] * 4 and ns["c"][0].tolist() == [0, 1, 2, 3]
    model = live.model
    assert model.tensors[2].window.values[0::3][:4] == ["99"] * 4  # t.T's first column
    assert model.tensors[3].window.values[:4] == ["0", "1", "2", "3"] and model.tensors[3].strip == 1
    # V4: from_numpy saw the write to a, torch.tensor did not
    assert ns["shared"][0, 0].item() == 42.0 and ns["copied"][0, 0].item() == 0.0
    # V5: the permuted reshape copies; the wrong view mixes channels
    p, right, wrong, x = ns["p"], ns["right"], ns["wrong"], ns["x"]
    assert p.stride() == (12, 2, 1, 4)
    assert right.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert wrong.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert right.mean(0).tolist() != wrong.mean(0).tolist()
    assert right[0].tolist() == x[0, :, 0, 0].tolist()
