"""A recorded run's graph view (``forgeviz.open(path).graph_view()``): the graph view's widget and
renderer, drawing a graph from the run's files, with a step slider (and a rank selector) in its
toolbar. The inspector's replies come from the run's rows at the step shown, not from the kernel's
gradient store.

The run is read through the few methods of :class:`forgeviz.run.reader.Run` named below (this module
does not import the reader, which imports it to make the view).
"""

from __future__ import annotations

import math
from typing import Optional

import traitlets

from .._capture.session import CaptureSession
from .._capture.summary import format_number, wire_float
from ..model import as_wire
from ..model.graph import (
    Graph,
    ModuleDetail,
    NodeDetail,
    ParameterRow,
    RecordedGrads,
    RunSteps,
    TensorMeta,
    TensorSummary,
    graph_from_trait,
)
from ..model.run import MODULE, NODE, PARAMETER
from .base import RequestError
from .graph_base import GraphViewWidget

#: What the inspector says of a Node's recorded gradient, and of a parameter's applied one.
LOCAL_NOTE = "this rank's own gradient, as it reached the Node during backward: before any all-reduce"
APPLIED_NOTE = "as the optimizer applied it at this step: after DDP's all-reduce, clipping and the script"


class RecordedGraphWidget(GraphViewWidget):
    """The autograd graph a run recorded, at one step of one rank. Make it with
    ``forgeviz.open(path).graph_view(step, rank)``; ``show(step, rank)`` moves it (as the slider does).

    >>> import forgeviz
    >>> view = forgeviz.open("runs/exp1").graph_view(step=3)  # doctest: +SKIP
    >>> view.show(4)  # doctest: +SKIP
    """

    # The steps and ranks the slider offers and the one shown (a RunSteps): the browser asks for
    # another with a "step" request, answered here.
    steps = traitlets.Dict().tag(sync=True)
    requests = (*GraphViewWidget.requests, "step")

    def __init__(self, run, step: Optional[int], rank: int, session: CaptureSession) -> None:
        super().__init__(session)
        self._run = run
        self._graph_id: Optional[int] = None
        self._graph: Optional[Graph] = None
        self._step = self._rank = -1
        self._local: dict[int, dict] = {}  # Node id -> its row at the step shown
        self._applied: dict[str, dict] = {}  # parameter name -> its row at the step shown
        self._leaf_names: dict[int, str] = {}  # AccumulateGrad Node id -> its parameter's name
        self.show(step, rank)

    # --- what is shown ---------------------------------------------------------------------------
    @property
    def step(self) -> int:
        """The step shown."""
        return self._step

    @property
    def rank(self) -> int:
        """The rank shown."""
        return self._rank

    @property
    def model(self) -> Graph:
        """The recorded Graph with the figures of the step shown."""
        assert self._graph is not None
        return self._graph

    def show(self, step: Optional[int] = None, rank: Optional[int] = None) -> None:
        """Show ``step`` (None: the latest with gradients) of ``rank`` (None: the one shown). Raises
        ValueError for a step or rank the run did not record, saying which it did."""
        rank = self._rank if rank is None else rank
        ranks = self._run.ranks
        if not isinstance(rank, int) or isinstance(rank, bool) or rank not in ranks:
            raise ValueError(f"graph_view(): rank: expected one of the run's ranks {ranks}, got {rank!r}")
        steps = self._run.gradient_steps(rank)
        if not steps:
            raise ValueError(f"graph_view(): rank {rank} recorded no gradients ({self._run.why_no_step(rank, None)})")
        step = steps[-1] if step is None else step
        if not isinstance(step, int) or isinstance(step, bool) or step not in steps:
            raise ValueError(f"graph_view(): step: {self._run.why_no_step(rank, step)}")
        graph_id, trait = self._run.graph_at(step, rank)
        if trait is None:
            raise ValueError(f"graph_view(): rank {rank} recorded no autograd graph up to step {step}")
        if graph_id != self._graph_id or rank != self._rank or self._graph is None:
            graph = graph_from_trait(trait)
            # Another rank's (or step's) graph of the same shape keeps the one drawn: its Node ids (each
            # process numbers its own), layout and selection; rows name Nodes by position, not id.
            if self._graph is None or _shape(graph) != _shape(self._graph):
                self._graph = graph
            self._graph_id = graph_id
        self._step, self._rank = step, rank
        self._figures(self._run.rows_at(rank, step))
        with self.hold_sync():
            self.steps = as_wire(RunSteps(steps, step, ranks, rank))
            self._send_graph(self._graph)

    def _figures(self, rows: list[dict]) -> None:
        """Put the step's rows on the Nodes (badges) and Modules (‖∇‖ of their parameters)."""
        graph = self.model
        ids = [n.id for n in graph.nodes]
        self._local = {ids[r["node"]]: r for r in rows if r["kind"] == NODE and r["graph"] == self._graph_id
                       and r["node"] is not None and 0 <= r["node"] < len(ids)}
        self._applied = {r["name"]: r for r in rows if r["kind"] == PARAMETER}
        self._leaf_names = {}
        for node in graph.nodes:
            row = self._local.get(node.id)
            node.grad_passes = 1 if row else 0
            node.grad_brief = _brief(row) if row else None
            node.nonfinite = bool(row) and not all(math.isfinite(row[k]) for k in ("norm", "min", "max"))
            if node.kind == "leaf":
                name = row["name"] if row else node.label
                if name in self._applied or node.label in self._applied:
                    self._leaf_names[node.id] = name if name in self._applied else node.label
        by_module = {r["name"]: r["norm"] for r in rows if r["kind"] == MODULE}
        for module in graph.modules:
            inside = [norm for path, norm in by_module.items()
                      if not module.path or path == module.path or path.startswith(module.path + ".")]
            module.param_grad_norm = wire_float(math.sqrt(sum(n * n for n in inside))) if inside else None
            module.grad_norm = None
        # 0 in the graph trait and every state: the browser applies a state no older than its graph's
        graph.backward_passes = 0

    def _grads_text(self) -> str:
        return f"step {self._step} of rank {self._rank} (recorded)"

    def _saved_traits(self) -> dict:
        return {"steps": dict(self.steps)}

    # --- the inspector --------------------------------------------------------------------------
    def _meta(self, nid: int) -> tuple[list[Optional[TensorMeta]], list[Optional[TensorMeta]]]:
        """A Node's forward inputs and outputs, from the recorded graph's edges."""
        edges = self.model.edges
        inputs = [e.meta for e in sorted((e for e in edges if e.dst == nid), key=lambda e: e.input_nr)]
        outputs = [e.meta for e in sorted((e for e in edges if e.src == nid), key=lambda e: e.output_nr)]
        return inputs, outputs[:1] if outputs else []

    def _node_detail(self, nid: int) -> NodeDetail:
        node = next(n for n in self.model.nodes if n.id == nid)
        inputs, outputs = self._meta(nid)
        meta = outputs[0] if outputs else None
        row = self._local.get(nid)
        parameter = self._leaf_names.get(nid)
        applied = self._applied.get(parameter) if parameter else None
        missing = None
        if row is None:
            missing = (f"no gradient reached this Node at step {self._step} on rank {self._rank}"
                       if node.kind == "op" or parameter else
                       f"step {self._step} recorded no gradient for this Node on rank {self._rank}")
        module_types = {m.path: m.type for m in self.model.modules}
        recorded = RecordedGrads(self._step, self._rank, _summary(row, meta), parameter,
                                 _summary(applied, meta), missing)
        return NodeDetail(node.id, node.name, node.label, node.var_names, node.op, None, node.module_path,
                          module_types.get(node.module_path or ""), node.cell, node.line, None, inputs, outputs,
                          [], False, True, [], [], None, [], [], recorded=recorded, backward_passes=self._step)

    def _module_detail(self, module: str) -> ModuleDetail:
        modules = {m.id: m for m in self.model.modules}
        found = modules[module]
        inside = {module}
        for m in self.model.modules:  # parents come before children
            if m.parent in inside:
                inside.add(m.id)
        rows: list[ParameterRow] = []
        for mid in (m.id for m in self.model.modules if m.id in inside):
            for nid in modules[mid].nodes:
                name = self._leaf_names.get(nid)
                if name is None:
                    continue
                _, outputs = self._meta(nid)
                meta = outputs[0] if outputs else None
                short = name[len(found.path) + 1:] if found.path and name.startswith(found.path + ".") else name
                rows.append(ParameterRow(short, nid, list(meta.shape) if meta else [], meta.dtype if meta else "",
                                         _summary(self._applied.get(name), meta)))
        return ModuleDetail(found.id, found.path, found.type, found.op_count, found.param_count, found.param_bytes,
                            rows, None, None, found.param_grad_norm, True)

    # --- requests from the browser --------------------------------------------------------
    def _answer_step(self, request_id: int, content: dict) -> tuple[dict, None]:
        step, rank = content.get("step"), content.get("rank", self._rank)
        try:
            self.show(step, rank)
        except ValueError as exc:
            raise RequestError(str(exc).removeprefix("graph_view(): ")) from None
        return {"type": "step", "request_id": request_id, "steps": dict(self.steps)}, None


def _shape(graph: Graph) -> tuple:
    """A graph's structure with its Nodes by position (two processes give the same graph other ids)."""
    at = {n.id: i for i, n in enumerate(graph.nodes)}
    return (tuple((n.name, n.label, n.kind, n.module_path) for n in graph.nodes),
            tuple((at.get(e.src), at.get(e.dst), e.input_nr, e.output_nr) for e in graph.edges))


def _brief(row: dict) -> str:
    """A badge: the value of a one-element gradient, else its norm."""
    if row["numel"] == 1:
        return format_number(wire_float(row["mean"]))
    return f"‖g‖={format_number(wire_float(row['norm']))}"


def _summary(row: Optional[dict], meta: Optional[TensorMeta]) -> Optional[TensorSummary]:
    """A recorded row as the inspector's tensor summary; its shape and dtype those the graph recorded
    for the Node's output (where the row's element count agrees)."""
    if row is None:
        return None
    numel = int(row["numel"] or 0)
    fits = meta is not None and math.prod(meta.shape) == numel
    shape = list(meta.shape) if fits else ([] if numel == 1 else [numel])
    figures = [wire_float(row[k]) for k in ("norm", "min", "max", "mean")]
    # NaN and inf show in the figures themselves: a row holds no counts of them
    return TensorSummary(shape, meta.dtype if fits else "unknown dtype", meta.device if fits else "", numel,
                         *figures, values=[wire_float(row["mean"])] if numel == 1 else None)
