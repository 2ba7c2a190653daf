"""The tensors of a notebook's namespace, for the side panel: plain tensors, and the parameters and
buffers of each ``nn.Module``. Read without calling ``str()`` or ``repr()`` on any user object, in
bounded time (at most ``MAX_TENSOR_ROWS`` rows), each storage's bytes counted once."""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping
from typing import Iterator, Optional

import torch

from ..model.panel import MAX_TENSOR_ROWS, TensorListing, TensorRow
from .storage import real_storage

# A grad norm is read for at most this many gradient elements per listing: a big model's norms would
# cost the cell more than the panel may (2 ms with 300 tensors); past it the rows show none.
GRAD_NORM_ELEMENTS = 4_000_000


def _storage_key(t: torch.Tensor) -> Optional[tuple]:
    """What tells storages apart (its impl's address, and its device), or None without one (sparse,
    nested, MKLDNN, fake or functional: ``real_storage``)."""
    s = real_storage(t, meta=True)  # a meta tensor is listed with the size torch gives its storage
    return None if s is None else ((t.device.type, t.device.index, s._cdata), s.nbytes())


_structure = 0  # counts registrations of parameters, buffers and submodules in any nn.Module
_hooks: list = []


def _registered(*_args) -> None:
    global _structure
    _structure += 1


def watch_modules() -> None:
    """Count every parameter, buffer and submodule registration (torch's global hooks), so a lister
    reads a module's parameters again only when some module changed. Undone by ``unwatch_modules``."""
    if not _hooks:
        from torch.nn.modules import module

        _hooks.extend([module.register_module_parameter_registration_hook(_registered),
                       module.register_module_buffer_registration_hook(_registered),
                       module.register_module_module_registration_hook(_registered)])


def unwatch_modules() -> None:
    while _hooks:
        _hooks.pop().remove()


class TensorLister:
    """Lists a namespace again and again (after each cell), reusing what did not change: a row is
    read again only when its tensor's version, requires_grad or gradient changed; a module's
    parameters are walked again only after some module registered something (``watch_modules``)."""

    def __init__(self) -> None:
        self._rows: dict = {}  # id(tensor) -> (weakref, key, row, storage key)
        self._modules: dict = {}  # id(module) -> (weakref, structure count, entries)

    def _module_entries(self, name: str, module: torch.nn.Module) -> list:
        cached = self._modules.get(id(module))
        watched = bool(_hooks)
        if cached is not None and cached[0]() is module and watched and cached[1] == _structure:
            return cached[2]
        entries = []
        try:
            entries += [(f"{name}.{p_name}", name, "parameter", p) for p_name, p in module.named_parameters()]
            entries += [(f"{name}.{b_name}", name, "buffer", b) for b_name, b in module.named_buffers()
                        if isinstance(b, torch.Tensor)]
        except Exception:  # noqa: BLE001 - a user's module that fails to list its parameters lists none
            entries = []
        try:
            self._modules[id(module)] = (weakref.ref(module), _structure, entries)
        except TypeError:  # not weakly referenceable: read each time
            pass
        return entries

    def _entries(self, user_ns: Mapping[str, object]) -> Iterator[tuple[str, Optional[str], str, torch.Tensor]]:
        """(name, module, kind, tensor): plain tensors first, then each module's parameters and buffers.
        Hidden names (``_``, ``_i3``, ...) are IPython's, not the user's."""
        modules = []
        for name, value in list(user_ns.items()):
            if not isinstance(name, str) or name.startswith("_"):
                continue
            if isinstance(value, torch.Tensor):
                yield name, None, "tensor", value
            elif isinstance(value, torch.nn.Module):
                modules.append((name, value))
        for name, module in modules:
            yield from self._module_entries(name, module)

    def _row(self, name: str, module: Optional[str], kind: str, t: torch.Tensor, norm_budget: list):
        """The row of ``t`` and its storage key (reused while nothing it shows changed)."""
        grad = t.grad if t.is_leaf else None  # .grad of a non-leaf warns, and is None unless retained
        key = (name, module, t._version, t.requires_grad, t.grad_fn is None, id(grad),
               grad._version if grad is not None else -1)
        cached = self._rows.get(id(t))
        if cached is not None and cached[0]() is t and cached[1] == key:
            row = cached[2]
            if row.grad_norm is not None or grad is None:
                norm_budget[0] -= grad.numel() if grad is not None else 0
                return row, cached[3]
        found = _storage_key(t)
        storage, nbytes = found if found is not None else (None, 0)
        grad_norm = None
        if isinstance(grad, torch.Tensor) and grad.layout == torch.strided and grad.device.type != "meta":
            if grad.numel() <= norm_budget[0]:
                norm_budget[0] -= grad.numel()
                g = grad.detach()
                value = float(torch.linalg.vector_norm(g if g.is_complex() else g.to(torch.float64)))
                grad_norm = value if math.isfinite(value) else None
        grad_fn = t.grad_fn
        row = TensorRow(
            name=name, module=module, kind=kind, shape=list(t.shape), dtype=str(t.dtype).removeprefix("torch."),
            device=str(t.device), storage_bytes=nbytes, counted=True, shared=False,
            requires_grad=t.requires_grad, leaf=t.is_leaf,
            grad_fn=type(grad_fn).__name__ if grad_fn is not None else None, grad_norm=grad_norm)
        try:
            self._rows[id(t)] = (weakref.ref(t), key, row, storage)
        except TypeError:
            pass
        return row, storage

    def list(self, user_ns: Mapping[str, object], limit: int = MAX_TENSOR_ROWS) -> TensorListing:
        """The panel's listing of ``user_ns``: at most ``limit`` rows, the rest counted in ``more``."""
        rows: list[TensorRow] = []
        readers: dict = {}  # storage key -> the rows that read it
        total = more = 0
        norm_budget = [GRAD_NORM_ELEMENTS]
        seen = set()
        for name, module, kind, t in self._entries(user_ns):
            if len(rows) >= limit:
                more += 1
                continue
            row, storage = self._row(name, module, kind, t, norm_budget)  # reused: its two flags are set anew
            row.counted, row.shared = True, False
            seen.add(id(t))
            if storage is not None:
                row.counted = storage not in readers
                readers.setdefault(storage, []).append(len(rows))
                if row.counted:
                    total += row.storage_bytes
            rows.append(row)
        for indices in readers.values():
            if len(indices) > 1:
                for i in indices:
                    rows[i].shared = True
        # forget tensors no longer listed (their ids may be reused)
        for gone in [k for k in self._rows if k not in seen]:
            del self._rows[gone]
        return TensorListing(rows=rows, more=more, total_bytes=total)


def list_tensors(user_ns: Mapping[str, object], limit: int = MAX_TENSOR_ROWS) -> TensorListing:
    """The panel's listing of ``user_ns``: at most ``limit`` rows, the rest counted in ``more``.

    >>> import torch
    >>> w = torch.zeros(3, 4)
    >>> listing = list_tensors({"w": w, "v": w.T, "_hidden": w})
    >>> [(r.name, r.shape, r.storage_bytes, r.counted, r.shared) for r in listing.rows]
    [('w', [3, 4], 48, True, True), ('v', [4, 3], 48, False, True)]
    >>> listing.total_bytes
    48
    """
    return TensorLister().list(user_ns, limit)


def tensor_with_root(user_ns: Mapping[str, object], node_ids: set):
    """A namespace tensor whose ``grad_fn`` has one of ``node_ids`` (forgeviz's Node ids: the latest
    backward's roots, ``loss``), or None.

    >>> import torch
    >>> x = torch.ones(2, requires_grad=True); loss = (x * 2).sum()
    >>> tensor_with_root({"loss": loss}, {loss.grad_fn.metadata.setdefault("fv_id", -5)}) is loss
    True
    """
    for name, value in list(user_ns.items()):
        if isinstance(name, str) and not name.startswith("_") and isinstance(value, torch.Tensor):
            fn = value.grad_fn
            if fn is not None and fn.metadata.get("fv_id") in node_ids:
                return value
    return None
