"""The doctor's validation-loop case (issue 26): a loop without no_grad that keeps its outputs holds graphs of
saved activations that no backward will use. It is told at the end of the cell that built them, with the
bytes torch says those graphs saved; a graph kept for a backward in a later cell, and a training loop's
graphs that each met their backward, stay quiet."""

from __future__ import annotations

import re

import pytest
import torch

from forgeviz._capture.doctor import disable_doctor, enable_doctor
from forgeviz._capture.session import get_session

MODEL = """\
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
"""
VAL_LOOP = """\
val = []
for _ in range(20):
    val.append(model(torch.randn(512, 32)))
"""


@pytest.fixture
def doctor(nb):
    installed = enable_doctor(get_session())
    yield installed
    disable_doctor(get_session())


def kinds(doctor) -> list[str]:
    return [f.kind for f in doctor.findings]


def saved_by_torch(code: str, setup: str = MODEL) -> tuple[int, dict]:
    """The oracle, without forgeviz: ``code`` run under torch's saved_tensors_hooks, which see every tensor
    autograd saves for backward. (The bytes of the distinct storages saved, the parameters' left out: they
    live anyway; the namespace.) Each packed tensor stays alive in its graph, so no storage is counted twice."""
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        # detached: a Node that saves its own output (ReLU's result) would otherwise hold its grad_fn through
        # the packed tensor, a cycle through C++ that gc cannot free (the model's first Linear leaked into
        # the next tests' memory totals)
        return t.detach()

    namespace: dict = {"torch": torch}
    exec(setup, namespace)  # noqa: S102 - the test's own cells, run without forgeviz as the oracle
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        exec(code, namespace)  # noqa: S102
    parameters = {p.untyped_storage().data_ptr() for p in namespace["model"].parameters()}
    return sum(n for ptr, n in storages.items() if ptr not in parameters), namespace


def test_a_validation_loop_keeping_its_outputs_is_told_at_the_end_of_its_cell_with_the_bytes_torch_saved(nb,
                                                                                                        doctor):
    nb.ok(MODEL)
    result = nb.run(VAL_LOOP)
    assert result.error_in_exec is None
    assert kinds(doctor) == ["eval-without-no-grad"]
    finding = doctor.findings[0]
    assert (finding.cell, finding.line, finding.source) == (result.execution_count, 3,
                                                            "val.append(model(torch.randn(512, 32)))")
    assert finding.count == 20 and "20 Sequential calls" in finding.explanation and "`val`" in finding.explanation
    held, oracle = saved_by_torch(VAL_LOOP)
    # each graph saved its input batch (the first Linear's mat1) and the ReLU's output (the second Linear's
    # mat1, ReLU's result: one storage); the second Linear's weight is the model's
    assert held == 20 * (512 * 32 * 4 + 512 * 64 * 4) == 3_932_160
    assert int(re.search(r"(\d+) bytes", finding.explanation).group(1)) == held
    assert "torch.no_grad()" in finding.fix and "`val`" in finding.fix
    assert all(torch.equal(a, b) for a, b in zip(nb["val"], oracle["val"]))  # the user's results, as without us
    nb.ok("n = len(val)")  # told once, not at every cell while `val` keeps them
    nb.ok("val = None")  # and not again when they die
    assert [(f.kind, f.count) for f in doctor.findings] == [("eval-without-no-grad", 20)]
    assert doctor.warnings == []


def test_the_same_loop_under_no_grad_is_not_a_finding(nb, doctor):
    nb.ok(MODEL)
    nb.ok("with torch.no_grad():\n" + "".join("    " + line + "\n" for line in VAL_LOOP.splitlines()))
    nb.ok("with torch.inference_mode():\n    val = {i: model(torch.randn(512, 32)) for i in range(3)}")
    assert doctor.findings == [] and doctor.warnings == []


def test_a_graph_kept_for_a_backward_in_a_later_cell_is_not_a_finding(nb, doctor):
    nb.ok(MODEL + "x = torch.randn(512, 32)")
    nb.ok("out = model(x)")
    nb.ok("out.sum().backward()")
    nb.ok("outs = [model(x)]")  # one graph in a list
    nb.ok("torch.stack(outs).sum().backward()")
    # a chain of calls, each fed the last one's output (an RNN's steps): one graph, however many calls
    nb.ok("rnn = torch.nn.RNNCell(10, 10)\nhs = [torch.zeros(4, 10)]\nfor t in range(5):\n"
          "    hs.append(rnn(torch.randn(4, 10), hs[-1]))")
    nb.ok("torch.stack(hs[1:]).sum().backward()")
    assert doctor.findings == [] and doctor.warnings == []


def test_a_training_loop_that_keeps_its_losses_is_graph_kept_alive_not_an_evaluation(nb, doctor):
    nb.ok(MODEL + "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
                  "x, y = torch.randn(512, 32), torch.randn(512, 10)")
    nb.ok("losses = []\nfor step in range(3):\n    opt.zero_grad()\n"
          "    loss = torch.nn.functional.mse_loss(model(x), y)\n    loss.backward()\n    opt.step()\n"
          "    losses.append(loss)")
    assert kinds(doctor) == ["graph-kept-alive"] and doctor.warnings == []
