"""Module paths of running ops, through module forward hooks that forgeviz places in one place
(:class:`ModuleHooks`): torch's global hooks, or each module's own once a compiled module exists."""

from __future__ import annotations

import functools
import gc
import logging
import sys
import weakref
from typing import Callable, Optional

import torch
from torch.nn.modules import module as nn_module

from .fault import Report, boundary, report
from .names import ParameterIndex

log = logging.getLogger("forgeviz")
_is_compiling = torch.compiler.is_compiling
PreHook = Optional[Callable[[torch.nn.Module, tuple], None]]
PostHook = Optional[Callable[[torch.nn.Module, tuple, object], None]]


def _optimized_module_type() -> Optional[type]:
    """torch.compile's module wrapper, if Dynamo was ever loaded (it is not by ``import torch``): no
    compiled module can exist before."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    return getattr(eval_frame, "OptimizedModule", None)


def class_name(module: torch.nn.Module) -> str:
    """The class a user knows ``module`` by: torch.compile's wrapper (``OptimizedModule``) is named by
    the module it compiled, as the user wrote it.

    >>> class_name(torch.nn.Linear(1, 1)), class_name(torch.compile(torch.nn.Linear(1, 1)))
    ('Linear', 'Linear')
    """
    wrapper = _optimized_module_type()
    if wrapper is not None and isinstance(module, wrapper):
        module = module._orig_mod
    return type(module).__name__


def _living(cls: type) -> list:
    """Every object the garbage collector tracks whose type is ``cls`` or below (by ``type()``: a
    weak proxy to a dead object raises on ``isinstance``)."""
    return [obj for obj in gc.get_objects() if issubclass(type(obj), cls)]


def _inner_of(wrapper: torch.nn.Module) -> Optional[torch.nn.Module]:
    """An OptimizedModule's ``_orig_mod``, or None while torch.compile is still building it (its
    ``__getattr__`` raises KeyError then)."""
    inner = wrapper.__dict__.get("_modules", {}).get("_orig_mod", wrapper.__dict__.get("_orig_mod"))
    return inner if isinstance(inner, torch.nn.Module) else None


class ModuleHooks:
    """Where forgeviz's module forward hooks go: every subscriber's pre and post hook, called in the
    order they subscribed, from one pair of hooks per place.

    While no compiled module lives, that place is torch's global hooks, which see every module,
    whenever it was made. ``torch.compile(module)`` warns about global hooks and would trace them into
    its graphs, so while an ``OptimizedModule`` lives the hooks go on each module instead, except the
    compiled module's own (``_orig_mod`` and below), which Dynamo then sees as without forgeviz. The
    wrapper itself runs eagerly and keeps its hooks: a compiled call is one module call.

    Each module is known from a census: torch's registration hooks from the first start, which see
    every module that registers a parameter, buffer or submodule, and one walk of the garbage
    collector's objects once Dynamo is loaded (no compiled module can exist before), for the modules
    made earlier. The hooks stay until :meth:`close` (``%unload_ext``): they cost a set insertion per
    registration, and Dynamo never traces them. A module with none of these, made after the census
    (a lone ``nn.ReLU()``), is not known: its ops carry no module while a compiled module lives.

    >>> hooks = ModuleHooks(); seen = []
    >>> handle = hooks.subscribe(lambda m, args: seen.append(type(m).__name__), None)
    >>> _ = torch.nn.Linear(1, 1)(torch.ones(1)); handle.remove(); hooks.close(); seen
    ['Linear']
    """

    def __init__(self) -> None:
        self._subscribers: list[tuple[PreHook, PostHook]] = []
        self.per_module = False  # hooks on each module (a compiled module lives) rather than global ones
        self._forward: list = []  # torch's global forward hooks, or the one registration hook before a census
        self._hooked: "weakref.WeakKeyDictionary[torch.nn.Module, tuple]" = weakref.WeakKeyDictionary()
        self._census: list = []  # the registration hooks that keep the census, from the first start
        self._walked = False  # whether the garbage collector's modules were walked (once Dynamo loaded)
        self._known: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()
        self._compiled: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()
        self.wrappers: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()  # torch.compile's, living
        self.registrations = 0  # submodules registered anywhere since the census began (a module tree may have grown)

    def subscribe(self, pre: PreHook, post: PostHook) -> "_Subscription":
        """Call ``pre(module, args)`` before and ``post(module, args, output)`` after every module call
        (``output`` None when the call raised), until the returned handle's ``remove()``."""
        entry = (pre, post)
        self._subscribers.append(entry)
        if len(self._subscribers) == 1:
            self._start()
        return _Subscription(self, entry)

    def _unsubscribe(self, entry) -> None:
        if entry in self._subscribers:
            self._subscribers.remove(entry)
            if not self._subscribers:
                self._stop()

    @property
    def active(self) -> bool:
        return bool(self._subscribers)

    def close(self) -> None:
        """Remove every hook, the census's too (the next start takes a new one)."""
        self._subscribers.clear()
        self._stop()
        for handle in self._census:
            handle.remove()
        self._census = []
        self._walked = False
        self._known = weakref.WeakSet()

    def _start(self) -> None:
        if not self._census:
            # Never from inside a registration hook: torch iterates these hooks' dict while it calls them.
            self._census = [nn_module.register_module_module_registration_hook(self._module_registered),
                            nn_module.register_module_parameter_registration_hook(self._registered),
                            nn_module.register_module_buffer_registration_hook(self._registered)]
        if _optimized_module_type() is not None:
            self._walk()
        if len(self.wrappers):
            self._go_per_module()
        else:
            self._forward = [nn_module.register_module_forward_pre_hook(self._pre),
                             nn_module.register_module_forward_hook(self._post, always_call=True)]

    def _stop(self) -> None:
        self.per_module = False
        for handle in self._forward:
            handle.remove()
        self._forward = []
        for pre_handle, post_handle in list(self._hooked.values()):
            pre_handle.remove()
            post_handle.remove()
        self._hooked = weakref.WeakKeyDictionary()

    def _walk(self) -> None:
        """Know every living module (one walk of the garbage collector's objects, once Dynamo is loaded:
        the registration hooks know those made later), and every living compiled module."""
        if self._walked:
            return
        self._walked = True
        wrapper = _optimized_module_type()
        for module in _living(torch.nn.Module):
            self._known.add(module)
            if wrapper is not None and isinstance(module, wrapper):
                inner = _inner_of(module)
                if inner is not None:
                    self.wrappers.add(module)
                    self._mark_compiled(inner)

    def _go_per_module(self) -> None:
        self._stop()
        self.per_module = True  # after _stop, which ends it
        for module in list(self._known):
            self._adopt(module)

    def _mark_compiled(self, inner: torch.nn.Module) -> None:
        """No hooks on a compiled module and below: Dynamo traces them as it would without forgeviz."""
        for module in inner.modules():
            self._compiled.add(module)
            handles = self._hooked.pop(module, None)
            if handles is not None:
                handles[0].remove()
                handles[1].remove()

    def _adopt(self, module: torch.nn.Module) -> None:
        if module in self._hooked or module in self._compiled:
            return
        # prepend: before the module's own hooks, as torch's global hooks run
        self._hooked[module] = (module.register_forward_pre_hook(self._pre, prepend=True),
                                module.register_forward_hook(self._post, prepend=True, always_call=True))

    def _module_registered(self, module, name, submodule):
        self.registrations += 1
        self._known.add(module)
        if submodule is not None:
            for inner in submodule.modules():
                self._known.add(inner)
        wrapper = _optimized_module_type()
        if wrapper is not None and isinstance(module, wrapper) and name == "_orig_mod" and submodule is not None:
            self._walk()  # (Dynamo was loaded since the hooks started)
            self.wrappers.add(module)
            self._mark_compiled(submodule)
            if self._subscribers and not self.per_module:  # before the wrapper's first call
                self._go_per_module()
        if self.per_module:
            self._adopt(module)
            for inner in submodule.modules() if submodule is not None else ():
                self._adopt(inner)

    def _registered(self, module, name, value):
        self._known.add(module)
        if self.per_module:
            self._adopt(module)

    # Dynamo traces global hooks (and a module's own) into what it compiles, torch.compile(fn) or
    # module.compile(): each returns at once there, so Dynamo guards on none of forgeviz's state.
    def _pre(self, module, args):
        if _is_compiling():
            return
        for pre, _ in self._subscribers:
            if pre is not None:
                pre(module, args)

    def _post(self, module, args, output):
        if _is_compiling():
            return
        for _, post in self._subscribers:
            if post is not None:
                post(module, args, output)


class _Subscription:
    """What :meth:`ModuleHooks.subscribe` returns: ``remove()`` ends it."""

    def __init__(self, hooks: ModuleHooks, entry) -> None:
        self._hooks, self._entry = hooks, entry

    def replace(self, pre: PreHook, post: PostHook) -> None:
        """Call ``pre`` and ``post`` from now on, in the same place among the subscribers."""
        subscribers, entry = self._hooks._subscribers, (pre, post)
        for k, subscribed in enumerate(subscribers):
            if subscribed is self._entry:
                subscribers[k] = entry
        self._entry = entry

    def remove(self) -> None:
        self._hooks._unsubscribe(self._entry)


module_hooks = ModuleHooks()  # the one place for the process: each subscriber is called from it


class _RootIndex:
    """What a :class:`ModuleStack` knows of one root module's tree, made once and again only when the tree grew."""

    __slots__ = ("paths", "entries", "unowned")

    def __init__(self, paths: dict[int, str]) -> None:
        self.paths = paths  # id(module) -> its named_modules() path under the root
        # id(module) -> (its entry on the stack, a weakref to it): what _pre pushed for a module in the tree, which
        # the native library pushes itself at its next call (native/grad_hooks.cpp's module_pre)
        self.entries: dict[int, tuple] = {}
        # id(module) -> module_hooks.registrations when a module called under the root was found not to be in its
        # tree: called again with no registration since, it is not in it still (no walk of the tree per call)
        self.unowned: dict[int, int] = {}


class ModuleStack:
    """Tracks which module's forward is running, as a qualified path from its root module.

    The root is the outermost module being called (``model`` in ``model(x)``); paths are
    ``named_modules()`` names relative to it, ``""`` for the root itself.
    """

    def __init__(self) -> None:
        # (id(module), (id(root), root type, path, module type)): the second is what current() gives,
        # made once per module call rather than once per op.
        self._stack: list[tuple[int, tuple[int, str, str, str]]] = []
        self._indexes: "weakref.WeakKeyDictionary[torch.nn.Module, _RootIndex]" = weakref.WeakKeyDictionary()
        self._handles: list = []
        self.parameters = ParameterIndex()  # parameters of every root seen in a forward
        self._roots: dict[int, weakref.ref] = {}  # id(root module) -> weakref, for types and names
        self._root: Optional[torch.nn.Module] = None
        self._index = _RootIndex({})  # the running root's, while it runs
        self._entries: dict[int, tuple] = {}  # self._index.entries: the attribute module_pre reads
        self._native = None  # the native library whose push and pop the hooks call (use_native)
        # Told when an outermost module call starts (root_call(module, args)) and ends
        # (root_return(module)): the memory timeline rides on these hooks instead of adding its own.
        self.root_listeners: list = []
        # Called (module, args, output) after an outermost module call returned (not when it raised): the
        # doctor watches what the call built from here, rather than from a global hook of its own that
        # torch would call for every submodule too.
        self.root_outputs: list = []
        # Called (module, None) before and (module, output) after a torch.compile'd module's call (output
        # None if it raised): the session steps its mode aside for it, and claims what it saved.
        self.compiled_calls: list = []
        # fault(message): where the hooks' faults go (the session's, which sets it)
        self.fault: Report = _log_fault

    @property
    def installed(self) -> bool:
        return bool(self._handles)

    def install(self) -> None:
        self._handles = [module_hooks.subscribe(self._pre, self._post)]
        self._native = None

    def use_native(self, hooks) -> None:
        """Push and pop a module called inside another with ``hooks`` (the native library: its ``module_pre`` and
        ``module_post``), which leave the rest to :meth:`_pre` and :meth:`_post`; None: those alone.

        >>> stack = ModuleStack(); stack.install(); stack.use_native(None); stack.uninstall()
        """
        if not self._handles or hooks is self._native:
            return
        self._native = hooks
        if hooks is None:
            self._handles[0].replace(self._pre, self._post)
        else:
            self._handles[0].replace(functools.partial(hooks.module_pre, self, module_hooks),
                                     functools.partial(hooks.module_post, self, module_hooks))

    def uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._native = None
        self._stack.clear()  # (not reset(): whatever fails there, the hooks are gone)
        self._running(_RootIndex({}))

    def reset(self) -> None:
        """Forget running modules (a cell that raised mid-forward may leave some)."""
        self._stack.clear()
        self._running(_RootIndex({}))

    def _running(self, index: _RootIndex) -> None:  # (the entries too, where module_pre reads them)
        self._index, self._entries = index, index.entries

    def current(self) -> Optional[tuple[int, str, str, str]]:
        """(id(root), root type, path, module type) of the innermost running module."""
        return self._stack[-1][1] if self._stack else None

    def _paths_of(self, root: torch.nn.Module) -> _RootIndex:
        """The index of ``root``'s tree, made now (a walk of it) if there is none."""
        index = self._indexes.get(root)
        if index is None:
            paths = {id(m): name for name, m in root.named_modules(remove_duplicate=False)}
            index = self._indexes[root] = _RootIndex(paths)
            key = id(root)
            self._roots[key] = weakref.ref(root, lambda _: self._roots.pop(key, None))
            self.parameters.add_module(root)
        return index

    def _index_again(self, root: torch.nn.Module) -> _RootIndex:
        """``root``'s tree indexed again (it may have grown): the entries of modules still at their paths, and the
        modules known to be outside it, stay."""
        known = self._indexes.pop(root, None)
        index = self._paths_of(root)
        if known is not None:
            index.entries = {key: entry for key, entry in known.entries.items()
                             if index.paths.get(key) == entry[0][1][2]}
            index.unowned = known.unowned
        return index

    def root(self, root_id: int) -> Optional[torch.nn.Module]:
        """The root module with this id, while it lives (and was seen in a forward)."""
        ref = self._roots.get(root_id)
        return ref() if ref is not None else None

    def root_type(self, root_id: int) -> Optional[str]:
        root = self._roots.get(root_id)
        module = root() if root is not None else None
        return class_name(module) if module is not None else None

    def module_type(self, root_id: int, path: str) -> Optional[str]:
        """Class name of the submodule at ``path`` under a root seen in a forward."""
        root = self._roots.get(root_id)
        module = root() if root is not None else None
        if module is None:
            return None
        try:
            return class_name(module.get_submodule(path))
        except AttributeError:
            return None

    # Called twice per module call, inside the user's model call: the fault boundary inline rather than
    # guarded's extra Python call (a 3-layer MLP's step makes twelve of these calls).
    def _pre(self, module: torch.nn.Module, args) -> None:
        try:
            stack = self._stack
            if stack:
                root_id, root_type = stack[0][1][:2]
                index = self._index
                path = index.paths.get(id(module))
                if path is None and index.unowned.get(id(module)) != module_hooks.registrations:
                    # added after we indexed the root (or some module registered a submodule since): index again
                    index = self._index_again(self._root)
                    self._running(index)
                    path = index.paths.get(id(module))
                    if path is None:
                        index.unowned[id(module)] = module_hooks.registrations
                owned = path is not None
                if not owned:  # a module called from inside another that does not own it
                    path = f"{stack[-1][1][2]}.<{type(module).__name__}>".lstrip(".")
            else:
                self._root = module
                root_id, root_type = id(module), type(module).__name__
                self._running(self._paths_of(module))
                path, owned = "", False
            entry = (id(module), (root_id, root_type, path, type(module).__name__))
            stack.append(entry)
            if owned:  # the next call of this module under this root: pushed by the native library, if built
                self._entries[id(module)] = (entry, weakref.ref(module))
            if module_hooks.per_module and module in module_hooks.wrappers:
                for listener in self.compiled_calls:
                    listener(module, None, True)
            if len(stack) == 1 and self.root_listeners:
                with torch._C.DisableTorchFunction():  # their tensor reads are not the user's ops
                    for listener in list(self.root_listeners):
                        with boundary(self.fault, "telling of a module call"):  # the other listeners still hear
                            listener.root_call(module, args)
        except Exception as exc:  # noqa: BLE001 - the boundary inline
            report(self.fault, "entering a module call", exc)

    def _post(self, module: torch.nn.Module, args, output) -> None:
        try:
            if module_hooks.per_module and module in module_hooks.wrappers:
                for listener in self.compiled_calls:
                    listener(module, output, False)
            # Pop down to this module: an exception may have skipped inner posts.
            while self._stack:
                if self._stack.pop()[0] == id(module):
                    break
            if not self._stack:
                self._root = None
                self._running(_RootIndex({}))
                for listener in list(self.root_listeners):
                    with boundary(self.fault, "telling of a module call's end"):  # the others still hear
                        listener.root_return(module)
                if output is not None:  # (None: the call raised, and torch calls this hook anyway)
                    for returned in list(self.root_outputs):
                        with boundary(self.fault, "telling of a module call's output"):
                            returned(module, args, output)
        except Exception as exc:  # noqa: BLE001 - the boundary inline
            report(self.fault, "leaving a module call", exc)


def _log_fault(message: str) -> None:
    """A module stack's faults before a session takes them: a log line."""
    log.warning("forgeviz: %s", message)
