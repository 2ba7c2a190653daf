"""What the user calls things: notebook variables first, then parameter names, then torch's."""

from __future__ import annotations

import weakref
from typing import Mapping, Optional

import torch


class ParameterIndex:
    """``named_parameters`` names of the parameters of modules seen so far, by identity.

    >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2))
    >>> index = ParameterIndex(); index.add_module(net)
    >>> index.lookup(net[0].weight)[:2]
    ('0.weight', '0')
    """

    def __init__(self) -> None:
        # id(parameter) -> (weakref to it, qualified name, owning module path, id(root))
        self._params: dict[int, tuple[weakref.ref, str, str, int]] = {}

    def add_module(self, root: torch.nn.Module) -> None:
        for name, param in root.named_parameters():
            name = user_path(name)
            self._params[id(param)] = (weakref.ref(param), name, name.rpartition(".")[0], id(root))

    def lookup(self, tensor: torch.Tensor) -> Optional[tuple[str, str, int]]:
        """(qualified name, owning module path, id(root module)), or None for a non-parameter."""
        entry = self._params.get(id(tensor))
        if entry is None or entry[0]() is not tensor:  # unknown, or its id was reused
            return None
        return entry[1], entry[2], entry[3]


# torch.compile(module) wraps a module in an OptimizedModule that holds it as ``_orig_mod``: a path
# through one is the same module, named as you named it.
_COMPILED_WRAPPER = "_orig_mod"


def user_path(path: str) -> str:
    """A ``named_parameters``/``named_modules`` path without torch.compile's ``_orig_mod`` steps.

    >>> user_path("_orig_mod.0.weight"), user_path("blocks._orig_mod.1"), user_path("_orig_mod")
    ('0.weight', 'blocks.1', '')
    """
    if _COMPILED_WRAPPER not in path:
        return path
    return ".".join(part for part in path.split(".") if part != _COMPILED_WRAPPER)


class NameIndex:
    """Names for tensors, Nodes and modules, gathered from namespaces (a notebook's user_ns).

    Intermediate names are written into ``grad_fn.metadata`` so they stick to the Node even after
    the variable is reassigned; leaves and modules are matched by identity (checked by weakref).
    """

    def __init__(self) -> None:
        self._leaves: dict[int, tuple[weakref.ref, list[str]]] = {}
        self._modules: dict[int, tuple[weakref.ref, str]] = {}
        self.parameters = ParameterIndex()

    def scan(self, namespace: Mapping[str, object]) -> None:
        """Record the names of every tensor and module bound at the top level of ``namespace``."""
        for name, value in list(namespace.items()):
            if name.startswith("_"):
                continue
            if isinstance(value, torch.Tensor):
                self._name_tensor(name, value)
            elif isinstance(value, torch.nn.Module):
                self._name_module(name, value)

    def _name_tensor(self, name: str, tensor: torch.Tensor) -> None:
        grad_fn = tensor.grad_fn
        if grad_fn is not None:
            names = grad_fn.metadata.setdefault("fv_names", [])
            if name not in names:
                names.append(name)
        elif tensor.requires_grad:
            entry = self._leaves.get(id(tensor))
            if entry is None or entry[0]() is not tensor:
                key = id(tensor)
                entry = (weakref.ref(tensor, lambda _: self._leaves.pop(key, None)), [])
                self._leaves[key] = entry
            if name not in entry[1]:
                entry[1].append(name)

    def _name_module(self, name: str, module: torch.nn.Module) -> None:
        entry = self._modules.get(id(module))
        if entry is not None and entry[0]() is module:
            return
        self._modules[id(module)] = (weakref.ref(module), name)
        self.parameters.add_module(module)

    def leaf_names(self, tensor: torch.Tensor) -> list[str]:
        entry = self._leaves.get(id(tensor))
        return list(entry[1]) if entry is not None and entry[0]() is tensor else []

    def module_name(self, module_id: int) -> Optional[str]:
        entry = self._modules.get(module_id)
        return entry[1] if entry is not None and entry[0]() is not None else None


def node_names(node) -> list[str]:
    """Names recorded on a Node (see NameIndex.scan)."""
    return list(node.metadata.get("fv_names", ()))
