"""The recorder's graph signature (issue 28's cost): the native hooks' pass gives its graph's signature and
Node order from arming it (``NativePass.shape``, ``order``), and the library's ``walk`` gives the same for a
pass the Python hooks recorded. Both must walk exactly as ``grads.iter_graph`` does, and tell apart the graphs
the Python signature told apart. Then a recording in this process: one graph written for a loop of equal
steps, a second one for a step that ran another branch, and every Node row at its Node's position in the
recorded graph (``walk.reachable``'s order), with torch's gradient norm."""

from __future__ import annotations

import math

import pyarrow.ipc as ipc
import pytest
import torch

import forgeviz
from forgeviz._capture import native
from forgeviz._capture.grads import NODE_STATS_SIZE, BackwardRecorder, GradStore, iter_graph
from forgeviz._capture.walk import reachable

native.load_if_built()  # (built by dev.sh before the tests; loaded here, whatever ran first)
lib = native.hooks()
needs_hooks = pytest.mark.skipif(lib is None, reason="the native gradient hooks are not built "
                                 "(python -m forgeviz._capture.native)")


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


@needs_hooks
def test_walk_and_the_armed_pass_give_iter_graphs_order_and_one_signature():
    model, x = _model(), torch.randn(3, 4)
    with forgeviz.capture() as session:
        session.record_grads = False
        losses = [model(x).pow(2).sum() for _ in range(2)]
        other = (model(x) * 2).sum()
        for loss in (*losses, other):
            for node in iter_graph([loss.grad_fn]):
                node.metadata["fv_id"] = id(node)  # (ids as arm gives them: any int)
    walked = [lib.walk([loss.grad_fn]) for loss in (*losses, other)]
    for loss, (_, found, ids) in zip((*losses, other), walked):
        nodes = iter_graph([loss.grad_fn])
        assert ids == [id(n) for n in nodes] and found == len(nodes) == len(reachable([loss.grad_fn], 100)[0])
        assert [id(n) for n in nodes] != [id(n) for n in reachable([loss.grad_fn], 100)[0]]  # (not its order)
    assert walked[0][0] == walked[1][0]  # the same graph shape, step after step
    assert walked[2][0] != walked[0][0]  # one more Node (MulBackward0)
    other_model = _model()  # the same ops on other parameters: another graph
    assert lib.walk([other_model(x).pow(2).sum().grad_fn])[0] != walked[0][0]
    assert lib.walk([None, losses[0].grad_fn])[:2] == walked[0][:2]
    with pytest.raises(TypeError, match="roots is a list"):
        lib.walk((losses[0].grad_fn,))

    # the native hooks' pass knows the same, from arming the graph: no second walk
    store = GradStore()
    finish = BackwardRecorder(store, pytest.fail).arm([losses[0].grad_fn])
    losses[0].backward()
    finish()
    armed = store.unread_pass(store.recorded)
    assert armed.shape() == walked[0][:2] and armed.order() == walked[0][2]
    stats, _ = armed.node_stats()  # by the pass's own order, as by its ids
    assert stats == armed.node_stats(walked[0][2])[0] and len(stats) >= NODE_STATS_SIZE * 5

    # a Python autograd.Function's Node (a PyNode) is named by its class: two classes, two graphs, though
    # the C++ type of their Nodes (kept per type for the others' names) is the same
    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    class Twice(Double):
        pass

    w = torch.ones(3, requires_grad=True)
    shapes = [lib.walk([fn.apply(w).sum().grad_fn]) for fn in (Double, Twice, Double)]
    assert shapes[0][0] != shapes[1][0] and shapes[0][0] == shapes[2][0]


@needs_hooks
def test_a_native_pass_forgets_exactly_the_rows_of_the_nodes_it_is_given():
    """``NativePass.forget(gone)`` (what ``GradStore`` asks of a pass that newer ones recorded again, and of the
    Nodes that died) drops the rows of the Nodes in ``gone`` and keeps every other row, in order, whether
    ``gone`` is smaller than the pass (a few parameters' Nodes) or larger (a prune's hundreds)."""
    # (16 × 8 elements: more than chain.SMALL, so no Node's gradients go to a Python hook: all five rows are here)
    x, w = torch.randn(16, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    loss = (x @ w).tanh().sum()
    store = GradStore()
    finish = BackwardRecorder(store, pytest.fail).arm([loss.grad_fn])
    loss.backward()
    finish()
    armed = store.unread_pass(store.recorded)
    nids = [nid for nid, _, _ in armed.rows()]
    assert len(nids) == len(iter_graph([loss.grad_fn])) == 5  # sum, tanh, mm, and x's and w's AccumulateGrad
    gone = {nids[0], nids[3]}
    assert armed.forget(gone | {-7, 10**15}) == 3  # (ids no row has change nothing)
    assert [nid for nid, _, _ in armed.rows()] == [nid for nid in nids if nid not in gone]
    # a prune's set of dead Nodes, larger than the pass (its rows are looked up in it): one of them a row's
    assert armed.forget({nids[1], "not an id"} | set(range(-300, 0))) == 2
    assert [nid for nid, _, _ in armed.rows()] == [nids[2], nids[4]]
    assert armed.forget(set()) == 2 and armed.forget(set(nids)) == 0 and armed.rows() == []

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_recorded_graphs_and_node_rows(tmp_path, dtype):
    """bfloat16: the native hooks hand every gradient to Python, so a step's Node rows are all Python's."""
    model, x = _model().to(dtype), torch.randn(3, 4, dtype=dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = []  # per step: (Nodes, {position in the graph: torch's norm of the gradient that reached it})
    with forgeviz.capture():
        with forgeviz.record(tmp_path / "run"):
            for step in range(5):
                out = model(x)
                loss = (out * 2).sum() if step == 3 else out.pow(2).sum()  # step 4 runs another graph
                nodes = reachable([loss.grad_fn], 100)[0]
                seen = {}
                handles = [n.register_prehook(lambda g, k=k: seen.__setitem__(k, [
                    g[0].double().norm().item(), g[0].min().item(), g[0].max().item(), g[0].double().mean().item()]))
                    for k, n in enumerate(nodes)]
                opt.zero_grad()
                loss.backward()
                for handle in handles:
                    handle.remove()
                expected.append((len(nodes), seen))
                opt.step()
    run = forgeviz.open(tmp_path / "run")
    assert run.steps == [1, 2, 3, 4, 5]
    with open(tmp_path / "run" / "rank0" / "graphs.arrows", "rb") as f:
        graphs = ipc.open_stream(f).read_pandas()
    assert list(graphs["step"]) == [1, 4] and list(graphs["graph"]) == [0, 1]
    frame = run.frame()
    nodes = frame[frame["kind"] == "node"]
    for step, (count, seen) in enumerate(expected, 1):
        rows = nodes[nodes["step"] == step]
        assert set(rows["graph"]) == {1 if step == 4 else 0}
        recorded = {int(k): list(v) for k, *v in zip(rows["node"], *(rows[c] for c in ("norm", "min", "max", "mean")))}
        # a row at each Node's position, torch's norm there: the native hooks' and the small elementwise
        # Nodes' whose gradients they hand to Python
        assert set(recorded) == set(seen) and len(recorded) == count, (step, sorted(recorded), count)
        for k, numbers in recorded.items():  # norm, min, max, mean
            assert numbers == pytest.approx(seen[k], rel=1e-6, abs=1e-9), (step, k)


@pytest.mark.parametrize("read_first", [False, True], ids=["unread", "read-first"])
def test_a_step_whose_gradients_went_nan_has_one_row_per_node(tmp_path, read_first):
    """A NaN gradient is handed to its Node's Python hook; and when a panel's doctor is open it reads the
    store as the backward ends (to name the first non-finite Node), before the recording reads the pass
    (``read-first``). Either way each Node that ran gets one row, with torch's norm (NaN where it went NaN)."""
    model, x = _model(), torch.randn(3, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # (lr 0: the NaN step leaves the weights as they are)
    seen_by_step = []
    with forgeviz.capture() as session:
        if read_first:
            session.after_backward_of.append(lambda roots: session.store.get(-1))  # reads every pass waiting
        with forgeviz.record(tmp_path / "run"):
            for step in range(3):
                out = model(x)
                loss = (out.log() if step == 1 else out).pow(2).sum()  # step 2: the log of negatives is NaN
                nodes = reachable([loss.grad_fn], 100)[0]
                seen = {}
                handles = [n.register_prehook(lambda g, k=k: seen.__setitem__(k, g[0].double().norm().item()))
                           for k, n in enumerate(nodes)]
                opt.zero_grad()
                loss.backward()
                for handle in handles:
                    handle.remove()
                seen_by_step.append(seen)
                opt.step()
    frame = forgeviz.open(tmp_path / "run").frame()
    nodes = frame[frame["kind"] == "node"]
    for step, seen in enumerate(seen_by_step, 1):
        rows = nodes[nodes["step"] == step]
        positions = [int(k) for k in rows["node"]]
        assert sorted(positions) == sorted(set(positions)) == sorted(seen), (step, sorted(positions))
        for k, norm in zip(positions, rows["norm"]):
            assert norm == pytest.approx(seen[k], rel=1e-6, nan_ok=True), (step, k)
    assert any(math.isnan(norm) for norm in nodes[nodes["step"] == 2]["norm"])
