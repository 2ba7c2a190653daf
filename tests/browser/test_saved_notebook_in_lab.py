"""A notebook saved with forgeviz outputs, reopened in real JupyterLab with no kernel: the graph is
drawn from the saved data (application/vnd.forgeviz.v1+json) and a click on x shows the gradient
torch computed, 64, from the saved details."""

from __future__ import annotations

import json

import nbformat
import pytest
import torch
from nbclient import NotebookClient

from labdriver import ARTIFACTS, open_saved, screenshot_in_dark

pytestmark = pytest.mark.browser

CELLS = [
    "%load_ext forgeviz\nimport torch, forgeviz",
    "x = torch.tensor([2.], requires_grad=True)\ny = torch.tensor([3.], requires_grad=True)\n"
    "z = x * y\nw = z + x\nloss = w ** 2",
    "loss.backward()\nx.grad",
    "forgeviz.graph(loss)",
    "forgeviz.broadcast(torch.ones(3, 1), torch.ones(1, 4))",
]
MIME = "application/vnd.forgeviz.v1+json"


def saved_notebook(path) -> dict:
    """Run CELLS headless (nbclient, a real kernel) and save what it produced, without a kernelspec."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    NotebookClient(nb, kernel_name="python3", timeout=300).execute()
    nb.metadata.pop("kernelspec", None)
    nbformat.write(nb, path)
    (graph_output,) = nb.cells[3].outputs
    return graph_output, nb.cells[4].outputs[0]


def test_saved_graph_is_drawn_and_inspected_with_no_kernel(page, lab):
    output, broadcast = saved_notebook(lab["root"] / "saved.ipynb")
    data = output["data"]
    assert {"text/plain", "application/vnd.jupyter.widget-view+json", MIME} <= set(data)
    assert data["text/plain"] == "forgeviz graph: 5 Nodes, loss ← x, y; grads after 1 backward"
    size = len(json.dumps(data[MIME]))
    print(f"the S1 graph output saved by nbclient: {size} bytes of forgeviz JSON")

    panel_id = open_saved(page, lab, "saved.ipynb", 5)
    out = page.locator(f"[id='{panel_id}'] .jp-Notebook .jp-Cell").nth(3).locator(".jp-OutputArea")
    root = out.locator(".fv-saved-output .fv-root")
    out.locator(".fv-saved-output .fv-root[data-fv-state=ready]").wait_for(timeout=60_000)  # the graph's, not the broadcast's
    # Lab may start a default kernel for a notebook with no kernelspec; a fresh kernel has none of
    # the saved widget models either, so what is drawn here is the saved data, through our renderer.
    assert "Error displaying widget" not in out.text_content()
    labels = sorted(root.locator("[data-fv-node]").evaluate_all("els => els.map(e => e.dataset.label)"))
    assert labels == ["loss", "w", "x", "y", "z"]
    assert "64" in root.locator('[data-fv-node][data-label="x"] .fv-badge-text').text_content()

    root.locator('[data-fv-node][data-label="x"]').click()
    inspector = root.locator(".fv-inspector")
    try:
        page.wait_for_function("el => el.dataset.state === 'ready' && el.textContent.includes('64')",
                               arg=inspector.element_handle(), timeout=15_000)
    except Exception:
        out.screenshot(path=str(ARTIFACTS / "failure.png"))
        raise AssertionError(f"inspector: {inspector.get_attribute('data-state')!r} {inspector.text_content()!r}")
    text = inspector.text_content()
    assert "64" in text and "16" in text and "48" in text
    ARTIFACTS.mkdir(exist_ok=True)
    out.screenshot(path=str(ARTIFACTS / "saved-graph-light.png"))

    screenshot_in_dark(page, out, str(ARTIFACTS / "saved-graph-dark.png"))

    # the broadcast plays from its saved plan, with no kernel: first, next, then play to the last step
    steps = len(broadcast["data"][MIME]["traits"]["plan"]["steps"])
    assert steps > 2
    cell = page.locator(f"[id='{panel_id}'] .jp-Notebook .jp-Cell").nth(4)
    view = cell.locator(".jp-OutputArea [data-step]").first
    view.wait_for(timeout=60_000)
    cell.locator("button.fv-bc-first").click()
    page.wait_for_function("el => el.dataset.step === '0'", arg=view.element_handle())
    cell.locator("button.fv-bc-next").click()
    page.wait_for_function("el => el.dataset.step === '1'", arg=view.element_handle())
    cell.locator("button.fv-bc-play").click()
    page.wait_for_function(f"el => el.dataset.step === '{steps - 1}'", arg=view.element_handle(), timeout=30_000)
    assert str(tuple(torch.broadcast_shapes((3, 1), (1, 4)))) in cell.locator(".jp-OutputArea").text_content()
