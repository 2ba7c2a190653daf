"""Run browser tests again and again on a busy machine: CPU hogs, and a second JupyterLab with its own
Chromium running cells beside them. Not a test (pytest does not collect it): a check the flaky ones need.

    .venv/bin/python tests/browser/under_load.py --runs 10 --hogs 2 browser/test_memory_in_lab.py

Prints one line per run and a closing ``N passed, M failed`` line; exits 1 if any run failed. Every load
it starts is bounded (the hogs and the second Lab stop with it, or after ``--max-minutes``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from labdriver import LabNotebook, launch_chromium, running_lab, write_notebook

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent

# The second Lab's notebook: real work in its kernel and in its page (a graph, strides, a memory view).
BUSY_CELLS = [
    "%load_ext forgeviz\nimport torch, forgeviz",
    "model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Tanh(), torch.nn.Linear(256, 10))\n"
    "loss = model(torch.randn(64, 256)).logsumexp(1).mean()\nforgeviz.graph(loss)",
    "loss.backward()\nt = torch.arange(12).reshape(3, 4)\nforgeviz.strides(t, t.T)",
    "forgeviz.memory()",
]


def _hog(deadline: float) -> None:
    x = 0
    while time.time() < deadline:
        x = (x * 1103515245 + 12345) % 2**31


def _second_lab(stop: threading.Event, deadline: float, runs: list[int]) -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, running_lab(Path(tmp)) as lab, sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
        page.set_default_timeout(120_000)
        write_notebook(Path(tmp) / "busy.ipynb", BUSY_CELLS)
        nb = LabNotebook(page, lab, "busy.ipynb")
        while not stop.is_set() and time.time() < deadline:
            for i in range(len(BUSY_CELLS)):
                if stop.is_set():
                    break
                nb.run_cell(i)
            runs[0] += 1
        browser.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tests", nargs="+", help="pytest paths, relative to tests/")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--hogs", type=int, default=2, help="busy-loop processes beside the tests")
    ap.add_argument("--no-second-lab", action="store_true")
    ap.add_argument("--max-minutes", type=float, default=60)
    args = ap.parse_args()
    deadline = time.time() + 60 * args.max_minutes
    hogs = [multiprocessing.Process(target=_hog, args=(deadline,), daemon=True) for _ in range(args.hogs)]
    for h in hogs:
        h.start()
    stop, lab_runs = threading.Event(), [0]
    lab = None
    if not args.no_second_lab:
        lab = threading.Thread(target=_second_lab, args=(stop, deadline, lab_runs), daemon=True)
        lab.start()
    passed = failed = 0
    try:
        for run in range(1, args.runs + 1):
            if time.time() > deadline:
                break
            start = time.time()
            done = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir",
                                   str(ROOT), "-q", "-p", "no:cacheprovider", *args.tests],
                                  cwd=TESTS, capture_output=True, text=True)
            ok = done.returncode == 0
            passed, failed = passed + ok, failed + (not ok)
            last = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
            print(f"run {run}: {'ok' if ok else 'FAILED'} in {time.time() - start:.0f} s: {last}", flush=True)
            if not ok:
                print(done.stdout[-4000:], flush=True)
    finally:
        stop.set()
        for h in hogs:
            h.terminate()
        if lab is not None:
            lab.join(180)
    print(f"beside {args.hogs} CPU hogs and {'no second Lab' if lab is None else f'a second Lab ({lab_runs[0]} rounds of its cells)'}:")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
