"""A failing op or backward keeps its traceback: the same exception, every frame of the user's, and at
most one forgeviz frame, whose line says the call is torch's."""

from __future__ import annotations

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
def test_a_failing_call_shows_at_most_one_forgeviz_frame_and_every_user_frame(nb, kind):
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

    ours = forgeviz_frames(with_fv)
    assert len(ours) == 1, [f"{f.filename}:{f.lineno} {f.name}" for f in ours]
    assert "forgeviz only watches (errors are torch's)" in ours[0].line
    # every frame of the user's code is there, in order: the cell, then step()
    assert user_frames(plain, lambda name: name == "<plain>") == ["step"]
    assert user_frames(with_fv, lambda name: name.startswith("<ipython-input")) == ["<module>", "step"]
    assert forgeviz_frames(plain) == []
