"""The native CPU ledger: what only an allocator-level tracker sees, and how it degrades."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading

import pytest
import torch

import forgeviz
from forgeviz._capture.grads import node_id
from forgeviz._capture.memory_choice import make_tracker
from forgeviz._capture.session import get_session
from forgeviz.model.memory import ALLOC, FREE, GRADIENT, NO_ID, OTHER


def ops_of(trace) -> set[str]:
    """The op names this trace's events name (the ops table is shared by every trace)."""
    return {trace.ops[i] for i in set(trace.events["op"].tolist()) if i < len(trace.ops)}


@pytest.fixture(autouse=True)
def native_backend(monkeypatch):
    monkeypatch.setenv("FORGEVIZ_MEMORY_BACKEND", "native")


def test_the_allocator_sees_intermediates_that_no_python_name_holds():
    x = torch.randn(1 << 20)
    nbytes = x.untyped_storage().nbytes()
    with forgeviz.memory_trace() as trace:
        base = trace.live_bytes
        total = (x * 2 + 1).sum()  # x * 2 and (x * 2) + 1 are each 4 MiB, alive together for a moment
    assert trace.tracker.backend == "native"
    events = trace.events
    allocs = {int(events["storage"][i]) for i in range(len(events["time"]))
              if events["action"][i] == ALLOC and events["bytes"][i] == nbytes and events["category"][i] != OTHER}
    freed = {int(events["storage"][i]) for i in range(len(events["time"])) if events["action"][i] == FREE}
    assert len(allocs) == 2 and allocs <= freed  # both intermediates came and went (x itself was seeded)
    assert trace.peak_bytes >= base + 2 * nbytes
    assert trace.live_bytes == base + total.untyped_storage().nbytes()
    assert {"mul", "add"} <= ops_of(trace)  # the dispatcher op that allocated each


def test_gradients_are_gradients_from_their_allocation_on():
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters())
    with forgeviz.memory_trace() as trace:
        for _ in range(3):
            loss = model(torch.randn(8, 32)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        by_category = trace.bytes_by_category()
    grads = sum(p.grad.untyped_storage().nbytes() for p in model.parameters())
    assert by_category["gradient"] == grads
    events = trace.events
    grad_sids = {int(events["storage"][i]) for i in range(len(events["time"])) if events["category"][i] == GRADIENT}
    assert len(grad_sids) == 3 * 4  # four .grad tensors per step (set_to_none frees the old ones)
    for i in range(len(events["time"])):
        if int(events["storage"][i]) in grad_sids:
            assert events["category"][i] == GRADIENT  # never a temporary first: the hook only learnt it late


def _training_timeline(direct: bool) -> tuple[dict, dict]:
    """Every event column but the time, and the bytes by category, of three Adam steps of a small MLP in
    memory_trace(), with the gradient hooks extension (``direct``: the ledger's hot calls, the claims, the
    gradients after backward and the optimizer state read in C, and the mode's body) or without it (ctypes and
    Python, as where the extension cannot be built)."""
    from forgeviz._capture import native

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(8, 16)
    with pytest.MonkeyPatch.context() as patch:
        if not direct:
            patch.setattr(native, "hooks", lambda: None)
        with forgeviz.memory_trace() as trace:
            assert (trace.tracker.ledger._direct is not None) == direct
            for _ in range(3):
                loss = model(x).square().mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            by_category = trace.bytes_by_category()
            events = {name: column.tolist() for name, column in trace.events.items()}
    assert trace.tracker.faults == []
    # the training's events: not the storages that existed before (baseline events at time 0, in the order the
    # garbage collector lists them), each storage numbered by its first event
    kept = [i for i, when in enumerate(events.pop("time")) if when > 0]
    numbers: dict = {}
    events = {name: [column[i] for i in kept] for name, column in events.items()}
    events["storage"] = [numbers.setdefault(sid, len(numbers)) for sid in events["storage"]]
    nodes: dict = {NO_ID: -1}  # Node ids count on across runs: numbered by first event too
    events["node"] = [nodes.setdefault(node, len(nodes)) for node in events["node"]]
    assert len(nodes) > 6  # the claiming Nodes of three steps, named in their events
    return events, by_category


def test_a_fake_parameter_that_a_compile_s_cache_keeps_alive_is_no_memory_and_no_fault():
    """torch.compile of an optimizer step leaves Dynamo's fake parameters alive, each with a fake .grad whose data
    pointer raises (as Dynamo makes them: no unsafe data pointer access). The seeding walk finds them: they are no
    memory, and a .grad sync that meets one (were it remembered) skips it."""
    from torch._functorch import config as functorch_config
    from torch._subclasses.fake_tensor import FakeTensorMode

    real = torch.nn.Parameter(torch.ones(2, 4))
    real.grad = torch.ones(2, 4)
    with functorch_config.patch(fake_tensor_allow_unsafe_data_ptr_access=False):
        fake = FakeTensorMode().from_tensor(real)
    assert isinstance(fake, torch.nn.Parameter) and fake.grad is not None
    with pytest.raises(RuntimeError, match="Cannot access data pointer"):
        fake.grad.untyped_storage().data_ptr()
    model = torch.nn.Linear(32, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    session = get_session()
    faults = session.fault_count
    with forgeviz.memory_trace() as trace:
        tracker = trace.tracker
        assert id(fake) not in tracker._params  # not remembered by the walk
        tracker._remember(fake)  # (as another path might)
        model(torch.randn(8, 32)).square().mean().backward()
        opt.step()
        by_category = trace.bytes_by_category()
    assert session.fault_count == faults
    real_grads = [p.grad for p in model.parameters()] + [real.grad]  # (the fake's real twin is a parameter too)
    assert by_category["gradient"] == sum(g.untyped_storage().nbytes() for g in real_grads)


def test_the_ledgers_calls_in_c_record_what_ctypes_and_python_record():
    """The hot calls (claims, naming an op's allocations, categories, releases, the gradients after backward, the
    optimizer state) made by the gradient hooks extension give the timeline that ctypes and Python give without
    it: every event's storage, bytes, action, category, op, line and module; and the bytes by category are
    torch's own."""
    from forgeviz._capture import native

    assert native.hooks() is not None  # the path under test (the README's install builds it)
    gc.collect()
    direct, direct_totals = _training_timeline(True)
    gc.collect()
    through_ctypes, ctypes_totals = _training_timeline(False)
    assert direct == through_ctypes and direct_totals == ctypes_totals
    # after the steps: no Node saves anything, and the .grad of each parameter is float32 (4 bytes an element)
    assert direct_totals["activation"] == 0
    assert direct_totals["gradient"] == sum(4 * n for n in (16 * 16, 16, 4 * 16, 4))
    categories = set(direct["category"])
    assert len(direct["storage"]) > 100 and len(categories) >= 4


def test_forgeviz_own_work_is_not_the_users_memory():
    x = torch.randn(64, 64, requires_grad=True)
    with forgeviz.memory_trace() as trace, forgeviz.capture() as session:
        y = x.tanh()
        (y * 3).sum().backward()  # forgeviz summarises each gradient (aminmax, histc) meanwhile
    assert session.store.get(node_id(y.grad_fn)) is not None  # capture() inside memory_trace() records grads
    assert "tanh" in ops_of(trace) and not {"aminmax", "histc", "linalg_vector_norm"} & ops_of(trace)


def test_memory_trace_alone_records_no_gradient_summaries():
    from forgeviz._capture.session import get_session

    x = torch.randn(64, 64, requires_grad=True)
    with forgeviz.memory_trace() as trace:
        y = x.tanh()
        (y * 3).sum().backward()
    assert get_session().store.get(node_id(y.grad_fn)) is None and get_session().record_grads  # restored
    assert trace.bytes_by_category()["gradient"] == 0  # x is no parameter: its grad is just memory
    assert torch.allclose(x.grad, 3 * (1 - y.detach() ** 2), atol=1e-6)  # the backward itself is untouched


def test_an_optimizer_step_names_what_it_allocates_by_the_step_and_its_line():
    model = torch.nn.Linear(16, 16)
    opt = torch.optim.Adam(model.parameters())
    with forgeviz.memory_trace() as trace:
        model(torch.randn(4, 16)).square().mean().backward()
        opt.step(); step_line = sys._getframe().f_lineno  # noqa: E702 - the step's own line
        after = torch.ones(5) * 3  # named by its own op again once the step is over
    tracker = trace.tracker
    states = [v for state in opt.state.values() for v in state.values() if v.numel() > 1]
    assert len(states) == 4  # exp_avg and exp_avg_sq of weight and bias
    for state in states:
        rec = tracker.ledger.lookup(state.untyped_storage().data_ptr())
        assert (rec.op, rec.line, tracker.detail(rec.sid).category) == ("Adam.step", step_line, "optimizer state")
    assert tracker.ledger.lookup(after.untyped_storage().data_ptr()).op == "mul"
    assert sum(s.untyped_storage().nbytes() for s in states) == trace.bytes_by_category()["optimizer state"]


def test_a_step_that_calls_super_step_is_one_step_for_the_timeline():
    """An optimizer subclass whose step() calls super().step(): torch runs the global step hooks twice (once
    the parent's step is patched), and the timeline still opens one step and closes it once, named by the
    subclass; after each step the user's ops name their allocations again, and no site is left behind."""

    class ScaledAdam(torch.optim.Adam):
        def step(self, closure=None):
            out = super().step(closure)
            self.after_super = torch.ones(7)  # allocated inside the step, after the parent's returned
            return out

    model = torch.nn.Linear(16, 16)
    torch.optim.Adam(model.parameters())  # patches Adam.step for every later instance
    opt = ScaledAdam(model.parameters())
    afters = []
    with forgeviz.memory_trace() as trace:
        for _ in range(3):
            model(torch.randn(4, 16)).square().mean().backward()
            opt.step(); step_line = sys._getframe().f_lineno  # noqa: E702 - the step's own line
            afters.append(torch.ones(5) * 3)  # named by its own op again once the step is over
            opt.zero_grad()
        tracker = trace.tracker
        assert tracker.ledger._sites == []  # each step's site popped, once
    inside = tracker.ledger.lookup(opt.after_super.untyped_storage().data_ptr())
    assert (inside.op, inside.line) == ("ScaledAdam.step", step_line)
    assert [tracker.ledger.lookup(a.untyped_storage().data_ptr()).op for a in afters] == ["mul"] * 3


def test_an_op_that_leaves_nothing_new_alive_costs_no_naming_call():
    x = torch.zeros(10)
    with forgeviz.memory_trace() as trace:
        tracker = trace.tracker
        named, name = [], tracker.after_op
        tracker.after_op = lambda out, where, op=None: (named.append(op), name(out, where, op))
        x.add_(1)  # wraps 1 in a scalar tensor, which the op frees before it returns
        y = x + 1
    assert named == ["add"] and tracker.ledger.lookup(y.untyped_storage().data_ptr()).op == "add"


def test_allocations_on_other_threads_are_recorded():
    kept = []
    with forgeviz.memory_trace() as trace:
        base = trace.live_bytes
        worker = threading.Thread(target=lambda: kept.append(torch.ones(1000, 10)))
        worker.start()
        worker.join()
        assert trace.live_bytes == base + kept[0].untyped_storage().nbytes()
    kept.clear()
    gc.collect()
    assert trace.live_bytes == base


def test_cell_marks_follow_the_ledgers_compaction():
    tracker = make_tracker(max_events=64, seed=False, backend="native")
    keep = []
    with tracker:
        for cell in range(1, 21):
            tracker.mark_cell(cell)
            for i in range(5):
                t = torch.ones(10 + i)
                if i == 0:
                    keep.append(t)
    marks = tracker.timeline().cells
    assert tracker.dropped > 0 and len(marks) >= 2 and marks[-1].cell == 20  # older marks merged away
    times = tracker.column_arrays()["time"]
    for mark in marks:
        assert 0 <= mark.index <= tracker.count and times[mark.index] >= mark.time - 1e-6


def test_without_a_compiler_it_falls_back_and_says_why(tmp_path):
    script = (
        "import json\n"
        "from forgeviz._capture.memory_choice import make_tracker\n"
        "told = []\n"
        "t = make_tracker(fault=told.append, backend='auto')\n"
        "try:\n"
        "    make_tracker(backend='native')\n"
        "except RuntimeError as exc:\n"
        "    print(json.dumps([t.backend, told[0], 'raised: ' + str(exc)]))\n"
    )
    env = dict(os.environ, FORGEVIZ_CACHE=str(tmp_path), CXX="/bin/false")
    env.pop("FORGEVIZ_MEMORY_BACKEND", None)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    backend, told, raised = json.loads(out.stdout.splitlines()[-1])
    assert backend == "dispatch"
    assert "native memory tracker is unavailable" in told and "/bin/false" in told
    assert raised.startswith("raised: compiling forgeviz's native memory tracker failed")


def test_bad_backend_names_say_what_is_expected():
    with pytest.raises(ValueError, match="expected 'auto', 'native' or 'dispatch', got 'gpu'"):
        make_tracker(backend="gpu")


def test_forked_children_allocate_freely_and_the_parent_keeps_its_ledger():
    # A DataLoader worker is a fork of a process whose allocator forgeviz wraps.
    with forgeviz.memory_trace() as trace:
        before = trace.tracker.count
        pid = os.fork()
        if pid == 0:  # the child: allocate and free through the wrapped allocator, then leave at once
            ok = all(torch.ones(1000 + i).sum().item() == 1000 + i for i in range(100))
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert trace.tracker.count == before  # nothing the child did reached the parent's ledger
        kept = torch.ones(10)
        assert trace.live_bytes >= kept.untyped_storage().nbytes()


def test_remembered_shapes_stay_bounded_and_live_storages_keep_theirs(monkeypatch):
    from forgeviz._capture import ledger_native

    monkeypatch.setattr(ledger_native, "_MAX_SHAPES", 40)
    keep = []
    with forgeviz.memory_trace() as trace:
        # the storages alive when the trace began (earlier tests' leftovers too) are remembered as well
        seeded = len(trace.tracker.ledger._shapes)
        for i in range(300):
            t = torch.ones(i + 1) * 2  # ones and mul: two fresh storages, their shapes learnt from the op
            if i % 50 == 0:
                keep.append(t)
    tracker = trace.tracker
    tracker.timeline()
    live = {r.sid: r for r in tracker.records()}
    assert len(tracker.ledger._shapes) <= 40 // 2 + len(live) + seeded + 1
    mine = [tracker.ledger.lookup(t.untyped_storage().data_ptr()) for t in keep]
    assert [r.shape for r in mine] == [(t.numel(),) for t in keep]
    detail = tracker.detail(mine[0].sid)  # found by id in the ledger, not by walking every record
    assert detail.alive and detail.shape == list(mine[0].shape) and detail.bytes == mine[0].nbytes


def test_a_training_loop_under_the_timeline_leaves_the_garbage_collector_nothing_new_to_track():
    """What the timeline remembers step after step (each new storage's shape) is made of plain tuples, which the
    collector stops tracking: a torch.Size stayed tracked, ~6 objects a step, and once enough were promoted a full
    collection (~150 ms with torch loaded) ran every few thousand steps of a small model."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(8, 16)

    def steps(n: int) -> None:
        for _ in range(n):
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    def tracked() -> int:
        gc.collect()
        return len(gc.get_objects())

    with forgeviz.memory_trace() as trace:
        steps(20)  # (the tables' first entries, the step's sites)
        before = tracked()
        steps(300)
        grown = tracked() - before
        shapes = trace.tracker.ledger._shapes
        assert len(shapes) > 300  # the remembered shapes grew (capped at _MAX_SHAPES only when past it) ...
    assert grown < 150, grown  # ... and left the collector nothing to track (a Size each: 5,400 here)
    shape, dtype = next(iter(shapes.values()))
    assert type(shape) is tuple and all(type(n) is int for n in shape) and isinstance(dtype, torch.dtype)


def test_node_names_stay_bounded_in_a_long_loop_and_live_activations_keep_theirs(monkeypatch):
    from forgeviz._capture import ledger_native

    monkeypatch.setattr(ledger_native, "_MAX_SHAPES", 40)
    h = torch.ones(8, requires_grad=True)
    keep = []
    with forgeviz.memory_trace() as trace:
        for i in range(300):
            u = (h * (i + 1)).exp()  # a new ExpBackward0 each time, saving its result u
            if i % 50 == 0:
                keep.append(u)
        tracker = trace.tracker
        assert len(tracker.ledger._node_names) <= 2 * 40 + 1  # bounded while nobody reads the trace
    for u in keep:
        rec = tracker.ledger.lookup(u.untyped_storage().data_ptr())
        assert (ledger_native.m.CATEGORIES[rec.category], rec.node_name) == ("activation", "ExpBackward0")


def test_a_freed_storage_is_still_described_from_the_history():
    with forgeviz.memory_trace() as trace:
        gone = torch.ones(123, 4)
        sid = trace.tracker.ledger.lookup(gone.untyped_storage().data_ptr()).sid
        del gone
    detail = trace.tracker.detail(sid)
    assert not detail.alive and detail.bytes == 123 * 4 * 4 and detail.shape == [123, 4] and detail.op == "ones"
    with pytest.raises(KeyError, match="no storage 4000000000 in this timeline"):
        trace.tracker.detail(4_000_000_000)


def test_backward_allocations_name_the_backward_or_with_aten_ops_the_dispatcher_op(monkeypatch):
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

    def run():
        with forgeviz.memory_trace() as trace:
            model(torch.randn(4, 16)).sum().backward()
        return ops_of(trace)

    plain = run()
    assert {"linear", "relu", "sum", "backward"} <= plain and "threshold_backward" not in plain
    monkeypatch.setenv("FORGEVIZ_MEMORY_OPS", "aten")  # a RecordFunction callback names every op
    aten = run()
    assert {"linear", "relu", "ReluBackward0", "AddmmBackward0"} <= aten and "backward" not in aten  # the Nodes


def test_outputs_the_ledger_does_not_hold_are_named_without_a_fault():
    from forgeviz._capture.session import get_session

    faults = len(get_session().faults)
    with forgeviz.memory_trace() as trace:
        torch.eye(3).to_sparse()  # its output has no strided storage; its intermediates are named
        torch.ones(4)[None]  # a view of a storage the op just made
    assert get_session().faults[faults:] == []
    assert 0xFFFFFFFF not in trace.tracker.ledger._shapes  # "not found" is -1, never an unsigned storage id
    assert "to_sparse" in ops_of(trace)


def test_a_rebuild_keeps_the_newest_older_builds_for_the_same_torch(tmp_path, monkeypatch):
    """A build keeps the KEPT_BUILDS newest builds of other sources for its torch (another checkout's, in use),
    deletes the older ones, and leaves another torch's alone."""
    from forgeviz._capture import native

    monkeypatch.setenv("FORGEVIZ_CACHE", str(tmp_path))
    older = [native.library_path().with_name(f"cpu_ledger-{native._torch_key()}-{k:010d}.so")
             for k in range(native.KEPT_BUILDS + 2)]
    other_torch = native.library_path().with_name("cpu_ledger-ffffffffff-0000000000.so")
    older[0].parent.mkdir(parents=True)
    for k, path in enumerate(older):
        path.write_bytes(b"an older source's build")
        os.utime(path, (1_000_000 + k, 1_000_000 + k))  # the last written is the newest
    other_torch.write_bytes(b"another torch's build")
    built = native.build()
    assert built.exists() and built == native.library_path()
    assert [path.exists() for path in older] == [False] * 2 + [True] * native.KEPT_BUILDS
    assert other_torch.exists()
