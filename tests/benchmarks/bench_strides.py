"""Stride view: bytes sent to the browser and time to first paint, in real JupyterLab + Chromium.

Run after installing (``./dev.sh test`` does): ``.venv/bin/python tests/benchmarks/bench_strides.py``.

Each case runs in a notebook cell; we count websocket bytes the page receives from the cell's
start until the diagram reports ``data-fv-state=ready``, and the wall time between the two.
The reference row is the same tensor shown by torch's own ``repr`` in the same run, so the
figures can be read as ratios on one machine.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "browser"))

from labdriver import ARTIFACTS, LabNotebook, launch_chromium, running_lab, websocket_bytes, write_notebook  # noqa: E402 - tests/browser on sys.path first

ROUNDS = 5
SETUP = [
    "%load_ext forgeviz\nimport torch, forgeviz",
    "big = torch.randn(10_000, 1_000)  # 1e7 float32 elements, 40 MB\n"
    "t = torch.arange(12).reshape(3, 4)",
]
CASES = {
    "repr of 1e7 tensor (reference)": ("big", ".jp-OutputArea-output pre"),
    "1e7-element tensor": ("%fv strides big", ".fv-strides[data-fv-state=ready]"),
    "6-view group of a 1e7 tensor": ("%fv strides big big.T big[:, 1:3] big[::2] "
                                     "big.unsqueeze(0).expand(2, 10_000, 1_000) big.view(1_000, 10_000)",
                                     ".fv-strides[data-fv-state=ready]"),
    "6-view group of t (3x4)": ("%fv strides t t.T t[:, 1:3] t[::2] t.unsqueeze(0).expand(2, 3, 4) t.view(4, 3)",
                                ".fv-strides[data-fv-state=ready]"),
}


def main() -> None:
    from playwright.sync_api import sync_playwright

    order = list(CASES)
    cells = SETUP + [CASES[name][0] for name in order for _ in range(ROUNDS)]
    results: dict[str, list[tuple[float, int]]] = {name: [] for name in order}
    with tempfile.TemporaryDirectory() as tmp, running_lab(Path(tmp)) as lab, sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(120_000)
        received = websocket_bytes(page)
        write_notebook(Path(tmp) / "bench.ipynb", cells)
        nb = LabNotebook(page, lab, "bench.ipynb")
        for i in range(len(SETUP)):
            nb.run_cell(i)
        page.wait_for_timeout(1000)
        index = len(SETUP)
        # Interleave the cases round by round so drift hits them all alike.
        for r in range(ROUNDS):
            for k, name in enumerate(order):
                cell = len(SETUP) + k * ROUNDS + r
                selector = CASES[name][1]
                mark = len(received)
                start = time.perf_counter()
                nb.run_cell(cell)
                nb.output(cell).locator(selector).first.wait_for()
                elapsed = time.perf_counter() - start
                page.wait_for_timeout(300)  # late frames (trait echoes) still count as this display's bytes
                results[name].append((elapsed, sum(received[mark:])))
                index += 1
        browser.close()
    rows = []
    ref = statistics.median(t for t, _ in results[order[0]])
    print(f"{'case':34s} {'first paint ms':>15s} {'vs repr':>8s} {'bytes sent':>11s}")
    for name in order:
        paint = statistics.median(t for t, _ in results[name])
        sent = statistics.median(b for _, b in results[name])
        rows.append({"case": name, "first_paint_ms": round(paint * 1000), "ratio_vs_repr": round(paint / ref, 2),
                     "bytes": int(sent)})
        print(f"{name:34s} {paint * 1000:15.0f} {paint / ref:8.2f} {int(sent):11d}")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "bench-strides.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
