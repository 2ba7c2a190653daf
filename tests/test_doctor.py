"""The doctor (issue 16): each detector fires on its incident's seed, at the right cell and line, and not
on its clean twin; the user's results and exceptions stay exactly as torch makes them."""

from __future__ import annotations

import re
import sys

import pytest
import torch
from torch.nn.modules import module as nn_module
from torch.optim import optimizer as optim_module

from forgeviz._capture.doctor import Doctor, disable_doctor, enable_doctor, graph_bytes
from forgeviz._capture.session import get_session
from forgeviz.model.panel import FINDING_KINDS, Finding

SETUP = """\
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 2)
xv = torch.randn(5, 4)
"""


@pytest.fixture
def doctor(nb):
    """The kernel's doctor, as a side panel installs it; uninstalled afterwards."""
    installed = enable_doctor(get_session())
    yield installed
    disable_doctor(get_session())
    assert get_session().doctor is None


def plain(code: str, setup: str = SETUP) -> dict:
    """The oracle: the same code outside any cell, without forgeviz."""
    namespace: dict = {"torch": torch}
    exec(setup + code, namespace)  # noqa: S102 - the test's own cells, run without forgeviz as the oracle
    return namespace


def run(nb, code: str):
    """Run a cell; returns (its execution count, its ExecutionResult)."""
    result = nb.run(code)
    assert result.error_before_exec is None
    return result.execution_count, result


def found(doctor: Doctor, kind: str) -> list[Finding]:
    assert kind in FINDING_KINDS
    return [f for f in doctor.findings if f.kind == kind]


def only(doctor: Doctor, kind: str) -> Finding:
    rows = found(doctor, kind)
    assert len(rows) == 1, doctor.findings
    return rows[0]


def reported_bytes(finding: Finding) -> int:
    return int(re.search(r"(\d+) bytes", finding.explanation).group(1))


# --- swallowed-error -------------------------------------------------------------------------------
SWALLOWED = """\
try:
    out = torch.ones(2, device="meta") + torch.ones(2)
except Exception:
    out = torch.ones(2)
"""


def test_a_device_mismatch_caught_by_a_broad_except_is_a_swallowed_error(nb, doctor):
    cell, result = run(nb, SWALLOWED)
    assert result.error_in_exec is None
    assert torch.equal(nb["out"], torch.ones(2))  # the user's result: the except branch's, as without forgeviz
    finding = only(doctor, "swallowed-error")
    assert (finding.cell, finding.line, finding.count) == (cell, 2, 1)
    assert finding.source == 'out = torch.ones(2, device="meta") + torch.ones(2)'
    assert "add" in finding.explanation and "RuntimeError" in finding.explanation
    assert "on meta" in finding.explanation and "on cpu" in finding.explanation  # the operands' devices
    assert "one device" in finding.fix
    assert doctor.warnings == []
    looped = "for attempt in range(3):\n" + "".join("    " + line + "\n" for line in SWALLOWED.splitlines())
    cell, _ = run(nb, looped)  # the same place again: counted, not a new row
    assert [(f.cell, f.line, f.count) for f in found(doctor, "swallowed-error")][1:] == [(cell, 3, 3)]


def test_the_same_error_reaching_the_notebook_is_not_swallowed_and_is_torchs_own(nb, doctor):
    twin = 'out = torch.ones(2, device="meta") + torch.ones(2)'
    with pytest.raises(RuntimeError) as caught:
        plain(twin, "")
    error = nb.run(twin).error_in_exec
    assert type(error) is RuntimeError and str(error) == str(caught.value)
    assert found(doctor, "swallowed-error") == []
    # caught and raised again as another error: what reached the notebook says so; nothing swallowed
    chained = "try:\n    " + twin + "\nexcept RuntimeError as e:\n    raise ValueError('on meta') from e"
    assert type(nb.run(chained).error_in_exec) is ValueError
    assert found(doctor, "swallowed-error") == []


def test_the_users_exception_object_passes_unchanged_whether_caught_or_not(nb, doctor):
    nb.ok("""\
MINE = KeyError("the user's own")

class Boom(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.add:
            raise MINE
        return super().__torch_function__(func, types, args, kwargs or {})

boom = torch.ones(2).as_subclass(Boom)
""")
    mine = nb["MINE"]
    assert nb.run("torch.Tensor.add(boom, 1)").error_in_exec is mine  # not wrapped, not copied
    cell, result = run(nb, "try:\n    torch.Tensor.add(boom, 1)\nexcept KeyError as e:\n    caught = e")
    assert result.error_in_exec is None and nb["caught"] is mine and mine.args == ("the user's own",)
    finding = only(doctor, "swallowed-error")
    assert (finding.cell, finding.line) == (cell, 2) and "KeyError" in finding.explanation


def test_an_error_inside_an_installed_library_caught_by_the_cell_is_found_at_the_cells_line(nb, doctor, tmp_path,
                                                                                              monkeypatch):
    library = tmp_path / "site-packages"  # where an installed model's code lives (a transformers model, say)
    library.mkdir()
    (library / "fakelib.py").write_text("import torch\n\ndef forward(x):\n    return x + torch.ones(2)\n")
    monkeypatch.syspath_prepend(str(library))
    nb.ok("import fakelib")
    cell, result = run(nb, 'try:\n    out = fakelib.forward(torch.ones(2, device="meta"))\nexcept Exception:\n    pass')
    assert result.error_in_exec is None
    finding = only(doctor, "swallowed-error")
    assert (finding.cell, finding.line) == (cell, 2) and f"fakelib.py:4 (called from cell [{cell}], line 2)" in \
        finding.explanation
    del sys.modules["fakelib"]


def test_a_failed_backward_caught_by_the_user_is_a_swallowed_error_too(nb, doctor):
    cell, result = run(nb, "w = torch.ones(2, requires_grad=True)\ns = w.sigmoid()\ns.mul_(2)\n"
                           "try:\n    s.sum().backward()\nexcept RuntimeError:\n    pass")
    assert result.error_in_exec is None
    finding = only(doctor, "swallowed-error")
    assert (finding.cell, finding.line) == (cell, 5) and "backward" in finding.explanation


# --- missing-zero-grad -----------------------------------------------------------------------------
NO_ZERO_GRAD = """\
for step in range(3):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
"""
ACCUMULATION = """\
for step in range(3):
    for micro in range(2):
        loss = torch.nn.functional.mse_loss(model(x), y) / 2
        loss.backward()
    opt.step()
    opt.zero_grad()
"""


def test_steps_without_zero_grad_are_found_at_the_backward_that_adds_to_a_stepped_grad(nb, doctor):
    nb.ok(SETUP)
    cell, result = run(nb, NO_ZERO_GRAD)
    assert result.error_in_exec is None
    finding = only(doctor, "missing-zero-grad")
    assert (finding.cell, finding.line, finding.source) == (cell, 3, "loss.backward()")
    assert finding.count == 2  # steps 2 and 3 each applied gradients summed across a step
    assert "model.0.weight" in finding.explanation and "model.2.bias" in finding.explanation
    assert "SGD.step()" in finding.explanation and "zero_grad" in finding.fix
    oracle = plain(NO_ZERO_GRAD)  # the user's training went exactly as without forgeviz
    for mine, theirs in zip(nb["model"].parameters(), oracle["model"].parameters()):
        assert torch.equal(mine, theirs) and torch.equal(mine.grad, theirs.grad)


@pytest.mark.parametrize("reset", ["opt.zero_grad()", "opt.zero_grad(set_to_none=False)"])
def test_deliberate_accumulation_then_one_step_then_a_reset_is_not_a_finding(nb, doctor, reset):
    nb.ok(SETUP)
    nb.ok(ACCUMULATION.replace("opt.zero_grad()", reset))
    nb.ok(ACCUMULATION.replace("opt.zero_grad()", reset))  # and across cells
    assert doctor.findings == [] and doctor.warnings == []


# Each parameter is followed, not one per optimizer: (the optimizer and what the loop does before each step's
# forward, the parameters whose .grad sums across steps)
FOLLOWED = {
    "frozen first": ("model[0].weight.requires_grad_(False)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)",
                     "pass", ["model.0.bias", "model.2.weight", "model.2.bias"]),
    "unused first": ("extra = torch.nn.Parameter(torch.ones(3))\n"
                     "opt = torch.optim.SGD([extra, *model.parameters()], lr=0.1)",
                     "pass", ["model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias"]),
    "two groups": ("opt = torch.optim.SGD([{'params': model[0].parameters()},\n"
                   "                       {'params': model[2].parameters(), 'lr': 0.01}], lr=0.1)",
                   "pass", ["model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias"]),
    "first layer reset only": ("opt = torch.optim.SGD(model.parameters(), lr=0.1)", "model[0].zero_grad()",
                               ["model.2.weight", "model.2.bias"]),
}


@pytest.mark.parametrize("case", list(FOLLOWED))
def test_missing_zero_grad_follows_every_parameter_of_every_group(nb, doctor, case):
    make, before, expected = FOLLOWED[case]
    setup = SETUP.replace("opt = torch.optim.SGD(model.parameters(), lr=0.1)\n", make + "\n")
    loop = NO_ZERO_GRAD.replace("for step in range(3):\n", f"for step in range(3):\n    {before}\n")
    nb.ok(setup)
    cell, result = run(nb, loop)
    assert result.error_in_exec is None
    finding = only(doctor, "missing-zero-grad")
    assert (finding.cell, finding.line, finding.source, finding.count) == (cell, 4, "loss.backward()", 2)
    assert f"the .grad of {len(expected)} parameters ({', '.join(expected)})" in finding.explanation
    oracle = plain(loop, setup)
    for mine, theirs in zip(nb["model"].parameters(), oracle["model"].parameters()):
        assert torch.equal(mine, theirs) and (mine.grad is None) == (theirs.grad is None)
        assert mine.grad is None or torch.equal(mine.grad, theirs.grad)


RESETS = {
    "zero_grad(set_to_none=False), foreach": ("opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)",
                                              "opt.zero_grad(set_to_none=False)"),
    "p.grad = None": ("", "for p in model.parameters():\n        p.grad = None"),
    "p.grad.zero_()": ("", "for p in model.parameters():\n        p.grad.zero_()"),
    "p.grad.data.zero_()": ("", "for p in model.parameters():\n        p.grad.data.zero_()"),
}


@pytest.mark.parametrize("reset", list(RESETS))
def test_every_kind_of_reset_between_accumulation_and_the_next_steps_is_a_reset(nb, doctor, reset):
    make, code = RESETS[reset]
    nb.ok(SETUP + make + "\n")
    loop = ACCUMULATION.replace("    opt.zero_grad()\n", f"    {code}\n")
    loop = loop.replace("    for micro", "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n    for micro")
    nb.ok(loop)
    nb.ok(loop)
    assert doctor.findings == [] and doctor.warnings == []
    assert all(torch.equal(a, b) for a, b in zip(nb["model"].parameters(),
                                                  plain(loop + loop, SETUP + make + "\n")["model"].parameters()))


TWO_OPTIMIZERS = """\
critic = torch.nn.Linear(2, 1)
opt_c = torch.optim.SGD(critic.parameters(), lr=0.1)
for step in range(3):
    opt_c.zero_grad(set_to_none=False)
    critic(model(x).detach()).mean().backward()
    opt_c.step()
    opt.zero_grad(set_to_none=False)
    (-critic(model(x)).mean()).backward()  # adds into the critic's stepped .grads too: zeroed before its step
    opt.step()
"""


@pytest.mark.parametrize("foreach", [False, True])
def test_a_second_optimizers_backward_into_grads_zeroed_before_their_step_is_not_a_finding(nb, doctor, foreach):
    nb.ok(SETUP)
    nb.ok(TWO_OPTIMIZERS.replace("lr=0.1)", f"lr=0.1, foreach={foreach})"))
    assert found(doctor, "missing-zero-grad") == [] and doctor.warnings == []
    # the twin: the critic's reset left out, its .grad sums the generator's backward (line 7) and its own
    cell, _ = run(nb, TWO_OPTIMIZERS.replace("    opt_c.zero_grad(set_to_none=False)\n", "").replace(
        "lr=0.1)", f"lr=0.1, foreach={foreach})"))
    finding = only(doctor, "missing-zero-grad")
    assert (finding.cell, finding.line) == (cell, 7) and "critic.weight, critic.bias" in finding.explanation


# --- graph-kept-alive ------------------------------------------------------------------------------
KEEP_LOSSES = """\
losses = []
for step in range(3):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss)
"""
KEEP_OUTPUTS = """\
outputs = []
for step in range(3):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    outputs.append(model(xv))
"""


def test_a_list_of_losses_keeps_their_graphs_alive_and_says_the_bytes_torch_counts(nb, doctor):
    nb.ok(SETUP)
    cell, _ = run(nb, KEEP_LOSSES)
    finding = only(doctor, "graph-kept-alive")
    assert "`losses`" in finding.explanation and "3 earlier backward steps" in finding.explanation
    assert (finding.cell, finding.line) == (cell, 4)  # where its oldest graph was made
    assert finding.source == "loss = torch.nn.functional.mse_loss(model(x), y)"
    # their activations went with each backward: what is left is the losses themselves
    assert reported_bytes(finding) == sum(loss.untyped_storage().nbytes() for loss in nb["losses"]) > 0
    assert "losses.append(loss.item())" in finding.fix
    nb.ok("n_losses = len(losses)")  # another cell, the same list: not reported again (no Out[] to keep model alive)
    assert finding.count == 1


def test_a_list_of_outputs_keeps_their_activations_counted_once_each(nb, doctor):
    nb.ok(SETUP)
    nb.ok(KEEP_OUTPUTS)
    finding = only(doctor, "graph-kept-alive")
    assert "`outputs`" in finding.explanation
    outputs = nb["outputs"]
    # torch's own view of what those graphs hold: each output, the ReLU output its last Linear saved,
    # and the input batch the first Linear saved (one storage for all three); the weights are the model's
    storages = {}
    for out in outputs:
        for t in (out, out.grad_fn._saved_mat1, nb["xv"]):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    assert reported_bytes(finding) == sum(storages.values()) == 3 * (5 * 2 * 4 + 5 * 8 * 4) + 5 * 4 * 4
    assert graph_bytes(outputs)[0] == sum(storages.values())


def test_a_running_total_of_losses_is_one_graph_spanning_the_steps(nb, doctor):
    nb.ok(SETUP)
    nb.ok(KEEP_LOSSES.replace("losses = []", "total = 0").replace("losses.append(loss)", "total = total + loss"))
    finding = only(doctor, "graph-kept-alive")
    assert "`total` holds its autograd graph" in finding.explanation and "total += loss.item()" in finding.fix


def test_losses_kept_as_numbers_keep_no_graph(nb, doctor):
    nb.ok(SETUP)
    nb.ok(KEEP_LOSSES.replace("losses.append(loss)", "losses.append(loss.item())"))
    nb.ok(KEEP_OUTPUTS.replace("outputs.append(model(xv))", "with torch.no_grad():\n        outputs.append(model(xv))"))
    assert doctor.findings == [] and doctor.warnings == []


# --- retain-graph-growth ---------------------------------------------------------------------------
RETAINED = """\
W = torch.randn(4, 4, requires_grad=True)
h = torch.zeros(1, 4)
for step in range(5):
    h = torch.tanh(h @ W + 1)
    h.sum().backward(retain_graph=True)
"""


def test_retain_graph_backwards_over_a_growing_graph_are_found(nb, doctor):
    cell, result = run(nb, RETAINED)
    assert result.error_in_exec is None
    finding = only(doctor, "retain-graph-growth")
    assert (finding.cell, finding.line, finding.source) == (cell, 5, "h.sum().backward(retain_graph=True)")
    assert finding.count == 3  # passes 3, 4 and 5 each reached more Nodes than the one before
    assert reported_bytes(finding) > 0 and "h.detach()" in finding.fix
    oracle = plain(RETAINED, "torch.manual_seed(0)\n")
    nb.ok("torch.manual_seed(0)\n" + RETAINED)
    assert torch.equal(nb["W"].grad, oracle["W"].grad)


def test_retain_graph_over_a_graph_that_does_not_grow_is_not_a_finding(nb, doctor):
    nb.ok(RETAINED.replace("h @ W", "h.detach() @ W"))
    nb.ok("loss = (W * 2).sum()\nfor _ in range(4):\n    loss.backward(retain_graph=True)")
    assert doctor.findings == [] and doctor.warnings == []


# --- inplace-saved-tensor --------------------------------------------------------------------------
WRITE_AFTER_SAVE = """\
w = torch.ones(2, requires_grad=True)
s = w.sigmoid()
s.mul_(2)
s.sum().backward()
"""


def test_an_inplace_write_into_a_saved_output_is_found_at_the_write_and_again_when_backward_fails(nb, doctor):
    with pytest.raises(RuntimeError) as caught:
        plain(WRITE_AFTER_SAVE, "")
    cell, result = run(nb, WRITE_AFTER_SAVE)
    error = result.error_in_exec
    assert type(error) is RuntimeError and str(error) == str(caught.value)  # torch's error, as it was
    assert "modified by an inplace operation" in str(error)
    at_write, at_backward = found(doctor, "inplace-saved-tensor")
    assert (at_write.cell, at_write.line, at_write.source) == (cell, 3, "s.mul_(2)")
    assert "mul_" in at_write.explanation and "SigmoidBackward0" in at_write.explanation
    assert "line 2" in at_write.explanation  # where the Node was made
    assert (at_backward.cell, at_backward.line) == (cell, 4)
    assert "SigmoidBackward0" in at_backward.explanation and f"cell [{cell}], line 3" in at_backward.explanation
    assert found(doctor, "swallowed-error") == []  # it reached the notebook


PLAIN_WRITE = """\
x = torch.randn(3)
w = torch.randn(3, requires_grad=True)
y = (w * x).sum()
x.add_(1)
try:
    y.backward()
except RuntimeError as e:
    caught = e
    raise
"""


def test_a_write_into_a_tensor_without_grad_that_a_node_saved_is_found_at_the_write_and_when_backward_fails(nb,
                                                                                                            doctor):
    with pytest.raises(RuntimeError) as oracle:
        plain(PLAIN_WRITE, "torch.manual_seed(0)\n")
    nb.ok("torch.manual_seed(0)")
    cell, result = run(nb, PLAIN_WRITE)
    error = result.error_in_exec
    assert error is nb["caught"]  # the very exception torch raised, not a copy or a wrapper
    assert type(error) is RuntimeError and error.args == oracle.value.args
    assert "is at version 1; expected version 0" in str(error)
    at_write, at_backward = found(doctor, "inplace-saved-tensor")
    assert (at_write.cell, at_write.line, at_write.source) == (cell, 4, "x.add_(1)")
    assert "MulBackward0" in at_write.explanation and f"mul at cell [{cell}], line 3" in at_write.explanation
    assert "(its other)" in at_write.explanation  # torch's own name for it: y.grad_fn._saved_other
    assert (at_backward.cell, at_backward.line) == (cell, 6)
    assert f"add_ at cell [{cell}], line 4" in at_backward.explanation


def test_a_write_through_a_view_and_one_in_a_function_are_found_at_their_lines(nb, doctor):
    cell, _ = run(nb, "x = torch.randn(3)\nw = torch.randn(3, requires_grad=True)\ny = (w * x).sum()\nx[:1] += 1")
    finding = only(doctor, "inplace-saved-tensor")
    assert (finding.cell, finding.line) == (cell, 4) and f"add_ at cell [{cell}], line 4" in finding.explanation
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        nb["y"].grad_fn.next_functions[0][0]._saved_other  # torch agrees: the Node's saved tensor changed
    doctor.clear()
    defined, _ = run(nb, "def halve(w, x):\n    y = (w * x).sum()\n    x.mul_(0.5)\n    return y")
    nb.ok("y2 = halve(w, torch.randn(3))")  # found from the result the cell keeps, after the cell
    finding = only(doctor, "inplace-saved-tensor")
    assert (finding.cell, finding.line, finding.source) == (defined, 3, "x.mul_(0.5)")


SCALED = """\
class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))
        self.register_buffer("scale", torch.full((3,), 2.0))

    def forward(self, x):
        out = self.w * self.scale * x
        self.scale.mul_(0.9)  # the buffer that mul saved
        return out

m = Scaled()
"""


def test_a_module_writing_in_place_into_a_buffer_it_used_is_found_at_the_write(nb, doctor):
    defined, _ = run(nb, SCALED)
    with pytest.raises(RuntimeError) as oracle:
        plain("m(torch.ones(3)).sum().backward()", SCALED)
    cell, result = run(nb, "out = m(torch.ones(3))\nout.sum().backward()")
    assert type(result.error_in_exec) is RuntimeError and result.error_in_exec.args == oracle.value.args
    at_write, at_backward = found(doctor, "inplace-saved-tensor")
    assert (at_write.cell, at_write.line, at_write.source) == (defined, 9, "self.scale.mul_(0.9)  # the buffer that "
                                                                           "mul saved")
    assert f"mul at cell [{defined}], line 8" in at_write.explanation
    assert (at_backward.cell, at_backward.line) == (cell, 2)
    assert f"mul_ at cell [{defined}], line 9" in at_backward.explanation
    assert torch.equal(nb["m"].scale, torch.full((3,), 1.8))  # the write happened, as without forgeviz


def test_writes_into_tensors_no_live_node_saved_are_not_findings(nb, doctor):
    code = """\
x = torch.randn(3)
w = torch.randn(3, requires_grad=True)
view = x[:2]                 # x has another holder: a view
y = (w + x).sum()            # add saves neither operand
x.add_(1)
y.backward()
z = (w * x).sum()
z.backward()                 # its saved tensors freed
x.mul_(2)
bn = torch.nn.BatchNorm1d(3)
bn(torch.randn(4, 3)).sum().backward()   # its num_batches_tracked.add_(1)
m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(inplace=True))
m(torch.randn(2, 3)).sum().backward()
opt = torch.optim.SGD([w], lr=0.1)
opt.step()
opt.zero_grad(set_to_none=False)        # torch zeroes w.grad in place (its parameter holds it too)
"""
    nb.ok(code)
    oracle = plain(code, "torch.manual_seed(0)\n")
    nb.ok("torch.manual_seed(0)\n" + code)
    assert doctor.findings == [] and doctor.warnings == []
    assert torch.equal(nb["x"], oracle["x"]) and torch.equal(nb["w"], oracle["w"])


def test_an_out_of_place_write_is_not_a_finding(nb, doctor):
    nb.ok(WRITE_AFTER_SAVE.replace("s.mul_(2)", "s = s.mul(2)"))
    nb.ok("a = torch.ones(3, requires_grad=True)\nb = (a * 2).relu_()\nb.sum().backward()")  # relu_ after mul
    assert doctor.findings == [] and doctor.warnings == []


# --- eval-without-no-grad --------------------------------------------------------------------------
VALIDATION = """\
model.eval()
for batch in range(3):
    scores = model(xv)
    accuracy = (scores.argmax(1) == 0).float().mean().item()
"""


def test_validation_outside_no_grad_is_found_when_its_graphs_die_unused(nb, doctor):
    nb.ok(SETUP)
    cell, _ = run(nb, VALIDATION)
    finding = only(doctor, "eval-without-no-grad")
    assert (finding.cell, finding.line, finding.source) == (cell, 3, "scores = model(xv)")
    assert finding.count == 2  # the third graph is still alive in `scores`
    assert "Sequential" in finding.explanation and "torch.no_grad()" in finding.fix
    nb.ok("scores = None")
    assert finding.count == 3  # now it died too, unused


def test_validation_under_no_grad_or_inference_mode_and_forwards_used_later_are_not_findings(nb, doctor):
    nb.ok(SETUP)
    nb.ok("with torch.no_grad():\n" + "".join("    " + line + "\n" for line in VALIDATION.splitlines()))
    nb.ok("with torch.inference_mode():\n    scores = model(xv)")
    nb.ok("out = model(x)")  # its backward comes in a later cell
    nb.ok("class TwoHeads(torch.nn.Module):\n    def forward(self, t):\n        return model(t), model(t) * 2\n"
          "for _ in range(2):\n    unused, used = TwoHeads()(x)\n    used.sum().backward()")  # one output used
    nb.ok("torch.nn.functional.mse_loss(out, y).backward()\nout = None")
    assert doctor.findings == [] and doctor.warnings == []


def test_a_graph_kept_by_a_variable_is_found_once_the_same_call_runs_again_under_no_grad(nb, doctor):
    nb.ok(SETUP)
    cell, result = run(nb, "%%fv memory\nscores = model(xv)  # a graph no backward will use")  # the magic's own exec
    assert result.error_in_exec is None and nb["scores"].grad_fn is not None
    assert found(doctor, "eval-without-no-grad") == []  # a backward may still come (the twin below)
    again, _ = run(nb, "%%fv memory\nwith torch.no_grad():\n    scores_ng = model(xv)")
    finding = only(doctor, "eval-without-no-grad")
    assert (finding.cell, finding.line, finding.source) == (cell, 1, "scores = model(xv)  # a graph no backward "
                                                                    "will use")
    assert f"cell [{again}], line 2" in finding.explanation  # (a %%fv memory cell's lines are its body's)
    assert "`scores` holds" in finding.explanation
    assert "del scores" in finding.fix
    assert torch.equal(nb["scores"], nb["scores_ng"]) and torch.equal(nb["scores"], plain("s = model(xv)")["s"])
    nb.ok("scores = None")  # its graph dies now: told once, not again
    assert finding.count == 1 and doctor.warnings == []


def test_a_graph_kept_for_a_later_backward_or_beside_a_no_grad_call_on_other_data_is_not_a_finding(nb, doctor):
    nb.ok(SETUP)
    nb.ok("%%fv memory\nout = model(x)")
    nb.ok("with torch.no_grad():\n    val = model(xv)")  # another input: a validation batch beside training
    nb.ok("with torch.inference_mode():\n    other = model(x.clone())")
    nb.ok("torch.nn.functional.mse_loss(out, y).backward()")
    nb.ok("kept = model(x)\nwith torch.no_grad():\n    again = model(x)\nkept.sum().backward()")  # used, same cell
    nb.ok("out = kept = None")
    assert doctor.findings == [] and doctor.warnings == []


def test_a_kept_graph_that_an_optimizer_step_made_unusable_is_found_after_that_cell(nb, doctor):
    nb.ok(SETUP)
    cell, _ = run(nb, "preds = model(xv)  # before training, with gradients on")
    assert found(doctor, "eval-without-no-grad") == []
    training, _ = run(nb, CLEAN_LOOP)
    finding = only(doctor, "eval-without-no-grad")
    assert (finding.cell, finding.line, finding.source) == (cell, 1, "preds = model(xv)  # before training, with "
                                                                     "gradients on")
    assert "`preds` keeps" in finding.explanation and "AddmmBackward0's mat2" in finding.explanation
    # torch agrees: that graph can no longer run backward (the step changed the last Linear's weight it saved)
    oracle = plain("preds = model(xv)\n" + CLEAN_LOOP)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        oracle["preds"].sum().backward()
    assert torch.equal(nb["preds"], oracle["preds"]) and nb["losses"] == oracle["losses"]
    nb.ok(CLEAN_LOOP.replace("losses = []", ""))  # told once
    assert finding.count == 1 and doctor.warnings == []


def test_a_kept_graph_still_usable_after_other_steps_is_not_a_finding(nb, doctor):
    nb.ok(SETUP)
    nb.ok("out = model(x)")
    nb.ok("other = torch.nn.Linear(4, 1)\nopt_o = torch.optim.SGD(other.parameters(), lr=0.1)\n"
          "for _ in range(3):\n    opt_o.zero_grad()\n    other(x).sum().backward()\n    opt_o.step()")
    nb.ok("torch.nn.functional.mse_loss(out, y).backward()\nopt.step()")  # it could, and did
    assert doctor.findings == [] and doctor.warnings == []


# --- nonfinite-grad --------------------------------------------------------------------------------
LOG_ZERO = """\
z = torch.zeros(1, requires_grad=True)
loss = torch.log(z).sum()
loss.backward()
"""


def test_log_of_zero_names_log_backward_as_the_first_nonfinite_node(nb, doctor):
    cell, result = run(nb, LOG_ZERO)
    assert result.error_in_exec is None
    assert nb["z"].grad.tolist() == [float("inf")] == plain(LOG_ZERO, "")["z"].grad.tolist()
    finding = only(doctor, "nonfinite-grad")
    assert (finding.cell, finding.line, finding.source) == (cell, 2, "loss = torch.log(z).sum()")
    assert finding.explanation.startswith("LogBackward0") and "infinite" in finding.explanation
    assert f"cell [{cell}], line 3" in finding.explanation  # the backward


@pytest.mark.parametrize("told_at", ["cell-end", "next-backward", "after-a-skipped-backward"])
def test_nonfinite_on_the_device_path_is_told_once_its_numbers_come(nb, doctor, monkeypatch, told_at):
    """On a GPU a backward's numbers come after it, when its read-back's event says so. Here the device path runs
    on the CPU (FORGEVIZ_SUMMARIES=device) with its read-back held back: nothing is told at the cell's end; once
    the numbers can come, the finding is told at the next cell's end (a poll) or at the next backward's end (its
    pass waits for the one before), naming the Node and line of the backward that went non-finite. A backward
    that the cadence skips (%fv grads off) waits for nothing: the finding still waits for its numbers."""
    from forgeviz._capture.device_summary import DeviceSummaries
    from forgeviz._capture.grads import EACH, OFF

    monkeypatch.setenv("FORGEVIZ_SUMMARIES", "device")
    held = [True]
    poll = DeviceSummaries.poll
    monkeypatch.setattr(DeviceSummaries, "poll", lambda self: not self._reading if held[0] else poll(self))
    monkeypatch.setattr(DeviceSummaries, "wait", lambda self: poll(self))
    cell, result = run(nb, LOG_ZERO)
    assert result.error_in_exec is None and nb["z"].grad.tolist() == [float("inf")]
    assert found(doctor, "nonfinite-grad") == []  # its numbers are still to come
    if told_at == "after-a-skipped-backward":
        get_session().recorder.cadence = OFF
        try:
            nb.ok("torch.ones(1, requires_grad=True).sum().backward()")
        finally:
            get_session().recorder.cadence = EACH
        assert found(doctor, "nonfinite-grad") == []
    held[0] = False
    if told_at in ("cell-end", "after-a-skipped-backward"):
        nb.ok("w = 1")
    else:
        nb.ok("torch.ones(1, requires_grad=True).sum().backward()")  # a finite one: its flush waits for the first
    finding = only(doctor, "nonfinite-grad")
    assert (finding.cell, finding.line, finding.source) == (cell, 2, "loss = torch.log(z).sum()")
    assert finding.explanation.startswith("LogBackward0") and "infinite" in finding.explanation
    assert f"cell [{cell}], line 3" in finding.explanation  # the backward's line, looked up when it ended


def test_finite_gradients_are_not_a_finding(nb, doctor):
    nb.ok(LOG_ZERO.replace("torch.log(z)", "torch.log(z + 1)"))
    assert doctor.findings == [] and doctor.warnings == []


# --- a clean training loop, faults, install and uninstall ------------------------------------------
CLEAN_LOOP = """\
losses = []
for step in range(5):
    opt.zero_grad()
    out = model(x)
    loss = torch.nn.functional.mse_loss(out, y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
"""


def test_a_clean_five_step_training_loop_has_no_findings(nb, doctor):
    nb.ok(SETUP)
    nb.ok(CLEAN_LOOP)
    nb.ok(CLEAN_LOOP.replace("losses = []", ""))  # a second cell of steps
    nb.ok("with torch.no_grad():\n    val = torch.nn.functional.mse_loss(model(xv), torch.zeros(5, 2)).item()")
    assert doctor.findings == [] and doctor.warnings == []
    assert nb["losses"] == plain(CLEAN_LOOP + CLEAN_LOOP.replace("losses = []", ""))["losses"]


def test_a_fault_inside_a_detector_is_a_warning_never_the_users_error(nb, doctor, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("simulated doctor bug")

    monkeypatch.setattr(doctor, "_kept_graphs", broken)
    monkeypatch.setattr("forgeviz._capture.doctor._operands", broken)
    nb.ok(SETUP)
    nb.ok(SWALLOWED)
    twin = nb.run('out = torch.ones(2, device="meta") + torch.ones(2)').error_in_exec
    assert type(twin) is RuntimeError and "meta" in str(twin)  # torch's error, not the doctor's
    assert any("simulated doctor bug" in w for w in doctor.warnings)  # (and the nb fixture checks: no fault)


def test_clear_forgets_findings_and_the_doctor_goes_on_watching(nb, doctor):
    nb.ok(SWALLOWED)
    assert doctor.findings
    doctor.clear()
    assert doctor.findings == [] and doctor.warnings == []
    nb.ok(SWALLOWED)
    assert len(found(doctor, "swallowed-error")) == 1


def test_uninstall_removes_every_hook_install_added(nb):
    session = get_session()

    def hooks():  # (module calls: the outermost ones, told by the session's ModuleStack, not a global hook)
        return (dict(optim_module._global_optimizer_pre_hooks), dict(optim_module._global_optimizer_post_hooks),
                dict(nn_module._global_forward_hooks), list(session.modules.root_outputs))

    before = hooks()
    doctor = enable_doctor(session)
    assert session.doctor is doctor and enable_doctor(session) is doctor
    assert [len(h) for h in hooks()] == [len(before[0]), len(before[1]) + 1, len(before[2]), len(before[3]) + 1]
    nb.ok(SETUP + NO_ZERO_GRAD.replace("opt.step()", "opt.step() if step < 2 else None"))  # a pre-step hook waits
    assert [len(h) for h in hooks()] == [len(before[0]) + 1, len(before[1]) + 1, len(before[2]), len(before[3]) + 1]
    nb.ok(VALIDATION)  # module outputs watched
    disable_doctor(session)
    assert session.doctor is None and hooks() == before and not doctor.installed
    doctor.clear()
    nb.ok(SWALLOWED + NO_ZERO_GRAD + VALIDATION)  # nothing watches any more
    assert doctor.findings == []


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA-only: no CUDA GPU on this machine")
def test_the_seeds_silent_cpu_fallback_on_a_real_gpu_is_a_swallowed_error(nb, doctor):
    fallback = """\
model_gpu = torch.nn.Linear(4, 2).cuda()
batch = torch.randn(8, 4)
try:
    out = model_gpu(batch)
except Exception:
    out = model_gpu.cpu()(batch)
"""
    cell, result = run(nb, fallback)
    assert result.error_in_exec is None and nb["out"].device.type == "cpu"  # the user's fallback ran, as without us
    finding = only(doctor, "swallowed-error")
    assert (finding.cell, finding.line) == (cell, 4)
    assert "on cuda:0" in finding.explanation and "on cpu" in finding.explanation
    assert doctor.warnings == []
