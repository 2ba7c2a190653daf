"""Driving a notebook in real JupyterLab through its own commands (tests and benchmarks)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-quic",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_lab(root: Path, app: str = "lab", python: str = sys.executable, env: dict | None = None,
                args: tuple[str, ...] = ()) -> Iterator[dict]:
    """A JupyterLab server (``app="notebook"``: Notebook 7) on ``root`` with fresh settings (light theme)
    and no browser. ``python`` runs the server (another environment's Lab: an older JupyterLab), ``env``
    adds to its environment (e.g. ``JUPYTER_CONFIG_DIR`` with forgeviz disabled) and ``args`` to its
    command line."""
    token = secrets.token_hex(16)
    port = _free_port()
    # No "get notified about Jupyter news?" toast over the screenshots.
    news = root / ".settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True, exist_ok=True)
    news.write_text('{"fetchNews": "false"}')
    env = dict(os.environ,
               JUPYTERLAB_SETTINGS_DIR=str(root / ".settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(root / ".workspaces"),
               JUPYTER_RUNTIME_DIR=str(root / ".runtime"), **(env or {}))
    expose = {"lab": "LabApp", "notebook": "JupyterNotebookApp"}[app]
    cmd = [python, "-m", "jupyter", app, "--no-browser", f"--ServerApp.port={port}",
           "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}", f"--{expose}.expose_app_in_browser=True",
           f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0", *args]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log = open(root / "server.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise RuntimeError(f"jupyter {app} did not start:\n{(root / 'server.log').read_text()}")
            time.sleep(0.5)
    try:
        yield {"base": base, "token": token, "root": root, "app": app}
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def launch_chromium(playwright):
    """Debian's Chromium, headless."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)


class LabNotebook:
    """Opens a notebook in Lab (or Notebook 7, one notebook a page) and runs its cells one by one
    through the app's own commands."""

    def __init__(self, page, lab, name: str, navigate: bool = True) -> None:
        """``navigate=False``: open it in the Lab page already loaded (beside the notebooks open there)."""
        self.page = page
        notebook7 = lab.get("app") == "notebook"
        if navigate:
            page.goto(f"{lab['base']}/{'notebooks' if notebook7 else 'lab/tree'}/{name}?token={lab['token']}")
        page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                               " && window.jupyterapp.shell.currentWidget.sessionContext")
        if not notebook7:
            # Lab restores the last workspace (other notebooks too): make sure ours is the current one.
            page.evaluate("async (path) => { await window.jupyterapp.commands.execute('docmanager:open', {path}); }",
                          name)
        page.wait_for_function("""(path) => {
            const w = window.jupyterapp.shell.currentWidget;
            if (!w || !w.context || w.context.path !== path) { return false; }
            const k = w.sessionContext.session && w.sessionContext.session.kernel;
            return k && k.status === 'idle' && w.content.widgets.length > 0;
        }""", arg=name, timeout=120_000)
        self.panel_id = page.evaluate("() => window.jupyterapp.shell.currentWidget.id")

    @classmethod
    def written(cls, page, lab, name: str, cells: list[str]) -> "LabNotebook":
        """Write ``cells`` as the notebook ``name`` in the server's root, then open it."""
        write_notebook(lab["root"] / name, cells)
        return cls(page, lab, name)

    def run_cells(self, count: int) -> None:
        """Run the first ``count`` cells, in order (each must run without an error)."""
        for index in range(count):
            self.run_cell(index)

    def run_cell(self, index: int, raises: bool = False) -> None:
        """Run one cell; ``raises=True`` for a cell that fails on purpose (Lab then reports False)."""
        ok = self.page.evaluate("""async (i) => {
            const app = window.jupyterapp; const w = app.shell.currentWidget;
            w.content.activeCellIndex = i;
            return await app.commands.execute('notebook:run-cell');
        }""", index)
        assert ok != raises, f"cell {index} {'ran without the expected error' if raises else 'failed to run'}"

    def output(self, index: int):
        return self.page.locator(f"[id='{self.panel_id}'] .jp-Notebook .jp-Cell").nth(index).locator(".jp-OutputArea")

    def view_ready(self, index: int, view: str):
        """Cell ``index``'s output and the forgeviz ``view`` in it ("ranks", "broadcast", ...), once the view
        says it is drawn (``data-fv-state=ready``)."""
        out = self.output(index)
        root = out.locator(f".fv-{view}[data-fv-state=ready]")
        root.wait_for()
        return out, root


def downloaded(page, button) -> bytes:
    """Click ``button`` (an export button's locator) and return the bytes of the file it downloads."""
    with page.expect_download() as download:
        button.click()
    return Path(download.value.path()).read_bytes()


def screenshot_in_dark(page, locator, path: str) -> None:
    """Switch JupyterLab to its dark theme, screenshot ``locator`` (scrolled into view) to ``path``,
    and switch back to light."""
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
    page.wait_for_timeout(500)
    locator.scroll_into_view_if_needed()
    locator.screenshot(path=path)
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})")


def open_saved(page, lab, name: str, cells: int) -> str:
    """Open the notebook ``name`` as it is on disk, without waiting for a kernel (it is drawn from its
    saved outputs); the panel's id once its ``cells`` cells are there."""
    page.goto(f"{lab['base']}/lab/tree/{name}?token={lab['token']}")
    page.wait_for_function("""([path, cells]) => {
        const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
        return w && w.context && w.context.path === path && w.content.widgets.length === cells;
    }""", arg=[name, cells])
    return page.evaluate("() => window.jupyterapp.shell.currentWidget.id")


def websocket_bytes(page) -> list[int]:
    """The sizes of the websocket frames the page receives from now on: ``sum(frames[mark:])`` is what
    arrived since ``mark = len(frames)``."""
    frames: list[int] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: frames.append(len(payload))))
    return frames


def write_notebook(path: Path, cells: list[str]) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def wait_panel_status(page, value: str, timeout: int = 60_000) -> None:
    """Wait until the forgeviz side panel's ``data-fv-status`` is ``value``."""
    page.wait_for_function("(v) => document.querySelector('[data-fv-panel]')?.dataset.fvStatus === v",
                           arg=value, timeout=timeout)


def kernel_eval(page, path: str, expression: str) -> str:
    """``repr`` of ``expression`` evaluated in the kernel of the open notebook ``path``, as a silent
    request (a user expression: no cell runs, no cell hooks fire)."""
    return page.evaluate("""async ([path, expression]) => {
        const app = window.jupyterapp;
        const nb = [...app.shell.widgets('main')].find(w => w.context && w.context.path === path);
        const kernel = nb.sessionContext.session.kernel;
        const reply = await kernel.requestExecute({ code: '', silent: true, store_history: false,
                                                    user_expressions: { out: expression } }).done;
        const out = reply.content.user_expressions.out;
        return out.status === 'ok' ? out.data['text/plain'] : 'error: ' + out.ename + ': ' + out.evalue;
    }""", [path, expression])


def wait_kernel_eval(page, path: str, expression: str, expected: str, timeout: float = 15) -> None:
    """Wait until ``kernel_eval(page, path, expression) == expected`` (the kernel hears of a closed side
    panel only once it stays hidden a moment)."""
    deadline = time.time() + timeout
    while (got := kernel_eval(page, path, expression)) != expected:
        assert time.time() < deadline, f"{expression} is {got} after {timeout} s, not {expected}"
        time.sleep(0.25)
