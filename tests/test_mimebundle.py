"""What a saved notebook keeps of each view: the widget's bundle, a one-line text/plain with the
model's numbers, and the view's own JSON (application/vnd.forgeviz.v1+json) that Lab draws with no
kernel. Bundles are taken the way the kernel makes them: IPython's display formatter."""

from __future__ import annotations

import base64
import json

import pytest
import torch
from test_graph import independent_walk

from forgeviz._capture.session import get_session
from forgeviz.headless import svg_size
from forgeviz.model import rows_of
from forgeviz.model.memory import EVENT_COLUMNS
from forgeviz.widgets import base
from forgeviz.widgets.base import MAX_SAVED_BYTES, MIME_TYPE, WIDGET_VIEW, _json_size, _split_bundle
from forgeviz.widgets.graph import GraphWidget
from forgeviz.widgets.graph_base import MAX_SAVED_DETAILS

from scenarios import S1, make_gpt2


def bundle_of(nb, name: str) -> dict:
    """What the view displays (``_ipython_display_`` publishes this bundle, with a display id)."""
    data, _metadata = _split_bundle(nb[name]._repr_mimebundle_())
    return data


def saved_of(data: dict) -> dict:
    """The forgeviz JSON as a notebook file holds it (through json), checked for its layout."""
    payload = json.loads(json.dumps(data[MIME_TYPE]))
    assert payload["version"] == 1 and set(payload) >= {"view", "summary", "traits", "details"}
    return payload


def check_keys(data: dict) -> None:
    assert {"text/plain", WIDGET_VIEW, MIME_TYPE} <= set(data)
    assert "object at 0x" not in data["text/plain"] and data["text/plain"].startswith("forgeviz ")


def test_s1_graph_bundle_states_torchs_numbers_and_its_saved_detail_of_x_is_64(nb):
    nb.ok(S1)
    nb.ok("loss.backward()\ng = forgeviz.graph(loss)")
    data = bundle_of(nb, "g")
    check_keys(data)
    nodes, _edges = independent_walk(nb["loss"].grad_fn)
    assert data["text/plain"] == f"forgeviz graph: {len(nodes)} Nodes, loss ← x, y; grads after 1 backward"
    payload = saved_of(data)
    widget = nb["g"]
    assert payload["view"] == "graph" and "details_cut" not in payload
    assert payload["traits"]["graph"] == json.loads(json.dumps(widget.graph))
    assert payload["traits"]["state"] == json.loads(json.dumps(widget.state))
    assert payload["traits"]["expanded"] == []
    graph_nodes = rows_of(payload["traits"]["graph"]["nodes"])
    assert len(graph_nodes) == len(nodes) == len(payload["details"]["nodes"])
    x_id = next(n["id"] for n in graph_nodes if n["label"] == "x")
    detail = payload["details"]["nodes"][str(x_id)]
    assert detail["label"] == "x"
    assert detail["leaf_grad"]["values"] == nb["x"].grad.tolist() == [64.0]
    print(f"S1: {len(json.dumps(data[MIME_TYPE]))} bytes of forgeviz JSON, {len(json.dumps(data))} in all")
    assert len(json.dumps(payload)) < 20_000


def test_a_graph_shown_before_backward_says_so(nb):
    nb.ok(S1)
    nb.ok("g = forgeviz.graph(loss)")
    assert bundle_of(nb, "g")["text/plain"].endswith("; no backward yet")


def test_gpt2_small_shape_output_stays_bounded(nb):
    nb.shell.user_ns["make_gpt2"] = make_gpt2
    nb.ok("model = make_gpt2()\n"
          "idx = torch.randint(0, 1024, (1, 64))\n"
          "loss = torch.nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten())\n"
          "loss.backward()\n"
          "g = forgeviz.graph(loss)")
    data = bundle_of(nb, "g")
    check_keys(data)
    graph = nb["g"].model
    assert len(graph.nodes) > MAX_SAVED_DETAILS
    payload = saved_of(data)
    size = len(json.dumps(data[MIME_TYPE]))
    print(f"GPT-2-small shape: {len(graph.nodes)} Nodes, {size} bytes of forgeviz JSON")
    assert size <= MAX_SAVED_BYTES and 20 * len(json.dumps(data)) < 5_000_000
    # the whole output, its SVG and PNG too (a PNG is scaled down to fit, tests/test_readers.py)
    parts = {k: _json_size(v) for k, v in data.items()}
    print(f"GPT-2-small shape output: {_json_size(data):,} bytes: {parts}")
    assert _json_size(data) <= MAX_SAVED_BYTES and "image/svg+xml" in data and "image/png" in data
    assert payload["details"] == {} and str(len(graph.nodes)) in payload["details_cut"].replace(",", "")
    assert f"{len(graph.nodes):,} Nodes, {len(graph.modules)} modules" in data["text/plain"]


def test_strides_bundle(nb):
    nb.ok("t = torch.arange(12).reshape(3, 4)\nu = t.T\ns = forgeviz.strides(t, u)")
    data = bundle_of(nb, "s")
    check_keys(data)
    t = nb["t"]
    assert f"t (3, 4) stride {tuple(t.stride())}, contiguous" in data["text/plain"]
    assert f"u (4, 3) stride {tuple(t.T.stride())};" in data["text/plain"]
    assert data["text/plain"].endswith(f"; {len({t.untyped_storage().data_ptr()})} storage")
    payload = saved_of(data)
    assert payload["view"] == "strides" and payload["traits"]["layout"] == json.loads(json.dumps(nb["s"].layout))


def test_broadcast_bundle(nb):
    nb.ok("a = torch.ones(3, 1)\nb = torch.ones(1, 4)\nv = forgeviz.broadcast(a, b, op='+')\n"
          "bad = forgeviz.broadcast(torch.ones(3), torch.ones(4), op='+')")
    data = bundle_of(nb, "v")
    check_keys(data)
    result = torch.broadcast_shapes((3, 1), (1, 4))
    nbytes = (nb["a"] + nb["b"]).nbytes
    steps = len(nb["v"].plan["steps"])
    assert f"a (3, 1) + b (1, 4) → {tuple(result)}, {nbytes} B; {steps} steps" in data["text/plain"]
    payload = saved_of(data)
    assert payload["view"] == "broadcast" and payload["traits"]["plan"]["steps"] == nb["v"].plan["steps"]
    with pytest.raises(RuntimeError):
        torch.broadcast_shapes((3,), (4,))
    assert "fails at dim -1: 3 vs 4" in bundle_of(nb, "bad")["text/plain"]


def test_memory_bundle_keeps_its_events(nb):
    nb.ok("a = torch.zeros(1000)\nb = torch.ones(2000)")
    nb.ok("m = forgeviz.memory()")
    data = bundle_of(nb, "m")
    check_keys(data)
    timeline = nb["m"].model
    assert f"{timeline.count:,} events over {len(timeline.cells)} cells" in data["text/plain"]
    payload = saved_of(data)
    assert payload["view"] == "memory"
    (message,) = payload["messages"]
    assert message["content"] == {"type": "events", "start": 0, "count": timeline.count, "reset": True}
    assert len(message["buffers"]) == len(EVENT_COLUMNS)


def png_width(b64: str) -> int:
    return int.from_bytes(base64.b64decode(b64)[16:20], "big")  # IHDR's width


def test_a_png_that_would_pass_the_cap_is_scaled_down_then_left_out_and_the_output_says_so(nb, monkeypatch):
    nb.ok("v = forgeviz.broadcast(torch.ones(3, 1), torch.ones(1, 4), op='+')")
    data, metadata = base._split_bundle(nb["v"]._repr_mimebundle_())
    width, _ = svg_size(data["image/svg+xml"])
    assert png_width(data["image/png"]) == width and metadata["image/png"]["width"] == width
    # room for the PNG at 0.5x (a quarter of the 1x one's pixels) but not at 1x
    cap = _json_size(data) - _json_size(data["image/png"]) // 2
    monkeypatch.setattr(base, "MAX_SAVED_BYTES", cap)
    data, metadata = base._split_bundle(nb["v"]._repr_mimebundle_())
    assert abs(png_width(data["image/png"]) - width / 2) <= 1 and metadata["image/png"]["width"] == width
    assert _json_size(data) <= cap and "\n" not in data["text/plain"]
    monkeypatch.setattr(base, "MAX_SAVED_BYTES", _json_size(data) - _json_size(data["image/png"]) - 10)
    data, metadata = base._split_bundle(nb["v"]._repr_mimebundle_())
    assert "image/png" not in data and "image/svg+xml" in data and "image/png" not in (metadata or {})
    assert data["text/plain"].endswith("\n(the saved picture leaves out its PNG: too big for a saved output)")


@pytest.mark.faults_expected
def test_a_fault_in_the_saved_parts_leaves_the_widget_bundle(nb, monkeypatch):
    nb.ok(S1)
    nb.ok("g = forgeviz.graph(loss)")

    def broken(self):
        raise RuntimeError("injected")

    monkeypatch.setattr(GraphWidget, "_saved", broken)
    faults = get_session().fault_count
    data = bundle_of(nb, "g")
    assert WIDGET_VIEW in data and "text/plain" in data and MIME_TYPE not in data
    assert data[WIDGET_VIEW]["model_id"] == nb["g"].model_id
    assert get_session().fault_count == faults + 1 and "injected" in get_session().faults[-1]
