"""The kernel side of the JupyterLab side panel (src/lab/panel.ts): the comm target
``forgeviz.panel``, registered by ``%load_ext forgeviz``.

While at least one panel is connected, the kernel:
- sends a ``PanelState`` (the namespace's tensors, the doctor's findings, the widgets the panel draws)
  when a panel connects, when it asks (``refresh``), and after each cell;
- watches ops, backwards and optimizer steps with the doctor (``_capture/doctor.py``);
- pushes ``PanelLive`` (live bytes by category) from a background thread at most every
  ``LIVE_INTERVAL_S`` while a cell runs, and updates the panel's memory timeline with it;
- pushes ``NativeStatus`` while forgeviz builds its native libraries in the background, and when
  that build is done (the build's thread sends it).
With no panel connected none of that runs: no per-cell work, no thread.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any, Optional

from ._capture.doctor import disable_doctor, enable_doctor
from ._capture.fault import boundary
from ._capture.namespace import TensorLister, tensor_with_root, unwatch_modules, watch_modules
from ._capture.native.background import background
from ._capture.session import CaptureSession
from ._capture.untraced import untraced
from .model.memory import CATEGORIES
from .model.panel import (
    LIVE_INTERVAL_S,
    PANEL_TARGET,
    PANEL_VERSION,
    NativeStatus,
    PanelLive,
    PanelState,
    TensorListing,
)

# Graphs of earlier backwards kept drawable (a panel may have pinned one); older ones are closed.
KEEP_GRAPHS = 3
# This kernel process, so a panel can tell a restarted kernel from the one it knew.
KERNEL_ID = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


class PanelHost:
    """The comm target and what it sends. ``install``/``uninstall`` are exact inverses.

    >>> from forgeviz._capture.session import CaptureSession
    >>> host = PanelHost(CaptureSession(), user_ns={})
    >>> host.state(None).tensors.rows, host.open
    ([], False)
    """

    def __init__(self, session: CaptureSession, user_ns: Mapping[str, Any], comm_manager: Any = None) -> None:
        self.session = session
        self.user_ns = user_ns
        self.comm_manager = comm_manager
        self.comms: list = []
        self._memory_widget = None
        self._graph_widget = None
        self._graph_roots: list = []
        # graphs of earlier backwards, kept drawable a while: a panel may have pinned one
        self._older_graphs: list = []
        self._cell: Optional[int] = None
        self._seq = 0
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()  # one live update at a time, and none while the cell ends
        self._lister = TensorLister()
        self._sent_listing: Optional[tuple] = None  # what the last broadcast listing was (``_listing_key``)
        self._earlier_findings: list = []  # the doctor's, when the last panel went away

    @property
    def open(self) -> bool:
        return bool(self.comms)

    # --- the comm target --------------------------------------------------------------------
    def install(self) -> None:
        if self.comm_manager is not None:
            self.comm_manager.register_target(PANEL_TARGET, self._opened)
        background().listen(self.native_changed)

    def uninstall(self) -> None:
        background().unlisten(self.native_changed)
        self.cell_ends()
        for comm in list(self.comms):
            try:
                comm.close()
            except Exception:  # noqa: BLE001 - the frontend may be gone already
                pass
        self.comms.clear()
        self._panel_gone()
        if self.comm_manager is not None:
            self.comm_manager.unregister_target(PANEL_TARGET, self._opened)

    def _opened(self, comm, open_msg) -> None:
        """A panel connected: start watching (the first one), and send it what to show."""
        first = not self.comms
        self.comms.append(comm)
        comm.on_msg(lambda msg: self._message(comm, msg))
        comm.on_close(lambda msg: self._closed(comm))
        if first:
            watch_modules()
            with boundary(self.session.fault, "starting the doctor"):  # the panel works without it, and says so
                enable_doctor(self.session).carry(self._earlier_findings)
        self._send(comm, self.state(self._cell))

    def _closed(self, comm) -> None:
        if comm in self.comms:
            self.comms.remove(comm)
        if not self.comms:
            self._panel_gone()

    def _panel_gone(self) -> None:
        """No panel left: stop every per-cell cost (the doctor, the live thread, the panel's widgets)."""
        self.cell_ends()
        unwatch_modules()
        self._lister = TensorLister()
        if self.session.doctor is not None:
            self._earlier_findings = list(self.session.doctor.findings)  # shown again when a panel comes back
            disable_doctor(self.session)
        for widget in (self._memory_widget, *self._older_graphs, self._graph_widget):
            if widget is not None:
                widget.close()
        self._memory_widget = self._graph_widget = None
        self._older_graphs, self._graph_roots = [], []

    def _message(self, comm, msg) -> None:
        data = msg.get("content", {}).get("data", {}) if isinstance(msg, dict) else {}
        if isinstance(data, dict) and data.get("type") == "refresh":
            self._send(comm, self.state(self._cell))

    def _send(self, comm, message) -> None:
        with boundary(self.session.fault, "sending to the side panel"):  # a panel that went away
            comm.send(plain(message))

    def native_changed(self, status: NativeStatus) -> None:
        """The native build moved on (from its thread): tell each connected panel."""
        if self.comms:
            self.broadcast(status)

    def broadcast(self, message) -> None:
        for comm in list(self.comms):
            self._send(comm, message)

    # --- what the panel shows ---------------------------------------------------------------
    def state(self, cell: Optional[int]) -> PanelState:
        """Everything the panel shows now (never raises: a fault becomes a warning)."""
        warnings: list[str] = []
        listing = None
        try:
            with untraced():
                listing = self._lister.list(self.user_ns)
        except Exception as exc:  # noqa: BLE001 - the user's namespace may hold anything
            warnings.append(f"forgeviz could not list the tensors: {exc!r}")
        if listing is None:
            listing = TensorListing(rows=[], more=0, total_bytes=0)
        doctor = self.session.doctor
        findings = list(doctor.findings) if doctor is not None else []
        if doctor is not None:
            warnings += list(doctor.warnings)
        warnings += self._refresh_widgets(warnings)
        return PanelState(type="state", version=PANEL_VERSION, kernel=KERNEL_ID, cell=cell, tensors=listing,
                          findings=findings, warnings=warnings,
                          memory_model=getattr(self._memory_widget, "model_id", None),
                          graph_model=getattr(self._graph_widget, "model_id", None), native=background().status())

    def _refresh_widgets(self, warnings: list) -> list[str]:
        """The panel's memory timeline (made once) and the latest backward's graph (made again after
        each backward, from the namespace tensor it started at)."""
        out: list[str] = []
        session = self.session
        if self._memory_widget is None and session.memory is not None and self.comms:
            try:
                from .api import memory

                self._memory_widget = memory()
            except Exception as exc:  # noqa: BLE001 - the panel shows the rest
                out.append(f"forgeviz could not show the memory timeline: {exc!r}")
        roots = [r for r in session.backward_roots if r is not None]
        if self.comms and roots and roots != self._graph_roots:
            try:
                root = tensor_with_root(self.user_ns, set(roots))
                if root is not None:
                    from .api import graph

                    old, self._graph_widget = self._graph_widget, graph(root, namespace=self.user_ns)
                    self._graph_roots = roots
                    if old is not None:
                        self._older_graphs.append(old)
                    while len(self._older_graphs) > KEEP_GRAPHS:
                        self._older_graphs.pop(0).close()
            except Exception as exc:  # noqa: BLE001 - the panel shows the rest
                out.append(f"forgeviz could not show the latest graph: {exc!r}")
        return out

    # --- while a cell runs --------------------------------------------------------------------
    def cell_begins(self, cell: Optional[int]) -> None:
        """Start pushing live updates (only while a panel is connected)."""
        self._cell = cell
        if not self.comms or self.session.memory is None or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._live_loop, name="forgeviz-panel-live", daemon=True)
        self._thread.start()

    def cell_ends(self) -> None:
        """Stop the live updates (before the cell's own refreshes run on the main thread)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout=2.0)

    def after_cell(self, cell: Optional[int]) -> None:
        """Send each panel the state after a cell (the doctor has looked at it already); the tensor
        listing only when it changed since the last one sent."""
        if cell is not None:
            self._cell = cell
        if self.comms:
            state = self.state(self._cell)
            if state.tensors is not None:
                key = _listing_key(state.tensors)
                if key == self._sent_listing:
                    state.tensors = None
                self._sent_listing = key
            self.broadcast(state)

    def live(self) -> Optional[PanelLive]:
        """The live bytes by category now, from the kernel's memory tracker (None without one)."""
        tracker = self.session.memory
        if tracker is None:
            return None
        by_category = [0] * len(CATEGORIES)
        for rec in tracker.records():
            if 0 <= rec.category < len(by_category):
                by_category[rec.category] += rec.nbytes
        self._seq += 1
        return PanelLive(type="live", seq=self._seq, time=time.monotonic() - self._t0, live_bytes=by_category,
                         events=tracker.count)

    def _live_loop(self) -> None:
        while not self._stop.wait(LIVE_INTERVAL_S):
            with self._lock:
                with boundary(self.session.fault, "the side panel's live update"):  # the panel misses an update
                    message = self.live()
                    if message is not None:
                        self.broadcast(message)
                    widget = self._memory_widget
                    if widget is not None:
                        widget.refresh()  # its events so far, to the panel's timeline


def _listing_key(listing: TensorListing) -> tuple:
    """What tells two listings apart: the row objects (the lister makes a new one when anything a row
    shows changed) and the flags set anew each time."""
    return (listing.more, listing.total_bytes, tuple(id(r) for r in listing.rows),
            tuple((r.counted, r.shared) for r in listing.rows))


def plain(value):
    """A wire dataclass as JSON-ready dicts and lists, without ``dataclasses.asdict``'s deep copies (a
    listing of 300 rows is sent after every cell).

    >>> from forgeviz.model.panel import TensorListing
    >>> plain(TensorListing(rows=[], more=2, total_bytes=8))
    {'rows': [], 'more': 2, 'total_bytes': 8}
    """
    if value is None or isinstance(value, (str, int, float)):  # most of it: checked first
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: plain(v) for k, v in vars(value).items()}
    return value


_host: Optional[PanelHost] = None


def install(shell, session: CaptureSession) -> None:
    """Register the panel's comm target in this kernel (``%load_ext forgeviz``)."""
    global _host
    if _host is not None:
        return
    manager = None
    kernel = getattr(shell, "kernel", None)
    if kernel is not None:
        manager = getattr(kernel, "comm_manager", None)
        if manager is None:
            import comm

            manager = comm.get_comm_manager()
    _host = PanelHost(session, shell.user_ns, manager)
    _host.install()


def uninstall() -> None:
    global _host
    if _host is not None:
        _host.uninstall()
        _host = None


def host() -> Optional[PanelHost]:
    """The kernel's panel host while forgeviz is loaded."""
    return _host
