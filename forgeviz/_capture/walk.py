"""Turn live torch Nodes into the plain Graph model, and one Node into a NodeDetail."""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, field
from typing import Optional

import torch

from ..model.graph import (
    WIRE_VERSION,
    ChainTerm,
    Edge,
    GradContribution,
    Graph,
    Module,
    ModuleDetail,
    Node,
    NodeDetail,
    ParameterRow,
    SavedValue,
    TensorMeta,
    shape_times_text,
)
from .cadence import cadence_text
from .chain import formulas
from .compiled import compiled_region, count_at_line, is_compiled_region
from .grads import has_nonfinite, node_id
from .module_tree import ModuleTree, leaf_norm
from .names import NameIndex, node_names
from .saved import saved_attrs
from .session import CaptureSession
from .source import cell_number, source_line
from .summary import brief, dtype_name, summarize, wire_float

NO_HISTORY = "no autograd history (requires_grad=False)"
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


MAX_NODES = 20_000  # past this, a graph is cut to the Nodes nearest its roots


def reachable(roots: list, cap: int) -> tuple[list, int]:
    """The Nodes reachable from ``roots``, breadth-first (nearest the output first), at most ``cap``;
    and how many were found: more than ``cap`` when the graph goes on past them.

    The walk stops there rather than count the rest: torch frees a long chain of Nodes that Python
    has touched recursively, and past about 40,000 of them that overflows the stack.

    >>> x = torch.tensor([2.], requires_grad=True)
    >>> nodes, found = reachable([((x * 3) * 4).grad_fn], 2)
    >>> [n.name() for n in nodes], found
    (['MulBackward0', 'MulBackward0'], 3)
    """
    seen = {id(r) for r in roots if r is not None}
    kept = [r for r in roots if r is not None]
    i = 0
    while i < len(kept):
        for nxt, _ in kept[i].next_functions:
            if nxt is None or id(nxt) in seen:
                continue
            seen.add(id(nxt))
            if len(kept) < cap:
                kept.append(nxt)
        i += 1
    return kept, len(seen)


def build_graph(roots: list, session: CaptureSession, names: NameIndex, message: Optional[str] = None,
                max_nodes: int = MAX_NODES) -> LiveGraph:
    """Walk from ``roots`` and describe every reachable Node (the ``max_nodes`` nearest the roots).

    >>> x = torch.tensor([2.], requires_grad=True)
    >>> g = build_graph([(x * 3).grad_fn], CaptureSession(), NameIndex()).graph
    >>> sorted(n.name for n in g.nodes)
    ['MulBackward0', 'torch::autograd::AccumulateGrad']
    """
    store = session.store
    order, found = reachable(roots, max_nodes)
    live = LiveGraph(Graph(WIRE_VERSION, [], [], [], [], [], message, store.passes, found, None))
    if len(order) < found:
        live.graph.cut = (f"showing the {len(order):,} Nodes nearest the output; the graph has more. "
                          f"forgeviz.graph(..., max_nodes={4 * max_nodes}) draws more (slower)")
    ids = {id(n): node_id(n) for n in order}
    tree = ModuleTree(session, names.module_name)
    seq: dict[int, int] = {}
    leaf_info: dict[int, tuple[str, list[int], int, Optional[float]]] = {}
    output_metas: dict[int, list[Optional[TensorMeta]]] = {}  # per producer, shared by its out-edges
    in_grad_norms: dict[tuple[int, int], float] = {}  # per edge (dst, input_nr), of the last backward
    out_grad_norms: dict[tuple[int, int], float] = {}  # per tensor (producer, output_nr)
    for node in order:
        nid = ids[id(node)]
        live.nodes[nid] = node
        saved_state = _saved_state(node, saved_attrs(node))
        tag = node.metadata.get("fv_op")
        grads = store.get(nid)
        last = grads.records[-1] if grads and grads.records else None
        if is_leaf_node(node):
            variable = node.variable
            live.leaves[nid] = weakref.ref(variable)
            var_names = names.leaf_names(variable)
            param = session.modules.parameters.lookup(variable) or names.parameters.lookup(variable)
            label = var_names[0] if var_names else param[0] if param else shape_times_text(list(variable.shape))
            module_path = param[1] if param else None
            history = store.leaf_history(variable)
            grad_brief = brief(history.values[-1]) if history and history.values and variable.grad is not None else None
            if param:
                root_type = session.modules.root_type(param[2]) or "model"
                tree.add(nid, (param[2], root_type, param[1], None))
                summary = history.values[-1] if history and history.values else None
                leaf_info[nid] = (param[0], list(variable.shape), variable.numel() * variable.element_size(),
                                  leaf_norm(variable, summary))
            kind, op = "leaf", None
        else:
            seq[nid] = node._sequence_nr()
            if tag is None:  # a custom autograd.Function's Node (the mode never sees Function.apply)
                tag = session.function_tag(node)
            var_names = node_names(node)
            op = tag[0] if tag else None
            label = var_names[0] if var_names else (op or _short_op(node))
            if is_compiled_region(node):  # torch.compile's region: named by the module compiled
                region, tag = compiled_region(nid, node, tag, session, names)
                live.graph.compiled.append(region)
                label = f"{region.name} · compiled"
            module = tag[4] if tag else None
            module_path = module[2] if module else None
            if module:
                tree.add(nid, module)
            grad_brief = brief(last.grad_outputs[0]) if last and last.grad_outputs else None
            if last is not None and last.backward_index == store.recorded:
                for input_nr, grad in enumerate(last.grad_inputs):
                    if grad is not None and isinstance(grad.norm, (int, float)):
                        in_grad_norms[(nid, input_nr)] = float(grad.norm)
            kind = "op"
        live.tags[nid] = tag
        if last is not None and last.backward_index == store.recorded:
            for output_nr, grad in enumerate(last.grad_outputs):
                if grad is not None and isinstance(grad.norm, (int, float)):
                    out_grad_norms[(nid, output_nr)] = float(grad.norm)
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
            if nxt is None or id(nxt) not in ids:
                continue
            metas = output_metas.get(id(nxt))
            if metas is None:
                metas = output_metas[id(nxt)] = _output_metas(nxt)
            meta = metas[output_nr] if output_nr < len(metas) else None
            live.graph.edges.append(Edge(ids[id(nxt)], nid, input_nr, output_nr, meta))
    live.graph.roots = [ids[id(r)] for r in roots if r is not None and id(r) in ids]
    count_at_line(live.graph.compiled, live.tags)
    edges_by_dst: dict[int, list[Edge]] = {}
    for edge in live.graph.edges:
        edges_by_dst.setdefault(edge.dst, []).append(edge)
    live.graph.modules = tree.modules(live.graph.nodes, edges_by_dst, seq, leaf_info, in_grad_norms,
                                      out_grad_norms)
    live.graph.repeats = tree.repeats(live.graph.modules, live.graph.edges)
    live.graph.modules += _line_groups(live.graph, live.tags)
    return live


LINE_GROUP_MIN = 50  # top-level Nodes made by one line (a loop) fold into one box past this many


def _line_groups(graph: Graph, tags: dict[int, tuple]) -> list[Module]:
    """Boxes for the Nodes made outside any module by one line of code, when a loop made many: a
    10,000-step chain opens as one box "cell [4] line 3 · mul × 10,000", not as 10,000 boxes."""
    in_module = {nid for m in graph.modules for nid in m.nodes}
    groups: dict[tuple, list[Node]] = {}
    for node in graph.nodes:
        if node.kind == "op" and node.id not in in_module:
            tag = tags.get(node.id)
            groups.setdefault((tag[2], tag[3]) if tag else (None, None), []).append(node)
    out = []
    for (filename, line), nodes in groups.items():
        if len(nodes) <= LINE_GROUP_MIN:
            continue
        first = nodes[0]
        ops = sorted({n.op or n.name for n in nodes})
        what = ops[0] if len(ops) == 1 else f"{len(ops)} ops"
        if line is None:
            where = "made outside forgeviz's capture"
        else:
            where = f"cell [{first.cell}] line {line}" if first.cell is not None else f"{filename}:{line}"
        out.append(Module(
            id=f"line:{where}", path=where, label=f"{where} · {what} × {len(nodes):,}", type=None, parent=None,
            nodes=[n.id for n in nodes], op_count=len(nodes), param_count=0, param_bytes=0,
            signature="", grad_norm=None, param_grad_norm=None))
    return out


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
        leaf_grad=None, leaf_grad_history=[], chain=[],
        compiled=next((r for r in live.graph.compiled if r.node == nid), None),
        backward_passes=store.passes, grad_cadence=cadence_text(session.recorder.cadence),
    )
    if node is not None:
        detail.outputs = _output_metas(node)
        attrs = saved_attrs(node)
        detail.freed = _saved_state(node, attrs)[1]
        if not detail.freed:
            detail.saved = [_saved_value(node, a) for a in attrs]
    leaf = live.leaves[nid]() if nid in live.leaves else None
    if leaf is not None:
        detail.leaf_grad = summarize(leaf.grad)
        history = store.leaf_history(leaf)
        detail.leaf_grad_history = list(history.values) if history else []
    detail.chain = _chain_terms(grads, live, model, snapshot)
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


def _chain_terms(grads, live: LiveGraph, node: Node, snapshot: dict[int, Node]) -> list[ChainTerm]:
    """grad_output × local = grad_input for each input of a small elementwise Node's last pass."""
    if grads is None or grads.local is None or not grads.records:
        return []
    index, locals_ = grads.local
    record = grads.records[-1]
    if record.backward_index != index or not record.grad_outputs or record.grad_outputs[0] is None:
        return []
    grad_output = record.grad_outputs[0].values
    if grad_output is None:
        return []
    producers = {e.input_nr: e.src for e in live.graph.edges if e.dst == node.id}
    names = formulas(node.name)
    terms = []
    for input_nr, local in enumerate(locals_):
        grad_input = record.grad_inputs[input_nr] if input_nr < len(record.grad_inputs) else None
        if local is None or grad_input is None or grad_input.values is None or len(grad_input.values) != len(local):
            continue  # an input that was broadcast got a summed gradient: not one product per element
        src = snapshot.get(producers.get(input_nr, -1))
        label = src.label if src is not None else f"input {input_nr}"
        terms.append(ChainTerm(input_nr, label, names[input_nr] if input_nr < len(names) else "", list(grad_output),
                               [wire_float(v) for v in local], list(grad_input.values)))
    return terms


def module_detail(module_id: str, live: LiveGraph, session: CaptureSession) -> ModuleDetail:
    """The inspector's view of one module: its parameters (with their gradients now) and a
    histogram of all their gradients together."""
    modules = {m.id: m for m in live.graph.modules}
    module = modules[module_id]
    inside = {module_id}
    for m in live.graph.modules:  # parents come before children in named_modules() order
        if m.parent in inside:
            inside.add(m.id)
    labels = {n.id: n.label for n in live.graph.nodes}
    rows: list[ParameterRow] = []
    grads: list[torch.Tensor] = []
    alive = False
    for mid in (m.id for m in live.graph.modules if m.id in inside):
        for nid in modules[mid].nodes:
            ref = live.leaves.get(nid)
            if ref is None:
                continue
            leaf = ref()
            if leaf is None:  # the model is gone: what the graph recorded
                rows.append(ParameterRow(labels[nid], nid, [], "", None))
                continue
            alive = True
            param = session.modules.parameters.lookup(leaf)
            name = param[0] if param else labels[nid]
            if module.path and name.startswith(module.path + "."):
                name = name[len(module.path) + 1:]
            rows.append(ParameterRow(name, nid, list(leaf.shape), dtype_name(leaf.dtype), summarize(leaf.grad)))
            if leaf.grad is not None:
                grads.append(leaf.grad)
    return ModuleDetail(module.id, module.path, module.type, module.op_count, module.param_count,
                        module.param_bytes, rows, _pooled_histogram(grads), module.grad_norm,
                        module.param_grad_norm, alive)


def _pooled_histogram(grads: list[torch.Tensor], sample: int = 65_536):
    """One histogram of many tensors' values: each contributes an evenly strided sample in proportion
    to its size, so a bias does not weigh as much as a weight matrix."""
    total = sum(g.numel() for g in grads)
    if not total:
        return None
    step = max(1, round(total / sample))
    parts = [g.detach().reshape(-1)[::step].to("cpu", torch.float32) for g in grads]
    summary = summarize(torch.cat(parts))
    return summary.histogram if summary is not None else None


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

