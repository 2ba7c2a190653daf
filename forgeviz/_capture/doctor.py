"""The doctor (issue 16): live detectors for classic PyTorch incidents, each seen through public hooks.

``enable_doctor(session)`` installs one while a side panel is open (``forgeviz/panel.py``) and sets
``session.doctor``; the capture session then calls it when an op raises (``op_raised``), after an op
that writes in place (``after_op``), around each backward (``backward_begins``/``backward_ends``),
and the cell hooks call ``begin_cell``/``end_cell``. It registers its own optimizer step hooks and a
module forward hook. What it sees becomes ``findings`` (:class:`~forgeviz.model.panel.Finding`):

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
                         after an optimizer step changed a tensor it saved (no backward can use it)
nonfinite-grad           the first Node of a backward whose gradients went NaN or infinite
=======================  ==========================================================================

A finding never changes the user's results or exceptions, and a fault inside a detector becomes a
warning (``warnings``), never an exception. Apart from a set lookup per op (in-place writes), its
costs are per backward, per optimizer step, per module call and per cell; none while not installed.
"""

from __future__ import annotations

import ast
import bisect
import collections
import linecache
import logging
import os
import re
import sys
import sysconfig
import weakref
from typing import Iterable, NamedTuple, Optional

import torch
from torch.nn.modules import module as nn_module
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from ..model.panel import Finding
from .memory import tensor_slots
from .session import _next_sequence_nr, _op_name
from .source import cell_number, source_line, user_location
from .untraced import untraced

log = logging.getLogger("forgeviz")

MAX_FINDINGS = 200  # rows kept (the oldest go first)
MAX_WARNINGS = 20
MAX_RAISED = 64  # places where ops raised, remembered per cell
MAX_WRITES = 64  # in-place writes remembered (for a backward that fails on one)
MAX_PENDING = 16  # writes into tensors without grad whose Node is looked for again (after a module call, a cell)
MAX_MARKS = 4096  # backward steps told apart by graph-kept-alive
WALK_LIMIT = 20_000  # Nodes one graph walk visits at most
SCAN_ITEMS = 10_000  # items of one namespace container looked at (its newest)
REACH_LIMIT = 10_000  # Nodes a backward's walk visits, looking for the module outputs it uses
MAX_UNUSED = 256  # module outputs watched while no backward has used them
GROWTH_PASSES = 3  # retain_graph backwards at one line, each reaching more Nodes, before it is a finding

_INPLACE_ERROR = "modified by an inplace operation"
_VERSION = re.compile(r"is at version (\d+); expected version (\d+)")
_AUGMENTED = {"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__",
              "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__imatmul__", "__setitem__"}
# names ending in "_" that change no tensor's values (no version bump that a Node could trip on)
_NOT_WRITES = {"requires_grad_", "share_memory_", "detach_", "rename_", "refine_names_"}
_INPLACE: dict = {}  # torch function → whether it writes into its first argument
_ZEROING = {torch.Tensor.zero_, torch.zero_, torch._foreach_zero_}  # what zero_grad(set_to_none=False) calls
_ATOMS = {float, int, str, bool, type(None), bytes}


def _writes_in_place(func) -> bool:
    name = getattr(func, "__name__", "") or ""
    if name in _AUGMENTED:
        return True
    return name.endswith("_") and not name.endswith("__") and name not in _NOT_WRITES


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {os.path.abspath(p) + os.sep for key in ("stdlib", "platstdlib", "purelib", "platlib")
            if (p := paths.get(key))}
    return tuple(sorted(dirs))


_LIBRARY_DIRS = _library_dirs()
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_FORGEVIZ_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _in_library(filename: str) -> bool:
    """Whether ``filename`` is Python's own library or an installed package (not the user's code).

    >>> _in_library(os.__file__), _in_library("<ipython-input-3-abc>")
    (True, False)
    """
    return filename.startswith(_LIBRARY_DIRS) or f"{os.sep}site-packages{os.sep}" in filename \
        or f"{os.sep}dist-packages{os.sep}" in filename


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


class Site(NamedTuple):
    """Where something happened: the notebook cell's line (None outside a cell) and the innermost
    user frame (a cell, or a file of the user's that the cell called)."""

    cell: Optional[int]
    line: Optional[int]
    source: str
    filename: Optional[str]  # the innermost user frame's
    file_line: Optional[int]

    def text(self) -> str:
        """``cell [3], line 2`` (and the user's file and line when the op ran in one)."""
        where = f"cell [{self.cell}], line {self.line}" if self.cell is not None else (
            f"line {self.line}" if self.line is not None else "an unknown line")
        if self.filename is not None and cell_number(self.filename) is None:
            where = f"{os.path.basename(self.filename)}:{self.file_line} (called from {where})" \
                if self.cell is not None else f"{os.path.basename(self.filename)}:{self.file_line}"
        return where


def _site() -> Optional[Site]:
    """The Site of the nearest user frame that called into forgeviz (torch and forgeviz frames skipped)."""
    filename, line = user_location(2)
    if filename is None:
        return None
    cell = cell_number(filename)
    if cell is not None:
        return Site(cell, line, source_line(filename, line) or "", filename, line)
    frame = sys._getframe(1)
    try:  # a file of the user's: the notebook cell that called it
        while frame is not None:
            outer = cell_number(frame.f_code.co_filename)
            if outer is not None:
                number = frame.f_lineno
                return Site(outer, number, source_line(frame.f_code.co_filename, number) or "", filename, line)
            frame = frame.f_back
    finally:
        del frame
    return Site(None, line, source_line(filename, line) or "", filename, line)


def _from_notebook(site: Site) -> bool:
    """Whether the notebook's code (a cell, or a file of the user's) ran what happened at ``site``."""
    return site.filename is not None and (site.cell is not None or not _in_library(site.filename))


def _site_of(filename: Optional[str], line: Optional[int]) -> Optional[Site]:
    if filename is None:
        return None
    return Site(cell_number(filename), line, source_line(filename, line) or "", filename, line)


def _tag_site(node) -> Optional[Site]:
    """The line that made ``node``, from the capture session's tag in its metadata (None untagged)."""
    tag = node.metadata.get("fv_op")
    return _site_of(tag[2], tag[3]) if tag else None


def _node_text(node) -> str:
    """``SigmoidBackward0 (made by sigmoid at cell [3], line 2)``."""
    name = type(node).__name__
    tag = node.metadata.get("fv_op")
    site = _site_of(tag[2], tag[3]) if tag else None
    return f"{name} (made by {tag[0]} at {site.text()})" if site is not None else name


def _walk(roots: Iterable, limit: int = WALK_LIMIT) -> list:
    """The Nodes reachable from ``roots``, each once, at most ``limit``."""
    seen: set[int] = set()
    order = []
    stack = [r for r in roots if r is not None]
    while stack and len(order) < limit:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        order.append(node)
        for child, _ in node.next_functions:
            if child is not None and id(child) not in seen:
                stack.append(child)
    return order


def _saved(node) -> tuple[list[torch.Tensor], list[tuple[str, str]]]:
    """(the tensors ``node`` still holds for backward, [(slot, torch's error)] for those it cannot give)."""
    tensors: list[torch.Tensor] = []
    errors: list[tuple[str, str]] = []
    for name in tensor_slots(node):
        try:
            value = getattr(node, name)
        except RuntimeError as exc:  # freed by a backward, or changed in place since it was saved
            errors.append((name, _message(exc)))
            continue
        for t in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(t, torch.Tensor):
                tensors.append(t)
    return tensors, errors


def _version_error(node) -> Optional[tuple[str, str]]:
    """(slot, torch's message) when a tensor ``node`` saved was written in place since, else None."""
    for name, message in _saved(node)[1]:
        if _INPLACE_ERROR in message:
            return name, message
    return None


def _message(exc: BaseException) -> str:
    """The message of a built-in or torch exception (its one string argument), else ""; never str() of
    a user's object.

    >>> _message(RuntimeError("shapes differ")), _message(KeyError(object()))
    ('shapes differ', '')
    """
    args = exc.args
    module = type(exc).__module__ or ""
    if (module == "builtins" or module.split(".")[0] == "torch") and len(args) == 1 and type(args[0]) is str:
        return args[0]
    return ""


def _storage(t: torch.Tensor) -> Optional[tuple[tuple, int]]:
    """(a key telling storages apart, its bytes), None without one (meta, sparse)."""
    try:
        if t.layout != torch.strided or t.is_meta:
            return None
        storage = t.untyped_storage()
        return (t.device.type, t.device.index, storage.data_ptr()), storage.nbytes()
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def graph_bytes(tensors: Iterable[torch.Tensor], limit: int = WALK_LIMIT) -> tuple[int, int]:
    """(bytes, Nodes) that ``tensors`` and their autograd graphs keep: each storage once, the
    tensors themselves and what their graphs' Nodes saved for backward, leaving out the leaves that
    require grad (parameters live anyway).

    >>> x = torch.ones(4, requires_grad=True); h = torch.ones(3) * 2; y = (x.sum() * h).exp()
    >>> graph_bytes([y])  # y (12 bytes), ExpBackward0's result (y itself) and MulBackward0's h (12)
    (24, 4)
    """
    tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
    with untraced():
        nodes = _walk([t.grad_fn for t in tensors], limit)
        return _saved_bytes(nodes, tensors), len(nodes)


def _size(n: int) -> str:
    """``1536 bytes (1.5 KiB)``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n} bytes ({n / scale:.1f} {unit})"
    return f"{n} bytes"


def _operands(args, kwargs) -> list[tuple[str, str, list[int]]]:
    """(device, dtype, shape) of each tensor an op was given (one level into lists), at most 8."""
    found = []
    for value in list(args or ()) + list((kwargs or {}).values()):
        for t in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(t, torch.Tensor) and len(found) < 8:
                found.append((str(t.device), str(t.dtype).removeprefix("torch."), list(t.shape)))
    return found


class _ForwardWatch:
    """Kept in the ``metadata`` of a module call's output Node, a dict that dies with the Node: so does
    this, and tells the doctor (``__del__``, which may run on any thread: one append). Each output
    Node of one call has its own, under the call's ``key``.

    >>> dead = collections.deque(); watch = _ForwardWatch(7, dead); del watch; list(dead)
    [7]
    """

    __slots__ = ("key", "dead")

    def __init__(self, key: int, dead: collections.deque) -> None:
        self.key, self.dead = key, dead

    def __del__(self) -> None:
        self.dead.append(self.key)


_LEAF_SEQUENCE_NR = 2**64 - 1  # an AccumulateGrad's: past every op's Node


class _Checkup(NamedTuple):
    """What :meth:`Doctor.backward_begins` hands to :meth:`Doctor.backward_ends`."""

    func: object
    roots: list
    frees: Optional[bool]
    candidates: list  # parameters whose .grad is still the one their optimizer stepped with
    site: Optional[Site]  # the backward's line, when a detector needed it
    passes: int  # the gradient store's pass count


class Doctor:
    """Watches ops, backward passes, optimizer steps and module calls for the incidents of
    ``FINDING_KINDS`` (module docstring). ``install``/``uninstall`` are exact inverses.

    >>> from forgeviz._capture.session import CaptureSession
    >>> d = Doctor(CaptureSession()); d.install(); d.uninstall(); d.installed, d.findings
    (False, [])
    """

    def __init__(self, session) -> None:
        self.session = session
        self.findings: list[Finding] = []
        self.warnings: list[str] = []
        self.installed = False
        self._by_key: dict[tuple, Finding] = {}
        self._handles: list = []
        self._pre_step = None  # the step pre-hook, while a backward has added into a stepped .grad
        self._cell: Optional[int] = None
        # ops that raised in this cell, by place: (file, line, cell, cell line, op) → [operands, message,
        # type name, Site, the latest exceptions' ids, how many raised]
        self._raised: dict[tuple, list] = {}
        self._writes: collections.deque = collections.deque(maxlen=MAX_WRITES)
        # writes into tensors without grad that a Node may have saved, its Node not found yet: (ref(tensor),
        # ref(its base) or False, op, Site, the sequence number then)
        self._pending: collections.deque = collections.deque(maxlen=MAX_PENDING)
        self._inside: list = []  # such writes inside the module call running now
        # missing-zero-grad: id(optimizer) → (ref(optimizer), {id(param): (ref(its .grad), its version)}) right
        # after a step, for the parameters not yet seen reset (or added into) since
        self._stepped: dict[int, tuple] = {}
        # id(param) → (ref(param), ref(.grad), Site, its data pointer): a backward summed into a .grad already
        # stepped with
        self._accumulated: dict[int, tuple] = {}
        self._marks: list[int] = []  # the autograd sequence number after each backward that freed its graph
        self._holders: dict[str, int] = {}  # namespace name → earlier steps' graphs it held when last reported
        self._retained: dict[tuple, list[int]] = {}  # retain_graph backward's line → Nodes it reached, lately
        self._seen_nonfinite = 0  # the last gradient-store pass looked at for a non-finite gradient
        # eval-without-no-grad: module calls whose output Nodes are watched (key → [(filename, line), type,
        # Nodes alive]), those no backward has reached yet (key → their lowest sequence number), and deaths
        self._forwards: dict[int, list] = {}
        self._unused: dict[int, int] = {}
        self._forward_keys = iter(range(1, 1 << 62))
        self._dead: collections.deque = collections.deque()
        # (id(module), id(its first input)) → (key, ref(module), ref(input)) of each watched call, and the
        # watched calls the same module ran again on the same input under no_grad (key → that call's place)
        self._calls: dict[tuple, tuple] = {}
        self._superseded: dict[int, tuple] = {}
        self._steps = 0  # optimizer steps seen in this cell
        self._namespace: Optional[dict] = None

    # --- lifecycle -------------------------------------------------------------------------
    def install(self) -> None:
        if self.installed:
            return
        # ModuleStack's list of running modules, (id(module), ...) each: read by every module call's hook
        running = getattr(self.session.modules, "_stack", None)
        self._running = running if isinstance(running, list) else []
        self._handles = [register_optimizer_step_post_hook(self._step_post)]
        outputs = getattr(self.session.modules, "root_outputs", None)
        if isinstance(outputs, list):
            outputs.append(self._forward_done)
        else:  # a session without ModuleStack's outermost-call list: torch's global hook, for every call
            self._handles.append(nn_module.register_module_forward_hook(self._forward_done))
        self.installed = True

    def uninstall(self) -> None:
        if not self.installed:
            return
        for handle in self._handles:
            handle.remove()
        self._handles = []
        outputs = getattr(self.session.modules, "root_outputs", None)
        if isinstance(outputs, list) and self._forward_done in outputs:
            outputs.remove(self._forward_done)
        if self._pre_step is not None:
            self._pre_step.remove()
            self._pre_step = None
        self._forwards.clear()  # (their Nodes' watches, left in metadata, tell no one)
        self._unused.clear()
        self._calls.clear()
        self._superseded.clear()
        self._dead.clear()
        self._marks.clear()
        self._stepped.clear()
        self._accumulated.clear()
        self._raised.clear()
        self._writes.clear()
        self._pending.clear()
        self._inside = []
        self._retained.clear()
        self.installed = False

    def clear(self) -> None:
        """Forget every finding and warning (the detectors go on watching)."""
        self.findings.clear()
        self.warnings.clear()
        self._by_key.clear()
        self._holders.clear()

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

    # --- reporting -------------------------------------------------------------------------
    def _report(self, kind: str, site: Optional[Site], explanation: str, fix: str, update: bool = False,
                times: int = 1) -> Finding:
        """Add a finding, or count ``times`` more of one at the same place (``update``: with this text)."""
        cell, line, source = (site.cell, site.line, site.source) if site is not None else (self._cell, None, "")
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

    def _warn(self, what: str, exc: BaseException) -> None:
        said = _message(exc)  # (not repr(exc): the exception may be a user's object)
        message = f"the doctor's {what} failed: {type(exc).__name__}{': ' + said if said else ''}"
        log.warning("forgeviz: %s", message)
        if message not in self.warnings:
            self.warnings.append(message)
            del self.warnings[:-MAX_WARNINGS]

    # --- cells -----------------------------------------------------------------------------
    def begin_cell(self, cell: Optional[int]) -> None:
        self._cell = cell
        self._raised.clear()
        self._steps = 0

    def end_cell(self, user_ns: Optional[dict], error: Optional[BaseException], cell: Optional[int]) -> None:
        """After a cell: the errors it swallowed, the graphs its namespace keeps, the module calls
        whose graphs died unused. Never raises."""
        if cell is not None:
            self._cell = cell
        if user_ns is not None:
            self._namespace = user_ns
        for what, check in (("swallowed-error check", lambda: self._swallowed(error)),
                            ("evaluation check", self._dead_forwards),
                            ("evaluation check", lambda: self._held_forwards(user_ns)),
                            ("evaluation check", lambda: self._stale_forwards(user_ns)),
                            ("kept-graph check", lambda: self._kept_graphs(user_ns)),
                            ("in-place check", self._writes_after_cell)):
            try:
                with untraced():
                    check()
            except Exception as exc:  # noqa: BLE001 - a detector's fault is a warning, never the cell's
                self._warn(what, exc)
        self._raised.clear()

    # --- swallowed-error -------------------------------------------------------------------
    def op_raised(self, func, args, kwargs, exc: BaseException) -> None:
        """An op raised ``exc`` (still on its way up, untouched): remember what and where, to tell
        after the cell whether the user's code caught it. Keeps no reference to the op's arguments
        nor to the exception."""
        try:
            site = _site()  # (an op a library ran, such as a transformers model's: the cell's line that called it)
            if site is None or not _from_notebook(site):
                return  # no notebook code ran it
            with untraced():
                self._note_raised(_op_name(func)[1], site, exc, lambda: _operands(args, kwargs))
        except Exception as fault:  # noqa: BLE001 - the user's exception goes on unchanged
            self._warn("raised-op check", fault)

    def _note_raised(self, op: str, site: Site, exc: BaseException, operands) -> None:
        key = (site.filename, site.file_line, site.cell, site.line, op)
        entry = self._raised.get(key)
        if entry is None:
            if len(self._raised) >= MAX_RAISED:
                return
            entry = self._raised[key] = [operands(), _message(exc), type(exc).__name__, site, [], 0]
        entry[4].append(id(exc))
        del entry[4][:-8]  # the error that reaches the notebook is one of the last raised
        entry[5] += 1

    def _swallowed(self, error: Optional[BaseException]) -> None:
        if not self._raised:
            return
        chain: set[int] = set()
        while error is not None and id(error) not in chain and len(chain) < 32:
            chain.add(id(error))
            error = error.__cause__ or error.__context__
        for key, (operands, message, type_name, site, ids, raised) in self._raised.items():
            op = key[-1]
            swallowed = raised - (1 if chain.intersection(ids) else 0)  # one reached the notebook (or caused what did)
            if not swallowed or _handled_on_purpose(site.filename, site.file_line):
                continue
            devices = list(dict.fromkeys(d for d, _, _ in operands))
            dtypes = list(dict.fromkeys(t for _, t, _ in operands))
            described = ", ".join(f"{t}{s} on {d}" for d, t, s in operands) or "no tensors"
            first = message.strip().splitlines()[0][:200] if message.strip() else ""
            said = f' ("{first}")' if first else ""
            explanation = (f"At {site.text()}, {op} raised {type_name}{said} on {described}. The cell caught it and "
                           "went on without that error: what ran instead (the except branch) made the result.")
            if len(devices) > 1:
                fix = (f"Put the operands on one device (.to({devices[0]!r}) or .to({devices[-1]!r})) and catch only "
                       "the exception you expect, not every Exception.")
            elif len(dtypes) > 1:
                fix = "Cast the operands to one dtype, and catch only the exception you expect, not every Exception."
            else:
                fix = "Catch only the exception you expect (not every Exception), or let this one reach the cell."
            self._report("swallowed-error", site, explanation, fix, times=swallowed)

    # --- in-place writes -------------------------------------------------------------------
    # The ops known to write nothing in place: the capture mode skips calling after_op for them (a set
    # lookup per op). Shared: whether a torch function writes in place does not change.
    no_writes: set = set()

    def after_op(self, func, args, kwargs, out) -> None:
        """After an op the capture mode saw (those in ``no_writes`` skip this): an in-place write is checked."""
        inplace = _INPLACE.get(func)
        if inplace is None:
            inplace = _INPLACE[func] = _writes_in_place(func)
            if not inplace and "inplace" not in getattr(getattr(func, "__code__", None), "co_varnames", ()):
                self.no_writes.add(func)  # (not F.relu, whose inplace=True writes)
        if not inplace and not (kwargs and kwargs.get("inplace") is True):
            return
        try:
            target = args[0] if args else None
            if self._accumulated and func in _ZEROING:
                self._zeroed(target)
            if isinstance(target, torch.Tensor):
                self._wrote(func, target)
        except Exception as exc:  # noqa: BLE001 - the user's op has run; its result stands
            self._warn("in-place check", exc)

    def _wrote(self, func, target: torch.Tensor) -> None:
        op = _op_name(func)[0]
        inside = bool(self._running)  # inside a module's forward
        with torch._C.DisableTorchFunction():
            if not target.requires_grad:
                self._wrote_plain(op, target, inside)
                return
            # (where: found for writes outside modules only; one inside that a Node trips on is named below)
            self._writes.append((weakref.ref(target), target._version, op, None if inside else user_location(2)))
            grad_fn = target.grad_fn
            if grad_fn is None:
                return
            # The write's own Node (MulBackward0 of y.mul_) leads to the Node that made the tensor's
            # old value, which may have saved it (SigmoidBackward0 saves its result).
            for child, _ in grad_fn.next_functions[:4]:
                if child is None or type(child).__name__ == "AccumulateGrad" or "fv_doctor_write" in child.metadata:
                    continue
                hit = _version_error(child)
                if hit is not None:
                    self._report_write(op, _site(), child, hit[0])

    def _wrote_plain(self, op: str, target: torch.Tensor, inside: bool) -> None:
        """A write into a tensor that does not require grad (an input, a buffer, a mask). A Node that saved it
        holds the tensor itself, one more use of it than the user's own (torch's use count: the Python
        object counts once however many names it has); a view's base is held by the view too. Only then is
        the Node looked for, among the graphs the notebook holds or, inside a module, its output's."""
        base = target._base
        shared = target._use_count() > 1 or (base is not None and base._use_count() > 2)
        if inside and not shared:
            return  # (BatchNorm's num_batches_tracked: nothing else holds it)
        if not shared:
            self._writes.append((weakref.ref(target), target._version, op, user_location(2)))
            return
        if _by_torch():
            # torch's own code writing in place: zero_grad(set_to_none=False) into each .grad (held by its
            # parameter too), clip_grad_norm_, a torch module's buffers
            if not inside:
                self._writes.append((weakref.ref(target), target._version, op, user_location(2)))
            return
        site = _site()
        where = (site.filename, site.file_line) if site is not None else None
        self._writes.append((weakref.ref(target), target._version, op, where))
        write = (weakref.ref(target), base is not None and weakref.ref(base), op, site, _next_sequence_nr())
        if inside:
            self._inside.append(write)  # looked for when the outermost module call returns, then after the cell
        elif not self._settle(write, self._namespace_roots()):
            self._pending.append(write)  # looked for again after the cell (a function's result may hold it)

    def _namespace_roots(self) -> list:
        """The Nodes of the tensors the notebook's namespace holds (in containers too)."""
        roots = []
        for name, value in list((self._namespace_now() or {}).items()):
            if not name.startswith("_") and name not in ("In", "Out") and type(value) not in _ATOMS:
                roots.extend(t.grad_fn for t in _graph_tensors(value))
        return roots

    def _settle(self, write: tuple, roots: list) -> bool:
        """Whether the Node that saved what ``write`` (a pending write into a tensor without grad) changed was
        found from ``roots``, and told. The walk leaves out Nodes older than the last backward that freed
        its graph (a Node is numbered after those it leads to) and those made after the write."""
        tref, bref, op, site, before = write
        versions = {t._version for t in (tref(), bref() if bref else None) if t is not None}
        if not versions or not roots:
            return not versions
        lowest = self._marks[-1] if self._marks else 0
        seen: set[int] = set()
        stack = [r for r in roots if r is not None and lowest <= r._sequence_nr()]
        while stack and len(seen) < WALK_LIMIT:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if node._sequence_nr() < before and "fv_doctor_write" not in node.metadata:
                for slot, message in _saved(node)[1]:
                    match = _VERSION.search(message)
                    if _INPLACE_ERROR in message and match and int(match.group(1)) in versions:
                        self._report_write(op, site, node, slot)
                        return True
            for child, _ in node.next_functions:
                if child is not None and lowest <= child._sequence_nr() != _LEAF_SEQUENCE_NR and id(child) not in seen:
                    stack.append(child)
        return False

    def _settle_inside(self, output) -> None:
        """The outermost module call returned: writes inside it whose Node its output's graph holds are told;
        the rest wait for the cell's end."""
        writes, self._inside = self._inside, []
        with torch._C.DisableTorchFunction():
            roots = [t.grad_fn for t in _outputs(output)]
            self._pending.extend(write for write in writes if not self._settle(write, roots))

    def _writes_after_cell(self) -> None:
        """After a cell: the pending writes' Nodes, from the graphs its namespace holds; then they are dropped."""
        self._pending.extend(self._inside)
        self._inside = []
        if self._pending:
            roots = self._namespace_roots()
            for write in self._pending:
                self._settle(write, roots)
            self._pending.clear()

    def _report_write(self, op: str, site: Optional[Site], node, slot: str) -> None:
        node.metadata["fv_doctor_write"] = (op, site)  # plain data: a failing backward names it
        explanation = (f"{_verb(op)} at {site.text() if site else 'an unknown line'} wrote in place into a "
                       f"tensor that {_node_text(node)} saved for backward (its {slot.removeprefix('_saved_')}): a "
                       "backward through that Node will fail with torch's 'modified by an inplace operation' error.")
        fix = (f"Use the out-of-place op (y = y.{op}(...) rather than y.{op}_(...)), or write into a .clone() "
               "of the tensor." if not _verb(op).startswith("an ") else
               "Write into a .clone() of the tensor, or build a new tensor instead of writing into this one.")
        self._report("inplace-saved-tensor", site, explanation, fix)

    def _failed_on_write(self, checkup: _Checkup, failed: BaseException) -> None:
        """A backward failed on a tensor written in place since a Node saved it: name the Node and the write."""
        message = _message(failed)
        if _INPLACE_ERROR not in message:
            return
        node = hit = None
        for candidate in _walk(checkup.roots):
            if type(candidate).__name__ == "AccumulateGrad":
                continue
            hit = _version_error(candidate)
            if hit is not None:
                node = candidate
                break
        if node is None:
            return
        write = node.metadata.get("fv_doctor_write")
        if write is None:  # not seen at the write (a tensor without grad): the write that moved it past that version
            match = _VERSION.search(hit[1])
            now, saved = (int(match.group(1)), int(match.group(2))) if match else (None, None)
            for ref, version, op, where in reversed(self._writes):
                t = ref()
                if match is not None and (t is None or t._version != now or version <= saved):
                    continue
                write = (op, _site_of(*where) if where else None)
                if match is None or version == saved + 1:
                    break
        site = checkup.site or _site()
        wrote = f"{_verb(write[0])} at {write[1].text() if write[1] else 'an unknown line'}" if write else \
            "an in-place write"
        explanation = (f"The backward at {site.text() if site else 'an unknown line'} failed: {_node_text(node)} "
                       f"needed the tensor it saved (its {hit[0].removeprefix('_saved_')}), and {wrote} had "
                       "changed it since.")
        fix = "Make that write out of place (or write into a .clone()), so the saved tensor keeps its values."
        self._report("inplace-saved-tensor", site, explanation, fix)

    # --- backward passes -------------------------------------------------------------------
    def backward_begins(self, func, roots: list, frees: Optional[bool]) -> _Checkup:
        """Before a backward (``roots``: its Nodes; ``frees``: False for ``retain_graph``). Called from the
        capture mode's handler, where the mode is off: its reads of .grad and of Nodes are no ops."""
        site = None
        candidates: list = []
        if self._stepped:
            try:
                candidates = self._stale_grads()
                if candidates:
                    site = _site()
            except Exception as exc:  # noqa: BLE001 - the backward runs regardless
                self._warn("zero-grad check", exc)
        if self._unused and roots:
            try:
                self._reached(roots)
            except Exception as exc:  # noqa: BLE001 - the backward runs regardless
                self._warn("evaluation check", exc)
        if frees is False and roots:
            try:
                site = site or _site()
                self._growth(roots, site)
            except Exception as exc:  # noqa: BLE001 - the backward runs regardless
                self._warn("retained-graph check", exc)
        return _Checkup(func, roots, frees, candidates, site, self.session.store.passes)

    def backward_ends(self, checkup: Optional[_Checkup], returned: bool, failed: Optional[BaseException]) -> None:
        """After a backward returned (or raised ``failed``, which stays as it is)."""
        if checkup is None:
            return
        if checkup.candidates:
            try:
                self._accumulated_into(checkup)
            except Exception as exc:  # noqa: BLE001 - the user's backward result (or error) stands
                self._warn("zero-grad check", exc)
        try:
            self._nonfinite(checkup)
        except Exception as exc:  # noqa: BLE001 - the user's backward result (or error) stands
            self._warn("non-finite gradient check", exc)
        if failed is not None:
            try:
                self._backward_failed(checkup, failed)
            except Exception as exc:  # noqa: BLE001 - the user's error stands, unchanged
                self._warn("failed backward check", exc)
        if len(self._dead) > 64:  # a long loop in one cell: settle them now, not all at its end
            try:
                self._dead_forwards()
            except Exception as exc:  # noqa: BLE001 - the user's backward result (or error) stands
                self._warn("evaluation check", exc)
        if returned and checkup.frees is True:  # the graph behind it is spent: a new training step begins
            mark = _next_sequence_nr()
            marks = self._marks
            if not marks or marks[-1] != mark:
                marks.append(mark)
                if len(marks) > MAX_MARKS:
                    del marks[: len(marks) - MAX_MARKS]

    def _backward_failed(self, checkup: _Checkup, failed: Optional[BaseException]) -> None:
        if failed is None:
            return
        if isinstance(failed, Exception):
            site = checkup.site or _site()
            if site is not None and _from_notebook(site):
                self._note_raised(_op_name(checkup.func)[1], site, failed, list)
        self._failed_on_write(checkup, failed)

    # --- missing-zero-grad -----------------------------------------------------------------
    # Each parameter is followed on its own (a frozen or unused one, a second param group, a reset of only
    # some .grads): once per step, and at the first backward after it; between steps, only a backward that
    # added into a .grad a step had used leaves anything to look at.
    def _step_post(self, optimizer, args, kwargs) -> None:
        """After a step: each parameter's .grad (and its version), to tell whether the next backward finds
        it reset (zero_grad sets it to None, or zeroes it: a new version)."""
        self._steps += 1
        if self._pre_step is not None and not self._accumulated:  # (not from inside the pre-hooks' loop)
            self._pre_step.remove()
            self._pre_step = None
        try:
            with torch._C.DisableTorchFunction():
                ref = weakref.ref
                used = {}
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        grad = p.grad
                        if grad is not None:
                            used[id(p)] = (ref(grad), grad._version)
                if used:
                    self._stepped[id(optimizer)] = (ref(optimizer), used)
                else:
                    self._stepped.pop(id(optimizer), None)
        except Exception as exc:  # noqa: BLE001 - the user's step has run; its result stands
            self._warn("optimizer step check", exc)

    def _stale_grads(self) -> list:
        """Before a backward: the parameters whose .grad is still, unchanged, the one their optimizer's last
        step used (after zero_grad, none): (optimizer's key, id, ref(param), ref(.grad), .grad's version).
        A parameter found reset is no longer followed."""
        found = []
        ref = weakref.ref
        for key, (oref, used) in list(self._stepped.items()):
            optimizer = oref()
            if optimizer is not None:
                for group in optimizer.param_groups:
                    for q in group["params"]:
                        seen = used.get(id(q))
                        if seen is None:
                            continue
                        grad = q.grad
                        if grad is None or seen[0]() is not grad or grad._version != seen[1]:
                            del used[id(q)]  # reset (or changed) since the step: fine
                        else:
                            found.append((key, id(q), ref(q), seen[0], seen[1]))
            if optimizer is None or not used:
                del self._stepped[key]
        return found

    def _accumulated_into(self, checkup: _Checkup) -> None:
        """After that backward: the stepped .grads it added to (the others stay followed)."""
        for key, pid, pref, gref, version in checkup.candidates:
            p, grad = pref(), gref()
            if p is not None and grad is not None and p.grad is grad and grad._version != version:
                stepped = self._stepped.get(key)
                if stepped is not None:
                    stepped[1].pop(pid, None)
                    if not stepped[1]:
                        del self._stepped[key]
                self._accumulated[pid] = (pref, gref, checkup.site, grad.data_ptr())
        if self._accumulated and self._pre_step is None and self.installed:
            self._pre_step = register_optimizer_step_pre_hook(self._step_pre)

    def _zeroed(self, targets) -> None:
        """``zero_`` (or ``_foreach_zero_``) wrote into tensors: a .grad that summed across a step and is
        zeroed now (zero_grad(set_to_none=False), p.grad.zero_(), p.grad.data.zero_()) was reset."""
        with torch._C.DisableTorchFunction():
            zeroed = {t.data_ptr() for t in (targets if isinstance(targets, (list, tuple)) else (targets,))
                      if isinstance(t, torch.Tensor)}
            for pid, entry in list(self._accumulated.items()):
                if entry[3] in zeroed:
                    del self._accumulated[pid]

    def _step_pre(self, optimizer, args, kwargs) -> None:
        """Before a step: parameters whose .grad sums gradients from both sides of the previous step."""
        try:
            with torch._C.DisableTorchFunction():
                hits: dict = {}
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        entry = self._accumulated.pop(id(p), None)
                        if entry is not None and entry[0]() is p and p.grad is entry[1]():
                            hits.setdefault(entry[2], []).append(p)
                for site, params in hits.items():
                    self._missing_zero_grad(optimizer, site, params)
        except Exception as exc:  # noqa: BLE001 - the user's step runs regardless
            self._warn("optimizer step check", exc)

    def _missing_zero_grad(self, optimizer, site: Optional[Site], params: list) -> None:
        key = ("missing-zero-grad", site.cell if site else self._cell, site.line if site else None)
        if key in self._by_key:  # seen at this line: counted, not described again
            self._by_key[key].count += 1
            return
        names = _parameter_names(params, self._namespace_now())
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        opt = type(optimizer).__name__
        where = site.text() if site is not None else "an unknown line"
        explanation = (f"The backward at {where} added its gradients into the .grad of {len(params)} parameter"
                       f"{'s' if len(params) != 1 else ''} ({shown}) that {opt}.step() had already used, and nothing "
                       f"reset them in between: the next {opt}.step() applies the sum of this step's gradients and "
                       "every earlier one's.")
        fix = f"Call optimizer.zero_grad() once per step, before loss.backward() (or right after {opt}.step())."
        self._report("missing-zero-grad", site, explanation, fix)

    def _namespace_now(self) -> Optional[dict]:
        if self._namespace is not None:
            return self._namespace
        try:
            from IPython import get_ipython
        except ImportError:  # pragma: no cover - IPython ships with the dependencies
            return None
        shell = get_ipython()
        return getattr(shell, "user_ns", None)

    # --- nonfinite-grad --------------------------------------------------------------------
    def _nonfinite(self, checkup: _Checkup) -> None:
        """The first Node of this pass whose gradients were not all finite, as the session's gradient
        hooks saw them (``GradStore``: its Python-recorded entries of this pass are its newest)."""
        index = checkup.passes
        if index <= self._seen_nonfinite:
            return
        store = self.session.store
        nodes = getattr(store, "_nodes", None)  # (GradStore.nodes would make records of every pass not read yet)
        if not nodes or index != store.passes or not self.session.record_grads:
            return
        first = None
        for nid, entry in reversed(nodes.items()):
            records = entry.records
            if not records or records[-1].backward_index != index:
                break
            if entry.first_nonfinite_pass == index:
                first = (nid, records[-1])
                break
        if first is None:
            return
        self._seen_nonfinite = index
        nid, record = first
        node = next((n for n in _walk(checkup.roots) if n.metadata.get("fv_id") == nid), None)
        sent = [s for s in record.grad_inputs if s is not None]
        got = [s for s in record.grad_outputs if s is not None]
        kinds = " and ".join(k for k, n in (("NaN", sum(s.nan_count for s in sent + got)),
                                             ("infinite", sum(s.inf_count for s in sent + got))) if n)
        received_finite = not any(s.nan_count or s.inf_count for s in got)
        backward = checkup.site or _site()
        name = _node_text(node) if node is not None else "a Node"
        explanation = (f"{name} was the first Node whose gradients went {kinds or 'non-finite'} in the backward at "
                       f"{backward.text() if backward else 'an unknown line'}"
                       + (": the gradients it received were finite, the ones it sent were not." if received_finite
                          else "."))
        fix = ("Keep that op's input inside its domain (log(x.clamp_min(eps)), sqrt(x + eps), a safe divisor), or "
               "find why its input got there; torch.autograd.set_detect_anomaly(True) adds the forward's traceback.")
        site = _tag_site(node) if node is not None else None
        self._report("nonfinite-grad", site if site is not None and site.cell is not None else backward,
                     explanation, fix)

    # --- retain-graph-growth ---------------------------------------------------------------
    def _growth(self, roots: list, site: Optional[Site]) -> None:
        """A retain_graph backward: the Nodes it reaches, against the last ones at the same line."""
        if site is None:
            return
        key = (site.filename, site.file_line)
        nodes = _walk(roots)
        counts = self._retained.setdefault(key, [])
        counts.append(len(nodes))
        del counts[:-GROWTH_PASSES]
        if len(counts) < GROWTH_PASSES or any(a >= b for a, b in zip(counts, counts[1:])):
            return
        with untraced():
            held = _saved_bytes(nodes)
        explanation = (f"Each retain_graph=True backward at {site.text()} reached a bigger graph than the one "
                       f"before ({' → '.join(map(str, counts))} Nodes): the graph grows every pass and keeps what "
                       f"its Nodes saved alive, {_size(held)} by now.")
        fix = ("Detach the state carried from one step to the next (h = h.detach()) and drop retain_graph=True unless "
               "you run backward twice through the same graph.")
        self._report("retain-graph-growth", site, explanation, fix, update=True)

    # --- eval-without-no-grad --------------------------------------------------------------
    def _forward_done(self, module, args, output) -> None:
        """An outermost module call returned (ModuleStack.root_outputs); when it built a graph,
        gets its output Node watched: until a backward reaches it, or it dies unused."""
        running = self._running  # the session's running modules: empty after the outermost returned
        if running and (len(running) > 1 or running[0][0] != id(module)):  # (a global hook: for every call)
            return  # a submodule: its outermost module's call is the one watched
        if not self.session.capturing:
            return
        if self._inside:  # writes inside this call into tensors without grad: its output's graph may hold the Node
            try:
                self._settle_inside(output)
            except Exception as exc:  # noqa: BLE001 - the user's module call has run; its output stands
                self._warn("in-place check", exc)
        try:
            with torch._C.DisableTorchFunction():  # (reading grad_fn through a mode costs a call into it)
                if isinstance(output, torch.Tensor):  # the common case, without a loop
                    node = output.grad_fn
                    if node is None or "fv_doctor_forward" in node.metadata:
                        if node is None and self._calls and not torch.is_grad_enabled():
                            self._recomputed(module, args)
                        return
                    nodes = (node,)
                else:
                    nodes = _output_nodes(output)
                    if not nodes:
                        if self._calls and not torch.is_grad_enabled():
                            self._recomputed(module, args)
                        return
                key = next(self._forward_keys)
                first = args[0] if args and isinstance(args[0], torch.Tensor) else None
                if first is not None:  # to tell the same call, made again under no_grad
                    calls = self._calls
                    calls[(id(module), id(first))] = (key, weakref.ref(module), weakref.ref(first))
                    if len(calls) > 2 * MAX_UNUSED:
                        for call, entry in list(calls.items()):
                            if entry[0] not in self._unused:
                                del calls[call]
                dead = self._dead
                for node in nodes:
                    node.metadata["fv_doctor_forward"] = _ForwardWatch(key, dead)
                # its line, its module's type, and how many of its output Nodes are alive
                self._forwards[key] = [user_location(2), type(module).__name__, len(nodes)]
                unused = self._unused
                unused[key] = nodes[0]._sequence_nr() if len(nodes) == 1 else min(n._sequence_nr() for n in nodes)
                if len(unused) > MAX_UNUSED:  # the oldest unused outputs, still alive, are no longer watched
                    for old in list(unused)[:-MAX_UNUSED]:
                        del unused[old]
                        self._forwards.pop(old, None)
        except Exception as exc:  # noqa: BLE001 - the user's module call has run; its output stands
            self._warn("module call check", exc)

    def _recomputed(self, module, args) -> None:
        """A module call without gradients (no_grad, inference_mode): a watched call of the same module on
        the same input, still unused, was the same evaluation with a graph."""
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        entry = self._calls.get((id(module), id(first)))
        if entry is None or entry[1]() is not module or entry[2]() is not first or entry[0] not in self._unused:
            return
        del self._calls[(id(module), id(first))]
        self._superseded.setdefault(entry[0], user_location(2))

    def _held_forwards(self, user_ns: Optional[dict]) -> None:
        """After a cell: watched calls that the same module made again on the same input under no_grad, while
        their own graphs, still unused, stay alive (held by a variable): the graph was an evaluation too,
        kept for a backward that does not come. (Any other unused graph that lives on may still meet its
        backward in a later cell: ``out = model(x)`` then ``loss(out).backward()``; it is told when it dies.)"""
        superseded, self._superseded = self._superseded, {}
        for key, again in superseded.items():
            if self._unused.pop(key, None) is None:
                continue  # a backward used it, or it died (and was told then)
            entry = self._forwards.pop(key, None)
            if entry is None:
                continue
            (filename, line), module, _ = entry
            site = _site_of(filename, line)
            later = _site_of(*again)
            name = _holder(key, user_ns)
            held = f"`{name}` holds" if name else "something still holds"
            explanation = (f"The {module} call at {site.text() if site else 'an unknown line'} ran with gradients "
                           "on: it built an autograd graph and kept its activations for a backward. No backward has "
                           f"used it, the same call ran again under no_grad at "
                           f"{later.text() if later else 'an unknown line'} on the same input, and {held} the "
                           "first one's graph, with its activations, for nothing.")
            fix = ("Evaluate under `with torch.no_grad():` (or torch.inference_mode()); model.eval() alone does not"
                   + (f"; or `del {name}`." if name else "."))
            self._report("eval-without-no-grad", site, explanation, fix)

    def _stale_forwards(self, user_ns: Optional[dict]) -> None:
        """After a cell that stepped an optimizer: watched calls, still unused, whose graph the namespace
        keeps while a tensor the graph saved has been changed in place since (the step's weights): no
        backward can run through it any more, so it is kept for nothing. (An unused graph that can still
        run backward is left alone: its backward may come in a later cell.)"""
        steps, self._steps = self._steps, 0
        if not steps or not self._unused or user_ns is None:
            return
        unused = self._unused
        lowest = min(unused.values())
        budget = [WALK_LIMIT]
        seen: set[int] = set()
        for name, value in list(user_ns.items()):
            if name.startswith("_") or name in ("In", "Out") or type(value) in _ATOMS:
                continue
            stack = [t.grad_fn for t in _graph_tensors(value) if t.grad_fn._sequence_nr() >= lowest]
            while stack and unused and budget[0] > 0:
                node = stack.pop()
                if id(node) in seen:
                    continue
                seen.add(id(node))
                budget[0] -= 1
                watch = node.metadata.get("fv_doctor_forward")
                if watch is not None and watch.key in unused:
                    self._stale_forward(watch.key, node, name, budget)
                    continue  # (what lies below is that call's own graph)
                for child, _ in node.next_functions:
                    if child is not None and lowest <= child._sequence_nr() != _LEAF_SEQUENCE_NR:
                        stack.append(child)

    def _stale_forward(self, key: int, node, name: str, budget: list) -> None:
        """Report the watched call ``key`` (its output Node ``node``, reached from ``name``) if a Node of its
        graph can no longer give a tensor it saved: changed in place since."""
        nodes = _walk([node], budget[0])
        budget[0] -= len(nodes)
        changed = next(((n, hit) for n in nodes if type(n).__name__ != "AccumulateGrad"
                        for hit in (_version_error(n),) if hit is not None), None)
        if changed is None:
            return
        self._unused.pop(key, None)
        entry = self._forwards.pop(key, None)
        if entry is None:
            return
        (filename, line), module, _ = entry
        site = _site_of(filename, line)
        saver, (slot, _) = changed
        explanation = (f"The {module} call at {site.text() if site else 'an unknown line'} ran with gradients on: it "
                       "built an autograd graph and kept its activations for a backward. No backward used it, and "
                       f"a tensor it saved ({type(saver).__name__}'s {slot.removeprefix('_saved_')}) has been "
                       "changed in place since (an optimizer step changes the weights), so none can any more: "
                       f"`{name}` keeps that graph, with its activations, for nothing.")
        fix = ("Evaluate under `with torch.no_grad():` (or torch.inference_mode()); model.eval() alone does not; "
               f"or `{name} = {name}.detach()`.")
        self._report("eval-without-no-grad", site, explanation, fix)

    def _reached(self, roots: list) -> None:
        """The watched module outputs this backward reaches are used. A Node is numbered after the
        Nodes it leads to, so the walk leaves out every Node numbered below the oldest one watched: in
        a training step it visits the loss's few Nodes, not the model's."""
        unused = self._unused
        for root in roots:  # the common case first: a loss one op away from the model's output
            for child, _ in root.next_functions:
                if child is not None:
                    watch = child.metadata.get("fv_doctor_forward")
                    if watch is not None and unused.pop(watch.key, None) is not None and not unused:
                        return
        lowest = min(unused.values()) if len(unused) > 1 else next(iter(unused.values()))
        seen: set[int] = set()
        stack = list(roots)
        while stack:
            node = stack.pop()
            watch = node.metadata.get("fv_doctor_forward")
            if watch is not None and unused.pop(watch.key, None) is not None and not unused:
                return
            for child, _ in node.next_functions:
                if child is not None and lowest <= child._sequence_nr() != _LEAF_SEQUENCE_NR and id(child) not in seen:
                    seen.add(id(child))
                    stack.append(child)
            if len(seen) > REACH_LIMIT:
                return

    def _dead_forwards(self) -> None:
        dead = self._dead
        while dead:
            key = dead.popleft()
            entry = self._forwards.get(key)
            if entry is None:
                continue
            entry[2] -= 1
            if entry[2] > 0:
                continue  # another of its outputs' Nodes lives on
            del self._forwards[key]
            if self._unused.pop(key, None) is None:
                continue  # a backward used it
            (filename, line), module, _ = entry
            site = _site_of(filename, line)
            explanation = (f"The {module} call at {site.text() if site else 'an unknown line'} ran with gradients "
                           "on: it built an autograd graph, kept its activations for a backward, and the graph was "
                           "freed without any backward using it.")
            fix = "Evaluate under `with torch.no_grad():` (or torch.inference_mode()); model.eval() alone does not."
            self._report("eval-without-no-grad", site, explanation, fix)

    # --- graph-kept-alive ------------------------------------------------------------------
    def _kept_graphs(self, user_ns: Optional[dict]) -> None:
        """Names in the namespace that hold graphs from two or more earlier backward steps."""
        marks = self._marks
        if user_ns is None or len(marks) < 2:
            return
        budget = [WALK_LIMIT]  # Nodes walked for single tensors' graphs, this cell
        for name, value in list(user_ns.items()):
            if name.startswith("_") or name in ("In", "Out"):
                continue
            held = _graph_tensors(value)
            steps = self._earlier_steps(value, held, budget) if held else set()
            if len(steps) < 2:
                self._holders.pop(name, None)
                continue
            if len(steps) <= self._holders.get(name, 0):
                continue  # reported already, and not grown since
            self._holders[name] = len(steps)
            kept, nodes = graph_bytes(held)
            oldest = min(held, key=lambda t: t.grad_fn._sequence_nr())
            site = _tag_site(oldest.grad_fn)
            if site is None or site.cell is None:
                site = Site(self._cell, None, "", None, None)
            what = "its autograd graph" if isinstance(value, torch.Tensor) else \
                f"{len(held)} tensors whose autograd graphs come"
            explanation = (f"`{name}` holds {what} from {len(steps)} earlier backward steps ({nodes} Nodes, the "
                           f"first made at {site.text()}): they stay alive, with {_size(kept)} of tensors and "
                           "saved activations, for as long as it does.")
            fix = (f"Keep numbers, not graphs: {name} += loss.item() for a running total."
                   if isinstance(value, torch.Tensor) else
                   f"Keep numbers, not graphs: {name}.append(loss.item()) (or loss.detach()).")
            self._report("graph-kept-alive", site, explanation, fix, update=True)

    def _earlier_steps(self, value, held: list, budget: list) -> set[int]:
        """The earlier backward steps (indexes into the marks) whose graphs ``value`` keeps."""
        marks = self._marks
        last = len(marks)
        if isinstance(value, torch.Tensor):  # one tensor: the steps its one graph spans (total += loss)
            # a Node is numbered after the Nodes it leads to: a graph made before the first mark spans one step
            if budget[0] <= 0 or bisect.bisect_right(marks, value.grad_fn._sequence_nr()) == 0:
                return set()
            nodes = _walk([value.grad_fn], budget[0])
            budget[0] -= len(nodes)
            seqs = [n._sequence_nr() for n in nodes if type(n).__name__ != "AccumulateGrad"]
        else:
            seqs = [t.grad_fn._sequence_nr() for t in held]
        return {step for step in (bisect.bisect_right(marks, s) for s in seqs) if step < last}


def _outputs(output) -> list[torch.Tensor]:
    """The tensors with a graph a module returned: itself, or in a tuple, list or dict (the first 16).

    >>> [t.shape for t in _outputs((torch.ones(2, requires_grad=True) * 2, 3))]
    [torch.Size([2])]
    """
    if isinstance(output, torch.Tensor):
        items = [output]
    elif isinstance(output, (tuple, list)):
        items = list(output[:16])
    elif isinstance(output, dict):
        items = list(dict.values(output))[:16]
    else:
        return []
    return [t for t in items if isinstance(t, torch.Tensor) and t.grad_fn is not None]


def _by_torch() -> bool:
    """Whether torch's own Python code (not the notebook's) ran the op being checked: the nearest frame
    outside forgeviz is torch's."""
    frame = sys._getframe(1)
    try:
        while frame is not None and frame.f_code.co_filename.startswith(_FORGEVIZ_DIR):
            frame = frame.f_back
        return frame is not None and frame.f_code.co_filename.startswith(_TORCH_DIR)
    finally:
        del frame


def _output_nodes(output) -> tuple:
    """The distinct, not yet watched, Nodes of the tensors a module returned in a tuple, list or dict
    (such as transformers' ModelOutput), the first 16 of them."""
    if isinstance(output, (tuple, list)):
        items = output[:16]
    elif isinstance(output, dict):
        items = list(dict.values(output))[:16]
    else:
        return ()
    nodes: dict = {}
    for t in items:
        node = t.grad_fn if isinstance(t, torch.Tensor) else None
        if node is not None and "fv_doctor_forward" not in node.metadata:
            nodes[id(node)] = node
    return tuple(nodes.values())


def _holder(key: int, user_ns: Optional[dict]) -> Optional[str]:
    """The namespace name of a tensor whose Node is the watched module output ``key`` (None if none).

    >>> _holder(1, {}) is None
    True
    """
    for name, value in list((user_ns or {}).items()):
        if name.startswith("_") or not isinstance(value, torch.Tensor):
            continue
        node = value.grad_fn
        watch = node.metadata.get("fv_doctor_forward") if node is not None else None
        if watch is not None and watch.key == key:
            return name
    return None


def _verb(op: str) -> str:
    """How a write is named: ``mul_`` for mul, ``x[...] = ...`` for __setitem__, ``*=`` for __imul__."""
    if op == "setitem":
        return "an assignment into a slice (x[...] = ...)"
    if op.startswith("i") and op[1:] in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or",
                                         "xor", "lshift", "rshift", "matmul"):
        return f"an augmented assignment ({op[1:]}, in place)"
    return f"{op}_" if not op.endswith("_") else op


def _saved_bytes(nodes: list, tensors: Iterable[torch.Tensor] = ()) -> int:
    """The bytes of ``tensors`` and of what ``nodes`` saved, each storage once, leaves requiring grad left out."""
    leaves: set = set()
    kept: dict = {}
    for t in tensors:
        got = _storage(t)
        if got is not None:
            kept.setdefault(got[0], got[1])
    for node in nodes:
        if type(node).__name__ == "AccumulateGrad":
            got = _storage(node.variable)
            if got is not None:
                leaves.add(got[0])
            continue
        for t in _saved(node)[0]:
            got = _storage(t)
            if got is not None:
                kept.setdefault(got[0], got[1])
    return sum(n for key, n in kept.items() if key not in leaves)


def _graph_tensors(value) -> list[torch.Tensor]:
    """Tensors with an autograd graph in ``value``: itself, or in a list, tuple, dict or deque (and one
    level below: a list of tuples or dicts), the newest SCAN_ITEMS of each. Iterates built-in
    containers through their own types' methods: no code of the user's runs."""
    if isinstance(value, torch.Tensor):
        return [value] if value.grad_fn is not None else []
    found: list[torch.Tensor] = []
    for item in _items(value):
        if type(item) in _ATOMS:
            continue
        if isinstance(item, torch.Tensor):
            if item.grad_fn is not None:
                found.append(item)
        else:
            found.extend(t for t in _items(item) if isinstance(t, torch.Tensor) and t.grad_fn is not None)
    return found


def _items(value) -> list:
    if isinstance(value, list):
        items = list.__getitem__(value, slice(-SCAN_ITEMS, None))
    elif isinstance(value, tuple):
        items = tuple.__getitem__(value, slice(-SCAN_ITEMS, None))
    elif isinstance(value, dict):
        items = list(dict.values(value))[-SCAN_ITEMS:]
    elif isinstance(value, collections.deque):
        items = list(collections.deque.__iter__(value))[-SCAN_ITEMS:]
    else:
        return []
    return items


def _parameter_names(params: list, namespace: Optional[dict]) -> list[str]:
    """How the notebook reaches each parameter (``model.0.weight``), else its shape."""
    names: dict[int, str] = {}
    wanted = {id(p) for p in params}
    if namespace is not None:
        for name, value in list(namespace.items()):
            if name.startswith("_") or not isinstance(value, torch.nn.Module):
                continue
            try:
                for path, p in torch.nn.Module.named_parameters(value):
                    if id(p) in wanted:
                        names.setdefault(id(p), f"{name}.{path}")
            except Exception:  # noqa: BLE001, S112 - a module that cannot list its parameters: shapes then
                continue
            if len(names) == len(wanted):
                break
    return [names.get(id(p)) or f"a {list(p.shape)} parameter" for p in params]


def enable_doctor(session) -> Doctor:
    """Install a Doctor on ``session`` (``session.doctor``), or return the one it has."""
    if session.doctor is None:
        doctor = Doctor(session)
        doctor.install()
        session.doctor = doctor
    return session.doctor


def disable_doctor(session) -> None:
    """Uninstall ``session``'s Doctor and clear ``session.doctor``."""
    doctor, session.doctor = session.doctor, None
    if doctor is not None:
        doctor.uninstall()
