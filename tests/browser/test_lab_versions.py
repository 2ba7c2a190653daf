"""The prebuilt extension on the oldest and the newest JupyterLab 4 and Notebook 7 that forgeviz
promises (pyproject.toml's `lab` extra, the README's "Supported versions"): installed from the wheel
into an environment that already has that JupyterLab, as a user would, it is listed OK and, in real
Chromium with that environment's own kernel, loads without console errors, draws S1's graph, shows
x's gradient 64 on a click and opens the side panel. The full suite runs on the newest only."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from labdriver import ARTIFACTS, LabNotebook, kernel_eval, running_lab, wait_panel_status, write_notebook

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]


def extra(name: str) -> dict[str, Requirement]:
    """forgeviz's requirements for the extra ``name``, as its wheel ships them."""
    reqs = [Requirement(r) for r in importlib.metadata.requires("forgeviz")]
    return {r.name: r for r in reqs if r.marker and r.marker.evaluate({"extra": name})}


# The promise: jupyterlab>=OLDEST,<the minor after the newest. The newest: what the whole suite runs on.
PROMISE = {s.operator: s.version for s in extra("lab")["jupyterlab"].specifier}
NEWEST = {name: next(iter(extra("test")[name].specifier)).version for name in ("jupyterlab", "notebook")}
VERSIONS = {
    "oldest": {"jupyterlab": PROMISE.get(">="), "notebook": "7.0.0"},  # Notebook 7.0.0 asks for JupyterLab>=4.0.2
    "newest": NEWEST,
}

CELLS = [
    "%load_ext forgeviz\nimport torch, forgeviz",
    "x = torch.tensor([2.], requires_grad=True)\ny = torch.tensor([3.], requires_grad=True)\n"
    "z = x * y\nw = z + x\nloss = w ** 2",
    "forgeviz.graph(loss)",
    "loss.backward()",
]


def test_the_promised_range_is_the_tested_range():
    """pyproject's `lab` extra says exactly what these tests run: from the oldest to the newest's minor."""
    assert set(PROMISE) == {">=", "<"}, f"the lab extra should read jupyterlab>=X.Y.Z,<X.Y: it says {PROMISE}"
    major, minor = (int(n) for n in NEWEST["jupyterlab"].split(".")[:2])
    assert PROMISE["<"] == f"{major}.{minor + 1}", (PROMISE, NEWEST)
    assert all(s.operator == "==" for name in NEWEST for s in extra("test")[name].specifier)
    readme = (ROOT / "README.md").read_text()
    for versions in VERSIONS.values():
        for name, version in versions.items():
            assert version in readme, f"README's supported versions should name {name} {version}"


def shared_requirements(prefix: Path) -> dict[str, str]:
    """The shared modules forgeviz's Lab extension installed under ``prefix`` takes from the page, and
    the versions it asks for (read from its webpack container, remoteEntry.*.js)."""
    static = prefix / "share" / "jupyter" / "labextensions" / "forgeviz" / "static"
    text = "".join(p.read_text() for p in static.glob("remoteEntry.*.js"))
    found = dict(re.findall(r'shareKey:"([^"]+)",import:null,requiredVersion:"([^"]+)"', text))
    assert "@jupyterlab/apputils" in found, f"no shared @jupyterlab/apputils found in {static}: has the format changed?"
    return found


def test_the_page_is_asked_for_what_package_json_promises():
    """The built extension asks the page for package.json's ranges (scripts/core-meta.mjs), the ranges
    `jupyter labextension list` checks, not the versions of the JupyterLab it was built with."""
    deps = json.loads((ROOT / "package.json").read_text())["dependencies"]
    asked = shared_requirements(Path(sys.prefix))
    assert {k: v for k, v in asked.items() if k in deps} == {k: deps[k] for k in asked if k in deps}
    assert asked.keys() & deps.keys() >= {"@jupyterlab/apputils", "@jupyterlab/ui-components", "@lumino/widgets"}


# Notebook 7's own page errors, seen with forgeviz disabled too: (message, why)
NOTEBOOK7_OWN = {
    "Cannot read properties of undefined (reading 'schema')":
        "its shortcuts extension reads the settings schema of a plugin its registry does not hold (7.6.5)",
    "Cannot read properties of undefined (reading 'last_modified')":
        "its 'Last Checkpoint' (7.0, 7.2) reads the latest of a notebook's checkpoints before it has one",
    "Cannot read properties of null (reading 'type')":
        "its cell toolbar (7.0: _cellToolbarOverlapsContents, in a requestAnimationFrame) reads the model of a "
        "cell disposed meanwhile; seen once in a fresh clone's run, thrown in its bundle 7386",
}


def notebook7s_own(error: str) -> bool:
    """``error`` (message, then stack) is one of Notebook 7's own, thrown in its own code."""
    message, _, stack = error.partition("\n")
    return message in NOTEBOOK7_OWN and "/static/notebook/" in stack and "forgeviz" not in stack


def installed_versions(python, names: tuple[str, ...]) -> dict[str, str]:
    """The versions of the distributions ``names`` installed in ``python``'s environment."""
    code = "import importlib.metadata as m, json, sys; print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
    return json.loads(subprocess.run([python, "-c", code, *names], capture_output=True, text=True, check=True).stdout)


@pytest.fixture(scope="module", params=list(VERSIONS))
def env(request, lab_env):
    """The python of an environment with that end's JupyterLab and Notebook, and forgeviz's wheel:
    the newest is this one (./dev.sh installs the wheel here), the oldest is made under .venv-labs/."""
    pins = VERSIONS[request.param]
    python = lab_env(pins) if request.param == "oldest" else Path(sys.executable)
    return {"name": request.param, "python": python, "pins": pins}


def test_pip_leaves_the_users_jupyterlab_alone(env, forgeviz_wheel):
    got = installed_versions(env["python"], (*env["pins"], "forgeviz"))
    assert got == {**env["pins"], "forgeviz": forgeviz_wheel.name.split("-")[1]}


def test_labextension_list_says_forgeviz_is_ok(env):
    out = subprocess.run([env["python"], "-m", "jupyter", "labextension", "list"], capture_output=True, text=True,
                         check=True)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)  # without its colours
    line = next((l for l in text.splitlines() if l.strip().startswith("forgeviz")), "")
    assert "enabled" in line.split() and "OK" in line.split() and "X" not in line.split(), text
    assert "not compatible" not in text, text


@pytest.mark.parametrize("app", ["lab", "notebook"])
def test_graph_click_and_panel(env, app, page, tmp_path):
    messages: list[tuple[str, str]] = []
    page.on("console", lambda m: messages.append((m.type, m.text)))
    page.on("pageerror", lambda e: messages.append(("pageerror", f"{e.message}\n{e.stack}")))
    with running_lab(tmp_path, app, python=str(env["python"])) as server:
        write_notebook(tmp_path / "s1.ipynb", CELLS)
        nb = LabNotebook(page, server, "s1.ipynb")
        # that environment's JupyterLab (Notebook) in the page, and its python in the kernel
        assert page.evaluate("() => window.jupyterapp.version") == env["pins"]["jupyterlab" if app == "lab" else "notebook"]
        prefix = Path(kernel_eval(page, "s1.ipynb", "__import__('sys').prefix").strip("'"))
        assert prefix == env["python"].parent.parent
        nb.run_cells(3)
        graph = nb.output(2).locator(".fv-root")
        graph.locator(".fv-graph").wait_for()
        page.wait_for_function("el => el.dataset.fvState === 'ready'", arg=graph.element_handle())
        labels = sorted(graph.locator(".fv-node").evaluate_all("els => els.map(e => e.dataset.label)"))
        assert labels == ["loss", "w", "x", "y", "z"]

        nb.run_cell(3)  # backward: x's badge says 64, and a click on x shows 64 = 16 via Add + 48 via Mul
        x = graph.locator('.fv-node[data-label="x"]')
        x.locator(".fv-badge-text").wait_for()
        assert "64" in x.locator(".fv-badge-text").text_content()
        x.click()
        inspector = graph.locator(".fv-inspector")
        page.wait_for_function("el => el.dataset.nodeId && el.textContent.includes('64')",
                               arg=inspector.element_handle(), timeout=30_000)
        text = inspector.text_content()
        assert "16" in text and "48" in text, text
        shot = f"lab-versions-{env['name']}-{app}"
        nb.output(2).screenshot(path=str(ARTIFACTS / f"{shot}-graph.png"))

        page.evaluate("() => window.jupyterapp.commands.execute('forgeviz:toggle-panel')")
        wait_panel_status(page, "ready")
        page.wait_for_selector('[data-fv-panel] [data-fv-tensor="x"]', state="attached")
        page.screenshot(path=str(ARTIFACTS / f"{shot}-panel.png"))

        # (asked while the server runs: a page whose server stops logs errors of its own)
        errors = [m for m in messages if m[0] in ("error", "pageerror") and not (app == "notebook" and notebook7s_own(m[1]))]
        assert not errors, errors
        # Lab warns when a shared module's version is not the one an extension asks for: none may be forgeviz's
        # (other extensions' are printed: jupyterlab_widgets 3.0.17, which pip brings with ipywidgets, asks for 4.6)
        unsatisfied = [text for _, text in messages if "Unsatisfied version" in text]
        print(f"{env['name']} {app}: {len(messages)} console messages, unsatisfied versions: {unsatisfied}")
        ours = [f"module {name} (required {version})" for name, version in shared_requirements(prefix).items()]
        assert not [text for text in unsatisfied if any(o in text for o in ours)], unsatisfied
