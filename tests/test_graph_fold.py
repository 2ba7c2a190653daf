"""Graphs of real models: every Node attributed to its module and line, folded by module, repeated
blocks stacked, gradient norms per block, the chain rule at small Nodes, and caps on huge graphs.
torch is the oracle: its anomaly mode records where each Node was made, module hooks written here
record which module ran, and norms are computed from the parameters' ``.grad``."""

from __future__ import annotations

import math
import re

import pytest
import torch

from forgeviz._capture.source import cell_number

from scenarios import S1, by_label, make_gpt2

_next_nr = torch._C._autograd._get_sequence_nr


def record_module_spans(root: torch.nn.Module) -> list:
    """Per module call, (path, first sequence number, one past the last): the autograd numbers of
    the Nodes made while its forward ran, written down by this test's own hooks on each module."""
    spans: list = []
    for path, module in root.named_modules():
        def pre(_module, _args, path=path):
            spans.append([path, _next_nr(), None])

        def post(_module, _args, _out, path=path):
            for span in reversed(spans):
                if span[0] == path and span[2] is None:
                    span[2] = _next_nr()
                    break

        module.register_forward_pre_hook(pre)
        module.register_forward_hook(post)
    return spans


def innermost(spans: list, seq: int):
    """The path of the innermost module call whose span holds ``seq``, or None (top level)."""
    inside = [s for s in spans if s[1] <= seq < s[2]]
    return min(inside, key=lambda s: s[2] - s[1])[0] if inside else None


ATTRIBUTION_CELL = """\
class Attend(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.proj(x).chunk(3, dim=-1)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


class Three(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 8)
        self.mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
        self.attend = Attend()

    def forward(self, x):
        h = self.lin(x)
        return self.mha(h, h, h)[0] + self.attend(h)
"""


def test_every_node_made_in_a_forward_carries_its_module_and_line(nb):
    nb.ok(ATTRIBUTION_CELL)
    nb.shell.user_ns["record_module_spans"] = record_module_spans
    nb.ok("torch.manual_seed(0)\nmodel = Three()\nspans = record_module_spans(model)")
    nb.ok("with torch.autograd.detect_anomaly(check_nan=False):\n"
          "    out = model(torch.randn(2, 5, 4))\n"
          "loss = out.square().mean()")
    widget = nb.ok("forgeviz.graph(loss)")
    graph = widget.model
    spans = nb["spans"]
    live = widget._live.nodes
    ops = [n for n in graph.nodes if n.kind == "op"]
    assert len(ops) > 40  # linear on 3-D input, attention and SDPA make many Nodes inside one op
    checked = 0
    for node in ops:
        torch_node = live[node.id]
        expected = innermost(spans, torch_node._sequence_nr())
        assert node.module_path == expected, (node.name, node.module_path, expected)
        if expected is None:
            continue  # the loss, made at the top level of the third cell
        # Anomaly mode wrote the stack where torch made this Node: its innermost notebook frame.
        stack = "".join(torch_node.metadata["traceback_"])
        frames = [(f, int(line)) for f, line in re.findall(r'File "([^"]+)", line (\d+)', stack)
                  if cell_number(f) is not None]
        filename, line = frames[-1]
        assert (node.cell, node.line) == (cell_number(filename), line), (node.name, node.module_path)
        checked += 1
    paths = {n.module_path for n in ops}
    assert {"lin", "mha", "attend", "attend.proj"} <= paths
    assert checked >= 40
    # Inside nn.MultiheadAttention and linear on 3-D input, not only the op's output Node: TBackward0
    # and AddmmBackward0 are made inside linear, and belong to the same module.
    inner = [n for n in ops if n.module_path == "lin"]
    assert {"TBackward0", "AddmmBackward0", "ViewBackward0"} <= {n.name for n in inner}
    assert all(n.op == "linear" for n in inner)
    # Each module's Nodes are its cluster's: the fold draws what the capture saw.
    modules = {m.path: m for m in graph.modules}
    assert {n.id for n in inner} <= set(modules["lin"].nodes)


def test_gpt2_shape_folds_its_blocks_into_one_stack_and_the_bars_are_torch_norms(nb):
    nb.shell.user_ns["make_gpt2"] = make_gpt2
    nb.ok("model = make_gpt2(n_layer=12, d=64, n_head=4, vocab=128, seq=16)\n"
          "idx = torch.randint(0, 128, (2, 16))\n"
          "loss = torch.nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten())")
    widget = nb.ok("g = forgeviz.graph(loss)\ng")
    graph = widget.model
    model = nb["model"]
    # The module tree is named_modules() order (every module of this model ran ops).
    assert [m.path for m in graph.modules] == [name for name, _ in model.named_modules()]
    assert [m.id for m in graph.modules][:3] == ["model", "model.wte", "model.wpe"]
    # Sizes are torch's.
    for m in graph.modules:
        params = list(model.get_submodule(m.path).parameters())
        assert m.param_count == sum(p.numel() for p in params)
        assert m.param_bytes == sum(p.numel() * p.element_size() for p in params)
    assert [r.members for r in graph.repeats] == [[f"model.h.{i}" for i in range(12)]]
    assert graph.repeats[0].label == "h.0 … h.11 · Block × 12"
    assert len({m.signature for m in graph.modules if re.fullmatch(r"h\.\d+", m.path)}) == 1
    # Every op made inside a module is in it: only the loss's Nodes are at the top level.
    top = [n.name for n in graph.nodes if n.kind == "op" and n.module_path is None]
    assert sorted(top) == ["LogSoftmaxBackward0", "NllLossBackward0", "ViewBackward0"]
    assert all(m.param_grad_norm is None for m in graph.modules)
    nb.ok("loss.backward()")
    modules = {m.path: m for m in widget.model.modules}
    state = widget.state
    norms = dict(zip(state["module_ids"], state["module_param_grad_norms"]))
    for i, block in enumerate(model.h):
        expected = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in block.parameters()])).item()
        assert norms[f"model.h.{i}"] == pytest.approx(expected, rel=1e-5)
        assert modules[f"h.{i}"].param_grad_norm == pytest.approx(expected, rel=1e-5)
    # The gradient that left a block is the gradient of the loss w.r.t. the block's input.
    nb.ok("x0 = (model.wte(idx) + model.wpe(torch.arange(16))).detach().requires_grad_()\n"
          "h = x0\nfor block in model.h:\n    h = block(h)\n"
          "ref = torch.nn.functional.cross_entropy(model.lm_head(model.ln_f(h)).flatten(0, 1), idx.flatten())\n"
          "ref_grad, = torch.autograd.grad(ref, x0)")
    assert modules["h.0"].grad_norm == pytest.approx(nb["ref_grad"].norm().item(), rel=1e-4)


def test_blocks_that_differ_are_never_stacked(nb):
    nb.shell.user_ns["make_gpt2"] = make_gpt2
    nb.ok("model = make_gpt2(n_layer=6, d=32, n_head=4, vocab=64, seq=8)\n"
          "model.h[3].mlp.c_fc = torch.nn.Linear(32, 64)\nmodel.h[3].mlp.c_proj = torch.nn.Linear(64, 32)\n"
          "idx = torch.randint(0, 64, (1, 8))\nloss = model(idx).sum()")
    graph = nb.ok("forgeviz.graph(loss)").model
    assert [r.members for r in graph.repeats] == [["model.h.0", "model.h.1", "model.h.2"],
                                                  ["model.h.4", "model.h.5"]]
    # Same ops and shapes but another activation: apart too.
    nb.ok("model = make_gpt2(n_layer=3, d=32, n_head=4, vocab=64, seq=8)\n"
          "model.h[1].mlp.forward = lambda x, m=model.h[1].mlp: m.c_proj(torch.relu(m.c_fc(x)))\n"
          "loss = model(idx).sum()")
    graph = nb.ok("forgeviz.graph(loss)").model
    assert graph.repeats == []


def test_module_inspector_lists_parameters_with_torch_gradients(nb):
    nb.shell.user_ns["make_gpt2"] = make_gpt2
    nb.ok("model = make_gpt2(n_layer=2, d=32, n_head=4, vocab=64, seq=8)\n"
          "idx = torch.randint(0, 64, (1, 8))\nloss = model(idx).square().mean()\n"
          "g = forgeviz.graph(loss)\nloss.backward()")
    from test_graph import request

    reply = request(nb["g"], {"type": "module", "request_id": 3, "module": "model.h.1.attn"})
    detail = reply["detail"]
    attn = nb["model"].h[1].attn
    rows = {r["name"]: r for r in detail["parameters"]}
    assert set(rows) == {name for name, _ in attn.named_parameters()}
    for name, p in attn.named_parameters():
        assert rows[name]["shape"] == list(p.shape)
        assert rows[name]["grad"]["norm"] == pytest.approx(p.grad.norm().item(), rel=1e-5)
        assert rows[name]["grad"]["max"] == pytest.approx(p.grad.max().item(), rel=1e-5)
    assert sum(detail["grad_histogram"]["counts"]) > 0 and detail["alive"]
    bad = request(nb["g"], {"type": "module", "request_id": 4, "module": "model.nope"})
    assert bad["type"] == "error" and "no module 'model.nope' in this graph" in bad["message"]


def test_chain_rule_at_s1_mul_reads_16_times_3_and_16_times_2(nb):
    nb.ok(S1 + "g = forgeviz.graph(loss)\nloss.backward()")
    from test_graph import request

    graph = nb["g"].model
    mul = by_label(graph, "z")
    terms = request(nb["g"], {"type": "inspect", "request_id": 1, "node": mul.id})["detail"]["chain"]
    assert [(t["input_label"], t["grad_output"], t["local"], t["grad_input"]) for t in terms] == [
        ("x", [16.0], [3.0], [48.0]), ("y", [16.0], [2.0], [32.0])]
    # grad_out × local = grad_in, against what backward recorded and against torch's own gradients.
    x, y = nb["x"], nb["y"]
    assert 48.0 + 16.0 == x.grad.item() and 32.0 == y.grad.item()  # x gets Mul's 48 and Add's 16
    power = by_label(graph, "loss")
    (term,) = request(nb["g"], {"type": "inspect", "request_id": 2, "node": power.id})["detail"]["chain"]
    assert term["grad_output"] == [1.0] and term["local"] == [16.0] and term["grad_input"] == [16.0]
    assert term["formula"] == "∂(aᵖ)/∂a = p·aᵖ⁻¹"
    # A Node over 64 elements has no chain view.
    nb.ok("big = torch.randn(65, requires_grad=True)\nq = (big * big).sum()\ngq = forgeviz.graph(q)\nq.backward()")
    square = next(n for n in nb["gq"].model.nodes if n.name == "MulBackward0")
    assert request(nb["gq"], {"type": "inspect", "request_id": 3, "node": square.id})["detail"]["chain"] == []


def test_a_ten_thousand_op_loop_opens_as_one_box(nb):
    nb.ok("t = torch.ones(3, requires_grad=True)\nh = t\nfor _ in range(10_000):\n    h = h * 1.0001")
    graph = nb.ok("forgeviz.graph(h)").model
    (group,) = graph.modules
    assert group.op_count == 10_000 and len(group.nodes) == 10_000
    assert group.label == f"cell [{nb.shell.execution_count - 2}] line 4 · mul × 10,000"
    assert graph.cut is None and graph.total_nodes == 10_001


def test_a_hundred_thousand_node_graph_is_cut_with_a_message(nb):
    # Built with forgeviz's tagging off: torch cannot free a chain of more than ~40,000 Nodes that
    # Python has touched without overflowing the stack, and tagging touches each (see the README).
    nb.ok("t = torch.ones(2, requires_grad=True)\nh = t\nwith torch._C.DisableTorchFunction():\n"
          "    for _ in range(100_000):\n        h = h + 1")
    widget = nb.ok("forgeviz.graph(h)")
    graph = widget.model
    assert len(graph.nodes) == 20_000 and graph.total_nodes == 20_001  # the walk stops one past the cap
    assert graph.cut == ("showing the 20,000 Nodes nearest the output; the graph has more. "
                         "forgeviz.graph(..., max_nodes=80000) draws more (slower)")
    ids = {n.id for n in graph.nodes}
    assert all(e.src in ids and e.dst in ids for e in graph.edges)
    assert by_label(graph, "h").id in ids  # the output's Node is kept
    small = nb.ok("forgeviz.graph(h, max_nodes=10)").model
    assert len(small.nodes) == 10 and small.cut.startswith("showing the 10 Nodes nearest the output;")
    result = nb.run("forgeviz.graph(h, max_nodes=0)")
    assert isinstance(result.error_in_exec, ValueError)
    assert "max_nodes=...) expects a positive int, got 0" in str(result.error_in_exec)
    assert math.isclose(nb["h"][0].item(), 100_001.0)  # the user's tensor is untouched
