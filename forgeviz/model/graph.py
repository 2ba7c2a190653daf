"""The autograd-graph model: plain data, no torch.

These dataclasses are the ONE definition of the wire format for the graph view.
``forgeviz.model.tsgen`` turns them into ``src/model/wire.ts``; a test keeps the two equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional, Union

from . import as_table, as_wire, rows_of

WIRE_VERSION = 1

# A float on the wire. JSON has no NaN or Infinity, so non-finite values travel as the strings
# "NaN", "Infinity" and "-Infinity" (the spellings JavaScript's Number() parses back).
WireFloat = Union[float, str]


@dataclass(slots=True)  # made for most gradients of every backward pass (as are the two below)
class Histogram:
    """Counts of finite values: in equal-width bins over [lo, hi], or, when ``edges`` is given, bin i
    holds [edges[i], edges[i+1]) (gradients summarised on their device: sign × log2-magnitude bins
    fixed in advance, whose outer bins reach the dtype's finite extremes; lo and hi are then the min
    and max of the values)."""

    lo: WireFloat
    hi: WireFloat
    counts: list[int]
    edges: Optional[list[WireFloat]] = None


@dataclass(slots=True)
class TensorSummary:
    """A small, copy-free description of a tensor: never the tensor itself.

    ``values`` holds the exact values (flattened, row-major) only for small tensors.
    Float stats are ``None`` when they do not apply (empty, or non-numeric dtype).
    """

    shape: list[int]
    dtype: str
    device: str
    numel: int
    norm: Optional[WireFloat] = None
    min: Optional[WireFloat] = None
    max: Optional[WireFloat] = None
    mean: Optional[WireFloat] = None
    nan_count: int = 0
    inf_count: int = 0
    values: Optional[list[WireFloat]] = None
    histogram: Optional[Histogram] = None


@dataclass
class TensorMeta:
    """Shape, dtype and device of a tensor that flows along an edge (read from node metadata)."""

    shape: list[int]
    dtype: str
    device: str


@dataclass(slots=True)
class GradRecord:
    """What one backward pass sent through one node.

    Follows torch's Node-hook naming: ``grad_outputs`` are the gradients w.r.t. the forward
    outputs of the op (arriving at the node), ``grad_inputs`` those w.r.t. its forward inputs
    (leaving it, one per ``next_functions`` entry). ``None`` stands for an undefined gradient.
    """

    backward_index: int  # 1-based: the n-th backward pass forgeviz recorded in this kernel
    grad_outputs: list[Optional[TensorSummary]]
    grad_inputs: list[Optional[TensorSummary]]


@dataclass
class Node:
    """One torch autograd Node (a ``grad_fn`` or an ``AccumulateGrad`` leaf)."""

    id: int
    name: str  # torch's own Node.name(), e.g. "MulBackward0"
    kind: Literal["op", "leaf"]
    label: str  # what the user calls it: notebook variable, parameter name, else the op
    var_names: list[str]
    op: Optional[str]  # forward op that created it, e.g. "mul"; None if made outside capture
    module_path: Optional[str]  # e.g. "layer1.0.conv1"; "" is the root module
    cell: Optional[int]  # notebook execution count of the cell that ran the op
    line: Optional[int]
    has_saved: bool  # the node saved tensors for backward
    freed: bool  # ...and they are gone (backward ran without retain_graph)
    grad_passes: int  # backward passes recorded through this node
    grad_brief: Optional[str]  # short text of the last gradient, e.g. "64" or "‖g‖=3.2"
    nonfinite: bool  # the last recorded gradient holds NaN or Inf
    first_nonfinite: bool  # ...and it is the first such node the backward pass reached


@dataclass
class Edge:
    """Forward direction: ``src`` produced a tensor that ``dst`` consumed.

    In torch's terms ``dst.next_functions[input_nr] == (src, output_nr)``.
    """

    src: int
    dst: int
    input_nr: int
    output_nr: int
    meta: Optional[TensorMeta]


@dataclass
class Module:
    """A module whose forward ran ops of this graph; ``Graph.modules`` is in ``named_modules()`` order.

    The graph view folds by these: a Module is drawn as one box until expanded. Its gradient fields
    change with each backward (``GraphState`` sends them alone).
    """

    id: str  # the root's name and the path: "model.h.0"; the root module itself is "model"
    path: str  # the ``named_modules()`` name under its root: "h.0"; "" for the root
    label: str  # e.g. "h.0 · Block"
    type: Optional[str]  # class name, e.g. "Block"
    parent: Optional[str]  # the enclosing Module's id
    nodes: list[int]  # Nodes directly inside (a child module's Nodes are listed by the child)
    op_count: int  # op Nodes inside, children's included
    param_count: int  # parameter elements inside, children's included
    param_bytes: int
    signature: str  # structural hash of the ops it ran, in order, with their shapes, and of its parameters
    grad_norm: Optional[WireFloat]  # ‖gradients that left the module‖ (towards its inputs), last backward
    param_grad_norm: Optional[WireFloat]  # ‖.grad of its parameters‖, all together, last backward


@dataclass
class Repeat:
    """Consecutive sibling Modules with equal signatures, drawn as one stack: "h · Block × 12"."""

    id: str  # "model.h.0×12": the first member's id and the count
    parent: Optional[str]
    members: list[str]  # Module ids, in order
    label: str


@dataclass
class GraphState:
    """What a backward changes, sent alone while the graph's structure stays: the Nodes whose state is
    not the default, as columns (``grad_passes[i]`` is node ``ids[i]``'s), and every Module's norms."""

    backward_passes: int
    ids: list[int]
    grad_passes: list[int]
    grad_briefs: list[Optional[str]]
    freed: list[int]  # ids of Nodes whose saved tensors are freed
    nonfinite: list[int]  # ids of Nodes whose last gradient holds NaN or Inf
    first_nonfinite: list[int]  # ...the first of them that backward reached
    module_ids: list[str]
    module_grad_norms: list[Optional[WireFloat]]
    module_param_grad_norms: list[Optional[WireFloat]]


@dataclass
class CompiledRegion:
    """A region ``torch.compile`` made: one ``CompiledFunctionBackward`` Node, drawn as one box.

    The ops inside run as one compiled graph, so autograd sees one Node: per-op gradients inside it
    are not recorded, and neither is module attribution (module hooks do not run in compiled code).
    """

    node: int  # the Node's id
    name: str  # the compiled module as you call it: "model", "model.blocks"; "compiled region" if unknown
    backend: Optional[str]  # torch.compile's backend: "inductor", "aot_eager"; None if it cannot be read
    dynamo_graphs: Optional[int]  # Dynamo's counters when the graph was drawn: graphs compiled in this process
    dynamo_breaks: Optional[int]  # ...and graph breaks (both since torch._dynamo's counters were last cleared)
    regions_at_line: int  # compiled regions of this graph made by the same module at the same line


@dataclass
class Graph:
    """The autograd graph reachable from some roots, ready to draw.

    The graph view's ``graph`` trait carries it without the fields a GraphState carries (a Node's
    grad_passes, grad_brief, freed, nonfinite, first_nonfinite; a Module's grad_norm and
    param_grad_norm): its ``state`` trait, always sent with it, fills them in.
    """

    version: int
    nodes: list[Node]
    edges: list[Edge]
    modules: list[Module]
    repeats: list[Repeat]
    roots: list[int]
    message: Optional[str]  # shown instead of a graph, e.g. "no autograd history (requires_grad=False)"
    backward_passes: int  # backward passes forgeviz has recorded in this kernel
    total_nodes: int  # Nodes reachable from the roots; more than len(nodes) when the graph was cut
    cut: Optional[str]  # what was left out of a graph past the cap, and how to see more
    compiled: list[CompiledRegion] = field(default_factory=list)  # torch.compile's regions, one per Node


@dataclass
class SavedValue:
    """A tensor or value a node saved for backward."""

    name: str  # e.g. "self", "other", "exponent"
    tensor: Optional[TensorSummary]
    text: Optional[str]  # repr of a non-tensor saved value


@dataclass
class GradContribution:
    """One path's share of a node's incoming gradient: ``consumer.grad_inputs[input_nr]``.

    Their sum is the node's ``grad_outputs[0]``: for S1, x gets 16 via Add plus 48 via Mul = 64.
    """

    consumer: int
    consumer_label: str
    input_nr: int
    grad: Optional[TensorSummary]


@dataclass
class ChainTerm:
    """The chain rule at one input of an elementwise op: grad_input = grad_output × local derivative.

    For S1's Mul: 16 × 3 = 48 towards x. Values are flattened, row-major, and broadcast to the output's
    shape; ``local`` comes from the tensors the Node saved.
    """

    input_nr: int
    input_label: str
    formula: str  # the local derivative, e.g. "∂(x·y)/∂x = y"
    grad_output: list[WireFloat]
    local: list[WireFloat]
    grad_input: list[WireFloat]  # what backward recorded leaving the Node towards this input


@dataclass
class NodeDetail:
    """Everything the inspector shows for one clicked node, fetched lazily."""

    id: int
    name: str
    label: str
    var_names: list[str]
    op: Optional[str]
    op_qualname: Optional[str]
    module_path: Optional[str]
    module_type: Optional[str]
    cell: Optional[int]
    line: Optional[int]
    source: Optional[str]  # the line of code, when it can be found
    inputs: list[Optional[TensorMeta]]  # forward inputs, one per next_functions entry
    outputs: list[Optional[TensorMeta]]  # forward outputs
    saved: list[SavedValue]
    freed: bool
    alive: bool  # False once the graph is gone from the kernel; the rest is the last snapshot
    grads: list[GradRecord]  # most recent last, bounded
    contributions: list[GradContribution]  # per consumer, from the last backward pass
    leaf_grad: Optional[TensorSummary]  # a leaf's .grad now
    leaf_grad_history: list[Optional[TensorSummary]]  # a leaf's .grad after each backward; None = reset
    chain: list[ChainTerm]  # for a small elementwise op after backward, while its saved tensors live
    compiled: Optional[CompiledRegion] = None  # what torch.compile made this Node, if it did
    # How fresh ``grads`` are: the backward passes the kernel has run so far (a record's backward_index
    # of N is N - backward_passes steps ago), and which passes record (``%fv grads``: "each", "every 10",
    # "within 5%", "shown" or "off").
    backward_passes: int = 0
    grad_cadence: str = "each"
    # A recorded run's Node (``run.graph_view()``): its gradients at the step the view shows.
    recorded: Optional[RecordedGrads] = None


@dataclass
class RecordedGrads:
    """A recorded Node's gradients at one step of a run (``forgeviz.open(path).graph_view()``)."""

    step: int
    rank: int
    # The gradient that reached the Node during that step's backward: the rank's own, from before any
    # all-reduce. None where the step recorded none for this Node (``missing`` says why).
    local: Optional[TensorSummary]
    parameter: Optional[str]  # a parameter's AccumulateGrad: its ``named_parameters`` name
    # ...and its gradient as the optimizer applied it at that step (after DDP's all-reduce, clipping, …)
    applied: Optional[TensorSummary]
    missing: Optional[str]  # why ``local`` is None, in words


@dataclass
class RunSteps:
    """What a recorded graph view can show: the recorded steps and ranks, and which it shows now."""

    steps: list[int]  # the steps with gradients recorded, ascending
    step: int
    ranks: list[int]
    rank: int


@dataclass
class ParameterRow:
    """One parameter of a module, and its gradient now."""

    name: str  # under the module, e.g. "attn.c_attn.weight"
    node: Optional[int]  # its AccumulateGrad Node in this graph
    shape: list[int]
    dtype: str
    grad: Optional[TensorSummary]  # None before backward (or after zero_grad(set_to_none=True))


@dataclass
class ModuleDetail:
    """Everything the inspector shows for one folded module, fetched lazily."""

    id: str
    path: str
    type: Optional[str]
    op_count: int
    param_count: int
    param_bytes: int
    parameters: list[ParameterRow]
    grad_histogram: Optional[Histogram]  # every parameter's gradient values together
    grad_norm: Optional[WireFloat]
    param_grad_norm: Optional[WireFloat]
    alive: bool  # False once the model is gone: the rest is what the graph recorded


# Messages between the browser and the kernel (anywidget custom messages).
@dataclass
class InspectRequest:
    type: Literal["inspect"]
    request_id: int
    node: int


@dataclass
class ModuleRequest:
    type: Literal["module"]
    request_id: int
    module: str  # a Module id


@dataclass
class DotRequest:
    type: Literal["dot"]
    request_id: int


@dataclass
class GraphvizRequest:
    """Asks for the bundled Graphviz WASM module when no JupyterLab extension provides it."""

    type: Literal["graphviz"]
    request_id: int


@dataclass
class StepRequest:
    """A recorded graph view asks to show another step (or rank) of its run."""

    type: Literal["step"]
    request_id: int
    step: int
    rank: int


@dataclass
class InspectReply:
    type: Literal["inspect"]
    request_id: int
    detail: NodeDetail


@dataclass
class ModuleReply:
    type: Literal["module"]
    request_id: int
    detail: ModuleDetail


@dataclass
class DotReply:
    type: Literal["dot"]
    request_id: int
    dot: str


@dataclass
class GraphvizReply:
    """The ESM source of the Graphviz bundle travels in the message's first binary buffer."""

    type: Literal["graphviz"]
    request_id: int


@dataclass
class StepReply:
    type: Literal["step"]
    request_id: int
    steps: RunSteps


@dataclass
class ErrorReply:
    type: Literal["error"]
    request_id: int
    message: str


def shape_times_text(shape: list[int]) -> str:
    """``[64, 3, 32, 32]`` → ``64×3×32×32``; a 0-d tensor is ``scalar``.

    >>> shape_times_text([64, 3]), shape_times_text([])
    ('64×3', 'scalar')
    """
    return "×".join(str(s) for s in shape) if shape else "scalar"





def graph_state(graph: Graph) -> GraphState:
    """What a backward changes in ``graph``: the columns the view applies without laying out again.

    >>> graph_state(Graph(WIRE_VERSION, [], [], [], [], [], None, 3, 0, None)).backward_passes
    3
    """
    changed = [n for n in graph.nodes if n.grad_passes or n.grad_brief is not None]
    return GraphState(
        backward_passes=graph.backward_passes, ids=[n.id for n in changed],
        grad_passes=[n.grad_passes for n in changed], grad_briefs=[n.grad_brief for n in changed],
        freed=[n.id for n in graph.nodes if n.freed], nonfinite=[n.id for n in graph.nodes if n.nonfinite],
        first_nonfinite=[n.id for n in graph.nodes if n.first_nonfinite],
        module_ids=[m.id for m in graph.modules], module_grad_norms=[m.grad_norm for m in graph.modules],
        module_param_grad_norms=[m.param_grad_norm for m in graph.modules],
    )


# What a GraphState carries of each Node and Module: the graph trait is sent without these.
NODE_STATE_FIELDS = ("grad_passes", "grad_brief", "freed", "nonfinite", "first_nonfinite")
MODULE_STATE_FIELDS = ("grad_norm", "param_grad_norm")


def graph_trait(graph: Graph) -> dict:
    """The graph view's ``graph`` trait: ``graph`` as wire JSON less what its GraphState carries
    (the ``state`` trait sends that after each backward), its lists as tables (``as_table``).

    >>> g = Graph(WIRE_VERSION, [Node(0, "MulBackward0", "op", "y", ["y"], "mul", None, 3, 1, True, False,
    ...           1, "6", False, False)], [], [], [], [0], None, 1, 1, None)
    >>> graph_trait(g)["nodes"]["columns"]["label"], "grad_brief" in graph_trait(g)["nodes"]["columns"]
    (['y'], False)
    """
    wire = as_wire(graph)
    assert isinstance(wire, dict)
    nodes = [{k: v for k, v in n.items() if k not in NODE_STATE_FIELDS} for n in wire["nodes"]]
    modules = [{k: v for k, v in m.items() if k not in MODULE_STATE_FIELDS} for m in wire["modules"]]
    return {**wire, "nodes": as_table(nodes), "edges": as_table(wire["edges"]), "modules": as_table(modules),
            "repeats": as_table(wire["repeats"])}


def graph_from_trait(trait: dict) -> Graph:
    """The Graph that ``graph_trait`` sent (what its GraphState carries left at "no backward yet").

    >>> g = Graph(WIRE_VERSION, [Node(0, "MulBackward0", "op", "y", ["y"], "mul", None, 3, 1, True, False,
    ...           1, "6", False, False)], [Edge(1, 0, 0, 0, TensorMeta([2], "float32", "cpu"))], [], [], [0],
    ...           None, 1, 1, None)
    >>> back = graph_from_trait(graph_trait(g))
    >>> back.nodes[0].label, back.nodes[0].grad_brief, back.edges[0].meta.shape
    ('y', None, [2])
    """
    def meta(value: Optional[dict]) -> Optional[TensorMeta]:
        return None if value is None else TensorMeta(**value)

    nodes = [Node(**{**row, "grad_passes": 0, "grad_brief": None, "freed": False, "nonfinite": False,
                     "first_nonfinite": False}) for row in rows_of(trait["nodes"])]
    edges = [Edge(**{**row, "meta": meta(row["meta"])}) for row in rows_of(trait["edges"])]
    modules = [Module(**{**row, "grad_norm": None, "param_grad_norm": None}) for row in rows_of(trait["modules"])]
    repeats = [Repeat(**row) for row in rows_of(trait["repeats"])]
    compiled = [CompiledRegion(**c) for c in trait.get("compiled") or []]
    return Graph(trait["version"], nodes, edges, modules, repeats, list(trait["roots"]), trait["message"],
                 trait["backward_passes"], trait["total_nodes"], trait["cut"], compiled)


WIRE_TYPES = [
    Histogram, TensorSummary, TensorMeta, GradRecord, Node, Edge, Module, Repeat, CompiledRegion, Graph, GraphState,
    SavedValue, GradContribution, ChainTerm, NodeDetail, RecordedGrads, RunSteps, ParameterRow, ModuleDetail,
    InspectRequest, ModuleRequest, DotRequest, GraphvizRequest, StepRequest, InspectReply, ModuleReply, DotReply,
    GraphvizReply, StepReply, ErrorReply,
]
