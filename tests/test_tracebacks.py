"""A failing op or backward keeps its traceback: the same exception, every frame of the user's, and no
forgeviz frame; the traceback IPython shows is the one it shows without forgeviz."""

from __future__ import annotations

import re
import traceback

import pytest
import torch

CODE = """\
def step(kind):
    x = torch.ones(3, requires_grad=True)
    loss = (x * 2).sum()
    if kind == "backward":
        loss.backward()
        loss.backward()  # the graph was freed: torch raises
    else:
        torch.ones(3, 4) @ torch.ones(3, 4)
"""


def frames(error: BaseException) -> list[traceback.FrameSummary]:
    return traceback.extract_tb(error.__traceback__)


def forgeviz_frames(error: BaseException) -> list[traceback.FrameSummary]:
    return [f for f in frames(error) if "/forgeviz/" in f.filename.replace("\\", "/")]


def user_frames(error: BaseException, user_file) -> list[str]:
    return [f.name for f in frames(error) if user_file(f.filename)]


@pytest.mark.parametrize("kind", ["backward", "op"])
def test_a_failing_call_keeps_every_user_frame_and_no_forgeviz_frame(nb, kind):
    # the oracle: the same code outside any cell, no forgeviz mode on the stack
    namespace = {"torch": torch}
    exec(compile(CODE, "<plain>", "exec"), namespace)  # noqa: S102 - the test's own code, run without forgeviz
    with pytest.raises(RuntimeError) as caught:
        namespace["step"](kind)
    plain = caught.value

    nb.ok(CODE)
    with_fv = nb.run(f"step({kind!r})").error_in_exec
    assert type(with_fv) is type(plain) is RuntimeError
    assert str(with_fv) == str(plain)
    assert ("backward through the graph a second time" if kind == "backward" else "cannot be multiplied") in str(plain)

    assert forgeviz_frames(with_fv) == [], [f"{f.filename}:{f.lineno} {f.name}" for f in forgeviz_frames(with_fv)]
    # every frame of the user's code is there, in order: the cell, then step()
    assert user_frames(plain, lambda name: name == "<plain>") == ["step"]
    assert user_frames(with_fv, lambda name: name.startswith("<ipython-input")) == ["<module>", "step"]
    assert forgeviz_frames(plain) == []


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def shown(shell, error: BaseException) -> str:
    """The traceback IPython shows for ``error`` (as run_cell shows it: from the cell's frame on), plain."""
    lines = shell.InteractiveTB.structured_traceback(type(error), error, error.__traceback__, tb_offset=1)
    return ANSI.sub("", "\n".join(lines))


def frame_headers(text: str) -> list[str]:
    """Each shown frame, as ``Cell In[N], line 3`` or ``File …/torch/_tensor.py:625, in Tensor.backward``."""
    headers = re.findall(r"^(?:Cell In\[\d+\], line \d+|File .+?, in [\w.<>]+)", text, flags=re.M)
    return [re.sub(r"In\[\d+\]", "In[N]", h) for h in headers]


@pytest.mark.parametrize("kind", ["backward", "op"])
def test_ipython_shows_the_traceback_it_shows_without_forgeviz(nb, kind):
    """No forgeviz frame and no frame of torch's dispatch to a mode (handle_torch_function, Tensor.backward
    before it asked the mode) in what IPython shows: the same frames as with forgeviz unloaded. What
    remains is IPython's line saying that it skipped hidden frames."""
    nb.ok(CODE)
    error = nb.run(f"step({kind!r})").error_in_exec
    text = shown(nb.shell, error)
    nb.ok("%unload_ext forgeviz")
    try:
        plain_error = nb.run(f"step({kind!r})").error_in_exec
        plain_text = shown(nb.shell, plain_error)
    finally:
        nb.ok("%load_ext forgeviz")

    assert type(error) is type(plain_error) and str(error) == str(plain_error)
    assert "forgeviz" not in text
    headers = frame_headers(text)
    assert not [h for h in headers if "overrides.py" in h or "handle_torch_function" in h], headers
    assert len(headers) >= 2 and headers == frame_headers(plain_text)
    user = "loss.backward()  # the graph was freed" if kind == "backward" else "torch.ones(3, 4) @ torch.ones(3, 4)"
    assert user in text and str(plain_error).splitlines()[0] in text
    if kind == "backward":  # torch's dispatch frames: hidden, and IPython says so
        assert "[... skipping hidden 2 frame]" in text and "skipping hidden" not in plain_text
    else:  # an op torch dispatches from C: nothing to hide
        assert "skipping hidden" not in text
