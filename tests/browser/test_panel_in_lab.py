"""End to end in real JupyterLab + Debian Chromium: the forgeviz side panel, opened by its command,
follows the notebook's kernel: it offers to load forgeviz, lists the tensors with torch's shapes,
updates its memory section while a cell runs, shows the doctor's findings for the seeds' incidents,
opens a tensor's stride view, and survives a kernel restart."""

from __future__ import annotations

import pytest

from labdriver import (
    ARTIFACTS,
    LabNotebook,
    kernel_eval,
    screenshot_in_dark,
    wait_kernel_eval,
    wait_panel_status,
    write_notebook,
)

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




def test_the_panel_follows_the_kernel_lists_tensors_updates_live_and_shows_the_doctor(page, lab):
    nb = LabNotebook.written(page, lab, "panel.ipynb", CELLS)
    nb.run_cell(0)
    page.evaluate("() => window.jupyterapp.commands.execute('forgeviz:toggle-panel')")
    panel(page).wait_for()
    wait_panel_status(page, "not-loaded")
    panel(page).locator("button.fv-panel-load").click()
    wait_panel_status(page, "ready")

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
    doctor = kernel_eval(page, "panel.ipynb", DOCTOR_ID)
    screenshot_in_dark(page, panel(page), str(ARTIFACTS / "panel-dark.png"))
    # Lab hides the sidebar a moment to change theme: the panel keeps its connection, and the kernel its doctor
    assert kernel_eval(page, "panel.ipynb", DOCTOR_ID) == doctor != "None"
    assert panel(page).locator('[data-fv-doctor="graph-kept-alive"]').count() == 1

    # click a tensor: its stride view opens in the main area
    rows.locator('[data-fv-tensor="x"]').click()
    page.locator(".jp-MainAreaWidget .fv-strides[data-fv-state=ready]").wait_for(timeout=60_000)
    assert "x" in page.locator(".jp-MainAreaWidget .fv-strides .fv-t-name").first.text_content()

    # restart: the panel says so, then follows the new kernel, which has none of the old tensors
    page.evaluate("""() => { window.__fvStatuses = [];
        const el = document.querySelector('[data-fv-panel]');
        new MutationObserver(() => window.__fvStatuses.push(el.dataset.fvStatus))
          .observe(el, { attributes: true, attributeFilter: ['data-fv-status'] }); }""")
    page.evaluate("""async (path) => {
        const app = window.jupyterapp;
        await app.commands.execute('docmanager:open', {path});
        await app.shell.currentWidget.sessionContext.session.kernel.restart();
    }""", "panel.ipynb")
    wait_panel_status(page, "not-loaded")
    assert "restarted" in page.evaluate("() => window.__fvStatuses"), "the panel never said the kernel restarted"
    panel(page).locator("button.fv-panel-load").click()
    wait_panel_status(page, "ready")
    nb.run_cell(0)
    nb.run_cell(4)
    page.wait_for_selector('[data-fv-tensor="after_restart"]', state="attached", timeout=60_000)
    assert panel(page).locator('[data-fv-tensor="model.0.weight"]').count() == 0
    assert panel(page).locator('[data-fv-tensor="x"]').count() == 0


# which doctor the kernel runs (a new one each time a panel connects after none was)
DOCTOR_ID = "(lambda d: d and id(d))(__import__('importlib').import_module('forgeviz._capture.session').get_session().doctor)"


def rows(page) -> set[str]:
    return set(page.eval_on_selector_all("[data-fv-panel] [data-fv-tensor]", "els => els.map(e => e.dataset.fvTensor)"))


def wait_rows(page, present: str, absent: str) -> None:
    page.wait_for_function("""([present, absent]) => {
        const panel = document.querySelector('[data-fv-panel]');
        return panel.dataset.fvStatus === 'ready' && panel.querySelector(`[data-fv-tensor="${present}"]`)
            && !panel.querySelector(`[data-fv-tensor="${absent}"]`);
    }""", arg=[present, absent], timeout=60_000)


# the kernel's side panel host: is a panel connected, and is the doctor on (it only runs for a panel)
WATCHED = "(__import__('forgeviz.panel').panel.host().open, get_ipython().extension_manager.loaded >= {'forgeviz'})"
DOCTOR = "__import__('importlib').import_module('forgeviz._capture.session').get_session().doctor is not None"


def test_two_notebooks_on_two_kernels_and_closing_and_reopening_the_panel(page, lab):
    write_notebook(lab["root"] / "one.ipynb", ["%load_ext forgeviz\nimport torch\none_only = torch.zeros(2, 3)"])
    write_notebook(lab["root"] / "two.ipynb", ["import torch\ntwo_only = torch.ones(4, 5, 6)",
                                               "two_later = torch.ones(9)"])
    one = LabNotebook(page, lab, "one.ipynb")
    one.run_cell(0)
    page.evaluate("() => window.jupyterapp.commands.execute('forgeviz:toggle-panel')")
    wait_rows(page, "one_only", "two_only")
    assert kernel_eval(page, "one.ipynb", DOCTOR) == "True"

    # a second notebook on its own kernel: the panel follows it (forgeviz is not loaded there yet)
    two = LabNotebook(page, lab, "two.ipynb", navigate=False)
    assert page.evaluate("""() => { const ids = [...window.jupyterapp.shell.widgets('main')]
        .filter(w => w.context && ['one.ipynb', 'two.ipynb'].includes(w.context.path))
        .map(w => w.sessionContext.session.kernel.id);
        return ids.length === 2 && ids[0] !== ids[1]; }""")  # (Lab may restore the earlier test's notebook too)
    wait_panel_status(page, "not-loaded")
    assert rows(page) == set()
    two.run_cell(0)
    panel(page).locator("button.fv-panel-load").click()
    wait_rows(page, "two_only", "one_only")
    assert "4×5×6" in panel(page).locator('[data-fv-tensor="two_only"]').text_content()
    # the first kernel's panel connection was closed when the panel left it: no per-cell work there
    assert kernel_eval(page, "one.ipynb", WATCHED) == "(False, True)"
    assert kernel_eval(page, "one.ipynb", DOCTOR) == "False"

    # back to the first notebook: its tensors, none of the second's
    page.evaluate("(id) => window.jupyterapp.shell.activateById(id)", one.panel_id)
    wait_rows(page, "one_only", "two_only")
    assert kernel_eval(page, "two.ipynb", WATCHED) == "(False, True)"
    assert kernel_eval(page, "one.ipynb", WATCHED) == "(True, True)"

    # close the panel: the kernel hears it and stops its work for it; a cell runs meanwhile
    page.evaluate("(id) => window.jupyterapp.shell.activateById(id)", two.panel_id)
    wait_rows(page, "two_only", "one_only")
    page.evaluate("() => window.jupyterapp.commands.execute('forgeviz:toggle-panel')")
    page.wait_for_function("() => !window.jupyterapp.commands.isToggled('forgeviz:toggle-panel')")
    assert not panel(page).is_visible()
    wait_kernel_eval(page, "two.ipynb", WATCHED, "(False, True)")
    assert kernel_eval(page, "two.ipynb", DOCTOR) == "False"
    two.run_cell(1)

    # reopen it: a new connection, with what the kernel has now (the cell run while it was closed)
    page.evaluate("() => window.jupyterapp.commands.execute('forgeviz:toggle-panel')")
    wait_rows(page, "two_later", "one_only")
    assert {"two_only", "two_later"} <= rows(page)
    assert kernel_eval(page, "two.ipynb", WATCHED) == "(True, True)"
    assert kernel_eval(page, "two.ipynb", DOCTOR) == "True"
