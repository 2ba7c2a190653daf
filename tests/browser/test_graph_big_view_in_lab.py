"""End to end in real JupyterLab + Debian Chromium: a 10,000-op loop opens as one box; "Expand all"
shows all 10,001 Nodes (torch's count), laid out in a worker and drawn windowed: the Nodes near the
view are groups with their hooks, the rest an overview. Search centres a match and draws it; a pan
moves the window; a click inspects a Node; the SVG export holds every Node."""

from __future__ import annotations

import re

import pytest

from labdriver import ARTIFACTS, LabNotebook, screenshot_in_dark

pytestmark = pytest.mark.browser

CELLS = [
    "%load_ext forgeviz\nimport torch, forgeviz",
    "t = torch.randn(3, requires_grad=True)\nh = t\nfor _ in range(10_000):\n    h = h * 1.0001",
    "g = forgeviz.graph(h)\ng",  # 2
    # 3: torch's own count of the Nodes behind h
    "seen, todo = set(), [h.grad_fn]\n"
    "while todo:\n"
    "    n = todo.pop()\n"
    "    if n is not None and n not in seen:\n"
    "        seen.add(n); todo.extend(f for f, _ in n.next_functions)\n"
    "print(len(seen))",
]
ROOT = ".jp-Cell:nth-child(3) .fv-root"
DRAWN = ".fv-graph .fv-node, .fv-graph .fv-box"


def overview_boxes(view) -> int:
    """Boxes drawn as overview paths: one closing "z" each."""
    return view.evaluate("el => [...el.querySelectorAll('.fv-overview path')]"
                         ".reduce((n, p) => n + (p.getAttribute('d').match(/z/g) || []).length, 0)")


def test_a_10k_op_loop_expands_into_a_windowed_view(page, lab):
    nb = LabNotebook.written(page, lab, "loop.ipynb", CELLS)
    nb.run_cells(4)
    nodes = int(nb.output(3).text_content().strip())
    assert nodes == 10_001  # 10,000 MulBackward0 and t's AccumulateGrad
    page.wait_for_selector(f"{ROOT}[data-fv-state=ready]")
    view = nb.output(2).locator(".fv-root")
    assert view.locator(DRAWN).count() == 2  # t, and the loop's one box
    assert "mul × 10,000" in view.locator(".fv-box").first.text_content()

    view.locator(".fv-expand-all").click()
    page.wait_for_selector(f"{ROOT} .fv-graph.fv-windowed", timeout=60_000)
    page.wait_for_selector(f"{ROOT}[data-fv-state=ready]")
    # fitted to the page, no label could be read: every Node is an overview box, none a group
    assert view.locator(DRAWN).count() == 0
    assert overview_boxes(view) == nodes
    nb.output(2).screenshot(path=str(ARTIFACTS / "loop-10k-overview-light.png"))

    # search: the first MulBackward0 is centred, zoomed to be read, drawn as a group and marked
    search = view.locator(".fv-search-box input")
    search.fill("MulBackward0")
    search.press("Enter")
    view.locator(".fv-match").first.wait_for()
    drawn = view.locator(DRAWN).count()
    assert 0 < drawn <= 600
    assert overview_boxes(view) + drawn == nodes
    assert view.locator(".fv-search-count").text_content() == "1 of 10,000 matches"
    nb.output(2).screenshot(path=str(ARTIFACTS / "loop-10k-window-light.png"))

    # the match is h, the loop's last op, at the bottom: a drag down brings earlier ops into view, and
    # once it settles the window follows: other Nodes are groups now
    before = set(view.locator(".fv-graph .fv-node").evaluate_all("els => els.map(e => e.dataset.fvNode)"))
    box = view.locator("svg.fv-canvas").bounding_box()
    x, y = box["x"] + 40, box["y"] + 10
    for _ in range(2):
        page.mouse.move(x, y)
        page.mouse.down()
        for step in range(1, 11):
            page.mouse.move(x, y + step * (box["height"] - 20) / 10)
        page.mouse.up()
    page.wait_for_function(
        "([root, before]) => { const ids = [...document.querySelectorAll(root + ' .fv-graph .fv-node')]"
        ".map(e => e.dataset.fvNode); return ids.length > 0 && ids.some(i => !before.includes(i)); }",
        arg=[ROOT, sorted(before)])
    assert overview_boxes(view) + view.locator(DRAWN).count() == nodes

    # a click on a drawn Node inspects it: an op of the loop, on a 3-element tensor
    # (the window holds a margin of Nodes off-screen: take one on screen)
    on_screen = view.evaluate("""el => { const s = el.querySelector('svg.fv-canvas').getBoundingClientRect();
        const n = [...el.querySelectorAll('.fv-graph .fv-node.fv-op')].find(g => { const r = g.getBoundingClientRect();
            return r.top > s.top && r.bottom < s.bottom && r.left > s.left && r.right < s.right; });
        return n && n.dataset.fvNode; }""")
    node = view.locator(f'.fv-graph [data-fv-node="{on_screen}"]')
    node.click()
    inspector = view.locator(".fv-inspector")
    page.wait_for_function("el => el.textContent.includes('MulBackward0') && el.textContent.includes('3')",
                           arg=inspector.element_handle(), timeout=30_000)
    assert "fv-selected" in node.get_attribute("class")

    # the SVG export holds every Node, not only those in the window
    with page.expect_download() as download:
        view.locator(".fv-export-svg").click()
    svg = open(download.value.path(), encoding="utf-8").read()
    assert len(set(re.findall(r'data-fv-node="(\d+)"', svg))) == nodes

    screenshot_in_dark(page, nb.output(2), str(ARTIFACTS / "loop-10k-window-dark.png"))
