"""``untraced``: forgeviz's own torch calls, hidden from every TorchFunctionMode and from the memory timeline.

A leaf module: it imports torch only. The native library, once loaded, hands it the CPU ledger's
pause switch (:func:`use_native_pause`), so forgeviz's own CPU allocations are not the user's memory.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

_pause: Optional[Callable[[int], None]] = None  # the native library's fv_pause, once it is loaded


def use_native_pause(pause: Optional[Callable[[int], None]]) -> None:
    """Pause the native CPU ledger with ``pause(1)`` / ``pause(-1)`` inside every ``untraced`` block.

    >>> import forgeviz._capture.untraced as u
    >>> calls, before = [], u._pause
    >>> use_native_pause(calls.append)
    >>> with untraced():
    ...     pass
    >>> use_native_pause(before); calls
    [1, -1]
    """
    global _pause
    _pause = pause


class untraced:
    """A context in which forgeviz's own torch calls reach no TorchFunctionMode (ours included),
    and their CPU allocations are not recorded as the user's memory.

    Views use it while they walk graphs inside a capturing cell.

    >>> with untraced():
    ...     torch.ones(2).sum().item()
    2.0
    """

    __slots__ = ("_off", "_pause")

    def __enter__(self) -> "untraced":
        self._off = torch._C.DisableTorchFunction()
        self._off.__enter__()
        self._pause = _pause
        if self._pause is not None:
            self._pause(1)
        return self

    def __exit__(self, *exc) -> None:
        if self._pause is not None:
            self._pause(-1)
        self._off.__exit__(*exc)


class untraced_no_grad(untraced):
    """:class:`untraced` and ``torch.no_grad()`` in one context: forgeviz's own reductions, several a backward on
    the device path, where ``torch.no_grad()``'s own Python (its object, ``__init__``, ``__enter__``, ``__exit__``)
    cost more calls than the reductions' bookkeeping around it.

    >>> x = torch.ones(2, requires_grad=True)
    >>> with untraced_no_grad():
    ...     (x * 2).requires_grad
    False
    >>> torch.is_grad_enabled()
    True
    """

    __slots__ = ("_grad",)

    def __enter__(self) -> "untraced_no_grad":
        self._grad = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        return untraced.__enter__(self)

    def __exit__(self, *exc) -> None:
        try:
            untraced.__exit__(self, *exc)
        finally:
            torch._C._set_grad_enabled(self._grad)
