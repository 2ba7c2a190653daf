"""``inplace-saved-tensor``: an in-place write changed a tensor a live Node saved. Told at the write, and
again when the backward fails on it. A tensor without grad too (an input, a buffer written inside a
module's forward), when torch's use count says something besides the user holds it: then the Node is
looked for among the graphs the notebook holds (inside a module call: its output's, when it returns)."""

from __future__ import annotations

import collections
import os
import sys
import weakref
from typing import Optional

import torch

from ..session import _next_sequence_nr, _op_name
from ..source import user_location
from .detector import CellEnd, Checkup, Detector, scan
from .graphs import INPLACE_ERROR, LEAF_SEQUENCE_NR, VERSION, WALK_LIMIT, saved, version_error, walk
from .sites import Site, message, node_text, site_here, site_of

MAX_WRITES = 64  # in-place writes remembered (for a backward that fails on one)
MAX_PENDING = 16  # writes into tensors without grad whose Node is looked for again (after a module call, a cell)
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_FORGEVIZ_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep  # forgeviz/


def _verb(op: str) -> str:
    """How a write is named: ``mul_`` for mul, ``x[...] = ...`` for __setitem__, ``*=`` for __imul__.

    >>> _verb("mul"), _verb("imul")
    ('mul_', 'an augmented assignment (mul, in place)')
    """
    if op == "setitem":
        return "an assignment into a slice (x[...] = ...)"
    if op.startswith("i") and op[1:] in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or",
                                         "xor", "lshift", "rshift", "matmul"):
        return f"an augmented assignment ({op[1:]}, in place)"
    return f"{op}_" if not op.endswith("_") else op


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


class InplaceSavedTensor(Detector):
    """Checks each in-place write (the Doctor's ``wrote``), and a backward that failed on one."""

    kind = "inplace-saved-tensor"

    def __init__(self, doctor) -> None:
        super().__init__(doctor)
        self._writes: collections.deque = collections.deque(maxlen=MAX_WRITES)
        # writes into tensors without grad that a Node may have saved, its Node not found yet: (ref(tensor),
        # ref(its base) or False, op, Site, the sequence number then)
        self._pending: collections.deque = collections.deque(maxlen=MAX_PENDING)
        self._inside: list = []  # such writes inside the module call running now

    def uninstall(self) -> None:
        self._writes.clear()
        self._pending.clear()
        self._inside = []

    # --- at the write ----------------------------------------------------------------------------------
    def wrote(self, func, target) -> None:
        if not isinstance(target, torch.Tensor):
            return
        op = _op_name(func)[0]
        inside = bool(self.doctor.running)  # inside a module's forward
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
                hit = version_error(child)
                if hit is not None:
                    self._report_write(op, site_here(), child, hit[0])

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
        site = site_here()
        where = (site.filename, site.file_line) if site is not None else None
        self._writes.append((weakref.ref(target), target._version, op, where))
        write = (weakref.ref(target), base is not None and weakref.ref(base), op, site, _next_sequence_nr())
        if inside:
            self._inside.append(write)  # looked for when the outermost module call returns, then after the cell
        elif not self._settle(write, [t.grad_fn for _, _, held in scan(self.doctor.namespace()) for t in held]):
            self._pending.append(write)  # looked for again after the cell (a function's result may hold it)

    def _settle(self, write: tuple, roots: list) -> bool:
        """Whether the Node that saved what ``write`` (a pending write into a tensor without grad) changed was
        found from ``roots``, and told. The walk leaves out Nodes older than the last backward that freed
        its graph (a Node is numbered after those it leads to) and those made after the write."""
        tref, bref, op, site, before = write
        versions = {t._version for t in (tref(), bref() if bref else None) if t is not None}
        if not versions or not roots:
            return not versions
        marks = self.doctor.marks
        lowest = marks[-1] if marks else 0
        seen: set[int] = set()
        stack = [r for r in roots if r is not None and lowest <= r._sequence_nr()]
        while stack and len(seen) < WALK_LIMIT:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if node._sequence_nr() < before and "fv_doctor_write" not in node.metadata:
                for slot, said in saved(node)[1]:
                    match = VERSION.search(said)
                    if INPLACE_ERROR in said and match and int(match.group(1)) in versions:
                        self._report_write(op, site, node, slot)
                        return True
            for child, _ in node.next_functions:
                if child is not None and lowest <= child._sequence_nr() != LEAF_SEQUENCE_NR and id(child) not in seen:
                    stack.append(child)
        return False

    def module_call(self, module, args: tuple, output) -> None:
        """The outermost module call returned: writes inside it whose Node its output's graph holds are told;
        the rest wait for the cell's end."""
        if not self._inside:
            return
        writes, self._inside = self._inside, []
        with torch._C.DisableTorchFunction():
            roots = [t.grad_fn for t in _outputs(output)]
            self._pending.extend(write for write in writes if not self._settle(write, roots))

    def end_cell(self, end: CellEnd) -> None:
        """After a cell: the pending writes' Nodes, from the graphs its namespace holds; then they are dropped."""
        self._pending.extend(self._inside)
        self._inside = []
        if self._pending:
            roots = [t.grad_fn for _, _, held in end.holders() for t in held]
            for write in self._pending:
                self._settle(write, roots)
            self._pending.clear()

    def _report_write(self, op: str, site: Optional[Site], node, slot: str) -> None:
        node.metadata["fv_doctor_write"] = (op, site)  # plain data: a failing backward names it
        explanation = (f"{_verb(op)} at {site.text() if site else 'an unknown line'} wrote in place into a "
                       f"tensor that {node_text(node)} saved for backward (its {slot.removeprefix('_saved_')}): a "
                       "backward through that Node will fail with torch's 'modified by an inplace operation' error.")
        fix = (f"Use the out-of-place op (y = y.{op}(...) rather than y.{op}_(...)), or write into a .clone() "
               "of the tensor." if not _verb(op).startswith("an ") else
               "Write into a .clone() of the tensor, or build a new tensor instead of writing into this one.")
        self.doctor.report(self.kind, site, explanation, fix)

    # --- when a backward fails on it -------------------------------------------------------------------
    def backward_failed(self, checkup: Checkup, failed: BaseException) -> None:
        """A backward failed on a tensor written in place since a Node saved it: name the Node and the write."""
        if INPLACE_ERROR not in message(failed):
            return
        node = hit = None
        for candidate in walk(checkup.roots):
            if type(candidate).__name__ == "AccumulateGrad":
                continue
            hit = version_error(candidate)
            if hit is not None:
                node = candidate
                break
        if node is None:
            return
        write = node.metadata.get("fv_doctor_write")
        if write is None:  # not seen at the write (a tensor without grad): the write that moved it past that version
            match = VERSION.search(hit[1])
            now, was = (int(match.group(1)), int(match.group(2))) if match else (None, None)
            for ref, version, op, where in reversed(self._writes):
                t = ref()
                if match is not None and (t is None or t._version != now or version <= was):
                    continue
                write = (op, site_of(*where) if where else None)
                if match is None or version == was + 1:
                    break
        site = checkup.site()
        wrote = f"{_verb(write[0])} at {write[1].text() if write[1] else 'an unknown line'}" if write else \
            "an in-place write"
        explanation = (f"The backward at {site.text() if site else 'an unknown line'} failed: {node_text(node)} "
                       f"needed the tensor it saved (its {hit[0].removeprefix('_saved_')}), and {wrote} had "
                       "changed it since.")
        fix = "Make that write out of place (or write into a .clone()), so the saved tensor keeps its values."
        self.doctor.report(self.kind, site, explanation, fix)
