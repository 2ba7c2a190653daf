"""``graph-break``: ``torch.compile`` broke a compiled function's graph in this cell (a ``print``, a
``.item()``, a branch on a tensor's value inside ``forward``). Told after the cell, once per place,
in Dynamo's own words, at the user's line that broke it.

Where it comes from: Dynamo keeps a ``GraphCompileReason`` (its ``reason`` and the user's frames,
``user_stack``) for every graph break it compiles around, in ``torch._dynamo.utils.graph_break_reasons``,
always (no logging or config flag is needed, so forgeviz changes nothing Dynamo does; ``reset()``
clears it). The detector notes where that list ends when a cell begins and reads what the cell added.
A break Dynamo compiled once and then runs from its cache is not recompiled, so it is told once.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Optional

from .detector import CellEnd, Detector
from .sites import in_library, site_of

_URL = re.compile(r"please visit: (\S+)")
_FILE_LINE = 'File "{}", line {},'  # how Dynamo's data-dependent branch message names the branch's line
_FORGEVIZ = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def ours(filename: str) -> bool:
    """Whether ``filename`` is forgeviz's own code.

    >>> ours(__file__), ours("<ipython-input-3-abc>")
    (True, False)
    """
    return os.path.abspath(filename).startswith(_FORGEVIZ)


def _reasons() -> Optional[list]:
    """Dynamo's list of graph-break reasons, or None while Dynamo was never imported (nothing compiled)."""
    utils = sys.modules.get("torch._dynamo.utils")
    reasons = getattr(utils, "graph_break_reasons", None)
    return reasons if isinstance(reasons, list) else None


def dynamo_words(reason: str) -> tuple[str, str, list[str], str]:
    """Dynamo's reason split into its title, its explanation, its hints and its web page ("" if none).

    >>> dynamo_words("Failed to trace builtin operator\\n  Explanation: Dynamo does not know how to trace "
    ...              "builtin operator `print`\\n  Hint: Avoid `print`.\\n\\n  Developer debug context: x\\n\\n"
    ...              " For more details about this graph break, please visit: https://g.io/gb0059.html")[:2]
    ('Failed to trace builtin operator', 'Dynamo does not know how to trace builtin operator `print`')
    >>> dynamo_words("generic_jump TensorVariable()")
    ('generic_jump TensorVariable()', '', [], '')
    """
    lines = [line.strip() for line in reason.strip().splitlines()]
    title = lines[0] if lines else ""
    explanation = next((line.removeprefix("Explanation:").strip() for line in lines
                        if line.startswith("Explanation:")), "")
    hints = [line.removeprefix("Hint:").strip() for line in lines if line.startswith("Hint:")]
    found = _URL.search(reason)
    return title, explanation, hints, found.group(1) if found else ""


def _branch_reason(filename: str, line: int) -> Optional[str]:
    """Dynamo's full message for a data-dependent branch at ``filename:line``: its GraphCompileReason says
    only ``generic_jump TensorVariable()``; the words are in its counters (the one naming the branch's line
    when one does: Dynamo adds the line when it can trace the condition's computation; else the newest)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counted = getattr(utils, "counters", {}).get("unimplemented", {})
    branches = [key for key in list(counted) if isinstance(key, str) and key.startswith("Data-dependent branching")]
    where = _FILE_LINE.format(filename, line)
    return next((key for key in branches if where in key), branches[-1] if branches else None)


def fix_for(title: str, explanation: str, hints: list[str]) -> str:
    """A plain-words fix for a graph break, by what Dynamo said (its first hint when none fits better).

    >>> fix_for("Unsupported Tensor.item() call with capture_scalar_outputs=False", "", [])[:56]
    'Set torch._dynamo.config.capture_scalar_outputs = True b'
    """
    said = f"{title} {explanation}"
    if "`print`" in said:
        fix = ("Move the print out of the compiled forward (print after the call), or put it under "
               "`if not torch.compiler.is_compiling():`, which Dynamo leaves out of the graph.")
    elif "Tensor.item()" in said or "Tensor.tolist()" in said:
        fix = ("Set torch._dynamo.config.capture_scalar_outputs = True before compiling, or keep the value a "
               "tensor inside forward (no .item()).")
    elif title.startswith(("Data-dependent branching", "generic_jump")):
        fix = ("Branch with tensor ops instead of Python's `if`: torch.where(cond, a, b), or torch.cond for "
               "two different computations.")
    elif hints:
        fix = hints[0]
    else:
        fix = "Move what Dynamo cannot trace out of the compiled function."
    return fix + " torch.compile(..., fullgraph=True) makes any graph break an error at its line."


class GraphBreak(Detector):
    """Reads the graph-break reasons Dynamo added during a cell (by where its list ended when the cell began)."""

    kind = "graph-break"

    def __init__(self, doctor) -> None:
        super().__init__(doctor)
        self._mark: tuple[int, object] = self._end()  # (length, last reason) of Dynamo's list: old breaks stay untold

    @staticmethod
    def _end() -> tuple[int, object]:
        reasons = _reasons()
        return (len(reasons), reasons[-1]) if reasons else (0, None)

    def begin_cell(self, cell: Optional[int]) -> None:
        self._mark = self._end()

    def end_cell(self, end: CellEnd) -> None:
        reasons = _reasons()
        length, last = self._mark
        self._mark = self._end()
        if not reasons:
            return
        # torch._dynamo.reset() empties the list: then everything in it is new
        start = length if length and len(reasons) >= length and reasons[length - 1] is last else 0
        places: dict[tuple, int] = {}  # (filename, line, function, reason) → breaks there this cell
        for compiled in reasons[start:]:
            frames = getattr(compiled, "user_stack", None) or []
            stack = [f for f in frames if not ours(f.filename)]
            if not stack:  # a break in forgeviz's own frames alone: forgeviz's doing, never the user's
                if frames:
                    self._ours(compiled)
                continue
            # the innermost frame of the user's code (the innermost of all when every one is a library's)
            frame = next((f for f in reversed(stack) if not in_library(f.filename)), stack[-1])
            key = (frame.filename, frame.lineno, frame.name, str(getattr(compiled, "reason", "")))
            places[key] = places.get(key, 0) + 1
        for (filename, line, function, reason), times in places.items():
            self._tell(filename, line, function, reason, times)

    def _ours(self, compiled) -> None:
        """Say that forgeviz's own code made Dynamo break a graph (a forgeviz bug: it must add none)."""
        frame = compiled.user_stack[-1]
        title = dynamo_words(str(getattr(compiled, "reason", "")))[0]
        self.doctor.warn(f"forgeviz's own {frame.name} ({os.path.basename(frame.filename)}:{frame.lineno}) made "
                         f"torch.compile break a graph: {title}")

    def _tell(self, filename: str, line: int, function: str, reason: str, times: int) -> None:
        if reason.startswith("generic_jump"):
            reason = _branch_reason(filename, line) or reason
        title, said, hints, url = dynamo_words(reason)
        site = site_of(filename, line)
        where = site.text() if site is not None else f"{filename}:{line}"
        code = f" (`{site.source.strip()}`)" if site is not None and site.source.strip() else ""
        explanation = (f"torch.compile broke the graph of `{function}` at {where}{code}"
                       f"{'' if times == 1 else f', {times} times'}. Dynamo says: {title}"
                       f"{': ' + said if said else ''}. The code before and after it run as separate compiled "
                       f"graphs, with this line run by Python between them" + (f" ({url})." if url else "."))
        self.doctor.report(self.kind, site, explanation, fix_for(title, said, hints), times=times)
