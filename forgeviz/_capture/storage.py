"""Which tensors hold memory of their own: a leaf (torch only), for every walk over tensors.

Dynamo, AOTAutograd and torch.export keep fake and functional tensors alive in their caches: a gc walk
after any ``torch.compile`` finds them beside the user's. Their storages have sizes but no data, and
asking for a data pointer raises, so every walk that counts memory asks here first.
"""

from __future__ import annotations

import sys
from typing import Optional

import torch

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _without_data(t: torch.Tensor) -> bool:
    """Whether ``t`` is a functional or fake tensor: shapes and sizes, no memory of its own."""
    if torch._is_functional_tensor(t):
        return True
    # FakeTensor lives in this module: none exists before something (Dynamo, export) imported it
    fake = sys.modules.get("torch._subclasses.fake_tensor")
    return fake is not None and type(t) not in _PLAIN and fake.is_fake(t)


def real_storage(t: torch.Tensor, meta: bool = False) -> Optional[torch.UntypedStorage]:
    """The storage that holds ``t``'s data in memory, or None for a tensor with none to count: not
    strided (sparse, MKLDNN), nested, on the meta device, or fake or functional (its storage has no
    data pointer), or with an empty storage. ``meta=True`` keeps a meta tensor's storage (its size
    with no memory: what the side panel lists for it, as torch reports it).

    >>> real_storage(torch.ones(2)).nbytes()
    8
    >>> real_storage(torch.ones(2, device="meta")) is None
    True
    >>> real_storage(torch.ones(2, device="meta"), meta=True).nbytes()
    8
    >>> from torch._subclasses.fake_tensor import FakeTensorMode
    >>> with FakeTensorMode():
    ...     fake = torch.ones(2)
    >>> real_storage(fake) is None
    True
    """
    try:
        if t.layout != torch.strided or t.is_nested or _without_data(t):
            return None
        if t.is_meta:
            return t.untyped_storage() if meta and t.untyped_storage().nbytes() else None
        storage = t.untyped_storage()
        storage.data_ptr()  # raises for a storage with no data (a compiled graph's own fake tensors)
    except (RuntimeError, NotImplementedError, TypeError):
        return None
    return storage if storage.nbytes() else None
