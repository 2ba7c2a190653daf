"""The memory tracker: bytes are true, categories come from hooks, M3, nothing kept alive, bounded."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

import forgeviz
from forgeviz._capture.memory import live_storage_bytes
from forgeviz._capture.memory_choice import make_tracker
from forgeviz.model.memory import ACTIVATION, ALLOC, CATEGORIES, FREE, category_series


@pytest.fixture(params=["native", "dispatch"])
def backend(request, monkeypatch):
    """Each test runs on both trackers: the native CPU ledger (the default) and the dispatch mode."""
    monkeypatch.setenv("FORGEVIZ_MEMORY_BACKEND", request.param)
    return request.param


def mlp(width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 10))


def test_tracked_bytes_equal_torchs_and_a_gc_walk(backend):
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
            tracked = trace.tracker.tracked_bytes()
            assert tracked == live  # same storages, same nbytes as untyped_storage().nbytes()
            assert trace.live_bytes == sum(live.values())
        by_category = trace.bytes_by_category()
        assert trace.tracker.backend == backend
    params = sum(p.untyped_storage().nbytes() for p in model.parameters())
    grads = sum(p.grad.untyped_storage().nbytes() for p in model.parameters())
    momentum = sum(s["momentum_buffer"].untyped_storage().nbytes() for s in opt.state.values())
    assert by_category["parameter"] == params
    assert by_category["gradient"] == grads
    assert by_category["optimizer state"] == momentum
    assert by_category["input"] == x.untyped_storage().nbytes()
    assert records  # the tracker really saw storages


def test_saved_activations_are_categorised_and_freed_by_backward(backend):
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


def test_m3_appending_the_loss_climbs_and_item_stays_flat(backend):
    climbing = m3_loop(keep_graph=True)
    flat = m3_loop(keep_graph=False)
    print("append(loss):", climbing, "append(loss.item()):", flat)
    assert all(b > a for a, b in zip(climbing[1:], climbing[2:])), climbing
    assert len(set(flat[1:])) == 1, flat


def test_no_tensor_is_kept_alive_and_frees_are_recorded(backend):
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


def test_in_place_updates_of_existing_tensors_are_not_new_memory(backend):
    w = torch.zeros(512, 512)
    with forgeviz.memory_trace() as trace:
        base = trace.live_bytes
        w.add_(1)
        w.mul_(2)
        assert trace.live_bytes == base
    assert trace.tracker.baseline_bytes >= w.untyped_storage().nbytes()


def test_history_is_bounded_and_totals_stay_exact(backend):
    tracker = make_tracker(max_events=64, seed=False, backend=backend)
    keep = []
    with tracker:
        for i in range(200):
            t = torch.ones(10 + i)
            if i % 10 == 0:
                keep.append(t)
    # what stays: at most max_events, plus one alloc per storage still alive at the cut
    assert tracker.count <= 64 + len(tracker.records()) and tracker.dropped > 100
    c = tracker.column_arrays()
    _, series = category_series(c["time"], c["bytes"], c["storage"], c["action"], c["category"])
    final = sum(series[name][-1] for name in CATEGORIES)
    assert final == tracker.live_bytes()


def test_events_are_columns_within_32_bytes_and_plotly_stacks_categories(backend):
    with forgeviz.memory_trace() as trace:
        y = torch.ones(100) * 2
    events = trace.events
    assert sum(col.itemsize for col in events.values()) <= 32
    assert set(events) == {"time", "bytes", "storage", "node", "op", "module", "cell", "line", "action", "category"}
    assert ALLOC in set(events["action"].tolist())
    fig = trace.to_plotly()
    assert [t.name for t in fig.data] == CATEGORIES and all(t.stackgroup == "memory" for t in fig.data)
    assert "mul" in trace.ops and y.numel() == 100


def test_load_ext_timeline_links_cells_and_nodes(nb):
    nb.ok("model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))")
    nb.ok("x = torch.randn(16, 64)\nh = model(x)\nloss = h.square().mean()")
    cell = nb.shell.execution_count - 1
    view = nb.ok("forgeviz.memory()")
    tracker = view._tracker
    assert tracker.backend == "native"  # ./dev.sh builds it; the kernel's timeline uses it
    saved = [r for r in tracker.records() if r.category == ACTIVATION]
    assert saved and all(r.cell == cell for r in saved)
    assert any(r.node_name and r.node_name.endswith("Backward0") for r in saved)
    graph = nb.ok("forgeviz.graph(loss)")
    node_ids = {n.id for n in graph.model.nodes}
    assert {r.node for r in saved if r.node is not None} <= node_ids  # the same node ids the graph view uses
    detail = tracker.detail(saved[0].sid)
    assert detail.category == "activation" and detail.cell == cell and detail.source
    assert [c.cell for c in view.model.cells][-4:] == [cell - 1, cell, cell + 1, cell + 2]  # ...memory(), graph()


def _message(widget, content: dict) -> None:
    widget._handle_msg({"content": {"data": {"method": "custom", "content": content}}, "buffers": []})


def test_a_live_timeline_streams_only_while_a_view_draws_it(nb):
    view = nb.ok("forgeviz.memory()")
    sent = []
    view.send = lambda content, buffers=None: sent.append(content)
    nb.ok("a = torch.ones(1000)")
    assert sent == []  # no view has asked for it yet (or its output was cleared): nothing is sent
    _message(view, {"type": "replay", "request_id": 1, "view": 11})
    tracker = view._tracker
    assert sent[0] == {"type": "replay", "request_id": 1, "count": tracker.count}
    assert sum(m["count"] for m in sent if m["type"] == "events") == tracker.count  # the whole history
    assert view.timeline["count"] == tracker.count
    nb.ok("b = torch.ones(2000)")
    increments = [m for m in sent if m["type"] == "events"]
    assert increments[-1]["start"] + increments[-1]["count"] == tracker.count  # each cell's events follow
    _message(view, {"type": "replay", "request_id": 2, "view": 12})  # a second view of the same widget
    _message(view, {"type": "gone", "request_id": 3, "view": 11})
    assert sent[-1] == {"type": "gone", "request_id": 3}
    nb.ok("c = torch.ones(3000)")
    assert sent[-1]["type"] == "events"  # view 12 still draws it
    _message(view, {"type": "gone", "request_id": 4, "view": 12})
    quiet = len(sent)
    nb.ok("d = torch.ones(4000)")
    assert len(sent) == quiet  # no view left: nothing more is streamed


def test_memory_cell_magic_and_errors(nb):
    view = nb.ok("%%fv memory\nbig = torch.ones(1024, 1024)\nsmall = big[:2].clone()")
    cell = nb.shell.execution_count - 1
    records = view._tracker.records()
    assert {r.cell for r in records if r.line} == {cell}
    assert any(r.nbytes == 4 * 2**20 and r.line == 1 for r in records)  # M1: exactly 4 MiB, line 1
    assert any(r.nbytes == 2 * 1024 * 4 and r.line == 2 for r in records)
    import pytest
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="expected 'memory'"):
        nb.shell.run_cell_magic("fv", "graph", "x = 1")


def test_memory_needs_the_extension(ipython):
    import pytest

    with pytest.raises(RuntimeError, match="%load_ext forgeviz"):
        forgeviz.memory()


def test_cell_magic_sees_activations_and_m2_no_grad(nb):
    nb.ok("model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Tanh(), torch.nn.Linear(256, 1))\n"
          "x = torch.randn(64, 256)")
    kept = nb.ok("%%fv memory\nout = model(x).sum()")
    freed = nb.ok("%%fv memory\nwith torch.no_grad():\n    out2 = model(x).sum()")
    def by(view) -> dict[str, int]:
        return {c: sum(r.nbytes for r in view._tracker.records() if r.category == k)
                for k, c in enumerate(CATEGORIES)}

    # M2: without no_grad the graph keeps the hidden activations (tanh saves its output); with it, none
    assert by(kept)["activation"] >= 64 * 256 * 4 and by(freed)["activation"] == 0
    nb.ok("del out")
    import gc
    gc.collect()
    assert by(kept)["activation"] == 0  # dropping the output frees the graph and its saved tensors


def test_widget_streams_binary_columns_and_restreams_after_compaction(backend):
    from forgeviz._capture.session import get_session
    from forgeviz.model.memory import EVENT_COLUMNS
    from forgeviz.widgets.memory import MemoryWidget

    tracker = make_tracker(max_events=64, seed=False, backend=backend)
    view = MemoryWidget(tracker, get_session(), live=False)
    sent = []
    view.send = lambda content, buffers=None: sent.append((content, buffers))
    keep = []
    with tracker:
        for i in range(20):
            keep.append(torch.ones(i + 1))
    view.refresh()
    content, buffers = sent[-1]
    assert content == {"type": "events", "start": 0, "count": tracker.count, "reset": False}
    assert [len(b) for b in buffers] == [tracker.count * __import__("numpy").dtype(k).itemsize
                                         for _, k in EVENT_COLUMNS]
    with tracker:
        for i in range(100):
            torch.ones(i + 1)
    view.refresh()
    assert tracker.dropped > 0 and sent[-1][0]["reset"] is True and sent[-1][0]["start"] == 0
    replies = []
    view.send = lambda content, buffers=None: replies.append(content)
    view._handle_msg({"content": {"data": {"method": "custom", "content": {"type": "detail", "request_id": 1,
                                                                           "storage": -4}}}, "buffers": []})
    assert replies[-1]["type"] == "error" and "non-negative" in replies[-1]["message"]


def test_parameters_are_parameters_from_the_moment_they_are_registered(backend):
    with forgeviz.memory_trace() as trace:
        layer = torch.nn.Linear(300, 200)
        assert trace.bytes_by_category()["parameter"] == sum(p.untyped_storage().nbytes() for p in layer.parameters())


def test_memory_tracking_can_be_paused(nb):
    tracker = nb.ok("forgeviz.memory()")._tracker
    nb.ok("%fv memory off")
    before = tracker.count
    nb.ok("paused = torch.ones(1000)")
    assert tracker.count == before and not tracker.active
    nb.ok("%fv memory on")
    nb.ok("resumed = torch.ones(1000)")
    assert tracker.count > before
    import pytest
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="%fv memory: expected 'on' or 'off'"):
        nb.shell.run_line_magic("fv", "memory sometimes")
