"""``save(state=...)``: the stride and memory views export what they show beyond their data (a pinned
cell, the units, a zoom) as well as the default. Numbers come from torch."""

from __future__ import annotations

import re

import pytest
import torch


def mapping_of(svg: str) -> str | None:
    """The mapping line a stride export writes above its groups, or None."""
    m = re.search(r'class="fv-sd-mapping"[^>]*>([^<]*)<', svg)
    return m.group(1) if m else None


def test_a_pinned_cell_of_a_strided_view_exports_torchs_address_and_value(nb, tmp_path):
    nb.ok("base = torch.arange(24.).reshape(4, 6)\nv = base[:, 1::2]\ns = forgeviz.strides(base, v)")
    s, v = nb["s"], nb["v"]
    index = [2, 1]
    addr = v.storage_offset() + sum(i * k for i, k in zip(index, v.stride()))
    value = v[tuple(index)].item()
    default = s.save(tmp_path / "default.svg").read_text()
    assert mapping_of(default) is None
    pinned = s.save(tmp_path / "pinned.svg", state={"pinned": {"tensor": "v", "index": index}}).read_text()
    terms = " + ".join(f"{i}·{k}" for i, k in zip(index, v.stride()))
    assert mapping_of(pinned) == (f"Pinned · v[2, 1] → storage[{addr}] = {value:g}   "
                                  f"(offset {v.storage_offset()} + {terms})")
    assert re.search(r'class="fv-cell[^"]*fv-pinned', pinned) and not re.search(r'fv-pinned', default)
    # a storage element: every cell of both tensors that reads it
    element = addr
    readers = [f"base[{i}, {j}]" for i in range(4) for j in range(6) if base_addr(nb["base"], (i, j)) == element]
    readers += [f"v[{i}, {j}]" for i in range(4) for j in range(3) if base_addr(v, (i, j)) == element]
    by_storage = s.save(tmp_path / "storage.svg",
                        state={"units": "bytes", "pinned": {"tensor": "base", "element": element}})
    line = mapping_of(by_storage.read_text())
    assert line.startswith(f"Pinned · storage[{element}] ← {', '.join(readers)}")
    size = v.element_size()
    assert f"bytes {element * size}–{(element + 1) * size - 1}" in line
    png = s.save(tmp_path / "pinned.png", state={"pinned": {"tensor": "v", "index": index}}).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def base_addr(t, index) -> int:
    return t.storage_offset() + sum(i * k for i, k in zip(index, t.stride()))


def test_state_shown_draws_what_the_browser_view_reported(nb, tmp_path):
    nb.ok("t = torch.arange(6.).reshape(2, 3)\nu = t.T\ns = forgeviz.strides(t, u)")
    s = nb["s"]
    with pytest.raises(ValueError, match=r"state='shown': no browser has reported what this strides view shows"):
        s.save(tmp_path / "x.svg", state="shown")
    # what the browser writes when a cell is pinned (src/widgets/entry.ts stateChanged)
    s.view_state = {"units": "elements", "pinned": {"tensor": "u", "index": [2, 1], "element": None}}
    shown = s.save(tmp_path / "shown.svg", state="shown").read_text()
    assert mapping_of(shown).startswith(f"Pinned · u[2, 1] → storage[{base_addr(nb['u'], (2, 1))}]")
    # the default is still the default
    assert mapping_of(s.save(tmp_path / "default.svg").read_text()) is None


@pytest.mark.parametrize(("state", "message"), [
    ({"pinned": {"tensor": "w", "index": [0, 0]}},
     r"state\['pinned'\]\['tensor'\]: expected one of \['t', 'u'\], got 'w'"),
    ({"pinned": {"tensor": "t", "index": [0, 3]}},
     r"state\['pinned'\]\['index'\]: expected 2 integers within t's shape \[2, 3\], got \[0, 3\]"),
    ({"pinned": {"tensor": "t", "element": 6}}, r"state\['pinned'\]\['element'\]: expected an integer in \[0, 6\)"),
    ({"pinned": {"tensor": "t", "index": [0, 0], "element": 0}}, r"expected either 'index' .* or 'element'"),
    ({"units": "bits"}, r"state\['units'\]: expected 'elements' or 'bytes', got 'bits'"),
    ({"zoom": 2}, r"state: unknown key 'zoom'; expected 'units' or 'pinned'"),
    ("current", r"state: expected 'default', 'shown' or a dict \{'units': ..., 'pinned': ...\}, got 'current'"),
])
def test_a_bad_stride_state_says_what_was_expected_and_writes_nothing(nb, tmp_path, state, message):
    nb.ok("t = torch.arange(6.).reshape(2, 3)\nu = t.T\ns = forgeviz.strides(t, u)")
    with pytest.raises(ValueError, match=message):
        nb["s"].save(tmp_path / "bad.svg", state=state)
    assert not (tmp_path / "bad.svg").exists()


def test_views_without_a_state_refuse_one(nb, tmp_path):
    nb.ok("b = forgeviz.broadcast(torch.ones(3, 1), torch.ones(1, 4))")
    with pytest.raises(ValueError, match=r"the broadcast view has no zoom or pinned cell to save; expected state="):
        nb["b"].save(tmp_path / "b.svg", state={"pinned": 1})


def texts_of(svg: str) -> list[str]:
    return re.findall(r"<text[^>]*>([^<]*)</text>", svg)


def test_a_memory_view_exports_its_zoom_and_pinned_storage_with_torchs_bytes(tmp_path):
    import numpy as np

    import forgeviz
    from forgeviz.model.broadcast import format_bytes
    from forgeviz.widgets.memory import _arrays

    with forgeviz.memory_trace() as trace:
        keep = [torch.ones(256 * (1 + i % 4)) for i in range(40)]
        big = torch.ones(4096)
        del keep
    m = trace.widget()
    cols = _arrays(m._tracker.columns(0, m._tracker.count))
    nbytes = big.untyped_storage().nbytes()
    (alloc,) = np.flatnonzero(cols["bytes"] == nbytes)
    storage = int(cols["storage"][alloc])
    default = texts_of(m.save(tmp_path / "default.svg").read_text())
    state = {"x": "index", "range": [int(alloc) - 10, int(alloc) + 10], "pinned": storage}
    svg = m.save(tmp_path / "zoomed.svg", state=state).read_text()
    zoomed = texts_of(svg)
    # the x axis (its labels are centred): event numbers inside the range only
    ticks = [int(t) for t in re.findall(r'<text[^>]*text-anchor="middle"[^>]*>(\d+)</text>', svg)]
    assert len(ticks) >= 3 and min(ticks) >= alloc - 10 and max(ticks) <= alloc + 10
    assert not any(t.startswith("Pinned") for t in default)
    caption = zoomed[zoomed.index(f"Pinned · storage {storage}"):]
    assert f"temporary · {format_bytes(nbytes)} · ones" in caption[1]
    assert caption[2] == f"allocated at event {alloc}, still alive"
    png = m.save(tmp_path / "zoomed.png", state=state).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("state", "message"), [
    ({"x": "events"}, r"state\['x'\]: expected 'time' or 'index', got 'events'"),
    ({"range": [3, 1]}, r"state\['range'\]: expected \[start, end\] with start < end .*, got \[3, 1\]"),
    ({"range": [0, float("nan")]}, r"state\['range'\]: expected \[start, end\]"),
    ({"pinned": 10_000}, r"state\['pinned'\]: no storage 10000 in this timeline \(storage ids 0–\d+\)"),
    ({"pinned": "a"}, r"state\['pinned'\]: expected a storage id \(an integer\), got 'a'"),
    ({"zoom": 2}, r"state: unknown key 'zoom'; expected 'x', 'range' or 'pinned'"),
])
def test_a_bad_memory_state_says_what_was_expected_and_writes_nothing(tmp_path, state, message):
    import forgeviz

    with forgeviz.memory_trace() as trace:
        _ = [torch.ones(100) for _ in range(5)]
    with pytest.raises(ValueError, match=message):
        trace.widget().save(tmp_path / "bad.svg", state=state)
    assert not (tmp_path / "bad.svg").exists()
