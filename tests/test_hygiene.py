"""forgeviz must change nothing: results, errors, hooks, and its own faults stay out of the way."""

from __future__ import annotations

import ast
import doctest
import gc
import importlib
import importlib.util
import pkgutil
import re
import traceback
from pathlib import Path

import pytest
import torch
from torch.nn.modules import module as nn_module

import forgeviz
from forgeviz._capture import summary as summary_module
from forgeviz._capture.modules import module_hooks
from forgeviz._capture.session import get_session
from forgeviz.model import tsgen

from scenarios import ROOT, S1, make_cnn


def run_s1_and_cnn():
    """S1 and a CNN train step; returns every output and gradient."""
    x = torch.tensor([2.0], requires_grad=True)
    y = torch.tensor([3.0], requires_grad=True)
    loss = (x * y + x) ** 2
    loss.backward()
    model = make_cnn(seed=1)
    torch.manual_seed(2)
    inputs = torch.randn(4, 3, 8, 8)
    out = model(inputs)
    cnn_loss = torch.nn.functional.cross_entropy(out, torch.tensor([1, 2, 3, 4]))
    torch.autograd.grad(cnn_loss, [next(model.parameters())], retain_graph=True)
    cnn_loss.backward()
    return [loss, x.grad, y.grad, out, cnn_loss] + [p.grad for p in model.parameters()]


def test_results_are_bit_identical_with_and_without_forgeviz(nb):
    plain = run_s1_and_cnn()
    nb.shell.user_ns["run_s1_and_cnn"] = run_s1_and_cnn
    nb.ok("captured = run_s1_and_cnn()")  # a cell under %load_ext forgeviz
    captured = nb["captured"]
    assert get_session().store.passes > 0  # it really recorded
    assert len(plain) == len(captured)
    for a, b in zip(plain, captured):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a.detach(), b.detach())  # bit-identical, not approx


def test_users_runtime_error_propagates_unchanged(nb):
    cell = "torch.ones(3, 4) @ torch.ones(3, 4)"
    with pytest.raises(RuntimeError) as caught:  # the oracle: the same code outside any cell, no mode
        exec(cell, {"torch": torch})  # noqa: S102 - the test's own cell, run without forgeviz as the oracle
    plain = caught.value
    with_fv = nb.run(cell).error_in_exec
    assert type(with_fv) is type(plain) is RuntimeError
    assert str(with_fv) == str(plain) == "mat1 and mat2 shapes cannot be multiplied (3x4 and 3x4)"
    # A Python exception from the user's own code is not touched either.
    error = nb.run("raise KeyError('mine')").error_in_exec
    assert type(error) is KeyError and error.args == ("mine",)


@pytest.mark.parametrize("failing", ["keep(torch.ones(3, 4)) @ keep(torch.ones(3, 4))",  # an op
                                     "keep(torch.ones(3)).grad = keep(torch.ones(4))"])  # a pass-through
def test_a_failed_ops_operands_are_not_kept_alive_by_its_traceback(nb, failing):
    # IPython keeps the last traceback; the op's error passed through forgeviz's mode, whose frame held
    # the op's arguments: the traceback must not hold the tensors the op was given (a failed op's
    # operands can be most of a GPU after an OOM). The mode takes its frame out of the traceback.
    nb.ok("import weakref\nrefs = []\ndef keep(t):\n    refs.append(weakref.ref(t))\n    return t")
    error = nb.run(failing).error_in_exec
    assert isinstance(error, RuntimeError)
    assert not any("forgeviz" in frame.filename for frame in traceback.extract_tb(error.__traceback__))
    gc.collect()
    assert nb["refs"] and [r() for r in nb["refs"]] == [None] * len(nb["refs"])


def test_grad_attributes_and_reads_behave_as_without_forgeviz(nb):
    # forgeviz's mode lets these through untouched (they are not ops): same values, same errors.
    # The oracle runs the same code outside any cell, where no mode is active.
    cell = ("p = torch.nn.Parameter(torch.ones(3))\n(p * 2).sum().backward()\n"
            "with torch.autograd.profiler.record_function('mine'):\n"
            "    seen = [p.grad.tolist(), p.requires_grad, p.is_leaf, p.grad_fn, p.shape, p.dtype, p.device,\n"
            "            p.size(), p.dim(), p.numel(), len(p), p.stride(), p.is_contiguous(), p.sum().item()]\n"
            "p.grad = None\nseen.append(p.grad)\np.grad = torch.full((3,), 5.0)\nseen.append(p.grad.tolist())")
    plain: dict = {"torch": torch}
    exec(cell, plain)  # noqa: S102 - the test's own cell, run without forgeviz as the oracle
    nb.ok(cell)
    assert nb["seen"] == plain["seen"]
    assert nb["seen"][:4] + nb["seen"][-2:] == [[2.0, 2.0, 2.0], True, True, None, None, [5.0, 5.0, 5.0]]
    with pytest.raises(RuntimeError) as caught:
        exec("p.grad = torch.ones(4)", plain)  # noqa: S102 - the oracle, as above
    with_fv = nb.run("p.grad = torch.ones(4)").error_in_exec
    assert type(with_fv) is RuntimeError and str(with_fv) == str(caught.value)
    assert "attempting to assign a gradient of size" in str(with_fv)


def test_unload_removes_every_mode_and_hook(ipython):
    forward_pre = dict(nn_module._global_forward_pre_hooks)
    forward = dict(nn_module._global_forward_hooks)
    callbacks = {k: list(v) for k, v in ipython.events.callbacks.items()}
    ipython.run_cell("%load_ext forgeviz")
    assert module_hooks.active
    if not module_hooks.per_module:  # (per module while an earlier test's compiled module lives)
        assert len(nn_module._global_forward_pre_hooks) == len(forward_pre) + 1
    ipython.run_cell("import torch\nmodes = len(torch.overrides._get_current_function_mode_stack())")
    assert ipython.user_ns["modes"] == 1  # capturing inside a cell
    assert "fv" in ipython.magics_manager.magics["line"]
    ipython.run_cell("%unload_ext forgeviz")
    assert torch.overrides._get_current_function_mode_stack() == []
    assert dict(nn_module._global_forward_pre_hooks) == forward_pre
    assert dict(nn_module._global_forward_hooks) == forward
    assert not module_hooks.active and not module_hooks.per_module and not len(module_hooks._hooked)
    assert {k: list(v) for k, v in ipython.events.callbacks.items()} == callbacks
    assert "fv" not in ipython.magics_manager.magics["line"]
    ipython.run_cell("modes = len(torch.overrides._get_current_function_mode_stack())")
    assert ipython.user_ns["modes"] == 0
    assert not get_session().installed


def test_capture_context_manager_cleans_up():
    before = dict(nn_module._global_forward_pre_hooks)
    with forgeviz.capture():
        assert len(torch.overrides._get_current_function_mode_stack()) == 1
    assert torch.overrides._get_current_function_mode_stack() == []
    assert dict(nn_module._global_forward_pre_hooks) == before


@pytest.mark.faults_expected
def test_a_fault_inside_forgeviz_never_breaks_the_users_backward(nb, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("simulated forgeviz bug")

    nb.ok(S1 + "g = forgeviz.graph(loss)")
    monkeypatch.setattr(importlib.import_module("forgeviz._capture.grads"), "summarize", broken)
    nb.ok("loss.backward()")  # must not raise
    assert nb["x"].grad.tolist() == [64.0]  # and the user's result is right
    assert any("simulated forgeviz bug" in f for f in get_session().faults)
    assert any("simulated forgeviz bug" in w for w in nb["g"].warnings)


def test_magic_draws_the_graph_and_rejects_bad_commands(nb):
    nb.ok(S1)
    widget = nb.ok("%fv graph loss")
    assert sorted(n.label for n in widget.model.nodes) == ["loss", "w", "x", "y", "z"]
    result = nb.run("%fv paint loss")
    assert ("expected one of graph, grads, strides, broadcast, matmul, explain, memory, got 'paint'"
            in str(result.error_in_exec))
    assert "name at least one tensor" in str(nb.run("%fv graph").error_in_exec)


def test_every_view_has_one_name_in_every_python_layer():
    from forgeviz.views import VIEWS
    from forgeviz.widgets.base import STATIC, RequestWidget

    for view in VIEWS:  # forgeviz/model/<name>.py and forgeviz/widgets/<name>.py, drawn by static/<name>.js
        assert importlib.import_module(f"forgeviz.model.{view.name}").WIRE_TYPES
        module = importlib.import_module(f"forgeviz.widgets.{view.name}")
        widgets = [w for w in vars(module).values()
                   if isinstance(w, type) and issubclass(w, RequestWidget) and w.__module__ == module.__name__]
        assert len(widgets) == 1
        bundle = widgets[0]._esm  # anywidget watches a built bundle's file; a missing one says its name
        built = getattr(bundle, "_path", None)
        assert built == STATIC / f"{view.name}.js" if built is not None else f'"{view.name}.js"' in str(bundle)
    assert [m.__name__ for m in tsgen.VIEW_MODULES] == [f"forgeviz.model.{view.name}" for view in VIEWS]


def test_every_view_has_one_folder_or_file_in_every_frontend_layer():
    """Adding a view is one folder per layer and one entry in views.json (the README's checklist)."""
    from forgeviz.views import VIEWS

    names = [view.name for view in VIEWS]
    render = ROOT / "src" / "render"
    # nothing of a view at the top; besides the views, the side panel's sections (src/lab/panel.ts hosts them)
    assert sorted(p.name for p in render.iterdir()) == sorted(names + ["common", "panel"])
    assert all((render / name / "view.ts").is_file() for name in names)
    widgets = ROOT / "src" / "widgets"
    assert sorted(p.name for p in widgets.iterdir()) == sorted([f"{name}.ts" for name in names] + ["entry.ts"])
    style = ROOT / "style"
    assert all((style / f"{name}.css").is_file() for name in names)
    # the --fv-* tokens are declared once, in base.css; a view's sheet only uses them
    declaring = sorted(p.name for p in style.glob("*.css") if re.search(r"--fv-[\w-]+\s*:", p.read_text()))
    assert declaring == ["base.css"]


def _forgeviz_imports() -> dict[str, set[str]]:
    """Every forgeviz module and the forgeviz modules it imports, counting imports inside functions.

    ``from a import b`` counts as importing ``a.b`` when that is a module, else ``a``.
    """
    package = ROOT / "forgeviz"
    modules: dict[str, Path] = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def owner(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(owner(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    stem = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join(stem + ([node.module] if node.module else []))
                targets.update(owner(f"{base}.{alias.name}") or owner(base) for alias in node.names)
        graph[name] = {t for t in targets if t and t != name}
    return graph


def test_no_import_loops_and_capture_imports_only_downward():
    graph = _forgeviz_imports()
    assert len(graph) > 30 and "forgeviz._capture.session" in graph  # the walk found the package

    def loop_from(start: str) -> list[str]:
        stack, seen = [(start, [start])], set()
        while stack:
            module, path = stack.pop()
            for target in graph[module]:
                if target == start:
                    return path + [start]
                if target not in seen:
                    seen.add(target)
                    stack.append((target, path + [target]))
        return []

    loops = [loop for loop in map(loop_from, sorted(graph)) if loop]
    assert loops == [], "import loops: " + "; ".join(" -> ".join(loop) for loop in loops)
    # the lower layers never reach up: capture reads only itself and the model, the model only itself
    allowed = {"forgeviz._capture": ("forgeviz._capture", "forgeviz.model"),
               "forgeviz.model": ("forgeviz.model", "forgeviz.views")}
    for module, targets in graph.items():
        for layer, ok in allowed.items():
            if module.startswith(layer):
                assert all(t.startswith(ok) for t in targets), (module, sorted(targets))


def test_every_fv_command_in_views_json_has_a_handler_and_every_handler_a_command():
    from forgeviz.magics import ForgevizMagics
    from forgeviz.views import COMMANDS

    handlers = {name.removeprefix("_fv_") for name in dir(ForgevizMagics) if name.startswith("_fv_")}
    assert handlers == set(COMMANDS)


def test_wire_types_in_typescript_are_generated_from_python():
    committed = (ROOT / "src" / "model" / "wire.ts").read_text()
    assert committed == tsgen.generate(), "run: python -m forgeviz.model.tsgen"


def test_summaries_match_torch():
    t = torch.randn(500, dtype=torch.float64)
    s = summary_module.summarize(t)
    assert s.norm == pytest.approx(t.norm().item(), rel=1e-12) and s.min == t.min().item() and s.max == t.max().item()
    assert s.mean == pytest.approx(t.mean().item(), rel=1e-12)
    assert s.values is None and sum(s.histogram.counts) == 500
    bad = torch.tensor([1.0, float("nan"), float("inf"), -2.0])
    s = summary_module.summarize(bad)
    assert (s.nan_count, s.inf_count, s.min, s.max) == (1, 1, -2.0, 1.0)
    assert s.values == [1.0, "NaN", "Infinity", -2.0]


# Modules that import an optional dependency at their top, and the dependency
OPTIONAL = {"forgeviz._capture.device_summary_triton": "triton"}


def test_docstring_examples_run():
    failures = 0
    for info in pkgutil.walk_packages(forgeviz.__path__, "forgeviz."):
        if info.name in OPTIONAL and importlib.util.find_spec(OPTIONAL[info.name]) is None:
            continue  # (device_summary imports it only where triton is installed)
        module = importlib.import_module(info.name)
        failures += doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE).failed
    assert failures == 0
