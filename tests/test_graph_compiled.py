"""torch.compile's regions in the graph view (scenario T1): one box per ``CompiledFunctionBackward``,
named by the compiled module and its line, with its backend and Dynamo's counts; the gradients at its
edges are torch's; parameters keep the names you gave them; the eager ops around it keep theirs."""

from __future__ import annotations

import pytest
import torch
from test_compile import _gpt, _mlp
from test_graph import request

MODELS = {"mlp": (_mlp, "2, 32"), "gpt": (_gpt, "2, 8, 32")}


def _compile_cell(nb, make) -> None:
    nb.shell.user_ns["make"] = make
    nb.ok("torch._dynamo.reset()\ntorch._dynamo.utils.counters.clear()\n"
          "model = torch.compile(make(), backend='aot_eager')")


def _region(graph):
    assert len(graph.compiled) == 1, graph.compiled
    region = graph.compiled[0]
    return region, next(n for n in graph.nodes if n.id == region.node)


@pytest.mark.parametrize("name", MODELS)
def test_a_compiled_model_is_one_named_box_with_torchs_gradients_at_its_edges(nb, name):
    make, shape = MODELS[name]
    _compile_cell(nb, make)
    cell = nb.run(f"x = torch.randn({shape}, requires_grad=True)\n"
                  "h = x * 2\n"
                  "out = model(h)\n"
                  "loss = out.square().mean()")
    assert cell.success
    widget = nb.ok("g = forgeviz.graph(loss)\ng")
    graph = widget.model
    region, node = _region(graph)
    counters = torch._dynamo.utils.counters
    assert (region.name, region.backend, region.regions_at_line) == ("model", "aot_eager", 1)
    assert (region.dynamo_graphs, region.dynamo_breaks) == (counters["stats"]["unique_graphs"], 0) == (1, 0)
    assert (node.name, node.op, node.cell, node.line, node.label) == (
        "CompiledFunctionBackward", "CompiledFunction", cell.execution_count, 3, "model · compiled")
    assert (node.has_saved, node.freed) == (True, False)  # its backward's activations, held until it runs
    # Parameters are named as the uncompiled model names them: no Dynamo "_orig_mod." prefix.
    params = dict(make().named_parameters())
    leaves = {n.label: n for n in graph.nodes if n.kind == "leaf" and n.label in params}
    assert sorted(leaves) == sorted(params)
    assert not any("_orig_mod" in (n.label or "") or "_orig_mod" in (n.module_path or "") for n in graph.nodes)
    # The eager ops before and after the compiled call keep their ops, lines and names.
    by_op = {n.op: n for n in graph.nodes if n.kind == "op"}
    assert (by_op["mul"].line, by_op["mul"].label) == (2, "h")
    assert (by_op["square"].line, by_op["mean"].line, by_op["mean"].label) == (4, 4, "loss")
    # After backward: what arrived at the region (out's gradient) and what left it for h and for the
    # parameters, as torch computes them.
    nb.ok("seen = {}\n"
          "out.register_hook(lambda g: seen.setdefault('out', g.clone()))\n"
          "h.register_hook(lambda g: seen.setdefault('h', g.clone()))\n"
          "loss.backward()")
    detail = request(nb["g"], {"type": "inspect", "request_id": 1, "node": node.id})["detail"]
    assert detail["compiled"]["name"] == "model" and detail["compiled"]["backend"] == "aot_eager"
    assert detail["freed"]  # the backward released what the region saved
    grads = detail["grads"][-1]
    seen = nb["seen"]
    assert grads["grad_outputs"][0]["norm"] == pytest.approx(seen["out"].norm().item(), rel=1e-6)
    edges = {e.src: e.input_nr for e in graph.edges if e.dst == node.id}
    to_h = grads["grad_inputs"][edges[by_op["mul"].id]]
    assert to_h["norm"] == pytest.approx(seen["h"].norm().item(), rel=1e-6)
    if to_h["values"] is not None:  # small enough to carry its values: exactly torch's
        assert to_h["values"] == seen["h"].reshape(-1).tolist()
    for label, param in nb["model"].named_parameters():
        sent = grads["grad_inputs"][edges[leaves[label.removeprefix("_orig_mod.")].id]]
        assert sent["norm"] == pytest.approx(param.grad.norm().item(), rel=1e-6), label


def test_a_graph_break_makes_two_regions_at_one_line(nb):
    nb.ok("class Chatty(torch.nn.Module):\n"
          "    def __init__(self):\n"
          "        super().__init__()\n"
          "        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)\n"
          "    def forward(self, x):\n"
          "        h = self.a(x).relu()\n"
          "        print('halfway')\n"
          "        return self.b(h)")
    nb.ok("torch._dynamo.reset()\ntorch._dynamo.utils.counters.clear()\n"
          "chatty = torch.compile(Chatty(), backend='aot_eager')")
    cell = nb.run("x = torch.randn(4, 8)\nloss = chatty(x).sum()")
    graph = nb.ok("forgeviz.graph(loss)").model
    counters = torch._dynamo.utils.counters
    assert sum(counters["graph_break"].values()) == 1
    assert len(graph.compiled) == 2
    for region in graph.compiled:
        node = next(n for n in graph.nodes if n.id == region.node)
        assert (region.name, region.backend, region.regions_at_line) == ("chatty", "aot_eager", 2)
        assert (region.dynamo_graphs, region.dynamo_breaks) == (counters["stats"]["unique_graphs"], 1)
        assert (node.cell, node.line) == (cell.execution_count, 2)
    params = sorted(n.label for n in graph.nodes if n.kind == "leaf")
    assert params == ["a.bias", "a.weight", "b.bias", "b.weight"]


def test_a_compiled_submodule_is_named_by_its_path(nb):
    nb.shell.user_ns["make"] = _mlp
    nb.ok("torch._dynamo.reset()\n"
          "net = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU())\n"
          "net.append(torch.compile(make(), backend='aot_eager'))")
    cell = nb.run("loss = net(torch.randn(3, 4)).sum()")
    graph = nb.ok("forgeviz.graph(loss)").model
    region, node = _region(graph)
    assert (region.name, node.line, node.cell) == ("net.2", 1, cell.execution_count)
    assert "2.0.weight" in {n.label for n in graph.nodes if n.kind == "leaf"}
    relu = next(n for n in graph.nodes if n.op == "relu")
    assert relu.module_path == "1"  # the eager module before it keeps its attribution


def test_the_compiled_module_is_shown_by_its_own_class_and_every_module_group_holds_something(nb):
    """torch.compile returns an ``OptimizedModule`` wrapping the user's module as ``_orig_mod``: the
    module groups show the user's class and paths, with no group for the wrapper's ``_orig_mod``."""
    _compile_cell(nb, _mlp)
    nb.ok("x = torch.randn(4, 32, requires_grad=True)\nloss = model(x * 2).square().mean()")
    graph = nb.ok("g = forgeviz.graph(loss)\ng").model
    region, node = _region(graph)
    labels = {m.id: (m.label, m.type, m.parent) for m in graph.modules}
    assert labels == {"model": ("model · Sequential", "Sequential", None),
                      "model.0": ("0 · Linear", "Linear", "model"),
                      "model.2": ("2 · Linear", "Linear", "model")}
    by_id = {m.id: m for m in graph.modules}
    assert by_id["model"].nodes == [node.id] and node.module_path == ""
    params = dict(_mlp().named_parameters())
    for module in graph.modules:  # each group holds a Node, or its children do
        assert module.nodes or any(m.parent == module.id for m in graph.modules), module.id
    assert by_id["model"].param_count == sum(p.numel() for p in params.values())
    detail = request(nb["g"], {"type": "inspect", "request_id": 1, "node": node.id})["detail"]
    assert (detail["module_path"], detail["module_type"]) == ("", "Sequential")


def test_a_compiled_submodule_shows_its_own_class(nb):
    nb.shell.user_ns["make"] = _mlp
    nb.ok("torch._dynamo.reset()\n"
          "net = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU())\n"
          "net.append(torch.compile(make(), backend='aot_eager'))")
    nb.ok("loss = net(torch.randn(3, 4)).sum()")
    graph = nb.ok("forgeviz.graph(loss)").model
    labels = {m.id: m.label for m in graph.modules}
    assert labels["net"] == "net · Sequential" and labels["net.2"] == "2 · Sequential", labels
    assert not any("OptimizedModule" in m.label or m.type == "OptimizedModule" for m in graph.modules)
