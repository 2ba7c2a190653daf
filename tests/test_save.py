"""``.save()`` on every view and the picture in each saved output: the same renderers the browser
uses, run headless (forgeviz.headless), checked against torch's numbers."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_headless import decode_png

from forgeviz.headless import HEADLESS_VIEWS
from forgeviz.widgets.base import _split_bundle

from scenarios import ROOT, S1


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def no_network(page: str) -> None:
    """Nothing a page would fetch: no script or link with a URL (XML namespaces are names, not loads)."""
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)
    assert all(u.startswith("http://www.w3.org/") for u in re.findall(r"https?://[^\s\"'`)<>]+", page))


def test_the_s1_graph_saves_as_svg_png_html_and_dot_with_torchs_gradients(nb, tmp_path):
    nb.ok(S1)
    nb.ok("loss.backward()\ng = forgeviz.graph(loss)")
    g, x_grad = nb["g"], nb["x"].grad
    svg = g.save(tmp_path / "g.svg").read_text()
    labels = set(re.findall(r'data-label="([^"]+)"', svg))
    assert {"x", "y", "z", "w", "loss"} <= labels
    assert f"∇ {x_grad.item():g}" in svg  # the badge of x: 64, from torch
    dark = g.save(tmp_path / "dark.svg", theme="dark").read_text()
    assert dark != svg and set(re.findall(r'data-label="([^"]+)"', dark)) == labels
    width, height = png_size(g.save(tmp_path / "g.png").read_bytes())
    assert width > 100 and height > 100
    page = g.save(tmp_path / "g.html").read_text()
    no_network(page)
    assert '"view": "graph"' in page and "globalThis.__forgevizView" in page
    assert "MulBackward0" in g.save(tmp_path / "g.dot").read_text()


def test_each_saved_output_carries_the_picture_for_pages_without_forgeviz(nb):
    nb.ok(S1)
    nb.ok("loss.backward()\ng = forgeviz.graph(loss)\nb = forgeviz.broadcast(torch.ones(3, 1), torch.ones(1, 4))"
          "\nt = torch.arange(12.).reshape(3, 4)\ns = forgeviz.strides(t, t.T)")
    for name in ("g", "b", "s"):
        data, _ = _split_bundle(nb[name]._repr_mimebundle_())
        assert data["image/svg+xml"].startswith("<svg") or "<svg" in data["image/svg+xml"][:200]
        assert data["image/png"] and "text/html" not in data  # tests/test_readers.py: who draws which
    data, _ = _split_bundle(nb["g"]._repr_mimebundle_())
    assert f"∇ {nb['x'].grad.item():g}" in data["image/svg+xml"]
    data, _ = _split_bundle(nb["b"]._repr_mimebundle_())
    assert all(str(d) in data["image/svg+xml"] for d in torch.broadcast_shapes((3, 1), (1, 4)))


def test_save_refuses_what_it_cannot_write_and_says_what_it_can(nb, tmp_path):
    nb.ok("b = forgeviz.broadcast(torch.ones(3, 1), torch.ones(1, 4))")
    b = nb["b"]
    with pytest.raises(ValueError, match=r"expected a path ending in .svg, .png, .html or .gif, got '.*b.jpg'"):
        b.save(tmp_path / "b.jpg")
    with pytest.raises(ValueError, match="theme: expected 'light' or 'dark', got 'sepia'"):
        b.save(tmp_path / "b.svg", theme="sepia")
    assert not (tmp_path / "b.svg").exists()
    page = b.save(tmp_path / "b.html", theme="dark").read_text()
    no_network(page)
    assert "memory" in HEADLESS_VIEWS


def test_a_memory_view_saves_its_picture_and_its_bundle_carries_it(nb, tmp_path):
    nb.ok("a = torch.zeros(1000)\nb = torch.ones(2000)")
    nb.ok("m = forgeviz.memory()")
    m = nb["m"]
    data, _ = _split_bundle(m._repr_mimebundle_())
    count = data["application/vnd.forgeviz.v1+json"]["traits"]["timeline"]["count"]
    assert count == m.model.count > 0
    assert f"{count:,} events" in data["image/svg+xml"]
    assert data["image/png"] and "text/html" not in data
    svg = m.save(tmp_path / "m.svg").read_text()
    assert f"{m.model.count:,} events" in svg
    assert png_size(m.save(tmp_path / "m.png").read_bytes())[0] > 100


def test_a_broadcast_saves_a_gif_and_one_svg_per_step(nb, tmp_path):
    nb.ok("v = forgeviz.broadcast(torch.ones(3, 1), torch.ones(1, 4), op='*')")
    v = nb["v"]
    steps = v.plan["steps"]
    gif = v.save(tmp_path / "v.gif", theme="dark").read_bytes()
    assert gif[:6] == b"GIF89a" and gif.count(b"\x21\xf9\x04") == len(steps)  # a delay per frame
    paths = v.save_steps(tmp_path / "slides")
    assert [p.name for p in paths] == [f"step-{k:02d}.svg" for k in range(1, len(steps) + 1)]
    for k, (path, step) in enumerate(zip(paths, steps)):
        assert f"step {k + 1} of {len(steps)}, {step['title']}" in path.read_text()
    assert all(str(d) in paths[-1].read_text() for d in torch.broadcast_shapes((3, 1), (1, 4)))


SCRIPT = """
import shutil, sys, torch, forgeviz
assert shutil.which("chromium") is None and shutil.which("dot") is None
out = sys.argv[1]
with forgeviz.capture():  # a plain script: capture makes the gradients known to the graph
    x = torch.tensor([2.], requires_grad=True)
    y = torch.tensor([3.], requires_grad=True)
    loss = (x * y + x) ** 2
    loss.backward()
    g = forgeviz.graph(loss)
t = torch.arange(12.).reshape(3, 4)
views = {"graph": g, "strides": forgeviz.strides(t, t.T),
         "broadcast": forgeviz.broadcast(torch.ones(3, 1), torch.ones(1, 4))}
with forgeviz.memory_trace() as trace:
    a = torch.zeros(1000)
    b = torch.ones(2000)
    del a
views["memory"] = trace.widget()
for name, view in views.items():
    for suffix in (".svg", ".png", ".html") + tuple(view.save_formats):
        view.save(f"{out}/{name}{suffix}")
print(x.grad.item())
"""


def test_every_view_saves_every_format_in_a_process_with_no_display_and_no_browser(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
    env["PATH"] = str(Path(sys.executable).parent)  # no chromium, no dot
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    x_grad = float(done.stdout.strip().splitlines()[-1])  # torch's, in that process
    for view in ("graph", "strides", "broadcast", "memory"):
        svg = (tmp_path / f"{view}.svg").read_text()
        assert svg.startswith("<?xml") and "</svg>" in svg[-20:]
        width, height, pixels = decode_png((tmp_path / f"{view}.png").read_bytes())
        assert width > 100 and height > 100 and len(set(pixels)) > 10, view  # drawn, not blank
        no_network((tmp_path / f"{view}.html").read_text())
    assert f"∇ {x_grad:g}" in (tmp_path / "graph.svg").read_text()
    assert "MulBackward0" in (tmp_path / "graph.dot").read_text()
    assert (tmp_path / "broadcast.gif").read_bytes()[:6] == b"GIF89a"
