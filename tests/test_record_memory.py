"""The memory timeline of a recorded run (issue 28): ``forgeviz.record(..., memory=True)`` and
``python -m forgeviz record --memory`` write the CPU ledger's events per rank; ``run.memory(rank)`` is the memory
view's own wire model rebuilt from them, ``run.memory_view(rank)`` the view drawing it. Every figure is checked
against a ``forgeviz.memory_trace()`` of the same steps in the same process, or against torch's own bytes."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pyarrow as pa
import pytest
import torch
from test_record import _open_warned, _torchrun, record_then_kill

import forgeviz
from forgeviz._capture.cuda_memory import CudaTimelineSource, parse_snapshot
from forgeviz._capture.recording import Recorder
from forgeviz._capture.session import get_session
from forgeviz.model import memory as m
from forgeviz.model.memory import category_series
from forgeviz.model.memory_outline import _arrays
from forgeviz.run.memory import STAND_IN

from cuda_fixtures import synthetic_snapshot


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _by_category(cols: dict, at=lambda values: values[-1]) -> dict[str, int]:
    """Live bytes per category after the last event (``at``: or the highest, ``max``), replayed from the view's
    own columns."""
    a = _arrays(cols)
    _, series = category_series(a["time"], a["bytes"], a["storage"], a["action"], a["category"], max_points=10**9)
    return {name: at(values) for name, values in series.items()}


def _train_recorded(folder, steps: int, **record):
    """An MLP trained with Adam, recorded with memory and traced by memory_trace() at once (the same events)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    before = get_session().fault_count  # (the session outlives each test: faults told before this one stay)
    with forgeviz.record(folder, memory=True, **record) as session:
        with forgeviz.memory_trace() as trace:
            for _ in range(steps):
                opt.zero_grad()
                net(torch.randn(32, 64)).square().mean().backward()
                opt.step()
    assert session.fault_count == before, session.faults[-3:]
    return net, opt, trace


def test_recorded_timeline_equals_memory_trace_and_torch(tmp_path):
    net, opt, trace = _train_recorded(tmp_path / "run", 5)
    run = forgeviz.open(tmp_path / "run")
    timeline = run.memory(0)
    assert isinstance(timeline, m.MemoryTimeline) and timeline.count > 0
    assert (timeline.peak_bytes, timeline.live_bytes) == (trace.peak_bytes, trace.live_bytes)
    assert timeline.baseline_bytes == trace.tracker.baseline_bytes
    assert run.peaks() == {0: trace.peak_bytes}
    source = run.recorded_memory(0)
    final = _by_category(source.columns())
    params = _nbytes(net.parameters())
    assert final["parameter"] == params == 2 * (64 * 128 + 128 + 128 * 10 + 10) * 2  # float32
    assert final["gradient"] == _nbytes(p.grad for p in net.parameters()) == params
    assert final["optimizer state"] == _nbytes(v for s in opt.state.values() for v in s.values() if v.numel() > 1)
    assert final["optimizer state"] == 2 * params  # Adam: exp_avg and exp_avg_sq
    assert final == {**_by_category(trace.tracker.columns()), "other": final["other"]}
    # what the memory stream holds: the steps (0: what existed before), and ops by name
    table = pa.ipc.open_stream(str(tmp_path / "run" / "rank0" / "memory.arrows")).read_all()
    assert sorted(set(table.column("step").to_pylist())) == [0, 1, 2, 3, 4, 5]
    assert {"linear", "relu"} <= set(timeline.ops)
    assert run.meta(0)["memory"]["baseline_bytes"] == trace.tracker.baseline_bytes


def test_memory_view_of_a_run_draws_its_wire_model(tmp_path):
    _train_recorded(tmp_path / "run", 3)
    run = forgeviz.open(tmp_path / "run")
    view = run.memory_view(0)
    assert view.timeline == dataclasses.asdict(run.memory(0))  # the trait the renderer draws
    saved = view._saved(whole=True)  # what a replay, a saved output or a file sends: the events, every one
    (message, buffers), = saved.messages
    assert message == {"type": "events", "start": 0, "count": run.memory(0).count, "reset": True}
    cols = dict(zip([name for name, _ in m.EVENT_COLUMNS], buffers))
    assert _by_category(cols) == _by_category(run.recorded_memory(0).columns())
    assert max(category_series(*(_arrays(cols)[k] for k in ("time", "bytes", "storage", "action", "category")))
               [1]["parameter"]) > 0
    a = _arrays(cols)
    first_linear = int(np.flatnonzero(a["op"] == run.memory(0).ops.index("linear"))[0])
    detail = view.tracker.detail(int(a["storage"][first_linear]))
    assert detail.op == "linear" and detail.bytes == int(a["bytes"][first_linear])
    assert view.summary().startswith(f"forgeviz memory (cpu): {run.memory(0).count:,} events")


def test_memory_events_wait_for_a_writer_that_fell_behind_and_none_is_lost(tmp_path, monkeypatch):
    """A writer whose disk stops answering for 30 steps, a segment a step (three streams each): the ledger's events
    it has no room for stay with the ledger and go with a later segment, so the recorded timeline still holds every
    event, category for category, with memory_trace()'s peak and live bytes."""
    import threading

    from forgeviz.run.writer import RunWriter

    disk, append = threading.Event(), RunWriter._append
    monkeypatch.setattr(RunWriter, "_append", lambda self, *segment: disk.wait(60) and append(self, *segment))
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    before = get_session().fault_count
    with forgeviz.record(tmp_path / "run", memory=True, segment_seconds=0.0) as session:
        with forgeviz.memory_trace() as trace:
            for step in range(1, 41):
                opt.zero_grad()
                net(torch.randn(32, 64)).square().mean().backward()
                opt.step()
                if step == 30:
                    disk.set()
    assert session.fault_count == before, session.faults[-3:]
    run = forgeviz.open(tmp_path / "run")
    meta = run.meta(0)
    assert meta["dropped_segments"] == 0 and "memory_lost_events" not in meta and meta["writer_thinned"], meta
    timeline = run.memory(0)
    assert (timeline.peak_bytes, timeline.live_bytes) == (trace.peak_bytes, trace.live_bytes)
    recorded, traced = run.recorded_memory(0).columns(), trace.tracker.columns()
    # every event (the two ledgers list what existed before in their own orders: compared as sets of sizes)
    sizes = [np.sort(_arrays(columns)["bytes"]) for columns in (recorded, traced)]
    assert len(sizes[0]) == len(sizes[1]) > 1000 and np.array_equal(*sizes)
    final = _by_category(recorded)
    assert final == {**_by_category(traced), "other": final["other"]}
    assert run.steps == list(range(1, 41))


def test_memory_past_half_the_budget_is_an_outline_with_the_same_peak(tmp_path):
    # a tiny budget: early segments in full, then outlines (stand-ins), said in the metadata
    _, _, trace = _train_recorded(tmp_path / "run", 40, budget_mb=0.02, segment_seconds=0.0)
    run = forgeviz.open(tmp_path / "run")
    meta = run.meta(0)
    assert meta["memory_downsampled"] and meta["memory_downsampled"][0][0] >= 1, meta
    timeline = run.memory(0)
    assert (timeline.peak_bytes, timeline.live_bytes) == (trace.peak_bytes, trace.live_bytes)
    storages = _arrays(run.recorded_memory(0).columns())["storage"]
    assert (storages >= STAND_IN).any() and (storages < STAND_IN).any()
    final = _by_category(run.recorded_memory(0).columns())
    assert final == {**_by_category(trace.tracker.columns()), "other": final["other"]}
    assert "an outline from step" in timeline.message


def test_two_ranks_each_record_their_timeline(tmp_path):
    done = _torchrun(tmp_path, "ddp", "--memory")
    assert done.returncode == 0, done.stderr[-3000:]
    run = forgeviz.open(tmp_path / "run")
    assert run.problems == [] and run.ranks == [0, 1]
    params = (8 * 16 + 16 + 16 * 4 + 4) * 4  # record_ranks.model(), float32
    peaks = run.peaks()
    for rank in run.ranks:
        timeline = run.memory(rank)
        # the script's model is gone when recording ends: its parameters and gradients were there while it ran
        highest = _by_category(run.recorded_memory(rank).columns(), max)
        assert highest["parameter"] == params and highest["gradient"] == params, (rank, highest)
        assert timeline.peak_bytes == peaks[rank] >= params * 2
        table = pa.ipc.open_stream(str(tmp_path / "run" / f"rank{rank}" / "memory.arrows")).read_all()
        assert set(table.column("step").to_pylist()) >= {1, 2, 3, 4}
    # displayed, the run draws rank 0's timeline and says how to draw rank 1's
    assert run.memory_ranks() == [0, 1]
    assert run.memory_note() == "(the memory timeline: rank 0's below; `run.memory_view(1)` draws rank 1's)"
    shown = run.views()
    assert shown[-2] == run.memory_note() and shown[-1].timeline == dataclasses.asdict(run.memory(0))


def test_killed_process_memory_opens_to_its_last_segment(tmp_path):
    run = _open_warned(record_then_kill(tmp_path, "--memory"), "rank0: recording did not finish")
    timeline = run.memory(0)
    final = _by_category(run.recorded_memory(0).columns())
    assert final["parameter"] == (8 * 16 + 16 + 16 * 4 + 4) * 4 and timeline.peak_bytes > 0
    # cut inside the last segment, as a kill mid-write does: the whole segments before it still open
    path = tmp_path / "run" / "rank0" / "memory.arrows"
    whole = timeline.count
    path.write_bytes(path.read_bytes()[:-7])
    cut = _open_warned(tmp_path / "run", "memory.arrows: cut short or corrupted after", "did not finish")
    assert 0 < cut.memory(0).count < whole


def test_memory_off_by_default_and_bad_input(tmp_path):
    net = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with forgeviz.record(tmp_path / "run"):
        net(torch.ones(2, 3)).sum().backward()
        opt.step()
    run = forgeviz.open(tmp_path / "run")
    assert not (tmp_path / "run" / "rank0" / "memory.arrows").exists() and run.meta(0)["memory"] is None
    with pytest.raises(LookupError, match=r"rank 0 recorded no memory timeline .*memory=True"):
        run.memory(0)
    with pytest.raises(TypeError, match=re.escape("forgeviz.record(memory=...) expects True or False, got 'yes'")):
        with forgeviz.record(tmp_path / "other", memory="yes"):
            pass


class SyntheticHistory:
    """Stands in for the recorder's CUDA history (``CudaHistory``'s take/mark_step/stop): hands out
    ``synthetic_snapshot()``'s entries (SYNTHETIC, written to torch's documented schema) in ``cuts`` chunks, one
    per ``take()``, each with the snapshot's segments; records the step stamps it was given."""

    device, max_entries = 0, 10**6

    def __init__(self, cuts: list[int]) -> None:
        self.snapshot = synthetic_snapshot()
        self.cuts, self.taken, self.marks, self.stopped = list(cuts), 0, [], False

    def take(self) -> dict:
        entries = self.snapshot["device_traces"][0]
        end = self.cuts.pop(0) if self.cuts else len(entries)
        chunk, self.taken = entries[self.taken:end], max(end, self.taken)
        return {**self.snapshot, "device_traces": [chunk]}

    def mark_step(self, step: int) -> None:
        self.marks.append(step)

    def stop(self) -> None:
        self.stopped = True


def test_a_cuda_rank_records_the_allocator_history_as_the_notebook_parses_it(tmp_path, monkeypatch):
    history = SyntheticHistory([3, 7])  # entries 0-2 taken at step 1's end, 3-6 at step 2's, the rest at step 3's
    meta = Recorder._meta  # the run's device as a CUDA machine's rank writes it, whatever this machine has
    monkeypatch.setattr(Recorder, "_meta", lambda self, command: {**meta(self, command), "device": "cuda"})
    net = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    before = get_session().fault_count
    events = []  # the history asked for and the backwards run, in order
    with forgeviz.record(tmp_path / "run", memory=True, segment_seconds=0.0,
                         _cuda=lambda: events.append("history") or history) as session:
        for _ in range(3):
            opt.zero_grad()
            out = net(torch.ones(2, 4)).sum()
            out.register_hook(lambda g: events.append("backward"))
            out.backward()
            opt.step()
    assert session.fault_count == before, session.faults[-3:]
    assert history.marks == [1, 2, 3, 4] and history.stopped  # started at the first backward, stamped per step
    assert events == ["history", "backward", "backward", "backward"]  # (before it: its allocations are recorded)
    run = forgeviz.open(tmp_path / "run")
    expected = CudaTimelineSource(parse_snapshot(synthetic_snapshot()))
    timeline = run.memory(0)
    assert timeline.device == "cuda:0" and "CUDA allocator history" in timeline.message
    assert dataclasses.replace(timeline, message=None) == expected.timeline()  # allocated, reserved, OOM, cells
    assert timeline.cuda.ooms[0].requested == 64 * 2**30 and timeline.cuda.peak_reserved == 22 * 2**20
    assert timeline.peak_bytes == expected.trace.peak_allocated == 16 * 2**20  # the parser's own test's figure
    assert run.recorded_memory(0).columns() == expected.columns()  # every event
    assert run.peaks() == {0: 16 * 2**20}
    table = pa.ipc.open_stream(str(tmp_path / "run" / "rank0" / "cuda_memory.arrows")).read_all()
    assert table.column("step").to_pylist() == [1] * 3 + [2] * 4 + [3] * 5
    assert table.column("action").to_pylist() == [e["action"] for e in synthetic_snapshot()["device_traces"][0]]
    assert run.meta(0)["memory"]["cuda_device"] == 0 and run.meta(0)["memory"]["cuda_from_step"] == 1
    # the CPU ledger's events were kept too
    assert run.memory(0, device="cpu").device == "cpu" and run.memory(0, device="cpu").peak_bytes > 0
    # the view draws the CUDA timeline: its trait, and every event it sends
    view = run.memory_view(0)
    assert view.timeline == dataclasses.asdict(timeline) and view.timeline["cuda"]["ooms"]
    (message, buffers), = view._saved(whole=True).messages
    assert message["count"] == expected.count and dict(zip([n for n, _ in m.EVENT_COLUMNS], buffers)) == \
        expected.columns()
    with pytest.raises(ValueError, match=r"device=\.\.\.\): expected None, 'cpu' or 'cuda', got 'gpu'"):
        run.memory(0, device="gpu")


def test_killed_cuda_recording_opens_to_its_last_segment(tmp_path):
    # what a SIGKILL leaves: the segments written before it; the last one's state anchors them
    history = SyntheticHistory([3, 7])
    net = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with forgeviz.record(tmp_path / "run", memory=True, segment_seconds=0.0, _cuda=lambda: history):
        for _ in range(3):
            opt.zero_grad()
            net(torch.ones(2, 4)).sum().backward()
            opt.step()
    path = tmp_path / "run" / "rank0" / "cuda_memory.arrows"
    path.write_bytes(path.read_bytes()[:-8 - 40])  # the end-of-stream mark and the third segment's last 40 bytes
    cut = _open_warned(tmp_path / "run", "cuda_memory.arrows: cut short or corrupted after 2 whole segment(s)")
    snapshot = synthetic_snapshot()
    two = {**snapshot, "device_traces": [snapshot["device_traces"][0][:7]]}  # the two whole segments' entries
    expected = CudaTimelineSource(parse_snapshot(two))
    assert dataclasses.replace(cut.memory(0), message=None) == expected.timeline()
    assert cut.memory(0).count == 4 and not cut.memory(0).cuda.ooms  # 3 allocs, 1 free; the OOM came later


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA-only: no CUDA GPU on this machine")
def test_a_real_cuda_training_step_records_torchs_peak(tmp_path):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x = torch.randn(64, 256, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    with forgeviz.record(tmp_path / "run", memory=True):
        for _ in range(3):
            opt.zero_grad()
            net(x).square().mean().backward()
            opt.step()
    torch.cuda.synchronize()
    run = forgeviz.open(tmp_path / "run")
    timeline = run.memory(0)
    assert timeline.device == f"cuda:{torch.cuda.current_device()}" and timeline.count > 0
    assert timeline.peak_bytes == torch.cuda.max_memory_allocated()
    assert timeline.live_bytes == torch.cuda.memory_allocated()
    table = pa.ipc.open_stream(str(tmp_path / "run" / "rank0" / "cuda_memory.arrows")).read_all()
    assert {1, 2, 3} <= set(table.column("step").to_pylist())
