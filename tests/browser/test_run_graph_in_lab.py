"""A recorded two-rank DDP run (torchrun, gloo on loopback, ``--memory``) opened in real JupyterLab with
``forgeviz.open``: the run's header, the ranks heatmap, then the graph view with its step slider and rank selector.
Move the slider, click a parameter's Node, and the applied gradient's norm shown equals torch's on that rank at that
step (at the page's digits); the rank selector shows the other rank's. Below it rank 0's memory timeline, whose
peak and parameters' bytes, read from the page, equal ``run.memory(0)``'s and torch's. And the side panel's
"Open run…" command opens the same run beside the notebook."""

from __future__ import annotations

import re

import pytest
from record_ranks import model
from test_record import _torch_norms, _torchrun

import forgeviz

from labdriver import ARTIFACTS, LabNotebook

pytestmark = pytest.mark.browser

GRAPH = ".fv-root:has(.fv-step)"


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """A run recorded by ``torchrun --nproc-per-node 2 -m forgeviz record --memory`` of tests/record_ranks.py (DDP):
    one run for every test here."""
    tmp = tmp_path_factory.mktemp("ddp")
    done = _torchrun(tmp, "ddp", "--memory")
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp


def same_at_shown_digits(shown: str, value: float) -> bool:
    """``shown`` (the page's number) is ``value`` rounded to the significant digits it has."""
    mantissa = shown.lower().split("e")[0].lstrip("-").replace(".", "").lstrip("0")
    digits = max(1, len(mantissa))
    return float(shown) == float(f"{value:.{digits - 1}e}")


def applied_norm(inspector) -> str:
    text = inspector.locator(".fv-recorded-applied .fv-stats").text_content()
    return re.search(r"norm (\S+)", text).group(1)


def test_recorded_run_slider_click_and_rank(page, lab, ddp_run):
    torch_norms = {rank: _torch_norms(ddp_run, rank) for rank in (0, 1)}
    nb = LabNotebook.written(page, lab, "run.ipynb", [
        "import forgeviz",
        f"run = forgeviz.open({str(ddp_run / 'run')!r})\nrun",
    ])
    nb.run_cells(2)
    out = nb.output(1)
    header = out.locator(".jp-RenderedMarkdown").first
    header.wait_for()
    assert "of world size 2, 4 step(s)" in header.text_content() and "no findings" in header.text_content()
    # the ranks heatmap: one panel per rank
    out.locator(".fv-ranks[data-fv-state=ready]").wait_for()
    assert out.locator("canvas.fv-ranks-canvas").count() == 2
    view = out.locator(GRAPH)
    page.wait_for_selector(f"{GRAPH}[data-fv-state=ready][data-fv-step='4']")
    slider = view.locator(".fv-step")
    assert slider.is_visible() and view.locator(".fv-rank").is_visible()  # two ranks: the selector shows
    assert "step 4 (4 of 4)" in slider.locator(".fv-step-value").text_content()

    # the slider to step 2 (its second position): the figures change, the layout stays
    before = view.locator(".fv-node").evaluate_all("els => els.map(e => e.getAttribute('transform'))")
    view.locator(".fv-step-range").fill("1")
    page.wait_for_selector(f"{GRAPH}[data-fv-step='2'] .fv-step-range:not([disabled])")
    assert view.locator(".fv-node").evaluate_all("els => els.map(e => e.getAttribute('transform'))") == before

    name = "module.2.weight"
    node = view.locator(f'.fv-node[data-label="{name}"]')
    node.click()
    inspector = view.locator(".fv-inspector")
    section = inspector.locator("[data-fv-recorded-step='2'][data-fv-recorded-rank='0']")
    try:
        section.wait_for(timeout=20_000)
    except Exception:
        out.screenshot(path=str(ARTIFACTS / "run-graph-failure.png"))
        raise
    text = inspector.text_content()
    assert "before any all-reduce" in text and "as applied" in text
    # the Node's badge is the local norm of the step shown, as the inspector says it
    local = re.search(r"norm (\S+)", inspector.locator(".fv-recorded-local .fv-stats").text_content()).group(1)
    assert node.locator(".fv-badge-text").text_content().endswith(f"‖g‖={local}")
    shown = applied_norm(inspector)
    assert same_at_shown_digits(shown, torch_norms[0][2][name]), (shown, torch_norms[0][2][name])
    out.screenshot(path=str(ARTIFACTS / "run-graph-step2-rank0.png"))

    # rank 1 at the same step: DDP's all-reduce gave it the same applied gradient
    view.locator(".fv-rank").select_option("1")
    try:
        page.wait_for_selector(f"{GRAPH}[data-fv-rank='1'] .fv-step-range:not([disabled])", timeout=20_000)
        inspector.locator("[data-fv-recorded-step='2'][data-fv-recorded-rank='1']").wait_for(timeout=20_000)
    except Exception:
        out.screenshot(path=str(ARTIFACTS / "run-graph-failure.png"))
        raise AssertionError(f"rank 1: status {view.locator('.fv-status').text_content()!r}, "
                             f"root {view.get_attribute('data-fv-rank')!r}, inspector {inspector.text_content()[:300]!r}")
    shown = applied_norm(inspector)
    assert same_at_shown_digits(shown, torch_norms[1][2][name]), (shown, torch_norms[1][2][name])
    other = re.search(r"norm (\S+)", inspector.locator(".fv-recorded-local .fv-stats").text_content()).group(1)
    assert other != local  # each rank's own gradient before the all-reduce differs (other data)
    # the next button: step 3, same Node, torch's figure of step 3
    view.locator(".fv-step-next").click()
    inspector.locator("[data-fv-recorded-step='3'][data-fv-recorded-rank='1']").wait_for()
    shown = applied_norm(inspector)
    assert same_at_shown_digits(shown, torch_norms[1][3][name]), (shown, torch_norms[1][3][name])
    out.screenshot(path=str(ARTIFACTS / "run-graph-step3-rank1.png"))


# what the memory view's page holds: the peak and the highest live bytes of parameters, from its decoded events
MEMORY_FIGURES = """el => {
    const store = el.forgevizMemory.store;
    const c = [...el.querySelectorAll('.fv-mem-legend-item')].map(li => li.dataset.category).indexOf('parameter');
    let params = 0;
    for (let i = 0; i < store.n; i++) { params = Math.max(params, store.liveAt(i, c)); }
    return {peak: store.peakBytes, params, events: store.n};
}"""


def test_recorded_run_shows_rank_memory(page, lab, ddp_run):
    run = forgeviz.open(ddp_run / "run")
    timeline = run.memory(0)
    params = sum(p.numel() * p.element_size() for p in model().parameters())  # torch's bytes, float32
    nb = LabNotebook.written(page, lab, "run-memory.ipynb", [
        "import forgeviz",
        f"forgeviz.open({str(ddp_run / 'run')!r})",
    ])
    nb.run_cells(2)
    out = nb.output(1)
    root = out.locator(".fv-memory[data-fv-state=ready][data-fv-complete=true]")
    try:
        root.wait_for()
    except Exception:
        out.screenshot(path=str(ARTIFACTS / "run-memory-failure.png"))
        raise
    note = out.locator(".jp-RenderedMarkdown", has_text="the memory timeline").text_content()
    assert "rank 0's below" in note and "run.memory_view(1)" in note
    assert root.locator(".fv-message").text_content().endswith("run, rank 0: 4 step(s) recorded")
    assert int(root.get_attribute("data-fv-events")) == timeline.count
    shown = root.evaluate(MEMORY_FIGURES)
    assert shown == {"peak": timeline.peak_bytes, "params": params, "events": timeline.count}, (shown, params)
    # the text description says the same peak, to the byte
    summary = root.locator(".fv-mem-tr-summary").text_content()
    assert f"Peak {timeline.peak_bytes:,} bytes" in summary, summary
    assert timeline.peak_bytes == run.peaks()[0]  # what the ranks view's peak bar draws for rank 0
    root.scroll_into_view_if_needed()
    root.screenshot(path=str(ARTIFACTS / "run-memory-rank0.png"))


def test_open_run_command_shows_the_run_beside_the_notebook(page, lab, ddp_run):
    folder = str(ddp_run / "run")
    LabNotebook.written(page, lab, "open-run.ipynb", ["1 + 1"])  # any notebook with a kernel
    page.evaluate("(folder) => window.jupyterapp.commands.execute('forgeviz:open-run', {folder})", folder)
    beside = page.locator(".jp-MainAreaWidget:has(.fv-panel-output)")
    try:
        beside.locator(".fv-ranks[data-fv-state=ready]").wait_for()
        beside.locator(f"{GRAPH}[data-fv-state=ready]").wait_for()
    except Exception:
        page.screenshot(path=str(ARTIFACTS / "open-run-failure.png"))
        raise
    header = beside.locator(".jp-RenderedMarkdown").first.text_content()
    assert folder in header and "of world size 2, 4 step(s)" in header and "no findings" in header
    assert beside.locator("canvas.fv-ranks-canvas").count() == 2
    # a tab of its own in the main area, next to the notebook, named after the folder's last name (the
    # whole folder in its tooltip)
    titles = page.evaluate("() => [...window.jupyterapp.shell.widgets('main')].map(w => [w.title.label, w.title.caption])")
    assert ["forgeviz: run", f"forgeviz: {folder}"] in titles and "open-run.ipynb" in [t[0] for t in titles], titles
    page.screenshot(path=str(ARTIFACTS / "open-run.png"))
    # a folder that is not a run: forgeviz's error, in a tab of its own
    missing = str(ddp_run / "no-such-run")
    page.evaluate("(folder) => window.jupyterapp.commands.execute('forgeviz:open-run', {folder})", missing)
    error = page.locator(".fv-panel-output-error", has_text="expected the folder of a recorded run")
    error.wait_for()
    assert missing in error.text_content()
