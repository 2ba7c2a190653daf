"""End to end in real JupyterLab + Debian Chromium: (3, 1) + (1, 3) animated; a failing cell explained."""

from __future__ import annotations

import pytest

from labdriver import ARTIFACTS, LabNotebook, screenshot_in_dark

pytestmark = pytest.mark.browser

CELLS = [
    "%load_ext forgeviz\nimport torch, forgeviz",
    "a = torch.arange(3).reshape(3, 1)\nb = torch.tensor([[10, 20, 30]])\nforgeviz.broadcast(a, b, op='+')",
    "x = torch.ones(3, 4)\ny = torch.ones(3)\nx + y",  # 2: fails on purpose
]
MESSAGE = "The size of tensor a (4) must match the size of tensor b (3) at non-singleton dimension 1"


def gif_frames(data: bytes) -> int:
    """Count the images of a GIF by walking its blocks (so image bytes can never be miscounted)."""
    assert data[:6] == b"GIF89a"
    pos = 13 + (3 << ((data[10] & 7) + 1) if data[10] & 0x80 else 0)
    frames = 0

    def skip_sub_blocks(p: int) -> int:
        while data[p]:
            p += data[p] + 1
        return p + 1

    while data[pos] != 0x3B:
        if data[pos] == 0x21:  # extension: label, then sub-blocks
            pos = skip_sub_blocks(pos + 2)
        elif data[pos] == 0x2C:  # image descriptor, optional local colour table, LZW data
            flags = data[pos + 9]
            pos += 10 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
            pos = skip_sub_blocks(pos + 1)
            frames += 1
        else:
            raise AssertionError(f"unexpected GIF block 0x{data[pos]:02x} at {pos}")
    return frames


def test_animation_steps_to_the_result_and_errors_are_explained(page, lab, tmp_path):
    nb = LabNotebook.written(page, lab, "broadcast.ipynb", CELLS)
    nb.run_cells(2)
    out, root = nb.view_ready(1, "broadcast")
    steps = int(root.get_attribute("data-steps"))
    assert steps == 6  # align, pad, compare ×2, stretch, result

    out.locator("button.fv-bc-first").click()
    page.wait_for_function("el => el.dataset.step === '0'", arg=root.element_handle())
    assert "Align" in out.locator(".fv-bc-caption").text_content()
    assert out.locator(".fv-bc-result").count() == 0 or not out.locator(".fv-bc-result").first.is_visible()
    kinds = []
    for k in range(1, steps):
        out.locator("button.fv-bc-next").click()
        page.wait_for_function(f"el => el.dataset.step === '{k}'", arg=root.element_handle())
        caption = out.locator(".fv-bc-caption").text_content()
        kinds.append(caption)
        if "Stretch" in caption:
            out.screenshot(path=str(ARTIFACTS / "broadcast-stretch.png"))
            assert out.locator(".fv-bc-col.fv-stretch").count() == 2
    assert any("Stretch" in c for c in kinds)
    result = out.locator('.fv-bc-result[data-shape="3,3"]')
    result.wait_for()
    assert "(3, 3)" in out.locator(".fv-bc-caption").text_content()
    values = out.locator(".fv-bc-result .fv-bc-value").all_text_contents()
    assert [v.strip() for v in values] == ["10", "20", "30", "11", "21", "31", "12", "22", "32"]
    out.screenshot(path=str(ARTIFACTS / "broadcast-light.png"))

    # Exports: the current step as SVG, the whole animation as offline HTML and as a GIF.
    with page.expect_download() as download:
        out.locator("button.fv-export-svg").click()
    svg = open(download.value.path(), encoding="utf-8").read()
    assert "<svg" in svg[:300] and "32" in svg
    with page.expect_download() as download:
        out.locator("button.fv-export-gif").click()
    gif = open(download.value.path(), "rb").read()
    assert gif_frames(gif) == steps
    (ARTIFACTS / "broadcast.gif").write_bytes(gif)
    with page.expect_download() as download:
        out.locator("button.fv-export-html").click()
    html_path = tmp_path / "broadcast.html"
    html_path.write_bytes(open(download.value.path(), "rb").read())
    offline = page.context.new_page()
    requests = []
    offline.on("request", lambda r: requests.append(r.url))
    offline.goto(html_path.as_uri())
    offline.locator(".fv-broadcast[data-fv-state=ready]").wait_for()
    assert offline.locator('.fv-bc-result[data-shape="3,3"]').count() == 1
    assert all(u.startswith(("file:", "data:", "blob:")) for u in requests), requests
    offline.close()

    # A shape error in a real cell: the traceback is torch's, and the diagram is drawn below it.
    nb.run_cell(2, raises=True)
    err = nb.output(2)
    err.locator(".fv-broadcast[data-fv-state=ready]").wait_for()
    traceback = err.locator(".jp-RenderedText[data-mime-type='application/vnd.jupyter.stderr']").text_content()
    assert "RuntimeError" in traceback and MESSAGE in traceback
    assert MESSAGE in err.locator("pre.fv-torch-msg").text_content()
    conflict = err.locator(".fv-bc-conflict").text_content()
    assert "4" in conflict and "3" in conflict
    fixes = err.locator(".fv-bc-fix").all_text_contents()
    assert any("y.unsqueeze(-1)" in f or "b.unsqueeze(-1)" in f for f in fixes), fixes
    err.screenshot(path=str(ARTIFACTS / "broadcast-error.png"))

    screenshot_in_dark(page, out, str(ARTIFACTS / "broadcast-dark.png"))
