"""Module paths of running ops, through torch's global module forward hooks."""

from __future__ import annotations

import logging
import weakref
from typing import Optional

import torch
from torch.nn.modules import module as nn_module

from .fault import Report, boundary, guarded
from .names import ParameterIndex

log = logging.getLogger("forgeviz")


class ModuleStack:
    """Tracks which module's forward is running, as a qualified path from its root module.

    The root is the outermost module being called (``model`` in ``model(x)``); paths are
    ``named_modules()`` names relative to it, ``""`` for the root itself.
    """

    def __init__(self) -> None:
        # (id(module), (id(root), root type, path, module type)): the second is what current() gives,
        # made once per module call rather than once per op.
        self._stack: list[tuple[int, tuple[int, str, str, str]]] = []
        self._paths: "weakref.WeakKeyDictionary[torch.nn.Module, dict[int, str]]" = weakref.WeakKeyDictionary()
        self._handles: list = []
        self.parameters = ParameterIndex()  # parameters of every root seen in a forward
        self._roots: dict[int, weakref.ref] = {}  # id(root module) -> weakref, for types and names
        self._root: Optional[torch.nn.Module] = None
        self._root_paths: dict[int, str] = {}  # _paths_of(self._root), while it runs
        # Told when an outermost module call starts (root_call(module, args)) and ends
        # (root_return(module)): the memory timeline rides on these hooks instead of adding its own.
        self.root_listeners: list = []
        # Called (module, args, output) after an outermost module call returned (not when it raised): the
        # doctor watches what the call built from here, rather than from a global hook of its own that
        # torch would call for every submodule too.
        self.root_outputs: list = []
        # fault(message): where the hooks' faults go (the session's, which sets it)
        self.fault: Report = _log_fault

    @property
    def installed(self) -> bool:
        return bool(self._handles)

    def install(self) -> None:
        self._handles = [
            nn_module.register_module_forward_pre_hook(self._pre),
            nn_module.register_module_forward_hook(self._post, always_call=True),
        ]

    def uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._stack.clear()

    def reset(self) -> None:
        """Forget running modules (a cell that raised mid-forward may leave some)."""
        self._stack.clear()

    def current(self) -> Optional[tuple[int, str, str, str]]:
        """(id(root), root type, path, module type) of the innermost running module."""
        return self._stack[-1][1] if self._stack else None

    def _paths_of(self, root: torch.nn.Module) -> dict[int, str]:
        paths = self._paths.get(root)
        if paths is None:
            paths = {id(m): name for name, m in root.named_modules(remove_duplicate=False)}
            self._paths[root] = paths
            key = id(root)
            self._roots[key] = weakref.ref(root, lambda _: self._roots.pop(key, None))
            self.parameters.add_module(root)
        return paths

    def root(self, root_id: int) -> Optional[torch.nn.Module]:
        """The root module with this id, while it lives (and was seen in a forward)."""
        ref = self._roots.get(root_id)
        return ref() if ref is not None else None

    def root_type(self, root_id: int) -> Optional[str]:
        root = self._roots.get(root_id)
        module = root() if root is not None else None
        return type(module).__name__ if module is not None else None

    def module_type(self, root_id: int, path: str) -> Optional[str]:
        """Class name of the submodule at ``path`` under a root seen in a forward."""
        root = self._roots.get(root_id)
        module = root() if root is not None else None
        if module is None:
            return None
        try:
            return type(module.get_submodule(path)).__name__
        except AttributeError:
            return None

    @guarded("entering a module call")  # inside the user's model call
    def _pre(self, module: torch.nn.Module, args) -> None:
        stack = self._stack
        if stack:
            root_id, root_type = stack[0][1][:2]
            path = self._root_paths.get(id(module))
            if path is None:  # added after we indexed the root: index again once
                root = self._root
                self._paths.pop(root, None)
                self._root_paths = self._paths_of(root)
                path = self._root_paths.get(id(module))
            if path is None:  # a module called from inside another that does not own it
                path = f"{stack[-1][1][2]}.<{type(module).__name__}>".lstrip(".")
        else:
            self._root = module
            root_id, root_type = id(module), type(module).__name__
            self._root_paths = self._paths_of(module)
            path = ""
        stack.append((id(module), (root_id, root_type, path, type(module).__name__)))
        if len(stack) == 1 and self.root_listeners:
            with torch._C.DisableTorchFunction():  # their tensor reads are not the user's ops
                for listener in list(self.root_listeners):
                    with boundary(self.fault, "telling of a module call"):  # the other listeners still hear
                        listener.root_call(module, args)

    @guarded("leaving a module call")  # inside the user's model call
    def _post(self, module: torch.nn.Module, args, output) -> None:
        # Pop down to this module: an exception may have skipped inner posts.
        while self._stack:
            if self._stack.pop()[0] == id(module):
                break
        if not self._stack:
            self._root = None
            self._root_paths = {}
            for listener in list(self.root_listeners):
                with boundary(self.fault, "telling of a module call's end"):  # the others still hear
                    listener.root_return(module)
            if output is not None:  # (None: the call raised, and torch calls this hook anyway)
                for returned in list(self.root_outputs):
                    with boundary(self.fault, "telling of a module call's output"):
                        returned(module, args, output)


def _log_fault(message: str) -> None:
    """A module stack's faults before a session takes them: a log line."""
    log.warning("forgeviz: %s", message)
