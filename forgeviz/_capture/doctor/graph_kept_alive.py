"""``graph-kept-alive``: a name in the namespace holds autograd graphs from two or more earlier backward
steps (``losses.append(loss)``, ``total = total + loss``). Told after the cell, again only when it grows."""

from __future__ import annotations

import bisect

import torch

from .detector import CellEnd, Detector
from .graphs import WALK_LIMIT, graph_bytes, walk
from .sites import Site, size, tag_site


class GraphKeptAlive(Detector):
    """Tells the backward steps apart by the Doctor's ``marks`` (a Node is numbered after the Nodes it
    leads to, so a graph's sequence numbers say which steps made it)."""

    kind = "graph-kept-alive"

    def __init__(self, doctor) -> None:
        super().__init__(doctor)
        self._holders: dict[str, int] = {}  # namespace name → earlier steps' graphs it held when last reported

    def clear(self) -> None:
        self._holders.clear()

    def end_cell(self, end: CellEnd) -> None:
        self._kept_graphs(end)

    def _kept_graphs(self, end: CellEnd) -> None:
        """Names in the namespace that hold graphs from two or more earlier backward steps."""
        if end.user_ns is None or len(self.doctor.marks) < 2:
            return
        budget = [WALK_LIMIT]  # Nodes walked for single tensors' graphs, this cell
        holding = set()
        for name, value, held in end.holders():
            steps = self._earlier_steps(value, held, budget)
            if len(steps) < 2:
                continue
            holding.add(name)
            if len(steps) <= self._holders.get(name, 0):
                continue  # reported already, and not grown since
            self._holders[name] = len(steps)
            kept, nodes = graph_bytes(held)
            oldest = min(held, key=lambda t: t.grad_fn._sequence_nr())
            site = tag_site(oldest.grad_fn)
            if site is None or site.cell is None:
                site = Site(self.doctor.cell, None, "", None, None)
            what = "its autograd graph" if isinstance(value, torch.Tensor) else \
                f"{len(held)} tensors whose autograd graphs come"
            explanation = (f"`{name}` holds {what} from {len(steps)} earlier backward steps ({nodes} Nodes, the "
                           f"first made at {site.text()}): they stay alive, with {size(kept)} of tensors and "
                           "saved activations, for as long as it does.")
            fix = (f"Keep numbers, not graphs: {name} += loss.item() for a running total."
                   if isinstance(value, torch.Tensor) else
                   f"Keep numbers, not graphs: {name}.append(loss.item()) (or loss.detach()).")
            self.doctor.report(self.kind, site, explanation, fix, update=True)
        for name in [name for name in self._holders if name not in holding and name in end.user_ns]:
            del self._holders[name]  # it no longer holds them: told again if it comes to

    def _earlier_steps(self, value, held: list, budget: list) -> set[int]:
        """The earlier backward steps (indexes into the marks) whose graphs ``value`` keeps."""
        marks = self.doctor.marks
        last = len(marks)
        if isinstance(value, torch.Tensor):  # one tensor: the steps its one graph spans (total += loss)
            # a Node is numbered after the Nodes it leads to: a graph made before the first mark spans one step
            if budget[0] <= 0 or bisect.bisect_right(marks, value.grad_fn._sequence_nr()) == 0:
                return set()
            nodes = walk([value.grad_fn], budget[0])
            budget[0] -= len(nodes)
            seqs = [n._sequence_nr() for n in nodes if type(n).__name__ != "AccumulateGrad"]
        else:
            seqs = [t.grad_fn._sequence_nr() for t in held]
        return {step for step in (bisect.bisect_right(marks, s) for s in seqs) if step < last}
