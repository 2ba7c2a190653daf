"""The one fault boundary. Wherever forgeviz runs inside the user's code (capture() and memory_trace(),
the cell hooks, the TorchFunctionMode, Node, tensor, module and optimizer hooks, the memory tracker),
a failure of forgeviz's own becomes a report (a warning in the views and a log line, through the
session's ``fault``) and the user's code goes on with its result and its exceptions unchanged.

Only ``Exception`` is caught: KeyboardInterrupt and SystemExit are the user's. The hottest paths (the
mode's per-op work, the per-Node gradient hooks) keep an inline ``try``/``except`` that calls
:func:`report`, which costs nothing until a fault; everything else enters :class:`boundary` or is
:func:`guarded`.
"""

from __future__ import annotations

import functools
from typing import Callable

Report = Callable[[str], None]


def message(exc: BaseException) -> str:
    """The message of a built-in or torch exception (its one string argument), else ""; never str() of
    a user's object (whose ``__str__`` could run anything, or raise inside the boundary).

    >>> message(RuntimeError("shapes differ")), message(KeyError(object()))
    ('shapes differ', '')
    """
    args = exc.args
    module = type(exc).__module__ or ""
    if (module == "builtins" or module.split(".")[0] in ("torch", "forgeviz")) and len(args) == 1 \
            and type(args[0]) is str:
        return args[0]
    return ""


def describe(what: str, exc: BaseException) -> str:
    """The text of a fault: what failed, and the exception's type and message.

    >>> describe("tagging mul", ValueError("bad tag"))
    'tagging mul failed: ValueError: bad tag'
    """
    said = message(exc)
    return f"{what} failed: {type(exc).__name__}{': ' + said if said else ''}"


def report(fault: Report, what: str, exc: BaseException) -> None:
    """Report forgeviz's own ``exc`` through ``fault`` (a session's or a tracker's). What the hot paths'
    inline ``except Exception`` calls; a report that itself fails is dropped (it must not raise in the
    user's code either).

    >>> seen = []; report(seen.append, "reading a line", KeyError("x")); seen
    ['reading a line failed: KeyError: x']
    """
    boundary(fault, what).__exit__(type(exc), exc, None)  # the one place that words and sends a fault


class boundary:
    """A ``with`` block whose faults are reported through ``fault`` instead of raised. ``failed`` is ""
    until one is, then the fault's text (for the caller's fallback; the exception itself is not kept:
    its traceback would hold the user's frames and tensors).

    >>> seen = []
    >>> with boundary(seen.append, "drawing the graph") as guard:
    ...     raise ValueError("no layout")
    >>> guard.failed == seen[0] == 'drawing the graph failed: ValueError: no layout'
    True
    """

    __slots__ = ("fault", "what", "failed")

    def __init__(self, fault: Report, what: str) -> None:
        self.fault = fault
        self.what = what
        self.failed = ""

    def __enter__(self) -> "boundary":
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if kind is None or not issubclass(kind, Exception):
            return False  # no fault, or the user's KeyboardInterrupt / SystemExit: theirs
        self.failed = describe(self.what, exc)
        try:
            self.fault(self.failed)
        except Exception:  # noqa: BLE001 - the report of a fault is the last resort: nowhere left to tell
            pass
        return True


def guarded(what: str):
    """Decorate a hook that is a method of an object with a ``fault`` (a session, a tracker, a ledger, the
    module stack) so that its body runs inside the boundary; on a fault it returns None (a hook's
    "change nothing").

    >>> class Hooks:
    ...     def __init__(self): self.faults = []; self.fault = self.faults.append
    ...     @guarded("reading a module call")
    ...     def forward_pre(self, module, args): raise ValueError("no module")
    >>> h = Hooks(); h.forward_pre(None, ()), h.faults
    (None, ['reading a module call failed: ValueError: no module'])
    """

    def decorate(method):
        @functools.wraps(method)
        def hook(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the boundary itself
                report(self.fault, what, exc)
                return None

        return hook

    return decorate
