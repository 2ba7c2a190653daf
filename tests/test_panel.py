"""The kernel side of the side panel: the tensor listing (bytes and shapes from torch, each storage
once), the comm's messages, live updates while a cell runs, and no work at all with no panel."""

from __future__ import annotations

import time

import pytest
import torch

from forgeviz import panel
from forgeviz._capture.namespace import list_tensors
from forgeviz._capture.session import get_session
from forgeviz.model.memory import CATEGORIES


class FakeComm:
    """A comm the panel's frontend opened: what the kernel sends is kept."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.closed = False
        self._on_msg = self._on_close = None

    def send(self, data) -> None:
        self.sent.append(data)

    def on_msg(self, cb) -> None:
        self._on_msg = cb

    def on_close(self, cb) -> None:
        self._on_close = cb

    def close(self) -> None:
        self.closed = True

    def frontend_sends(self, data) -> None:
        self._on_msg({"content": {"data": data}})

    def frontend_closes(self) -> None:
        self._on_close({})

    def of_type(self, kind: str) -> list[dict]:
        return [m for m in self.sent if m.get("type") == kind]


def test_rows_read_shapes_devices_and_storage_bytes_from_torch_each_storage_once():
    base = torch.arange(24.).reshape(4, 6)
    view = base[:, 1::2]
    own = torch.zeros(5, dtype=torch.float16)
    meta = torch.empty(3, 7, device="meta")
    model = torch.nn.Sequential(torch.nn.Linear(6, 3), torch.nn.BatchNorm1d(3))
    listing = list_tensors({"base": base, "view": view, "own": own, "meta": meta, "model": model, "_": base})
    rows = {r.name: r for r in listing.rows}
    assert list(rows) == ["base", "view", "own", "meta", "model.0.weight", "model.0.bias", "model.1.weight",
                          "model.1.bias", "model.1.running_mean", "model.1.running_var",
                          "model.1.num_batches_tracked"]
    for name, t in [("base", base), ("view", view), ("own", own), ("meta", meta),
                    ("model.0.weight", model[0].weight), ("model.1.running_mean", model[1].running_mean)]:
        row = rows[name]
        assert row.shape == list(t.shape) and row.device == str(t.device)
        assert row.dtype == str(t.dtype).removeprefix("torch.")
        assert row.storage_bytes == t.untyped_storage().nbytes()
    assert rows["base"].counted and not rows["view"].counted and rows["base"].shared and rows["view"].shared
    assert not rows["own"].shared
    assert rows["model.0.weight"].module == "model" and rows["model.0.weight"].kind == "parameter"
    assert rows["model.1.running_mean"].kind == "buffer"
    expected = sum(t.untyped_storage().nbytes() for t in [base, own, meta, *model.parameters(), *model.buffers()])
    assert listing.total_bytes == expected  # view reads base's storage: counted once


def test_rows_say_leaf_grad_fn_and_grad_norm_as_torch_does():
    w = torch.randn(3, 4, requires_grad=True)
    y = (w * 2).sum()
    y.backward()
    rows = {r.name: r for r in list_tensors({"w": w, "y": y}).rows}
    assert rows["w"].leaf and rows["w"].grad_fn is None and rows["w"].requires_grad
    assert rows["w"].grad_norm == pytest.approx(torch.linalg.vector_norm(w.grad).item())
    assert not rows["y"].leaf and rows["y"].grad_fn == type(y.grad_fn).__name__ and rows["y"].grad_norm is None


def test_the_listing_is_bounded_and_never_prints_a_users_object():
    class Loud(torch.Tensor):
        def __repr__(self):
            raise AssertionError("the panel called repr()")

        __str__ = __repr__

    class Weird:
        def __repr__(self):
            raise AssertionError("the panel called repr()")

    ns = {f"t{i}": torch.zeros(1) for i in range(30)}
    ns["loud"] = torch.ones(2).as_subclass(Loud)
    ns["weird"] = Weird()
    listing = list_tensors(ns, limit=10)
    assert len(listing.rows) == 10 and listing.more == 21
    assert [r.name for r in list_tensors({"loud": ns["loud"]}).rows] == ["loud"]


def test_a_panel_gets_the_state_when_it_connects_and_after_each_cell_and_nothing_once_closed(nb):
    host = panel.host()
    assert host is not None and not host.open and get_session().doctor is None
    comm = FakeComm()
    host._opened(comm, {})
    assert get_session().doctor is not None  # watching while a panel is open
    (first,) = comm.of_type("state")
    assert first["version"] == 1 and first["kernel"] == panel.KERNEL_ID
    result = nb.run("w = torch.zeros(2, 3, requires_grad=True)\nloss = (w * 3).sum()\nloss.backward()")
    state = comm.of_type("state")[-1]
    assert state["cell"] == result.execution_count
    rows = {r["name"]: r for r in state["tensors"]["rows"]}
    assert rows["w"]["shape"] == [2, 3] and rows["w"]["grad_norm"] == pytest.approx(
        torch.linalg.vector_norm(nb["w"].grad).item())
    # the latest backward's graph, drawn from the namespace tensor it started at
    assert state["memory_model"] is not None, state["warnings"]
    assert state["graph_model"] is not None, (state["warnings"], get_session().backward_roots)
    comm.frontend_sends({"type": "refresh", "request_id": 3})
    assert len(comm.of_type("state")) == 3
    comm.frontend_closes()
    assert not host.open and get_session().doctor is None
    sent = len(comm.sent)
    nb.ok("v = torch.ones(4)")
    assert len(comm.sent) == sent  # no panel, no work


def test_live_updates_come_while_a_cell_runs(nb):
    host = panel.host()
    comm = FakeComm()
    host._opened(comm, {})
    try:
        nb.ok("import time\nkeep = []\nfor i in range(25):\n    keep.append(torch.ones(1024 * (i + 1)))\n"
              "    time.sleep(0.05)")
        live = comm.of_type("live")
        assert len(live) >= 3, f"{len(live)} live updates in a 1.25 s cell"
        assert [m["seq"] for m in live] == sorted(m["seq"] for m in live)
        assert all(len(m["live_bytes"]) == len(CATEGORIES) for m in live)
        grew = [sum(m["live_bytes"]) for m in live]
        assert grew[-1] > grew[0]  # the loop keeps allocating
        # nothing after the cell: the thread stopped
        count = len(comm.of_type("live"))
        time.sleep(0.6)
        assert len(comm.of_type("live")) == count
    finally:
        comm.frontend_closes()


def test_show_opens_a_tensors_stride_view_or_its_graph_by_name(nb):
    nb.ok("m = torch.nn.Linear(2, 3)\nx = torch.ones(4, 2)\ny = m(x)")
    assert [t.name for t in nb.ok("forgeviz.show('m.weight')").model.tensors] == ["m.weight"]
    assert nb.ok("forgeviz.show('y')").model.nodes  # y has history: its graph
    result = nb.run("forgeviz.show('m.nope')")
    assert isinstance(result.error_in_exec, ValueError)
    assert "expected the name of a tensor in the notebook (m.nope is not one)" in str(result.error_in_exec)


def test_a_panel_opened_again_shows_the_findings_seen_before_it_closed(nb):
    host = panel.host()
    comm = FakeComm()
    host._opened(comm, {})
    nb.ok("x = torch.zeros(3, requires_grad=True)\ny = x.log().sum()\ny.backward()")  # -inf grads: log(0)
    (found,) = [f for f in comm.of_type("state")[-1]["findings"] if f["kind"] == "nonfinite-grad"]
    comm.frontend_closes()  # the sidebar hidden a moment (a theme change hides it), or closed
    assert get_session().doctor is None
    again = FakeComm()
    host._opened(again, {})
    assert [f for f in again.of_type("state")[-1]["findings"] if f["kind"] == "nonfinite-grad"] == [found]
    # the incident again, in another cell: a row of its own after the one carried over
    later = nb.run("x = torch.zeros(3, requires_grad=True)\ny = x.log().sum()\ny.backward()")
    kinds = [f for f in again.of_type("state")[-1]["findings"] if f["kind"] == "nonfinite-grad"]
    assert [f["cell"] for f in kinds] == [found["cell"], later.execution_count]
    again.frontend_closes()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA-only: no CUDA GPU on this machine")
def test_cuda_rows_read_device_bytes_and_grad_norm_from_torch():
    model = torch.nn.Linear(256, 64).cuda()
    x = torch.randn(32, 256, device="cuda")
    model(x).square().mean().backward()
    half = x[:16]
    rows = {r.name: r for r in list_tensors({"x": x, "half": half, "model": model}).rows}
    for name, t in [("x", x), ("half", half), ("model.weight", model.weight), ("model.bias", model.bias)]:
        assert rows[name].device == str(t.device) == "cuda:0" and rows[name].shape == list(t.shape)
        assert rows[name].storage_bytes == t.untyped_storage().nbytes()
    assert rows["x"].counted and not rows["half"].counted and rows["half"].shared  # one storage, counted once
    assert rows["model.weight"].grad_norm == pytest.approx(torch.linalg.vector_norm(model.weight.grad).item(),
                                                           rel=1e-6)
