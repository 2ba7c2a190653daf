"""``swallowed-error``: an op raised inside a cell that went on, because the user's code caught the error
(the silent CPU fallback: a device mismatch caught by a broad ``except Exception``). Told after the cell,
once it is known which of the errors reached the notebook."""

from __future__ import annotations

import ast
import linecache
from typing import Callable, Optional

from ..session import _op_name
from .detector import CellEnd, Checkup, Detector
from .sites import Site, from_notebook, message

MAX_RAISED = 64  # places where ops raised, remembered per cell
_BROAD = {"Exception", "BaseException"}


def _handled_on_purpose(filename: Optional[str], line: Optional[int]) -> bool:
    """Whether the ``try`` around ``line`` of ``filename`` handles the error on purpose: none of its
    handlers is bare or catches ``Exception``/``BaseException``, and one binds what it caught and shows
    it (passes it to a call: print, a logger; or raises it). Such code shows the error rather than
    swallowing it; keeping it in a variable does not.

    >>> import linecache
    >>> linecache.cache["<doctest-cell>"] = (0, None, [
    ...     "try:\\n", "    t.T.view(12)\\n", "except RuntimeError as e:\\n", "    print(e)\\n"], "<doctest-cell>")
    >>> _handled_on_purpose("<doctest-cell>", 2)
    True
    >>> linecache.cache["<doctest-cell>"] = (0, None, [
    ...     "try:\\n", "    x + y\\n", "except Exception:\\n", "    pass\\n"], "<doctest-cell>")
    >>> _handled_on_purpose("<doctest-cell>", 2)
    False
    """
    if filename is None or line is None:
        return False
    try:
        tree = ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError):
        return False
    inner = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and node.body and node.body[0].lineno <= line <= max(
                getattr(n, "end_lineno", n.lineno) or n.lineno for n in node.body):
            if inner is None or node.lineno > inner.lineno:
                inner = node
    if inner is None or not inner.handlers:
        return False

    def names(expr) -> set:
        if expr is None:
            return {"Exception"}  # a bare except: broader still
        parts = expr.elts if isinstance(expr, ast.Tuple) else [expr]
        return {p.id if isinstance(p, ast.Name) else getattr(p, "attr", "") for p in parts}

    if any(names(h.type) & _BROAD for h in inner.handlers):
        return False

    def shows(h) -> bool:
        """The handler passes what it caught to a call (print, a logger, warnings.warn) or raises it."""
        for statement in h.body:
            for node in ast.walk(statement):
                if isinstance(node, (ast.Call, ast.Raise)) and any(
                        isinstance(n, ast.Name) and n.id == h.name for n in ast.walk(node)):
                    return True
        return False

    return any(h.name and shows(h) for h in inner.handlers)


class SwallowedError(Detector):
    """Remembers, per cell, where ops (and backwards) raised and which exception objects they were; after
    the cell, those not in the chain of the error that reached the notebook were caught by the user.

    >>> d = SwallowedError(None); d.op_raised("add", Site(3, 2, "", "<cell>", 2), RuntimeError("x"), list)
    >>> [(key[-1], entry[-1]) for key, entry in d._raised.items()]
    [('add', 1)]
    """

    kind = "swallowed-error"

    def __init__(self, doctor) -> None:
        super().__init__(doctor)
        # ops that raised in this cell, by place: (file, line, cell, cell line, op) → [operands, message,
        # type name, Site, the latest exceptions' ids, how many raised]
        self._raised: dict[tuple, list] = {}

    def uninstall(self) -> None:
        self._raised.clear()

    def begin_cell(self, cell: Optional[int]) -> None:
        self._raised.clear()

    def op_raised(self, op: str, site: Site, exc: BaseException, operands: Callable[[], list]) -> None:
        key = (site.filename, site.file_line, site.cell, site.line, op)
        entry = self._raised.get(key)
        if entry is None:
            if len(self._raised) >= MAX_RAISED:
                return
            entry = self._raised[key] = [operands(), message(exc), type(exc).__name__, site, [], 0]
        entry[4].append(id(exc))
        del entry[4][:-8]  # the error that reaches the notebook is one of the last raised
        entry[5] += 1

    def backward_failed(self, checkup: Checkup, failed: BaseException) -> None:
        """A failed backward the user's code may catch, as an op that raised."""
        if isinstance(failed, Exception):
            site = checkup.site()
            if site is not None and from_notebook(site):
                self.op_raised(_op_name(checkup.func)[1], site, failed, list)

    def end_cell(self, end: CellEnd) -> None:
        try:
            self._swallowed(end.error)
        finally:
            self._raised.clear()

    def _swallowed(self, error: Optional[BaseException]) -> None:
        if not self._raised:
            return
        chain: set[int] = set()
        while error is not None and id(error) not in chain and len(chain) < 32:
            chain.add(id(error))
            error = error.__cause__ or error.__context__
        for key, (operands, said, type_name, site, ids, raised) in self._raised.items():
            op = key[-1]
            swallowed = raised - (1 if chain.intersection(ids) else 0)  # one reached the notebook (or caused what did)
            if not swallowed or _handled_on_purpose(site.filename, site.file_line):
                continue
            devices = list(dict.fromkeys(d for d, _, _ in operands))
            dtypes = list(dict.fromkeys(t for _, t, _ in operands))
            described = ", ".join(f"{t}{s} on {d}" for d, t, s in operands) or "no tensors"
            first = said.strip().splitlines()[0][:200] if said.strip() else ""
            quoted = f' ("{first}")' if first else ""
            explanation = (f"At {site.text()}, {op} raised {type_name}{quoted} on {described}. The cell caught it and "
                           "went on without that error: what ran instead (the except branch) made the result.")
            if len(devices) > 1:
                fix = (f"Put the operands on one device (.to({devices[0]!r}) or .to({devices[-1]!r})) and catch only "
                       "the exception you expect, not every Exception.")
            elif len(dtypes) > 1:
                fix = "Cast the operands to one dtype, and catch only the exception you expect, not every Exception."
            else:
                fix = "Catch only the exception you expect (not every Exception), or let this one reach the cell."
            self.doctor.report(self.kind, site, explanation, fix, times=swallowed)
