"""The autograd graph: nodes, edges, names and gradients, with torch as the oracle."""

from __future__ import annotations

import dataclasses
import gc
import json
import sys
import weakref

import pytest
import torch

import forgeviz
from forgeviz._capture.grads import iter_graph
from forgeviz._capture.session import get_session
from forgeviz._capture.walk import NO_HISTORY
from forgeviz.export import to_dot
from forgeviz.model import as_wire, rows_of
from forgeviz.model.graph import MODULE_STATE_FIELDS, NODE_STATE_FIELDS

from scenarios import S1, by_label, make_cnn


def independent_walk(root):
    """Nodes and edges of the graph from root, by a walk written separately from forgeviz's."""
    nodes, edges, frontier = {id(root): root}, set(), [root]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for parent, _ in node.next_functions:
                if parent is None:
                    continue
                edges.add((id(parent), id(node)))
                if id(parent) not in nodes:
                    nodes[id(parent)] = parent
                    nxt_frontier.append(parent)
        frontier = nxt_frontier
    return nodes, edges


def merged_nodes(widget) -> list[dict]:
    """The Nodes as the browser has them: the graph trait with the last state trait applied."""
    state = widget.state
    by_id = dict(zip(state["ids"], zip(state["grad_passes"], state["grad_briefs"])))
    nodes = []
    for node in rows_of(widget.graph["nodes"]):
        passes, brief = by_id.get(node["id"], (0, None))
        nodes.append({**node, "grad_passes": passes, "grad_brief": brief, "freed": node["id"] in state["freed"],
                      "nonfinite": node["id"] in state["nonfinite"],
                      "first_nonfinite": node["id"] in state["first_nonfinite"]})
    return nodes


def test_s1_per_node_gradients_equal_torch(nb):
    nb.ok(S1)
    nb.ok("g = forgeviz.graph(loss)\nloss.backward()")
    graph = nb["g"].model
    store = get_session().store

    # The oracle: torch's own gradients w.r.t. every intermediate, on a fresh copy of S1.
    x = torch.tensor([2.0], requires_grad=True)
    y = torch.tensor([3.0], requires_grad=True)
    z = x * y
    w = z + x
    loss = w**2
    dz, dw = torch.autograd.grad(loss, [z, w], retain_graph=True)
    dx, dy = torch.autograd.grad(loss, [x, y])

    def record(label):
        return store.get(by_label(graph, label).id).records[-1]

    pow_rec, add_rec, mul_rec = record("loss"), record("w"), record("z")
    assert pow_rec.grad_outputs[0].values == [1.0]
    assert pow_rec.grad_inputs[0].values == dw.tolist() == [16.0]
    assert add_rec.grad_outputs[0].values == dw.tolist() == [16.0]
    assert [g.values for g in add_rec.grad_inputs] == [dz.tolist(), dw.tolist()] == [[16.0], [16.0]]
    assert mul_rec.grad_outputs[0].values == dz.tolist() == [16.0]
    assert [g.values for g in mul_rec.grad_inputs] == [(dz * y).tolist(), (dz * x).tolist()] == [[48.0], [32.0]]
    # Leaves: x.grad is 64 (16 via Add + 48 via Mul), not the 80 a tutorial prints.
    assert nb["x"].grad.tolist() == dx.tolist() == [64.0]
    assert nb["y"].grad.tolist() == dy.tolist() == [32.0]
    assert by_label(graph, "x").grad_brief == "64"
    assert by_label(graph, "y").grad_brief == "32"


def test_s1_names_and_kinds(nb):
    nb.ok(S1)
    graph = nb.ok("forgeviz.graph(loss)").model
    assert sorted(n.label for n in graph.nodes) == ["loss", "w", "x", "y", "z"]
    assert by_label(graph, "x").kind == by_label(graph, "y").kind == "leaf"
    assert {by_label(graph, k).name for k in ("z", "w", "loss")} == {"MulBackward0", "AddBackward0", "PowBackward0"}
    assert by_label(graph, "z").op == "mul" and by_label(graph, "loss").op == "pow"
    edges = {(by_label_id(graph, e.src), by_label_id(graph, e.dst)) for e in graph.edges}
    assert edges == {("x", "z"), ("y", "z"), ("z", "w"), ("x", "w"), ("w", "loss")}
    assert all(e.meta.shape == [1] and e.meta.dtype == "float32" for e in graph.edges)
    assert graph.roots == [by_label(graph, "loss").id]


def by_label_id(graph, nid):
    return next(n.label for n in graph.nodes if n.id == nid)


def test_cell_and_line_point_at_the_op(nb):
    nb.ok("a = torch.ones(2, requires_grad=True)")
    result = nb.run("b = a * 2\nc = b.sum()")
    graph = nb.ok("forgeviz.graph(c)").model
    b, c = by_label(graph, "b"), by_label(graph, "c")
    assert (b.cell, b.line) == (result.execution_count, 1)
    assert (c.cell, c.line) == (result.execution_count, 2)


def test_the_native_frame_walk_finds_the_line_pythons_does(monkeypatch):
    """The op's line is the nearest frame outside torch and forgeviz, found by the native library's walk
    (source.user_location in C++) where it is built: from every depth, through library frames it has met and
    through a file it has not, the same (filename, line) as the Python walk, and the new file recorded."""
    from forgeviz._capture import native, source

    hooks = native.hooks()
    if hooks is None:
        pytest.skip("the native gradient hooks are not built here (./dev.sh builds them)")
    library: dict = {}
    exec(compile("def call(f, *args):\n    return f(*args)\n", "/fake/site-packages/lib.py", "exec"), library)  # noqa: S102 - a frame of a file of its own
    monkeypatch.setitem(source._is_user_file, "/fake/site-packages/lib.py", False)
    fresh = "/fake/never/seen/before.py"  # (outside torch and forgeviz: the user's, once classified)
    user: dict = {}
    exec(compile("def step(call, f, depth):\n    return call(call, f, depth)\n", fresh, "exec"), user)  # noqa: S102

    def through_the_library(depth):
        line = sys._getframe().f_lineno + 1
        return library["call"](library["call"], source.user_location, depth), line

    was = source._native_walk
    try:
        found = {}
        for walk in (None, hooks.user_location):
            source.use_native_walk(walk)
            source._is_user_file.pop(fresh, None)  # each walk meets it first, and classifies it
            found[walk] = ([through_the_library(depth) for depth in (0, 1, 2, 3, 4)],
                           user["step"](library["call"], source.user_location, 1), source._is_user_file.get(fresh))
    finally:
        source.use_native_walk(was)
        source._is_user_file.pop(fresh, None)
    python, native_walk = found[None], found[hooks.user_location]
    assert native_walk == python
    here = __file__
    assert [where for where, _ in python[0][:4]] == [(here, line) for _, line in python[0][:4]]
    assert python[0][4][0][0] == here  # (depth 4: this test's own frame, past the helper's)
    assert python[1] == (fresh, 2) and python[2] is True  # (each walk classified the new file, and recorded it)


def test_each_op_is_tagged_with_the_line_it_ran_on_however_often_its_code_runs(monkeypatch):
    """The native walk keeps each (code, instruction)'s line once it read it: ops from two lines of one function, run
    again and again, and the same source compiled again at other lines (a cell run again: new code objects, which may
    take a freed one's address), each tagged with the line it ran on; and so once the cache started over, past 1,024
    code objects."""
    from forgeviz._capture import native

    if native.hooks() is None:
        pytest.skip("the native gradient hooks are not built here (./dev.sh builds them)")
    source = "def f(x):\n    a = x * 2\n    b = a + 1\n    return a, b\n"
    x = torch.ones(2, requires_grad=True)
    seen = []
    with forgeviz.capture(grads="off") as session:
        assert session.native_tag is not None  # (the C++ tag, whose walk reads the lines)
        for shift in (0, 5, 0, 3):
            cell: dict = {}
            exec(compile("\n" * shift + source, "/fake/cell/run.py", "exec"), cell)  # noqa: S102 - a cell's code
            for _ in range(3):
                a, b = cell["f"](x)
                seen.append((a.grad_fn.metadata["fv_op"][2:4], b.grad_fn.metadata["fv_op"][2:4], shift))
            del cell  # (its code freed: the next compile may reuse the address)
        # past 1,024 code objects the cache starts over (each cell run here is a new one, kept alive meanwhile)
        cells = []
        for k in range(1100):
            cell = {}
            exec(compile("\n" * (k % 7) + source, "/fake/cell/again.py", "exec"), cell)  # noqa: S102
            cells.append(cell)
            a, b = cell["f"](x)
            assert (a.grad_fn.metadata["fv_op"][3], b.grad_fn.metadata["fv_op"][3]) == (k % 7 + 2, k % 7 + 3)
    assert seen == [(("/fake/cell/run.py", shift + 2), ("/fake/cell/run.py", shift + 3), shift)
                    for shift in (0, 5, 0, 3) for _ in range(3)]


class _Block(torch.nn.Module):
    """Two Linears, one of them called twice, and a module it does not own (passed in) called from inside."""

    def __init__(self, outside: torch.nn.Module) -> None:
        super().__init__()
        self.inner, self.out = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
        self._outside = [outside]  # (a list: not registered, so not under the root's paths)

    def forward(self, x):
        x = torch.relu(self.inner(x))
        x = self._outside[0](x) * 2
        return self.out(self.inner(x))


class _Fails(torch.nn.Module):
    def forward(self, x):
        x = x * 3  # (a Node made before the raise)
        raise ValueError(f"the user's own: {tuple(x.shape)}")


class _Twice(torch.nn.Module):
    def forward(self, x):
        return x * 2 + 1


def _tags(loss) -> list:
    """Each Node's tag, in the walk's order: (op, qualified name, filename, line, (root type, path, module type))."""
    tags = []
    for node in iter_graph([loss.grad_fn]):
        tag = node.metadata.get("fv_op")
        tags.append(None if tag is None else (*tag[:4], tag[4] and tag[4][1:]))
    return tags


def test_the_native_tags_and_module_pushes_are_pythons(monkeypatch):
    """With the native library, the mode's C++ body makes each op's tag (op, line, running module) and the module
    hooks push and pop a module called inside another in C++: the same tags as the Python body and hooks give,
    through nested modules, a module called twice, one its caller does not own, a call that raised inside (and was
    caught), and a submodule replaced by another of a different class between calls; the paths and module types are
    torch's named_modules(). The C++ push handles the inner calls (the Python hook sees only the outermost and the
    first of each module under its root)."""
    from forgeviz._capture import native
    from forgeviz._capture.modules import ModuleStack

    if native.hooks() is None:
        pytest.skip("the native gradient hooks are not built here (./dev.sh builds them)")
    torch.manual_seed(0)
    outside = torch.nn.Linear(4, 4)
    model = torch.nn.Sequential(_Block(outside), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    fails = torch.nn.Sequential(torch.nn.Linear(4, 4), _Fails())
    x = torch.randn(3, 4)
    session = get_session()
    slow = ModuleStack._pre
    calls: list = []

    def counted(stack, module, args):
        calls.append(type(module).__name__)
        return slow(stack, module, args)

    monkeypatch.setattr(ModuleStack, "_pre", counted)

    def run(path: str) -> tuple:
        phases: list = []  # the Python hook's calls in each model call
        with monkeypatch.context() as m:
            if path == "python":
                m.setattr(native, "hooks", lambda: None)
            model[2] = torch.nn.Linear(4, 2)  # (the same path, a new module each run: the entries must miss)
            with forgeviz.capture():
                assert (session._mode.native_op is not None) == (path == "native")
                calls.clear()
                first = model(x).sum()
                phases.append(calls[:])
                calls.clear()
                with pytest.raises(ValueError, match="the user's own"):
                    fails(x)
                second = model(x).sum()
                phases.append(calls[:])
                calls.clear()
                model[1] = _Twice()  # another class at the ReLU's path (its id may be the dead one's)
                third = model(x).sum()
                phases.append(calls[:])
                model[1] = torch.nn.ReLU()
            return [_tags(loss) for loss in (first, second, third)], phases

    native_tags, native_calls = run("native")
    python_tags, python_calls = run("python")
    assert native_tags == python_tags
    named = dict(model.named_modules())
    for tags in native_tags:
        modules = [tag[4] for tag in tags if tag is not None and tag[4]]
        assert modules, tags
        for root_type, path, module_type in modules:
            assert root_type == "Sequential"
            if "<" not in path:  # (the module its caller does not own: named under its caller's path)
                assert path in named
    third = {(tag[0], tag[4][1], tag[4][2]) for tag in native_tags[2] if tag is not None and tag[4]}
    assert {("mul", "1", "_Twice"), ("add", "1", "_Twice"), ("mul", "0", "_Block"), ("relu", "0", "_Block"),
            ("linear", "0.<Linear>", "Linear"), ("linear", "0.inner", "Linear"), ("linear", "2", "Linear")} <= third
    # The Python hook hears of every module call without the library. With it: the outermost call, and a module's
    # first call under its root (after the failed call, the stack is as before it), and the one not owned each time.
    assert [len(calls) for calls in python_calls] == [8, 3 + 8, 8]
    assert len(native_calls[0]) == 8 - 1  # (inner's second call)
    assert native_calls[1] == ["Sequential", "Linear", "_Fails", "Sequential", "Linear"]
    # the replacing module is met first under its root, which is indexed again: the modules still at their paths
    # keep their entries
    assert native_calls[2] == ["Sequential", "Linear", "_Twice"]


def test_counts_equal_an_independent_walk_on_a_cnn(nb):
    nb.shell.user_ns["make_cnn"] = make_cnn
    nb.ok("model = make_cnn()\nout = model(torch.randn(2, 3, 8, 8))\nloss = out.square().mean()")
    graph = nb.ok("forgeviz.graph(loss)").model
    nodes, edges = independent_walk(nb["loss"].grad_fn)
    assert len(graph.nodes) == len(nodes)
    assert len(graph.edges) == len(edges)
    # Every leaf is a parameter, named as named_parameters names it.
    params = dict(nb["model"].named_parameters())
    leaves = [n for n in graph.nodes if n.kind == "leaf"]
    assert sorted(n.label for n in leaves) == sorted(params)
    # Ops are grouped by module path.
    convs = [n for n in graph.nodes if n.op == "conv2d"]
    assert sorted(n.module_path for n in convs) == sorted(
        ["stem", "layer1.0.conv1", "layer1.0.conv2", "layer1.1.conv1", "layer1.1.conv2"])
    module_ids = {m.id for m in graph.modules}
    assert {"model", "model.layer1", "model.layer1.0", "model.layer1.0.conv1"} <= module_ids
    conv1 = next(m for m in graph.modules if m.id == "model.layer1.0.conv1")
    assert conv1.parent == "model.layer1.0" and conv1.label == "layer1.0.conv1 · Conv2d"
    members = {nid for nid in conv1.nodes}
    weight = by_label(graph, "layer1.0.conv1.weight")
    assert weight.id in members and any(n.id in members and n.op == "conv2d" for n in graph.nodes)
    dot = to_dot(graph)
    assert 'subgraph cluster_' in dot and 'label="layer1.0.conv1 · Conv2d"' in dot


def test_ten_thousand_op_chain_needs_no_recursion(nb):
    nb.ok("t = torch.ones(3, requires_grad=True)\nh = t\nfor _ in range(10_000):\n    h = h * 1.0001")
    graph = nb.ok("forgeviz.graph(h)").model
    assert len(graph.nodes) == 10_001
    assert len(graph.edges) == 10_000
    nb.ok("h.sum().backward()")
    assert nb["t"].grad.tolist() == pytest.approx([1.0001**10_000] * 3, rel=1e-3)


def test_graph_trait_sends_the_lists_as_tables_that_read_back_as_the_graph(nb):
    nb.ok("t = torch.ones(3, requires_grad=True)\nh = t\nfor _ in range(2_000):\n    h = h * 1.0001")
    widget = nb.ok("forgeviz.graph(h)")
    trait, wire = widget.graph, as_wire(widget.model)
    state_fields = {*NODE_STATE_FIELDS, *MODULE_STATE_FIELDS}
    for key in ("nodes", "edges", "modules", "repeats"):
        assert rows_of(trait[key]) == [{k: v for k, v in row.items() if k not in state_fields} for row in wire[key]]
    # repeated values are coded: the op name and the edges' shapes are each sent once
    assert trait["nodes"]["columns"]["name"]["values"] == ["MulBackward0", "torch::autograd::AccumulateGrad"]
    assert trait["edges"]["columns"]["meta"]["values"] == [{"shape": [3], "dtype": "float32", "device": "cpu"}]
    assert len(json.dumps(trait)) * 4 < len(json.dumps({**wire, "nodes": wire["nodes"], "edges": wire["edges"]}))


def test_graph_updates_after_backward_without_rerunning_its_cell(nb):
    nb.ok(S1)
    widget = nb.ok("forgeviz.graph(loss)")
    before = widget.graph
    assert by_label(widget.model, "x").grad_brief is None
    assert not any(n["freed"] for n in merged_nodes(widget))
    assert "freed" not in before["nodes"]["columns"]  # the state trait carries it
    nb.ok("loss.backward()")  # another cell: the widget refreshes at post_run_cell
    assert widget.graph is before  # the structure is not sent again: only the state is
    after = {n["label"]: n for n in merged_nodes(widget)}
    assert after["x"]["grad_brief"] == "64" and after["y"]["grad_brief"] == "32"
    assert after["z"]["freed"] and after["loss"]["freed"]  # Mul and Pow saved tensors, now freed
    assert not after["w"]["has_saved"] and not after["w"]["freed"]  # Add saves nothing
    assert widget.state["backward_passes"] > before["backward_passes"]
    # What the browser makes of the graph and the state is what the kernel holds.
    model = {n.id: n for n in widget.model.nodes}
    for node in merged_nodes(widget):
        assert node == dataclasses.asdict(model[node["id"]])


def test_second_backward_raises_torch_error_and_view_shows_freed(nb):
    nb.ok(S1 + "g = forgeviz.graph(loss)\nloss.backward()")
    result = nb.run("loss.backward()")
    assert isinstance(result.error_in_exec, RuntimeError)
    assert "Trying to backward through the graph a second time" in str(result.error_in_exec)
    assert by_label(nb["g"].model, "z").freed


def test_s2_accumulation_history_and_zero_grad(nb):
    nb.ok("x = torch.tensor([2.], requires_grad=True)\nopt = torch.optim.SGD([x], lr=0.0)")
    nb.ok("y = x ** 2\ny.backward()")
    nb.ok("y = x ** 2\ny.backward()")
    assert nb["x"].grad.tolist() == [8.0]
    widget = nb.ok("g = forgeviz.graph(y)\ng")
    leaf = by_label(widget.model, "x")
    detail = request(widget, {"type": "inspect", "request_id": 1, "node": leaf.id})["detail"]
    assert [h["values"] for h in detail["leaf_grad_history"]] == [[4.0], [8.0]]
    nb.ok("opt.zero_grad()\ny = x ** 2\ny.backward()")
    detail = request(nb["g"], {"type": "inspect", "request_id": 2, "node": leaf.id})["detail"]
    history = detail["leaf_grad_history"]
    assert history[-2] is None and history[-1]["values"] == [4.0] == nb["x"].grad.tolist()


def test_leaf_history_is_the_grad_after_accumulation_whatever_its_layout(nb):
    # w's gradient arrives transposed (a view), so AccumulateGrad copies it into w's layout; v's
    # post-accumulate hook drops its .grad (as an optimizer-in-backward does).
    nb.ok("w = torch.randn(3, 4, requires_grad=True)\nv = torch.randn(4, requires_grad=True)\n"
          "h = v.register_post_accumulate_grad_hook(lambda p: setattr(p, 'grad', None))\n"
          "y = ((torch.ones(5, 4) * v) @ w.t()).sum()\ng = forgeviz.graph(y)\ny.backward()")
    for name, expected in [("w", nb["w"].grad), ("v", None)]:
        leaf = by_label(nb["g"].model, name)
        history = request(nb["g"], {"type": "inspect", "request_id": 1, "node": leaf.id})["detail"]["leaf_grad_history"]
        if expected is None:
            assert history == [None]
        else:
            assert history[-1]["shape"] == [3, 4] and history[-1]["values"] == expected.reshape(-1).tolist()
            assert history[-1]["norm"] == pytest.approx(expected.norm().item())


def test_a_module_outside_its_roots_tree_costs_one_walk_of_the_tree(monkeypatch):
    """A module its root does not own (kept in a list, say), called at every step: its ops are named under its
    caller's path, and the root's tree is walked again once to look for it, not at each call; once the user
    registers it, its ops carry its path in the tree."""
    torch.manual_seed(0)
    outside = torch.nn.Linear(4, 4)
    model = _Block(outside)
    walks: list = []
    named_modules = torch.nn.Module.named_modules

    def counted(self, *args, **kwargs):
        if self is model and sys._getframe(1).f_code.co_name == "_paths_of":  # (the module stack's index of paths)
            walks.append(1)
        return named_modules(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "named_modules", counted)
    x = torch.randn(3, 4)
    with forgeviz.capture():
        for _ in range(20):
            loss = model(x).sum()
        before = len(walks)
        model.helper = outside  # (registered: the tree grew)
        registered = model(x).sum()
    assert before == 2  # (its first index, and one more when the outside module is first met)
    assert len(walks) == before + 1
    modules = {tag[4] for tag in _tags(loss) if tag is not None and tag[4]}
    assert ("_Block", "<Linear>", "Linear") in modules and ("_Block", "inner", "Linear") in modules
    modules = {tag[4] for tag in _tags(registered) if tag is not None and tag[4]}
    assert ("_Block", "helper", "Linear") in modules and ("_Block", "inner", "Linear") in modules


@pytest.mark.parametrize("hooks", ["native", "python"])
def test_leaf_histories_over_many_passes_are_the_grads_torch_had(monkeypatch, hooks):
    """Forty passes of a training loop, .grad reset before most and accumulated into before some: each parameter's
    history holds the .grad after each of its last LEAF_HISTORY passes, with a None where .grad was reset, on the
    native hooks (the pass's summaries made when first read) as on the Python ones; a parameter made at a dead
    one's id starts a history of its own."""
    from forgeviz._capture import native
    from forgeviz._capture.grads import LEAF_HISTORY, BackwardRecorder, GradStore

    if hooks == "python":
        monkeypatch.setattr(native, "hooks", lambda: None)
    elif native.hooks() is None:
        pytest.skip("the native gradient hooks are not built here (./dev.sh builds them)")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))
    x = torch.randn(4, 6)
    recorder = BackwardRecorder(GradStore(), pytest.fail)
    expected: dict = {p: [] for p in model.parameters()}  # what each history should hold: torch's .grad, or None
    for step in range(40):
        reset = step % 7 != 3  # (every seventh pass accumulates into the last one's .grad)
        if reset:
            for p in model.parameters():
                if p.grad is not None:
                    expected[p].append(None)
                p.grad = None
        loss = model(x * (step + 1)).pow(2).mean()
        finish = recorder.arm([loss.grad_fn])
        assert (recorder.armed is not None) == (hooks == "native")
        loss.backward()
        finish()
        for p in model.parameters():
            expected[p].append(p.grad.clone())
    store = recorder.store
    for p, want in expected.items():
        got = store.leaf_history(p).values
        assert len(got) == LEAF_HISTORY
        want = want[-LEAF_HISTORY:]
        assert [s is None for s in got] == [g is None for g in want]
        for s, grad in zip(got, want):
            if grad is not None:
                assert s.shape == list(grad.shape) and s.norm == pytest.approx(grad.norm().item(), rel=1e-6)
                assert (s.min, s.max) == (grad.min().item(), grad.max().item())
    # another parameter at a dead one's id: a history of its own (the id is confirmed by a weak reference)
    del model[2].bias, expected
    fresh = torch.nn.Parameter(torch.zeros(1))
    model[2].bias = fresh
    loss = model(x).pow(2).mean()
    finish = recorder.arm([loss.grad_fn])
    loss.backward()
    finish()
    assert [s.values for s in store.leaf_history(fresh).values] == [[fresh.grad.item()]]


def test_dead_graphs_are_forgotten_unless_a_view_shows_them(nb):
    # S1 drawn, backward, then its tensors die; a training loop then makes 300 graphs that die too.
    nb.ok(S1 + "g = forgeviz.graph(loss)\nloss.backward()")
    mul = by_label(nb["g"].model, "z")
    s1_ids = {n.id for n in nb["g"].model.nodes}
    nb.ok("del x, y, z, w, loss")
    store = get_session().store
    passes, first_id = store.passes, max(store.nodes) + 1  # Node ids only grow
    nb.ok("model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))\n"
          "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
          "for _ in range(300):\n"
          "    loss = model(torch.randn(4, 8)).pow(2).mean()\n"
          "    opt.zero_grad()\n"
          "    loss.backward()\n"
          "    opt.step()")
    # 300 graphs of 11 Nodes were recorded. Kept: the last graph (alive), S1's drawing, and at most
    # prune_every deaths not swept yet.
    live = {n.metadata["fv_id"] for n in iter_graph([nb["loss"].grad_fn])}
    assert store.passes - passes == 300 and len(live) == 11
    assert len([nid for nid in store.nodes if nid >= first_id]) <= len(live) + store.prune_every
    store.prune(force=True)
    assert {nid for nid in store.nodes if nid >= first_id} == live and s1_ids <= set(store.nodes)
    # The drawing still answers with the gradients that flowed through it.
    detail = request(nb["g"], {"type": "inspect", "request_id": 1, "node": mul.id})["detail"]
    assert [g["values"] for g in detail["grads"][-1]["grad_inputs"]] == [[48.0], [32.0]]


def request(widget, content):
    """Deliver a browser request the way the kernel does: a comm_msg through ipywidgets."""
    replies = []
    widget.send = lambda msg, buffers=None: replies.append((msg, buffers))
    widget._handle_msg({"content": {"data": {"method": "custom", "content": content}}, "buffers": []})
    assert len(replies) == 1
    return replies[0][0]


def test_inspect_shows_path_sums_and_saved_tensors(nb):
    nb.ok(S1 + "g = forgeviz.graph(loss)")
    mul = by_label(nb["g"].model, "z")
    detail = request(nb["g"], {"type": "inspect", "request_id": 7, "node": mul.id})
    assert detail["type"] == "inspect" and detail["request_id"] == 7
    saved = {s["name"]: s["tensor"]["values"] for s in detail["detail"]["saved"]}
    assert saved == {"self": [2.0], "other": [3.0]}  # Mul saves both operands
    assert detail["detail"]["source"] == "z = x * y" and detail["detail"]["op_qualname"] == "torch.Tensor.mul"
    nb.ok("loss.backward()")
    x = by_label(nb["g"].model, "x")
    detail = request(nb["g"], {"type": "inspect", "request_id": 8, "node": x.id})["detail"]
    contributions = {c["consumer_label"]: c["grad"]["values"] for c in detail["contributions"]}
    assert contributions == {"w": [16.0], "z": [48.0]}
    assert sum(v[0] for v in contributions.values()) == detail["leaf_grad"]["values"][0] == 64.0
    mul_detail = request(nb["g"], {"type": "inspect", "request_id": 9, "node": mul.id})["detail"]
    assert mul_detail["freed"] and mul_detail["saved"] == []
    assert [g["values"] for g in mul_detail["grads"][-1]["grad_inputs"]] == [[48.0], [32.0]]


def test_large_gradients_get_stats_and_histogram(nb):
    nb.ok("big = torch.randn(1000, requires_grad=True)\nout = (big * 3).sum()\ng = forgeviz.graph(out)\nout.backward()")
    mul = next(n for n in nb["g"].model.nodes if n.op == "mul")
    detail = request(nb["g"], {"type": "inspect", "request_id": 1, "node": mul.id})["detail"]
    grad = detail["grads"][-1]["grad_inputs"][0]
    expected = torch.full((1000,), 3.0)
    assert grad["values"] is None and grad["shape"] == [1000]
    assert grad["norm"] == pytest.approx(expected.norm().item())
    assert grad["min"] == grad["max"] == 3.0 and grad["mean"] == pytest.approx(3.0)
    assert sum(grad["histogram"]["counts"]) == 1000


def test_bad_requests_get_clear_errors(nb):
    nb.ok(S1)
    widget = nb.ok("forgeviz.graph(loss)")
    reply = request(widget, {"type": "inspect", "request_id": 3, "node": 10**9})
    assert reply == {"type": "error", "request_id": 3, "message": "no node 1000000000 in this graph"}
    reply = request(widget, {"type": "inspect", "request_id": 4, "node": "x"})
    assert reply["type"] == "error" and "expected an integer node id, got 'x'" in reply["message"]
    reply = request(widget, {"type": "launch", "request_id": 5})
    assert reply["type"] == "error" and "unknown request type 'launch'" in reply["message"]
    reply = request(widget, ["not", "a", "dict"])
    assert reply["type"] == "error" and "expected a request object, got list" in reply["message"]


def test_dot_export_is_a_graphviz_digraph_of_the_same_graph(nb):
    nb.ok(S1)
    widget = nb.ok("forgeviz.graph(loss)")
    dot = widget.to_dot()
    assert dot == request(widget, {"type": "dot", "request_id": 1})["dot"]
    assert dot.startswith("digraph forgeviz {")
    for node in widget.model.nodes:
        assert f"n{node.id} [label=" in dot
    assert dot.count("->") == len(widget.model.edges) == 5
    assert widget.to_digraph().source == dot


def test_graph_rejects_non_tensors_with_a_clear_type_error():
    with pytest.raises(TypeError, match=r"accepts torch.Tensor, autograd Node .* got int: 3"):
        forgeviz.graph(3)
    with pytest.raises(TypeError, match="needs at least one torch.Tensor"):
        forgeviz.graph()


def test_tensor_without_history_says_so():
    widget = forgeviz.graph(torch.ones(3))
    assert widget.model.message == NO_HISTORY == "no autograd history (requires_grad=False)"
    assert widget.model.nodes == [] and widget.graph["message"] == NO_HISTORY
    detached = forgeviz.graph((torch.ones(2, requires_grad=True) * 2).detach())
    assert detached.model.message == NO_HISTORY


def test_a_leaf_alone_is_one_node():
    x = torch.ones(2, requires_grad=True)
    graph = forgeviz.graph(x).model
    assert [(n.kind, n.label) for n in graph.nodes] == [("leaf", "x")]


def test_graph_accepts_nodes_and_no_grad_ops_are_not_recorded():
    x = torch.ones(2, requires_grad=True)
    with torch.no_grad():
        frozen = x * 2
    y = (x * 3).sum()
    assert forgeviz.graph(frozen).model.message == NO_HISTORY
    assert {n.name for n in forgeviz.graph(y.grad_fn).model.nodes} == {
        "SumBackward0", "MulBackward0", "torch::autograd::AccumulateGrad"}


def test_widget_keeps_no_tensor_alive(nb):
    nb.ok("a = torch.randn(64, 64, requires_grad=True)\nh = torch.tanh(a @ a)\nloss = h.sum()\n"
          "g = forgeviz.graph(loss)")
    saved = weakref.ref(nb["h"])  # tanh saves its result h for backward
    nb.ok("del h, loss")
    gc.collect()
    assert saved() is None
    assert nb["g"].model.nodes  # the snapshot is still drawable


@pytest.mark.filterwarnings("ignore::UserWarning")  # anomaly mode warns about itself
def test_first_nonfinite_node_is_the_one_anomaly_mode_names(nb):
    # Oracle: anomaly mode names the first backward Function that returned NaN.
    with pytest.raises(RuntimeError, match=r"Function '(\w+)' returned nan") as caught, torch.autograd.detect_anomaly():
        v = torch.tensor([-1.0, 4.0], requires_grad=True)
        (torch.sqrt(v) * 2).sum().backward()
    expected = str(caught.value).split("'")[1]
    nb.ok("v = torch.tensor([-1., 4.], requires_grad=True)\nr = torch.sqrt(v) * 2\nloss = r.sum()\n"
          "g = forgeviz.graph(loss)\nloss.backward()")
    graph = nb["g"].model
    first = [n for n in graph.nodes if n.first_nonfinite]
    assert [n.name for n in first] == [expected] == ["SqrtBackward0"]
    nonfinite = {n.name for n in graph.nodes if n.nonfinite}
    assert nonfinite == {"SqrtBackward0", "torch::autograd::AccumulateGrad"}
    assert torch.isnan(nb["v"].grad[0]) and nb["v"].grad[1].item() == 0.5


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_gradients_summarised_on_their_device_arrive_when_the_pass_ends(nb, monkeypatch):
    # What an accelerator's gradients go through (XLA, MPS: summarised there, read back once the backward ends), run
    # here on CPU tensors: the same numbers, the same first non-finite Node, the same leaf history.
    from forgeviz._capture.grads import BackwardRecorder

    monkeypatch.setattr(BackwardRecorder, "deferred", staticmethod(lambda grad: True))
    # Count the numbers read back from armed hooks to the pass's end (views read their own after).
    reads, armed = [], []
    arm, tolist = BackwardRecorder.arm, torch.Tensor.tolist

    def counting_arm(self, roots):
        armed.append(True)
        finish = arm(self, roots)
        return lambda: (finish(), armed.clear())

    monkeypatch.setattr(BackwardRecorder, "arm", counting_arm)
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: (armed and reads.append(self.numel())) or tolist(self))
    nb.ok(S1 + "g = forgeviz.graph(loss)\nloss.backward()")
    assert len(reads) == 1  # every gradient of the pass, read in one copy
    mul = by_label(nb["g"].model, "z")
    detail = request(nb["g"], {"type": "inspect", "request_id": 1, "node": mul.id})["detail"]
    assert [g["values"] for g in detail["grads"][-1]["grad_inputs"]] == [[48.0], [32.0]]
    x = by_label(nb["g"].model, "x")
    detail = request(nb["g"], {"type": "inspect", "request_id": 2, "node": x.id})["detail"]
    assert [h["values"] for h in detail["leaf_grad_history"]] == [[64.0]]
    nb.ok("v = torch.tensor([-1., 4.], requires_grad=True)\nr = torch.sqrt(v) * 2\nloss = r.sum()\n"
          "g = forgeviz.graph(loss)\nloss.backward()")
    graph = nb["g"].model
    assert [n.name for n in graph.nodes if n.first_nonfinite] == ["SqrtBackward0"]
    sqrt = next(n.id for n in graph.nodes if n.name == "SqrtBackward0")
    detail = request(nb["g"], {"type": "inspect", "request_id": 3, "node": sqrt})["detail"]
    grad_in = detail["grads"][-1]["grad_inputs"][0]
    assert (grad_in["nan_count"], grad_in["values"][1]) == (1, 0.5)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA-only: no CUDA GPU on this machine")
def test_cuda_gradients_are_recorded(nb):
    nb.ok(S1.replace("requires_grad=True", "requires_grad=True, device='cuda'")
          + "g = forgeviz.graph(loss)\nloss.backward()")
    mul = by_label(nb["g"].model, "z")
    grads = request(nb["g"], {"type": "inspect", "request_id": 1, "node": mul.id})["detail"]["grads"][-1]
    assert [g["values"] for g in grads["grad_inputs"]] == [[48.0], [32.0]]
    assert grads["grad_inputs"][0]["device"] == "cuda:0"


def test_autograd_grad_is_recorded_like_backward(nb):
    nb.ok(S1 + "g = forgeviz.graph(loss)\ndx, dy = torch.autograd.grad(loss, [x, y])")
    assert (nb["dx"].item(), nb["dy"].item()) == (64.0, 32.0)
    assert nb["x"].grad is None  # autograd.grad does not accumulate into .grad
    store = get_session().store
    mul = store.get(by_label(nb["g"].model, "z").id).records[-1]
    assert [s.values for s in mul.grad_inputs] == [[48.0], [32.0]]


class _Seen(torch.overrides.TorchFunctionMode):
    """A user's own TorchFunctionMode: it records what reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


@pytest.fixture
def ops_seen(monkeypatch):
    """The names of the torch functions that reach forgeviz's own mode."""
    from forgeviz._capture import session as capture_session

    seen: list[str] = []
    handle = capture_session._TagMode.__torch_function__

    def spy(self, func, types, args=(), kwargs=None):
        seen.append(getattr(func, "__name__", str(func)))
        return handle(self, func, types, args, kwargs)

    monkeypatch.setattr(capture_session._TagMode, "__torch_function__", spy)
    return seen


def test_an_optimizer_step_runs_outside_forgevizs_mode_and_the_mode_comes_back(ops_seen):
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters())
    stack = torch._C._len_torch_function_stack()
    with forgeviz.capture():
        loss = model(torch.randn(3, 4)).sum()
        loss.backward()
        before = len(ops_seen)
        opt.step()  # dozens of no_grad ops per parameter: nothing for the graph
        during = ops_seen[before:]
        y = (torch.ones(2, requires_grad=True) * 2).sum()
    assert "linear" in ops_seen[:before] and not {"lerp_", "addcdiv_", "sqrt"} & set(during)
    assert ops_seen[-2:] == ["mul", "sum"] and y.grad_fn.metadata["fv_op"][0] == "sum"  # watched again
    assert torch._C._len_torch_function_stack() == stack


def _twins(make_optimizer):
    """Two equal Linear models, each with an optimizer ``make_optimizer(parameters)``, and a batch."""
    made = []
    for _ in range(2):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        made.append((model, make_optimizer(model.parameters())))
    return made, torch.randn(3, 4)


def _equal_parameters(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_from_its_second_step_an_optimizer_steps_the_mode_aside_before_torch_s_profiler_mark(ops_seen):
    """torch's step wrapper enters record_function before its step hooks: its two marks reached the mode
    each step. forgeviz wraps the class's step at the first step, so from the second nothing does; a
    torch.compile'd step runs through the wrapper too; each result is torch's, and uninstall puts torch's back."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    ((model, opt), (twin, twin_opt)), x = _twins(lambda ps: torch.optim.Adam(ps, lr=0.1))
    torch_step = torch.optim.Adam.step  # (torch's wrapper, put on the class by the first Adam made)
    calls = []
    handle = register_optimizer_step_pre_hook(lambda opt, args, kwargs: calls.append(opt))
    try:
        with forgeviz.capture():
            model(x).sum().backward()
            before = len(ops_seen)
            opt.step()  # torch's wrapper, unwrapped: its marks reach the mode
            first = ops_seen[before:]
            assert torch.optim.Adam.step.fv_steps_aside and torch.optim.Adam.step.hooked
            model(x).sum().backward()
            before = len(ops_seen)
            opt.step()
            assert ops_seen[before:] == []  # nothing of the step reaches the mode
            later = torch.optim.Adam(torch.nn.Linear(2, 2).parameters())  # torch must not wrap ours again
            later.step()
            assert calls.count(later) == 1  # (wrapped twice, the step hooks would run twice)
            compiled = torch.compile(opt.step, backend="eager")
            model(x).sum().backward()
            compiled()
            y = (torch.ones(2, requires_grad=True) * 2).sum()
        assert len(first) == 2 and all("record_function" in name for name in first)
        assert ops_seen[-2:] == ["mul", "sum"] and y.grad_fn.metadata["fv_op"][0] == "sum"  # watched again
        assert torch.optim.Adam.step is torch_step and calls.count(opt) == 3
        for step in (twin_opt.step, twin_opt.step, torch.compile(twin_opt.step, backend="eager")):
            twin(x).sum().backward()
            step()
        assert _equal_parameters(model, twin)  # bit for bit
    finally:
        handle.remove()
        torch.optim.Adam.step = torch_step


def test_an_lr_scheduler_s_step_on_the_optimizer_is_wrapped_and_put_back(ops_seen):
    """An LR scheduler made before capture puts its own step on the optimizer, holding torch's: forgeviz
    wraps that one, the scheduler sees nothing changed (no warning), and its learning rates are torch's."""
    import warnings

    ((model, opt), (twin, twin_opt)), x = _twins(lambda ps: torch.optim.SGD(ps, lr=0.5))
    schedulers = [torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5) for o in (opt, twin_opt)]
    theirs = opt.__dict__["step"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "optimizer.step() has been overridden after ... initialization"
        with forgeviz.capture():
            for turn in range(3):
                model(x).sum().backward()
                before = len(ops_seen)
                opt.step()
                if turn:
                    assert ops_seen[before:] == []
                schedulers[0].step()
            assert opt.__dict__["step"].fv_steps_aside and opt.__dict__["step"]._wrapped_by_lr_sched
        for _ in range(3):
            twin(x).sum().backward()
            twin_opt.step()
            schedulers[1].step()
    assert opt.__dict__["step"] is theirs and not getattr(torch.optim.SGD.step, "fv_steps_aside", False)
    assert schedulers[0].get_last_lr() == schedulers[1].get_last_lr() == [0.0625]
    assert _equal_parameters(model, twin)


def test_a_step_given_a_closure_runs_under_the_mode_wrapped_or_not(ops_seen):
    """LBFGS evaluates the user's model inside step(): its ops are the graph's, tagged as any other."""
    ((model, opt), (twin, twin_opt)), x = _twins(lambda ps: torch.optim.LBFGS(ps, max_iter=2))

    def closure_of(m, o):
        def closure():
            o.zero_grad()
            loss = m(x).pow(2).sum()
            loss.backward()
            return loss
        return closure

    with forgeviz.capture():
        for _ in range(2):  # the second through forgeviz's wrapper
            before = len(ops_seen)
            opt.step(closure_of(model, opt))
            assert "linear" in ops_seen[before:] and "pow" in ops_seen[before:]
    for _ in range(2):
        twin_opt.step(closure_of(twin, twin_opt))
    assert _equal_parameters(model, twin)


def test_zero_grad_runs_outside_forgevizs_mode_and_resets_grads_as_torch_does(ops_seen):
    from forgeviz._capture.session import _ZERO_GRAD

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    stack = torch._C._len_torch_function_stack()
    with forgeviz.capture():
        model(torch.randn(3, 4)).sum().backward()
        assert torch.optim.Optimizer.zero_grad is not _ZERO_GRAD  # forgeviz's, while installed
        before = len(ops_seen)
        opt.zero_grad()  # a .grad = None per parameter: nothing for the mode to tag
        assert ops_seen[before:] == [] and all(p.grad is None for p in model.parameters())
        model(torch.randn(3, 4)).sum().backward()
        grads = [p.grad for p in model.parameters()]
        opt.zero_grad(set_to_none=False)  # zeroed in place: under the mode (the doctor watches such writes)
        assert len(ops_seen) > before and all(g is p.grad and not g.any() for g, p in zip(grads, model.parameters()))
        y = (torch.ones(2, requires_grad=True) * 2).sum()
    assert ops_seen[-2:] == ["mul", "sum"] and y.grad_fn.metadata["fv_op"][0] == "sum"  # watched again
    assert torch._C._len_torch_function_stack() == stack
    assert torch.optim.Optimizer.zero_grad is _ZERO_GRAD  # torch's own once capture() uninstalled


def test_another_librarys_zero_grad_patch_is_kept_and_called():
    """A library that patched Optimizer.zero_grad before capture: its zero_grad runs (inside ours) and is
    back after; one that patches it while capture runs keeps its patch at uninstall."""
    from forgeviz._capture.session import _ZERO_GRAD

    calls = []

    def theirs(optimizer, *args, **kwargs):
        calls.append(args or kwargs)
        return _ZERO_GRAD(optimizer, *args, **kwargs)

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.optim.Optimizer.zero_grad = theirs
    try:
        with forgeviz.capture():
            model(torch.randn(3, 4)).sum().backward()
            opt.zero_grad()
            assert calls == [{}] and model.weight.grad is None
        assert torch.optim.Optimizer.zero_grad is theirs
        with forgeviz.capture():
            torch.optim.Optimizer.zero_grad = _ZERO_GRAD  # patched again (here: undone) while capture runs
        assert torch.optim.Optimizer.zero_grad is _ZERO_GRAD
    finally:
        torch.optim.Optimizer.zero_grad = _ZERO_GRAD


def test_a_step_that_raises_leaves_the_mode_stack_as_it_was(ops_seen):
    import traceback

    class Failing(torch.optim.SGD):
        fails = True

        def step(self, closure=None):
            if self.fails:
                raise ValueError("the user's own error")

    opt = Failing(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    stack = torch._C._len_torch_function_stack()
    with pytest.raises(ValueError, match="the user's own error"):
        with forgeviz.capture():
            opt.step()
    assert torch._C._len_torch_function_stack() == stack and not get_session().capturing
    with forgeviz.capture():
        opt.fails = False
        opt.step()  # (the first step wraps the class's)
        opt.fails = True
        with pytest.raises(ValueError, match="the user's own error") as raised:
            opt.step()  # through forgeviz's wrapper: the mode comes back at once
        assert Failing.step.fv_steps_aside
        y = (torch.ones(2, requires_grad=True) * 2).sum()
    assert y.grad_fn.metadata["fv_op"][0] == "sum" and torch._C._len_torch_function_stack() == stack
    files = [frame.filename for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert not any("forgeviz" in f for f in files) and files[-1] == __file__  # the user's frames, torch's
    with forgeviz.capture():  # and the next block is watched as before
        (torch.ones(2, requires_grad=True) * 3).sum()
    assert ops_seen[-2:] == ["mul", "sum"]


def test_a_step_with_a_closure_and_a_users_mode_on_top_keep_everything_watched(ops_seen):
    model = torch.nn.Linear(4, 1)
    x, target = torch.randn(8, 4), torch.randn(8, 1)
    lbfgs = torch.optim.LBFGS(model.parameters(), max_iter=2)

    def closure():
        lbfgs.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        return loss

    with forgeviz.capture():
        before = len(ops_seen)
        lbfgs.step(closure)  # its forward and backward are the user's graph
        assert "linear" in ops_seen[before:] and "mse_loss" in ops_seen[before:]
        sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        with _Seen() as users:  # a mode the user entered above ours: never taken off the stack
            sgd.step()
    assert "add_" in users.names or "mul_" in users.names


def test_a_step_that_leaves_its_own_mode_on_the_stack_keeps_it_there(ops_seen):
    from forgeviz._capture.session import get_session

    left = _Seen()

    class Leaky(torch.optim.SGD):
        def step(self, closure=None):
            left.__enter__()  # a step that enters a mode and never leaves it

    opt = Leaky(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    stack = torch._C._len_torch_function_stack()
    faults = get_session().fault_count
    try:
        with forgeviz.capture():
            opt.step()
            assert torch._C._get_function_stack_at(torch._C._len_torch_function_stack() - 1) is left
        # forgeviz's mode stayed off (not pushed above the step's) and leaving took nothing of the step's
        assert torch._C._len_torch_function_stack() == stack + 1
        assert "changed the TorchFunctionMode stack" in get_session().faults[-1] and get_session().fault_count > faults
    finally:
        left.__exit__(None, None, None)
    assert torch._C._len_torch_function_stack() == stack


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA-only: no CUDA GPU on this machine")
def test_cuda_gradients_summarised_on_the_device_equal_torchs(nb):
    # Large gradients: summarised on the GPU (stats and a histogram, no values kept).
    nb.ok("torch.manual_seed(0)\nw = torch.randn(512, 256, device='cuda', requires_grad=True)\n"
          "x = torch.randn(64, 512, device='cuda')\nh = torch.tanh(x @ w)\nloss = h.square().mean()\n"
          "g = forgeviz.graph(loss)\nloss.backward()")
    w = nb["w"]
    leaf = next(n for n in nb["g"].model.nodes if n.kind == "leaf")
    record = get_session().store.get(leaf.id).records[-1]
    got = record.grad_outputs[0]
    exact = w.grad.double()
    assert got.shape == [512, 256] and got.values is None and got.numel == w.grad.numel()
    assert (got.min, got.max) == (w.grad.min().item(), w.grad.max().item())
    assert got.mean == pytest.approx(exact.mean().item(), rel=1e-4, abs=1e-12)
    assert got.norm == pytest.approx(exact.norm().item(), rel=1e-4)
    assert sum(got.histogram.counts) > 0
    # The run is the same as without forgeviz: bit for bit.
    torch.manual_seed(0)
    w2 = torch.randn(512, 256, device="cuda", requires_grad=True)
    x2 = torch.randn(64, 512, device="cuda")
    torch.tanh(x2 @ w2).square().mean().backward()
    assert torch.equal(w.grad, w2.grad)


def test_a_transposed_gradient_shares_its_bases_numbers_with_its_own_shape():
    """TBackward0 sends a Linear weight's gradient on as a transposed view of the one it received: the same
    values, summarised once (by their address, numel and dtype) and shown with the view's own shape; every
    figure equals torch's for the weight's gradient, and the histogram is the received one's."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(300, 200)
    with forgeviz.capture():
        loss = linear(torch.randn(8, 300)).square().sum()
        transpose = next(n for n in iter_graph([loss.grad_fn]) if type(n).__name__ == "TBackward0")
        loss.backward()
    record = get_session().store.get(transpose.metadata["fv_id"]).records[-1]
    received, sent = record.grad_outputs[0], record.grad_inputs[0]
    grad = linear.weight.grad.double()
    assert received.shape == [300, 200] and sent.shape == [200, 300]
    for s in (received, sent):
        assert (s.norm, s.min, s.max, s.mean) == pytest.approx(
            (grad.norm().item(), grad.min().item(), grad.max().item(), grad.mean().item()), rel=1e-6)
    assert sent.histogram is not None and sent.histogram == received.histogram
    assert sum(sent.histogram.counts) > 0
