"""The memory tracker: bytes are true, categories come from hooks, M3, nothing kept alive, bounded."""

from __future__ import annotations

import gc
import weakref

import torch

import forgeviz
from forgeviz.capture.memory import MemoryTracker, live_storage_bytes
from forgeviz.model.memory import ALLOC, CATEGORIES, FREE, category_series


def mlp(width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 10))


def test_tracked_bytes_equal_torchs_and_a_gc_walk():
    model = mlp(128)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with forgeviz.memory_trace() as trace:
        for _ in range(2):
            x = torch.randn(16, 128)
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            # every live tracked storage's bytes are torch's own
            gc.collect()
            records = {r.sid: r for r in trace.tracker.records()}
            live = live_storage_bytes()
            tracked = {k: r.nbytes for k, r in trace.tracker._live.items()}
            assert tracked == live  # same storages, same nbytes as untyped_storage().nbytes()
            assert trace.live_bytes == sum(live.values())
        by_category = trace.bytes_by_category()
    params = sum(p.untyped_storage().nbytes() for p in model.parameters())
    grads = sum(p.grad.untyped_storage().nbytes() for p in model.parameters())
    momentum = sum(s["momentum_buffer"].untyped_storage().nbytes() for s in opt.state.values())
    assert by_category["parameter"] == params
    assert by_category["gradient"] == grads
    assert by_category["optimizer state"] == momentum
    assert by_category["input"] == x.untyped_storage().nbytes()
    assert records  # the tracker really saw storages


def test_saved_activations_are_categorised_and_freed_by_backward():
    model = mlp(64)
    x = torch.randn(8, 64)
    with forgeviz.memory_trace() as trace:
        loss = model(x).square().mean()
        during = trace.bytes_by_category()["activation"]
        loss.backward()
        after = trace.bytes_by_category()["activation"]
    assert during > 0 and after == 0


def m3_loop(keep_graph: bool, steps: int = 6) -> list[int]:
    model = mlp(64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses, live = [], []
    with forgeviz.memory_trace() as trace:
        for _ in range(steps):
            x = torch.randn(32, 64)
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss if keep_graph else loss.item())
            del loss, x
            gc.collect()
            live.append(trace.live_bytes)
    return live


def test_m3_appending_the_loss_climbs_and_item_stays_flat():
    climbing = m3_loop(keep_graph=True)
    flat = m3_loop(keep_graph=False)
    print("append(loss):", climbing, "append(loss.item()):", flat)
    assert all(b > a for a, b in zip(climbing[1:], climbing[2:])), climbing
    assert len(set(flat[1:])) == 1, flat


def test_no_tensor_is_kept_alive_and_frees_are_recorded():
    with forgeviz.memory_trace() as trace:
        t = torch.ones(256, 256)
        ref = weakref.ref(t.untyped_storage())
        sid = next(r.sid for r in trace.tracker.records() if r.nbytes == t.untyped_storage().nbytes()
                   and r.shape == (256, 256))
        del t
        gc.collect()
        assert ref() is None
    events = trace.events
    frees = [i for i in range(len(events["time"])) if events["storage"][i] == sid and events["action"][i] == FREE]
    assert len(frees) == 1 and events["bytes"][frees[0]] == 256 * 256 * 4


def test_in_place_updates_of_existing_tensors_are_not_new_memory():
    w = torch.zeros(512, 512)
    with forgeviz.memory_trace() as trace:
        base = trace.live_bytes
        w.add_(1)
        w.mul_(2)
        assert trace.live_bytes == base
    assert trace.tracker.baseline_bytes >= w.untyped_storage().nbytes()


def test_history_is_bounded_and_totals_stay_exact():
    tracker = MemoryTracker(max_events=64, seed=False)
    keep = []
    with tracker:
        for i in range(200):
            t = torch.ones(10 + i)
            if i % 10 == 0:
                keep.append(t)
    # what stays: at most max_events, plus one alloc per storage still alive at the cut
    assert tracker.count <= 64 + len(tracker.records()) and tracker.dropped > 100
    c = tracker._columns
    _, series = category_series(c["time"], c["bytes"], c["storage"], c["action"], c["category"])
    final = sum(series[name][-1] for name in CATEGORIES)
    assert final == tracker.live_bytes()


def test_events_are_columns_within_32_bytes_and_plotly_stacks_categories():
    with forgeviz.memory_trace() as trace:
        y = torch.ones(100) * 2
    events = trace.events
    assert sum(col.itemsize for col in events.values()) <= 32
    assert set(events) == {"time", "bytes", "storage", "node", "op", "module", "cell", "line", "action", "category"}
    assert ALLOC in set(events["action"].tolist())
    fig = trace.to_plotly()
    assert [t.name for t in fig.data] == CATEGORIES and all(t.stackgroup == "memory" for t in fig.data)
    assert "mul" in trace.ops and y.numel() == 100
