"""The ranks view: per-module gradient norms per rank per step, checked against torch's own norms
of two "ranks" trained in one process (two copies of one model on different data), its bad-input
errors, and what a saved notebook keeps of it."""

from __future__ import annotations

import base64
import io
import json
import math

import pytest
import torch
from PIL import Image

import forgeviz
from forgeviz.model.ranks import SAVED_CELLS, decode
from forgeviz.widgets.base import MAX_SAVED_BYTES, MIME_TYPE, WIDGET_VIEW, _json_size, _split_bundle

STEPS = 4
DIVERGES = (1, 2)  # rank 1's gradients are scaled ×8 at step 2: the classic rank-dependent bug


def train_two_ranks():
    """Two copies of one MLP, each trained on its own data; rank 1's gradients diverge at step 2.
    Returns the rows (rank, step, module, norm) read from torch after each step's changes to .grad,
    as the optimizer applies them, the module order, and each rank's peak bytes (parameters + grads)."""
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    other = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    other.load_state_dict(base.state_dict())  # a second rank: the same start
    models = [base, other]
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    rows = []
    for step in range(STEPS):
        for rank, (model, opt) in enumerate(zip(models, optimizers)):
            g = torch.Generator().manual_seed(100 * rank + step)
            x, y = torch.randn(5, 6, generator=g), torch.randn(5, 3, generator=g)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            if (rank, step) == DIVERGES:
                for p in model.parameters():
                    p.grad.mul_(8)
            for name, module in model.named_modules():
                params = list(module.parameters(recurse=False))
                if params:  # the norm of the module's parameter gradients, as the optimizer applies them
                    rows.append((rank, step, name, torch.cat([p.grad.flatten() for p in params]).norm().item()))
            opt.step()
    peaks = {rank: sum(2 * p.nbytes for p in m.parameters()) for rank, m in enumerate(models)}
    return rows, peaks


class Frame:
    """A stand-in for a pandas DataFrame: ``columns`` and ``itertuples(index=False)`` (forgeviz imports no pandas)."""

    def __init__(self, columns, rows):
        self.columns, self._rows = list(columns), rows

    def itertuples(self, index=True):
        assert index is False
        return iter(self._rows)


def test_the_wire_grid_holds_torchs_norms_of_each_rank_module_and_step():
    rows, peaks = train_two_ranks()
    w = forgeviz.ranks(rows, peaks, title="two ranks")
    g = w.model
    assert g.ranks == [0, 1] and g.steps == list(range(STEPS)) and g.modules == ["0", "2"]  # model order
    assert g.peaks == [peaks[0], peaks[1]] and g.merged == 1 and g.missing == ""
    values = decode(g)
    for rank, step, module, norm in rows:  # every cell is torch's float, bit for bit
        assert values[(rank * len(g.modules) + g.modules.index(module)) * STEPS + step] == norm
    # the divergent step's norms differ across ranks (the spread mode's ratio is drawn from these)
    at = {(r, s, m): n for r, s, m, n in rows}
    _, s = DIVERGES
    assert at[(1, s, "2")] != at[(0, s, "2")]
    # the synced trait is the same grid (what the browser decodes)
    assert w.grid["norms"] == g.norms and w.grid["modules"] == ["0", "2"]
    # a frame with the four columns in order gives the same grid
    same = forgeviz.ranks(Frame(["rank", "step", "module", "norm"], rows), peaks, title="two ranks").model
    assert same == g


def test_nan_and_inf_are_values_and_gaps_are_missing():
    g = forgeviz.ranks([(0, 0, "a", math.nan), (0, 1, "a", math.inf), (1, 1, "a", 0.0)]).model
    values = decode(g)
    assert math.isnan(values[0]) and values[1] == math.inf and values[2] is None and values[3] == 0.0
    assert g.peaks == [None, None]


@pytest.mark.parametrize(("norms", "peaks", "message"), [
    (Frame(["rank", "step", "norm", "module"], []), None,
     "norms: expected columns ['rank', 'step', 'module', 'norm'] in that order, got ['rank', 'step', 'norm', 'module'] "
     "(e.g. frame[['rank', 'step', 'module', 'norm']])"),
    ([(math.nan, 0, "fc", 1.0)], None, "row 0: rank must be a non-negative integer, got nan (float)"),
    ([(0, 0, "fc", 1.0), (1.5, 0, "fc", 1.0)], None, "row 1: rank must be a non-negative integer, got 1.5 (float)"),
    ([(0, -1, "fc", 1.0)], None, "row 0: step must be a non-negative integer, got -1"),
    ([(0, 0, "fc", -0.5)], None, "row 0: norm must be ≥ 0 (it is a gradient norm), got -0.5"),
    ([(0, 0, "fc", "big")], None, "row 0: norm must be a number (NaN and inf are shown as such), got 'big' (str)"),
    ([(0, 0, 3, 1.0)], None, "row 0: module must be a string (a named_modules() path), got 3 (int)"),
    ([(0, 0, "fc")], None, "row 0: expected (rank, step, module, norm), got (0, 0, 'fc')"),
    ([(0, 0, "fc", 1.0), (0, 0, "fc", 2.0)], None, "row 1: rank 0, step 0, module 'fc' is given twice"),
    ([(0, 0, "fc", 1.0)], {0: -5},
     "peaks[0]: expected a non-negative integer rank and peak bytes, got 0 (int): -5 (int)"),
])
def test_bad_input_says_what_was_expected_and_what_was_given(norms, peaks, message):
    with pytest.raises(ValueError) as caught:
        forgeviz.ranks(norms, peaks)
    assert str(caught.value) == message


def test_bad_types_say_so():
    with pytest.raises(TypeError, match=r"norms: expected rows of \(rank, step, module, norm\) or a frame with those "
                                        r"columns, got dict"):
        forgeviz.ranks({"rank": [0]})
    with pytest.raises(TypeError, match=r"peaks: expected a mapping \{rank: peak bytes\}, got list"):
        forgeviz.ranks([], [1, 2])
    with pytest.raises(TypeError, match="title: expected a string or None, got int"):
        forgeviz.ranks([], title=3)


def _bundle(widget) -> dict:
    data, _ = _split_bundle(widget._repr_mimebundle_())
    return data


def test_the_saved_output_keeps_the_grid_and_a_picture_any_reader_shows():
    rows, peaks = train_two_ranks()
    w = forgeviz.ranks(rows, peaks)
    data = _bundle(w)
    assert {"text/plain", WIDGET_VIEW, MIME_TYPE, "image/svg+xml", "image/png"} <= set(data)
    assert data["text/plain"].startswith("forgeviz ranks: 2 ranks × 4 steps × 2 modules; peak memory ")
    payload = json.loads(json.dumps(data[MIME_TYPE]))
    assert payload["view"] == "ranks" and payload["traits"]["grid"] == w.grid  # small: saved exactly
    assert "rank 0" in data["image/svg+xml"] and "rank 1" in data["image/svg+xml"]
    picture = Image.open(io.BytesIO(base64.b64decode(data["image/png"]))).convert("RGB")
    assert len(picture.getcolors(1 << 20)) > 16  # a real picture: viridis cells, text, bars


def test_a_big_grid_is_saved_with_steps_merged_to_fit_and_says_so():
    ranks, steps, modules = 8, 500, 150
    rows = [(r, s, f"layers.{m}", (1 + m) * 1e-3 * (1 + s % 7) * (4 if r == 5 else 1))
            for r in range(ranks) for s in range(steps) for m in range(modules)]
    w = forgeviz.ranks(rows, {r: 2**30 + r for r in range(ranks)})
    assert len(w.model.steps) == steps  # live: every step
    data = _bundle(w)
    assert _json_size(data) <= MAX_SAVED_BYTES
    saved = data[MIME_TYPE]["traits"]["grid"]
    merged = saved["merged"]
    assert len(saved["ranks"]) * len(saved["modules"]) * len(saved["steps"]) <= SAVED_CELLS
    assert merged == math.ceil(steps / (SAVED_CELLS // (ranks * modules)))
    assert f"columns of {merged} steps" in data["text/plain"] and "the live view shows every step" in saved["note"]
    from forgeviz.model.ranks import RanksGrid
    values = decode(RanksGrid(**saved))
    # each column is the largest norm of its steps, as the rows gave them
    r, m, c = 5, 149, 1
    expected = max((1 + m) * 1e-3 * (1 + s % 7) * 4 for s in range(c * merged, min(steps, (c + 1) * merged)))
    assert values[(r * modules + m) * len(saved["steps"]) + c] == expected


def test_save_writes_svg_png_and_html(tmp_path):
    rows, peaks = train_two_ranks()
    w = forgeviz.ranks(rows, peaks)
    svg = w.save(tmp_path / "r.svg").read_text()
    assert svg.startswith("<?xml") and "peak memory per rank" in svg
    assert w.save(tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "forgeviz-data" in w.save(tmp_path / "r.html").read_text()
