"""A fresh install's first ``%load_ext forgeviz``: the native libraries are built in the background,
the cell returns at once with the progress in its output (and in the side panel's state), the
Python paths run until the build lands, then the native ones, from the next cell on; without a
compiler, the message says what is missing and what the user gets, and the cells work as before.

Each test runs a real kernel (nbclient) with an empty ``FORGEVIZ_CACHE``. The build is held in
flight by ``CXX`` pointing at a wrapper that waits for a flag file the test creates: no timing.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import textwrap

import nbformat
import pytest
from nbclient import NotebookClient

from scenarios import S1

# What a cell prints for the test to read: one JSON line.
REPORT = "import json as _json\nprint('REPORT ' + _json.dumps({}))"

STATE = """\
from forgeviz import panel as _panel
from forgeviz._capture import native as _native
from forgeviz._capture.native.background import background as _background
from forgeviz._capture.session import get_session as _get_session
_s = _panel.host().state(None).native
_memory = _get_session().memory
"""


class Kernel:
    """A real kernel, cell by cell, with the outputs kept (``outputs(i)``: text of cell ``i``)."""

    def __init__(self, tmp_path) -> None:
        self.nb = nbformat.v4.new_notebook()
        self.client = NotebookClient(self.nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})

    def run(self, code: str) -> int:
        cell = nbformat.v4.new_code_cell(textwrap.dedent(code))
        self.nb.cells.append(cell)
        index = len(self.nb.cells) - 1
        self.client.execute_cell(cell, index)
        return index

    def text(self, index: int) -> str:
        out = []
        for o in self.nb.cells[index].get("outputs", []):
            if o.get("output_type") == "stream":
                out.append(o["text"])
            elif "data" in o:
                out.append(o["data"].get("text/plain", ""))
            elif o.get("output_type") == "error":
                out.append("\n".join(o["traceback"]))
        return "".join(out)

    def report(self, code: str, expr: str) -> dict:
        index = self.run(code + "\n" + REPORT.format(expr))
        text = self.text(index)
        lines = [line for line in text.splitlines() if line.startswith("REPORT ")]
        assert lines, f"the cell printed no report:\n{text}"
        return json.loads(lines[-1][len("REPORT "):])


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty forgeviz cache for the kernels this test starts."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("FORGEVIZ_CACHE", str(cache))
    monkeypatch.delenv("FORGEVIZ_MEMORY_BACKEND", raising=False)
    return cache


def held_compiler(tmp_path) -> tuple:
    """A ``CXX`` that waits for ``flag`` to exist, then runs the real g++."""
    gxx = shutil.which("g++") or shutil.which("c++")
    if gxx is None:
        pytest.fail("this test needs g++ (./dev.sh test installs it)")
    flag = tmp_path / "go"
    wrapper = tmp_path / "held-g++"
    wrapper.write_text(f"#!/bin/sh\nwhile [ ! -e '{flag}' ]; do sleep 0.1; done\nexec '{gxx}' \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return wrapper, flag


S1_CHECK = S1 + """\
loss.backward()
_unread = len(_get_session().store._unread)  # passes recorded by the native hooks, not read yet
"""


def test_first_load_returns_while_both_libraries_build_then_they_are_used_from_the_next_cell(tmp_path, fresh,
                                                                                         monkeypatch):
    cxx, flag = held_compiler(tmp_path)
    monkeypatch.setenv("CXX", str(cxx))
    kernel = Kernel(tmp_path)
    try:
        run_while_held(kernel, flag)
    finally:
        flag.touch()  # never leave a compiler waiting


def run_while_held(kernel: Kernel, flag) -> None:
    with kernel.client.setup_kernel():
        load = kernel.run("%load_ext forgeviz")  # returns: the compiler waits for the flag
        assert "Building forgeviz's native helpers in the background (memory tracker" in kernel.text(load)
        assert "dispatch-mode tracker" in kernel.text(load) and "Python hooks" in kernel.text(load)

        before = kernel.report("import torch\n" + STATE + S1_CHECK + "big = torch.ones(1000, 1000)\n", """{
            "panel": _s.state, "panel_message": _s.message, "loaded": _native.loaded() is not None,
            "hooks": _native.hooks() is not None, "backend": _memory.backend, "grad": x.grad.tolist(),
            "unread": _unread, "cache": sorted(p.name for p in _native.cache_dir().glob("*.so")),
            "tracked": _memory.tracked_bytes().get(big.untyped_storage().data_ptr()),
            "nbytes": big.untyped_storage().nbytes()}""")
        assert before["panel"] == "building" and "Building forgeviz's native helpers" in before["panel_message"]
        assert before["cache"] == [] and not before["loaded"] and not before["hooks"]
        assert before["backend"] == "dispatch" and before["tracked"] == before["nbytes"] == 4_000_000
        assert before["grad"] == [64.0] and before["unread"] == 0  # Python hooks recorded the pass

        flag.touch()  # the compiler runs now: both libraries, one after the other
        landed = kernel.report(STATE + "_done = _background().wait(600)\n",
                               """{"done": _done, "state": _background().state,
                                   "built": _background().built, "errors": _background().errors,
                                   "backend": _memory.backend, "hooks": _native.hooks() is not None}""")
        assert landed["done"] and landed["errors"] == {}, landed
        assert landed["state"] == "ready" and landed["built"] == ["memory tracker", "gradient hooks", "gradient reader"]
        # not in the middle of a cell: the switch waits for the next cell boundary
        assert landed["backend"] == "dispatch" and not landed["hooks"]
        assert "forgeviz's native helpers are ready (built in" in kernel.text(load)  # updated by display_id
        assert "Building" not in kernel.text(load)

        after = kernel.report(STATE + S1_CHECK + "small = torch.ones(256)\n", """{
            "panel": _s.state, "panel_message": _s.message, "loaded": _native.loaded() is not None,
            "hooks": _native.hooks() is not None, "backend": _memory.backend, "grad": x.grad.tolist(),
            "reader": _native.reader() is not None, "unread": _unread,
            "big": _memory.tracked_bytes().get(big.untyped_storage().data_ptr()),
            "big_category": [r.category for r in _memory.records() if r.nbytes == 4_000_000],
            "small": _memory.tracked_bytes().get(small.untyped_storage().data_ptr())}""")
        assert after["loaded"] and after["hooks"] and after["reader"] and after["backend"] == "native"
        assert after["grad"] == [64.0] and after["unread"] == 1  # the native hooks recorded this pass
        assert after["big"] == 4_000_000 and after["small"] == 1024  # seeded, and allocated since
        assert after["big_category"] == [6]  # a temporary (CATEGORIES' order), as the dispatch tracker had it
        assert after["panel"] == "ready" and "since cell [" in after["panel_message"]
        assert "memory timeline restarted at cell [" in after["panel_message"]
        assert "run natively since cell [" in kernel.text(load)


@pytest.mark.parametrize("how", ["CXX names a missing file", "no compiler on PATH"])
def test_without_a_compiler_the_message_says_what_is_missing_and_the_cells_work(tmp_path, fresh, monkeypatch, how):
    if how == "CXX names a missing file":
        monkeypatch.setenv("CXX", str(tmp_path / "no-such-g++"))
        missing = "no-such-g++"
    else:
        monkeypatch.delenv("CXX", raising=False)
        bare = tmp_path / "bin"  # python and sh only: no g++, c++ or clang++
        bare.mkdir()
        for tool in ("sh", "nice"):
            found = shutil.which(tool)
            if found:
                os.symlink(found, bare / tool)
        monkeypatch.setenv("PATH", str(bare))
        missing = "needs a C++ compiler (g++), and none was found on PATH"
    kernel = Kernel(tmp_path)
    with kernel.client.setup_kernel():
        load = kernel.run("%load_ext forgeviz")
        assert "dispatch-mode tracker" in kernel.text(load) and "Python hooks" in kernel.text(load)
        # STATE reads the panel's status, so the wait comes first (the failing build may still be starting)
        got = kernel.report("import torch\nfrom forgeviz._capture.native.background import background as _background\n"
                            "_background().wait(60)\n" + STATE + S1_CHECK
                            + "big = torch.ones(1000, 1000)\n", """{
            "state": _background().state, "message": _s.message, "panel": _s.state, "grad": x.grad.tolist(),
            "backend": _memory.backend, "hooks": _native.hooks() is not None, "unread": _unread,
            "tracked": _memory.tracked_bytes().get(big.untyped_storage().data_ptr())}""")
        assert got["state"] == got["panel"] == "failed"
        assert missing in got["message"], got["message"]
        assert "memory tracking uses the dispatch-mode tracker" in got["message"]
        assert "gradients are recorded by Python hooks" in got["message"]
        # the user's cells: the same numbers as torch's, through the Python paths
        assert got["grad"] == [64.0] and got["unread"] == 0 and not got["hooks"]
        assert got["backend"] == "dispatch" and got["tracked"] == 4_000_000
        again = kernel.report(STATE + "y2 = (torch.ones(3) * 2).sum()", """{"y2": y2.item(), "backend": _memory.backend,
                                                                             "state": _background().state}""")
        assert again == {"y2": 6.0, "backend": "dispatch", "state": "failed"}
