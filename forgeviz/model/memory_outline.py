"""A memory timeline's outline: many events as a few that draw the same picture (numpy only, no torch).

The memory view's saved outputs (``forgeviz.widgets.memory``) and a recorded run's memory stream past its
size budget (``forgeviz.run.memory``) both use :func:`downsample`.
"""

from __future__ import annotations

import numpy as np

from . import memory as m

PEAK_ZOOM = 16  # a saved timeline is this much finer around its peak (``downsample``)
_DTYPES = {"float32": "<f4", "float64": "<f8", "uint32": "<u4", "uint16": "<u2", "uint8": "u1"}


def _arrays(cols: dict) -> dict:
    """The tracker's column bytes as numpy arrays (views).

    >>> _arrays({"time": b"\\x00\\x00\\x80?"})["time"].tolist()
    [1.0]
    """
    kinds = dict(m.EVENT_COLUMNS)
    return {name: np.frombuffer(raw, dtype=_DTYPES[kinds[name]]) for name, raw in cols.items()}


def downsample(cols: dict, max_events: int) -> tuple[dict, np.ndarray, int]:
    """A long timeline as at most ``max_events`` events that draw the same outline.

    ``cols`` is the tracker's column bytes. The time axis is cut into slices, two levels of a
    pyramid: as many over the whole timeline as over the ``PEAK_ZOOM``-th of it around the peak,
    so a saved view zoomed in on the peak still shows its steps. In each slice, the state
    at the highest total live bytes is kept: per category, the exact live bytes after that event
    (all events are counted). Each kept point becomes, per category whose bytes changed, the free
    of a stand-in storage and the allocation of the next one (frees first, so no slice shows more
    than was live); the highest point (the peak) and the last are always among them. Stand-ins
    have no node, op, module or line (no hover details); time and cell are the kept event's.
    Returns ``(columns as bytes, the original index of each new event, the number of points)``.

    >>> t = np.arange(6, dtype="<f4"); b = np.full(6, 8.0); sid = np.array([0, 1, 2, 0, 1, 2], "<u4")
    >>> act = np.array([0, 0, 0, 1, 1, 1], "u1"); cat = np.full(6, m.TEMPORARY, "u1")
    >>> z = np.zeros(6, "<u2"); cols = dict(time=t, bytes=b, storage=sid, node=sid, op=z, module=z, cell=z,
    ...                                 line=z, action=act, category=cat)
    >>> out, index, points = downsample({k: v.tobytes() for k, v in cols.items()}, 4)
    >>> np.frombuffer(out["bytes"], "<f8").tolist(), index.tolist(), points
    ([16.0, 16.0, 24.0, 24.0], [1, 2, 2, 5], 3)
    """
    a = _arrays(cols)
    n = len(a["time"])
    action, cat, nbytes = a["action"].astype(np.int64), a["category"].astype(np.int64), a["bytes"]
    ncat = len(m.CATEGORIES)
    cat = np.where(cat < ncat, cat, ncat - 1)
    # the category each event takes bytes from: the storage's previous event's (its alloc or last
    # recategorisation), else its own
    order = np.lexsort((np.arange(n), a["storage"]))
    prev = np.empty(n, dtype=np.int64)
    same = np.r_[False, a["storage"][order][1:] == a["storage"][order][:-1]]
    prev[order] = np.where(same, np.r_[0, order[:-1]], order)
    before = cat[prev]
    live = np.zeros((ncat, n))
    np.add.at(live, (cat[action != m.FREE], np.flatnonzero(action != m.FREE)), nbytes[action != m.FREE])
    moved = action != m.ALLOC
    np.add.at(live, (before[moved], np.flatnonzero(moved)), -nbytes[moved])
    np.cumsum(live, axis=1, out=live)
    total = live.sum(axis=0)
    time = a["time"].astype(np.float64)
    lo, hi = float(time[0]), float(time[-1])
    # the second level: the peak's neighbourhood, PEAK_ZOOM times finer
    half = (hi - lo) / PEAK_ZOOM / 2
    w0 = min(max(lo, float(time[int(np.argmax(total))]) - half), hi - 2 * half)
    w1 = w0 + 2 * half
    near = (time >= w0) & (time <= w1)
    points = max(1, max_events // 4)
    while True:
        # the highest total in each time slice (of either level), and the last event
        coarse = np.minimum(((time - lo) / ((hi - lo) or 1.0) * points).astype(np.int64), points - 1)
        fine = points + np.minimum(((time - w0) / ((w1 - w0) or 1.0) * points).astype(np.int64), points - 1)
        slot = np.where(near, fine, coarse)
        best = np.lexsort((-total, slot))  # by slice, the highest total first
        first = np.r_[True, slot[best][1:] != slot[best][:-1]]
        keep = np.unique(np.r_[best[first], n - 1])
        values = live[:, keep]
        changed = np.diff(np.c_[np.zeros((ncat, 1)), values], axis=1) != 0
        frees = changed & (np.c_[np.zeros((ncat, 1)), values][:, :-1] > 0)
        allocs = changed & (values > 0)
        count = int(frees.sum() + allocs.sum())
        if count <= max_events or points <= 1:
            break
        points = max(1, points * max_events // count * 9 // 10)
    # the new events, point by point: frees (by category), then allocs
    out = {name: [] for name, _ in m.EVENT_COLUMNS}
    index, current = [], [None] * ncat
    next_id = 0
    for j, i in enumerate(keep.tolist()):
        for kind, mask in ((m.FREE, frees), (m.ALLOC, allocs)):
            for c in np.flatnonzero(mask[:, j]).tolist():
                if kind == m.FREE:
                    sid, b = current[c]
                else:
                    sid, b = next_id, float(values[c, j])
                    current[c], next_id = (sid, b), next_id + 1
                for name, v in (("time", time[i]), ("bytes", b), ("storage", sid), ("node", m.NO_ID),
                                ("op", m.NO_SMALL), ("module", m.NO_SMALL), ("cell", a["cell"][i]), ("line", 0),
                                ("action", kind), ("category", c)):
                    out[name].append(v)
                index.append(i)
    kinds = dict(m.EVENT_COLUMNS)
    return ({name: np.asarray(v, dtype=_DTYPES[kinds[name]]).tobytes() for name, v in out.items()},
            np.asarray(index, dtype=np.int64), len(keep))
