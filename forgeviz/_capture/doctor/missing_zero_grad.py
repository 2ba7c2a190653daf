"""``missing-zero-grad``: an optimizer stepped with a ``.grad`` that summed backward passes from both sides of
its previous step (no reset in between).

Each parameter is followed on its own (a frozen or unused one, a second param group, a reset of only
some .grads): once per step, and at the first backward after it; between steps, only a backward that
added into a .grad a step had used leaves anything to look at."""

from __future__ import annotations

import weakref
from typing import Optional

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from .detector import Checkup, Detector
from .sites import Site

_ZEROING = {torch.Tensor.zero_, torch.zero_, torch._foreach_zero_}  # what zero_grad(set_to_none=False) calls


def _parameter_names(params: list, namespace: Optional[dict]) -> list[str]:
    """How the notebook reaches each parameter (``model.0.weight``), else its shape.

    >>> model = torch.nn.Linear(2, 1); _parameter_names([model.bias, torch.ones(3)], {"model": model})
    ['model.bias', 'a [3] parameter']
    """
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


class MissingZeroGrad(Detector):
    """After each step, the .grad (and its version) of each parameter it used; at the next backward, those
    still unchanged are candidates, and those that backward added into are checked at the next step
    (an optimizer pre-step hook, registered only while there are any)."""

    kind = "missing-zero-grad"

    def __init__(self, doctor) -> None:
        super().__init__(doctor)
        # id(optimizer) → (ref(optimizer), {id(param): (ref(its .grad), its version)}) right after a step, for
        # the parameters not yet seen reset (or added into) since
        self._stepped: dict[int, tuple] = {}
        # id(param) → (ref(param), ref(.grad), Site, its data pointer): a backward summed into a .grad already
        # stepped with
        self._accumulated: dict[int, tuple] = {}
        self._pre_step = None  # the step pre-hook, while a backward has added into a stepped .grad

    def uninstall(self) -> None:
        if self._pre_step is not None:
            self._pre_step.remove()
            self._pre_step = None
        self._stepped.clear()
        self._accumulated.clear()

    def step_post(self, optimizer) -> None:
        """After a step: each parameter's .grad (and its version), to tell whether the next backward finds
        it reset (zero_grad sets it to None, or zeroes it: a new version)."""
        if self._pre_step is not None and not self._accumulated:  # (not from inside the pre-hooks' loop)
            self._pre_step.remove()
            self._pre_step = None
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

    def backward_begins(self, checkup: Checkup) -> None:
        if self._stepped:
            candidates = self._stale_grads()
            if candidates:
                checkup.notes[self.kind] = candidates

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

    def backward_ends(self, checkup: Checkup, returned: bool) -> None:
        """After that backward: the stepped .grads it added to (the others stay followed)."""
        candidates = checkup.notes.get(self.kind)
        if not candidates:
            return
        site = checkup.site()
        for key, pid, pref, gref, version in candidates:
            p, grad = pref(), gref()
            if p is not None and grad is not None and p.grad is grad and grad._version != version:
                stepped = self._stepped.get(key)
                if stepped is not None:
                    stepped[1].pop(pid, None)
                    if not stepped[1]:
                        del self._stepped[key]
                self._accumulated[pid] = (pref, gref, site, grad.data_ptr())
        if self._accumulated and self._pre_step is None and self.doctor.installed:
            self._pre_step = register_optimizer_step_pre_hook(self._step_pre)

    def wrote(self, func, target) -> None:
        """``zero_`` (or ``_foreach_zero_``) wrote into tensors: a .grad that summed across a step and is
        zeroed now (zero_grad(set_to_none=False), p.grad.zero_(), p.grad.data.zero_()) was reset."""
        if not self._accumulated or func not in _ZEROING:
            return
        with torch._C.DisableTorchFunction():
            zeroed = {t.data_ptr() for t in (target if isinstance(target, (list, tuple)) else (target,))
                      if isinstance(t, torch.Tensor)}
            for pid, entry in list(self._accumulated.items()):
                if entry[3] in zeroed:
                    del self._accumulated[pid]

    def _step_pre(self, optimizer, args, kwargs) -> None:
        """Before a step: parameters whose .grad sums gradients from both sides of the previous step."""
        with self.doctor.guard(self.kind):
            with torch._C.DisableTorchFunction():
                hits: dict = {}
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        entry = self._accumulated.pop(id(p), None)
                        if entry is not None and entry[0]() is p and p.grad is entry[1]():
                            hits.setdefault(entry[2], []).append(p)
                for site, params in hits.items():
                    self._missing_zero_grad(optimizer, site, params)

    def _missing_zero_grad(self, optimizer, site: Optional[Site], params: list) -> None:
        found = self.doctor.finding_at(self.kind, site)
        if found is not None:  # seen at this line: counted, not described again
            found.count += 1
            return
        names = _parameter_names(params, self.doctor.namespace())
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        opt = type(optimizer).__name__
        where = site.text() if site is not None else "an unknown line"
        explanation = (f"The backward at {where} added its gradients into the .grad of {len(params)} parameter"
                       f"{'s' if len(params) != 1 else ''} ({shown}) that {opt}.step() had already used, and nothing "
                       f"reset them in between: the next {opt}.step() applies the sum of this step's gradients and "
                       "every earlier one's.")
        fix = f"Call optimizer.zero_grad() once per step, before loss.backward() (or right after {opt}.step())."
        self.doctor.report(self.kind, site, explanation, fix)
