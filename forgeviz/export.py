"""Exports that Python makes: DOT through ``graphviz.Digraph``.

The same DOT is the layout input in the browser, so what you export is what you saw.
"""

from __future__ import annotations

import graphviz

from .model.broadcast import format_bytes
from .model.graph import Graph, Node, shape_times_text

_GRAPH_ATTRS = {
    "rankdir": "TB",
    "fontname": "Helvetica",
    "fontsize": "10",
    "nodesep": "0.3",
    "ranksep": "0.35",
    "labeljust": "l",
}
_NODE_ATTRS = {"shape": "box", "style": "rounded", "fontname": "Helvetica", "fontsize": "11", "margin": "0.12,0.06"}
_EDGE_ATTRS = {"fontname": "Helvetica", "fontsize": "9"}


def node_dot_name(node_id: int) -> str:
    """The DOT name of a model node: ``n<id>``. The browser maps layout objects back by it."""
    return f"n{node_id}"


def node_dot_label(node: Node) -> str:
    """Two lines: what the user calls it, then torch's Node name (or 'leaf').

    Lines are joined with DOT's ``\\n`` escape (a backslash and an n), which Graphviz centres;
    the browser splits the laid-out label on the same two characters.
    """
    second = "leaf" if node.kind == "leaf" else node.name
    if node.label == second:
        return _dot_text(node.label)
    return f"{_dot_text(node.label)}\\n{_dot_text(second)}"


def _dot_text(text: str) -> str:
    # Backslashes are DOT escapes; a user's name must not start one.
    return text.replace("\\", "\\\\")


def to_digraph(graph: Graph) -> graphviz.Digraph:
    """Build a ``graphviz.Digraph`` of the model graph, clusters nested by module path.

    >>> from forgeviz.model.graph import Graph
    >>> to_digraph(Graph(1, [], [], [], [], [], None, 0, 0, None)).source.startswith("digraph")
    True
    """
    dot = graphviz.Digraph("forgeviz", graph_attr=_GRAPH_ATTRS, node_attr=_NODE_ATTRS, edge_attr=_EDGE_ATTRS)
    nodes = {n.id: n for n in graph.nodes}
    children: dict[str | None, list] = {}
    for module in graph.modules:
        children.setdefault(module.parent, []).append(module)
    clustered = {nid for m in graph.modules for nid in m.nodes}
    # Number clusters in a stable order so the DOT is deterministic.
    counter = iter(range(1_000_000))

    def add_cluster(parent_dot: graphviz.Digraph, cluster) -> None:
        with parent_dot.subgraph(name=f"cluster_{next(counter)}") as sub:
            sub.attr(label=cluster.label, id=f"cluster:{cluster.id}", style="rounded,dashed")
            for nid in cluster.nodes:
                _add_node(sub, nodes[nid])
            for child in children.get(cluster.id, []):
                add_cluster(sub, child)

    for cluster in children.get(None, []):
        add_cluster(dot, cluster)
    for node in graph.nodes:
        if node.id not in clustered:
            _add_node(dot, node)
    for edge in graph.edges:
        attrs = {}
        if edge.meta is not None:
            label = shape_times_text(edge.meta.shape)
            if edge.meta.dtype != "float32":
                label += f" {edge.meta.dtype}"
            attrs["label"] = label
        dot.edge(node_dot_name(edge.src), node_dot_name(edge.dst), **attrs)
    return dot


def _add_node(dot: graphviz.Digraph, node: Node) -> None:
    dot.node(node_dot_name(node.id), label=node_dot_label(node), id=node_dot_name(node.id))


def to_dot(graph: Graph) -> str:
    """The DOT source of a model graph (no ``dot`` binary needed).

    >>> from forgeviz.model.graph import Graph
    >>> "digraph forgeviz" in to_dot(Graph(1, [], [], [], [], [], None, 0, 0, None))
    True
    """
    return to_digraph(graph).source


def cuda_timeline_figure(trace, title: str = "forgeviz CUDA memory timeline"):
    """A plotly figure of a :class:`~forgeviz._capture.cuda_memory.CudaTrace`: allocated bytes stacked by
    category, the reserved bytes over them, what ``empty_cache()`` released, and each OOM."""
    fig = timeline_figure(trace.columns, title)
    fig.add_trace(_scatter(trace.times, trace.reserved, "reserved (cached by the allocator)", "#000000", "dash"))
    if trace.released:
        when, size = zip(*trace.released)
        fig.add_trace(_markers(when, [trace.reserved[trace.times.index(t)] for t in when],
                               [f"segment freed: {format_bytes(s)}" for s in size], "segment freed", "triangle-down"))
    if trace.ooms:
        fig.add_trace(_markers([o.time for o in trace.ooms], [o.reserved for o in trace.ooms],
                               [f"OOM asking {format_bytes(o.requested)}; CUDA had {format_bytes(o.device_free)} free"
                                for o in trace.ooms], "OOM", "x"))
    return fig


def _scatter(x, y, name, color, dash):
    import plotly.graph_objects as go

    return go.Scatter(x=x, y=y, name=name, mode="lines", line={"color": color, "dash": dash, "width": 1.5})


def _markers(x, y, text, name, symbol):
    import plotly.graph_objects as go

    return go.Scatter(x=list(x), y=list(y), text=text, name=name, mode="markers",
                      marker={"symbol": symbol, "size": 11, "color": "#D55E00"}, hoverinfo="text")


def timeline_figure(columns, title: str = "forgeviz memory timeline"):
    """A plotly figure: live bytes stacked by category over time (one trace per category).

    ``columns`` maps the event column names (see ``forgeviz.model.memory.EVENT_COLUMNS``) to arrays.
    """
    import plotly.graph_objects as go

    from .model.memory import CATEGORIES, CATEGORY_COLORS, category_series

    times, series = category_series(columns["time"], columns["bytes"], columns["storage"], columns["action"],
                                    columns["category"])
    fig = go.Figure()
    for name, color in zip(CATEGORIES, CATEGORY_COLORS):
        fig.add_trace(go.Scatter(x=times, y=series[name], name=name, stackgroup="memory", mode="lines",
                                 line={"width": 0.5, "color": color}))
    fig.update_layout(title=title, xaxis_title="seconds", yaxis_title="bytes", hovermode="x unified")
    return fig
