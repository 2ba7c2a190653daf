"""Shared fixtures: a real IPython shell running real cells, with forgeviz loaded."""

from __future__ import annotations

import pytest

from scenarios import reset_shell


@pytest.fixture(scope="session")
def ipython():
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance()


class Notebook:
    """Runs cells in the shell like a notebook does (pre/post_run_cell fire, counts advance)."""

    def __init__(self, shell) -> None:
        self.shell = shell

    def run(self, code: str):
        result = self.shell.run_cell(code, store_history=True)
        return result

    def ok(self, code: str):
        result = self.run(code)
        if result.error_before_exec or result.error_in_exec:
            raise AssertionError(f"cell failed: {result.error_before_exec or result.error_in_exec!r}\n{code}")
        return result.result

    def __getitem__(self, name: str):
        return self.shell.user_ns[name]


@pytest.fixture
def nb(ipython, request):
    """A notebook with ``%load_ext forgeviz`` run and torch imported; unloaded afterwards.

    A fault inside forgeviz is never raised into a cell, so this checks none was logged either
    (tests that inject one on purpose are marked ``faults_expected``).
    """
    from forgeviz._capture.session import get_session

    faults = len(get_session().faults)
    notebook = Notebook(ipython)
    notebook.ok("%load_ext forgeviz")
    notebook.ok("import torch, forgeviz")
    yield notebook
    new = get_session().faults[faults:]
    reset_shell(ipython)
    if new and request.node.get_closest_marker("faults_expected") is None:
        pytest.fail(f"forgeviz logged faults during the test: {new}")
