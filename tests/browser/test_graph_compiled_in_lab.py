"""End to end in real JupyterLab + Debian Chromium: a torch.compile'd MLP between eager ops is one box
named by its variable, the eager Nodes around it keep their names, and a click on the box shows the
backend, Dynamo's counts, what compile hides and the gradients that crossed its edges, as torch has them."""

from __future__ import annotations

import math

import pytest

from labdriver import ARTIFACTS, LabNotebook

pytestmark = pytest.mark.browser

CELLS = [
    "%load_ext forgeviz\nimport torch, forgeviz",
    "torch.manual_seed(0)\n"
    "mlp = torch.compile(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)),\n"
    "                    backend='aot_eager')",
    "x = torch.randn(4, 32, requires_grad=True)\nh = x * 2\nout = mlp(h)\nloss = out.square().mean()",
    "g = forgeviz.graph(loss)\ng",  # 3
    "seen = {}\nh.register_hook(lambda grad: seen.setdefault('h', grad.clone()))\nloss.backward()",  # 4
    # 5: torch's numbers: the gradient that left the region toward h and toward the first weight, and
    # Dynamo's own counters.
    "counters = torch._dynamo.utils.counters\n"
    "print(seen['h'].norm().item(), mlp._orig_mod[0].weight.grad.norm().item(),\n"
    "      counters['stats']['unique_graphs'], sum(counters['graph_break'].values()))",
]


def _at_shown_precision(shown: str, expected: float) -> None:
    """``shown`` is ``expected`` at the 4 significant digits the inspector prints (formatNumber)."""
    digits = math.floor(math.log10(abs(expected))) - 3
    assert float(shown) == pytest.approx(expected, abs=0.5 * 10 ** digits * 1.001), (shown, expected)


def _norm(inspector, key: str) -> str:
    """The norm the inspector shows for the gradient listed under ``key`` (e.g. ``leaving → h``)."""
    item = inspector.locator(".fv-grad-inputs li").filter(has=inspector.page.locator(".fv-key", has_text=key))
    stats = item.locator(".fv-stats").text_content()
    return stats.split("norm ", 1)[1].split(" ", 1)[0]


def test_compiled_region_box_click_and_edge_gradients(page, lab):
    nb = LabNotebook.written(page, lab, "compiled.ipynb", CELLS)
    nb.run_cells(3)
    nb.run_cell(3)
    view = nb.output(3).locator(".fv-root")
    page.wait_for_selector(".jp-Cell:nth-child(4) .fv-root[data-fv-state=ready]")

    labels = view.locator(".fv-node").evaluate_all("els => els.map(e => e.dataset.label)")
    compiled = [label for label in labels if "compiled" in label]
    assert compiled == ["mlp · compiled"], labels  # one box, named by the variable the user compiled into
    # The eager Nodes around the call keep their names, and the parameters the names the user's module
    # gives them (no Dynamo "_orig_mod." prefix).
    assert sorted(labels) == sorted(["x", "h", "mlp · compiled", "square", "loss",
                                     "0.weight", "0.bias", "2.weight", "2.bias"]), labels
    box = view.locator('.fv-node[data-label="mlp · compiled"]')
    assert "CompiledFunctionBackward" in box.locator(".fv-node-text").text_content()
    # Its module group is the user's class, not torch.compile's wrapper.
    clusters = view.locator(".fv-cluster-label").all_text_contents()
    assert "mlp · Sequential" in clusters, clusters
    assert "OptimizedModule" not in view.locator(".fv-graph").text_content()

    # backward in a later cell: the box gains its gradient badge by itself.
    nb.run_cell(4)
    box.locator(".fv-badge-text").wait_for()
    nb.run_cell(5)
    grad_h, grad_w, graphs, breaks = nb.output(5).text_content().split()
    assert (graphs, breaks) == ("1", "0")

    box.click()
    inspector = view.locator(".fv-inspector")
    page.wait_for_function("""el => el.dataset.state === 'ready' && el.querySelector('.fv-compiled')
                               && el.querySelector('.fv-grad-inputs')""", arg=inspector.element_handle())
    assert inspector.get_attribute("data-node-id") == box.get_attribute("data-node-id")
    section = inspector.locator(".fv-compiled")
    assert " ".join(section.locator(".fv-row").text_content().split()) == "backendaot_eager"
    about = section.locator(".fv-note").all_text_contents()
    assert about == ["One region of mlp, compiled by torch.compile (backend aot_eager).",
                     f"In this process Dynamo has compiled {graphs} graph and met {breaks} graph breaks "
                     "(torch._dynamo.utils.counters)."], about
    hidden = inspector.locator(".fv-compiled-hidden .fv-note").all_text_contents()
    assert hidden[0].startswith("Compile hides what happens inside") and "per-op gradients" in hidden[0], hidden
    assert "run mlp eagerly for one step" in hidden[1] and "mlp._orig_mod(x)" in hidden[1], hidden
    assert inspector.locator(".fv-detail-head h3").text_content() == "mlp · compiled"
    sub = inspector.locator(".fv-detail-head .fv-sub").text_content()
    assert sub == "CompiledFunctionBackward · torch.compile, aot_eager", sub
    assert "mlp (Sequential)" in inspector.text_content()
    titles = inspector.locator(".fv-section h4").all_text_contents()
    assert titles == ["Origin", "Compiled region", "Forward", "Saved for backward", "Gradients · backward #1",
                      "What compile hides"], titles  # (what the region saved: freed by the backward)
    assert inspector.locator(".fv-source").text_content() == "out = mlp(h)"
    # The gradients that crossed its edges, as torch computed them in the kernel.
    _at_shown_precision(_norm(inspector, "leaving → h"), float(grad_h))
    _at_shown_precision(_norm(inspector, "leaving → 0.weight"), float(grad_w))
    keys = inspector.locator(".fv-grad-inputs .fv-key").all_text_contents()
    assert sorted(keys) == sorted(f"leaving → {n}" for n in ("0.weight", "0.bias", "h", "2.weight", "2.bias")), keys

    ARTIFACTS.mkdir(exist_ok=True)
    nb.output(3).scroll_into_view_if_needed()
    nb.output(3).screenshot(path=str(ARTIFACTS / "graph-compiled.png"))
    inspector.locator(".fv-compiled-hidden").scroll_into_view_if_needed()
    nb.output(3).screenshot(path=str(ARTIFACTS / "graph-compiled-hidden.png"))
