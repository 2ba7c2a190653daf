"""The doctor's ``graph-break`` finding (issue 26): a cell whose compiled model broke its graph is told
Dynamo's reason in its own words, at the user's cell and line, once per place, with Dynamo's own
counters (``torch._dynamo.utils.counters["graph_break"]``) as the oracle for how many times."""

from __future__ import annotations

import pytest
import torch
from test_panel import FakeComm
from torch._dynamo.utils import counters

from forgeviz import panel
from forgeviz._capture.doctor import disable_doctor, enable_doctor
from forgeviz._capture.session import get_session


def model_cell(name: str, forward: str) -> str:
    """A cell defining module ``name`` (one Linear(4, 3), ``fc``) whose forward is ``forward`` (its
    first line is line 6 of the cell)."""
    body = "".join(f"        {line}\n" for line in forward.splitlines())
    return (f"class {name}(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            f"        self.fc = torch.nn.Linear(4, 3)\n    def forward(self, x):\n{body}")


# a model whose forward prints (line 6 of its cell): Dynamo compiles around the print
PRINTS = model_cell("Printing", 'print("forward", x.shape)\nreturn self.fc(x).relu()')
# .item() in forward (line 6)
ITEM = model_cell("Scaled", "scale = x.abs().max().item()\nreturn self.fc(x / scale)")
# a branch on a tensor's value (line 6)
BRANCH = model_cell("Branching", "if x.sum() > 0:\n    return self.fc(x)\nreturn -self.fc(x)")
CLEAN = model_cell("Clean", "return self.fc(x).relu()")


def compiled_cell(name: str, calls: int = 3) -> str:
    """A cell that compiles ``name`` with aot_eager and calls it ``calls`` times (Dynamo compiles once), under
    no_grad: the outputs it keeps hold no graphs (else eval-without-no-grad rightly tells that too)."""
    return (f"torch.manual_seed(0)\nmodel = torch.compile({name}(), backend='aot_eager')\nx = torch.randn(2, 4)\n"
            f"with torch.no_grad():\n    outs = [model(x) for _ in range({calls})]\n")


@pytest.fixture
def doctor(nb):
    """The kernel's doctor, as a side panel installs it, from a reset Dynamo; uninstalled afterwards."""
    torch._dynamo.reset()
    counters.clear()
    installed = enable_doctor(get_session())
    yield installed
    disable_doctor(get_session())
    torch._dynamo.reset()


def graph_breaks() -> dict[str, int]:
    """The oracle: Dynamo's own count of graph breaks, by reason."""
    return dict(counters["graph_break"])


def breaks_without_forgeviz(definition: str, name: str) -> dict[str, int]:
    """The oracle: Dynamo's graph breaks, by reason, for the same cells run without forgeviz (Dynamo reset
    before and after)."""
    torch._dynamo.reset()
    counters.clear()
    namespace: dict = {"torch": torch}
    exec(definition + compiled_cell(name), namespace)  # noqa: S102 - the test's own cells, without forgeviz
    found = graph_breaks()
    namespace.clear()  # its class outlives the run (torch's caches): not its compiled model and parameters
    torch._dynamo.reset()
    counters.clear()
    return found


def breaks_of(doctor):
    return [f for f in doctor.findings if f.kind == "graph-break"]


def eager(definition: str, name: str) -> torch.Tensor:
    """The same model, uncompiled and without forgeviz, on the same input: the user's result must match."""
    namespace: dict = {"torch": torch}
    exec(definition, namespace)  # noqa: S102 - the test's own cell, run without forgeviz as the oracle
    torch.manual_seed(0)
    model = namespace.pop(name)()
    namespace.clear()
    return model(torch.randn(2, 4))


def test_a_print_in_forward_is_one_finding_with_dynamos_reason_at_the_prints_line(nb, doctor):
    defined = nb.run(PRINTS).execution_count
    ran = nb.run(compiled_cell("Printing"))
    assert ran.error_in_exec is None
    assert all(torch.equal(out, eager(PRINTS, "Printing")) for out in nb["outs"])
    oracle = graph_breaks()
    assert len(oracle) == 1 and list(oracle.values()) == [1]
    (reason,) = oracle
    assert reason.startswith("Failed to trace builtin operator") and "`print`" in reason
    (finding,) = breaks_of(doctor)
    assert doctor.findings == [finding] and doctor.warnings == []
    assert (finding.cell, finding.line, finding.count) == (defined, 6, 1)
    assert finding.source == 'print("forward", x.shape)'
    # Dynamo's words: its title and its explanation, verbatim
    explanation = reason.splitlines()[1].strip().removeprefix("Explanation: ")
    assert f"Dynamo says: Failed to trace builtin operator: {explanation}." in finding.explanation
    assert f"at cell [{defined}], line 6" in finding.explanation and "`forward`" in finding.explanation
    assert "Move the print out of the compiled forward" in finding.fix and "fullgraph=True" in finding.fix


def test_item_in_forward_names_tensor_item_and_capture_scalar_outputs(nb, doctor):
    oracle = breaks_without_forgeviz(ITEM, "Scaled")
    (reason,) = oracle
    assert "Tensor.item()" in reason
    defined = nb.run(ITEM).execution_count
    assert nb.run(compiled_cell("Scaled")).error_in_exec is None
    assert all(torch.allclose(out, eager(ITEM, "Scaled")) for out in nb["outs"])
    (finding,) = breaks_of(doctor)
    assert (finding.cell, finding.line, finding.count) == (defined, 6, oracle[reason])
    assert finding.source == "scale = x.abs().max().item()"
    assert "Dynamo says: Unsupported Tensor.item() call with capture_scalar_outputs=False" in finding.explanation
    assert "capture_scalar_outputs = True" in finding.fix
    # no finding blames forgeviz's own frames on the user (a break there is a panel warning instead)
    assert not any("session.py" in f.explanation for f in doctor.findings)


def test_a_branch_on_a_tensors_value_is_told_in_dynamos_words(nb, doctor):
    defined = nb.run(BRANCH).execution_count
    assert nb.run(compiled_cell("Branching")).error_in_exec is None
    assert all(torch.equal(out, eager(BRANCH, "Branching")) for out in nb["outs"])
    # Dynamo counts this one as "unimplemented", naming the branch's line: the finding takes its words
    (reason,) = [r for r in counters["unimplemented"] if r.startswith("Data-dependent branching")]
    (finding,) = breaks_of(doctor)
    assert (finding.cell, finding.line, finding.count) == (defined, 6, 1)
    assert finding.source == "if x.sum() > 0:"
    assert "Dynamo says: Data-dependent branching: Detected data-dependent branching" in finding.explanation
    assert "generic_jump" not in finding.explanation
    assert "torch.where" in finding.fix


def test_a_model_without_breaks_gives_no_finding(nb, doctor):
    nb.run(CLEAN)
    assert nb.run(compiled_cell("Clean")).error_in_exec is None
    assert all(torch.equal(out, eager(CLEAN, "Clean")) for out in nb["outs"])
    assert graph_breaks() == {} and counters["stats"]["unique_graphs"] == 1  # it did compile, whole
    assert doctor.findings == [] and doctor.warnings == []


# a compiled function (no module: its cache does not depend on module hooks) printing at line 4
STEP = """\
@torch.compile(backend="aot_eager")
def step(x):
    y = x * 2
    print("step", y.shape)
    return y + 1
"""


def test_a_cached_break_run_again_in_later_cells_is_not_told_again_and_a_new_compile_is(nb, doctor):
    defined = nb.run(STEP).execution_count
    nb.ok("x = torch.ones(3)\nfirst = step(x)")
    (reason,) = graph_breaks()
    (found,) = breaks_of(doctor)
    assert (found.cell, found.line, found.count) == (defined, 4, 1)
    for _ in range(2):  # Dynamo runs its cached graphs: no new break, nothing new to tell
        nb.ok("again = step(x)")
        assert graph_breaks() == {reason: 1}
        assert breaks_of(doctor) == [found] and found.count == 1
    assert torch.equal(nb["again"], torch.ones(3) * 2 + 1)
    # a fresh compile of the same code breaks again at the same line: counted on the same finding
    torch._dynamo.reset()
    nb.ok("again = step(x)")
    assert graph_breaks() == {reason: 2}
    assert breaks_of(doctor) == [found] and found.count == 2
    # the function defined again (a re-run cell) is a new place: a finding of its own
    again = nb.run(STEP).execution_count
    nb.ok("again = step(x)")
    assert [(f.cell, f.line, f.count) for f in breaks_of(doctor)] == [(defined, 4, 2), (again, 4, 1)]
    assert graph_breaks() == {reason: 3} and doctor.warnings == []


def test_a_compiled_model_called_in_later_cells_is_counted_as_dynamo_counts_its_breaks(nb, doctor):
    # (today each capturing cell recompiles a compiled module, as forgeviz's global module hooks change; the
    # finding counts what Dynamo did, whatever that is)
    defined = nb.run(PRINTS).execution_count
    nb.ok(compiled_cell("Printing"))
    for _ in range(2):
        nb.ok("with torch.no_grad():\n    again = model(x)")
    (reason,) = graph_breaks()
    (found,) = breaks_of(doctor)
    assert (found.cell, found.line, found.count) == (defined, 6, graph_breaks()[reason])


def test_breaks_before_the_doctor_came_are_not_told(nb):
    torch._dynamo.reset()
    nb.run(PRINTS)
    nb.ok(compiled_cell("Printing"))
    doctor = enable_doctor(get_session())
    try:
        nb.ok("y = 1")
        assert doctor.findings == []
    finally:
        disable_doctor(get_session())
        torch._dynamo.reset()


def test_the_finding_reaches_the_side_panels_doctor(nb):
    torch._dynamo.reset()
    host = panel.host()
    comm = FakeComm()
    host._opened(comm, {})  # the panel opens: it installs the doctor
    try:
        defined = nb.run(PRINTS).execution_count
        nb.ok(compiled_cell("Printing"))
        (sent,) = [f for f in comm.of_type("state")[-1]["findings"] if f["kind"] == "graph-break"]
        assert (sent["cell"], sent["line"], sent["count"]) == (defined, 6, 1)
        assert sent["source"] == 'print("forward", x.shape)'
        assert "Failed to trace builtin operator" in sent["explanation"]
    finally:
        comm.frontend_closes()
        torch._dynamo.reset()
