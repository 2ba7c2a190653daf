"""What a long training loop costs in memory under ``%load_ext forgeviz`` (a benchmark, not a test).

Runs the small MLP loop (256 wide, batch 32, Adam, ``losses.append(loss.item())``) for 2,000 steps in
cells of 100, in a real IPython shell, once with forgeviz loaded (a graph view and a memory timeline
shown) and once without, each in a fresh process. Prints the kernel's RSS growth after a 500-step
warm-up, and forgeviz's own bytes as its memory view reports them.

    .venv/bin/python tests/benchmarks/bench_bookkeeping.py
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import _bench  # noqa: F401 - imports this checkout's forgeviz first

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the scenarios the tests share
from scenarios import TRAIN_100_STEPS, TRAIN_SETUP  # noqa: E402 - after the path it needs


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run(with_forgeviz: bool, cells: int) -> dict:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()

    def cell(code: str):
        result = shell.run_cell(code, store_history=True)
        if result.error_before_exec or result.error_in_exec:
            raise SystemExit(repr(result.error_before_exec or result.error_in_exec))
        return result.result

    if with_forgeviz:
        cell("%load_ext forgeviz")
    cell("import torch, forgeviz")
    cell(TRAIN_SETUP)
    tracker = None
    if with_forgeviz:
        cell("graph_view = forgeviz.graph(loss)")
        tracker = cell("forgeviz.memory()")._tracker
    rows = []
    for k in range(cells):
        cell(TRAIN_100_STEPS)
        gc.collect()
        rows.append({"steps": 100 * (k + 1), "rss": rss(),
                     "own": tracker.own_bytes() if tracker is not None else 0})
    return {"rows": rows}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("on", "off"):
        print(json.dumps(run(sys.argv[1] == "on", int(sys.argv[2]))))
        return
    cells = 20
    results = {}
    for arm in ("off", "on"):
        out = subprocess.run([sys.executable, __file__, arm, str(cells)], capture_output=True, text=True, check=True)
        results[arm] = json.loads(out.stdout.strip().splitlines()[-1])["rows"]
    mib = 2**20
    print(f"{'steps':>6} {'RSS off':>10} {'RSS on':>10} {'forgeviz own':>13}")
    for off, on in zip(results["off"], results["on"]):
        print(f"{off['steps']:>6} {off['rss'] / mib:>9.1f}M {on['rss'] / mib:>9.1f}M {on['own'] / mib:>12.2f}M")
    for arm in ("off", "on"):
        rows = results[arm]
        warm = next(r for r in rows if r["steps"] == 500)
        print(f"forgeviz {arm}: RSS {warm['rss'] / mib:.1f} MiB at step 500, {rows[-1]['rss'] / mib:.1f} MiB at step "
              f"{rows[-1]['steps']}: {(rows[-1]['rss'] - warm['rss']) / mib:+.2f} MiB after warm-up")


if __name__ == "__main__":
    main()
