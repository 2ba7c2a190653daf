"""End to end in real JupyterLab + Debian Chromium: a GPT-2-small-shaped model (12 blocks, d=768, written
in the notebook) opens folded, its blocks stacked, bars equal to torch's norms, a click expands a block,
search finds a parameter, the inspector of a folded module lists its parameters."""

from __future__ import annotations

import json
import re

import pytest

from labdriver import ARTIFACTS, LabNotebook, screenshot_in_dark, websocket_bytes
from scenarios import GPT2_SOURCE

pytestmark = pytest.mark.browser

CELLS = [
    "%load_ext forgeviz\nimport torch, forgeviz",
    GPT2_SOURCE + "\n\ntorch.manual_seed(0)\nmodel = GPT(vocab=1024, seq=64, d=768, n_layer=12, n_head=12)\n"
    "idx = torch.randint(0, 1024, (1, 32))\n"
    "loss = torch.nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten())",
    "g = forgeviz.graph(loss)\ng",  # 2
    "loss.backward()",  # 3: the graph above gains its gradients
    "print(' '.join(f'{torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in b.parameters()])).item():.6e}'"
    " for b in model.h))",  # 4: torch's norm of each block's parameter gradients
    "g",  # 5: the same widget displayed again
]
BOXES = ".fv-graph .fv-node, .fv-graph .fv-box"


def test_gpt2_opens_folded_stacks_blocks_expands_searches_and_inspects(page, lab):
    received = websocket_bytes(page)
    nb = LabNotebook.written(page, lab, "gpt2.ipynb", CELLS)
    nb.run_cells(2)
    mark = len(received)
    nb.run_cell(2)
    view = nb.output(2).locator(".fv-root")
    page.wait_for_selector(".jp-Cell:nth-child(3) .fv-root[data-fv-state=ready]")
    first_display = sum(received[mark:])  # the graph, its state and the widget's module
    boxes = view.locator(BOXES)
    first_view = boxes.count()
    assert 3 <= first_view <= 40, first_view
    stack = view.locator('[data-fv-repeat="12"]')
    assert stack.count() == 1
    assert "× 12" in stack.text_content()
    assert view.locator('[data-fv-module="wte"]').count() == 1  # top-level modules are boxes
    assert view.locator(".fv-graph .fv-node").count() < 20  # ...not 530 Nodes

    # backward in a later cell: each block's bar is torch's norm of its parameters' gradients.
    mark = len(received)
    nb.run_cell(3)
    stack.locator(".fv-bar-fill").nth(11).wait_for()
    refresh = sum(received[mark:])  # only the state: the graph is not sent again
    (ARTIFACTS / "gpt2-bytes.json").write_text(json.dumps({"first_display": first_display, "refresh": refresh}))
    print(f"GPT-2-small shape over the websocket: first display {first_display} bytes, refresh {refresh}")
    assert first_display <= 300_000 and refresh <= 50_000
    nb.run_cell(4)
    expected = [float(v) for v in nb.output(4).text_content().split()]
    titles = stack.locator(".fv-bar title").all_text_contents()
    assert len(titles) == 12
    for k, (title, norm) in enumerate(zip(titles, expected)):
        assert title.startswith(f"h.{k}:"), title
        shown = float(re.search(r"=\s*([-\d.e+]+)", title).group(1))
        assert shown == pytest.approx(norm, rel=1e-2), (title, norm)
    nb.output(2).screenshot(path=str(ARTIFACTS / "gpt2-folded-light.png"))

    # A click on block 4's bar expands that block in place: four stay stacked before it, seven after.
    stack.locator('.fv-bar[data-instance="4"]').click()
    view.locator('g.fv-cluster[data-fv-module="h.4"]').wait_for()
    page.wait_for_selector(".jp-Cell:nth-child(3) .fv-root[data-fv-state=ready]")
    assert view.locator('[data-fv-repeat="4"]').count() == 1 and view.locator('[data-fv-repeat="7"]').count() == 1
    view.locator(".fv-collapse-all").click()
    page.wait_for_selector('.jp-Cell:nth-child(3) [data-fv-repeat="12"]')
    # Enter on the stack expands its first block; the other eleven stay stacked.
    view.locator('[data-fv-repeat="12"]').focus()
    page.keyboard.press("Enter")
    block = view.locator('g.fv-cluster[data-fv-module="h.0"]')
    block.wait_for()
    # Displayed again, the widget opens as it was left.
    nb.run_cell(5)
    nb.output(5).locator('g.fv-cluster[data-fv-module="h.0"]').wait_for()
    assert nb.output(5).locator('[data-fv-repeat="11"]').count() == 1
    page.wait_for_selector(".jp-Cell:nth-child(3) .fv-root[data-fv-state=ready]")
    assert view.locator('[data-fv-repeat="11"]').count() == 1
    assert view.locator(BOXES).count() > first_view
    inner = view.locator('g.fv-cluster[data-fv-module="h.0.attn"], [data-fv-module="h.0.attn"]')
    assert inner.count() >= 1
    nb.output(2).screenshot(path=str(ARTIFACTS / "gpt2-expanded-light.png"))

    # Search a parameter: it is highlighted, its block opened.
    search = view.locator(".fv-search-box input")
    search.fill("h.3.attn.c_attn.weight")
    search.press("Enter")
    match = view.locator('.fv-match[data-label="h.3.attn.c_attn.weight"]')
    match.wait_for()
    assert view.locator('g.fv-cluster[data-fv-module="h.3"]').count() == 1
    assert "1" in view.locator(".fv-search-count").text_content()

    # The inspector of a folded module: its parameters with their gradients.
    view.locator(".fv-collapse-all").click()
    page.wait_for_selector('.jp-Cell:nth-child(3) [data-fv-repeat="12"]')
    view.locator('.fv-box[data-fv-module="ln_f"]').click()
    inspector = view.locator(".fv-inspector")
    page.wait_for_function("el => el.querySelector('table') && el.textContent.includes('bias')",
                           arg=inspector.element_handle(), timeout=30_000)
    rows = inspector.locator("table tbody tr").all_text_contents()
    assert any(r.startswith("weight") for r in rows) and any(r.startswith("bias") for r in rows), rows
    assert "LayerNorm" in inspector.text_content()
    nb.output(2).screenshot(path=str(ARTIFACTS / "gpt2-inspector-light.png"))

    screenshot_in_dark(page, nb.output(2), str(ARTIFACTS / "gpt2-dark.png"))
