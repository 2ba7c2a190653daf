"""Driving a notebook in real JupyterLab through its own commands."""

from __future__ import annotations

from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"


class LabNotebook:
    """Opens a notebook in Lab and runs its cells one by one through Lab's own commands."""

    def __init__(self, page, lab, name: str) -> None:
        self.page = page
        page.goto(f"{lab['base']}/lab/tree/{name}?token={lab['token']}")
        page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                               " && window.jupyterapp.shell.currentWidget.sessionContext")
        page.wait_for_function("""() => {
            const w = window.jupyterapp.shell.currentWidget;
            const k = w.sessionContext.session && w.sessionContext.session.kernel;
            return k && k.status === 'idle' && w.content.widgets.length > 0;
        }""", timeout=120_000)

    def run_cell(self, index: int) -> None:
        ok = self.page.evaluate("""async (i) => {
            const app = window.jupyterapp; const w = app.shell.currentWidget;
            w.content.activeCellIndex = i;
            return await app.commands.execute('notebook:run-cell');
        }""", index)
        assert ok, f"cell {index} failed to run"

    def output(self, index: int):
        return self.page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-OutputArea")


def write_notebook(path: Path, cells: list[str]) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
