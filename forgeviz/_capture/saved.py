"""What an autograd Node saved for backward, by name: the one place that knows where Nodes keep it.

A C++ Node exposes each saved value as a ``_saved_<name>`` attribute (tensors, sizes, scalars); a
Python ``autograd.Function``'s Node (a compiled region's too) keeps its tensors in ``saved_tensors``.
"""

from __future__ import annotations

import torch

_ALL: dict[type, list[str]] = {}  # Node type → the attributes it saves into
_TENSORS: dict[type, list[str]] = {}  # Node type → those of them that can hold tensors


def saved_attrs(node) -> list[str]:
    """Every attribute ``node`` saved into, tensors or not (AddBackward0's alpha too). Found once per type.

    >>> x = torch.ones(2, requires_grad=True)
    >>> saved_attrs((x * x).grad_fn)
    ['_saved_other', '_saved_self']
    """
    names = _ALL.get(type(node))
    if names is None:
        names = [a for a in dir(type(node)) if a.startswith("_saved_")]
        if not names and hasattr(type(node), "_forward_cls"):  # a Python Function's (a compiled region's)
            names = ["saved_tensors"]
        _ALL[type(node)] = names
    return names


def tensor_slots(grad_fn) -> list[str]:
    """The attributes of :func:`saved_attrs` that can hold tensors: not saved sizes, strides and
    scalars (AddmmBackward0 saves 8 things, 2 of them tensors), which cost a read each. Found once
    per Node type (the memory timeline's claims and the doctor both ask).

    >>> x = torch.ones(2, 2, requires_grad=True)
    >>> tensor_slots((x * x).grad_fn), tensor_slots(x.sum(dim=0).grad_fn)  # sum keeps only sizes
    (['_saved_other', '_saved_self'], [])
    """
    names = _TENSORS.get(type(grad_fn))
    if names is not None:
        return names
    names = []
    for name in saved_attrs(grad_fn):
        try:
            value = getattr(grad_fn, name)
        except RuntimeError:  # freed already: keep it, its type is unknown
            names.append(name)
            continue
        items = value if isinstance(value, (tuple, list)) else (value,)
        if any(isinstance(t, torch.Tensor) for t in items) or value is None or not items:
            names.append(name)  # tensors, an optional tensor, or an empty tensor list
    _TENSORS[type(grad_fn)] = names
    return names
