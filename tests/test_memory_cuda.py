"""CUDA memory: the caching allocator's history read into allocated vs reserved, segments, OOMs.

No GPU has been lent to this project yet, so the parser is checked against a snapshot written by hand
to torch's documented schema (``torch.cuda.memory._snapshot`` docstring: segments, blocks and
device_traces entries). It is labelled synthetic: it is not a recording. The tests marked ``cuda``
record real histories on a GPU and are skipped, saying so, without one.
"""

from __future__ import annotations

import pytest
import torch

import forgeviz
from forgeviz._capture.cuda_memory import parse_snapshot
from forgeviz.model.memory import ALLOC, FREE, GRADIENT, PARAMETER, TEMPORARY

from cuda_fixtures import A, MiB, synthetic_snapshot


def test_a_history_reads_as_allocated_and_reserved_anchored_at_the_snapshot():
    trace = parse_snapshot(synthetic_snapshot(), 0, {A: PARAMETER, A + 12 * MiB: GRADIENT})
    # the end equals the segments; the start is walked back from it: only the old 1 MiB block
    assert trace.allocated[-1] == 12 * MiB and trace.reserved[-1] == 20 * MiB
    assert trace.allocated[:2] == [1 * MiB, 0] and trace.peak_allocated == 16 * MiB
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
    # the last step's gradients were allocated inside the history and are alive: named by the hooks
    grads = sum(p.grad.untyped_storage().nbytes() for p in model.parameters())
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


REAL = __import__("pathlib").Path(__file__).parent / "fixtures" / "cuda_snapshot.pickle"


@pytest.mark.skipif(not REAL.exists(), reason="no real CUDA snapshot recorded yet: on a GPU, run "
                    "tests/benchmarks/bench_cuda_memory.py --record")
def test_a_real_recorded_snapshot_parses_consistently():
    import pickle

    snapshot = pickle.loads(REAL.read_bytes())
    trace = parse_snapshot(snapshot)
    segments = [s for s in snapshot["segments"] if s.get("device", 0) == 0]
    assert trace.allocated[-1] == sum(s["allocated_size"] for s in segments)
    assert trace.reserved[-1] == sum(s["total_size"] for s in segments)
    assert min(trace.allocated) >= 0 and min(trace.reserved) >= 0  # the walk back from the end never goes negative
    assert all(a <= r for a, r in zip(trace.allocated, trace.reserved))  # tensors live inside reserved segments
    assert trace.released and trace.ooms  # the recording freed a segment (empty_cache) and caught an OOM
    assert {cell for cell, _, _ in trace.cells} >= {2, 3, 4}


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
    nb.ok("big = torch.empty(256 * 2**20, dtype=torch.uint8, device='cuda')")
    cell = nb.shell.execution_count - 1
    timeline = view.timeline
    assert timeline["device"].startswith("cuda") and timeline["cuda"]["peak_reserved"] >= 256 * MiB
    assert cell in [c["cell"] for c in timeline["cells"]]
