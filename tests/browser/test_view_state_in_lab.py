"""End to end in real JupyterLab + Debian Chromium: what a stride or memory view shows beyond its data
(a pinned cell, a zoom) is exported by its buttons and reaches the kernel, where
``save(state="shown")`` draws it and ``save()`` still draws the default."""

from __future__ import annotations

import re

import pytest

from labdriver import ARTIFACTS, LabNotebook, screenshot_in_dark

pytestmark = pytest.mark.browser

CELLS = [
    "%load_ext forgeviz\nimport torch, forgeviz, time, re",
    "t = torch.arange(12.).reshape(3, 4)\nu = t.T\ns = forgeviz.strides(t, u)\ns",  # 1
    # 2: what the browser reported, and the two pictures the kernel draws from it
    "time.sleep(0.5)\nprint('STATE', s.view_state)\n"
    "shown = s.save('shown.svg', state='shown').read_text()\ndefault = s.save('default.svg').read_text()\n"
    "s.save('pinned.html', state='shown')\n"
    "print('MAPPING', re.findall(r'fv-sd-mapping[^>]*>([^<]*)<', shown), re.findall('fv-sd-mapping', default))",
    # 3: a timeline with one 16 KiB storage to pin: its id, then the view
    "keep = [torch.ones(256 * (1 + i % 4)) for i in range(40)]\nbig = torch.ones(4096)\n"
    "from forgeviz._capture.session import get_session\n"
    "print(max((r for r in get_session().memory.records() if r.nbytes == 16384), key=lambda r: r.sid).sid)",
    "m = forgeviz.memory()\nm",  # 4
    # 5: what the browser reported, and the picture the kernel draws from it
    "time.sleep(0.5)\nprint('MSTATE', m.view_state)\nsvg = m.save('m.svg', state='shown').read_text()\n"
    "print('MCAPTION', re.findall(r'>(Pinned · storage \\d+)<', svg), "
    "re.findall(r'>(Pinned · storage \\d+)<', m.save('d.svg').read_text()))",
]


def printed(output, tag: str) -> str:
    text = output.text_content()
    m = re.search(rf"{tag} (.*)", text)
    assert m, f"no {tag} line in {text!r:.500}"
    return m.group(1)


def test_a_pinned_stride_cell_is_exported_and_saved_from_the_kernel_as_shown(page, lab):
    nb = LabNotebook.written(page, lab, "viewstate.ipynb", CELLS)
    nb.run_cell(0)
    nb.run_cell(1)
    out = nb.output(1)
    out.locator(".fv-strides[data-fv-state=ready]").wait_for(timeout=30_000)

    # u = t.T has stride (1, 4): u[1, 2] reads storage element 0 + 1·1 + 2·4 = 9
    out.locator('.fv-cell[data-tensor="1"][data-index="1,2"]').click()
    page.mouse.move(5, 5)  # the pointer leaves; the pin holds
    page.wait_for_function("el => el.querySelector('.fv-cell.fv-pinned[data-index=\"1,2\"]')", arg=out.element_handle())
    assert out.locator(".fv-storage-cell.fv-hot").get_attribute("data-addr") == "9"
    readout = out.locator(".fv-readout").text_content()
    assert readout.startswith("Pinned · u[1, 2] → storage[9] = 9")

    # the export button draws what is shown: the mapping, above the groups
    with page.expect_download() as download:
        out.locator("button.fv-export-svg").click()
    svg = open(download.value.path(), encoding="utf-8").read()
    assert "Pinned · u[1, 2] → storage[9] = 9" in svg
    (ARTIFACTS / "view-state-strides.svg").write_text(svg)
    out.screenshot(path=str(ARTIFACTS / "view-state-strides.png"))
    screenshot_in_dark(page, out, str(ARTIFACTS / "view-state-strides-dark.png"))

    # the kernel has the view's state, and draws it (or the default) headless
    nb.run_cell(2)
    state_out = nb.output(2)
    page.wait_for_function("el => /MAPPING/.test(el.textContent)", arg=state_out.element_handle(), timeout=60_000)
    assert printed(state_out, "STATE") == "{'units': 'elements', 'pinned': {'tensor': 'u', 'index': [1, 2], 'element': None}}"
    mapping = printed(state_out, "MAPPING")
    assert mapping.startswith("['Pinned · u[1, 2] → storage[9] = 9") and mapping.endswith("] []")

    # the offline page the kernel wrote draws the same pin, with nothing fetched
    offline = page.context.new_page()
    requests = []
    offline.on("request", lambda r: requests.append(r.url))
    offline.goto((lab["root"] / "pinned.html").as_uri())
    offline.locator(".fv-strides[data-fv-state=ready]").wait_for()
    assert offline.locator('.fv-cell.fv-pinned[data-tensor="1"][data-index="1,2"]').count() == 1
    assert offline.locator(".fv-readout").text_content().startswith("Pinned · u[1, 2] → storage[9] = 9")
    assert all(u.startswith(("file:", "data:", "blob:")) for u in requests), requests
    offline.close()

    # Escape unpins, and the kernel hears of it
    out.locator('.fv-cell[data-tensor="1"][data-index="1,2"]').focus()
    page.keyboard.press("Escape")
    assert out.locator(".fv-pinned").count() == 0
    nb.run_cell(2)
    page.wait_for_function("el => /'pinned': None/.test(el.textContent)", arg=nb.output(2).element_handle(),
                           timeout=60_000)


def test_a_zoomed_memory_view_with_a_pinned_storage_is_saved_from_the_kernel_as_shown(page, lab):
    nb = LabNotebook.written(page, lab, "viewstate-memory.ipynb", CELLS)
    nb.run_cell(0)
    nb.run_cell(3)
    sid = int(nb.output(3).text_content().split()[-1])
    nb.run_cell(4)
    out = nb.output(4)
    root = out.locator(".fv-memory[data-fv-state=ready][data-fv-complete=true]")
    root.wait_for()
    out.scroll_into_view_if_needed()
    # zoom to the storage, then pin it with a real click where it is drawn
    where = root.evaluate("(el, sid) => el.forgevizMemory.showStorage(sid)", sid)
    assert where is not None, "the storage could not be brought into view"
    page.mouse.click(where["clientX"], where["clientY"])
    page.wait_for_function("([el, sid]) => el.dataset.storage === String(sid)",
                           arg=[out.locator(".fv-mem-pinned").element_handle(), sid], timeout=10_000)
    assert root.get_attribute("data-fv-zoomed") == "true"
    with page.expect_download() as download:
        out.locator("button.fv-export-svg").click()
    svg = open(download.value.path(), encoding="utf-8").read()
    assert f">Pinned · storage {sid}<" in svg
    (ARTIFACTS / "view-state-memory.svg").write_text(svg)
    out.screenshot(path=str(ARTIFACTS / "view-state-memory.png"))

    nb.run_cell(5)
    state_out = nb.output(5)
    page.wait_for_function("el => /MCAPTION/.test(el.textContent)", arg=state_out.element_handle(), timeout=60_000)
    state = printed(state_out, "MSTATE")
    assert re.fullmatch(rf"\{{'x': 'time', 'range': \[[-\d.e]+, [-\d.e]+\], 'pinned': {sid}\}}", state), state
    assert printed(state_out, "MCAPTION") == f"['Pinned · storage {sid}'] []"
