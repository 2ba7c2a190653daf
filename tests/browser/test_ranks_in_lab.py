"""End to end in real JupyterLab + Debian Chromium: two ranks' torch-computed gradient norms as the
ranks heatmap; a click shows torch's norm; in the spread mode the rank that diverges stands out."""

from __future__ import annotations

import pytest

from labdriver import ARTIFACTS, LabNotebook, screenshot_in_dark

pytestmark = pytest.mark.browser

# Two "ranks" in one process: copies of one MLP on different data; rank 1's last-layer gradients ×8 at step 2.
TRAIN = """\
import torch
torch.manual_seed(0)
base = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
other = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
other.load_state_dict(base.state_dict())
rows = []
for step in range(4):
    for rank, model in enumerate([base, other]):
        g = torch.Generator().manual_seed(100 * rank + step)
        x, y = torch.randn(5, 6, generator=g), torch.randn(5, 3, generator=g)
        model.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        if (rank, step) == (1, 2):  # only the last layer's
            for p in model[2].parameters():
                p.grad.mul_(8)
        for name, module in model.named_modules():
            params = list(module.parameters(recurse=False))
            if params:
                rows.append((rank, step, name, torch.cat([p.grad.flatten() for p in params]).norm().item()))
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
peaks = {0: 3 * 2**20, 1: 5 * 2**20}
"""
CELLS = ["%load_ext forgeviz\nimport forgeviz", TRAIN + "forgeviz.ranks(rows, peaks, title='two ranks')",
         "big = [(r, s, f'layers.{m}', (1 + m) * 1e-3 * (1 + s % 7) * (4 if r == 5 and s > 300 else 1))\n"
         "       for r in range(8) for s in range(500) for m in range(150)]\nforgeviz.ranks(big)"]

# The pixel colour of a cell (module m, step s) of the canvas of rank/'spread', as the page painted it.
PIXEL = """([canvas, m, s]) => {
  const cw = Number(canvas.dataset.fvCellW), ch = Number(canvas.dataset.fvCellH);
  return Array.from(canvas.getContext('2d').getImageData(s * cw + cw / 2, m * ch + ch / 2, 1, 1).data.slice(0, 3));
}"""


def click_cell(out, rank: str, m: int, s: int) -> None:
    canvas = out.locator(f'canvas.fv-ranks-canvas[data-fv-rank="{rank}"]')
    cw, ch = float(canvas.get_attribute("data-fv-cell-w")), float(canvas.get_attribute("data-fv-cell-h"))
    canvas.click(position={"x": s * cw + cw / 2, "y": m * ch + ch / 2})


def test_ranks_heatmap_click_and_spread(page, lab):
    oracle: dict = {}
    exec(TRAIN, oracle)  # noqa: S102 - the same cell outside the notebook: torch's own norms
    norm = {(r, s, m): n for r, s, m, n in oracle["rows"]}
    nb = LabNotebook.written(page, lab, "ranks.ipynb", CELLS)
    nb.run_cells(2)
    out, root = nb.view_ready(1, "ranks")
    assert out.locator("canvas.fv-ranks-canvas").count() == 2
    assert "log scale" in out.locator(".fv-ranks-legend").text_content()
    assert [p.text_content() for p in out.locator(".fv-ranks-peak-bytes").all()] == ["3 MiB", "5 MiB"]

    click_cell(out, "1", 1, 2)  # rank 1, module '2', step 2: the divergent cell
    detail = out.locator(".fv-ranks-detail")
    page.wait_for_function("el => el.dataset.fvRank === '1' && el.dataset.fvStep === '2'", arg=detail.element_handle())
    assert detail.get_attribute("data-fv-module") == "2"
    assert float(detail.get_attribute("data-fv-norm")) == norm[(1, 2, "2")]  # the exact float
    shown = float(out.locator(".fv-ranks-value").text_content())
    assert shown == pytest.approx(norm[(1, 2, "2")], rel=5e-6)  # 6 significant digits on the page
    cells = [float(t) for t in out.locator(".fv-ranks-detail td").all_text_contents()]
    assert cells == pytest.approx([norm[(0, 2, "2")], norm[(1, 2, "2")]], rel=5e-6)
    out.screenshot(path=str(ARTIFACTS / "ranks-light.png"))

    out.locator("button.fv-ranks-mode-spread").click()
    page.wait_for_function("el => el.dataset.fvMode === 'spread'", arg=root.element_handle())
    spread = out.locator('canvas.fv-ranks-canvas[data-fv-rank="spread"]')
    # the ranks saw different data, so every cell has some spread; the divergent one has by far the most
    ratio = {(m, s): max(norm[(0, s, name)], norm[(1, s, name)]) / min(norm[(0, s, name)], norm[(1, s, name)])
             for m, name in enumerate(["0", "2"]) for s in range(4)}
    assert max(ratio, key=ratio.get) == (1, 2)
    ink = {cell: sum(page.evaluate(PIXEL, [spread.element_handle(), *cell])) for cell in ratio}
    hot = ink.pop((1, 2))
    assert hot < 300 < min(ink.values())  # the darkest cell by far: the end of the ramp, the rest orange at most
    assert "(rank 1 stands out)" in out.locator(".fv-transcript").text_content()
    click_cell(out, "spread", 1, 2)
    page.wait_for_function("el => el.dataset.fvRank === '1'", arg=detail.element_handle())
    out.screenshot(path=str(ARTIFACTS / "ranks-spread-light.png"))
    screenshot_in_dark(page, out, str(ARTIFACTS / "ranks-spread-dark.png"))

    # 8 ranks × 500 steps × 150 modules: 8 canvases; a redraw's time in this page (a figure, not asserted)
    nb.run_cell(2)
    big = nb.output(2)
    big.locator(".fv-ranks[data-fv-state=ready]").wait_for(timeout=120_000)
    assert big.locator("canvas.fv-ranks-canvas").count() == 8
    ms = page.evaluate("""el => { const t = performance.now(); el.querySelector('.fv-ranks-mode-spread').click();
        const a = performance.now(); el.querySelector('.fv-ranks-mode-ranks').click(); return [a - t, performance.now() - a]; }""",
                       big.locator(".fv-ranks").element_handle())
    print(f"ranks 8x500x150 in Chromium: spread redraw {ms[0]:.0f} ms, 8-panel redraw {ms[1]:.0f} ms")
    # one rank alone (rank 5, ×4 after step 300), and the spread, where rank 5 stands out from step 301
    big.locator("select.fv-ranks-select").select_option("5")
    page.wait_for_function("el => el.querySelectorAll('canvas.fv-ranks-canvas').length === 1",
                           arg=big.locator(".fv-ranks").element_handle())
    assert big.locator("canvas.fv-ranks-canvas").get_attribute("data-fv-rank") == "5"
    big.screenshot(path=str(ARTIFACTS / "ranks-big-rank5-light.png"))
    big.locator("button.fv-ranks-mode-spread").click()
    spread = big.locator('canvas.fv-ranks-canvas[data-fv-rank="spread"]')
    spread.wait_for()
    before, after = (sum(page.evaluate(PIXEL, [spread.element_handle(), 75, s])) for s in (300, 301))
    assert before == 238 * 3 and after < 300  # the ranks agree up to step 300; from 301 rank 5 is 4×
    assert "(rank 5 stands out)" in big.locator(".fv-transcript").text_content()
    big.screenshot(path=str(ARTIFACTS / "ranks-big-spread-light.png"))
