"""Categories are roles with lifetimes: buffers are buffers, and a storage that a Node saves is an
activation only while a live Node saves it. Every number is torch's own (``untyped_storage().nbytes()``)."""

from __future__ import annotations

import gc

import pytest
import torch
import torch.nn.functional as F

import forgeviz
from forgeviz._capture.memory import live_storage_bytes
from forgeviz.model.memory import CATEGORIES, OTHER, RECATEGORIZE, category_series

from scenarios import make_cnn


@pytest.fixture(params=["native", "dispatch"])
def backend(request, monkeypatch):
    monkeypatch.setenv("FORGEVIZ_MEMORY_BACKEND", request.param)
    return request.param


def nbytes(tensors) -> int:
    """The bytes of the distinct storages of ``tensors``."""
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


def category_of(trace, t: torch.Tensor) -> str:
    """The category the timeline gives ``t``'s storage now."""
    return CATEGORIES[trace.tracker.ledger.lookup(t.untyped_storage().data_ptr()).category]


def totals_are_exact(trace, leaves=(), graph_alive: bool = False) -> dict[str, int]:
    """Check the timeline against the records and a gc walk; return bytes by category.

    The walk finds storages through Python tensors: not those only a live graph holds (a Node's
    saved intermediates), nor a leaf's ``.grad`` before it is read (so it reads those of ``leaves``).
    """
    grads = [leaf.grad for leaf in leaves]
    gc.collect()
    by_category = trace.bytes_by_category()
    tracker = trace.tracker
    c = tracker.column_arrays()
    _, series = category_series(c["time"], c["bytes"], c["storage"], c["action"], c["category"])
    # replaying every event (category changes included) lands on the live records, category by category
    assert {name: series[name][-1] for name in CATEGORIES} == by_category
    assert sum(by_category.values()) == trace.live_bytes
    if not graph_alive:
        assert tracker.tracked_bytes() == live_storage_bytes()  # the same storages, the same bytes
        assert trace.live_bytes == sum(live_storage_bytes().values())
    del grads
    return by_category


def test_batchnorm_state_is_buffer_and_the_target_is_an_activation_only_while_saved(backend):
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(1024).train()
    x, y = torch.randn(8, 1024), torch.randint(0, 1024, (8,))
    with forgeviz.memory_trace() as trace:
        start = trace.bytes_by_category()  # "other": y, and whatever earlier tests left alive
        loss = F.cross_entropy(bn(x), y)
        during = totals_are_exact(trace, graph_alive=True)
        y_during = category_of(trace, y)
        loss.backward()
        del loss
        after = totals_are_exact(trace, list(bn.parameters()))
        y_after = category_of(trace, y)
        y_sid = next(r.sid for r in trace.tracker.records() if r.nbytes == 64 and r.shape == tuple(y.shape))
    assert trace.tracker.backend == backend
    buffers = nbytes(bn.buffers())
    assert buffers == 1024 * 4 * 2 + 8  # running mean, running var, num_batches_tracked
    assert during["buffer"] == after["buffer"] == buffers
    assert y_during == "activation" and during["activation"] >= y.untyped_storage().nbytes() == 64
    assert after["activation"] == 0
    # the target went back to what it was (x, seeded as other too, is now the model's input)
    assert y_after == "other" and after["other"] == start["other"] - x.untyped_storage().nbytes()
    assert after["parameter"] == nbytes(bn.parameters())
    assert after["gradient"] == nbytes(p.grad for p in bn.parameters())
    # going back is an event on the timeline, dated when the graph freed it
    events = trace.events
    back = [i for i in range(len(events["time"]))
            if events["storage"][i] == y_sid and events["action"][i] == RECATEGORIZE and events["category"][i] == OTHER]
    assert len(back) == 1


def test_a_resnet_like_training_step_leaves_no_activation_and_exact_roles(backend):
    model = make_cnn(seed=3).train()
    opt = torch.optim.Adam(model.parameters())
    torch.manual_seed(4)
    x, target = torch.randn(4, 3, 8, 8), torch.tensor([1, 2, 3, 4])
    with forgeviz.memory_trace() as trace:
        loss = F.cross_entropy(model(x), target)
        forward = totals_are_exact(trace, graph_alive=True)
        opt.zero_grad()
        loss.backward()
        del loss
        after_backward = totals_are_exact(trace, list(model.parameters()))
        opt.step()
        after_step = totals_are_exact(trace, list(model.parameters()))
    assert forward["activation"] > 0
    for roles in (after_backward, after_step):
        assert roles["activation"] == 0
        assert roles["parameter"] == nbytes(model.parameters())
        assert roles["buffer"] == nbytes(model.buffers()) == 4 * (8 * 4 * 2 + 8)  # 4 BatchNorm2d(8)
        assert roles["gradient"] == nbytes(p.grad for p in model.parameters())
    assert after_step["optimizer state"] == nbytes(v for s in opt.state.values() for v in s.values()
                                                   if isinstance(v, torch.Tensor) and v.numel() > 1)
    assert after_step["input"] == x.untyped_storage().nbytes()


def test_with_gradients_recorded_the_claims_come_from_the_armed_pass_not_a_walk(monkeypatch):
    """As under ``%load_ext forgeviz`` (gradients recorded, memory traced): the native hooks' pass armed for the
    backward gives the timeline its Nodes, so the timeline walks nothing itself, and every activation a Node
    saved is released when the backward frees it."""
    from forgeviz._capture import native

    native.load_if_built()
    lib = native.hooks()
    if lib is None:
        pytest.skip("the native gradient hooks are not built (python -m forgeviz._capture.native)")
    walks = []
    walk = lib.walk
    monkeypatch.setattr(lib, "walk", lambda *args: walks.append(args) or walk(*args))
    model = make_cnn(seed=3).train()
    torch.manual_seed(4)
    x, target = torch.randn(4, 3, 8, 8), torch.tensor([1, 2, 3, 4])
    with forgeviz.capture() as session, forgeviz.memory_trace() as trace:
        loss = F.cross_entropy(model(x), target)
        assert totals_are_exact(trace, graph_alive=True)["activation"] > 0
        loss.backward()
        assert session.recorder.armed is not None  # (the native hooks recorded this backward)
        del loss
        after_backward = totals_are_exact(trace, list(model.parameters()))
    assert after_backward["activation"] == 0 and not walks
    assert after_backward["gradient"] == nbytes(p.grad for p in model.parameters())


def test_a_graph_that_dies_without_backward_releases_its_activations(backend):
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    target = torch.randn(16, 1)
    with forgeviz.memory_trace() as trace:
        start = trace.bytes_by_category()
        loss = F.mse_loss(model(torch.randn(16, 64)), target)
        assert totals_are_exact(trace, graph_alive=True)["activation"] > 0
        assert category_of(trace, target) == "activation"
        del loss  # validation without no_grad, then the graph goes: its Nodes die
        after = totals_are_exact(trace)
        assert category_of(trace, target) == "other"
    assert after["activation"] == 0
    assert after["other"] == start["other"]


def test_retain_graph_keeps_activations_and_shared_saves_are_counted(backend):
    w1 = torch.randn(256, requires_grad=True)
    w2 = torch.randn(256, requires_grad=True)
    shared = torch.randn(256)  # saved by both graphs below
    size = shared.untyped_storage().nbytes()
    with forgeviz.memory_trace() as trace:
        start = trace.bytes_by_category()
        a = (w1 * shared).sum()
        b = (w2 * shared).sum()
        a.backward(retain_graph=True)
        assert totals_are_exact(trace, [w1], graph_alive=True)["activation"] == size  # a's graph holds it
        a.backward()
        assert totals_are_exact(trace, [w1], graph_alive=True)["activation"] == size  # b's graph holds it
        assert category_of(trace, shared) == "activation"
        b.backward()
        after = totals_are_exact(trace, [w1, w2])
        assert category_of(trace, shared) == "other"
    assert after["activation"] == 0 and after["other"] == start["other"]
    assert torch.equal(w1.grad, 2 * shared) and torch.equal(w2.grad, shared)


def test_a_backward_to_some_inputs_releases_only_what_its_nodes_freed(backend):
    """backward(inputs=[w]) runs the Nodes that lead to w only: the Mul it ran frees what it saved,
    the Sin and Exp it never reached keep h saved while they live. (Before the backward, the
    claiming Nodes are found by a walk in C++; after it, each is asked in Python, as the backward did
    not free them all.)"""
    from forgeviz._capture import native

    if backend == "native":
        assert native.hooks() is not None  # the C++ walk is the path under test
    x = torch.randn(300, requires_grad=True)
    w = torch.randn(300, requires_grad=True)
    with forgeviz.memory_trace() as trace:
        h = x.exp()  # ExpBackward0 saves its result, h
        s = h.sin()  # SinBackward0 saves h too
        out = (s * w).sum()  # MulBackward0 saves s and w
        assert category_of(trace, h) == category_of(trace, s) == "activation"
        out.backward(inputs=[w])
        assert category_of(trace, s) == "temporary"  # the Mul ran and freed it
        assert category_of(trace, h) == "activation"  # the Sin and the Exp never ran: h is still saved
        assert totals_are_exact(trace, [w], graph_alive=True)["activation"] == h.untyped_storage().nbytes()
        assert torch.equal(w.grad, s.detach())
        del out, s  # the Sin dies; the Exp lives on as h's grad_fn, and still saves h
        after = totals_are_exact(trace, [w], graph_alive=True)
        assert category_of(trace, h) == "activation" and after["activation"] == h.untyped_storage().nbytes()
        h.grad_fn.metadata.clear()  # its claim's sentinel goes, as when the Exp dies
        trace.tracker.records()  # (reading the timeline releases what dead Nodes claimed)
        assert category_of(trace, h) == "temporary"
    assert trace.tracker.faults == []


def test_batched_recategorize_and_release_count_like_the_single_calls(backend):
    """recategorize_all (every .grad after a backward, in one call) and release_all (every claim a
    backward freed) give each storage what recategorize and release would: its bytes, its category,
    and a claim held twice goes back only after its second release."""
    from forgeviz._capture.memory_choice import make_tracker
    from forgeviz.model.memory import ACTIVATION, GRADIENT, TEMPORARY

    before = torch.ones(3, 7)  # made before tracking began: recategorize_all tracks it then
    tracker = make_tracker(seed=False, backend=backend)
    with tracker:
        a, b = torch.zeros(256), torch.zeros(2, 512, dtype=torch.float64)
        x = torch.ones(300, requires_grad=True)
        h = x * 2
        sin = h.sin()  # SinBackward0 saves h
        ledger = tracker.ledger
        ledger.recategorize_all([a, b, before], GRADIENT)
        first = ledger.claim(h, 1, sin.grad_fn)
        second = ledger.claim(h, 2, sin.grad_fn)  # another Node saving the same storage
        assert first == second and first[0] == h.untyped_storage().data_ptr()

        def record_of(t):
            key = t.untyped_storage().data_ptr()
            return {k: (rec.category, rec.nbytes, rec.shape) for k, rec in tracker.ledger.live()}[key]

        assert record_of(a) == (GRADIENT, 1024, (256,))
        assert record_of(b) == (GRADIENT, 8192, (2, 512))
        assert record_of(before) == (GRADIENT, 84, (3, 7))
        assert record_of(h)[:2] == (ACTIVATION, 1200)
        ledger.release_all([first])
        assert record_of(h)[0] == ACTIVATION  # one Node still holds it
        ledger.release_all([second, first])  # the last claim goes, and a release past it does nothing
        assert record_of(h)[0] == TEMPORARY
        ledger.recategorize_all([], GRADIENT)
        ledger.release_all([])
    assert tracker.faults == []
