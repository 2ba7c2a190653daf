"""End to end in real JupyterLab + Debian Chromium: S1 drawn, clicked, updated, exported."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from labdriver import ARTIFACTS, LabNotebook, kernel_eval, websocket_bytes

pytestmark = pytest.mark.browser

CELLS = [
    "%load_ext forgeviz\nimport torch, forgeviz",
    "x = torch.tensor([2.], requires_grad=True)\ny = torch.tensor([3.], requires_grad=True)\n"
    "z = x * y\nw = z + x\nloss = w ** 2",
    "forgeviz.graph(loss)",  # 2: drawn before backward
    "loss.backward()\nx.grad, y.grad",  # 3: the graph above updates by itself
    "%fv graph loss",  # 4: a second display, to measure what it sends
    "forgeviz.graph(torch.ones(3))",  # 5: no history
]


def test_labextension_is_installed_and_enabled():
    out = subprocess.run([sys.executable, "-m", "jupyter", "labextension", "list"],
                         capture_output=True, text=True, check=True)
    text = out.stdout + out.stderr
    line = next((l for l in text.splitlines() if l.strip().startswith("forgeviz")), "")
    assert "enabled" in line and "OK" in line, text


def test_s1_graph_click_update_export(page, lab):
    received = websocket_bytes(page)
    nb = LabNotebook.written(page, lab, "s1.ipynb", CELLS)
    nb.run_cells(2)

    mark = len(received)
    nb.run_cell(2)
    first = nb.output(2).locator(".fv-root")
    first.locator(".fv-canvas").wait_for()
    page.wait_for_selector(".jp-Cell:nth-child(3) .fv-root[data-fv-state=ready]")
    first_display_bytes = sum(received[mark:])

    labels = sorted(first.locator(".fv-node").evaluate_all("els => els.map(e => e.dataset.label)"))
    assert labels == ["loss", "w", "x", "y", "z"]
    # Graphviz came from the Lab extension (once per page), not from the kernel.
    assert page.evaluate("() => typeof (globalThis.__forgeviz__ || {}).loadGraphviz") == "function"
    assert first.locator('.fv-node[data-label="x"] .fv-badge-text').count() == 0  # no grads yet

    # backward in a later cell: the graph above gains its gradients and freed marks by itself.
    nb.run_cell(3)
    x_badge = first.locator('.fv-node[data-label="x"] .fv-badge-text')
    x_badge.wait_for()
    assert "64" in x_badge.text_content()
    assert "32" in first.locator('.fv-node[data-label="y"] .fv-badge-text').text_content()
    assert "fv-freed" in first.locator('.fv-node[data-label="z"]').get_attribute("class")

    # Click x: the inspector shows 64 and the path sums 16 + 48.
    first.locator('.fv-node[data-label="x"]').click()
    inspector = first.locator(".fv-inspector")
    try:
        page.wait_for_function("""el => el.dataset.nodeId && el.textContent.includes('64')""",
                               arg=inspector.element_handle(), timeout=15_000)
    except Exception:
        nb.output(2).screenshot(path=str(ARTIFACTS / "failure.png"))
        raise AssertionError(f"inspector after clicking x: {inspector.get_attribute('data-state')!r} "
                             f"{inspector.text_content()!r}")
    text = inspector.text_content()
    assert "64" in text and "16" in text and "48" in text
    assert "backward #1" in text  # one backward ran in this kernel
    # Click the Mul node (named z): it sent 48 to x and 32 to y.
    first.locator('.fv-node[data-label="z"]').click()
    page.wait_for_function("""el => el.textContent.includes('MulBackward0') && el.textContent.includes('48')""",
                           arg=inspector.element_handle())
    values = inspector.locator(".fv-grad-inputs .fv-values").all_text_contents()
    assert any("48" in v for v in values) and any("32" in v for v in values), values
    # The chain rule at Mul: grad_out × local = grad_in, per input.
    terms = [" ".join(t.split()) for t in inspector.locator(".fv-chain-eq").all_text_contents()]
    assert any("16 × 3 = 48" in t and "x" in t for t in terms), terms
    assert any("16 × 2 = 32" in t and "y" in t for t in terms), terms
    # Its source line goes to its cell (the second), which Lab activates and flashes.
    page.evaluate("() => { window.jupyterapp.shell.currentWidget.content.activeCellIndex = 4; }")
    inspector.locator(".fv-goto").click()
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget.content.activeCellIndex === 1")
    page.wait_for_selector(".jp-Cell.fv-goto-flash", state="attached", timeout=5_000)
    # Keyboard: focus w and press Enter.
    first.locator('.fv-node[data-label="w"]').focus()
    page.keyboard.press("Enter")
    page.wait_for_function("el => el.textContent.includes('AddBackward0')", arg=inspector.element_handle())

    # Export SVG and DOT.
    with page.expect_download() as download:
        first.locator("button.fv-export-svg").click()
    svg = open(download.value.path(), encoding="utf-8").read()
    assert svg.startswith("<svg") or svg.startswith("<?xml")
    for label in ("loss", "MulBackward0", ">x<", ">y<", ">z<"):
        assert label in svg, label
    (ARTIFACTS / "graph.svg").parent.mkdir(exist_ok=True)
    (ARTIFACTS / "graph.svg").write_text(svg)
    with page.expect_download() as download:
        first.locator("button.fv-export-dot").click()
    dot = open(download.value.path(), encoding="utf-8").read()
    assert dot.startswith("digraph forgeviz {") and dot.count("->") == 5

    first.locator('.fv-node[data-label="x"]').click()
    page.wait_for_function("el => el.textContent.includes('64')", arg=inspector.element_handle())
    nb.output(2).screenshot(path=str(ARTIFACTS / "graph-light.png"))

    # A second display sends the graph, the per-instance ESM (about 80 KB) and the saved parts of the
    # output (its data and picture, about 25 KB for S1), but never Graphviz (820 KB) again.
    mark = len(received)
    nb.run_cell(4)
    page.wait_for_selector(".jp-Cell:nth-child(5) .fv-root[data-fv-state=ready]")
    second_display_bytes = sum(received[mark:])
    (ARTIFACTS / "display-bytes.json").write_text(json.dumps(
        {"first_display": first_display_bytes, "second_display": second_display_bytes}))
    print(f"bytes over the websocket: first display {first_display_bytes}, second {second_display_bytes}")
    assert second_display_bytes < 200_000

    nb.run_cell(5)
    message = nb.output(5).locator(".fv-message")
    message.wait_for()
    assert message.text_content().strip() == "no autograd history (requires_grad=False)"
    assert nb.output(5).locator(".fv-node").count() == 0

    # Dark theme follows JupyterLab's CSS variables.
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
    page.wait_for_timeout(500)
    nb.output(2).scroll_into_view_if_needed()
    nb.output(2).screenshot(path=str(ARTIFACTS / "graph-dark.png"))
    bg = first.evaluate("el => getComputedStyle(el.querySelector('.fv-node-box')).fill")
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})")
    assert bg, "node boxes are filled from theme variables"


WITHIN_CELLS = [
    "%load_ext forgeviz\nimport torch, forgeviz",
    # a cell's first pass is summarised, and its second is not (its step measures one without summaries)
    "%fv grads within 50%\nx = torch.tensor([2.], requires_grad=True)\ngrads = []\nfor k in (3, 4):\n"
    "    loss = (x * k) ** 2\n    loss.backward()\n    grads.append(x.grad.clone())",
    "forgeviz.graph(loss)",
]


def test_a_budgeted_cadence_says_how_fresh_a_nodes_figures_are(page, lab):
    nb = LabNotebook.written(page, lab, "within.ipynb", WITHIN_CELLS)
    nb.run_cells(3)
    out, root = nb.view_ready(2, "root")
    inspector = root.locator(".fv-inspector")
    # x's AccumulateGrad: summarised by the first pass (dL/dx = 2 * 3^2 * 2 = 36), not by the second
    root.locator('.fv-node[data-label="x"]').click()
    page.wait_for_function("el => el.dataset.nodeId && el.textContent.includes('1 step ago')",
                           arg=inspector.element_handle(), timeout=15_000)
    fresh = inspector.locator(".fv-grad-fresh").text_content()
    assert fresh == ("from backward #1 · 1 step ago · not summarised since (summarised within 50% of the loop's "
                     "time)"), fresh
    assert "36" in inspector.text_content()
    assert kernel_eval(page, "within.ipynb", "[g.item() for g in grads]") == "[36.0, 100.0]"
    out.screenshot(path=str(ARTIFACTS / "graph-within.png"))
    # the second pass's own graph: none of its Nodes but x was summarised
    root.locator('.fv-node[data-label="loss"]').click()
    page.wait_for_function("el => el.textContent.includes('not summarised in 2 backward passes')",
                           arg=inspector.element_handle(), timeout=15_000)
    assert inspector.locator(".fv-grad-fresh").text_content() == (
        "not summarised in 2 backward passes (summarised within 50% of the loop's time)")
