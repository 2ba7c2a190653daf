"""Every saved forgeviz output shows a picture in every reader that opens the notebook, never source
text (issue 25). The notebook is made by real cells run headless (nbclient, no widget state): S1's
graph shown before its backward (the kernel updates the output after it), the strides of t and t.T,
a broadcast, the memory timeline and two ranks' gradient norms. Each reader here picks a part of each
output's bundle as that reader does, and the picture it shows is decoded (an SVG rasterised by resvg, a
PNG by Pillow) and must not be blank; the text it renders must hold no SVG source, escaped or not.

Readers (tests/browser/test_readers_in_lab.py: JupyterLab without forgeviz, and these nbconvert
pages loaded in Chromium):
- nbconvert ``--to html``: its display priority puts ``text/html`` before ``image/svg+xml``, and
  skips the widget view whose model has no saved state; the SVG becomes an ``<img>`` of it;
- the same with ``--HTMLExporter.sanitize_html=True``: ``text/html`` goes through bleach, which
  escapes an ``<svg>`` or ``<img>`` to text; an ``image/svg+xml`` part stays an ``<img>``;
- the same with the SanitizeHTML preprocessor: it keeps ``image/png`` and removes
  ``image/svg+xml`` (and every vendor type);
- nbconvert ``--to markdown``: ``text/html`` first, else the SVG as an extracted file;
- VS Code, emulated: vendor types it has a renderer for (forgeviz's is none of them), then the
  widget view, ``text/html``, ``image/svg+xml``, ``image/png``. A widget view whose model is
  neither in the notebook's saved widget state nor in a kernel is passed over: vscode-jupyter's
  widget renderer then throws its ``vscode.fallbackToNextRenderer`` error and VS Code renders the
  next mime type.
"""

from __future__ import annotations

import base64
import copy
import io
import json
import re

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbconvert import HTMLExporter, MarkdownExporter
from PIL import Image
from test_saved_notebooks import run

from forgeviz.headless import svg_size, svg_to_png
from forgeviz.widgets.base import MAX_SAVED_BYTES, MIME_TYPE, WIDGET_VIEW

from scenarios import S1

CELLS = [
    "%load_ext forgeviz\nimport torch, forgeviz",
    S1,
    "forgeviz.graph(loss)",
    "loss.backward()",
    "t = torch.arange(12).reshape(3, 4)\nforgeviz.strides(t, t.T)",
    "forgeviz.broadcast(torch.ones(3, 1), torch.ones(1, 4), op='+')",
    "forgeviz.memory()",
    # two ranks' per-module gradient norms, from torch
    "m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))\nrows = []\nfor s in range(3):\n"
    "    for r in range(2):\n        m.zero_grad()\n"
    "        m(torch.randn(5, 4, generator=torch.Generator().manual_seed(10 * r + s))).sum().backward()\n"
    "        rows += [(r, s, n, torch.cat([p.grad.flatten() for p in c.parameters()]).norm().item())\n"
    "                 for n, c in m.named_children()]\nforgeviz.ranks(rows, {0: 4096, 1: 8192})",
]
#: The forgeviz outputs, in order.
VIEWS = ["graph", "strides", "broadcast", "memory", "ranks"]
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
#: The vendor types VS Code ships renderers for (forgeviz's is not one of them).
VSCODE_VENDOR = ("application/vnd.plotly.v1+json", "application/vnd.vegalite.v5+json", "application/vnd.vega.v5+json")
VSCODE_ORDER = (*VSCODE_VENDOR, WIDGET_VIEW, "text/html", "image/svg+xml", "image/png", "text/plain")
MIN_COLOURS = 16  # antialiased text and Okabe-Ito fills: a real picture has hundreds


@pytest.fixture(scope="module")
def notebook():
    """The executed notebook, as nbclient saves it (no widget state), with its forgeviz cells."""
    import torch

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    run(nb)
    assert "widgets" not in nb.metadata
    cells = [i for i, c in enumerate(nb.cells) for o in c.get("outputs", []) if WIDGET_VIEW in o.get("data", {})]
    assert [nb.cells[i].outputs[0]["data"][MIME_TYPE]["view"] for i in cells] == VIEWS
    x = torch.tensor([2.], requires_grad=True)
    y = torch.tensor([3.], requires_grad=True)
    ((x * y + x) ** 2).backward()
    return nb, cells, f"∇ {x.grad.item():g}"  # the graph's badge of x after backward (64)


def decode(kind: str, raw: bytes) -> Image.Image:
    """A picture as its reader shows it: an SVG rasterised by resvg, a PNG decoded."""
    png = svg_to_png(raw.decode("utf-8"), 1.0) if kind == "svg" else raw
    image = Image.open(io.BytesIO(png))
    image.load()
    return image.convert("RGB")


def check_picture(kind: str, raw: bytes) -> Image.Image:
    """A picture that decodes and is not blank (one-colour, or a line of text)."""
    image = decode(kind, raw)
    colours = image.getcolors(maxcolors=1 << 20)
    assert image.width > 100 and image.height > 30, f"a {image.width}×{image.height} {kind}"
    assert colours is None or len(colours) >= MIN_COLOURS, f"a {kind} of {len(colours)} colours: blank"
    return image


def strip_css(svg: str) -> str:
    """``svg`` as GitHub and nbviewer show it: no ``<style>`` element, no ``style`` attribute."""
    return re.sub(r"\sstyle=\"[^\"]*\"", "", re.sub(r"<style\b.*?</style>", "", svg, flags=re.S))


def no_svg_source(text: str) -> None:
    for source in ("<svg", "&lt;svg", "<style", "&lt;style", "&lt;?xml"):
        assert source not in text, f"SVG source shown as text: …{text[max(0, text.find(source) - 80):][:200]}…"


def data_uri(src: str) -> tuple[str, bytes]:
    match = re.fullmatch(r"data:image/(svg\+xml|png);base64,(.+)", src, re.S)
    assert match, f"expected a data: URI of an SVG or PNG, got {src[:80]!r}"
    return ("svg" if match.group(1) == "svg+xml" else "png"), base64.b64decode(match.group(2))


def nbconvert_html(nb, cells, **options) -> tuple[list[tuple[str, bytes]], str]:
    page, _ = HTMLExporter(template_name="lab", **options).from_notebook_node(copy.deepcopy(nb))
    soup = BeautifulSoup(page, "html.parser")
    code_cells = soup.select("div.jp-Cell")
    assert len(code_cells) == len(nb.cells)
    pictures = []
    for i in cells:
        (img,) = code_cells[i].select(".jp-OutputArea-output img")
        pictures.append(data_uri(img["src"]))
    for hidden in soup(["script", "style"]):
        hidden.decompose()
    return pictures, soup.body.get_text()


def nbconvert_markdown(nb, cells) -> tuple[list[tuple[str, bytes]], str]:
    body, resources = MarkdownExporter().from_notebook_node(copy.deepcopy(nb))
    refs = re.findall(r"!\[(\w+)\]\(([^)\s]+)\)", body)
    assert len(refs) == len(cells), f"expected one picture per forgeviz output, got {refs}"
    return [(kind, resources["outputs"][name]) for kind, name in refs], body


def vscode_pick(data: dict, widget_state: dict) -> str:
    """The mime type VS Code renders (see the module's docstring)."""
    for mime in VSCODE_ORDER:
        if mime in data and not (mime == WIDGET_VIEW and data[mime]["model_id"] not in widget_state):
            return mime
    raise AssertionError(f"VS Code renders none of {sorted(data)}")


def vscode(nb, cells) -> tuple[list[tuple[str, bytes]], str]:
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    pictures = []
    for i in cells:
        data = nb.cells[i].outputs[0]["data"]
        mime = vscode_pick(data, state)
        assert mime in ("image/svg+xml", "image/png"), f"VS Code shows {mime}, not a picture"
        svg = mime == "image/svg+xml"
        pictures.append(("svg", data[mime].encode()) if svg else ("png", base64.b64decode(data[mime])))
    return pictures, ""  # an image part renders no text


READERS = {
    "nbconvert-html": lambda nb, cells: nbconvert_html(nb, cells),
    "nbconvert-html-sanitized": lambda nb, cells: nbconvert_html(nb, cells, sanitize_html=True),
    "nbconvert-html-SanitizeHTML": lambda nb, cells: nbconvert_html(
        nb, cells, preprocessors=["nbconvert.preprocessors.sanitize.SanitizeHTML"]),
    "nbconvert-markdown": nbconvert_markdown,
    "vscode": vscode,
}


@pytest.mark.parametrize("reader", READERS)
def test_each_forgeviz_output_shows_a_picture_and_no_svg_source(notebook, reader):
    nb, cells, x_badge = notebook
    pictures, text = READERS[reader](nb, cells)
    assert len(pictures) == len(cells) == len(VIEWS)
    kinds = []
    for view, (kind, raw) in zip(VIEWS, pictures):
        image = check_picture(kind, raw)
        kinds.append(f"{view} {kind} {image.width}×{image.height}")
        if kind == "svg" and view == "graph":  # the picture after backward: x's badge, from torch
            assert x_badge in raw.decode()
    no_svg_source(text)
    print(f"{reader}: {', '.join(kinds)}")


def test_each_saved_svg_is_the_same_picture_with_its_css_stripped(notebook):
    """GitHub and nbviewer strip ``<style>`` and ``style=``: the saved SVG carries its styles as
    presentation attributes, so it rasterises to the very same pixels (and in colour)."""
    nb, cells, _ = notebook
    for view, i in zip(VIEWS, cells):
        svg = nb.cells[i].outputs[0]["data"]["image/svg+xml"]
        assert "<style" not in svg and " style=" not in svg, view
        whole = check_picture("svg", svg.encode())
        stripped = decode("svg", strip_css(svg).encode())
        assert whole.tobytes() == stripped.tobytes(), view
        colours = whole.getcolors(maxcolors=1 << 20) or []
        assert sum(len(set(c)) > 1 for _, c in colours) > 1, f"the {view} picture has no colour"


def test_each_output_carries_a_png_of_its_svg_and_stays_under_the_cap(notebook):
    """JupyterLab draws no SVG of an untrusted notebook, but a PNG: each output has one, of the
    picture's size (half of it past ``MAX_PNG_BYTES``); no ``text/html`` (nbconvert would prefer it
    and escape it)."""
    nb, cells, _ = notebook
    for view, i in zip(VIEWS, cells):
        output = nb.cells[i].outputs[0]
        data = output["data"]
        assert "text/html" not in data and set(data) == {WIDGET_VIEW, MIME_TYPE, "text/plain", "image/svg+xml",
                                                         "image/png"}
        width, height = svg_size(data["image/svg+xml"])
        assert output["metadata"]["image/png"] == {"width": round(width), "height": round(height)}
        png = check_picture("png", base64.b64decode(data["image/png"]))
        scale = 1 if png.width == width else 0.5
        assert png.size == (round(scale * width), round(scale * height)), view
        size = len(json.dumps(data, separators=(",", ":")))
        parts = {k: len(json.dumps(v, separators=(",", ":"))) for k, v in data.items()}
        print(f"{view}: {size:,} bytes: {parts}")
        assert size <= MAX_SAVED_BYTES
