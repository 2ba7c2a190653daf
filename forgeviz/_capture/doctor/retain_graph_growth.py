"""``retain-graph-growth``: ``retain_graph=True`` backwards at one line reach a bigger graph every time (the
state carried from step to step was never detached), keeping everything its Nodes saved alive."""

from __future__ import annotations

from ..untraced import untraced
from .detector import Checkup, Detector
from .graphs import saved_bytes, walk
from .sites import size

GROWTH_PASSES = 3  # retain_graph backwards at one line, each reaching more Nodes, before it is a finding


class RetainGraphGrowth(Detector):
    """The Nodes each retain_graph backward reaches, against the last ones at the same line."""

    kind = "retain-graph-growth"

    def __init__(self, doctor) -> None:
        super().__init__(doctor)
        self._retained: dict[tuple, list[int]] = {}  # retain_graph backward's line → Nodes it reached, lately

    def uninstall(self) -> None:
        self._retained.clear()

    def backward_begins(self, checkup: Checkup) -> None:
        if checkup.frees is not False or not checkup.roots:
            return
        site = checkup.site()
        if site is None:
            return
        key = (site.filename, site.file_line)
        nodes = walk(checkup.roots)
        counts = self._retained.setdefault(key, [])
        counts.append(len(nodes))
        del counts[:-GROWTH_PASSES]
        if len(counts) < GROWTH_PASSES or any(a >= b for a, b in zip(counts, counts[1:])):
            return
        with untraced():
            held = saved_bytes(nodes)
        explanation = (f"Each retain_graph=True backward at {site.text()} reached a bigger graph than the one "
                       f"before ({' → '.join(map(str, counts))} Nodes): the graph grows every pass and keeps what "
                       f"its Nodes saved alive, {size(held)} by now.")
        fix = ("Detach the state carried from one step to the next (h = h.detach()) and drop retain_graph=True unless "
               "you run backward twice through the same graph.")
        self.doctor.report(self.kind, site, explanation, fix, update=True)
