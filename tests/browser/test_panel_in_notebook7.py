"""End to end in real Notebook 7 + Debian Chromium: the forgeviz side panel opens in Notebook 7's right
sidebar by its command and its View menu item, loads forgeviz, lists the tensors with torch's shapes,
opens a tensor's stride view in the bottom area (tall enough to read), and closes with its command."""

from __future__ import annotations

import pytest

from labdriver import (
    ARTIFACTS,
    LabNotebook,
    kernel_eval,
    running_lab,
    wait_kernel_eval,
    wait_panel_status,
    write_notebook,
)

pytestmark = pytest.mark.browser

CELLS = [
    "import torch\n"
    "model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nx = torch.randn(32, 8)\ny = torch.randn(32, 1)\n"
    "for step in range(5):\n    opt.zero_grad()\n    loss = torch.nn.functional.mse_loss(model(x), y)\n"
    "    loss.backward()\n    opt.step()\nt = torch.arange(12.).reshape(3, 4).T",
]


@pytest.fixture(scope="module")
def notebook7(tmp_path_factory):
    with running_lab(tmp_path_factory.mktemp("nb7"), app="notebook") as server:
        yield server


def test_the_panel_works_in_notebook7s_right_sidebar(page, notebook7):
    write_notebook(notebook7["root"] / "nb7.ipynb", CELLS)
    nb = LabNotebook(page, notebook7, "nb7.ipynb")
    assert page.evaluate("() => window.jupyterapp.name") == "Jupyter Notebook"

    # the View menu has the command, and it opens the panel in the right sidebar
    page.get_by_role("menuitem", name="View").click()
    page.get_by_role("menuitem", name="forgeviz panel").click()
    panel = page.locator("#jp-right-stack [data-fv-panel]")
    panel.wait_for()
    wait_panel_status(page, "not-loaded")
    panel.locator("button.fv-panel-load").click()
    wait_panel_status(page, "ready")

    nb.run_cell(0)
    page.wait_for_selector('[data-fv-tensor="t"]', state="attached")
    shapes = kernel_eval(page, "nb7.ipynb", "[tuple(model[0].weight.shape), tuple(t.shape), t.stride()]")
    assert shapes == "[(16, 8), (4, 3), (1, 4)]"
    assert "16×8" in panel.locator('[data-fv-tensor="model.0.weight"]').text_content()
    assert "4×3" in panel.locator('[data-fv-tensor="t"]').text_content()
    assert panel.locator("[data-fv-doctor]").count() == 0
    panel.screenshot(path=str(ARTIFACTS / "panel-notebook7.png"))

    # a click opens t's stride view in the bottom area, with room to read it
    panel.locator('[data-fv-tensor="t"]').click()
    view = page.locator("#jp-down-stack .fv-strides[data-fv-state=ready]")
    view.wait_for(timeout=60_000)
    assert "stride (1, 4)" in view.text_content()
    assert page.locator("#jp-down-stack").bounding_box()["height"] > 300
    page.screenshot(path=str(ARTIFACTS / "panel-notebook7-view.png"))

    # the command closes it again, and the kernel stops its per-cell work for it
    page.evaluate("() => window.jupyterapp.commands.execute('forgeviz:toggle-panel')")
    page.wait_for_function("() => !window.jupyterapp.commands.isToggled('forgeviz:toggle-panel')")
    assert not panel.is_visible()
    wait_kernel_eval(page, "nb7.ipynb", OPEN, "False")


# the kernel's side panel host has a panel connected
OPEN = "__import__('forgeviz.panel').panel.host().open"
