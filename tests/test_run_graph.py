"""A recorded run's graph view (``forgeviz.open(path).graph_view()``, issue 28): the step slider's per-step
figures of a Node equal torch's own gradient for that Node at that step (caught with a tensor hook while
recording), a parameter's applied gradient equals its ``.grad`` at ``optimizer.step()``, a bad step gets a clear
message, and what a displayed run and its saved output hold."""

from __future__ import annotations

import base64
import dataclasses
import json

import pytest
import torch
from test_graph import request

import forgeviz
from forgeviz.widgets.base import MIME_TYPE

STEPS = 5


class Net(torch.nn.Module):
    """A small MLP whose ``hook`` sees the gradient that reaches its Tanh Node (a hook on Tanh's output)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)
        self.hook = None

    def forward(self, x):
        hidden = self.act(self.fc1(x))
        hidden.register_hook(self.hook)
        return self.fc2(hidden)


def _train(folder, grads="each", memory=False):
    """Net trained STEPS steps under ``forgeviz.record``; torch's own figures per step: the gradient that
    reached the Tanh Node and fc2's weight gradient as the optimizer applied it."""
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    at_tanh, applied = {}, {}
    with forgeviz.record(folder, grads=grads, memory=memory):
        for step in range(1, STEPS + 1):
            x = torch.randn(16, 4, generator=torch.Generator().manual_seed(step))
            opt.zero_grad()
            net.hook = lambda g, step=step: at_tanh.__setitem__(step, g.detach().double().clone())
            net(x).square().mean().backward()
            applied[step] = net.fc2.weight.grad.detach().double().clone()
            opt.step()
    return at_tanh, applied


def _figures(t: torch.Tensor) -> dict:
    return {"norm": t.norm().item(), "min": t.min().item(), "max": t.max().item(), "mean": t.mean().item()}


def _node(view, name):
    return next(n for n in view.model.nodes if n.name == name)


def test_each_steps_node_figures_equal_torchs(tmp_path):
    at_tanh, applied = _train(tmp_path / "run")
    run = forgeviz.open(tmp_path / "run")
    assert run.gradient_steps(0) == list(range(1, STEPS + 1))
    view = run.graph_view(step=1)
    tanh = _node(view, "TanhBackward0")
    weight = next(n for n in view.model.nodes if n.kind == "leaf" and n.label == "fc2.weight")
    laid_out = view.graph
    for step in range(1, STEPS + 1):
        # as the browser's slider asks, then the inspector (the state trait changed, the graph did not)
        reply = request(view, {"type": "step", "request_id": step, "step": step, "rank": 0})
        assert reply["type"] == "step" and reply["steps"]["step"] == step and view.graph is laid_out
        # the browser applies a state no older than the graph it drew (src/widgets/graph.ts)
        assert view.state["backward_passes"] >= view.graph["backward_passes"]
        detail = request(view, {"type": "inspect", "request_id": 100 + step, "node": tanh.id})["detail"]["recorded"]
        assert (detail["step"], detail["rank"], detail["parameter"], detail["applied"]) == (step, 0, None, None)
        local = detail["local"]
        assert (local["shape"], local["dtype"], local["numel"]) == ([16, 8], "float32", 128)
        mine = _figures(at_tanh[step])
        for key, value in mine.items():
            assert local[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (step, key)
        # the badge the view draws for that Node at that step
        state = view.state
        brief = state["grad_briefs"][state["ids"].index(tanh.id)]
        assert brief.startswith("‖g‖=") and float(brief[4:]) == pytest.approx(mine["norm"], rel=1e-3)
        # a parameter: what reached its AccumulateGrad, and what the optimizer applied (equal on one rank)
        leaf = request(view, {"type": "inspect", "request_id": 200 + step, "node": weight.id})["detail"]["recorded"]
        assert leaf["parameter"] == "fc2.weight" and leaf["applied"]["shape"] == [2, 8]
        for key, value in _figures(applied[step]).items():
            assert leaf["applied"][key] == pytest.approx(value, rel=1e-6, abs=1e-9), (step, key)
            assert leaf["local"][key] == pytest.approx(value, rel=1e-6, abs=1e-9), (step, key)
        module = request(view, {"type": "module", "request_id": 300 + step, "module": next(
            m.id for m in view.model.modules if m.path == "fc2")})["detail"]
        rows = {r["name"]: r["grad"]["norm"] for r in module["parameters"]}
        assert rows["weight"] == pytest.approx(applied[step].norm().item(), rel=1e-6)
    assert view.summary().endswith(f"step {STEPS} of rank 0 (recorded)")


def test_bad_steps_and_ranks_say_what_was_recorded(tmp_path):
    _train(tmp_path / "run", grads=2)  # steps 1, 3, 5 keep gradients
    run = forgeviz.open(tmp_path / "run")
    assert run.gradient_steps(0) == [1, 3, 5] and run.steps == list(range(1, STEPS + 1))
    with pytest.raises(ValueError, match=r"step: expected a step with recorded gradients on rank 0 \(1, 3, 5\), "
                                         r"got 2: step 2 was not recorded \(gradients were recorded every 2 steps"):
        run.graph_view(step=2)
    with pytest.raises(ValueError, match=r"got 9: the run has steps 1…5"):
        run.graph_view(step=9)
    with pytest.raises(ValueError, match=r"rank: expected one of the run's ranks \[0\], got 3"):
        run.graph_view(rank=3)
    view = run.graph_view()
    assert view.step == 5 and view.steps == {"steps": [1, 3, 5], "step": 5, "ranks": [0], "rank": 0}
    reply = request(view, {"type": "step", "request_id": 1, "step": 4, "rank": 0})
    assert reply["type"] == "error" and "step 4 was not recorded" in reply["message"]
    reply = request(view, {"type": "step", "request_id": 2, "step": "3", "rank": 0})
    assert reply["type"] == "error" and "got '3'" in reply["message"]
    assert view.step == 5  # a bad request changes nothing


def test_display_and_saved_output(tmp_path, monkeypatch):
    _train(tmp_path / "run")
    run = forgeviz.open(tmp_path / "run")
    header = run._repr_mimebundle_()["text/markdown"]
    assert "ranks 0" not in header and "rank 0 of world size 1, 5 step(s) (1…5)" in header
    assert "- no findings" in header and "torch " + torch.__version__ in header
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: shown.append(a[0]))
    monkeypatch.setattr(type(run), "widget", lambda self: (_ for _ in ()).throw(ImportError("no ranks view here")))
    run._ipython_display_()
    assert shown[0]["text/markdown"] == header
    assert "the ranks view: no ranks view here" in shown[1].data
    # no memory recorded: one line saying how to record it, and no memory view
    assert len(shown) == 4 and "not recorded; record it with `python -m forgeviz record --memory" in shown[3].data
    view = shown[2]
    assert view.steps["step"] == STEPS
    view.show(2)
    data = view._repr_mimebundle_()[0]
    saved = data[MIME_TYPE]
    assert saved["view"] == "graph" and saved["traits"]["steps"]["step"] == 2
    tanh = _node(view, "TanhBackward0")
    recorded = saved["details"]["nodes"][str(tanh.id)]["recorded"]
    assert recorded["step"] == 2 and recorded["local"]["norm"] == view._node_detail(tanh.id).recorded.local.norm
    assert data["text/plain"].endswith("step 2 of rank 0 (recorded)") and "image/svg+xml" in data
    json.dumps(saved)  # the saved output is plain JSON


def test_display_draws_rank_memory_and_saves_every_picture(tmp_path, monkeypatch):
    """A run recorded with memory shows, after its graph view, rank 0's memory timeline; saved, each of its
    views is a real picture (an SVG and a PNG that decode and are not blank) and the memory view keeps the
    recorded timeline's peak and events."""
    from test_readers import check_picture

    _train(tmp_path / "run", memory=True)
    params = sum(p.numel() * p.element_size() for p in Net().parameters())
    run = forgeviz.open(tmp_path / "run")
    assert run.memory_ranks() == [0]
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: shown.append(a[0]))
    run._ipython_display_()
    assert len(shown) == 5 and shown[3].data == "(the memory timeline: rank 0's below)"
    views = {"ranks": shown[1], "graph": shown[2], "memory": shown[4]}
    memory = views["memory"]
    timeline = run.memory(0)
    assert memory.timeline == dataclasses.asdict(timeline) and timeline.count > 0
    assert timeline.message == f"run, rank 0: {STEPS} step(s) recorded"  # (the frees after the last step() too)
    assert timeline.peak_bytes >= 2 * params  # the parameters and their gradients were alive together
    for name, view in views.items():
        data, metadata = view._repr_mimebundle_()
        saved = data[MIME_TYPE]
        assert saved["view"] == name
        check_picture("svg", data["image/svg+xml"].encode())
        check_picture("png", base64.b64decode(data["image/png"]))
        json.dumps(saved)
    saved = memory._repr_mimebundle_()[0][MIME_TYPE]
    assert saved["traits"]["timeline"]["peak_bytes"] == timeline.peak_bytes
    (message,) = saved["messages"]  # a small run: every event saved, none cut
    assert message["content"]["count"] == timeline.count and "details_cut" not in saved
