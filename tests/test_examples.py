"""The example notebooks run top to bottom and show the numbers they promise."""

from __future__ import annotations

import gc

import nbformat
import pytest
import torch

from forgeviz.model.memory import ACTIVATION

from scenarios import ROOT, reset_shell


@pytest.fixture
def shell(ipython):
    from forgeviz._capture.session import get_session

    faults = len(get_session().faults)
    yield ipython
    new = get_session().faults[faults:]
    reset_shell(ipython)
    assert not new, f"forgeviz logged faults while the example ran: {new}"


def run_notebook(shell, name: str) -> list:
    """Run every code cell; cells tagged ``raises-exception`` (Jupyter's tag) must raise. Returns the results."""
    nb = nbformat.read(ROOT / "examples" / name, as_version=4)
    results = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            result = shell.run_cell(cell.source, store_history=True)
            if "raises-exception" in cell.metadata.get("tags", []):
                assert result.error_in_exec is not None, f"{name}: this cell should raise\n{cell.source}"
            else:
                assert result.success, f"{name}: cell failed\n{cell.source}\n{result.error_in_exec!r}"
            results.append(result)
    return results


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


def test_broadcasting_example_tells_b1_to_b4_truthfully(shell, monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, **kw: shown.append(obj))
    results = run_notebook(shell, "03_broadcasting.ipynb")
    plans = [r.result.model for r in results if type(r.result).__name__ == "BroadcastWidget"]
    assert [p.result_shape for p in plans] == [[3, 4], [3, 3], [64, 128, 1024], [3, 5], [2, 3, 5], None]
    expected = torch.arange(3).reshape(3, 1) + torch.tensor([[10, 20, 30]])
    assert plans[1].result_values == [str(v) for v in expected.reshape(-1).tolist()]
    assert plans[2].result_nbytes == 32 * 2**20 and plans[2].operands[1].nbytes == 4096
    assert plans[5].conflict.sizes == [4, 5]
    error = next(r.error_in_exec for r in results if r.error_in_exec is not None)
    assert "size of tensor a (4) must match the size of tensor b (3)" in str(error)
    explained = [w.model for w in shown if type(w).__name__ == "BroadcastWidget"]
    assert len(explained) == 1 and explained[0].conflict.sizes == [4, 3] and "x + y" in explained[0].source


def test_memory_example_tells_m1_m2_m3_m5_truthfully(shell):
    results = run_notebook(shell, "04_memory.ipynb")
    views = [r.result for r in results if type(r.result).__name__ == "MemoryWidget"]
    m1, m2_kept, m2_no_grad, live = views
    assert any(r.nbytes == 4 * 2**20 and r.shape == (1024, 1024) for r in m1._tracker.records())

    def activation(view) -> int:
        return sum(r.nbytes for r in view._tracker.records() if r.category == ACTIVATION)

    assert activation(m2_kept) >= 256 * 512 * 4 and activation(m2_no_grad) == 0
    # M3: each kept loss keeps its step's activations (tanh output 64x512 float32, and more)
    ns = shell.user_ns
    kept_storages = {loss.untyped_storage().data_ptr() for loss in ns["kept"]}
    assert len(kept_storages) == 20 and kept_storages <= set(live._tracker.tracked_bytes())
    before = activation(live)
    assert all(isinstance(v, float) for v in ns["floats"])
    del ns["kept"]
    gc.collect()
    assert before - activation(live) >= 20 * 64 * 512 * 4  # the 20 graphs went with the losses
    norms = ns["norms"]
    assert all(b > a for a, b in zip(norms, norms[1:]))  # M5


def test_real_models_example_folds_twelve_blocks_and_its_bars_are_torch_norms(shell):
    results = run_notebook(shell, "06_real_models.ipynb")
    ns = shell.user_ns
    widget = ns["g"]
    assert [len(r.members) for r in widget.model.repeats] == [12]
    norms = dict(zip(widget.state["module_ids"], widget.state["module_param_grad_norms"]))
    torch_norms = results[4].result  # the notebook's own cell: torch's norm of each block's parameter gradients
    assert len(torch_norms) == 12
    for i, expected in enumerate(torch_norms):
        assert norms[f"model.h.{i}"] == pytest.approx(expected, abs=1e-4)
    for i, block in enumerate(ns["model"].h):
        if i != 5:  # (the last cell gave block 5 new parameters)
            assert norms[f"model.h.{i}"] == pytest.approx(
                torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in block.parameters()])).item(), rel=1e-5)
    split = results[-1].result.model  # block 5 made different: the stack splits around it
    assert [r.members for r in split.repeats] == [[f"model.h.{i}" for i in range(5)],
                                                  [f"model.h.{i}" for i in range(6, 12)]]
