"""Build forgeviz's missing native libraries in a background thread, so ``%load_ext forgeviz`` returns
at once on a fresh machine (compiling all three takes about a minute on 2 cores).

One build per process, the compilers run one after the other at low priority (``nice``), and a
lock in the cache folder keeps two kernels from building the same library at once. Listeners (the
loading cell's output, the side panel) hear each change: what is compiling and for how long, then
what was built, or what failed and what the user gets without it. Until a library lands, and until
forgeviz adopts it at the next cell boundary (``native.adopt()``), the Python paths run: the
dispatch-mode memory tracker and Python gradient hooks, correct and slower.

>>> build = background()
>>> build.start(libraries=[]) is None  # nothing missing: nothing to build, nothing to say
True
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Optional

from ...model.panel import NativeStatus
from . import build, build_hooks, build_reader, defer, hooks_library_path, library_path, reader_library_path

log = logging.getLogger("forgeviz")

# What a user has while a library is missing, for each library (cited from the README's figures).
WITHOUT = {
    "memory tracker": "memory tracking uses the dispatch-mode tracker",
    "gradient hooks": "gradients are recorded by Python hooks",
    "gradient reader": "a recording (forgeviz.record) reads the applied gradients on a Python thread",
}
SLOWER = "correct, but they cost more per op (README: 'What capture costs')"

Library = tuple[str, Callable[[], Path], Callable[..., Path]]  # (name, its path, its build)
LIBRARIES: list[Library] = [("memory tracker", library_path, build),
                            ("gradient hooks", hooks_library_path, build_hooks),
                            ("gradient reader", reader_library_path, build_reader)]


class BackgroundBuild:
    """The one background build of this process (:func:`background`): its state and its listeners.

    ``state`` is None (nothing to build), ``"building"``, ``"ready"`` (every library built),
    ``"partial"`` (some built, some failed) or ``"failed"`` (none built).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: list[Callable[[NativeStatus], None]] = []
        self._thread: Optional[threading.Thread] = None
        self._t0 = 0.0
        self._last_tick = -1
        self.state: Optional[str] = None
        self.step = ""  # the library compiling now
        self.built: list[str] = []
        self.errors: dict[str, str] = {}
        self.seconds = 0.0  # how long the build took, once done
        self.adopted_at: Optional[int] = None  # the cell from which forgeviz uses what was built
        self.note = ""  # what the switch at that cell could not carry over
        self.done = threading.Event()

    # --- control --------------------------------------------------------------------------
    def start(self, libraries: Optional[list[Library]] = None) -> Optional[NativeStatus]:
        """Build the missing ``libraries`` (default: all) in a daemon thread, once per process.
        Returns the status, or None when nothing is missing and nothing was built here."""
        with self._lock:
            if self.state is not None:  # running, or done: a build (or its failure) happens once
                return self.status()
            missing = [lib for lib in (LIBRARIES if libraries is None else libraries) if not lib[1]().exists()]
            if not missing:
                return None
            self.state, self._t0 = "building", time.monotonic()
            self.step = missing[0][0]
            defer()  # what lands is used from the next cell boundary on
            self._thread = threading.Thread(target=self._run, args=(missing,), name="forgeviz-native-build",
                                            daemon=True)
            self._thread.start()
            return self.status()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until the build is done (True), or ``timeout`` seconds (False); True at once when no
        build was started (nothing was missing).

        >>> BackgroundBuild().wait()
        True
        """
        return self.state is None or self.done.wait(timeout)

    def listen(self, listener: Callable[[NativeStatus], None]) -> None:
        """Call ``listener(status)`` on every change (from the build's thread)."""
        self._listeners.append(listener)

    def unlisten(self, listener: Callable[[NativeStatus], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def adopted(self, cell: Optional[int], note: str = "") -> None:
        """forgeviz uses what was built from cell ``cell`` on; ``note`` says what the switch could not carry."""
        self.adopted_at, self.note = cell, note
        self._publish()

    # --- what to say ----------------------------------------------------------------------
    def status(self) -> Optional[NativeStatus]:
        """What the build is doing or did, in one sentence (None: nothing was built here)."""
        state = self.state
        if state is None:
            return None
        if state == "building":
            seconds = time.monotonic() - self._t0
            message = (f"Building forgeviz's native helpers in the background ({self.step}, {seconds:.0f} s…). "
                       f"Until they are ready, {WITHOUT['memory tracker']} and {WITHOUT['gradient hooks']}: "
                       f"{SLOWER}.")
            return NativeStatus(type="native", state=state, seconds=round(seconds, 1), message=message)
        when = (f"since cell [{self.adopted_at}]" if self.adopted_at is not None else "from the next cell on")
        took = f"{self.seconds:.0f} s"
        if state == "ready":
            message = (f"forgeviz's native helpers are ready (built in {took}): memory tracking and gradient "
                       f"recording run natively {when}.")
        else:
            failed = "; ".join(f"the {name}: {_first_lines(error)}" for name, error in self.errors.items())
            instead = " and ".join(WITHOUT[name] for name in self.errors)
            if state == "partial":
                message = (f"forgeviz built its native {' and '.join(self.built)} in {took} (used {when}), but not "
                           f"its {' and '.join(self.errors)} ({failed}). Without it, {instead}: {SLOWER}.")
            else:
                message = (f"forgeviz could not build its native helpers ({failed}). forgeviz works without them: "
                           f"{instead}: {SLOWER}.")
        if self.note:
            message += " " + self.note
        return NativeStatus(type="native", state=state, seconds=round(self.seconds, 1), message=message)

    # --- the thread -----------------------------------------------------------------------
    def _run(self, missing: list[Library]) -> None:
        self._publish()
        for name, _, make in missing:
            self.step = name
            self._publish()
            try:
                make(background=True, tick=self._tick)
                self.built.append(name)
            except Exception as exc:  # noqa: BLE001 - reported once, below; forgeviz runs its Python paths
                self.errors[name] = str(exc)
        self.seconds = time.monotonic() - self._t0
        self.state = "failed" if not self.built else "partial" if self.errors else "ready"
        status = self.status()
        if self.errors:
            log.warning("forgeviz: %s", status.message if status else self.errors)
        self._publish()  # before done: a listener's last word is out when a waiter wakes
        self.done.set()

    def _tick(self) -> None:
        second = int(time.monotonic() - self._t0)
        if second != self._last_tick:
            self._last_tick = second
            self._publish()

    def _publish(self) -> None:
        status = self.status()
        if status is None:
            return
        for listener in list(self._listeners):
            try:
                listener(status)
            except Exception as exc:  # noqa: BLE001 - a listener's fault never stops the build
                log.warning("forgeviz: telling about the native build failed: %r", exc)


def _first_lines(text: str, limit: int = 400) -> str:
    """An error's first lines, at most ``limit`` characters (a compiler's output can be long; the log has it all).

    >>> _first_lines("g++: error\\n" + "x" * 500, 20)
    'g++: error xxxxxxxx…'
    """
    flat = " ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


_build = BackgroundBuild()


def background() -> BackgroundBuild:
    """This process's one background build."""
    return _build
