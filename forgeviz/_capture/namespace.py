"""The tensors of a notebook's namespace, for the side panel: plain tensors, and the parameters and
buffers of each ``nn.Module``. Read without calling ``str()`` or ``repr()`` on any user object, in
bounded time (at most ``MAX_TENSOR_ROWS`` rows), each storage's bytes counted once."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Iterator, Optional

import torch

from ..model.panel import MAX_TENSOR_ROWS, TensorListing, TensorRow

# A grad norm is read for at most this many gradient elements per listing: a big model's norms would
# cost the cell more than the panel may (2 ms with 300 tensors); past it the rows show none.
GRAD_NORM_ELEMENTS = 4_000_000


def _storage_key(t: torch.Tensor) -> Optional[tuple]:
    """What tells storages apart (its impl's address, and its device), or None without one."""
    try:
        s = t.untyped_storage()
        return (t.device.type, t.device.index, s._cdata), s.nbytes()
    except (RuntimeError, NotImplementedError, TypeError):  # sparse, nested, MKLDNN: no plain storage
        return None


def _entries(user_ns: Mapping[str, object]) -> Iterator[tuple[str, Optional[str], str, torch.Tensor]]:
    """(name, module, kind, tensor) for each tensor the namespace holds: plain tensors first, then each
    module's parameters and buffers. Hidden names (``_``, ``_i3``, ...) are IPython's, not the user's."""
    modules = []
    for name, value in list(user_ns.items()):
        if not isinstance(name, str) or name.startswith("_"):
            continue
        if isinstance(value, torch.Tensor):
            yield name, None, "tensor", value
        elif isinstance(value, torch.nn.Module):
            modules.append((name, value))
    for name, module in modules:
        try:
            for pname, p in module.named_parameters():
                yield f"{name}.{pname}", name, "parameter", p
            for bname, b in module.named_buffers():
                if isinstance(b, torch.Tensor):
                    yield f"{name}.{bname}", name, "buffer", b
        except Exception:  # noqa: BLE001 - a user's module that fails to list its parameters lists none
            continue


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
    rows: list[TensorRow] = []
    readers: dict = {}  # storage key -> the rows that read it
    total = more = 0
    norm_budget = GRAD_NORM_ELEMENTS
    for name, module, kind, t in _entries(user_ns):
        if len(rows) >= limit:
            more += 1
            continue
        found = _storage_key(t)
        nbytes, counted = 0, True
        if found is not None:
            key, nbytes = found
            counted = key not in readers
            readers.setdefault(key, []).append(len(rows))
            if counted:
                total += nbytes
        grad_norm = None
        grad = t.grad if t.is_leaf else None  # .grad of a non-leaf warns, and is None unless retained
        if isinstance(grad, torch.Tensor) and grad.layout == torch.strided and grad.device.type != "meta":
            if grad.numel() <= norm_budget:
                norm_budget -= grad.numel()
                g = grad.detach()
                value = float(torch.linalg.vector_norm(g if g.is_complex() else g.to(torch.float64)))
                grad_norm = value if math.isfinite(value) else None
        grad_fn = t.grad_fn
        rows.append(TensorRow(
            name=name, module=module, kind=kind, shape=list(t.shape), dtype=str(t.dtype).removeprefix("torch."),
            device=str(t.device), storage_bytes=nbytes, counted=counted, shared=False,
            requires_grad=t.requires_grad, leaf=t.is_leaf,
            grad_fn=type(grad_fn).__name__ if grad_fn is not None else None, grad_norm=grad_norm))
    for indices in readers.values():
        if len(indices) > 1:
            for i in indices:
                rows[i].shared = True
    return TensorListing(rows=rows, more=more, total_bytes=total)
