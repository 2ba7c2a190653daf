"""The broadcast view: scenarios B1–B4, shape errors from real cells, export, bad input."""

from __future__ import annotations

import re

import pytest
import torch
from IPython.core.error import UsageError

import forgeviz
from forgeviz.model.strides import format_value
from forgeviz.widgets.broadcast import BroadcastWidget


def ask(widget, **request):
    replies = []
    widget.send = lambda content, buffers=None: replies.append(content)
    widget._handle_msg({"content": {"data": {"method": "custom", "content": {"request_id": 3, **request}}},
                        "buffers": []})
    return replies[0]


@pytest.mark.parametrize("a, b, expected", [((3, 4), (4,), [3, 4]), ((3, 1), (1, 3), [3, 3]),
                                            ((64, 128, 1024), (1, 1, 1024), [64, 128, 1024])])
def test_b1_result_shapes(a, b, expected):
    plan = forgeviz.broadcast(a, b).model
    assert plan.ok and plan.result_shape == expected == list(torch.broadcast_shapes(a, b))
    assert [o.padded for o in plan.operands][1] == [1] * (len(a) - len(b)) + list(b)
    assert [s.kind for s in plan.steps] == ["align", "pad", *["compare"] * len(expected), "stretch", "result"]


def test_b1_values_flow_into_the_result():
    a = torch.arange(3).reshape(3, 1)
    b = torch.tensor([[10, 20, 30]])
    plan = forgeviz.broadcast(a, b, op="+").model
    ea, eb = torch.broadcast_tensors(a, b)
    assert plan.operands[0].expanded_values == [str(v) for v in ea.reshape(-1).tolist()]
    assert plan.operands[1].expanded_stride == list(eb.stride()) == [0, 1]
    assert plan.result_values == [str(v) for v in (a + b).reshape(-1).tolist()]
    assert [c.verdict for c in plan.checks] == ["stretch", "stretch"]
    assert plan.checks[0].stretched == [0] and plan.checks[1].stretched == [1]


def test_b2_conflict_names_the_dim_the_sizes_and_fixes_torch_accepts():
    a, b = torch.ones(3, 4), torch.ones(3)
    with pytest.raises(RuntimeError) as err:
        a + b
    plan = forgeviz.broadcast(a, b, op="+", names=["a", "b"]).model
    assert not plan.ok and plan.torch_message == str(err.value)
    assert (plan.conflict.from_right, plan.conflict.sizes) == (-1, [4, 3])
    assert plan.steps[-1].kind == "conflict" and plan.steps[-2].dim == 1
    assert plan.conflict.fixes[0].startswith("b.unsqueeze(-1)")
    assert (a + b.unsqueeze(-1)).shape == (3, 4) and (a.T + b).shape == (4, 3)
    assert any(f.startswith("a.T") for f in plan.conflict.fixes)


def test_b3_bytes_of_the_result_and_the_inputs():
    plan = forgeviz.broadcast(torch.empty(64, 128, 1024, device="meta"), torch.empty(1, 1, 1024, device="meta"),
                              op="+").model
    result = torch.empty(64, 128, 1024) + torch.empty(1, 1, 1024)
    assert plan.result_nbytes == result.untyped_storage().nbytes() == 32 * 2**20
    assert [o.nbytes for o in plan.operands] == [32 * 2**20, 4096]
    assert "32 MiB, from inputs of 32 MiB + 4 KiB" in plan.steps[-1].text


def test_b4_matmul_batched_and_failing():
    ok = forgeviz.broadcast((3, 4), (4, 5), op="@").model
    assert ok.result_shape == [3, 5] and ok.matmul.inner == [4, 4]
    batched = forgeviz.broadcast(torch.ones(2, 3, 4), torch.ones(2, 4, 5), op="@").model
    assert batched.result_shape == list((torch.ones(2, 3, 4) @ torch.ones(2, 4, 5)).shape) == [2, 3, 5]
    assert batched.matmul.batch_shape == [2]
    with pytest.raises(RuntimeError) as err:
        torch.ones(3, 4) @ torch.ones(5, 6)
    bad = forgeviz.broadcast((3, 4), (5, 6), op="@").model
    assert not bad.ok and bad.conflict.sizes == [4, 5] and bad.torch_message == str(err.value)
    assert [s.kind for s in bad.steps] == ["align", "inner", "conflict"]
    vector = forgeviz.broadcast((3,), (3, 5), op="@").model
    assert vector.result_shape == [5] and "1-D" in vector.matmul.promoted[0]


def test_shape_error_in_a_cell_is_reraised_untouched_and_explained(nb, monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, **kw: shown.append(obj))
    try:
        torch.ones(3, 4) + torch.ones(3)
    except RuntimeError as exc:
        without = exc
    nb.ok("a = torch.ones(3, 4)\nb = torch.ones(3)")
    error = nb.run("c = a + b").error_in_exec
    assert type(error) is type(without) is RuntimeError and str(error) == str(without)
    tb, user_lines = error.__traceback__, []
    while tb is not None:
        user_lines.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    assert any(name.startswith("<ipython-input") or "/ipykernel_" in name for name in user_lines), user_lines
    assert len(shown) == 1 and isinstance(shown[0], BroadcastWidget)
    plan = shown[0].model
    assert [o.shape for o in plan.operands] == [[3, 4], [3]] and plan.torch_message == str(error)
    assert plan.conflict.sizes == [4, 3] and "c = a + b" in plan.source
    assert [o.name for o in plan.operands] == ["a", "b"] and "a has size 4 and b has size 3" in plan.conflict.text
    nb.ok("acts = torch.ones(2, 5)\nbias = torch.ones(4)")
    nb.run("acts * bias")
    assert [o.name for o in shown[-1].model.operands] == ["acts", "bias"]
    # matmul too
    nb.run("torch.ones(3, 4) @ torch.ones(5, 6)")
    assert shown[-1].model.kind == "matmul" and shown[-1].model.conflict.sizes == [4, 5]
    # nn.Linear's error is drawn as input @ weight.T
    nb.run("torch.nn.Linear(5, 6)(torch.ones(4, 3))")
    linear = shown[-1].model
    assert linear.kind == "matmul" and [o.shape for o in linear.operands] == [[4, 3], [5, 6]]
    assert [o.name for o in linear.operands][1] == "weight.T" and linear.conflict.sizes == [3, 5]
    assert "mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)" == linear.torch_message
    shown.pop()
    # other errors draw nothing; %fv explain off turns it off
    nb.run("torch.ones(3).view(5)")
    assert len(shown) == 3
    nb.ok("%fv explain off")
    nb.run("a + b")
    assert len(shown) == 3
    nb.ok("%fv explain on")
    with pytest.raises(UsageError, match="expected 'on' or 'off'"):
        nb.shell.run_line_magic("fv", "explain maybe")


@pytest.mark.faults_expected
def test_a_fault_while_explaining_leaves_the_users_error_intact(nb, monkeypatch):
    import forgeviz._capture.broadcast as capture_broadcast

    def broken(*args, **kwargs):
        raise ValueError("injected fault")

    monkeypatch.setattr(capture_broadcast, "plan_failed_op", broken)
    result = nb.run("torch.ones(3, 4) + torch.ones(3)")
    assert isinstance(result.error_in_exec, RuntimeError)
    assert "size of tensor a (4) must match" in str(result.error_in_exec)
    from forgeviz._capture.session import get_session
    assert "injected fault" in get_session().faults[-1]
    monkeypatch.setattr(get_session(), "describe_error", broken)  # what %load_ext set: describe_failed_op
    result = nb.run("torch.ones(3, 4) + torch.ones(3)")
    assert isinstance(result.error_in_exec, RuntimeError)


def test_magic_and_bad_input(nb):
    nb.ok("a = torch.ones(3, 1)\nb = torch.ones(1, 3)")
    widget = nb.ok("%fv broadcast a b")
    assert widget.model.result_shape == [3, 3] and [o.name for o in widget.model.operands] == ["a", "b"]
    assert nb.ok("%fv matmul a b").model.result_shape == [3, 3]
    with pytest.raises(TypeError,
                       match=r"expected a torch.Tensor or a shape \(tuple, list or torch.Size of ints\), got str"):
        forgeviz.broadcast("3x4", (3,))
    with pytest.raises(ValueError, match=r"cannot have a negative size, got \(3, -1\)"):
        forgeviz.broadcast((3, -1), (3,))
    with pytest.raises(ValueError, match="op: expected one of"):
        forgeviz.broadcast((3,), (3,), op="%")
    with pytest.raises(TypeError, match="exactly two"):
        forgeviz.broadcast((3,), (3,), (3,), op="@")


def test_standalone_html_and_the_html_request(tmp_path):
    widget = forgeviz.broadcast((3, 1), (1, 3))
    page = widget.to_html(tmp_path / "b.html", theme="dark")
    assert (tmp_path / "b.html").read_text() == page
    urls = set(re.findall(r"https?://[^\s\"'`)<>]+", page))
    assert all(u.startswith("http://www.w3.org/") for u in urls), urls  # XML namespaces only: nothing to fetch
    assert "globalThis.__forgevizView" in page and '"result_shape": [3, 3]' in page
    reply = ask(widget, type="html", theme="light")
    assert reply["type"] == "html" and "<html" in reply["html"]
    assert ask(widget, type="html", theme="sepia")["type"] == "error"
    assert "unknown request type" in ask(widget, type="svg")["message"]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA-only: no CUDA GPU on this machine")
def test_cuda_operands_broadcast_with_torchs_shape_strides_and_values():
    a = torch.arange(3., device="cuda").reshape(3, 1)
    b = torch.tensor([[10., 20., 30.]], device="cuda")
    plan = forgeviz.broadcast(a, b, op="+").model
    ea, eb = torch.broadcast_tensors(a, b)
    assert plan.ok and plan.result_shape == list((a + b).shape) == [3, 3]
    assert [o.expanded_stride for o in plan.operands] == [list(ea.stride()), list(eb.stride())]
    assert plan.result_values == [format_value(v) for v in (a + b).reshape(-1).tolist()]
