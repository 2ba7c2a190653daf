"""End to end in real JupyterLab + Debian Chromium: t and t.T over one storage, hovered, updated, exported."""

from __future__ import annotations

import pytest

from labdriver import ARTIFACTS, LabNotebook, downloaded

pytestmark = pytest.mark.browser

CELLS = [
    "%load_ext forgeviz\nimport torch, forgeviz",
    "t = torch.arange(12).reshape(3, 4)",
    "%fv strides t t.T",  # 2
    "t[:2][0] = 99",  # 3: writing through a view redraws the diagram above (V3)
    "%fv strides torch.eye(3).to_sparse()",  # 4: a layout without strides
    "big = torch.zeros(10_000, 1_000)\n%fv strides big big.T",  # 5: 1e7 elements, a bounded window
    # 6: after cell 2 ran again, its first view is gone: that widget is no longer re-read after cells
    "from forgeviz._capture.session import get_session\nfrom forgeviz.widgets.strides import StridesWidget\n"
    "print(sorted(-1 if w._views is None else len(w._views) for w in get_session().widgets\n"
    "             if isinstance(w, StridesWidget)))",
]


def hot(output, selector: str) -> list[str]:
    return output.locator(f"{selector}.fv-hot").evaluate_all("els => els.map(e => e.dataset.addr + '|' + (e.dataset.index ?? ''))")


def test_t_and_t_transpose_share_a_strip_and_hover_maps_to_storage(page, lab):
    nb = LabNotebook.written(page, lab, "strides.ipynb", CELLS)
    nb.run_cells(3)
    out = nb.output(2)
    try:
        out.locator(".fv-strides[data-fv-state=ready]").wait_for(timeout=30_000)
    except Exception:
        page.screenshot(path=str(ARTIFACTS / "strides-failure.png"))
        raise AssertionError(f"the stride view never became ready; output: {out.text_content()!r:.2000}")

    # One strip for both tensors: every storage cell on the page belongs to strip 0.
    strips = set(out.locator(".fv-storage-cell").evaluate_all("els => els.map(e => e.dataset.strip)"))
    assert strips == {"0"}
    assert out.locator(".fv-storage-cell").count() == 12

    # Hover t.T[1, 2]: the storage cell it reads is element 9.
    out.locator('.fv-cell[data-tensor="1"][data-index="1,2"]').hover()
    page.wait_for_function("el => el.querySelector('.fv-storage-cell.fv-hot')", arg=out.element_handle())
    storage_hot = out.locator(".fv-storage-cell.fv-hot")
    assert storage_hot.count() == 1 and storage_hot.get_attribute("data-addr") == "9"
    readout = out.locator(".fv-readout").text_content()
    assert "storage[9]" in readout and "9" in readout
    out.screenshot(path=str(ARTIFACTS / "strides-hover.png"))

    # The reverse: storage element 9 is read by t[2, 1] and t.T[1, 2].
    out.locator('.fv-storage-cell[data-addr="9"]').hover()
    page.wait_for_function("el => el.querySelectorAll('.fv-cell.fv-hot').length === 2", arg=out.element_handle())
    readers = sorted(out.locator(".fv-cell.fv-hot").evaluate_all(
        "els => els.map(e => e.dataset.tensor + ':' + e.dataset.index)"))
    assert readers == ["0:2,1", "1:1,2"]

    # V3: a write through a view in a later cell redraws both tensors and the strip.
    nb.run_cell(3)
    page.wait_for_function(
        """el => { const c = el.querySelector('.fv-cell[data-tensor="1"][data-index="3,0"]');
                   return c && c.textContent.includes('99'); }""", arg=out.element_handle())
    first_row = out.locator('.fv-cell[data-tensor="0"][data-index="0,3"]').text_content()
    assert "99" in first_row
    assert "99" in out.locator('.fv-storage-cell[data-addr="0"]').text_content()
    assert "4" in out.locator('.fv-storage-cell[data-addr="4"]').text_content()

    # Export SVG and PNG.
    svg = downloaded(page, out.locator("button.fv-export-svg")).decode("utf-8")
    assert "<svg" in svg[:200] and "99" in svg and "t.T" in svg
    (ARTIFACTS / "strides.svg").write_text(svg)
    png = downloaded(page, out.locator("button.fv-export-png"))
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 2000
    out.screenshot(path=str(ARTIFACTS / "strides-light.png"))
    # torch's own message keeps base.css's look inside Lab's output area (whose `pre` rules once won)
    look = out.locator(".fv-torch-msg").first.evaluate(
        "e => { const s = getComputedStyle(e); return [s.fontSize, s.borderLeftWidth]; }")
    assert look == ["11px", "3px"]

    # A sparse tensor: the explained panel, no error.
    nb.run_cell(4)
    panel = nb.output(4)
    panel.locator(".fv-strides[data-fv-state=ready]").wait_for()
    text = panel.text_content()
    assert "this layout has no strides" in text and "indices" in text and "values" in text
    assert "Error" not in text

    # 1e7 elements: a bounded window is drawn, and paging fetches more on demand.
    nb.run_cell(5)
    big = nb.output(5)
    big.locator(".fv-strides[data-fv-state=ready]").wait_for()
    assert big.locator('.fv-cell[data-tensor="1"]').count() <= 1024
    assert big.locator(".fv-storage-cell").count() <= 512

    # Dark theme: the diagram follows JupyterLab's variables; export in dark too.
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
    page.wait_for_timeout(500)
    out.scroll_into_view_if_needed()
    out.screenshot(path=str(ARTIFACTS / "strides-dark.png"))
    dark_svg = downloaded(page, out.locator("button.fv-export-svg")).decode("utf-8")
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})")
    assert dark_svg != svg

    # Running cell 2 again replaces its output: the old view tells the kernel it is gone.
    nb.run_cell(2)
    nb.output(2).locator(".fv-strides[data-fv-state=ready]").wait_for()
    nb.run_cell(6)
    assert nb.output(6).text_content().strip() == "[0, 1, 1, 1]"
