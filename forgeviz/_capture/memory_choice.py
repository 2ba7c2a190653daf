"""Which memory tracker runs here: the native CPU ledger when it loads, else the dispatch-mode one."""

from __future__ import annotations

import os
from typing import Callable, Optional

from .ledger_dispatch import DispatchLedger
from .ledger_native import NativeLedger
from .memory import MemoryTracker

_told_fallback: list[str] = []


def make_tracker(max_events: int = 1_000_000, fault: Optional[Callable[[str], None]] = None, seed: bool = True,
                 backend: Optional[str] = None) -> MemoryTracker:
    """The fastest tracker that works here: the native CPU ledger, else the dispatch-mode one.

    ``backend`` (or ``$FORGEVIZ_MEMORY_BACKEND``) is ``"native"``, ``"dispatch"`` or ``"auto"``.
    Under "auto", a native ledger that cannot load is reported once through ``fault`` and the
    dispatch-mode tracker is used instead.

    >>> make_tracker(backend="dispatch").backend
    'dispatch'
    """
    backend = backend or os.environ.get("FORGEVIZ_MEMORY_BACKEND") or "auto"
    if backend not in ("auto", "native", "dispatch"):
        raise ValueError(f"memory backend: expected 'auto', 'native' or 'dispatch', got {backend!r}")
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
