"""forgeviz.headless: the browser's own renderers drawn in-process (V8 + happy-dom + Graphviz WASM), no browser.

Built through the real product (the widgets' traits), checked against torch's numbers.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

import forgeviz
from forgeviz import headless

from scenarios import ROOT, S1

pytestmark = pytest.mark.skipif(not headless.BUNDLE.exists(), reason="forgeviz/static/headless.js is not built")


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the RGBA pixels (4 bytes each) of an 8-bit RGBA or RGB PNG (resvg's)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), (depth, color)
            bpp = 4 if color == 6 else 3
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    pixels = [bytes(row[x * bpp:x * bpp + bpp]) + (b"" if bpp == 4 else b"\xff") for row in rows for x in range(width)]
    return width, height, pixels


def svg_texts(svg: str) -> list[str]:
    """Every run of drawn text (a <text>'s or a <tspan>'s own characters), entities decoded."""
    runs = re.findall(r"<(?:text|tspan)\b[^>]*>([^<]+)<", svg)
    return [t.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").strip() for t in runs]


def svg_size(svg: str) -> tuple[int, int]:
    m = re.search(r'<svg[^>]*\swidth="(\d+)"[^>]*\sheight="(\d+)"', svg)
    assert m, svg[:300]
    return int(m.group(1)), int(m.group(2))


def background(svg: str) -> str:
    m = re.search(r'<rect width="100%" height="100%" fill="([^"]+)"', svg)
    assert m, svg[:300]
    return m.group(1)


@pytest.fixture
def s1(nb):
    """S1 through the product: the graph widget after backward, and the tensors."""
    nb.ok(S1)
    nb.ok("g = forgeviz.graph(loss)\nloss.backward()")
    return nb["g"], nb


def grad_text(value: float) -> str:
    return f"{value:g}"


def test_s1_graph_svg_has_the_names_and_torchs_gradients(s1):
    widget, nb = s1
    svg = headless.render_svg("graph", headless.traits_of(widget))
    assert svg.startswith("<?xml") and "<svg" in svg
    texts = svg_texts(svg)
    for name in ("x", "y", "z", "w", "loss"):
        assert name in texts, (name, texts)
    # the ∇ badges hold torch's gradients (x.grad = 64, y.grad = 32: read from torch, not typed in)
    for leaf in ("x", "y"):
        assert f"∇ {grad_text(nb[leaf].grad.item())}" in texts, (leaf, texts)
    # the same SVG again: the engine is reused and the drawing is deterministic
    assert headless.render_svg("graph", headless.traits_of(widget)) == svg


def test_s1_traits_by_hand_give_the_same_svg_as_traits_of(s1):
    widget, _ = s1
    by_hand = {"graph": widget.graph, "state": widget.state, "expanded": list(widget.expanded)}
    assert headless.render_svg("graph", by_hand) == headless.render_svg("graph", headless.traits_of(widget))


def test_s1_png_is_the_svgs_size_and_not_blank(s1):
    widget, nb = s1
    traits = headless.traits_of(widget)
    w, h = svg_size(headless.render_svg("graph", traits))
    width, height, pixels = decode_png(headless.render_png("graph", traits, scale=2.0))
    assert (width, height) == (2 * w, 2 * h)
    assert len(set(pixels)) > 20  # text, boxes, badges, edges: many colours, not a blank page
    assert pixels[0][:3] == b"\xff\xff\xff"  # the light background in the corner
    width1, height1, _ = decode_png(headless.render_png("graph", traits, scale=1.0))
    assert (width1, height1) == (w, h)


def test_dark_theme_differs_from_light(s1):
    widget, _ = s1
    traits = headless.traits_of(widget)
    light, dark = headless.render_svg("graph", traits, "light"), headless.render_svg("graph", traits, "dark")
    assert background(light) == "#ffffff" and background(dark) == "#111"
    assert svg_texts(light) == svg_texts(dark)  # the same picture, other colours
    _, _, pixels = decode_png(headless.render_png("graph", traits, "dark", scale=1.0))
    assert pixels[0][:3] == b"\x11\x11\x11"


def test_save_chooses_the_format_by_suffix(s1, tmp_path):
    widget, _ = s1
    traits = headless.traits_of(widget)
    svg_path = headless.save("graph", traits, tmp_path / "loss.svg")
    assert svg_path.read_text(encoding="utf-8").startswith("<?xml")
    png_path = headless.save("graph", traits, str(tmp_path / "loss.PNG"), theme="dark")
    assert png_path.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match=r"expected \.svg or \.png \(or \.gif for broadcast\), got '\.jpg'"):
        headless.save("graph", traits, tmp_path / "loss.jpg")
    assert not (tmp_path / "loss.jpg").exists()


def test_bad_inputs_say_what_was_expected_and_what_was_given(s1):
    widget, _ = s1
    traits = headless.traits_of(widget)
    with pytest.raises(ValueError,
                       match=r"view must be one of 'graph', 'strides', 'broadcast', 'memory', 'ranks'; got 'graf'"):
        headless.render_svg("graf", traits)
    with pytest.raises(ValueError, match=r"traits\['timeline'\] must be the memory widget's 'timeline' trait"):
        headless.render_svg("memory", {"timeline": {}})
    with pytest.raises(ValueError, match=r"theme must be 'light' or 'dark'; got 'blue'"):
        headless.render_svg("graph", traits, "blue")
    with pytest.raises(ValueError, match=r"traits\['graph'\] must be .*got no 'graph', only \['layout'\]"):
        headless.render_svg("graph", {"layout": {}})
    with pytest.raises(ValueError, match=r"traits\['layout'\] must be .*got keys \['tensors'\]"):
        headless.render_svg("strides", {"layout": {"tensors": []}})
    with pytest.raises(TypeError, match="traits must be a dict"):
        headless.render_svg("graph", widget)
    # a JavaScript error inside the engine comes back as a Python exception with its message
    broken = dict(traits, graph=dict(traits["graph"], nodes={"rows": "many", "columns": {}}))
    with pytest.raises(headless.HeadlessError, match=r"could not draw the graph view: .+") as info:
        headless.render_svg("graph", broken)
    assert "JavaScript" not in str(info.value)
    # and the engine still works afterwards
    assert "loss" in svg_texts(headless.render_svg("graph", traits))


def test_callable_from_many_threads_at_once(s1):
    from concurrent.futures import ThreadPoolExecutor

    widget, _ = s1
    traits = headless.traits_of(widget)
    one = headless.render_svg("graph", traits)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda theme: headless.render_svg("graph", traits, theme), ["light", "dark"] * 3))
    assert results[0::2] == [one] * 3 and len(set(results[1::2])) == 1


def test_strides_svg_holds_torchs_shapes_strides_and_values():
    t = torch.arange(12.0).reshape(3, 4)
    views = [t, t.T, t[:, 1:3]]
    widget = forgeviz.strides(*views, names=["t", "t.T", "t[:, 1:3]"])
    svg = headless.render_svg("strides", headless.traits_of(widget))
    text = "\n".join(svg_texts(svg))
    for v in views:
        assert f"shape {tuple(v.shape)} · stride {v.stride()} · offset {v.storage_offset()}" in text, text
    cells = svg_texts(svg)
    for value in t.flatten().tolist():
        assert f"{value:g}" in cells
    assert background(headless.render_svg("strides", headless.traits_of(widget), "dark")) == "#111"


def test_broadcast_svg_holds_torchs_result_shape():
    a, b = torch.ones(3, 1), torch.ones(4)
    widget = forgeviz.broadcast(a, b)
    svg = headless.render_svg("broadcast", headless.traits_of(widget))
    shape = tuple(torch.broadcast_shapes(a.shape, b.shape))
    text = "\n".join(svg_texts(svg))
    assert f"result {shape}" in text, text
    nbytes = torch.empty(shape).element_size() * torch.empty(shape).numel()
    assert f"result {nbytes} B" in text


def in_a_fresh_process(widget, tmp_path, script: str, *args: str, env: dict) -> subprocess.CompletedProcess:
    """Run ``script`` in a new Python with the widget's traits saved at ``sys.argv[1]`` (then ``args``)."""
    traits_file = tmp_path / "traits.json"
    traits_file.write_text(json.dumps(headless.traits_of(widget)), encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", script, str(traits_file), *args], env={**env, "PYTHONPATH": str(ROOT)},
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def test_runs_with_no_display_and_no_browser_on_path(s1, tmp_path):
    """In a fresh process with DISPLAY unset and PATH holding only the venv's bin: no browser to find."""
    widget, _ = s1
    script = (
        "import json, shutil, sys\n"
        "assert shutil.which('chromium') is None and shutil.which('chromium-browser') is None\n"
        "assert shutil.which('dot') is None\n"
        "from forgeviz import headless\n"
        "traits = json.load(open(sys.argv[1]))\n"
        "headless.save('graph', traits, sys.argv[2])\n"
        "print(len(headless.render_svg('graph', traits)))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
    env["PATH"] = str(Path(sys.executable).parent)
    out = tmp_path / "s1.png"
    done = in_a_fresh_process(widget, tmp_path, script, str(out), env=env)
    assert int(done.stdout.strip()) > 1000
    width, height, pixels = decode_png(out.read_bytes())
    assert width > 100 and height > 100 and len(set(pixels)) > 20


@pytest.mark.parametrize("ops", [300, 1500])  # attached frame by frame; past BIG_VIEW_ITEMS: the layered layout
def test_a_long_chain_draws_every_node(nb, ops):
    nb.ok(f"t = torch.ones(3, requires_grad=True)\nh = t\nfor _ in range({ops}):\n    h = h * 1.0001")
    widget = nb.ok("forgeviz.graph(h)")
    traits = headless.traits_of(widget)
    folded = headless.render_svg("graph", traits)
    assert f"{ops} ops" in svg_texts(folded)  # first shown: the cell's ops folded into one box
    ids = traits["graph"]["modules"]["columns"]["id"]
    traits["expanded"] = list(ids if isinstance(ids, list) else ids["values"])  # as the expanded trait
    svg = headless.render_svg("graph", traits)
    drawn = set(re.findall(r'data-fv-node="(\d+)"', svg))
    assert len(drawn) == len(widget.model.nodes) == ops + 1  # every MulBackward0 and the leaf's AccumulateGrad


def test_a_missing_bundle_says_so_and_a_later_call_retries(s1, tmp_path):
    """In a fresh process: one V8 context a process (a second one, started beside this process's engine
    to stand for a fresh process, crashed mini-racer: a segfault in the full suite)."""
    widget, _ = s1
    script = (
        "import json, sys\n"
        "from forgeviz import headless\n"
        "traits, built = json.load(open(sys.argv[1])), headless.BUNDLE\n"
        "headless.BUNDLE = headless.BUNDLE.parent / 'missing' / 'headless.js'\n"
        "try:\n"
        "    headless.render_svg('graph', traits)\n"
        "except headless.HeadlessError as err:\n"
        "    print(err)\n"
        "headless.BUNDLE = built\n"
        "print(len(headless.render_svg('graph', traits)))\n"
    )
    said, drawn = in_a_fresh_process(widget, tmp_path, script, env=dict(os.environ)).stdout.strip().splitlines()[-2:]
    assert re.search(r"missing/headless\.js is missing: build the frontend", said), said
    assert int(drawn) > 1000  # the next call started an engine with the bundle: a failed start is not kept


# --- the memory timeline ---------------------------------------------------------------------------

def title_of(svg: str) -> str:
    return re.search(r"<title>([^<]*)</title>", svg).group(1)


def kib(n: int) -> str:
    """The view's byte label (src/render/memory/geom.ts bytesLabel) for n in [1 KiB, 1 MiB)."""
    return f"{n / 1024:.1f} KiB"


def test_a_memory_timeline_draws_torchs_events_and_peak():
    with forgeviz.memory_trace() as trace:
        a = torch.zeros(1000)
        b = torch.ones(2000)
        nbytes = a.nbytes + b.nbytes  # 12,000 bytes live at once: the peak
        del a, b
    widget = trace.widget()
    saved = widget._saved()
    assert saved.cut is None and len(saved.messages) == 1
    svg = headless.render_svg("memory", saved.traits, messages=saved.messages)
    # storages an earlier test left alive are on the timeline from its start, and still live at its end
    already = trace.live_bytes
    assert trace.peak_bytes - already == nbytes
    assert sum(1 for t in trace.events["time"] if t > 0) == 4  # two allocs, two frees
    assert title_of(svg) == f"forgeviz memory timeline (cpu): peak {kib(trace.peak_bytes)}, {widget.model.count} events"
    # a saved output's messages (base64) draw the same picture; without them there are no events
    from forgeviz.widgets.base import saved_payload

    payload = saved_payload("memory", saved)
    again = headless.render_svg("memory", payload["traits"], messages=payload["messages"])
    ids = re.compile(r"fv-mem-\d+-\d+")  # each view's own pattern ids
    assert ids.sub("id", again) == ids.sub("id", svg)
    assert title_of(headless.render_svg("memory", saved.traits)).endswith("peak 0 B, 0 events")
    png = headless.render_png("memory", saved.traits, messages=saved.messages)
    assert png[:4] == b"\x89PNG"


def test_a_cuda_allocator_history_draws_headless_with_reserved_bytes_and_its_oom():
    from cuda_fixtures import synthetic_snapshot

    widget = forgeviz.cuda_snapshot(synthetic_snapshot())
    saved = widget._saved()
    svg = headless.render_svg("memory", saved.traits, messages=saved.messages)
    model = widget.model
    assert model.cuda is not None and len(model.cuda.ooms) == 1
    peak = f"{model.peak_bytes / 2**20:.1f} MiB"
    assert title_of(svg) == f"forgeviz memory timeline (cuda:0): peak {peak}, {model.count} events"
    assert svg.count("OOM") == 1


def test_a_long_timeline_is_saved_downsampled_with_its_exact_peak():
    from forgeviz.model.memory import EVENT_COLUMNS, FREE
    from forgeviz.widgets.base import MAX_SAVED_BYTES, saved_payload
    from forgeviz.widgets.memory import MAX_SAVED_EVENTS, PEAK_ZOOM, _arrays

    with forgeviz.memory_trace() as trace:
        keep = []
        for i in range(3000):
            x = torch.ones(100 + i % 50)
            if i % 7 == 0:
                keep.append(x)
            if i % 300 == 0:
                keep.clear()
        del x, keep
    widget = trace.widget()
    count = widget.model.count
    assert count > MAX_SAVED_EVENTS
    payload = saved_payload("memory", widget._saved())
    assert len(json.dumps(payload, separators=(",", ":"))) <= MAX_SAVED_BYTES
    (message,) = payload["messages"]
    kept = message["content"]["count"]
    assert kept <= MAX_SAVED_EVENTS and payload["traits"]["timeline"]["count"] == kept
    assert f"{count:,} events saved as {kept:,}" in payload["details_cut"]
    # the saved events' live bytes reach torch's peak exactly, and end at what is live at the end
    import base64

    cols = _arrays({name: base64.b64decode(b) for (name, _), b in zip(EVENT_COLUMNS, message["buffers"])})
    live = (cols["bytes"] * (1 - 2 * (cols["action"] == FREE))).cumsum()
    assert live.max() == trace.peak_bytes and live[-1] == trace.live_bytes
    # a pyramid: the 16th of the timeline around the peak holds a third of the points (uniform: a 16th)
    time = cols["time"].astype(float)
    span = time[-1] - time[0]
    peak_time = time[int(live.argmax())]
    near = np.abs(time - peak_time) <= span / PEAK_ZOOM / 2 * 1.01
    assert near.sum() >= 0.25 * kept, f"{near.sum()} of {kept} saved events near the peak"
    svg = headless.render_svg("memory", payload["traits"], messages=payload["messages"])
    assert title_of(svg) == f"forgeviz memory timeline (cpu): peak {kib(trace.peak_bytes)}, {kept:,} events"


# --- the broadcast's GIF and steps ------------------------------------------------------------------

def gif_frames(data: bytes) -> int:
    """The number of images in a GIF (its blocks walked)."""
    assert data[:6] == b"GIF89a"
    flags, pos, frames = data[10], 13, 0
    if flags & 0x80:
        pos += 3 * 2 ** ((flags & 7) + 1)

    def sub_blocks(pos: int) -> int:
        while data[pos]:
            pos += data[pos] + 1
        return pos + 1

    while data[pos] != 0x3B:
        if data[pos] == 0x21:
            pos = sub_blocks(pos + 2)
        elif data[pos] == 0x2C:
            local = data[pos + 9]
            pos += 10 + (3 * 2 ** ((local & 7) + 1) if local & 0x80 else 0)
            pos = sub_blocks(pos + 1)
            frames += 1
        else:
            raise AssertionError(f"unexpected GIF block {data[pos]:#x} at {pos}")
    return frames


def test_the_broadcast_gif_has_a_frame_per_step_and_the_steps_draw_as_the_view_shows_them():
    a, b = torch.ones(3, 1), torch.ones(2, 1, 4)
    widget = forgeviz.broadcast(a, b, op="+")
    steps = widget.plan["steps"]
    assert len(steps) > 2
    gif = headless.render_gif(headless.traits_of(widget))
    assert gif_frames(gif) == len(steps)
    svgs = headless.render_steps(headless.traits_of(widget))
    assert len(svgs) == len(steps)
    for k, (svg, step) in enumerate(zip(svgs, steps)):
        assert f"step {k + 1} of {len(steps)}, {step['title']}" in title_of(svg)
    result = torch.broadcast_shapes(a.shape, b.shape)
    assert "(" + ", ".join(map(str, result)) + ")" in title_of(svgs[-1])
