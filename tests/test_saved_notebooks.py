"""Notebooks run headless (nbclient) keep every forgeviz picture: each output carries the view's
own JSON, an SVG drawn by the browser's renderers and a PNG of it, and an honest text/plain;
nbconvert's HTML shows the SVG offline; a notebook of 20 outputs stays under 5 MB."""

from __future__ import annotations

import base64
import json
import re

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter

from forgeviz.widgets.base import MIME_TYPE, WIDGET_VIEW

from scenarios import GPT2_SOURCE, ROOT

EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.ipynb"))
MAX_NOTEBOOK_BYTES = 5_000_000


def run(nb, store_widget_state: bool = False):
    """Run ``nb`` in a fresh kernel as nbclient does for papermill and CI; a notebook meant for
    nbconvert is run without widget state (nbconvert would otherwise prefer the widget, which
    needs a CDN to draw)."""
    NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=store_widget_state,
                   resources={"metadata": {"path": str(ROOT / "examples")}}).execute()
    return nb


def forgeviz_outputs(nb) -> list[dict]:
    return [o["data"] for c in nb.cells for o in c.get("outputs", []) if WIDGET_VIEW in o.get("data", {})]


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_forgeviz_output_of_an_example_run_headless_keeps_its_picture(name):
    nb = run(nbformat.read(ROOT / "examples" / name, as_version=4))
    outputs = forgeviz_outputs(nb)
    assert outputs, f"{name} shows no forgeviz view"
    for data in outputs:
        assert data[MIME_TYPE]["version"] == 1 and data[MIME_TYPE]["view"] in data["text/plain"]
        assert data["text/plain"].startswith("forgeviz ") and "object at 0x" not in data["text/plain"]
        svg = data["image/svg+xml"]
        assert "<svg" in svg[:200] and "</svg>" in svg[-20:]
        assert "text/html" not in data
        if "image/png" in data:  # else too big (02's four-tensor strides: its SVG is 122 KB), and it says so
            assert base64.b64decode(data["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
        else:
            assert data["text/plain"].endswith("(the saved picture leaves out its PNG: too big for a saved output)")


def test_nbconvert_html_of_the_autograd_example_shows_each_picture_offline():
    nb = run(nbformat.read(ROOT / "examples" / "01_autograd.ipynb", as_version=4))
    # the example prints (x.grad, y.grad) after backward: torch's numbers, read from the run
    printed = next(o["data"]["text/plain"] for c in nb.cells for o in c.get("outputs", [])
                   if o.get("data", {}).get("text/plain", "").startswith("(tensor(["))
    x_grad = float(re.match(r"\(tensor\(\[([-\d.e]+)\]\)", printed).group(1))
    page, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    # each output area nbconvert wrote for a forgeviz picture: an <img> of its SVG (tests/test_readers.py
    # decodes them, in every reader)
    pictures = [base64.b64decode(b).decode() for b in re.findall(
        r'data-mime-type="image/svg\+xml"[^>]*>\s*<img [^>]*src="data:image/svg\+xml;base64,([^"]+)"', page)]
    assert len(pictures) == len(forgeviz_outputs(nb))
    # the S1 graph was drawn before backward: its saved picture shows the state after it
    assert any(f"∇ {x_grad:g}" in a for a in pictures)
    for area in pictures:  # the pictures load nothing: no script, no link, no URL but XML namespaces
        assert "<script" not in area and not re.search(r"\s(src|href)=", area)
        assert all(u.startswith("http://www.w3.org/") for u in re.findall(r"https?://[^\s\"'`)<>]+", area))


def test_a_notebook_of_twenty_outputs_stays_under_five_megabytes(tmp_path):
    views = [
        "forgeviz.graph(loss)",
        "forgeviz.graph(gpt_loss)",
        "t = torch.arange(24.).reshape(4, 6)\nforgeviz.strides(t, t.T, t[:, 1:4])",
        "forgeviz.broadcast(torch.ones(8, 1, 6), torch.ones(7, 1))",
        "forgeviz.memory()",
    ]
    cells = [
        "%load_ext forgeviz\nimport torch, forgeviz",
        "x = torch.tensor([2.], requires_grad=True)\ny = torch.tensor([3.], requires_grad=True)\n"
        "loss = ((x * y + x) ** 2).sum()\nloss.backward()",
        GPT2_SOURCE + "\ntorch.manual_seed(0)\nidx = torch.randint(0, 1024, (1, 32))\n"
        "gpt = GPT(vocab=1024, seq=64, d=768, n_layer=12, n_head=12)\n"
        "gpt_loss = torch.nn.functional.cross_entropy(gpt(idx).flatten(0, 1), idx.flatten())\ngpt_loss.backward()",
    ] + [views[i % len(views)] for i in range(20)]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    run(nb, store_widget_state=True)  # the bigger case: the widgets' state saved too
    path = tmp_path / "twenty.ipynb"
    nbformat.write(nb, path)
    outputs = forgeviz_outputs(nb)
    assert len(outputs) == 20
    size = path.stat().st_size
    per_output = sorted(len(json.dumps(d)) for d in outputs)
    state = len(json.dumps(nb.metadata.get("widgets", {})))
    print(f"20 outputs: {size:,} bytes, {state:,} of them widget state; "
          f"per output {per_output[0]:,} to {per_output[-1]:,}")
    assert size < MAX_NOTEBOOK_BYTES
