"""Saved forgeviz outputs in readers that draw them with Chromium (issue 25; tests/test_readers.py has
the pure-Python readers): JupyterLab with forgeviz disabled, the notebook untrusted then trusted, and
nbconvert's HTML pages (default and sanitised). Each picture is decoded by the browser: an ``<img>``
that loaded, drawn on a canvas, with many distinct colours; no output shows SVG source as text."""

from __future__ import annotations

import json

import nbformat
import pytest
from nbconvert import HTMLExporter
from test_readers import CELLS, VIEWS
from test_saved_notebooks import run

from forgeviz.widgets.base import WIDGET_VIEW

from labdriver import ARTIFACTS, open_saved, running_lab

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


def test_lab_without_forgeviz_shows_the_png_untrusted_and_the_widget_error_trusted(page, lab_without_forgeviz, saved):
    nb, cells = saved
    lab = lab_without_forgeviz
    nbformat.write(nb, lab["root"] / "readers.ipynb")
    panel_id = open_saved(page, lab, "readers.ipynb", len(CELLS))
    plugins = page.evaluate("() => window.jupyterapp.listPlugins().filter(p => p.startsWith('forgeviz'))")
    assert page.evaluate("(ids) => ids.every(id => !window.jupyterapp.isPluginActivated(id))", plugins), plugins
    outputs = [page.locator(f"[id='{panel_id}'] .jp-Notebook .jp-Cell").nth(i).locator(".jp-OutputArea") for i in cells]

    # untrusted: Lab draws no SVG (not safe), but the PNG (the widget view is not safe either)
    for out in outputs:
        out.locator(".jp-RenderedImage img").wait_for()
    assert page.locator(".fv-root, .fv-saved-output").count() == 0
    check_pictures([decoded(out.locator(".jp-RenderedImage img")) for out in outputs])
    for out in outputs:
        no_svg_source(out.text_content())
    ARTIFACTS.mkdir(exist_ok=True)
    outputs[0].screenshot(path=str(ARTIFACTS / "readers-lab-untrusted-graph.png"))
    outputs[2].screenshot(path=str(ARTIFACTS / "readers-lab-untrusted-broadcast.png"))

    # trusted (Lab's trust command): the widget view is drawn first (ipywidgets, rank -10), and with
    # no saved widget state and no kernel holding the model, ipywidgets says so instead of a picture
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:trust'); }")
    page.locator(".jp-Dialog .jp-mod-accept").click()
    page.wait_for_function("""([id, cells]) => cells.every(i => {
        const area = document.querySelectorAll(`[id='${id}'] .jp-Notebook .jp-Cell`)[i].querySelector('.jp-OutputArea');
        return !area.querySelector('.jp-RenderedImage') && !area.textContent.includes('Loading widget');
    })""", arg=[panel_id, cells], timeout=60_000)
    texts = [out.text_content().strip() for out in outputs]
    print(f"trusted, without forgeviz: {texts}")
    assert texts == ["Error displaying widget: model not found"] * len(cells)
    assert all(out.locator("img").count() == 0 for out in outputs)
    outputs[0].screenshot(path=str(ARTIFACTS / "readers-lab-trusted-graph.png"))


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
