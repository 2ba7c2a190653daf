"""Custom ``torch.autograd.Function``s in the graph: each Node carries the Function's name as its op and
the line that called ``.apply``, by forgeviz's Python op tags and by its native ones alike."""

from __future__ import annotations

import sys

import pytest
import torch
from test_graph import request

import forgeviz
from forgeviz._capture import native
from forgeviz._capture.session import get_session

from scenarios import by_label

autograd_function_db = pytest.importorskip("torch.testing._internal.autograd_function_db").autograd_function_db


def _function_classes(out) -> dict[str, type]:
    """The autograd.Function classes whose Nodes are behind ``out``, by name (an independent walk)."""
    found, todo, seen = {}, [t.grad_fn for t in out], set()
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if getattr(node, "_forward_cls", None) is not None:
            found[node._forward_cls.__name__] = node._forward_cls
        todo.extend(n for n, _ in node.next_functions)
    return found


@pytest.fixture(params=["python", "native"])
def tagging(request, monkeypatch):
    """Run with the Python op tags, and with native/grad_hooks.cpp's (when built)."""
    if request.param == "python":
        monkeypatch.setattr(native, "hooks", lambda: None)
    elif native.hooks() is None:
        native.load_if_built()
        if native.hooks() is None:
            pytest.fail("the native gradient hooks are not built: run python -m forgeviz._capture.native")
    return request.param


def test_every_function_of_torchs_autograd_function_db_is_named_with_its_line(tagging):
    assert len(autograd_function_db) == 14
    named = []
    for info in autograd_function_db:
        sample = next(iter(info.sample_inputs_func(info, "cpu", torch.float64, True)))
        with forgeviz.capture():
            line = sys._getframe().f_lineno + 1
            out = info.op(sample.input, *sample.args, **sample.kwargs)
            assert (get_session().native_tag is not None) == (tagging == "native")
        out = [t for t in (out if isinstance(out, (tuple, list)) else [out])
               if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        graph = forgeviz.graph(*out).model
        classes = _function_classes(out)
        functions = [n for n in graph.nodes if n.name.removesuffix("Backward") in classes]
        assert functions, info.name
        for node in functions:
            cls = classes[node.name.removesuffix("Backward")]
            assert (node.op, node.line) == (cls.__name__, line), info.name
            assert node.label in (cls.__name__, *node.var_names)
        named.append(info.name)
    assert len(named) == 14


MY_EXP = """\
class MyExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y
"""


def test_a_notebook_function_shows_its_name_cell_line_and_gradients(nb, tagging):
    nb.ok(MY_EXP)
    nb.ok("x = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)")
    cell = nb.run("h = x * 2\n"
                  "y = MyExp.apply(h)\n"
                  "loss = (y * 3).sum()")
    assert cell.success
    widget = nb.ok("g = forgeviz.graph(loss)\ng")
    node = next(n for n in widget.model.nodes if n.name == "MyExpBackward")
    assert (node.op, node.cell, node.line, node.label) == ("MyExp", cell.execution_count, 2, "y")
    detail = request(widget, {"type": "inspect", "request_id": 1, "node": node.id})["detail"]
    assert detail["op_qualname"] == "__main__.MyExp" and detail["source"] == "y = MyExp.apply(h)"
    # The gradients recorded at the Function's Node are torch's: what reached y, and what left for h.
    nb.ok("seen = {}\n"
          "y.register_hook(lambda g: seen.setdefault('y', g.clone()))\n"
          "h.register_hook(lambda g: seen.setdefault('h', g.clone()))\n"
          "loss.backward()")
    grads = request(nb["g"], {"type": "inspect", "request_id": 2, "node": node.id})["detail"]["grads"][-1]
    assert grads["grad_outputs"][0]["values"] == nb["seen"]["y"].tolist() == [3.0, 3.0, 3.0]
    assert grads["grad_inputs"][0]["values"] == nb["seen"]["h"].tolist()
    assert nb["seen"]["h"].tolist() == (3 * torch.exp(2 * nb["x"].detach())).tolist()
    assert by_label(nb["g"].model, "x").grad_brief is not None
