"""Graphs of real models, the browser's side, in real JupyterLab and Debian's Chromium (headless):

  first view    from the widget's output arriving in the page to the first folded view painted
                (``.fv-root[data-fv-state=ready]``), and the longest main-thread task meanwhile
  expand block  a click on one block's bar of the "Block × 12" stack, to painted
  expand all    the "Expand all" button, to painted (the first big layout of the page, then again)
  pan           frames per second while the fully expanded graph is dragged for two seconds
  zoom          frames per second while the wheel zooms the fully expanded graph in and out
  big views     "Expand all" on the 36-block model and the 10,000-op chain (past 1,200 boxes: laid out
                by layered.ts in a worker and drawn windowed), to painted; pan at the fitted zoom
                (all overview) and after a search zoomed in (groups near the view); the window's move
                once a pan settles (its longest task)

for the GPT-2-small shape (12 blocks, d=768, seq 32), a 36-block model and a 10,000-op chain.
The kernel's side is bench_graph_scale.py. Run: ``.venv/bin/python tests/benchmarks/bench_graph_browser.py``
(after ``pip install .``: Lab serves the installed extension). Not a test: nothing here asserts.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "browser")]

from labdriver import LabNotebook, launch_chromium, running_lab, write_notebook  # noqa: E402
from scenarios import GPT2_SOURCE  # noqa: E402

CELLS = [
    "%load_ext forgeviz\nimport torch, forgeviz",
    GPT2_SOURCE + "\n\ntorch.manual_seed(0)\nidx = torch.randint(0, 1024, (1, 32))\n"
    "model = GPT(vocab=1024, seq=64, d=768, n_layer=12, n_head=12)\n"
    "loss = torch.nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten())\nloss.backward()\n"
    "deep = GPT(vocab=1024, seq=64, d=256, n_layer=36, n_head=8)\ndeep_loss = deep(idx).square().mean()\n"
    "t = torch.ones(3, requires_grad=True)\nh = t\nfor _ in range(10_000):\n    h = h * 1.0001",
    "forgeviz.graph(loss)",  # 2
    "forgeviz.graph(deep_loss)",  # 3
    "forgeviz.graph(h)",  # 4
]

# Installed before a cell runs: when its .fv-root appears, and when it is first painted; long tasks.
WATCH = """(index) => {
  const w = window.jupyterapp.shell.currentWidget;
  const cell = w.content.widgets[index].node;
  const out = {arrived: null, ready: null, longest: 0, tasks: []};
  window.__fvWatch = out;
  new PerformanceObserver(list => {
    for (const e of list.getEntries()) out.tasks.push([e.startTime, e.duration]);
  }).observe({type: 'longtask'});
  const seen = new MutationObserver(() => {
    const root = cell.querySelector('.fv-root');
    if (root && out.arrived === null) out.arrived = performance.now();
    if (root && root.getAttribute('data-fv-state') === 'ready' && out.ready === null) {
      out.ready = performance.now(); seen.disconnect();
    }
  });
  seen.observe(cell, {subtree: true, childList: true, attributes: true, attributeFilter: ['data-fv-state']});
}"""

# A click on ``selector`` inside cell ``index``, timed until its view is painted again.
TIMED_CLICK = """async ([index, selector]) => {
  const cell = window.jupyterapp.shell.currentWidget.content.widgets[index].node;
  const root = cell.querySelector('.fv-root');
  let longest = 0;
  const obs = new PerformanceObserver(list => {
    for (const e of list.getEntries()) longest = Math.max(longest, e.duration);
  });
  obs.observe({type: 'longtask'});
  const start = performance.now();
  cell.querySelector(selector).dispatchEvent(new MouseEvent('click', {bubbles: true}));
  await new Promise(r => requestAnimationFrame(r));
  while (root.getAttribute('data-fv-state') !== 'ready') { await new Promise(r => setTimeout(r, 5)); }
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  obs.disconnect();
  const boxes = cell.querySelectorAll('.fv-graph .fv-node, .fv-graph .fv-box').length;
  const overview = [...cell.querySelectorAll('.fv-overview path')]
    .reduce((n, p) => n + (p.getAttribute('d').match(/z/g) || []).length, 0);
  return {ms: performance.now() - start, longest, boxes: boxes + overview};
}"""

# Long tasks from now until ``stop()``: the window moving after a pan settles.
LONG_TASKS = """() => { const out = {longest: 0}; window.__fvLong = out;
  const obs = new PerformanceObserver(list => {
    for (const e of list.getEntries()) out.longest = Math.max(out.longest, e.duration);
  });
  obs.observe({type: 'longtask'}); out.stop = () => obs.disconnect(); }"""

FRAMES = """() => new Promise(resolve => {
  const times = [];
  const tick = t => { times.push(t); if (t - times[0] < 2000) requestAnimationFrame(tick); else resolve(times); };
  requestAnimationFrame(tick);
})"""


def first_view(page, nb, index: int) -> dict:
    page.evaluate(WATCH, index)
    nb.run_cell(index)
    page.wait_for_function("() => window.__fvWatch.ready !== null", timeout=120_000)
    page.wait_for_timeout(300)
    out = page.evaluate("() => window.__fvWatch")
    # the view's own: long tasks from the widget's arrival on (before it, the kernel ran the cell)
    out["longest"] = max([d for start, d in out["tasks"] if start + d >= out["arrived"]], default=0)
    out["before"] = max([d for start, d in out["tasks"] if start + d < out["arrived"]], default=0)
    boxes = page.evaluate("(i) => window.jupyterapp.shell.currentWidget.content.widgets[i].node"
                          ".querySelectorAll('.fv-graph .fv-node, .fv-graph .fv-box').length", index)
    return {"ms": out["ready"] - out["arrived"], "longest": out["longest"], "before": out["before"], "boxes": boxes}


def search(page, nb, index: int, text: str) -> None:
    box = nb.output(index).locator(".fv-search-box input")
    box.fill(text)
    box.press("Enter")
    nb.output(index).locator(".fv-match").first.wait_for()
    page.wait_for_timeout(300)


def on_screen(nb, index: int) -> dict:
    """The view's canvas, scrolled into the page's view (mouse events off-screen reach nothing)."""
    stage = nb.output(index).locator(".fv-canvas")
    stage.scroll_into_view_if_needed()
    nb.page.wait_for_timeout(200)
    return stage.bounding_box()


def transform_of(page, index: int) -> str:
    return page.evaluate("(i) => window.jupyterapp.shell.currentWidget.content.widgets[i].node"
                         ".querySelector('.fv-viewport').getAttribute('transform')", index)


def pan_fps(page, nb, index: int) -> tuple[float, float]:
    box = on_screen(nb, index)
    before = transform_of(page, index)
    cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    frames = page.evaluate_handle(FRAMES)
    page.mouse.move(cx, cy)
    page.mouse.down()
    for step in range(120):
        page.mouse.move(cx + 150 * ((step % 40) / 40 - 0.5), cy + 80 * ((step % 30) / 30 - 0.5))
        page.wait_for_timeout(16)
    page.mouse.up()
    times = frames.json_value()
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert transform_of(page, index) != before, "the drag did not move the view"
    return (len(times) - 1) / ((times[-1] - times[0]) / 1000), max(gaps)


def zoom_fps(page, nb, index: int) -> tuple[float, float]:
    """Frames per second while the wheel zooms in and out about the view's centre for two seconds."""
    box = on_screen(nb, index)
    before = transform_of(page, index)
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    frames = page.evaluate_handle(FRAMES)
    for step in range(110):  # in, out, ..., and in: it ends zoomed in
        page.mouse.wheel(0, -60 if (step // 20) % 2 == 0 else 60)
        page.wait_for_timeout(16)
    times = frames.json_value()
    gaps = [b - a for a, b in zip(times, times[1:])]
    page.wait_for_timeout(300)  # the zoom settles: the group takes the scale
    assert transform_of(page, index) != before, "the wheel did not zoom the view"
    return (len(times) - 1) / ((times[-1] - times[0]) / 1000), max(gaps)


def main() -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, running_lab(Path(tmp)) as lab, sync_playwright() as p:
        write_notebook(Path(tmp) / "bench.ipynb", CELLS)
        browser = launch_chromium(p)
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        page.set_default_timeout(120_000)
        nb = LabNotebook(page, lab, "bench.ipynb")
        nb.run_cell(0)
        nb.run_cell(1)
        rows = []
        gpt = first_view(page, nb, 2)
        rows.append(("GPT-2-small shape: first folded view", gpt))
        rows.append(("  expand one block (bar of h.4)", page.evaluate(TIMED_CLICK, [2, '.fv-bar[data-instance="4"]'])))
        rows.append(("  collapse all", page.evaluate(TIMED_CLICK, [2, ".fv-collapse-all"])))
        rows.append(("  expand all (first big layout)", page.evaluate(TIMED_CLICK, [2, ".fv-expand-all"])))
        fps, worst = pan_fps(page, nb, 2)
        search(page, nb, 2, "c_attn")  # centred on the match at a readable zoom
        zoom, zoom_worst = zoom_fps(page, nb, 2)
        page.evaluate(TIMED_CLICK, [2, ".fv-collapse-all"])
        rows.append(("  expand all (again)", page.evaluate(TIMED_CLICK, [2, ".fv-expand-all"])))
        deep = first_view(page, nb, 3)
        rows.append(("36 blocks (d=256): first folded view", deep))
        rows.append(("  expand all (windowed)", page.evaluate(TIMED_CLICK, [3, ".fv-expand-all"])))
        pans = [("36 blocks expanded, fitted", *pan_fps(page, nb, 3))]
        chain = first_view(page, nb, 4)
        rows.append(("10,000-op chain: first view", chain))
        rows.append(("  expand all (windowed)", page.evaluate(TIMED_CLICK, [4, ".fv-expand-all"])))
        pans.append(("10,000-op chain expanded, fitted", *pan_fps(page, nb, 4)))
        search(page, nb, 4, "MulBackward0")
        page.evaluate(LONG_TASKS)
        pans.append(("10,000-op chain, zoomed in to read", *pan_fps(page, nb, 4)))
        page.wait_for_timeout(600)  # the pan settles and the window moves
        settle = page.evaluate("() => window.__fvLong.longest")
        drawn = page.evaluate("(i) => window.jupyterapp.shell.currentWidget.content.widgets[i].node"
                              ".querySelectorAll('.fv-graph .fv-node').length", 4)
        browser.close()
    print("headless Chromium, real JupyterLab, layout in a Web Worker")
    print(f"  {'measure':<40}{'ms':>9}{'longest task ms':>17}{'boxes':>7}")
    for name, r in rows:
        print(f"  {name:<40}{r['ms']:>9.0f}{r['longest']:>17.0f}{r['boxes']:>7}")
    print(f"  pan, fully expanded GPT-2: {fps:.0f} frames/s, longest frame {worst:.0f} ms")
    print(f"  wheel zoom, fully expanded GPT-2 at a readable scale: {zoom:.0f} frames/s, "
          f"longest frame {zoom_worst:.0f} ms")
    print(f"  (before each first view arrived, while its cell ran: longest tasks {gpt['before']:.0f}, "
          f"{deep['before']:.0f}, {chain['before']:.0f} ms)")
    for name, f, w in pans:
        print(f"  pan, {name}: {f:.0f} frames/s, longest frame {w:.0f} ms")
    print(f"  the window moving after that pan settles: longest task {settle:.0f} ms, {drawn} Nodes drawn as groups")


if __name__ == "__main__":
    main()
