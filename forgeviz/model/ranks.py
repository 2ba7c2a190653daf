"""The ranks model: per-module gradient norms per rank per step, and peak memory per rank. Plain
data, no torch, no pandas.

These dataclasses are the ONE definition of the wire format of the ranks view (``src/model/wire.ts``
is generated from them by ``forgeviz.model.tsgen``).

The norms travel as one base64 block of little-endian float64, ``[rank][module][step]`` in the
order of ``ranks``, ``modules`` and ``steps`` (8 ranks × 500 steps × 150 modules is 4.8 MB: as JSON
numbers it would be three times that). A cell no row gave is marked in ``missing`` (one byte a
cell, 1 = missing), ``""`` when every cell was given; NaN and ±inf are values, as torch gave them.
"""

from __future__ import annotations

import base64
import math
import numbers
import sys
from array import array
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

#: The most cells a saved output keeps (its JSON stays near 100 KB, leaving room for its picture):
#: past it, steps are merged into columns (see ``downsample``).
SAVED_CELLS = 9_000
COLUMNS = ("rank", "step", "module", "norm")


@dataclass
class RanksGrid:
    """Per-module gradient norms per rank per step, and each rank's peak memory: the ranks view's data."""

    title: Optional[str]
    ranks: list[int]  # ascending
    steps: list[int]  # ascending; with ``merged`` > 1, the first step of each column
    step_ends: list[int]  # the last step of each column (equal to ``steps`` when ``merged`` is 1)
    modules: list[str]  # in the order the rows first named them (model order, as given)
    norms: str  # base64 float64 little-endian, [rank][module][step]
    missing: str  # base64 uint8 per cell, 1 where no row gave it; "" when none is missing
    peaks: list[Optional[int]]  # peak bytes per rank, in ``ranks`` order; None where not given
    merged: int  # steps per column: 1 is every step; more in a saved output cut to size
    note: Optional[str]  # what was cut, in words


WIRE_TYPES = [RanksGrid]


def _got(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def _index(value: Any, what: str, row: int) -> int:
    """``value`` as a non-negative int (an integral float is one: pandas makes ints float beside a NaN)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"row {row}: {what} must be a non-negative integer, got {_got(value)}")
    if isinstance(value, numbers.Integral):
        out = int(value)
    else:
        f = float(value)
        if not math.isfinite(f) or not f.is_integer():
            raise ValueError(f"row {row}: {what} must be a non-negative integer, got {_got(value)}")
        out = int(f)
    if out < 0:
        raise ValueError(f"row {row}: {what} must be a non-negative integer, got {out}")
    return out


def _norm(value: Any, row: int) -> float:
    if isinstance(value, (bool, str, bytes)):
        raise ValueError(f"row {row}: norm must be a number (NaN and inf are shown as such), got {_got(value)}")
    try:
        out = float(value)  # a Python or numpy float, or a 0-d tensor's __float__
    except (TypeError, ValueError):
        raise ValueError(f"row {row}: norm must be a number (NaN and inf are shown as such), "
                         f"got {_got(value)}") from None
    if out < 0:
        raise ValueError(f"row {row}: norm must be ≥ 0 (it is a gradient norm), got {out!r}")
    return out


def _rows(norms: Any) -> Iterable:
    """The rows of ``norms``: a frame's ``itertuples(index=False)``, checked for its columns, or the iterable."""
    if hasattr(norms, "itertuples"):
        columns = getattr(norms, "columns", None)
        if columns is not None and [str(c) for c in columns] != list(COLUMNS):
            raise ValueError(f"norms: expected columns {list(COLUMNS)} in that order, got {[str(c) for c in columns]}"
                             f" (e.g. frame[{list(COLUMNS)}])")
        return norms.itertuples(index=False)
    if isinstance(norms, (str, bytes, Mapping)) or not hasattr(norms, "__iter__"):
        raise TypeError(f"norms: expected rows of (rank, step, module, norm) or a frame with those columns, "
                        f"got {type(norms).__name__}")
    return norms


def _encode(values: array) -> str:
    if sys.byteorder != "little":
        values = array(values.typecode, values)
        values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")


def _peaks(peaks: Any) -> dict[int, int]:
    if peaks is None:
        return {}
    if not isinstance(peaks, Mapping):
        raise TypeError(f"peaks: expected a mapping {{rank: peak bytes}}, got {type(peaks).__name__}")
    out = {}
    for rank, peak in peaks.items():
        try:
            r = _index(rank, "rank", 0)
            b = _index(peak, "peak bytes", 0)
        except ValueError as exc:
            raise ValueError(f"peaks[{rank!r}]: expected a non-negative integer rank and peak bytes, "
                             f"got {_got(rank)}: {_got(peak)}") from exc
        out[r] = b
    return out


def build_grid(norms: Any, peaks: Any = None, title: Optional[str] = None) -> RanksGrid:
    """The ranks view's data from ``(rank, step, module, norm)`` rows (or a frame with those columns)
    and ``{rank: peak bytes}``. Modules keep the order the rows first name them in.

    >>> g = build_grid([(0, 1, "fc", 2.0), (1, 1, "fc", 3.0), (0, 2, "fc", float("nan"))], {0: 10, 1: 12})
    >>> g.ranks, g.steps, g.modules, g.peaks, decode(g)
    ([0, 1], [1, 2], ['fc'], [10, 12], [2.0, nan, 3.0, None])
    >>> build_grid([(0, 1, "fc", -1.0)])
    Traceback (most recent call last):
    ...
    ValueError: row 0: norm must be ≥ 0 (it is a gradient norm), got -1.0
    """
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title: expected a string or None, got {type(title).__name__}")
    peak_of = _peaks(peaks)
    cells: dict[tuple[int, int, str], float] = {}
    module_order: dict[str, None] = {}
    for i, row in enumerate(_rows(norms)):
        try:
            rank, step, module, norm = row
        except (TypeError, ValueError):
            raise ValueError(f"row {i}: expected (rank, step, module, norm), got {row!r}") from None
        if not isinstance(module, str):
            raise ValueError(f"row {i}: module must be a string (a named_modules() path), got {_got(module)}")
        key = (_index(rank, "rank", i), _index(step, "step", i), module)
        if key in cells:
            raise ValueError(f"row {i}: rank {key[0]}, step {key[1]}, module {module!r} is given twice")
        cells[key] = _norm(norm, i)
        module_order.setdefault(module)
    ranks = sorted({k[0] for k in cells} | set(peak_of))
    steps = sorted({k[1] for k in cells})
    modules = list(module_order)
    r_at = {r: i for i, r in enumerate(ranks)}
    s_at = {s: i for i, s in enumerate(steps)}
    m_at = {m: i for i, m in enumerate(modules)}
    n_s, n_m = len(steps), len(modules)
    values = array("d", [math.nan]) * (len(ranks) * n_m * n_s)
    missing = bytearray(b"\x01") * len(values)
    for (rank, step, module), norm in cells.items():
        at = (r_at[rank] * n_m + m_at[module]) * n_s + s_at[step]
        values[at] = norm
        missing[at] = 0
    return RanksGrid(title=title, ranks=ranks, steps=steps, step_ends=list(steps), modules=modules,
                     norms=_encode(values),
                     missing=base64.b64encode(bytes(missing)).decode("ascii") if any(missing) else "",
                     peaks=[peak_of.get(r) for r in ranks], merged=1, note=None)


def _arrays(grid: RanksGrid) -> tuple[array, bytes]:
    values = array("d")
    values.frombytes(base64.b64decode(grid.norms))
    if sys.byteorder != "little":
        values.byteswap()
    missing = base64.b64decode(grid.missing) if grid.missing else bytes(len(values))
    return values, missing


def decode(grid: RanksGrid) -> list[Optional[float]]:
    """The grid's norms as a flat list, ``[rank][module][step]``, None where missing.

    >>> decode(build_grid([(0, 0, "a", 1.5), (0, 1, "b", 0.25)]))
    [1.5, None, None, 0.25]
    """
    values, missing = _arrays(grid)
    return [None if m else v for v, m in zip(values, missing)]


def _merge(cells: list[tuple[float, int]]) -> tuple[float, int]:
    """One column's value from its cells ``(value, missing)``: NaN if any is NaN, else the largest (inf too)."""
    given = [v for v, m in cells if not m]
    if not given:
        return math.nan, 1
    if any(math.isnan(v) for v in given):
        return math.nan, 0
    return max(given), 0


def downsample(grid: RanksGrid, max_cells: int = SAVED_CELLS) -> RanksGrid:
    """``grid`` with at most ``max_cells`` cells: consecutive steps merged into one column (its
    largest norm, NaN if any is NaN), and the note says so. Unchanged when it fits.

    >>> g = downsample(build_grid([(0, s, "fc", float(s)) for s in range(10)]), max_cells=4)
    >>> g.steps, g.step_ends, g.merged, decode(g)
    ([0, 3, 6, 9], [2, 5, 8, 9], 3, [2.0, 5.0, 8.0, 9.0])
    """
    rows = len(grid.ranks) * len(grid.modules)
    n_s = len(grid.steps)
    if rows * n_s <= max_cells or n_s <= 1:
        return grid
    merged = math.ceil(n_s / max(1, max_cells // max(1, rows)))
    values, missing = _arrays(grid)
    out, out_missing = array("d"), bytearray()
    starts = list(range(0, n_s, merged))
    for row in range(rows):
        for start in starts:
            v, m = _merge([(values[row * n_s + k], missing[row * n_s + k])
                           for k in range(start, min(n_s, start + merged))])
            out.append(v)
            out_missing.append(m)
    note = (f"saved at {len(starts)} columns of {merged} steps (each its largest norm, NaN if any is NaN) "
            f"to fit a saved output; the live view shows every step")
    return RanksGrid(title=grid.title, ranks=grid.ranks, steps=[grid.steps[s] for s in starts],
                     step_ends=[grid.steps[min(n_s, s + merged) - 1] for s in starts], modules=grid.modules,
                     norms=_encode(out),
                     missing=base64.b64encode(bytes(out_missing)).decode("ascii") if any(out_missing) else "",
                     peaks=grid.peaks, merged=merged, note=note)
