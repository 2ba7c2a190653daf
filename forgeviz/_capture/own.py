"""What forgeviz's own Python structures weigh: a bounded walk of containers, counting each object once."""

from __future__ import annotations

import sys
from typing import Iterable

import torch

_ATOMS = (int, float, str, bytes, bool, type(None))
# An estimate of one weakref.finalize with its registry entry, which the walk cannot see into.
FINALIZER_BYTES = 200


def deep_bytes(roots: Iterable[object], limit: int = 200_000) -> int:
    """``sys.getsizeof`` of every object reachable from ``roots`` through dicts, lists, tuples, sets,
    ``__dict__`` and ``__slots__`` (each counted once, at most ``limit`` objects; tensors and
    modules are the user's, never counted).

    >>> deep_bytes([[1, 2]]) == sys.getsizeof([1, 2]) + 2 * sys.getsizeof(1)
    True
    """
    seen: set[int] = set()
    stack = list(roots)
    total = 0
    while stack and len(seen) < limit:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (torch.Tensor, torch.nn.Module, type)):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, _ATOMS):
            continue
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        else:
            fields = getattr(obj, "__dict__", None)
            if fields is not None:
                stack.append(fields)
            for name in getattr(type(obj), "__slots__", ()):
                value = getattr(obj, name, None)
                if value is not None:
                    stack.append(value)
    return total
