"""On a GPU: the CUDA history path's overhead on a real training step, and real snapshot fixtures.

Run on a machine with CUDA: ``python tests/benchmarks/bench_cuda_memory.py [--record]``.

- Prints the step time with history recording off / ``forgeviz.memory_trace(device="cuda")`` /
  ``torch.profiler(profile_memory=True)``, interleaved rounds, medians as ratios to "off".
- ``--record [DIR]`` records one allocator history per scenario (``SCENARIOS``), each in a fresh process,
  with forgeviz's own recording settings (``CudaHistory``) and the cell stamped through
  ``_set_memory_metadata``. Each is written to ``DIR/<scenario>.json`` (default ``tests/fixtures/cuda``)
  beside what torch itself reported at that moment (``memory_allocated``, ``memory_reserved``,
  ``memory_stats``): ``tests/test_memory_cuda.py`` checks the parser's figures against those on any machine.
  Stacks are cut to ``FRAMES`` frames, so a fixture stays a few hundred KB at most.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from _bench import interleaved, memory_arms, mlp, train  # first: it puts this checkout on sys.path

import forgeviz
from forgeviz._capture.cuda_memory import CudaHistory

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cuda"
FRAMES = 3
MiB = 2**20
ROUNDS, STEPS = 9, 20


def setup(width: int, batch: int):
    model, opt, x, y = mlp(width, batch, device="cuda")

    def loop():
        train(model, opt, x, y, STEPS)
        torch.cuda.synchronize()

    return model, opt, loop


def overhead(width: int, batch: int) -> dict[str, float]:
    _, _, loop = setup(width, batch)
    loop()

    def history_only(**settings):  # the allocator's own history, without forgeviz's CPU tracker
        def run():
            torch.cuda.memory._record_memory_history(enabled="all", max_entries=1_000_000, **settings)
            loop()
            torch.cuda.memory._record_memory_history(enabled=None)
        return run

    def cpu_tracker():
        with forgeviz.memory_trace():
            loop()

    starts: dict[str, list[float]] = {}
    timeline, profiled = memory_arms(loop, "cuda", starts).values()  # steady state: the steps alone
    variants = {"off": loop, "forgeviz memory_trace(device='cuda')": timeline,
                "its allocator history alone (python stacks)": history_only(context="alloc", stacks="python"),
                "allocator history, no stacks": history_only(context=None),
                "its CPU tracker alone": cpu_tracker, "torch.profiler(profile_memory)": profiled}
    medians = interleaved(variants, ROUNDS)
    for name, seconds in starts.items():
        print(f"  {name}: start and finish {statistics.median(seconds) * 1e3:.1f} ms, once per recording")
    base = medians["off"]
    return {name: t / base for name, t in medians.items()} | {"off_ms_per_step": base / STEPS * 1e3}


def _train_step(history: CudaHistory, begin) -> tuple[dict, list]:
    """A few Adam steps of the benchmark MLP; the model and batch existed before the history began (as
    in a notebook, where the history starts mid-way and is anchored at its end)."""
    model, opt, x, y = mlp(256, 32, device="cuda")
    begin()
    history.mark_cell(2)
    train(model, opt, x, y, 3)
    return {}, [model, opt, x, y]


def _empty_cache(history: CudaHistory, begin) -> tuple[dict, list]:
    """A 64 MiB scratch tensor freed, then ``empty_cache()`` returns its segment to CUDA."""
    keep = torch.ones(2**20, device="cuda")
    begin()
    scratch = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
    history.mark_cell(2)
    del scratch
    before = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    return {"released_by_empty_cache": before - torch.cuda.memory_reserved()}, [keep]


def _oom(history: CudaHistory, begin) -> tuple[dict, list]:
    """A caught OOM: twice what the GPU has, asked for while 1 GiB is held."""
    begin()
    held = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    history.mark_cell(2)
    asked = 2 * torch.cuda.get_device_properties(0).total_memory
    try:
        torch.empty(asked, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError:
        pass
    return {"oom_requested": asked}, [held]


def _fragmented(history: CudaHistory, begin) -> tuple[dict, list]:
    """3 MiB blocks (six to a 20 MiB segment), every other one freed, then 7 MiB blocks that fit none
    of the holes: many segments, each with its free bytes split."""
    begin()
    small = [torch.empty(3 * MiB, dtype=torch.uint8, device="cuda") for _ in range(60)]
    history.mark_cell(2)
    del small[::2]
    history.mark_cell(3)
    large = [torch.empty(7 * MiB, dtype=torch.uint8, device="cuda") for _ in range(12)]
    return {}, [small, large]


SCENARIOS = {"train_step": _train_step, "empty_cache": _empty_cache, "oom": _oom, "fragmented": _fragmented}
STATS = ["segment.all.current", "allocation.all.current", "allocation.all.allocated", "allocation.all.freed",
         "segment.all.allocated", "segment.all.freed", "num_ooms", "num_alloc_retries",
         "inactive_split.all.current", "inactive_split_bytes.all.current", "reserved_bytes.all.peak"]


def _trim(frames: list) -> list:
    return [{k: f[k] for k in ("filename", "line", "name") if k in f} for f in frames[:FRAMES]]


def record_one(name: str, directory: Path) -> None:
    """Record scenario ``name`` in this process (a fresh one: the allocator's counters start at 0)."""
    torch.cuda.init()
    history = CudaHistory()

    def begin() -> None:  # the history and torch's counters start together, in cell 1
        history.start()
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.reset_accumulated_memory_stats()
        history.mark_cell(1)

    try:
        extra, alive = SCENARIOS[name](history, begin)  # alive until the snapshot is taken
        torch.cuda.synchronize()
        snapshot = torch.cuda.memory._snapshot()
        stats = torch.cuda.memory_stats()
        recorded = {"scenario": name, "torch": torch.__version__, "cuda": torch.version.cuda,
                    "device": torch.cuda.get_device_name(), "memory_allocated": torch.cuda.memory_allocated(),
                    "memory_reserved": torch.cuda.memory_reserved(),
                    "max_memory_allocated": torch.cuda.max_memory_allocated(),
                    "memory_stats": {k: stats.get(k, 0) for k in STATS}, **extra}
    finally:
        history.stop()
    del alive
    for trace in snapshot["device_traces"]:
        for entry in trace:
            entry["frames"] = _trim(entry.get("frames") or [])
    for segment in snapshot["segments"]:
        for block in segment.get("blocks", []):
            block["frames"] = _trim(block.get("frames") or [])
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps({"recorded": recorded, "snapshot": snapshot}, default=list, indent=None))
    print(f"wrote {path} ({path.stat().st_size} bytes, {len(snapshot['device_traces'][0])} entries): "
          f"allocated {recorded['memory_allocated']}, reserved {recorded['memory_reserved']}")


def record(directory: Path) -> None:
    """Each scenario in its own process, so that each history and set of counters starts empty."""
    for name in SCENARIOS:
        subprocess.run([sys.executable, __file__, "--scenario", name, str(directory)], check=True)


if __name__ == "__main__":
    if not torch.cuda.is_available():
        sys.exit("bench_cuda_memory.py needs a CUDA device")
    if sys.argv[1:2] == ["--scenario"]:
        record_one(sys.argv[2], Path(sys.argv[3]))
        sys.exit()
    if "--record" in sys.argv:
        rest = sys.argv[sys.argv.index("--record") + 1:]
        record(Path(rest[0]) if rest and not rest[0].startswith("-") else FIXTURES)
    print(torch.cuda.get_device_name())
    for width, batch in [(1024, 256), (256, 32)]:
        result = overhead(width, batch)
        print(f"MLP {width} wide, batch {batch}: off {result.pop('off_ms_per_step'):.2f} ms/step; "
              + ", ".join(f"{k} {v:.3f}x" for k, v in result.items()))
