"""The autograd graph view: an anywidget over the pure TS renderer."""

from __future__ import annotations

import weakref
from typing import Mapping, Optional

import torch

from .._capture.fault import boundary
from .._capture.names import NameIndex
from .._capture.session import CaptureSession
from .._capture.untraced import untraced
from .._capture.walk import (
    MAX_NODES,
    NO_HISTORY,
    LiveGraph,
    build_graph,
    module_detail,
    node_detail,
    roots_of,
)
from ..model.graph import WIRE_VERSION, Graph, ModuleDetail, NodeDetail
from .graph_base import GraphViewWidget


class GraphWidget(GraphViewWidget):
    """A live autograd graph. Create it with ``forgeviz.graph(loss)``.

    It holds only weak references to the tensors it was given: once they are gone, it keeps its
    last snapshot and forgets the graph, so it never keeps your activations alive.
    """

    def __init__(self, values: tuple, session: CaptureSession, names: NameIndex,
                 namespace: Optional[Mapping[str, object]] = None, max_nodes: int = MAX_NODES) -> None:
        super().__init__(session)
        self._max_nodes = max_nodes
        self._names = names
        self._namespace = namespace
        self._tensor_refs: list[weakref.ref] = []
        self._held_nodes: list = []  # Nodes passed directly cannot be weakly referenced
        self_ref = weakref.ref(self)

        def forget(_):
            widget = self_ref()
            if widget is not None and not widget._roots():
                widget._live.nodes.clear()  # the snapshot stays; the graph may now be freed

        for value in values:
            if isinstance(value, torch.Tensor):
                self._tensor_refs.append(weakref.ref(value, forget))
            else:
                self._held_nodes.append(value)
        self._message = None if roots_of(values) else NO_HISTORY
        self._live = LiveGraph(Graph(WIRE_VERSION, [], [], [], [], [], self._message, 0, 0, None))
        self.dirty = False
        self.refresh()
        session.widgets.add(self)

    def _roots(self) -> list:
        values = [r() for r in self._tensor_refs] + self._held_nodes
        return roots_of(tuple(v for v in values if v is not None))

    def refresh(self) -> None:
        """Walk the graph again: new gradients, freed saved tensors, new names."""
        self.dirty = False
        self._show_new_faults()
        with boundary(self._session.fault, "drawing the graph") as guard:  # shown, never raised into the cell
            with untraced():
                if self._namespace is not None:
                    self._names.scan(self._namespace)
                roots = self._roots()
                if roots or not self._live.graph.nodes:
                    self._live = build_graph(roots, self._session, self._names, self._message, self._max_nodes)
                    self._send_graph(self._live.graph)
        if guard.failed:  # shown at once (and once: a fault the session told already this cell is not new to it)
            self._show_new_faults()
            if f"forgeviz: {guard.failed}" not in self.warnings:
                self._warn(f"forgeviz: {guard.failed}")

    def shown_nodes(self) -> set[int]:
        """The Node ids this view draws (the store keeps their gradients while it lives)."""
        return {n.id for n in self._live.graph.nodes}

    @property
    def model(self) -> Graph:
        """The plain Graph being shown."""
        return self._live.graph

    def _node_detail(self, nid: int) -> NodeDetail:
        with untraced():
            return node_detail(nid, self._live, self._session, bool(self._live.nodes))

    def _module_detail(self, module: str) -> ModuleDetail:
        with untraced():
            return module_detail(module, self._live, self._session)
