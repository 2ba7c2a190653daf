"""The doctor over the example notebooks, run headless as a user runs them: in 06_doctor each cell
tagged ``incident`` gives its finding and nothing else does (its ``fix`` cells included); the other
examples, all correct code, give none."""

from __future__ import annotations

import json

import nbformat
import pytest
from nbclient import NotebookClient

from scenarios import ROOT

EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.ipynb"))

WATCH = ("from forgeviz._capture.doctor import enable_doctor\nfrom forgeviz._capture.session import get_session\n"
         "enable_doctor(get_session())")
REPORT = ("import json\nfrom forgeviz._capture.session import get_session\n"
          "print('FINDINGS', json.dumps([[f.kind, f.cell] for f in get_session().doctor.findings]))\n"
          "print('WARNINGS', json.dumps(get_session().doctor.warnings))")


def run_with_doctor(name: str):
    """``name`` run in a fresh kernel with the doctor watching from its first cell on: the executed
    notebook, its findings as (kind, execution count) and the doctor's warnings."""
    nb = nbformat.read(ROOT / "examples" / name, as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    assert "%load_ext forgeviz" in nb.cells[first].source
    nb.cells.insert(first + 1, nbformat.v4.new_code_cell(WATCH))
    nb.cells.append(nbformat.v4.new_code_cell(REPORT))
    NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=False,
                   resources={"metadata": {"path": str(ROOT / "examples")}}).execute()
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    findings = json.loads(text.split("FINDINGS ", 1)[1].splitlines()[0])
    warnings = json.loads(text.split("WARNINGS ", 1)[1].splitlines()[0])
    return nb, findings, warnings


def test_each_incident_of_the_doctor_example_is_found_in_its_own_cell_and_no_fix_is():
    nb, findings, warnings = run_with_doctor("06_doctor.ipynb")
    assert warnings == []
    tags_by_count = {c.execution_count: c.metadata.get("tags", []) for c in nb.cells if c.cell_type == "code"}
    incidents = {tags[1]: count for count, tags in tags_by_count.items() if tags[:1] == ["incident"]}
    assert len(incidents) == 7
    found = {(kind, cell) for kind, cell in findings}
    for kind, cell in incidents.items():
        assert (kind, cell) in found, f"{kind} not found in its cell [{cell}]; found {sorted(found)}"
    stray = sorted((kind, cell) for kind, cell in found if (kind, cell) not in set(incidents.items()))
    assert stray == [], f"findings outside the incident cells: {stray}"


@pytest.mark.parametrize("name", [n for n in EXAMPLES if n != "06_doctor.ipynb"])
def test_the_other_examples_are_correct_code_and_give_no_finding(name):
    _, findings, warnings = run_with_doctor(name)
    assert findings == [] and warnings == []
