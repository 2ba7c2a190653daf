"""CUDA memory: the caching allocator's history read into allocated vs reserved, segments, OOMs.

The parser is checked on every machine against histories recorded on a real GPU (``tests/fixtures/cuda``:
an NVIDIA H200, torch 2.11, by ``tests/benchmarks/bench_cuda_memory.py --record``), each beside what torch
itself reported when it was recorded (``memory_allocated``, ``memory_reserved``, ``memory_stats``), and
against a snapshot written by hand for the cases a recording cannot force (a block older than the history
whose free is logged without its request). The tests marked ``cuda`` record live histories on a GPU and
are skipped, saying so, without one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import forgeviz
from forgeviz._capture.cuda_memory import allocated_and_peak, parse_snapshot
from forgeviz.model.memory import ALLOC, FREE, GRADIENT, PARAMETER, TEMPORARY

from cuda_fixtures import A, MiB, synthetic_snapshot


def test_a_history_reads_as_allocated_and_reserved_anchored_at_the_snapshot():
    trace = parse_snapshot(synthetic_snapshot(), 0, {A: PARAMETER, A + 12 * MiB: GRADIENT})
    # the end equals the segments; the start is walked back from it: only the old 1 MiB block, which stops
    # counting at its free_requested (entry 0), as torch.cuda.memory_allocated() does
    assert trace.allocated[-1] == 12 * MiB and trace.reserved[-1] == 20 * MiB
    assert trace.allocated[:2] == [0, 0] and trace.peak_allocated == 16 * MiB
    assert trace.peak_reserved == 22 * MiB and trace.released == [(0.007, 2 * MiB)]
    assert trace.reserved_unused == 8 * MiB  # what empty_cache() could still give back
    (segment,) = trace.segments
    assert (segment.free_blocks, segment.largest_free, segment.fragmentation) == (2, 4 * MiB, 0.5)
    (oom,) = trace.ooms
    assert (oom.requested, oom.device_free, oom.allocated, oom.reserved, oom.cell) == (
        64 * 2**30, 2**30, 12 * MiB, 20 * MiB, 6)


def test_history_allocations_become_forgeviz_events_with_category_and_cell():
    cols = parse_snapshot(synthetic_snapshot(), 0, {A: PARAMETER, A + 12 * MiB: GRADIENT}).columns
    allocs = [(cols["bytes"][i], cols["category"][i], cols["cell"][i]) for i in range(len(cols["time"]))
              if cols["action"][i] == ALLOC]
    assert allocs == [(8 * MiB, PARAMETER, 3), (4 * MiB, TEMPORARY, 3), (4 * MiB, GRADIENT, 4), (512, TEMPORARY, 5)]
    frees = [cols["bytes"][i] for i in range(len(cols["time"])) if cols["action"][i] == FREE]
    assert frees == [4 * MiB, 512]  # the pre-history block's free has no alloc to pair with


def test_the_plotly_figure_shows_reserved_releases_and_the_oom():
    fig = forgeviz.api.MemoryTrace(None)
    fig.cuda = parse_snapshot(synthetic_snapshot())
    names = [t.name for t in fig.to_plotly().data]
    assert names[-3:] == ["reserved (cached by the allocator)", "segment freed", "OOM"]


def test_bad_snapshots_and_devices_say_what_was_expected():
    with pytest.raises(ValueError, match="expected a torch.cuda.memory._snapshot\\(\\) dict .* got \\['segments'\\]"):
        parse_snapshot({"segments": []})
    with pytest.raises(ValueError, match="device 2: the snapshot has traces for devices 0..0"):
        parse_snapshot(synthetic_snapshot(), device=2)
    with pytest.raises(ValueError, match="expected 'cpu', 'cuda' or 'cuda:N', got 'tpu'"):
        with forgeviz.memory_trace(device="tpu"):
            pass


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given on a machine without CUDA")
def test_cuda_trace_without_a_gpu_says_so():
    with pytest.raises(RuntimeError, match="needs a CUDA device, and torch.cuda.is_available\\(\\) is False"):
        with forgeviz.memory_trace(device="cuda"):
            pass


needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA-only: no CUDA GPU on this machine")


def test_allocated_and_peak_are_torchs_counters():
    """What a recording's step rows keep (live and peak bytes): torch.cuda's two counters, read once. Without a GPU
    (or before CUDA is in use) both are 0, as torch's."""
    kept = []
    if torch.cuda.is_available():
        kept.append(torch.empty(3 * MiB, dtype=torch.uint8, device="cuda"))
        torch.empty(7 * MiB, dtype=torch.uint8, device="cuda")  # freed at once: the peak stays above
    assert allocated_and_peak() == (torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated())
    if kept:
        live, peak = allocated_and_peak()
        assert live >= 3 * MiB and peak >= live + 7 * MiB


@pytest.mark.cuda
@needs_gpu
def test_real_history_matches_torchs_counters():
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.Adam(model.parameters())
    with forgeviz.memory_trace(device="cuda") as trace:
        for _ in range(3):
            loss = model(torch.randn(256, 1024, device="cuda")).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        scratch = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
        del scratch
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
    cuda = trace.cuda
    assert cuda.allocated[-1] == torch.cuda.memory_allocated() and cuda.reserved[-1] == torch.cuda.memory_reserved()
    assert cuda.peak_allocated <= torch.cuda.max_memory_allocated() and cuda.released
    # the last step's gradients were allocated inside the history and are alive: named by the hooks, each
    # counted as the block torch serves it from (as memory_allocated() counts it), not its requested bytes
    blocks = {b["address"]: b["size"] for s in torch.cuda.memory._snapshot()["segments"] for b in s["blocks"]}
    grads = sum(blocks[p.grad.untyped_storage().data_ptr()] for p in model.parameters())
    cols = cuda.columns
    assert grads == sum(cols["bytes"][i] for i in range(len(cols["time"]))
                        if cols["action"][i] == ALLOC and cols["category"][i] == GRADIENT)


@pytest.mark.cuda
@needs_gpu
def test_an_oom_is_the_users_error_and_its_state_is_kept():
    from forgeviz._capture.cuda_memory import CudaHistory

    history = CudaHistory()
    history.start()
    try:
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
    finally:
        history.stop()
    assert history.oom_snapshots and parse_snapshot(history.oom_snapshots[-1], history.device).ooms


def test_a_cuda_trace_is_served_to_the_timeline_view_with_reserved_segments_and_ooms():
    from forgeviz._capture.cuda_memory import CudaTimelineSource
    from forgeviz._capture.session import get_session
    from forgeviz.model.memory import EVENT_COLUMNS
    from forgeviz.widgets.memory import MemoryWidget

    source = CudaTimelineSource(parse_snapshot(synthetic_snapshot(), 0, {A: PARAMETER, A + 12 * MiB: GRADIENT}))
    view = MemoryWidget(source, get_session(), live=False)
    cuda = view.timeline["cuda"]
    # reserved as a step series at its changes: 20 MiB, 22 MiB (segment B), 20 MiB (empty_cache)
    assert cuda["reserved_bytes"] == [20 * MiB, 22 * MiB, 20 * MiB] and cuda["peak_reserved"] == 22 * MiB
    assert cuda["reserved_unused"] == 8 * MiB and cuda["released"] == [[0.007, 2 * MiB]]
    assert cuda["segments"] == [{"address": hex(A), "total": 20 * MiB, "allocated": 12 * MiB, "largest_free": 4 * MiB,
                                 "fragmentation": 0.5, "segment_type": "large"}]
    assert cuda["ooms"][0]["requested"] == 64 * 2**30 and cuda["ooms"][0]["cell"] == 6
    assert view.timeline["device"] == "cuda:0" and view.timeline["peak_bytes"] == 16 * MiB
    assert [c["cell"] for c in view.timeline["cells"]] == [3, 4, 5, 6]  # cell 6 only hit the OOM
    sent = []
    view.send = lambda content, buffers=None: sent.append((content, buffers))
    view.refresh()
    content, buffers = sent[-1]
    assert content["count"] == 6 and len(buffers) == len(EVENT_COLUMNS)
    detail = source.detail(1)  # the temporary at A + 8 MiB, freed in cell 4
    assert (detail.bytes, detail.category, detail.alive, detail.cell) == (4 * MiB, "temporary", False, 3)


RECORDED = Path(__file__).parent / "fixtures" / "cuda"
SCENARIOS = ["train_step", "empty_cache", "oom", "fragmented"]


def recorded(name: str) -> tuple[dict, dict]:
    """(what torch reported at the snapshot, the snapshot) of a history recorded on a GPU."""
    data = json.loads((RECORDED / f"{name}.json").read_text())
    return data["recorded"], data["snapshot"]


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_recorded_history_reads_as_torch_counted_it(name):
    torch_said, snapshot = recorded(name)
    stats = torch_said["memory_stats"]
    trace = parse_snapshot(snapshot)
    cols = trace.columns
    actions = [cols["action"][i] for i in range(len(cols["time"]))]
    # torch's counters started with the history: every figure is torch's own, to the byte
    assert trace.allocated[-1] == torch_said["memory_allocated"]
    assert trace.reserved[-1] == torch_said["memory_reserved"]
    assert trace.peak_allocated == torch_said["max_memory_allocated"]
    assert trace.peak_reserved == stats["reserved_bytes.all.peak"]
    assert (actions.count(ALLOC), actions.count(FREE)) == (stats["allocation.all.allocated"],
                                                          stats["allocation.all.freed"])
    assert len(trace.segments) == stats["segment.all.current"] and len(trace.ooms) == stats["num_ooms"]
    assert trace.reserved_unused == torch_said["memory_reserved"] - torch_said["memory_allocated"]
    # free bytes inside segments that also hold tensors: what torch calls inactive split blocks
    assert sum(s.total_size - s.allocated_size for s in trace.segments if s.blocks > 1) == \
        stats["inactive_split_bytes.all.current"]
    assert min(trace.allocated) >= 0 and all(a <= r for a, r in zip(trace.allocated, trace.reserved))


def test_a_recorded_empty_cache_and_oom_say_what_torch_did():
    torch_said, snapshot = recorded("empty_cache")
    trace = parse_snapshot(snapshot)
    assert sum(size for _, size in trace.released) == torch_said["released_by_empty_cache"] == 64 * MiB
    assert [cell for cell, _, _ in trace.cells] == [1, 2]  # the scratch tensor in cell 1, freed in cell 2
    torch_said, snapshot = recorded("oom")
    (oom,) = parse_snapshot(snapshot).ooms
    assert oom.requested == torch_said["oom_requested"] and oom.device_free < oom.requested
    assert (oom.allocated, oom.cell) == (2**30, 2)  # the 1 GiB held in cell 1; asked for in cell 2


def test_a_recorded_fragmented_history_needed_new_segments_for_blocks_no_hole_could_hold():
    torch_said, snapshot = recorded("fragmented")
    trace = parse_snapshot(snapshot)
    # cell 3 asked for 7 MiB blocks after cell 2 freed every other 3 MiB one: torch made new segments
    made = [e for e in snapshot["device_traces"][0] if e["action"] == "segment_alloc"]
    assert len(made) == torch_said["memory_stats"]["segment.all.allocated"] == len(trace.segments)
    assert any(e.get("user_metadata") == "forgeviz cell 3" for e in made)
    split = [s for s in trace.segments if s.free_blocks and s.allocated_size]
    assert split and all(s.largest_free < 7 * MiB for s in split) and all(s.fragmentation > 0 for s in split
                                                                          if s.free_blocks > 1)
    sizes = {cols_bytes for cols_bytes, action in zip(trace.columns["bytes"], trace.columns["action"])
             if action == ALLOC}
    assert sizes == {3 * MiB, 7 * MiB}


def test_the_kernels_cuda_timeline_needs_a_gpu_and_says_so(nb):
    with pytest.raises(ValueError, match="expected 'cpu', 'cuda' or 'cuda:N', got 'gpu'"):
        nb.shell.user_ns["forgeviz"].memory(device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="needs a CUDA device"):
            nb.shell.user_ns["forgeviz"].memory(device="cuda")


@pytest.mark.cuda
@needs_gpu
def test_the_kernels_cuda_timeline_follows_cells(nb):
    view = nb.ok("forgeviz.memory(device='cuda')")
    view.send = lambda content, buffers=None: None
    view._handle_msg({"content": {"data": {"method": "custom", "content": {"type": "replay", "request_id": 1,
                                                                            "view": 1}}}, "buffers": []})
    nb.ok("big = torch.empty(256 * 2**20, dtype=torch.uint8, device='cuda')")  # a view draws it: refreshed after
    cell = nb.shell.execution_count - 1
    timeline, reserved = view.timeline, torch.cuda.memory_reserved()
    cuda = timeline["cuda"]
    assert timeline["device"] == "cuda:0" and timeline["live_bytes"] == torch.cuda.memory_allocated()
    assert cuda["reserved_bytes"][-1] == reserved and cuda["peak_reserved"] >= reserved, (
        cuda["reserved_bytes"], cuda["segments"])
    assert cell in [c["cell"] for c in timeline["cells"]]
