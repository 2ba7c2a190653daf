"""End to end in real JupyterLab + Debian Chromium: the forgeviz side panel, opened by its command,
follows the notebook's kernel: it offers to load forgeviz, lists the tensors with torch's shapes,
updates its memory section while a cell runs, shows the doctor's findings for the seeds' incidents,
opens a tensor's stride view, and survives a kernel restart."""

from __future__ import annotations

import pytest

from labdriver import ARTIFACTS, LabNotebook, screenshot_in_dark, write_notebook

pytestmark = pytest.mark.browser

CELLS = [
    "import torch",  # 0: forgeviz not loaded yet
    "model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nx = torch.randn(32, 8)\ny = torch.randn(32, 1)\n"
    "for step in range(5):\n    opt.zero_grad()\n    loss = torch.nn.functional.mse_loss(model(x), y)\n"
    "    loss.backward()\n    opt.step()",  # 1: a clean training loop
    # 2: 25 steps that take a while: the memory section updates while the cell runs
    "import time\nkeep = []\nfor i in range(25):\n    keep.append(torch.ones(4096 * (i + 1)))\n    time.sleep(0.06)",
    # 3: the seeds' incidents: a swallowed device mismatch, no zero_grad, losses kept with their graphs
    "try:\n    z = torch.ones(2, device='meta') + torch.ones(2)\nexcept Exception:\n    z = torch.ones(2)\n"
    "losses = []\nfor step in range(3):\n    loss = torch.nn.functional.mse_loss(model(x), y)\n"
    "    loss.backward()\n    opt.step()\n    losses.append(loss)",
    "after_restart = torch.zeros(7, 3)",  # 4
]


def panel(page):
    return page.locator("[data-fv-panel]")


def status(page) -> str:
    return panel(page).get_attribute("data-fv-status")


def wait_status(page, value: str, timeout: int = 60_000) -> None:
    page.wait_for_function("(v) => document.querySelector('[data-fv-panel]')?.dataset.fvStatus === v",
                           arg=value, timeout=timeout)


def test_the_panel_follows_the_kernel_lists_tensors_updates_live_and_shows_the_doctor(page, lab):
    write_notebook(lab["root"] / "panel.ipynb", CELLS)
    nb = LabNotebook(page, lab, "panel.ipynb")
    nb.run_cell(0)
    page.evaluate("() => window.jupyterapp.commands.execute('forgeviz:toggle-panel')")
    panel(page).wait_for()
    wait_status(page, "not-loaded")
    panel(page).locator("button.fv-panel-load").click()
    wait_status(page, "ready")

    nb.run_cell(1)
    page.wait_for_selector('[data-fv-tensor="model.0.weight"]', state="attached")
    rows = panel(page).locator('[data-fv-section="tensors"]')
    # torch's shapes: Linear(8, 16).weight is (16, 8)
    assert "16" in rows.locator('[data-fv-tensor="model.0.weight"]').text_content()
    assert "32" in rows.locator('[data-fv-tensor="x"]').text_content()
    # a clean loop: nothing for the doctor
    assert panel(page).locator("[data-fv-doctor]").count() == 0

    memory = panel(page).locator('[data-fv-section="memory"]')
    page.evaluate("""() => { window.__fvUpdates = [];
        const el = document.querySelector('[data-fv-panel] [data-fv-section="memory"]');
        new MutationObserver(() => window.__fvUpdates.push(el.dataset.fvUpdated))
          .observe(el, { attributes: true, attributeFilter: ['data-fv-updated'] }); }""")
    nb.run_cell(2)
    updates = page.evaluate("() => window.__fvUpdates")
    assert len(set(updates)) >= 3, f"the memory section updated {len(updates)} times during a 1.5 s cell"
    assert memory.get_attribute("data-fv-updated")

    nb.run_cell(3)
    for kind in ("swallowed-error", "missing-zero-grad", "graph-kept-alive"):
        page.wait_for_selector(f'[data-fv-doctor="{kind}"]', timeout=30_000)
    swallowed = panel(page).locator('[data-fv-doctor="swallowed-error"]').text_content()
    assert "meta" in swallowed and "cpu" in swallowed
    assert "losses" in panel(page).locator('[data-fv-doctor="graph-kept-alive"]').text_content()
    panel(page).screenshot(path=str(ARTIFACTS / "panel-light.png"))
    screenshot_in_dark(page, panel(page), str(ARTIFACTS / "panel-dark.png"))

    # click a tensor: its stride view opens in the main area
    rows.locator('[data-fv-tensor="x"]').click()
    page.locator(".jp-MainAreaWidget .fv-strides[data-fv-state=ready]").wait_for(timeout=60_000)
    assert "x" in page.locator(".jp-MainAreaWidget .fv-strides .fv-t-name").first.text_content()

    # restart: the panel says so, then follows the new kernel, which has none of the old tensors
    page.evaluate("""async (path) => {
        const app = window.jupyterapp;
        await app.commands.execute('docmanager:open', {path});
        await app.shell.currentWidget.sessionContext.session.kernel.restart();
    }""", "panel.ipynb")
    wait_status(page, "not-loaded")
    panel(page).locator("button.fv-panel-load").click()
    wait_status(page, "ready")
    nb.run_cell(0)
    nb.run_cell(4)
    page.wait_for_selector('[data-fv-tensor="after_restart"]', state="attached", timeout=60_000)
    assert panel(page).locator('[data-fv-tensor="model.0.weight"]').count() == 0
    assert panel(page).locator('[data-fv-tensor="x"]').count() == 0
