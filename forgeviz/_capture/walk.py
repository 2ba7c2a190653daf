"""Turn live torch Nodes into the plain Graph model, and one Node into a NodeDetail."""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, field
from typing import Optional

import torch

from ..model.graph import (
    WIRE_VERSION,
    Cluster,
    Edge,
    GradContribution,
    Graph,
    Node,
    NodeDetail,
    SavedValue,
    TensorMeta,
    shape_times_text,
)
from .grads import has_nonfinite, iter_graph, node_id
from .names import NameIndex, node_names
from .session import CaptureSession
from .source import cell_number, source_line
from .summary import brief, dtype_name, summarize

NO_HISTORY = "no autograd history (requires_grad=False)"
_saved_attrs_by_type: dict[type, list[str]] = {}


def _saved_attrs(node) -> list[str]:
    attrs = _saved_attrs_by_type.get(type(node))
    if attrs is None:
        attrs = [a for a in dir(type(node)) if a.startswith("_saved_")]
        _saved_attrs_by_type[type(node)] = attrs
    return attrs


def _saved_state(node, attrs: list[str]) -> tuple[bool, bool]:
    """(saved any tensor, those tensors are freed). Scalars like Add's alpha do not count."""
    has_tensor = False
    for attr in attrs:
        try:
            value = getattr(node, attr)
        except RuntimeError:  # "Trying to backward through the graph a second time ..."
            return True, True
        if isinstance(value, torch.Tensor) or (
            isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value)
        ):
            has_tensor = True
    return has_tensor, False


def _output_metas(node) -> list[Optional[TensorMeta]]:
    """Forward outputs of the op, from the Node's own input metadata (no tensor is kept)."""
    metas = []
    for m in node._input_metadata:
        try:
            metas.append(TensorMeta(list(m.shape), dtype_name(m.dtype), str(m.device)))
        except Exception:  # noqa: BLE001 - nested/symbolic shapes: say nothing rather than guess
            metas.append(None)
    return metas


def is_leaf_node(node) -> bool:
    return type(node).__name__ == "AccumulateGrad"


def _short_op(node) -> str:
    return re.sub(r"Backward\d*$", "", node.name().rsplit("::", 1)[-1]) or node.name()


@dataclass
class LiveGraph:
    """A Graph snapshot plus the live Nodes behind it (held only while the caller allows)."""

    graph: Graph
    nodes: dict[int, object] = field(default_factory=dict)
    tags: dict[int, tuple] = field(default_factory=dict)
    leaves: dict[int, "weakref.ref[torch.Tensor]"] = field(default_factory=dict)  # outlive the graph


def roots_of(values: tuple) -> list:
    """The starting Nodes for tensors (their grad_fn, or a leaf's AccumulateGrad) and Nodes."""
    roots = []
    for value in values:
        if isinstance(value, torch.Tensor):
            if value.grad_fn is not None:
                roots.append(value.grad_fn)
            elif value.requires_grad:
                roots.append(torch.autograd.graph.get_gradient_edge(value).node)
        elif isinstance(value, torch.autograd.graph.GradientEdge):
            roots.append(value.node)
        else:
            roots.append(value)  # a Node
    return roots


def is_node(value: object) -> bool:
    """True for a torch autograd Node (``grad_fn``), C++ or Python-defined."""
    return isinstance(value, torch.autograd.graph.Node)


def build_graph(roots: list, session: CaptureSession, names: NameIndex, message: Optional[str] = None) -> LiveGraph:
    """Walk from ``roots`` and describe every reachable Node.

    >>> x = torch.tensor([2.], requires_grad=True)
    >>> g = build_graph([(x * 3).grad_fn], CaptureSession(), NameIndex()).graph
    >>> sorted(n.name for n in g.nodes)
    ['MulBackward0', 'torch::autograd::AccumulateGrad']
    """
    store = session.store
    order = iter_graph(roots)
    live = LiveGraph(Graph(WIRE_VERSION, [], [], [], [], "", message, store.passes))
    ids = {id(n): node_id(n) for n in order}
    cluster_members: dict[tuple[int, str], list[int]] = {}
    cluster_info: dict[tuple[int, str], tuple[str, Optional[str]]] = {}  # key -> (root type, module type)
    output_metas: dict[int, list[Optional[TensorMeta]]] = {}  # per producer, shared by its out-edges
    for node in order:
        nid = ids[id(node)]
        live.nodes[nid] = node
        saved_state = _saved_state(node, _saved_attrs(node))
        tag = node.metadata.get("fv_op")
        grads = store.get(nid)
        last = grads.records[-1] if grads and grads.records else None
        cluster_key = None
        if is_leaf_node(node):
            variable = node.variable
            live.leaves[nid] = weakref.ref(variable)
            var_names = names.leaf_names(variable)
            param = session.modules.parameters.lookup(variable) or names.parameters.lookup(variable)
            label = var_names[0] if var_names else param[0] if param else shape_times_text(list(variable.shape))
            module_path = param[1] if param else None
            if param:
                cluster_key = (param[2], param[1])
            history = store.leaf_history(variable)
            grad_brief = brief(history.values[-1]) if history and history.values and variable.grad is not None else None
            kind, op = "leaf", None
        else:
            var_names = node_names(node)
            op = tag[0] if tag else None
            label = var_names[0] if var_names else (op or _short_op(node))
            module = tag[4] if tag else None
            module_path = module[2] if module else None
            if module:
                cluster_key = (module[0], module[2])
                cluster_info.setdefault(cluster_key, (module[1], module[3]))
            grad_brief = brief(last.grad_outputs[0]) if last and last.grad_outputs else None
            kind = "op"
        live.tags[nid] = tag
        if cluster_key is not None:
            cluster_members.setdefault(cluster_key, []).append(nid)
        nonfinite = bool(last and has_nonfinite(last.grad_inputs + last.grad_outputs))
        live.graph.nodes.append(Node(
            id=nid, name=node.name(), kind=kind, label=label, var_names=var_names, op=op,
            module_path=module_path,
            cell=cell_number(tag[2]) if tag else None, line=tag[3] if tag else None,
            has_saved=saved_state[0], freed=saved_state[1],
            grad_passes=len(grads.records) if grads else 0, grad_brief=grad_brief, nonfinite=nonfinite,
            first_nonfinite=bool(nonfinite and grads.first_nonfinite_pass == last.backward_index),
        ))
        for input_nr, (nxt, output_nr) in enumerate(node.next_functions):
            if nxt is None:
                continue
            metas = output_metas.get(id(nxt))
            if metas is None:
                metas = output_metas[id(nxt)] = _output_metas(nxt)
            meta = metas[output_nr] if output_nr < len(metas) else None
            live.graph.edges.append(Edge(ids[id(nxt)], nid, input_nr, output_nr, meta))
    live.graph.roots = [ids[id(r)] for r in roots if r is not None and id(r) in ids]
    live.graph.clusters = _clusters(cluster_members, cluster_info, session, names)
    return live


def _clusters(members, info, session: CaptureSession, names: NameIndex) -> list[Cluster]:
    """Nested clusters: every prefix of every module path becomes a cluster under its root."""
    clusters: dict[str, Cluster] = {}
    for (root_id, path), node_ids in members.items():
        root_name = (names.module_name(root_id) or session.modules.root_type(root_id)
                     or info.get((root_id, path), ("model",))[0])
        parts = path.split(".") if path else []
        parent = None
        for depth in range(len(parts) + 1):
            sub = ".".join(parts[:depth])
            cid = f"{root_name}.{sub}" if sub else root_name
            if cid not in clusters:
                mod_type = session.modules.module_type(root_id, sub) or (info.get((root_id, sub)) or (None, None))[1]
                shown = sub or root_name
                clusters[cid] = Cluster(cid, f"{shown} · {mod_type}" if mod_type else shown, parent, [])
            parent = cid
        clusters[parent].nodes.extend(node_ids)
    return list(clusters.values())


def node_detail(nid: int, live: LiveGraph, session: CaptureSession, alive: bool) -> NodeDetail:
    """Everything the inspector shows for node ``nid``, from the live Node when ``alive``."""
    snapshot = {n.id: n for n in live.graph.nodes}
    model = snapshot[nid]
    node = live.nodes.get(nid) if alive else None
    tag = live.tags.get(nid)
    store = session.store
    grads = store.get(nid)
    records = list(grads.records) if grads else []
    inputs: list[Optional[TensorMeta]] = []
    for edge in sorted((e for e in live.graph.edges if e.dst == nid), key=lambda e: e.input_nr):
        inputs.extend([None] * (edge.input_nr - len(inputs)))
        inputs.append(edge.meta)
    detail = NodeDetail(
        id=nid, name=model.name, label=model.label, var_names=model.var_names, op=model.op,
        op_qualname=tag[1] if tag else None, module_path=model.module_path,
        module_type=tag[4][3] if tag and tag[4] else None, cell=model.cell, line=model.line,
        source=source_line(tag[2], tag[3]) if tag else None, inputs=inputs, outputs=[], saved=[],
        freed=model.freed, alive=node is not None, grads=records, contributions=[],
        leaf_grad=None, leaf_grad_history=[],
    )
    if node is not None:
        detail.outputs = _output_metas(node)
        attrs = _saved_attrs(node)
        detail.freed = _saved_state(node, attrs)[1]
        if not detail.freed:
            detail.saved = [_saved_value(node, a) for a in attrs]
    leaf = live.leaves[nid]() if nid in live.leaves else None
    if leaf is not None:
        detail.leaf_grad = summarize(leaf.grad)
        history = store.leaf_history(leaf)
        detail.leaf_grad_history = list(history.values) if history else []
    # Each consumer's grad_inputs[input_nr] from its last pass: the paths that sum to this grad.
    for edge in live.graph.edges:
        if edge.src != nid:
            continue
        consumer = store.get(edge.dst)
        if consumer and consumer.records:
            record = consumer.records[-1]
            if records and record.backward_index != records[-1].backward_index:
                continue  # not part of this node's last pass
            grad = record.grad_inputs[edge.input_nr] if edge.input_nr < len(record.grad_inputs) else None
            detail.contributions.append(GradContribution(edge.dst, snapshot[edge.dst].label, edge.input_nr, grad))
    return detail


def _saved_value(node, attr: str) -> SavedValue:
    name = attr.removeprefix("_saved_")
    try:
        value = getattr(node, attr)
    except RuntimeError as exc:
        return SavedValue(name, None, f"freed ({str(exc).split('.')[0]})")
    if isinstance(value, torch.Tensor):
        return SavedValue(name, summarize(value), None)
    text = repr(value)
    return SavedValue(name, None, text if len(text) <= 200 else text[:197] + "...")

