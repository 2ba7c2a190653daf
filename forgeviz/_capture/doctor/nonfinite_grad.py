"""``nonfinite-grad``: the first Node of a backward whose gradients went NaN or infinite, as the session's
gradient hooks recorded them (``GradStore``); told at the line that made that Node.

On a GPU a backward's numbers come after it (device_summary.py: its read-back's event): the backward's Checkup
(its Nodes, whose saved tensors the backward freed, and its line, looked up then) is kept until they have come,
and the finding is told then: at the next backward's end (its pass waited for this one's read-back) or at the
cell's end, whichever comes first."""

from __future__ import annotations

from typing import Optional

from .detector import CellEnd, Checkup, Detector
from .graphs import walk
from .sites import node_text, tag_site


class NonfiniteGrad(Detector):
    """Reads the gradient store after each backward: its Python-recorded entries of this pass are its newest."""

    kind = "nonfinite-grad"

    def __init__(self, doctor) -> None:
        super().__init__(doctor)
        self._seen = 0  # the last gradient-store pass looked at for a non-finite gradient
        self._waiting: Optional[Checkup] = None  # a backward whose numbers are still to come (a GPU's)

    def backward_ends(self, checkup: Checkup, returned: bool) -> None:
        self._told_late()  # (a pass recorded since waited for its read-back: its numbers are in)
        index = checkup.passes
        if index <= self._seen:
            return
        session = self.doctor.session
        store = session.store
        if index != store.passes or not session.record_grads:
            return
        if store.recorded == index and session.recorder.device.reading and checkup.frees is not False:
            checkup.site()  # (its line now: later the stack is elsewhere)
            self._waiting = checkup
        nodes = getattr(store, "_nodes", None)  # (GradStore.nodes would make records of every pass not read yet)
        if not nodes:
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
        self._waiting = None
        self._report(checkup, *first)

    def end_cell(self, end: CellEnd) -> None:
        if self._waiting is not None:
            self.doctor.session.recorder.device.poll()  # (no wait: an event's query)
            self._told_late()

    def _told_late(self) -> None:
        """The waiting backward's finding, if its numbers came and went non-finite; it waits on while they may
        still come (no pass recorded since, whose end waited for them, and a read-back in flight)."""
        checkup = self._waiting
        if checkup is None:
            return
        session = self.doctor.session
        store = session.store
        nid = store.first_nonfinite_of.get(checkup.passes)
        if nid is None:
            if store.recorded > checkup.passes or not session.recorder.device.reading:
                self._waiting = None
            return
        self._waiting = None
        entry = store.get(nid)
        records = entry.records if entry is not None else []
        record = next((r for r in reversed(records) if r.backward_index == checkup.passes), None)
        if record is not None and checkup.passes > self._seen:
            self._report(checkup, nid, record)

    def _report(self, checkup: Checkup, nid: int, record) -> None:
        """Tell Node ``nid`` (its ``record``) of ``checkup``'s backward as its first non-finite one."""
        self._seen = checkup.passes
        node = next((n for n in walk(checkup.roots) if n.metadata.get("fv_id") == nid), None)
        sent = [s for s in record.grad_inputs if s is not None]
        got = [s for s in record.grad_outputs if s is not None]
        kinds = " and ".join(k for k, n in (("NaN", sum(s.nan_count for s in sent + got)),
                                             ("infinite", sum(s.inf_count for s in sent + got))) if n)
        received_finite = not any(s.nan_count or s.inf_count for s in got)
        backward = checkup.site()
        name = node_text(node) if node is not None else "a Node"
        explanation = (f"{name} was the first Node whose gradients went {kinds or 'non-finite'} in the backward at "
                       f"{backward.text() if backward else 'an unknown line'}"
                       + (": the gradients it received were finite, the ones it sent were not." if received_finite
                          else "."))
        fix = ("Keep that op's input inside its domain (log(x.clamp_min(eps)), sqrt(x + eps), a safe divisor), or "
               "find why its input got there; torch.autograd.set_detect_anomaly(True) adds the forward's traceback.")
        site = tag_site(node) if node is not None else None
        self.doctor.report(self.kind, site if site is not None and site.cell is not None else backward,
                           explanation, fix)
