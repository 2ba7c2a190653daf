"""Saving a notebook in real JupyterLab saves what its live forgeviz views show now (issue 15): a graph
displayed before ``loss.backward()`` is saved with the gradients torch computed after it (its
forgeviz JSON's state, its summary, and the ∇ 64 badge in its SVG), though Lab's own copy of the
output still holds the display-time bundle. Reopened (trusted: Lab signed it) in a fresh kernel that
has none of its widget models, the graph is drawn from the saved data, not "Error displaying widget"."""

from __future__ import annotations

import json
import re

import pytest

from labdriver import ARTIFACTS, LabNotebook, open_saved

pytestmark = pytest.mark.browser

CELLS = [
    "%load_ext forgeviz\nimport torch, forgeviz",
    "x = torch.tensor([2.], requires_grad=True)\ny = torch.tensor([3.], requires_grad=True)\n"
    "z = x * y\nw = z + x\nloss = w ** 2",
    "forgeviz.graph(loss)",  # 2: displayed before backward
    "loss.backward()\nprint(x.grad.item(), y.grad.item())",  # 3: what torch says
]
MIME = "application/vnd.forgeviz.v1+json"


def _text(v) -> str:
    """A multiline string as nbformat writes it (a list of lines) or a string."""
    return "".join(v) if isinstance(v, list) else v


def _column(table: dict, name: str) -> list:
    """A column of a trait table (src/model/table.ts): its values, or its codes decoded."""
    col = table["columns"][name]
    return [col["values"][c] for c in col["codes"]] if isinstance(col, dict) else col


def _grad_brief(payload: dict, label: str) -> str:
    """The state's gradient brief of the Node labelled ``label``."""
    nodes = payload["traits"]["graph"]["nodes"]
    (nid,) = [i for i, lab in zip(_column(nodes, "id"), _column(nodes, "label")) if lab == label]
    state = payload["traits"]["state"]
    return state["grad_briefs"][state["ids"].index(nid)]


def test_saved_graph_has_the_grads_made_after_it_was_displayed(page, lab):
    nb = LabNotebook.written(page, lab, "refresh.ipynb", CELLS)
    nb.run_cells(3)
    root = nb.output(2).locator(".fv-root")
    page.wait_for_selector(f"[id='{nb.panel_id}'] .jp-Cell:nth-child(3) .fv-root[data-fv-state=ready]")
    nb.run_cell(3)
    root.locator('.fv-node[data-label="x"] .fv-badge-text').wait_for()
    assert "64" in root.locator('.fv-node[data-label="x"] .fv-badge-text').text_content()

    in_page = page.evaluate("""() => {
        const w = window.jupyterapp.shell.currentWidget;
        const d = w.content.widgets[2].model.outputs.get(0).data;
        return {svg: d['image/svg+xml'], plain: d['text/plain'], passes: d[%r].traits.state.backward_passes};
    }""" % MIME)
    assert in_page["passes"] == 0 and "no backward yet" in in_page["plain"]  # the display-time bundle

    page.evaluate("async () => { await window.jupyterapp.commands.execute('docmanager:save'); }")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")

    saved = json.loads((lab["root"] / "refresh.ipynb").read_text(encoding="utf-8"))
    printed = "".join(_text(o.get("text", "")) for o in saved["cells"][3]["outputs"] if o["output_type"] == "stream")
    x_grad, y_grad = (float(v) for v in printed.split())
    assert (x_grad, y_grad) == (64.0, 32.0)  # what torch says

    (output,) = saved["cells"][2]["outputs"]
    data = output["data"]
    payload = data[MIME]
    assert payload["traits"]["state"]["backward_passes"] == 1
    assert float(_grad_brief(payload, "x")) == x_grad
    assert float(_grad_brief(payload, "y")) == y_grad
    assert payload["summary"].endswith("grads after 1 backward")
    assert _text(data["text/plain"]) == payload["summary"]
    assert payload["details"] == {} and "before backward 1" in payload["details_cut"]
    # the live view stays, set aside in the metadata (Lab without forgeviz then draws the SVG)
    assert "application/vnd.jupyter.widget-view+json" not in data
    assert output["metadata"][MIME]["widget_view"]["model_id"]

    svg = _text(data["image/svg+xml"])
    assert "64" not in re.sub(r"<[^>]*>", " ", in_page["svg"])
    texts = " ".join(re.findall(r">([^<>]+)<", svg))
    assert "∇" in texts and "64" in texts and "32" in texts, texts
    if "text/html" in data:  # the kernel's bundle may carry the picture as HTML too: refreshed alike
        html = _text(data["text/html"])
        assert html.startswith('<div class="forgeviz-static"><svg') and "64" in html
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "saved-refresh-graph.svg").write_text(svg, encoding="utf-8")

    # Reopen in a new page and a new kernel: the widget models are gone; the output is trusted.
    page.evaluate("async () => { await window.jupyterapp.shell.currentWidget.sessionContext.shutdown(); }")
    panel_id = open_saved(page, lab, "refresh.ipynb", 4)
    out = page.locator(f"[id='{panel_id}'] .jp-Notebook .jp-Cell").nth(2).locator(".jp-OutputArea")
    assert page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets[2].model.outputs.get(0).trusted")
    try:
        page.wait_for_selector(f"[id='{panel_id}'] .fv-saved-output .fv-root[data-fv-state=ready]", timeout=60_000)
    except Exception:
        out.screenshot(path=str(ARTIFACTS / "failure.png"))
        raise AssertionError(f"the reopened output: {out.inner_html()[:600]!r}")
    assert "Error displaying widget" not in out.text_content()
    drawn = out.locator(".fv-saved-output .fv-root")
    assert "64" in drawn.locator('[data-fv-node][data-label="x"] .fv-badge-text').text_content()
    out.screenshot(path=str(ARTIFACTS / "saved-refresh-reopened.png"))
