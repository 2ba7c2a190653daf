"""The doctor (issue 16): live detectors for classic PyTorch incidents, each seen through public hooks.

``enable_doctor(session)`` installs one while a side panel is open (``forgeviz/panel.py``) and sets
``session.doctor``; the capture session then calls it when an op raises (``op_raised``), after an op
that writes in place (``after_op``), around each backward (``backward_begins``/``backward_ends``),
and the cell hooks call ``begin_cell``/``end_cell``. It registers its own optimizer step hook and is told
of each outermost module call. What it sees becomes ``findings`` (:class:`~forgeviz.model.panel.Finding`).

The :class:`Doctor` here does the watching that the detectors share, once: the hooks, the cell, the
backward steps (``marks``), the optimizer steps, one scan of the namespace after each cell, the findings
and the fault boundary. Each detector is one module of this package and one entry of ``DETECTORS``:

=======================  ==========================================================================
swallowed-error          an op raised inside a cell that went on: the user's code caught the error
missing-zero-grad        an optimizer stepped with a ``.grad`` that summed backward passes from both
                         sides of its previous step (no reset in between)
graph-kept-alive         a container in the namespace holds autograd graphs from two or more earlier
                         backward steps (``losses.append(loss)``)
retain-graph-growth      ``retain_graph=True`` backwards at one line reach a bigger graph every time
inplace-saved-tensor     an in-place write changed a tensor a live Node saved (at the write, and again
                         when the backward fails on it); a tensor without grad too (an input, a buffer
                         written inside a module's forward), when torch's use count says something
                         besides the user holds it
eval-without-no-grad     a module call built a graph that died without any backward running it, or
                         that a variable still keeps after the same call ran again under no_grad, or
                         after an optimizer step changed a tensor it saved (no backward can use it); or a
                         container keeps the unused graphs of two or more separate calls (a validation
                         loop that keeps its outputs), told at the end of the cell that built them
nonfinite-grad           the first Node of a backward whose gradients went NaN or infinite
graph-break              ``torch.compile`` broke a graph in the cell (a ``print``, ``.item()``, a branch on
                         a tensor inside ``forward``): Dynamo's reason, at the user's line
=======================  ==========================================================================

A finding never changes the user's results or exceptions, and a fault inside a detector becomes a
warning (``warnings``), never an exception. Apart from a set lookup per op (in-place writes), its
costs are per backward, per optimizer step, per module call and per cell; none while not installed.
"""

from __future__ import annotations

import logging
from typing import Iterable, Optional

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from ...model.panel import Finding
from ..fault import boundary
from ..modules import module_hooks
from ..session import _next_sequence_nr, _op_name
from ..untraced import untraced
from .detector import HOOKS, CellEnd, Checkup, Detector
from .eval_without_no_grad import EvalWithoutNoGrad
from .graph_break import GraphBreak
from .graph_kept_alive import GraphKeptAlive
from .graphs import graph_bytes
from .inplace_saved_tensor import InplaceSavedTensor
from .missing_zero_grad import MissingZeroGrad
from .nonfinite_grad import NonfiniteGrad
from .retain_graph_growth import RetainGraphGrowth
from .sites import Site, from_notebook, site_here
from .swallowed_error import SwallowedError

__all__ = ["DETECTORS", "Detector", "Doctor", "disable_doctor", "enable_doctor", "graph_bytes"]

# The detectors, one module each (adding one: README, "Adding a detector"). Their order is the order in
# which they hear of each event, and so the order of the findings one event gives.
DETECTORS: tuple[type[Detector], ...] = (SwallowedError, MissingZeroGrad, GraphKeptAlive, RetainGraphGrowth,
                                         InplaceSavedTensor, EvalWithoutNoGrad, NonfiniteGrad, GraphBreak)

log = logging.getLogger("forgeviz")

MAX_FINDINGS = 200  # rows kept (the oldest go first)
MAX_WARNINGS = 20
MAX_MARKS = 4096  # backward steps told apart (graph-kept-alive, inplace-saved-tensor)

_AUGMENTED = {"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__",
              "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__imatmul__", "__setitem__"}
# names ending in "_" that change no tensor's values (no version bump that a Node could trip on)
_NOT_WRITES = {"requires_grad_", "share_memory_", "detach_", "rename_", "refine_names_"}
_INPLACE: dict = {}  # torch function → whether it writes into its first argument


def _writes_in_place(func) -> bool:
    """Whether ``func`` writes into its first argument, by torch's naming (``mul_``, ``__iadd__``).

    >>> _writes_in_place(torch.Tensor.mul_), _writes_in_place(torch.Tensor.mul), _writes_in_place(torch.Tensor.detach_)
    (True, False, False)
    """
    name = getattr(func, "__name__", "") or ""
    if name in _AUGMENTED:
        return True
    return name.endswith("_") and not name.endswith("__") and name not in _NOT_WRITES


def _operands(args, kwargs) -> list[tuple[str, str, list[int]]]:
    """(device, dtype, shape) of each tensor an op was given (one level into lists), at most 8: what a
    detector may keep of a raised op's arguments (plain data, never the tensors).

    >>> _operands((torch.ones(2, 3), [torch.zeros(1, dtype=torch.int64)]), {})
    [('cpu', 'float32', [2, 3]), ('cpu', 'int64', [1])]
    """
    found = []
    for value in list(args or ()) + list((kwargs or {}).values()):
        for t in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(t, torch.Tensor) and len(found) < 8:
                found.append((str(t.device), str(t.dtype).removeprefix("torch."), list(t.shape)))
    return found


class Doctor:
    """Watches ops, backward passes, optimizer steps and module calls for the incidents of
    ``FINDING_KINDS`` (module docstring), one detector each. ``install``/``uninstall`` are exact inverses.

    >>> from forgeviz._capture.session import CaptureSession
    >>> d = Doctor(CaptureSession()); d.install(); d.uninstall(); d.installed, d.findings
    (False, [])
    >>> [detector.kind for detector in d.detectors][:2]
    ['swallowed-error', 'missing-zero-grad']
    """

    # The ops known to write nothing in place: the capture mode skips calling after_op for them (a set
    # lookup per op). Shared: whether a torch function writes in place does not change.
    no_writes: set = set()

    def __init__(self, session, detectors: Optional[Iterable[type[Detector]]] = None) -> None:
        self.session = session
        self.findings: list[Finding] = []
        self.warnings: list[str] = []
        self.installed = False
        self._by_key: dict[tuple, Finding] = {}
        self._handles: list = []
        # what the detectors share (Detector's docstring)
        self.cell: Optional[int] = None
        self.marks: list[int] = []  # the autograd sequence number after each backward that freed its graph
        self.running: list = []  # ModuleStack's list of running modules, (id(module), ...) each
        self.steps = 0  # optimizer steps seen in this cell
        self._namespace: Optional[dict] = None
        made = [cls(self) for cls in (DETECTORS if detectors is None else detectors)]
        # hook name → the detectors that override it (an event costs nothing for the others)
        # hook name → (kind, bound method) of each detector that overrides it: an event costs nothing for the
        # others (a method swapped on a detector later is still the one called: it looks up its own helpers)
        overrides = [(d, d.hooks()) for d in made]
        self._hooked: dict[str, list[tuple]] = {name: [(d.kind, getattr(d, name)) for d, hooks in overrides
                                                       if name in hooks] for name in HOOKS}
        self.detectors: list[Detector] = made  # (last: from here on, a new name may be a detector's)

    # A name the Doctor lacks is its detectors', read, written and deleted through it (``doctor._kept_graphs`` is
    # graph-kept-alive's): as when the detectors were the Doctor's methods, so a test that swaps one on the
    # Doctor swaps it where it runs.
    def __getattr__(self, name: str):
        detector = self._owner(name)
        if detector is None:
            raise AttributeError(f"'Doctor' object has no attribute {name!r}")
        return getattr(detector, name)

    def __setattr__(self, name: str, value) -> None:
        detector = None if name in self.__dict__ or hasattr(type(self), name) else self._owner(name)
        if detector is None:
            object.__setattr__(self, name, value)
        else:
            setattr(detector, name, value)

    def __delattr__(self, name: str) -> None:
        detector = None if name in self.__dict__ else self._owner(name)
        if detector is None:
            object.__delattr__(self, name)
        else:
            delattr(detector, name)

    def _owner(self, name: str) -> Optional[Detector]:
        """The first detector with an attribute ``name`` (None if none)."""
        return next((d for d in self.__dict__.get("detectors", ()) if hasattr(d, name)), None)

    # --- lifecycle -------------------------------------------------------------------------
    def install(self) -> None:
        if self.installed:
            return
        running = getattr(self.session.modules, "_stack", None)  # read by every module call's hook
        self.running = running if isinstance(running, list) else []
        self._handles = [register_optimizer_step_post_hook(self._step_post)]
        outputs = getattr(self.session.modules, "root_outputs", None)
        if isinstance(outputs, list):
            outputs.append(self._forward_done)
        else:  # a session without ModuleStack's outermost-call list: told of every call that returned
            self._handles.append(module_hooks.subscribe(None, self._every_call_done))
        self.installed = True

    def _every_call_done(self, module, args, output) -> None:
        if output is not None:  # (None: the call raised)
            self._forward_done(module, args, output)

    def uninstall(self) -> None:
        if not self.installed:
            return
        for handle in self._handles:
            handle.remove()
        self._handles = []
        outputs = getattr(self.session.modules, "root_outputs", None)
        if isinstance(outputs, list) and self._forward_done in outputs:
            outputs.remove(self._forward_done)
        self._every("uninstall")
        self.marks.clear()
        self.installed = False

    def clear(self) -> None:
        """Forget every finding and warning (the detectors go on watching)."""
        self.findings.clear()
        self.warnings.clear()
        self._by_key.clear()
        self._every("clear")

    def carry(self, findings: Iterable[Finding]) -> None:
        """Take the findings of the Doctor before this one (a side panel closed, then opened again): they
        are shown again, and the same incident at the same line is counted on, not told twice.

        >>> from forgeviz._capture.session import CaptureSession
        >>> d = Doctor(CaptureSession())
        >>> d.carry([Finding("nonfinite-grad", 3, 2, "y = x.log()", "…", "…", 1)]); len(d.findings)
        1
        """
        for found in findings:
            key = (found.kind, found.cell, found.line)
            if key not in self._by_key:
                self.findings.append(found)
                self._by_key[key] = found
        del self.findings[:-MAX_FINDINGS]
        self._by_key = {(f.kind, f.cell, f.line): f for f in self.findings}

    # --- what detectors call -----------------------------------------------------------------
    def report(self, kind: str, site: Optional[Site], explanation: str, fix: str, update: bool = False,
               times: int = 1) -> Finding:
        """Add a finding, or count ``times`` more of one at the same place (``update``: with this text)."""
        cell, line, source = (site.cell, site.line, site.source) if site is not None else (self.cell, None, "")
        key = (kind, cell, line)
        found = self._by_key.get(key)
        if found is not None:
            found.count += times
            if update:
                found.explanation, found.fix = explanation, fix
            return found
        found = Finding(kind, cell, line, source, explanation, fix, times)
        self.findings.append(found)
        self._by_key[key] = found
        if len(self.findings) > MAX_FINDINGS:
            old = self.findings.pop(0)
            self._by_key.pop((old.kind, old.cell, old.line), None)
        return found

    def finding_at(self, kind: str, site: Optional[Site]) -> Optional[Finding]:
        """The finding of ``kind`` already told at ``site`` (None if none), to count it on."""
        return self._by_key.get((kind, site.cell if site else self.cell, site.line if site else None))

    def namespace(self) -> Optional[dict]:
        """The notebook's namespace: the last cell's, else IPython's (None outside IPython)."""
        if self._namespace is not None:
            return self._namespace
        try:
            from IPython import get_ipython
        except ImportError:  # pragma: no cover - IPython ships with the dependencies
            return None
        shell = get_ipython()
        return getattr(shell, "user_ns", None)

    def guard(self, what: str) -> boundary:
        """forgeviz's fault boundary (fault.py) around a detector's ``what`` check: a fault inside it
        becomes a warning in the panel (and a log line), never an exception."""
        return boundary(self.warn, f"the doctor's {what} check")

    def warn(self, text: str) -> None:
        """Say ``text`` in the panel's warnings (once) and in the log: something of forgeviz's own went wrong.

        >>> from forgeviz._capture.session import CaptureSession
        >>> d = Doctor(CaptureSession()); d.warn("x"); d.warn("x"); d.warnings
        ['x']
        """
        log.warning("forgeviz: %s", text)
        if text not in self.warnings:
            self.warnings.append(text)
            del self.warnings[:-MAX_WARNINGS]

    def _each(self, hook: str, *args) -> None:
        """Tell each detector that overrides ``hook``; a fault in one is a warning, and the others still hear."""
        for kind, call in self._hooked[hook]:
            with self.guard(kind):  # the user's code has run (or runs on); its result stands
                call(*args)

    def _every(self, method: str) -> None:
        """Call ``method`` (uninstall, clear) of every detector, each inside the fault boundary."""
        for detector in self.detectors:
            with self.guard(detector.kind):  # the others still hear
                getattr(detector, method)()

    # --- cells -----------------------------------------------------------------------------
    def begin_cell(self, cell: Optional[int]) -> None:
        self.cell = cell
        self.steps = 0
        self._each("begin_cell", cell)

    def end_cell(self, user_ns: Optional[dict], error: Optional[BaseException], cell: Optional[int]) -> None:
        """After a cell: each detector's look at what it left (one scan of its namespace, shared). Never raises."""
        if cell is not None:
            self.cell = cell
        if user_ns is not None:
            self._namespace = user_ns
        end = CellEnd(user_ns, error)
        with untraced():
            self._each("end_cell", end)
        self.steps = 0

    # --- ops -------------------------------------------------------------------------------
    def op_raised(self, func, args, kwargs, exc: BaseException) -> None:
        """An op raised ``exc`` (still on its way up, untouched): the detectors hear what and where, as plain
        data. Keeps no reference to the op's arguments nor to the exception."""
        with self.guard("raised-op") as guard:  # the user's exception goes on unchanged
            site = site_here()  # (an op a library ran, such as a transformers model's: the cell's line that called it)
            noted = site is not None and from_notebook(site)
            op = _op_name(func)[1]
        if guard.failed or not noted:
            return  # no notebook code ran it
        with untraced():
            self._each("op_raised", op, site, exc, lambda: _operands(args, kwargs))

    def after_op(self, func, args, kwargs, out) -> None:
        """After an op the capture mode saw (those in ``no_writes`` skip this): an in-place write is told."""
        inplace = _INPLACE.get(func)
        if inplace is None:
            inplace = _INPLACE[func] = _writes_in_place(func)
            if not inplace and "inplace" not in getattr(getattr(func, "__code__", None), "co_varnames", ()):
                self.no_writes.add(func)  # (not F.relu, whose inplace=True writes)
        if not inplace and not (kwargs and kwargs.get("inplace") is True):
            return
        self._each("wrote", func, args[0] if args else None)

    def _forward_done(self, module, args, output) -> None:
        """An outermost module call returned (ModuleStack.root_outputs)."""
        running = self.running  # the session's running modules: empty after the outermost returned
        if running and (len(running) > 1 or running[0][0] != id(module)):  # (a global hook: for every call)
            return  # a submodule: its outermost module's call is the one told
        if not self.session.capturing:
            return
        self._each("module_call", module, args, output)

    # --- backward passes -------------------------------------------------------------------
    def backward_begins(self, func, roots: list, frees: Optional[bool]) -> Checkup:
        """Before a backward (``roots``: its Nodes; ``frees``: False for ``retain_graph``). Called from the
        capture mode's handler, where the mode is off: its reads of .grad and of Nodes are no ops."""
        checkup = Checkup(func, roots, frees, self.session.store.passes)
        self._each("backward_begins", checkup)
        return checkup

    def backward_ends(self, checkup: Optional[Checkup], returned: bool, failed: Optional[BaseException]) -> None:
        """After a backward returned (or raised ``failed``, which stays as it is)."""
        if checkup is None:
            return
        self._each("backward_ends", checkup, returned)
        if failed is not None:
            self._each("backward_failed", checkup, failed)
        if returned and checkup.frees is True:  # the graph behind it is spent: a new training step begins
            mark = _next_sequence_nr()
            marks = self.marks
            if not marks or marks[-1] != mark:
                marks.append(mark)
                if len(marks) > MAX_MARKS:
                    del marks[: len(marks) - MAX_MARKS]

    # --- optimizer steps -------------------------------------------------------------------
    def _step_post(self, optimizer, args, kwargs) -> None:
        self.steps += 1
        self._each("step_post", optimizer)


def enable_doctor(session) -> Doctor:
    """Install a Doctor on ``session`` (``session.doctor``), or return the one it has.

    >>> from forgeviz._capture.session import CaptureSession
    >>> s = CaptureSession(); s.doctor = None; enable_doctor(s) is enable_doctor(s); disable_doctor(s)
    True
    """
    if session.doctor is None:
        doctor = Doctor(session)
        doctor.install()
        session.doctor = doctor
    return session.doctor


def disable_doctor(session) -> None:
    """Uninstall ``session``'s Doctor and clear ``session.doctor``.

    >>> from forgeviz._capture.session import CaptureSession
    >>> s = CaptureSession(); _ = enable_doctor(s); disable_doctor(s); s.doctor is None
    True
    """
    doctor, session.doctor = session.doctor, None
    if doctor is not None:
        doctor.uninstall()
