"""Saved forgeviz outputs in readers that draw them with Chromium (issue 25; tests/test_readers.py has
the pure-Python readers): JupyterLab with forgeviz disabled, the notebook untrusted then trusted, and
nbconvert's HTML pages (default and sanitised). Each picture is decoded by the browser: an ``<img>``
that loaded, drawn on a canvas, with many distinct colours; no output shows SVG source as text.

A notebook saved in JupyterLab with forgeviz has each output's widget view set aside in its metadata
(src/lab/refresh.ts): Lab without forgeviz draws its SVG (trusted) or PNG (untrusted), and Lab with
forgeviz still draws the live widget while a kernel holds it, else the saved data. A notebook run
headless keeps the widget view in its data: trusted Lab without forgeviz shows ipywidgets' error
until it is saved once in Lab with forgeviz."""

from __future__ import annotations

import copy
import json

import nbformat
import pytest
import torch
from nbconvert import HTMLExporter
from test_readers import CELLS, VIEWS
from test_saved_notebooks import run

from forgeviz.widgets.base import MIME_TYPE, WIDGET_VIEW

from labdriver import ARTIFACTS, LabNotebook, open_saved, running_lab, write_notebook
from scenarios import S1

pytestmark = pytest.mark.browser

#: The size and distinct colours of each ``<img>`` given, once decoded, drawn on a canvas.
DECODE = """async (imgs) => Promise.all(imgs.map(async (img) => {
    await img.decode();
    const c = document.createElement('canvas');
    c.width = img.naturalWidth; c.height = img.naturalHeight;
    const ctx = c.getContext('2d');
    ctx.drawImage(img, 0, 0);
    const d = ctx.getImageData(0, 0, c.width, c.height).data;
    const colours = new Set();
    for (let i = 0; i < d.length; i += 4) { colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]); }
    return [img.naturalWidth, img.naturalHeight, colours.size];
}))"""
MIN_COLOURS = 16


def decoded(img) -> list:
    """``[width, height, colours]`` of one ``<img>`` locator, once the browser decoded it."""
    return img.evaluate(f"img => ({DECODE})([img]).then(r => r[0])")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The notebook of tests/test_readers.py, run by nbclient (no widget state), unsigned: untrusted."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    run(nb)
    nb.metadata.pop("kernelspec", None)
    cells = [i for i, c in enumerate(nb.cells) for o in c.get("outputs", []) if WIDGET_VIEW in o.get("data", {})]
    return nb, cells


def check_pictures(sizes: list) -> None:
    assert len(sizes) == len(VIEWS)
    for view, (width, height, colours) in zip(VIEWS, sizes):
        assert width > 100 and height > 30 and colours >= MIN_COLOURS, f"{view}: {width}×{height}, {colours} colours"


def no_svg_source(text: str) -> None:
    for source in ("<svg", "&lt;svg", "<style", "<?xml"):
        assert source not in text, f"SVG source shown as text: …{text[max(0, text.find(source) - 80):][:200]}…"


@pytest.fixture(scope="module")
def lab_without_forgeviz(tmp_path_factory):
    """JupyterLab with forgeviz disabled, as ``jupyter labextension disable --level=user forgeviz``
    writes it, in a config dir of its own (the venv's config is left alone)."""
    root = tmp_path_factory.mktemp("lab-without-forgeviz")
    config = root / ".config"
    (config / "labconfig").mkdir(parents=True)
    (config / "labconfig" / "page_config.json").write_text(json.dumps({"disabledExtensions": {"forgeviz": True}}))
    with running_lab(root, env={"JUPYTER_CONFIG_DIR": str(config)}) as server:
        yield server


def outputs_of(page, panel_id: str, cells: list[int]) -> list:
    return [page.locator(f"[id='{panel_id}'] .jp-Notebook .jp-Cell").nth(i).locator(".jp-OutputArea") for i in cells]


def forgeviz_inactive(page) -> None:
    plugins = page.evaluate("() => window.jupyterapp.listPlugins().filter(p => p.startsWith('forgeviz'))")
    assert page.evaluate("(ids) => ids.every(id => !window.jupyterapp.isPluginActivated(id))", plugins), plugins


def trusted(page) -> list[bool]:
    return page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets.map(c => c.model.trusted)")


def check_images(page, outputs: list, selector: str, shot: str) -> None:
    """Each output shows one decoded, non-blank picture through Lab's ``selector`` renderer, no
    forgeviz view, no SVG source and no ipywidgets error."""
    for out in outputs:
        out.locator(selector).wait_for()
    assert page.locator(".fv-root, .fv-saved-output").count() == 0
    check_pictures([decoded(out.locator(selector)) for out in outputs])
    for out in outputs:
        text = out.text_content()
        no_svg_source(text)
        assert "Error displaying widget" not in text
    ARTIFACTS.mkdir(exist_ok=True)
    outputs[0].screenshot(path=str(ARTIFACTS / f"{shot}-graph.png"))
    outputs[2].screenshot(path=str(ARTIFACTS / f"{shot}-broadcast.png"))


def trust(page, panel_id: str, cells: list[int]) -> None:
    """Lab's trust command, accepted; returns once no output shows the untrusted PNG any more."""
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:trust'); }")
    page.locator(".jp-Dialog .jp-mod-accept").click()
    # (a cell Lab has not attached yet counts as not there: the notebook may still be drawing its cells)
    page.wait_for_function("""([id, cells]) => cells.every(i => {
        const cell = document.querySelectorAll(`[id='${id}'] .jp-Notebook .jp-Cell`)[i];
        const area = cell && cell.querySelector('.jp-OutputArea');
        return !!area && !area.querySelector('.jp-RenderedImage') && !area.textContent.includes('Loading widget');
    })""", arg=[panel_id, cells], timeout=60_000)


def test_lab_without_forgeviz_shows_a_headless_run_as_png_untrusted_and_the_widget_error_trusted(
        page, lab, lab_without_forgeviz, saved):
    nb, cells = saved
    other = lab_without_forgeviz
    nbformat.write(nb, other["root"] / "readers.ipynb")
    panel_id = open_saved(page, other, "readers.ipynb", len(CELLS))
    forgeviz_inactive(page)
    outputs = outputs_of(page, panel_id, cells)

    # untrusted: Lab draws no SVG (not safe), but the PNG (the widget view is not safe either)
    check_images(page, outputs, ".jp-RenderedImage img", "readers-lab-untrusted")

    # trusted (Lab's trust command): the widget view is drawn first (ipywidgets, rank -10), and with
    # no saved widget state and no kernel holding the model, ipywidgets says so instead of a picture
    trust(page, panel_id, cells)
    texts = [out.text_content().strip() for out in outputs]
    print(f"trusted, without forgeviz: {texts}")
    assert texts == ["Error displaying widget: model not found"] * len(cells)
    assert all(out.locator("img").count() == 0 for out in outputs)
    outputs[0].screenshot(path=str(ARTIFACTS / "readers-lab-trusted-graph.png"))

    # the remedy the README gives: saved once in Lab with forgeviz (no live view: untrusted, drawn
    # from the saved data), each widget view is set aside, and trusted Lab without forgeviz draws the SVG
    headless = copy.deepcopy(nb)
    headless.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(headless, lab["root"] / "headless.ipynb")
    open_saved(page, lab, "headless.ipynb", len(CELLS))
    page.locator(".fv-saved-output .fv-root[data-fv-state=ready]").first.wait_for()
    # once its kernel is up (its language_info would make the notebook dirty again after the save)
    page.wait_for_function("""() => { const k = window.jupyterapp.shell.currentWidget.sessionContext.session?.kernel;
                                      return k && k.status === 'idle'; }""", timeout=120_000)
    saved_at = (lab["root"] / "headless.ipynb").stat().st_mtime_ns
    page.evaluate("async () => { await window.jupyterapp.commands.execute('docmanager:save'); }")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
    assert (lab["root"] / "headless.ipynb").stat().st_mtime_ns > saved_at
    resaved = nbformat.read(lab["root"] / "headless.ipynb", as_version=4)
    for i in cells:
        (output,) = resaved.cells[i].outputs
        assert WIDGET_VIEW not in output["data"]
        assert output["metadata"][MIME_TYPE]["widget_view"] == nb.cells[i].outputs[0]["data"][WIDGET_VIEW]
    nbformat.write(resaved, other["root"] / "resaved.ipynb")
    panel_id = open_saved(page, other, "resaved.ipynb", len(CELLS))
    trust(page, panel_id, cells)
    check_images(page, outputs_of(page, panel_id, cells), ".jp-RenderedSVG img", "readers-lab-resaved-trusted")


#: Run in Lab with forgeviz, then saved: the graph is displayed after a backward (its view does not
#: change before the save, so its PNG stays), and the last cell, a second backward, runs only after
#: the notebook is reloaded from disk, the kernel alive: only a live view can show its gradients.
LAB_CELLS = [
    "%load_ext forgeviz\nimport torch, forgeviz",
    S1,
    "loss.backward(retain_graph=True)",
    "forgeviz.graph(loss)",
    "t = torch.arange(12).reshape(3, 4)\nforgeviz.strides(t, t.T)",
    "forgeviz.broadcast(torch.ones(3, 1), torch.ones(1, 4), op='+')",
    "forgeviz.memory()",
    # two ranks' norms (of seeded torch tensors): no backward here, which would move on the graph view
    # above, whose saved PNG this test checks
    "forgeviz.ranks([(r, s, n, torch.randn(8, generator=torch.Generator().manual_seed(10 * r + s)).norm().item())\n"
    "                for r in range(2) for s in range(3) for n in ('fc1', 'fc2')], {0: 4096, 1: 8192})",
    "loss.backward()",
]
LAB_VIEWS = [3, 4, 5, 6, 7]


def x_grads() -> tuple[float, float]:
    """x.grad of S1 after one backward and after two, from torch."""
    x = torch.tensor([2.], requires_grad=True)
    y = torch.tensor([3.], requires_grad=True)
    loss = (x * y + x) ** 2
    loss.backward(retain_graph=True)
    once = x.grad.item()
    loss.backward()
    return once, x.grad.item()


def wait_views(page, outputs: list, kind: str) -> None:
    """Every output draws its forgeviz view through ``kind``, painted: ``fv-live-output``, the widget
    with a kernel (not the saved data shown while the widget manager waits); ``fv-saved-output``, the
    saved data."""
    where = ".fv-live-output:not(.fv-saved-output)" if kind == "fv-live-output" else f".{kind}"
    for out in outputs:
        out.locator(f"{where} .fv-root[data-fv-state=ready]").wait_for(timeout=60_000)
        assert "Error displaying widget" not in out.text_content()


def x_badge(out) -> str:
    return out.locator('.fv-root [data-fv-node][data-label="x"] .fv-badge-text').text_content()


def test_a_notebook_saved_in_lab_shows_its_pictures_without_forgeviz_and_stays_live_with_it(
        page, lab, lab_without_forgeviz):
    once, twice = x_grads()
    path = lab["root"] / "lab-saved.ipynb"
    write_notebook(path, LAB_CELLS)
    nb = LabNotebook(page, lab, path.name)
    nb.run_cells(len(LAB_CELLS) - 1)
    wait_views(page, [nb.output(i) for i in LAB_VIEWS], "fv-live-output")
    model_ids = page.evaluate("""([views, mime]) => views.map(i =>
        window.jupyterapp.shell.currentWidget.content.widgets[i].model.outputs.get(0).data[mime].model_id)""",
                              [LAB_VIEWS, WIDGET_VIEW])
    page.evaluate("async () => { await window.jupyterapp.commands.execute('docmanager:save'); }")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
    first_save = path.read_text(encoding="utf-8")
    saved_nb = nbformat.reads(first_save, as_version=4)
    for i, model_id in zip(LAB_VIEWS, model_ids):
        (output,) = saved_nb.cells[i].outputs
        assert WIDGET_VIEW not in output["data"]
        assert output["metadata"][MIME_TYPE]["widget_view"]["model_id"] == model_id
        assert {"text/plain", MIME_TYPE, "image/svg+xml", "image/png"} <= set(output["data"])
    assert f"∇ {once:g}" in saved_nb.cells[3].outputs[0]["data"]["image/svg+xml"]

    # the notebook reloaded from disk in the same page (the widget manager keeps the kernel's models):
    # forgeviz's renderer hands each widget view set aside in the metadata to the widget renderer,
    # and the live widgets are drawn; a second backward in the kernel reaches x's inspector
    page.evaluate("async () => { await window.jupyterapp.commands.execute('docmanager:reload'); }")
    page.wait_for_function("""([views, mime]) => views.every(i => {
        const outputs = window.jupyterapp.shell.currentWidget.content.widgets[i].model.outputs;
        return outputs.length === 1 && !(mime in outputs.get(0).data);
    })""", arg=[LAB_VIEWS, WIDGET_VIEW])
    wait_views(page, [nb.output(i) for i in LAB_VIEWS], "fv-live-output")
    graph = nb.output(3)
    assert f"{once:g}" in x_badge(graph)
    nb.run_cell(len(LAB_CELLS) - 1)
    graph.locator('.fv-root [data-fv-node][data-label="x"]').click()
    inspector = graph.locator(".fv-inspector")
    try:  # the leaf's .grad history, which only the kernel knows (the saved replies stop at 64)
        page.wait_for_function("([el, v]) => el.dataset.state === 'ready' && el.textContent.includes(v)",
                               arg=[inspector.element_handle(), f"{twice:g}"], timeout=30_000)
    except Exception:
        graph.screenshot(path=str(ARTIFACTS / "failure.png"))
        raise AssertionError(f"inspector: {inspector.get_attribute('data-state')!r} {inspector.text_content()!r}")
    ARTIFACTS.mkdir(exist_ok=True)
    graph.screenshot(path=str(ARTIFACTS / "readers-lab-reloaded-live-graph.png"))

    # saved again, from the live view drawn through the metadata's widget view: the second backward
    page.evaluate("async () => { await window.jupyterapp.commands.execute('docmanager:save'); }")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
    second = nbformat.read(path, as_version=4).cells[3].outputs[0]
    assert WIDGET_VIEW not in second["data"]
    assert second["metadata"][MIME_TYPE]["widget_view"]["model_id"] == model_ids[0]
    assert second["data"][MIME_TYPE]["traits"]["state"]["backward_passes"] == 2
    assert "before backward 2" in second["data"][MIME_TYPE]["details_cut"]

    # a new page, the kernel alive: each output is drawn, never the widget error (ipywidgets'
    # manager here does not restore the kernel's models into a new page, with the widget view in
    # the data or in the metadata alike: forgeviz shows the saved data while it waits)
    nb = LabNotebook(page, lab, path.name)
    outputs = [nb.output(i) for i in LAB_VIEWS]
    for out in outputs:
        out.locator(".fv-live-output .fv-root[data-fv-state=ready]").wait_for(timeout=60_000)
    assert all("Error displaying widget" not in out.text_content() for out in outputs)

    # no kernel: the saved data
    page.evaluate("async () => { await window.jupyterapp.shell.currentWidget.sessionContext.shutdown(); }")
    panel_id = open_saved(page, lab, path.name, len(LAB_CELLS))
    wait_views(page, outputs_of(page, panel_id, LAB_VIEWS), "fv-saved-output")

    # JupyterLab without forgeviz, the first save as written (signed by Lab: trusted): each SVG
    other = lab_without_forgeviz
    (other["root"] / path.name).write_text(first_save, encoding="utf-8")
    panel_id = open_saved(page, other, path.name, len(LAB_CELLS))
    forgeviz_inactive(page)
    assert all(trusted(page))
    outputs = outputs_of(page, panel_id, LAB_VIEWS)
    check_images(page, outputs, ".jp-RenderedSVG img", "readers-lab-saved-trusted")
    # and a copy of it that no one signed (untrusted): each PNG
    unsigned = nbformat.reads(first_save, as_version=4)
    unsigned.metadata["copied"] = True
    nbformat.write(unsigned, other["root"] / "lab-saved-copy.ipynb")
    panel_id = open_saved(page, other, "lab-saved-copy.ipynb", len(LAB_CELLS))
    assert not any(trusted(page)[i] for i in LAB_VIEWS)
    check_images(page, outputs_of(page, panel_id, LAB_VIEWS), ".jp-RenderedImage img", "readers-lab-saved-untrusted")


@pytest.mark.parametrize("sanitize", [False, True], ids=["default", "sanitize_html"])
def test_nbconvert_html_pictures_decode_in_chromium(browser, saved, sanitize):
    nb, cells = saved
    html, _ = HTMLExporter(template_name="lab", sanitize_html=sanitize).from_notebook_node(nb)
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, offline=True)
    page = context.new_page()
    try:
        page.set_content(html)
        areas = [page.locator(".jp-Cell").nth(i).locator(".jp-OutputArea-output") for i in cells]
        check_pictures([decoded(area.locator("img")) for area in areas])
        no_svg_source(page.locator("body").inner_text())
        ARTIFACTS.mkdir(exist_ok=True)
        name = f"readers-nbconvert-{'sanitized' if sanitize else 'default'}-graph.png"
        page.locator(".jp-Cell").nth(cells[0]).screenshot(path=str(ARTIFACTS / name))
    finally:
        context.close()
