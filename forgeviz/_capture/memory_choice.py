"""Which memory tracker runs here: the native CPU ledger when it loads, else the dispatch-mode one."""

from __future__ import annotations

import os
from typing import Callable, Optional

from . import native
from .ledger_dispatch import DispatchLedger
from .ledger_native import NativeLedger
from .memory import MemoryTracker
from .native.background import background

_told_fallback: list[str] = []


def chosen_backend(backend: Optional[str] = None) -> str:
    """``backend``, else ``$FORGEVIZ_MEMORY_BACKEND``, else ``"auto"``; checked.

    >>> chosen_backend("native")
    'native'
    """
    backend = backend or os.environ.get("FORGEVIZ_MEMORY_BACKEND") or "auto"
    if backend not in ("auto", "native", "dispatch"):
        raise ValueError(f"memory backend: expected 'auto', 'native' or 'dispatch', got {backend!r}")
    return backend


def make_tracker(max_events: int = 1_000_000, fault: Optional[Callable[[str], None]] = None, seed: bool = True,
                 backend: Optional[str] = None, build: bool = True) -> MemoryTracker:
    """The fastest tracker that works here: the native CPU ledger, else the dispatch-mode one.

    ``backend`` (or ``$FORGEVIZ_MEMORY_BACKEND``) is ``"native"``, ``"dispatch"`` or ``"auto"``.
    Under "auto", a native ledger that cannot load is reported once through ``fault`` and the
    dispatch-mode tracker is used instead. ``build=False`` (``%load_ext forgeviz``, which builds in
    the background), or a background build running: under "auto", a native ledger not built yet
    means the dispatch-mode one, now.

    >>> make_tracker(backend="dispatch").backend
    'dispatch'
    """
    backend = chosen_backend(backend)
    if background().state == "building":  # never a second compile beside it, nor a wait for it
        build = False
    if backend == "auto" and not build and native.loaded() is None and not native.library_path().exists():
        return MemoryTracker(max_events, fault, seed, ledger=DispatchLedger)
    if backend != "dispatch":
        try:
            return MemoryTracker(max_events, fault, seed, ledger=NativeLedger)
        except RuntimeError as exc:
            if backend == "native":
                raise
            if fault is not None and not _told_fallback:
                _told_fallback.append(str(exc))
                fault(f"the native memory tracker is unavailable ({exc}); using the dispatch-mode tracker, "
                      "which costs more per op")
    return MemoryTracker(max_events, fault, seed, ledger=DispatchLedger)


def switch_to_native(old: MemoryTracker, fault: Optional[Callable[[str], None]] = None) -> MemoryTracker:
    """A native-ledger tracker to take over from ``old`` (a stopped dispatch-mode one) at a cell
    boundary, once the native ledger was built in the background.

    It is seeded with the storages alive now (the ledger sees them from here on), keeping what ``old``
    knew of each: its category, op and line. It starts its own timeline: the events before the switch
    stay in ``old``. A storage a live autograd Node saved goes back to its own category (the new
    tracker claims what Nodes save from now on). Raises ``RuntimeError`` when the ledger cannot load.

    >>> new = switch_to_native(make_tracker(backend="dispatch"))  # doctest: +SKIP
    >>> new.backend  # doctest: +SKIP
    'native'
    """
    carry = {key: rec for key, rec in old.ledger.live()}
    return MemoryTracker(old.max_events, fault, seed=True, ledger=NativeLedger, carry=carry)
