"""The doctor as a package: one detector per finding kind, each hearing only the hooks it overrides; a
fault in any hook of any detector is a warning, never the user's error, and the other detectors still
hear every event; adding a detector is one class and one entry in DETECTORS."""

from __future__ import annotations

import pytest
import torch

import forgeviz._capture.doctor as doctor_package
from forgeviz._capture.doctor import DETECTORS, Detector, disable_doctor, enable_doctor
from forgeviz._capture.session import get_session
from forgeviz.model.panel import FINDING_KINDS

SETUP = """\
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 2)
"""
# one cell that reaches every hook: an op that raises (caught), module calls, backwards without a reset
# between steps, optimizer steps, an in-place write into a saved tensor
EVERY_HOOK = """\
try:
    bad = torch.ones(2, device="meta") + torch.ones(2)
except Exception:
    bad = torch.ones(2)
for step in range(3):
    out = model(x)
    loss = torch.nn.functional.mse_loss(out, y)
    loss.backward()
    opt.step()
h = torch.ones(3, requires_grad=True).sigmoid()
h.mul_(2)
"""
FOUND = {"swallowed-error", "missing-zero-grad", "inplace-saved-tensor"}  # what EVERY_HOOK gives


def test_one_detector_per_finding_kind_in_the_panels_order():
    assert [cls.kind for cls in DETECTORS] == FINDING_KINDS


@pytest.mark.parametrize("broken", DETECTORS, ids=[cls.kind for cls in DETECTORS])
def test_a_fault_in_every_hook_of_one_detector_is_a_warning_and_the_others_still_find(nb, monkeypatch, broken):
    def fail(*args, **kwargs):
        raise ValueError("simulated detector bug")

    hooks = broken(None).hooks()
    assert hooks  # every detector hears something
    for hook in hooks:
        monkeypatch.setattr(broken, hook, fail)
    doctor = enable_doctor(get_session())
    try:
        nb.ok(SETUP)
        result = nb.run(EVERY_HOOK)
        assert result.error_in_exec is None
        plain: dict = {"torch": torch}
        exec(SETUP + EVERY_HOOK, plain)  # noqa: S102 - the oracle: the same cells without forgeviz
        assert torch.equal(nb["h"], plain["h"]) and torch.equal(nb["bad"], plain["bad"])
        assert all(torch.equal(a, b) for a, b in zip(nb["model"].parameters(), plain["model"].parameters()))
        assert doctor.warnings == [f"the doctor's {broken.kind} check failed: ValueError: simulated detector bug"]
        assert {f.kind for f in doctor.findings} == FOUND - {broken.kind}
    finally:
        disable_doctor(get_session())


def test_a_detector_is_one_class_and_one_list_entry(nb, monkeypatch):
    class Calls(Detector):
        """Counts the outermost module calls and tells them after the cell."""

        kind = "eval-without-no-grad"

        def __init__(self, doctor) -> None:
            super().__init__(doctor)
            self.calls: list[str] = []

        def module_call(self, module, args, output) -> None:
            self.calls.append(type(module).__name__)

        def end_cell(self, end) -> None:
            if self.calls:
                self.doctor.report(self.kind, None, f"{len(self.calls)} calls", "none", times=len(self.calls))
                self.calls.clear()

    monkeypatch.setattr(doctor_package, "DETECTORS", (Calls,))
    doctor = enable_doctor(get_session())
    try:
        assert [type(d) for d in doctor.detectors] == [Calls] and doctor.detectors[0].hooks() == ["end_cell",
                                                                                                  "module_call"]
        nb.ok(SETUP)
        cell = nb.run("with torch.no_grad():\n    for _ in range(3):\n        model(x)").execution_count
        assert [(f.kind, f.cell, f.explanation, f.count) for f in doctor.findings] == [
            ("eval-without-no-grad", cell, "3 calls", 3)]
        assert doctor.warnings == []
    finally:
        disable_doctor(get_session())
