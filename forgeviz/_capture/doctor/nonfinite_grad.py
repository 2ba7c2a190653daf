"""``nonfinite-grad``: the first Node of a backward whose gradients went NaN or infinite, as the session's
gradient hooks recorded them (``GradStore``); told at the line that made that Node."""

from __future__ import annotations

from .detector import Checkup, Detector
from .graphs import walk
from .sites import node_text, tag_site


class NonfiniteGrad(Detector):
    """Reads the gradient store after each backward: its Python-recorded entries of this pass are its newest."""

    kind = "nonfinite-grad"

    def __init__(self, doctor) -> None:
        super().__init__(doctor)
        self._seen = 0  # the last gradient-store pass looked at for a non-finite gradient

    def backward_ends(self, checkup: Checkup, returned: bool) -> None:
        index = checkup.passes
        if index <= self._seen:
            return
        session = self.doctor.session
        store = session.store
        nodes = getattr(store, "_nodes", None)  # (GradStore.nodes would make records of every pass not read yet)
        if not nodes or index != store.passes or not session.record_grads:
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
        self._seen = index
        nid, record = first
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
