"""What autograd graphs hold, as the detectors read it: the Nodes a graph reaches, the tensors a Node
saved for backward (or torch's error for one it cannot give), their bytes with each storage counted once,
and the tensors with a graph that a namespace value keeps. Reads only; keeps nothing."""

from __future__ import annotations

import collections
import re
from typing import Iterable, Optional

import torch

from ..saved import tensor_slots
from ..untraced import untraced
from .sites import message

WALK_LIMIT = 20_000  # Nodes one graph walk visits at most
SCAN_ITEMS = 10_000  # items of one namespace container looked at (its newest)
LEAF_SEQUENCE_NR = 2**64 - 1  # an AccumulateGrad's: past every op's Node
INPLACE_ERROR = "modified by an inplace operation"
VERSION = re.compile(r"is at version (\d+); expected version (\d+)")
ATOMS = {float, int, str, bool, type(None), bytes}


def walk(roots: Iterable, limit: int = WALK_LIMIT) -> list:
    """The Nodes reachable from ``roots``, each once, at most ``limit``.

    >>> x = torch.ones(2, requires_grad=True); [type(n).__name__ for n in walk([(x * 2).sum().grad_fn])]
    ['SumBackward0', 'MulBackward0', 'AccumulateGrad']
    """
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


def saved(node) -> tuple[list[torch.Tensor], list[tuple[str, str]]]:
    """(the tensors ``node`` still holds for backward, [(slot, torch's error)] for those it cannot give).

    >>> s = torch.ones(2, requires_grad=True).sigmoid(); [t.shape for t in saved(s.grad_fn)[0]]
    [torch.Size([2])]
    """
    tensors: list[torch.Tensor] = []
    errors: list[tuple[str, str]] = []
    for name in tensor_slots(node):
        try:
            value = getattr(node, name)
        except RuntimeError as exc:  # freed by a backward, or changed in place since it was saved
            errors.append((name, message(exc)))
            continue
        for t in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(t, torch.Tensor):
                tensors.append(t)
    return tensors, errors


def version_error(node) -> Optional[tuple[str, str]]:
    """(slot, torch's message) when a tensor ``node`` saved was written in place since, else None.

    >>> s = torch.ones(2, requires_grad=True).sigmoid(); node = s.grad_fn; _ = s.mul_(2); version_error(node)[0]
    '_saved_result'
    """
    for name, said in saved(node)[1]:
        if INPLACE_ERROR in said:
            return name, said
    return None


def _storage(t: torch.Tensor) -> Optional[tuple[tuple, int]]:
    """(a key telling storages apart, its bytes), None without one (meta, sparse)."""
    try:
        if t.layout != torch.strided or t.is_meta:
            return None
        storage = t.untyped_storage()
        return (t.device.type, t.device.index, storage.data_ptr()), storage.nbytes()
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def saved_bytes(nodes: list, tensors: Iterable[torch.Tensor] = ()) -> int:
    """The bytes of ``tensors`` and of what ``nodes`` saved, each storage once, leaves requiring grad left out.

    >>> w = torch.ones(4, requires_grad=True); h = torch.ones(3)
    >>> saved_bytes(walk([(w.sum() * h).grad_fn]))  # MulBackward0 saved h; w is a leaf
    12
    """
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
        for t in saved(node)[0]:
            got = _storage(t)
            if got is not None:
                kept.setdefault(got[0], got[1])
    return sum(n for key, n in kept.items() if key not in leaves)


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
        nodes = walk([t.grad_fn for t in tensors], limit)
        return saved_bytes(nodes, tensors), len(nodes)


def graph_tensors(value) -> list[torch.Tensor]:
    """Tensors with an autograd graph in ``value``: itself, or in a list, tuple, dict or deque (and one
    level below: a list of tuples or dicts), the newest SCAN_ITEMS of each. Iterates built-in
    containers through their own types' methods: no code of the user's runs.

    >>> y = torch.ones(1, requires_grad=True) * 2; len(graph_tensors([y, (y, 3)])), graph_tensors("y")
    (2, [])
    """
    if isinstance(value, torch.Tensor):
        return [value] if value.grad_fn is not None else []
    found: list[torch.Tensor] = []
    for item in _items(value):
        if type(item) in ATOMS:
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


def public(name: str) -> bool:
    """Whether the doctor looks at this namespace name: not IPython's history (``In``, ``Out``, ``_3``) nor
    a private one.

    >>> public("losses"), public("_"), public("Out")
    (True, False, False)
    """
    return not name.startswith("_") and name not in ("In", "Out")
