"""One fault boundary (forgeviz/_capture/fault.py) at every entry point where forgeviz runs inside the
user's code. A fault injected at each one leaves the user's results bit-identical to a run without
forgeviz and their own exceptions unchanged; it is told once (``session.faults`` and one log line) and a
view shows it; the next cell runs as if nothing had happened."""

from __future__ import annotations

import logging
import textwrap
from collections import Counter
from typing import Callable, NamedTuple

import pytest
import torch

import forgeviz
from forgeviz._capture import grads, native, session as session_module
from forgeviz._capture.doctor import Doctor, disable_doctor, enable_doctor
from forgeviz._capture.ledger_dispatch import DispatchLedger
from forgeviz._capture.memory import MemoryTracker
from forgeviz._capture.modules import ModuleStack
from forgeviz._capture.session import CaptureSession, get_session
from forgeviz.model import memory as m

INJECTED = "injected fault"

# The user's code: a training loop (module calls, backward, optimizer steps) inside a memory trace.
TRAIN = """\
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
x, y = torch.randn(16, 4), torch.randn(16, 2)
for step in range(2):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
out = model(x)
grads = [p.grad.clone() for p in model.parameters()]
params = [p.detach().clone() for p in model.parameters()]
"""
TRAIN_CELL = "with forgeviz.memory_trace() as trace:\n" + textwrap.indent(TRAIN, "    ")
# The user's own errors: a shape error in an op, and a backward through a freed graph.
SHAPE_ERROR = "torch.ones(3, 4) @ torch.ones(3, 4)\n"
BACKWARD_TWICE = "twice = (model(x) ** 2).sum()\ntwice.backward()\ntwice.backward()\n"
RESULTS = ("loss", "out", "grads", "params")


def fail(*args, **kwargs):
    raise ValueError(f"{INJECTED} (forgeviz's own bug, simulated)")


def _mark_cell_fails(monkeypatch, session):
    monkeypatch.setattr(MemoryTracker, "mark_cell", fail)


def _names_fail(monkeypatch, session):
    class Names:
        scan = staticmethod(fail)

    monkeypatch.setattr("forgeviz.extension.names", lambda: Names())


def _module_output_fails(monkeypatch, session):
    monkeypatch.setattr(session.modules, "root_outputs", [*session.modules.root_outputs, fail])


def _free_fails(monkeypatch, session):
    emit = DispatchLedger._emit

    def free_fails(self, action, rec, when=None):
        if action == m.FREE:
            fail()
        return emit(self, action, rec, when)

    monkeypatch.setattr(DispatchLedger, "_emit", free_fails)


def _python_summary_fails(monkeypatch, session):
    monkeypatch.setattr(native, "hooks", lambda: None)  # Python Node hooks (the C++ ones hand over to them)
    monkeypatch.setattr(grads, "summarize", fail)


def _recategorize_fails(monkeypatch, session):
    from forgeviz._capture.ledger_native import NativeLedger

    monkeypatch.setattr(NativeLedger, "recategorize", fail)
    monkeypatch.setattr(DispatchLedger, "recategorize", fail)


def _naming_an_op_fails(monkeypatch, session):
    """Making an op's tag fails, on both bodies of the mode: the Python one's make_tag and the C++ one, which makes
    the tag itself and asks Python only to name an op it has not named before (here: every op)."""
    for func in list(session_module._OP_NAMES):  # (in place: a mode entered before reads this dict)
        monkeypatch.delitem(session_module._OP_NAMES, func)
    monkeypatch.setattr(session_module, "_name_op", fail)


def _step_line_fails(monkeypatch, session):
    from forgeviz._capture.ledger_native import NativeLedger

    monkeypatch.setattr(NativeLedger, "step_begins", fail)


class Entry(NamedTuple):
    """An entry point, and the forgeviz internal it calls that the test makes raise."""

    inject: Callable  # (monkeypatch, session)
    backend: str = "auto"  # the memory trace's ledger ($FORGEVIZ_MEMORY_BACKEND)
    doctor: bool = False  # a side panel's doctor watching


ENTRIES = {
    # the IPython cell hooks
    "pre_run_cell": Entry(_mark_cell_fails),
    "post_run_cell": Entry(_names_fail),
    # entering and leaving capture (a cell's, and capture()'s)
    "capture-enter": Entry(lambda mp, s: mp.setattr(native, "hooks", fail)),
    "capture-exit": Entry(lambda mp, s: mp.setattr(ModuleStack, "reset", fail)),
    # entering and leaving memory_trace()
    "memory_trace-enter": Entry(lambda mp, s: mp.setattr(MemoryTracker, "_seed_existing", fail)),
    "memory_trace-exit": Entry(lambda mp, s: mp.setattr(MemoryTracker, "_release_gone", fail)),
    # mode dispatch: the tagger, and the memory links it makes per op
    "mode-tag": Entry(_naming_an_op_fails),
    "mode-memory": Entry(lambda mp, s: mp.setattr(MemoryTracker, "claim_saved", fail)),
    # module hooks: the module stack's push, and what its pop tells
    "module-push": Entry(lambda mp, s: mp.setattr(ModuleStack, "_paths_of", fail)),
    "module-pop": Entry(_module_output_fails),
    # Node hooks: arming them, and the gradient summaries they record
    "node-arm": Entry(lambda mp, s: mp.setattr(grads.BackwardRecorder, "arm", fail)),
    "node-summary": Entry(_python_summary_fails),
    # the optimizer step hooks: the mode stepping aside, and the memory timeline's step line
    "optimizer-step": Entry(lambda mp, s: mp.setattr(CaptureSession, "_mode_on_top", fail)),
    "optimizer-step-memory": Entry(_step_line_fails, backend="native"),
    # the memory tracker: allocations and frees (dispatch ledger), categories (module, tensor and step hooks)
    "memory-alloc": Entry(lambda mp, s: mp.setattr(DispatchLedger, "saw_outputs", fail), backend="dispatch"),
    "memory-free": Entry(_free_fails, backend="dispatch"),
    "memory-categories": Entry(_recategorize_fails),
    # the doctor, called from the mode around a backward
    "doctor": Entry(lambda mp, s: mp.setattr(Doctor, "backward_begins", fail), doctor=True),
}


def run_plain(code: str) -> dict:
    """The oracle: ``code`` run with no forgeviz mode, hook or tracker."""
    namespace: dict = {"torch": torch}
    exec(compile(code, "<plain>", "exec"), namespace)  # noqa: S102 - the test's own code
    return namespace


def error_of(code: str, namespace: dict) -> BaseException:
    with pytest.raises(Exception) as caught:  # noqa: PT011 - any: compared with forgeviz's below
        exec(compile(code, "<plain>", "exec"), namespace)  # noqa: S102 - the test's own code
    return caught.value


@pytest.fixture(scope="module")
def oracle():
    """Results and errors without forgeviz (computed before this module loads it)."""
    assert not get_session().installed
    plain = run_plain(TRAIN)
    errors = [error_of(SHAPE_ERROR, plain), error_of(BACKWARD_TWICE, plain)]
    return {name: plain[name] for name in RESULTS}, [(type(e), str(e)) for e in errors]


def same(a, b) -> bool:
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def assert_results(namespace, expected) -> None:
    for name in RESULTS:
        assert same(namespace[name], expected[name]), name


def injected(texts) -> list[str]:
    return [t for t in texts if INJECTED in t]


def told_since(session, count: int) -> list[str]:
    """The faults told since the session's ``fault_count`` was ``count``, each time it was told."""
    new = session.fault_count - count
    assert new <= len(session.faults)  # (it keeps the latest 20)
    return session.faults[len(session.faults) - new:] if new else []


@pytest.mark.faults_expected
@pytest.mark.parametrize("entry", list(ENTRIES), ids=list(ENTRIES))
def test_a_fault_at_each_entry_point_stays_out_of_the_users_cell(oracle, nb, monkeypatch, caplog, entry):
    expected, errors = oracle
    spec = ENTRIES[entry]
    session = get_session()
    monkeypatch.setenv("FORGEVIZ_MEMORY_BACKEND", spec.backend)
    doctor = enable_doctor(session) if spec.doctor else None
    try:
        nb.ok("a = torch.ones(2, requires_grad=True)\nview = forgeviz.graph((a * 2).sum())")
        seen = session.fault_count
        spec.inject(monkeypatch, session)
        caplog.set_level(logging.WARNING, logger="forgeviz")
        caplog.clear()

        result = nb.run(TRAIN_CELL)
        assert result.error_in_exec is None and result.error_before_exec is None
        assert_results(nb.shell.user_ns, expected)  # bit-identical to the run without forgeviz
        assert "trace" in nb.shell.user_ns  # the user's with block ran to its end
        # told once each: in session.faults and in one log line
        told = injected(told_since(session, seen))
        assert told, f"the injected fault at {entry} was not reported"
        assert len(told) == len(set(told)), told
        logged = injected(r.getMessage() for r in caplog.records)
        assert Counter(logged) == Counter(f"forgeviz: {t}" for t in told)
        nb["view"].refresh()  # how a view shows faults: as warnings, at its next refresh
        shown = injected(nb["view"].warnings)
        assert shown and shown == [f"forgeviz: {t}" for t in dict.fromkeys(told)][-len(shown):]

        # the user's own errors are raised unchanged
        for code, (kind, text) in zip((SHAPE_ERROR, BACKWARD_TWICE), errors):
            error = nb.run(code).error_in_exec
            assert type(error) is kind and str(error) == text

        # the next cell, with forgeviz's bug gone, works as usual: the same results, no fault
        monkeypatch.undo()
        monkeypatch.setenv("FORGEVIZ_MEMORY_BACKEND", spec.backend)
        before = session.fault_count
        nb.ok(TRAIN_CELL + "graph = forgeviz.graph(loss)")
        assert_results(nb.shell.user_ns, expected)
        assert session.fault_count == before, session.faults[-3:]
        assert nb["trace"].live_bytes > 0
        graph = nb["graph"].model
        assert any(n.op == "mse_loss" for n in graph.nodes)  # captured and tagged again
        assert torch._C._len_torch_function_stack() == 0  # forgeviz's mode left with the cell
    finally:
        if doctor is not None:
            disable_doctor(session)


# memory_trace() alone records no gradients: no Node hooks to break there
BLOCKS = [(context, entry) for context in ("capture", "memory_trace")
          for entry in ("capture-enter", "capture-exit", "mode-tag", "module-push", "optimizer-step")]
BLOCKS += [("capture", "node-summary"), ("memory_trace", "memory_trace-enter"), ("memory_trace", "memory_trace-exit")]


@pytest.mark.parametrize(("context", "entry"), BLOCKS, ids=[f"{c}:{e}" for c, e in BLOCKS])
def test_a_fault_inside_capture_or_memory_trace_stays_out_of_the_users_block(oracle, monkeypatch, context, entry):
    expected, errors = oracle
    session = get_session()
    assert not session.installed
    enter = forgeviz.capture if context == "capture" else forgeviz.memory_trace
    seen = session.fault_count
    ENTRIES[entry].inject(monkeypatch, session)

    namespace: dict = {"torch": torch}
    with enter():
        exec(compile(TRAIN, "<block>", "exec"), namespace)  # noqa: S102 - the test's own code
    assert_results(namespace, expected)
    for code, (kind, text) in zip((SHAPE_ERROR, BACKWARD_TWICE), errors):
        with pytest.raises(kind) as caught, enter():
            exec(compile(code, "<block>", "exec"), namespace)  # noqa: S102 - the test's own code
        assert str(caught.value) == text
    told = injected(told_since(session, seen))
    assert told, f"the injected fault at {entry} was not reported"

    # everything undone: no mode, no hook left; the next block works
    assert torch._C._len_torch_function_stack() == 0
    assert not session.installed and session.traces == []
    monkeypatch.undo()
    before = session.fault_count
    with enter():
        exec(compile(TRAIN, "<block>", "exec"), namespace)  # noqa: S102 - the test's own code
    assert_results(namespace, expected)
    assert session.fault_count == before


@pytest.mark.parametrize("path", ["native", "python"])
def test_a_fault_while_looking_at_a_failed_op_leaves_the_users_error_as_it_was(oracle, monkeypatch, path):
    """An op raises inside capture, and forgeviz's look at it (the shape error's diagram; the doctor's look)
    fails too: the user gets torch's exception, type and message, not forgeviz's; the fault is told once. On
    both bodies of the mode: native/grad_hooks.cpp's torch_function (with the library) and the Python one."""
    from forgeviz._capture import native

    _, errors = oracle
    kind, text = errors[0]  # SHAPE_ERROR's, without forgeviz
    session = get_session()
    if path == "python":
        monkeypatch.setattr(native, "hooks", lambda: None)
    else:
        assert native.hooks() is not None  # the README's install builds it
    monkeypatch.setattr(CaptureSession, "note_error", fail)
    seen = session.fault_count
    namespace: dict = {"torch": torch}
    with pytest.raises(kind) as caught, forgeviz.capture():
        assert (session._mode.native_op is not None) == (path == "native")
        exec(compile(SHAPE_ERROR, "<block>", "exec"), namespace)  # noqa: S102 - the test's own code
    assert type(caught.value) is kind and str(caught.value) == text
    told = injected(told_since(session, seen))
    assert len(told) == 1 and "noting a failed op's shapes" in told[0], told
    assert torch._C._len_torch_function_stack() == 0
