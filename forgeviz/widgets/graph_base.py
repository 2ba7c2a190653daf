"""What the live graph view (``graph.py``) and a recorded run's graph view (``recorded.py``) share: one
widget base over the one graph renderer (src/widgets/graph.ts)."""

from __future__ import annotations

from typing import Optional

import graphviz
import traitlets

from .._capture.session import CaptureSession
from .._capture.untraced import untraced
from ..export import to_digraph, to_dot
from ..model import as_wire
from ..model.graph import Graph, ModuleDetail, NodeDetail, graph_state, graph_trait
from .base import STATIC, RequestError, RequestWidget, Saved, esm

# A saved graph keeps the inspector's reply for each Node (and Module) up to this many Nodes.
MAX_SAVED_DETAILS = 300


class GraphViewWidget(RequestWidget):
    """What the live graph view (:class:`GraphWidget`) and a recorded run's graph view
    (``run.graph_view()``) share: the traits the one renderer draws (src/widgets/graph.ts), the
    inspector's requests, DOT, the summary and the saved output. A subclass says where its Graph
    (``model``) and its inspector's replies (``_node_detail``, ``_module_detail``) come from."""

    _esm = esm("graph.js")
    # The structure, sent once (again only when it changes: new names, say) ...
    graph = traitlets.Dict().tag(sync=True)
    # ... and what each backward changes: gradients, freed saved tensors (a GraphState).
    state = traitlets.Dict().tag(sync=True)
    # Module and Repeat ids the view shows expanded; the browser writes it, so a refresh or a new
    # display of this widget opens as the user left it.
    expanded = traitlets.List(traitlets.Unicode()).tag(sync=True)
    requests = ("inspect", "module", "dot", "graphviz", "view", "gone")  # a view announces itself
    view_name = "graph"
    save_formats = {".dot": "to_dot"}

    def __init__(self, session: CaptureSession) -> None:
        super().__init__(session)
        self._structure: Optional[dict] = None  # the graph trait as sent, less its dynamic fields

    @property
    def model(self) -> Graph:
        """The plain Graph being shown."""
        raise NotImplementedError

    def _node_detail(self, nid: int) -> NodeDetail:
        """What the inspector shows for Node ``nid`` (asked for by the browser, or saved)."""
        raise NotImplementedError

    def _module_detail(self, module: str) -> ModuleDetail:
        """What the inspector shows for Module ``module`` (asked for by the browser, or saved)."""
        raise NotImplementedError

    def _grads_text(self) -> str:
        """The summary's words on gradients."""
        passes = max(n.grad_passes for n in self.model.nodes)
        return f"grads after {passes} backward{'s' if passes != 1 else ''}" if passes else "no backward yet"

    def _saved_traits(self) -> dict:
        """The traits a saved output keeps, beyond the graph's own."""
        return {}

    def _send_graph(self, graph: Graph) -> None:
        """Send the structure only when it changed, less what the state carries; the state (a few
        bytes per Node) always: the browser applies it to the structure."""
        structure = graph_trait(graph)
        state = as_wire(graph_state(graph))
        key = {**structure, "backward_passes": None}
        if key != self._structure:
            self._structure = key
            with self.hold_sync():
                self.graph = structure
                self.state = state
        else:
            self.state = state


    def to_dot(self) -> str:
        """DOT source of this graph, made by ``graphviz.Digraph``.

        >>> import forgeviz, torch
        >>> x = torch.tensor([2.], requires_grad=True)
        >>> "MulBackward0" in forgeviz.graph(x * 3).to_dot()
        True
        """
        return to_dot(self.model)

    def to_digraph(self) -> graphviz.Digraph:
        """The same graph as a ``graphviz.Digraph`` (render it with a local ``dot`` if you have one)."""
        return to_digraph(self.model)

    def summary(self) -> str:
        """One line on what this view shows, from its model.

        >>> import forgeviz, torch
        >>> x = torch.tensor([2.], requires_grad=True)
        >>> forgeviz.graph(x * 3).summary()
        'forgeviz graph: 2 Nodes, Mul ← x; no backward yet'
        """
        graph = self.model
        if not graph.nodes:
            return f"forgeviz graph: {graph.message or 'empty'}"
        by_id = {n.id: n for n in graph.nodes}
        roots = [by_id[r].label for r in graph.roots if r in by_id]
        leaves = [n.label for n in graph.nodes if n.kind == "leaf"]
        shown = ", ".join(leaves[:4]) + (f" and {len(leaves) - 4} more" if len(leaves) > 4 else "")
        count = f"{len(graph.nodes):,} Node{'s' if len(graph.nodes) != 1 else ''}"
        if graph.total_nodes > len(graph.nodes):
            count += f" of {graph.total_nodes:,}"
        modules = f", {len(graph.modules):,} modules" if graph.modules else ""
        return f"forgeviz graph: {count}{modules}, {', '.join(roots)} ← {shown or 'no leaves'}; {self._grads_text()}"

    def _saved(self) -> Saved:
        """The traits the graph view draws from, and the inspector's reply for each Node and Module
        (for graphs of at most ``MAX_SAVED_DETAILS`` Nodes)."""
        graph = self.model
        traits = {"graph": self.graph, "state": self.state, "expanded": list(self.expanded),
                  "warnings": list(self.warnings), **self._saved_traits()}
        if len(graph.nodes) > MAX_SAVED_DETAILS:
            return Saved(self.summary(), traits,
                         cut=f"{len(graph.nodes):,} Nodes: details are saved for at most {MAX_SAVED_DETAILS}")
        with untraced():
            details = {"nodes": {str(n.id): as_wire(self._node_detail(n.id)) for n in graph.nodes},
                       "modules": {m.id: as_wire(self._module_detail(m.id)) for m in graph.modules}}
        return Saved(self.summary(), traits, details)

    # --- requests from the browser --------------------------------------------------------
    def _answer_inspect(self, request_id: int, content: dict) -> tuple[dict, None]:
        nid = content.get("node")
        if not isinstance(nid, int) or isinstance(nid, bool):
            raise RequestError(f"expected an integer node id, got {nid!r}")
        if nid not in {n.id for n in self.model.nodes}:
            raise RequestError(f"no node {nid} in this graph")
        return {"type": "inspect", "request_id": request_id, "detail": as_wire(self._node_detail(nid))}, None

    def _answer_module(self, request_id: int, content: dict) -> tuple[dict, None]:
        module = content.get("module")
        if not isinstance(module, str):
            raise RequestError(f"expected a module id (a string), got {module!r}")
        if module not in {m.id for m in self.model.modules}:
            raise RequestError(f"no module {module!r} in this graph")
        return {"type": "module", "request_id": request_id, "detail": as_wire(self._module_detail(module))}, None

    def _answer_dot(self, request_id: int, content: dict) -> tuple[dict, None]:
        return {"type": "dot", "request_id": request_id, "dot": self.to_dot()}, None

    def _answer_graphviz(self, request_id: int, content: dict) -> tuple[dict, list]:
        bundle = (STATIC / "graphviz.js").read_bytes()
        return {"type": "graphviz", "request_id": request_id}, [bundle]
