"""The side panel's model: the notebook's tensors, the doctor's findings, and the messages on the
panel's comm (target ``PANEL_TARGET``). Plain data, no torch.

These dataclasses are the ONE definition of the panel's wire format (``src/model/wire.ts`` is
generated from them by ``forgeviz.model.tsgen``). The frontend (src/lab/panel.ts) opens a comm to
``PANEL_TARGET``; a kernel where forgeviz is not loaded has no such target and closes it, which is
how the panel knows to offer ``%load_ext forgeviz``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

PANEL_TARGET = "forgeviz.panel"
PANEL_VERSION = 1
# The most tensor rows one listing carries; the rest are counted in ``TensorListing.more``.
MAX_TENSOR_ROWS = 500
# The most often the kernel pushes a live update while a cell runs (seconds between two).
LIVE_INTERVAL_S = 0.25

FindingKind = Literal["swallowed-error", "missing-zero-grad", "graph-kept-alive", "retain-graph-growth",
                      "inplace-saved-tensor", "eval-without-no-grad", "nonfinite-grad",
                      "graph-break"]
FINDING_KINDS = ["swallowed-error", "missing-zero-grad", "graph-kept-alive", "retain-graph-growth",
                 "inplace-saved-tensor", "eval-without-no-grad", "nonfinite-grad", "graph-break"]


@dataclass
class TensorRow:
    """One tensor of the notebook's namespace, or a parameter or buffer of a module there."""

    name: str  # how the notebook reaches it: "w", "model.fc1.weight"
    module: Optional[str]  # the namespace name of the module it belongs to, None for a plain tensor
    kind: Literal["tensor", "parameter", "buffer"]
    shape: list[int]
    dtype: str
    device: str
    storage_bytes: int  # untyped_storage().nbytes(); 0 for a tensor without storage (meta, sparse)
    counted: bool  # False when an earlier row already counted this storage
    shared: bool  # another row reads the same storage
    requires_grad: bool
    leaf: bool
    grad_fn: Optional[str]  # type(t.grad_fn).__name__, None for a leaf
    grad_norm: Optional[float]  # of t.grad, None without one


@dataclass
class TensorListing:
    """The rows the panel lists, at most MAX_TENSOR_ROWS; each storage's bytes counted once."""

    rows: list[TensorRow]
    more: int  # tensors left out past the limit
    total_bytes: int  # every listed storage once


@dataclass
class Finding:
    """One incident the doctor saw: where, what it means, and the one-line fix."""

    kind: FindingKind
    cell: Optional[int]  # the notebook's execution count, None when unknown
    line: Optional[int]  # the line in that cell, None when unknown
    source: str  # that line's text, "" when unknown
    explanation: str
    fix: str
    count: int  # how often it was seen (the same place again counts here, not as a new finding)


@dataclass
class NativeStatus:
    """Kernel → panel (and the ``%load_ext forgeviz`` cell's output): forgeviz's native libraries,
    built in the background on a fresh machine. Sent on each change while a panel is connected, and
    inside each PanelState.

    ``state``: "building" (``seconds`` so far), "ready" (both built, in ``seconds``), "partial" (one
    built, one failed) or "failed" (none built: the Python paths run, correct and slower).
    ``message`` says it in one sentence, with what the user gets without what failed."""

    type: Literal["native"]
    state: Literal["building", "ready", "partial", "failed"]
    seconds: float
    message: str


@dataclass
class PanelState:
    """Kernel → panel: everything the panel shows, after the comm opens and after each cell."""

    type: Literal["state"]
    version: int
    kernel: str  # this kernel process's id: a restarted kernel has a new one
    cell: Optional[int]  # the last cell run
    tensors: Optional[TensorListing]  # None: the same as in the last state sent (most cells change none)
    findings: list[Finding]
    warnings: list[str]  # a fault inside forgeviz or a detector, said in the panel
    # widgets the panel draws through the notebook's own widget renderer (model ids), None when none:
    memory_model: Optional[str]  # the kernel's live memory timeline
    graph_model: Optional[str]  # the graph of the latest backward pass, folded
    # forgeviz's native libraries, when this kernel builds them (None: they were built already)
    native: Optional[NativeStatus] = None


@dataclass
class PanelLive:
    """Kernel → panel while a cell runs, from a background thread, at most every LIVE_INTERVAL_S:
    the live bytes now, by category (CATEGORIES' order)."""

    type: Literal["live"]
    seq: int  # counts up within this kernel
    time: float  # seconds since the kernel's panel host started
    live_bytes: list[int]
    events: int  # events the timeline holds


@dataclass
class PanelRequest:
    """Panel → kernel: ``refresh`` asks for a PanelState now (the reply is one). A row's view opens
    by running ``forgeviz.show("<row name>")`` in a main-area output, as a cell would."""

    type: Literal["refresh"]
    request_id: int


WIRE_TYPES = [TensorRow, TensorListing, Finding, NativeStatus, PanelState, PanelLive, PanelRequest]
TS_CONSTANTS = ["PANEL_TARGET", "PANEL_VERSION", "MAX_TENSOR_ROWS", "LIVE_INTERVAL_S", "FINDING_KINDS"]
