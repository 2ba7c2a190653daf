"""The capture session: one per kernel. Tags ops, tracks modules, records backward passes."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import types
import weakref
from typing import Callable, Iterator, Optional

import torch
from torch.overrides import TorchFunctionMode

from . import native
from .fault import boundary, report
from .grads import BackwardRecorder, GradStore, node_id
from .modules import ModuleStack
from .own import deep_bytes
from .source import use_native_walk, user_files, user_frame_above, user_location
from .untraced import untraced

log = logging.getLogger("forgeviz")

_BACKWARD_FUNCS = {torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad}
_SLOW = object()  # what the mode's native body returns for an op that its Python body runs

# Reached through the mode but never an op of the user's graph nor an allocation: reading or
# resetting .grad and friends, reading a tensor's numbers or its metadata, and the profiler's
# record_function marks. optimizer.zero_grad() alone makes 15 such calls per step on a 3-layer MLP,
# twice the ops of its forward.
def _not_ops() -> set:
    base = torch._C.TensorBase
    found = {base.grad.__get__, base.grad.__set__, base.requires_grad.__get__, base.is_leaf.__get__,
             base.grad_fn.__get__, base.shape.__get__, base.dtype.__get__, base.device.__get__,
             base.is_cuda.__get__, base.ndim.__get__, base.item, base.tolist, base.size, base.dim,
             base.numel, base.stride, base.is_contiguous, base.storage_offset, base.element_size,
             base.data_ptr, torch.Tensor.__len__}
    try:  # private ops: a torch without them simply sends these through the slow path
        found |= {torch.ops.profiler._record_function_enter_new,
                  torch.ops.profiler._record_function_exit._RecordFunction}
    except (AttributeError, RuntimeError):
        pass
    return found


_NOT_OPS = _not_ops()


_ZERO_GRAD = torch.optim.Optimizer.zero_grad  # as torch defines it


# while a session is installed: (that session, the zero_grad it replaced, its wrapper)
_zero_grad_patch: Optional[tuple] = None


def _zero_grad_aside(session: "CaptureSession", on: bool) -> None:
    """While ``session`` is installed (``on``), ``torch.optim.Optimizer.zero_grad`` steps our mode aside
    (see :meth:`CaptureSession._zero_grad`); off puts back what was there. A training loop calls it every
    step, and torch calls a TorchFunctionMode for each ``.grad`` it resets: 20 µs of a 0.6 ms step on a
    3-layer MLP. (An optimizer class with a zero_grad of its own keeps it, under the mode.) Whatever
    ``zero_grad`` is in place when the session installs (torch's, or another library's patch) is the one
    called, and is put back at uninstall unless something else replaced ours meanwhile (then that stays).

    >>> s = CaptureSession(); _zero_grad_aside(s, True); torch.optim.Optimizer.zero_grad is _ZERO_GRAD
    False
    >>> _zero_grad_aside(s, False); torch.optim.Optimizer.zero_grad is _ZERO_GRAD
    True
    """
    global _zero_grad_patch
    if not on:
        if _zero_grad_patch is not None and _zero_grad_patch[0] is session:  # (another session's stays)
            _, replaced, wrapper = _zero_grad_patch
            if torch.optim.Optimizer.__dict__.get("zero_grad") is wrapper:
                torch.optim.Optimizer.zero_grad = replaced
            _zero_grad_patch = None
        return
    if _zero_grad_patch is not None:
        return  # one session's at a time
    replaced = torch.optim.Optimizer.__dict__["zero_grad"]

    @functools.wraps(replaced)
    def wrapper(optimizer, *args, **kwargs):
        # (Dynamo, tracing this, calls torch's, which it never traces: a compiled loop breaks its graph there as
        # before. Not torch._disable_dynamo here too: each such layer costs a call ~2 µs, each step.)
        if _is_compiling():
            return replaced(optimizer, *args, **kwargs)
        return session._zero_grad(replaced, optimizer, args, kwargs)

    torch.optim.Optimizer.zero_grad, _zero_grad_patch = wrapper, (session, replaced, wrapper)


def _op_name(func) -> tuple[str, str]:
    """(short op name, qualified name): ``Tensor.__rmul__`` → ``("mul", "torch.Tensor.__rmul__")``."""
    try:
        return _OP_NAMES[func]
    except (KeyError, TypeError):  # TypeError: an unhashable callable
        pass
    names = _name_op(func)
    try:
        _OP_NAMES[func] = names
    except TypeError:
        pass
    return names


_OP_NAMES: dict = {}  # torch function → its names (every op the TorchFunctionMode sees asks)


def _name_op(func) -> tuple[str, str]:
    name = getattr(func, "__name__", None) or str(func)
    qual = getattr(func, "__qualname__", name)
    module = getattr(func, "__module__", None) or "torch"
    short = name.strip("_")
    if name.startswith("__r") and name.endswith("__") and name[3:-2] in _REFLECTED:
        short = name[3:-2]
    if qual.startswith(("TensorBase.", "_TensorBase.")):
        qual = "Tensor." + qual.split(".", 1)[1]
        module = "torch"
    return short, f"{module}.{qual}" if not qual.startswith(module) else qual


_REFLECTED = {"add", "sub", "mul", "matmul", "truediv", "floordiv", "pow", "mod", "and", "or", "xor", "lshift",
              "rshift", "div"}


_BACKWARD_PARAMS = {  # each backward function's leading parameters, in order
    torch.Tensor.backward: ("self", "gradient", "retain_graph", "create_graph", "inputs"),
    torch.autograd.backward: ("tensors", "grad_tensors", "retain_graph", "create_graph", "grad_variables", "inputs"),
    torch.autograd.grad: ("outputs", "inputs", "grad_outputs", "retain_graph", "create_graph"),
}


def _backward_arguments(func, args, kwargs) -> dict:
    """A backward function's arguments by parameter name (the leading ones, and any keyword).

    >>> _backward_arguments(torch.autograd.grad, ("out", "inp"), {"retain_graph": True})["inputs"]
    'inp'
    """
    return dict(zip(_BACKWARD_PARAMS[func], args), **kwargs)


def _roots_of_backward(func, args, kwargs) -> list:
    """The Nodes a backward/grad call starts from.

    >>> x = torch.ones(2, requires_grad=True); y = x * 2
    >>> [type(n).__name__ for n in _roots_of_backward(torch.autograd.grad, (), {"outputs": [y, x]})]
    ['MulBackward0', 'AccumulateGrad']
    """
    # (each backward's first parameter names the outputs: args[0] when given by position, as they are
    # in ``loss.backward()``, without building the dict of every argument per step)
    outputs = args[0] if args else kwargs.get(_BACKWARD_PARAMS[func][0])
    if isinstance(outputs, (torch.Tensor, torch.autograd.graph.GradientEdge)):
        outputs = [outputs]
    roots = []
    for out in outputs or ():
        if isinstance(out, torch.autograd.graph.GradientEdge):
            roots.append(out.node)
        elif isinstance(out, torch.Tensor) and out.requires_grad:
            roots.append(out.grad_fn if out.grad_fn is not None else torch.autograd.graph.get_gradient_edge(out).node)
    return roots


def _frees_saved(func, args, kwargs) -> Optional[bool]:
    """Whether a backward that returns will have freed the saved tensors of every Node reachable from
    its roots (True), of none (False: ``retain_graph``), or of some (None: ``inputs=`` or ``grad``).

    >>> _frees_saved(torch.Tensor.backward, (None,), {}), _frees_saved(torch.Tensor.backward, (None, None, True), {})
    (True, False)
    """
    bound = _backward_arguments(func, args, kwargs)
    retain = bound.get("retain_graph")
    if retain if retain is not None else bound.get("create_graph", False):
        return False
    return None if func is torch.autograd.grad or bound.get("inputs") is not None else True


_next_sequence_nr = torch._C._autograd._get_sequence_nr  # the number the next Node made on this thread gets
# The TorchFunctionMode stack, which an optimizer step takes our mode off (CaptureSession._step_aside)
_function_modes = torch._C._len_torch_function_stack
_function_mode_at = torch._C._get_function_stack_at
_pop_function_mode = torch._C._pop_torch_function_stack
_push_function_mode = torch._C._push_on_torch_function_stack


def _tag_inner_nodes(grad_fn, tag: tuple, first_new: int) -> None:
    """Give ``tag`` to the untagged Nodes behind ``grad_fn`` that its op created (numbered from
    ``first_new``): the ``TBackward0`` and ``AddmmBackward0`` inside a linear on 3-D input, say.

    A Node made before the op (a leaf's ``AccumulateGrad`` is numbered past every op) stops the walk.
    """
    end = _next_sequence_nr()
    todo = [grad_fn]
    while todo:
        for child, _ in todo.pop().next_functions:
            if child is None or not first_new <= child._sequence_nr() < end:
                continue
            meta = child.metadata
            if "fv_op" not in meta:
                meta["fv_op"] = tag
                todo.append(child)


_is_compiling = torch.compiler.is_compiling
# Inside a torch.func transform (vmap, grad, jacrev) the tensors are functorch's wrappers, with no
# storage to read, and the graph it builds is its own, discarded when the transform returns.
_in_transform = torch._C._are_functorch_transforms_active
# forgeviz reading your tensors (their grad_fn, storage, shape) is not an op of yours: a Tensor
# subclass's __torch_function__ must not see it (it may count, log or change what it sees).
_not_your_subclass = torch._C.DisableTorchFunctionSubclass


def _nodes_made_since(roots, first_new: int) -> list:
    """The Nodes behind ``roots`` numbered from ``first_new`` on (made since then, on this thread)."""
    end = _next_sequence_nr()
    found, todo, seen = [], [r for r in roots if r is not None], set()
    while todo:
        node = todo.pop()
        if id(node) in seen or not first_new <= node._sequence_nr() < end:
            continue
        seen.add(id(node))
        found.append(node)
        todo.extend(child for child, _ in node.next_functions if child is not None)
    return found


def _tensors_in(output) -> list:
    """The tensors in a module's output (a tensor, or tuples, lists and dicts of them)."""
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(output) if isinstance(t, torch.Tensor)]

# A custom autograd.Function (and torch.compile's CompiledFunction) never reaches a TorchFunctionMode:
# Function.apply makes its Node in C++, then runs its forward under no_grad, whose ops the mode does
# see. The first of those ops finds a Node numbered since the last op it saw, and Function.apply's
# frame on the stack: the Node is that Function's, and the apply's caller is the user's line.
_APPLY_CODE = torch.autograd.Function.apply.__func__.__code__
FUNCTION_SITES_KEPT = 4096  # sites of Function Nodes not yet drawn (a graph takes its own on its first walk)


def _compile_entry(frame):
    """The frame of torch.compile's entry (``compile_wrapper``) nearest above ``frame``, else ``frame``."""
    found = frame
    while found is not None and not (found.f_code.co_name == "compile_wrapper"
                                     and found.f_code.co_filename.endswith("eval_frame.py")):
        found = found.f_back
    return found if found is not None else frame


def _runs_forward(cls, code) -> bool:
    """Whether ``code`` is the forward of the Function class ``cls`` (or of what it wraps)."""
    forward = getattr(cls, "forward", None)
    while forward is not None:
        if getattr(forward, "__code__", None) is code:
            return True
        forward = getattr(forward, "__wrapped__", None)
    return False

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_DISPATCH_FILE = torch.overrides.__file__  # handle_torch_function's


def leave_traceback(exc: BaseException) -> None:
    """An op raised ``exc`` through a forgeviz mode (this helper's caller, which re-raises it with a
    bare ``raise``): take that frame out of the exception's traceback, and mark hidden the frames of
    torch that only sent the call to the mode. The traceback is then the one the user gets without
    forgeviz. Runs only when an op raised; the exception object, type and message stay as they are.

    - The mode's own frame: a bare ``raise`` adds no traceback entry, so dropping the entry made when
      the op raised inside it removes it, for every reader (IPython, ``traceback``, ``%debug``).
    - ``handle_torch_function`` and the public function that called it (``Tensor.backward``, entered
      again below it with the real work): IPython hides a frame whose locals hold ``__tracebackhide__``.
      torch's code is not changed: a key is added to the locals of frames already failing (never one
      of their own names). Plain Python tracebacks still show these two.
    """
    mode = sys._getframe(1)
    tb = exc.__traceback__
    if tb is not None and tb.tb_frame is mode:
        exc.__traceback__ = tb.tb_next
    frame = mode.f_back  # the frame that called the mode
    if frame is None or frame.f_code.co_filename != _DISPATCH_FILE:
        return  # dispatched from C (torch.mul, Tensor.__mul__): no torch frame in between
    while frame is not None and frame.f_code.co_filename == _DISPATCH_FILE:
        frame.f_locals["__tracebackhide__"] = True
        frame = frame.f_back
    if frame is not None and frame.f_code.co_filename.startswith(_TORCH_DIR):
        frame.f_locals["__tracebackhide__"] = True  # Tensor.backward, before it asked the mode


def _stepping_aside(session: "CaptureSession", entry: Callable, bound: bool) -> Callable:
    """``entry`` (an optimizer's ``step``: its class's, torch's wrapper with the step hooks, or one on the
    instance, an LR scheduler's) with our mode stepped aside before it runs: torch's wrapper enters
    ``record_function`` before it calls the step hooks, and each of its two marks, asked of a TorchFunctionMode
    through torch's Python dispatch, cost ~10 µs of a 3-layer MLP's step (cold after its backward). ``bound``:
    whether ``entry`` is given the optimizer first (a class's). As the step pre-hook does, a step given a
    closure or other arguments (LBFGS) runs under the mode. A step that raises leaves this frame out of its
    traceback and puts the mode back at once. Dynamo, tracing it, reads no further than ``is_compiling()``.
    """
    @functools.wraps(entry)  # (torch's "hooked" mark with it: torch does not wrap the class's step again)
    def step(*args, **kwargs):
        __tracebackhide__ = True  # noqa: F841
        if _is_compiling() or not session.installed:
            return entry(*args, **kwargs)
        depth = session._step_depth
        session._step_aside(len(args) <= bound and kwargs.get("closure") is None)
        try:
            return entry(*args, **kwargs)  # your optimizer step runs here (errors are yours)
        except BaseException as exc:
            leave_traceback(exc)
            raise
        finally:
            session._step_depth = depth + 1  # (a step that raised skipped its post hook's share)
            session._step_ends(None, args, kwargs)

    step.fv_steps_aside = True
    return step


_NO_CHECKUP = (None, None)  # a backward's (doctor, its look before) when no doctor looks


class _TagMode(TorchFunctionMode):
    """Tags each new ``grad_fn`` with the op, its source line and module; arms backward hooks."""

    def __init__(self, session: "CaptureSession", native_op: Optional[Callable] = None) -> None:
        super().__init__()
        self.session = session
        # native/grad_hooks.cpp's torch_function(config, func, args, kwargs): this body for most ops, in C++
        # (None without the library: all in Python, below)
        self.native_op = native_op
        self.config = session.native_config() if native_op is not None else None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # IPython leaves a frame with this local out of a traceback it shows (a local's store, near-free
        # per op): for any traceback still holding this frame, e.g. one read while the op runs.
        __tracebackhide__ = True  # noqa: F841
        # Dynamo, tracing this mode, reads no further than is_compiling() here (and lets the op through below)
        compiling = _is_compiling()
        if not compiling and self.native_op is not None:
            try:
                out = self.native_op(self.config, func, args, kwargs)  # your op runs in there (errors are torch's)
            except BaseException as exc:
                args = kwargs = None
                leave_traceback(exc)
                raise
            if out is not _SLOW:
                return out
        kwargs = kwargs or {}
        try:  # first: zero_grad's .grad writes and the profiler's marks outnumber a small model's ops
            not_op = func in _NOT_OPS
        except TypeError:  # an unhashable callable: an op like any other
            not_op = False
        if not not_op and (compiling or _in_transform()):  # Dynamo traces this mode, or torch.func runs
            return func(*args, **kwargs)  # let the op through
        # An op's error leaves through here: leave_traceback takes this frame out of its traceback
        # (the user's line, then torch's frames, as without forgeviz) and the bare raise adds none.
        # The frame's references to the op's arguments go first, should anything still hold the
        # frame: a failed op's operands (an OOM's, say) would stay alive with it.
        if not_op:
            try:
                return func(*args, **kwargs)  # your torch call runs here; forgeviz lets it pass (errors are torch's)
            except BaseException as exc:
                args = kwargs = None
                leave_traceback(exc)
                raise
        session = self.session
        if func in _BACKWARD_FUNCS and (session.record_grads or session.traces or session.doctor is not None):
            with _not_your_subclass():
                watch = session.backward_begins(func, args, kwargs)
            returned = False
            failed = None  # the backward's own exception, for the doctor (which never changes it)
            try:  # called here, not in a helper: a failing backward's traceback gets no forgeviz frame
                out = func(*args, **kwargs)  # your backward runs here; forgeviz only watches (errors are torch's)
                returned = True
                return out
            except BaseException as exc:
                args = kwargs = None  # the traceback keeps this frame, not the graph it was asked to run
                failed = exc
                leave_traceback(exc)
                raise
            finally:
                session.backward_ends(watch, returned, failed)
                watch = failed = None  # nor the Nodes it watched (nor, through its exception, itself)
        first_new = _next_sequence_nr()  # Nodes this op creates are numbered from here (this thread)
        if first_new != session.seen_seq:  # a Node made out of the mode's sight: a Function's, perhaps
            try:
                session.note_function_site(first_new)
            except Exception as exc:  # noqa: BLE001 - the Function's Node then goes unnamed, nothing else
                session.fault(f"finding an autograd.Function's line failed: {exc!r}")
        try:
            out = func(*args, **kwargs)  # your torch op runs here; forgeviz only watches (errors are torch's)
        except BaseException as exc:
            leave_traceback(exc)
            session.op_failed(func, args, kwargs, exc)
            args = kwargs = None
            raise  # the user's exception, unchanged
        session.seen_seq = _next_sequence_nr()
        # the op's line: found once, for the memory timeline and the graph
        where = session.after_op_traces(func, out) if session.traces else None
        try:
            if session.native_tag is not None:  # native/grad_hooks.cpp's tag: no Python object per Node
                session.native_tag(out, first_new, session.make_tag, func, where)
            elif isinstance(out, torch.Tensor):  # the common case, without a call
                with _not_your_subclass():
                    grad_fn = out.grad_fn
                if grad_fn is not None:
                    session.tag_node(func, grad_fn, where, first_new)
            elif isinstance(out, (tuple, list)):
                with _not_your_subclass():
                    session.tag(func, out, where, first_new)
        except Exception as exc:  # noqa: BLE001 - the boundary inline (per op: free until a fault)
            session.tag_failed(func, exc)
        doctor = session.doctor
        if doctor is not None:  # in-place writes into tensors a Node saved (a set lookup for any other op)
            try:
                writes = func not in doctor.no_writes
            except TypeError:  # an unhashable callable: an op that writes nothing the doctor can follow
                writes = False
            if writes:
                session.after_op_doctor(func, args, kwargs, out)
        return out


class CaptureSession:
    """Owns every hook forgeviz installs. ``install``/``uninstall`` are exact inverses.

    >>> s = CaptureSession(); s.install(); s.enter()
    >>> s.exit(); s.uninstall(); s.installed
    False
    """

    def __init__(self) -> None:
        self.store = GradStore()
        self.modules = ModuleStack()
        self.modules.fault = self.fault
        self.store.pinned = self._shown_nodes
        self.recorder = BackwardRecorder(self.store, self.fault)
        self.record_grads = True
        self.installed = False
        self._mode: Optional[_TagMode] = None
        # native/grad_hooks.cpp's tag(out, first_new, make_tag, func, where), while entered, if built
        self.native_tag: Optional[Callable] = None
        self._depth = 0  # nested enter() calls (capture() inside a capturing cell)
        self._step_handles: list = []
        self._step_depth = 0  # optimizer steps and compiled calls running (one may call another's)
        self.modules.compiled_calls.append(self._compiled_call)
        self._compiled_calls: list[tuple] = []  # (first sequence number, line, module) of each running
        self._stepped_aside = 0  # the mode stack's length before an optimizer step took our mode off
        # (weakref to the class or optimizer whose step we wrapped, what it had, ours) while installed: see _wrap_step
        self._step_wrappers: list[tuple] = []
        self.faults: list[str] = []
        self.fault_count = 0  # total ever, so views can tell which faults are new to them
        self._told: set[str] = set()  # faults told in this cell or capture() block (each is told once)
        self.widgets: "weakref.WeakSet" = weakref.WeakSet()
        self.after_backward: list[Callable[[], None]] = []
        # given the roots once the backward ran (a recording reads the graph from them: its Nodes and edges
        # stay after backward, their saved tensors do not)
        self.after_backward_of: list[Callable[[list], None]] = []
        self.before_backward: list[Callable[[], None]] = []  # before each backward runs
        self.explain = True  # %fv explain off turns shape-error diagrams off
        # What to remember of an op that failed with a shape error, to draw it after the cell:
        # ``describe_error(op name, args, kwargs, message)`` returns a record of shapes, or None.
        # %load_ext forgeviz sets it (forgeviz._capture.broadcast.describe_failed_op) and %unload_ext clears it.
        self.describe_error: Optional[Callable[[str, tuple, dict, str], Optional[tuple]]] = None
        self.memory = None  # the kernel's MemoryTracker while %load_ext forgeviz is on
        self.memory_enabled = True  # %fv memory off pauses the kernel's tracker
        self.traces: list = []  # every MemoryTracker recording now (the kernel's, memory_trace(), %%fv memory)
        self.cuda_history = None  # the kernel's CudaHistory, once forgeviz.memory(device="cuda") asked for it
        # (id of the exception, what to draw): the last shape error an op raised, shapes only.
        self.last_error: Optional[tuple] = None
        # The doctor (doctor.py) while a side panel is open: it watches ops, backwards and steps.
        self.doctor = None
        self.backward_roots: list = []  # the fv ids of the latest backward's root Nodes
        self.seen_seq = -1  # the sequence number after the last op the mode saw (this thread)
        # An autograd.Function's Node, by its sequence number: (forward's code, filename, line, module).
        # See note_function_site.
        self.function_sites: dict[int, tuple] = {}

    def _shown_nodes(self) -> set:
        """Node ids that views show: their gradients stay inspectable after the Nodes die."""
        shown: set = set()
        for widget in list(self.widgets):
            ids = getattr(widget, "shown_nodes", None)
            if ids is not None:
                shown |= ids()
        return shown

    # --- lifecycle -------------------------------------------------------------------------
    def install(self) -> None:
        if not self.installed:
            from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

            self.modules.install()
            native.load_if_built()  # one-pass gradient summaries (summary.py), when already compiled
            self._step_handles = [register_optimizer_step_pre_hook(self._step_begins),
                                  register_optimizer_step_post_hook(self._step_ends)]
            _zero_grad_aside(self, True)
            self.installed = True

    def uninstall(self) -> None:
        while self._depth:
            self.exit()
        if self.installed:
            self.modules.uninstall()
            for handle in self._step_handles:
                handle.remove()
            self._step_handles = []
            self._unwrap_steps()
            _zero_grad_aside(self, False)
            self.installed = False

    # An optimizer step runs dozens of small ops per parameter under no_grad: nothing for the graph,
    # and the memory timeline names what it allocates by the step itself. Our mode steps aside for it
    # (two thirds of a TorchFunctionMode's cost in a small training loop), but only from the top of
    # the mode stack (a mode the user entered above ours stays), and not for a step given a closure
    # (LBFGS), whose forward and backward are the user's graph. A compiled module's call likewise
    # (_compiled_call).
    def _step_begins(self, optimizer, args, kwargs) -> None:
        if self._step_depth == 0 and not _is_compiling():  # no step of ours runs: this step was called unwrapped
            self._wrap_step(optimizer)
        # args: (optimizer, *the step's own): a closure is the first of its own
        self._step_aside(len(args) <= 1 and kwargs.get("closure") is None)

    def _wrap_step(self, optimizer) -> None:
        """From its next step on, ``optimizer``'s step steps our mode aside before torch's wrapper runs
        (:func:`_stepping_aside`), until uninstall: the step the instance has of its own (an LR scheduler's),
        else its class's. Each at most once: a step that still comes unwrapped (called through the class while
        the instance has its own) wraps the other, then nothing more."""
        with boundary(self.fault, "wrapping an optimizer's step"):  # the step then steps aside in its hook
            own = getattr(optimizer, "__dict__", {}).get("step")
            if callable(own) and not getattr(own, "fv_steps_aside", False):
                target, bound = optimizer, False
            else:
                owner = next((c for c in type(optimizer).__mro__ if "step" in c.__dict__), None)
                entry = owner.__dict__["step"] if owner is not None else None
                # (a plain function only: a staticmethod, say, is not called with the optimizer first)
                if not isinstance(entry, types.FunctionType) or getattr(entry, "fv_steps_aside", False):
                    return
                target, bound = owner, True
            replaced = target.__dict__["step"]
            wrapper = _stepping_aside(self, replaced, bound)
            setattr(target, "step", wrapper)
            self._step_wrappers.append((weakref.ref(target), replaced, wrapper))

    def _unwrap_steps(self) -> None:
        """Put back each step :meth:`_wrap_step` replaced, unless something replaced ours since (then that stays,
        and ours, left inside it, only calls what it wraps while no session is installed)."""
        wrappers, self._step_wrappers = self._step_wrappers, []
        for ref, replaced, wrapper in wrappers:
            target = ref()
            if target is not None and target.__dict__.get("step") is wrapper:
                with boundary(self.fault, "putting an optimizer's step back"):
                    setattr(target, "step", replaced)

    def _compiled_call(self, module, output, begins: bool) -> None:
        """A torch.compile'd module is called (or returned): Dynamo then sees the mode stack as it is
        without forgeviz, so it guards and compiles the same (and a capture() on or off compiles
        nothing again). Its ops are one box in the graph: there is nothing in it for our mode to tag.
        Its regions' Nodes get the call's line and module (:meth:`function_tag`), and what their
        backward saved is claimed as activations for the memory timeline."""
        if begins:
            self._compiled_calls.append((_next_sequence_nr(), user_location(3), self.modules.current()))
            self._step_aside(True)
            return
        self._step_ends(None, (), {})
        first_new, (filename, line), running = (self._compiled_calls.pop() if self._compiled_calls
                                                else (0, (None, None), None))
        if output is None:
            return
        # (the compiled call has returned: its output stands whatever this meets)
        with boundary(self.fault, "reading a compiled call's regions"), torch._C.DisableTorchFunction():
            for grad_fn in _nodes_made_since([t.grad_fn for t in _tensors_in(output)], first_new):
                cls = getattr(grad_fn, "_forward_cls", None)
                if cls is not None:
                    self.function_sites[grad_fn._sequence_nr()] = (cls.forward.__code__, filename, line, running)
                    if len(self.function_sites) > FUNCTION_SITES_KEPT:
                        del self.function_sites[next(iter(self.function_sites))]
                for tracker in self.traces:
                    tracker.claim_saved(grad_fn)

    def _zero_grad(self, zero_grad: Callable, optimizer, args: tuple, kwargs: dict):
        """``optimizer.zero_grad(*args, **kwargs)`` with our mode stepped aside, as for a step: with
        ``set_to_none`` (the default) it only writes ``.grad = None``, a call per parameter that the mode
        would let through (``_NOT_OPS``) at the cost of torch calling it; zeroing in place stays under it
        (the doctor watches in-place writes)."""
        set_to_none = args[0] if args else kwargs.get("set_to_none", True)
        if set_to_none is not True:
            return zero_grad(optimizer, *args, **kwargs)
        self._step_aside(True)
        try:
            return zero_grad(optimizer, *args, **kwargs)
        finally:
            self._step_ends(optimizer, args, kwargs)

    # Twice a training step each (its optimizer step and zero_grad): the fault boundary inline, and torch's
    # stack functions bound once, as on the other hot paths.
    def _step_aside(self, may: bool) -> None:
        self._step_depth += 1
        if self._step_depth != 1 or self._mode is None or not may:
            return
        try:
            size = self._mode_on_top()
            if size:
                self._stepped_aside = size
                _pop_function_mode()
        except Exception as exc:  # noqa: BLE001 - the boundary inline: the step then runs under the mode
            report(self.fault, "stepping aside for an optimizer step or a compiled call", exc)

    def _mode_on_top(self) -> int:
        """The mode stack's length when our mode is on top of it, else 0."""
        size = _function_modes()
        return size if size and _function_mode_at(size - 1) is self._mode else 0

    def _step_ends(self, optimizer, args, kwargs) -> None:
        try:
            self._step_depth = depth = max(0, self._step_depth - 1)
            if depth == 0 and self._stepped_aside:
                self._step_back()
        except Exception as exc:  # noqa: BLE001 - the boundary inline
            report(self.fault, "putting forgeviz's mode back after an optimizer step", exc)

    def _step_back(self) -> None:
        """Put our mode back on top of the stack after a step (or, when a step raised, at exit)."""
        size, self._stepped_aside = self._stepped_aside, 0
        if not size or self._mode is None:
            return
        if _function_modes() == size - 1:
            _push_function_mode(self._mode)
        else:  # the step left a mode of its own on the stack: ours stays off rather than above it
            self.fault("an optimizer step changed the TorchFunctionMode stack; forgeviz stops watching ops "
                       "until the cell ends")

    def enter(self) -> None:
        """Start tagging ops on this thread (IPython's pre_run_cell, or capture())."""
        if self._depth == 0:
            self._step_depth = self._stepped_aside = 0
            hooks = native.hooks()
            self.native_tag = hooks.tag if hooks is not None else None
            use_native_walk(hooks.user_location if hooks is not None else None)
            with boundary(self.fault, "pushing module calls natively"):  # (else in Python, as without the library)
                self.modules.use_native(hooks)
            self._mode = _TagMode(self, hooks.torch_function if hooks is not None else None)
            self._mode.__enter__()
        self._depth += 1

    def exit(self) -> None:
        if self._depth == 0:
            return
        self._depth -= 1
        if self._depth == 0 and self._mode is not None:
            self._step_depth = 0
            # Each step in its own boundary: whatever fails, our mode still leaves the stack.
            with boundary(self.fault, "putting forgeviz's mode back after a failed optimizer step"):
                if self._stepped_aside:  # a step raised before its post hook could put our mode back
                    self._step_back()
            mode, self._mode = self._mode, None
            with boundary(self.fault, "forgetting the running modules"):
                self.modules.reset()
            with boundary(self.fault, "leaving capture mode"):  # e.g. the user's cell left its own mode on top
                stack = torch._C._len_torch_function_stack()
                if any(torch._C._get_function_stack_at(i) is mode for i in range(stack)):
                    mode.__exit__(None, None, None)  # (else a step took it off and could not put it back)

    @property
    def capturing(self) -> bool:
        return self._depth > 0

    @contextlib.contextmanager
    def recording(self, record_grads: Optional[bool] = None, tracker=None) -> Iterator["CaptureSession"]:
        """Capture inside a ``with`` block: install the hooks if they were not, start ``tracker`` (a
        MemoryTracker) if given, and tag ops on this thread; every step is undone on the way out.

        ``record_grads``: whether backward passes inside record gradient summaries (None: as now).

        >>> s = CaptureSession()
        >>> with s.recording(record_grads=False):
        ...     s.capturing, s.record_grads
        (True, False)
        >>> s.capturing, s.record_grads, s.installed
        (False, True, False)
        """
        # Each step in the fault boundary: a fault of forgeviz's leaves the block to run (and raise) as
        # without it, uncaptured or partly captured, and the way out still undoes every step.
        was_installed = self.installed
        if not self.capturing:
            self.new_cell()
        with boundary(self.fault, "installing forgeviz's hooks"):
            self.install()  # module paths for each op (and a memory tracker rides on the same hooks)
        if tracker is not None:
            with boundary(self.fault, "starting the memory trace"):
                tracker.start()
        saved = self.record_grads
        if record_grads is not None:
            self.record_grads = record_grads
        with boundary(self.fault, "starting capture"):
            self.enter()  # the TorchFunctionMode: op tags, and saved activations linked to their nodes
        try:
            yield self
        finally:
            with boundary(self.fault, "stopping capture"):
                self.exit()
            self.record_grads = saved
            if tracker is not None:
                with boundary(self.fault, "stopping the memory trace"):
                    tracker.stop()
            if not was_installed:
                with boundary(self.fault, "removing forgeviz's hooks"):
                    self.uninstall()

    # --- capture ---------------------------------------------------------------------------
    def tag(self, func, out, where: Optional[tuple] = None, first_new: Optional[int] = None) -> None:
        """Tag the Nodes ``func`` created with the op, its line and the running module.

        ``first_new`` is the autograd sequence number before the op ran (``_next_sequence_nr()``): a
        composite op (linear on 3-D input, attention) makes several Nodes, and only its outputs'
        ``grad_fn`` reach the mode; the others are found walking back from those, among the Nodes
        numbered since.

        >>> s = CaptureSession(); x = torch.ones(2, requires_grad=True); y = x * 2
        >>> s.tag(torch.mul, y); y.grad_fn.metadata["fv_op"][0]
        'mul'
        """
        if isinstance(out, torch.Tensor):
            if out.grad_fn is not None:
                self.tag_node(func, out.grad_fn, where, first_new)
            return
        if not isinstance(out, (tuple, list)):
            return
        tag = None
        for tensor in out:
            if isinstance(tensor, torch.Tensor) and tensor.grad_fn is not None:
                tag = self.tag_node(func, tensor.grad_fn, where, first_new, tag)

    def tag_node(self, func, grad_fn, where: Optional[tuple] = None, first_new: Optional[int] = None,
                 tag: Optional[tuple] = None) -> Optional[tuple]:
        """:meth:`tag` for one output's ``grad_fn`` (every op reaches this: one call, one read of its
        metadata). ``tag``: the op's tag if another output already made it. Returns the tag given.

        >>> s = CaptureSession(); x = torch.ones(2, requires_grad=True); y = x * 2
        >>> s.tag_node(torch.mul, y.grad_fn, ("cell", 3))[2:4]
        ('cell', 3)
        """
        meta = grad_fn.metadata
        if "fv_op" in meta:
            return tag
        if tag is None:
            tag = self.make_tag(func, where)
        meta["fv_op"] = tag
        if first_new is not None and _next_sequence_nr() - first_new > 1:  # the op made more than this Node
            _tag_inner_nodes(grad_fn, tag, first_new)
        return tag

    def make_tag(self, func, where: Optional[tuple] = None) -> tuple:
        """The tag of an op just run: (op, qualified name, filename, line, the running module).
        ``where``: its (filename, line) if known, else the nearest user frame's (found from the op's
        tagging, three frames up: make_tag, tag_node or the mode, then the op's caller).

        >>> CaptureSession().make_tag(torch.mul, ("cell", 3))[2:]
        ('cell', 3, None)
        """
        op, qualname = _op_name(func)
        filename, line = where or user_location(3)
        return op, qualname, filename, line, self.modules.current()

    def note_function_site(self, first_new: int) -> None:
        """Nodes were made since the last op the mode saw. If this op runs inside an
        ``autograd.Function``'s forward, the newest of them (``first_new - 1``) is that Function's
        Node: remember the line that called ``apply`` and the running module, for :meth:`function_tag`.

        >>> s = CaptureSession(); s.note_function_site(5); s.function_sites
        {}
        """
        self.seen_seq = first_new
        frame, below = sys._getframe(1), None
        try:
            while frame is not None and frame.f_code is not _APPLY_CODE:
                frame, below = frame.f_back, frame
            if frame is None or below is None:
                return
            code = below.f_code  # the Function's forward (apply calls it from C++)
            if "_aot_autograd" in code.co_filename:  # a compiled region: the line that called the compiled module
                frame = _compile_entry(frame)  # (not its forward's, nor a graph break's resume function)
            filename, line = user_frame_above(frame)
            sites = self.function_sites
            sites[first_new - 1] = (code, filename, line, self.modules.current())
            if len(sites) > FUNCTION_SITES_KEPT:
                del sites[next(iter(sites))]
        finally:
            del frame, below

    def function_tag(self, node) -> Optional[tuple]:
        """The tag of a custom ``autograd.Function``'s Node (``node._forward_cls``), made once and
        kept in its metadata: (the Function's name, its qualified name, filename, line, module), with
        the line and module that :meth:`note_function_site` saw when its forward ran; None for any
        other Node.

        >>> class Twice(torch.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x): return x * 2
        ...     @staticmethod
        ...     def backward(ctx, g): return g * 2
        >>> CaptureSession().function_tag(Twice.apply(torch.ones(1, requires_grad=True)).grad_fn)[:2]
        ('Twice', 'forgeviz._capture.session.Twice')
        """
        cls = getattr(node, "_forward_cls", None)
        if cls is None:
            return None
        meta = node.metadata
        tag = meta.get("fv_op")
        if tag is not None:
            return tag
        site = self.function_sites.pop(node._sequence_nr(), None)
        if site is not None and not _runs_forward(cls, site[0]):
            site = None  # another Node's number (another thread's): a name without a line is still true
        qualname = f"{cls.__module__}.{cls.__qualname__}"
        tag = (cls.__name__, qualname) + (site[1:4] if site else (None, None, None))
        meta["fv_op"] = tag
        return tag

    # --- what the mode does around an op, in Python (its native body, grad_hooks.cpp's fv_torch_function,
    # calls these too, each only when it is needed) ----------------------------------------------------
    def native_config(self) -> tuple:
        """The config of native/grad_hooks.cpp's ``torch_function``: the slots of its ConfigSlot, in order.

        >>> config = CaptureSession().native_config(); len(config), config[-1] is _SLOW
        (15, True)
        """
        # (then what make_tag reads, which the C++ reads there itself: the op names, the user's files, the modules)
        return (self, _NOT_OPS, _BACKWARD_FUNCS, _in_transform, self.make_tag, self.op_failed,
                self.after_op_traces, self.after_op_doctor, self.tag_failed, _OP_NAMES, _op_name, *user_files(),
                self.modules, _SLOW)

    def op_failed(self, func, args, kwargs, exc: BaseException) -> None:
        """An op the mode ran raised ``exc`` (on its way to the user, unchanged): a shape error is noted for its
        diagram, and the doctor (while a side panel is open) reads the operands' devices and the line. Never
        raises: a fault here is forgeviz's, reported, and the user's exception goes on as it is.

        >>> s = CaptureSession(); s.op_failed(torch.mul, (), {}, ValueError("not a shape error")); s.faults
        []
        """
        if isinstance(exc, RuntimeError):
            with boundary(self.fault, "noting a failed op's shapes"):
                self.note_error(func, args, kwargs, exc)
        doctor = self.doctor
        if doctor is not None and isinstance(exc, Exception):
            with boundary(self.fault, "the doctor's look at a raised op"):
                doctor.op_raised(func, args, kwargs, exc)

    def after_op_traces(self, func, out) -> Optional[tuple]:
        """The memory timelines link what the op allocated to its line and what its Node saved to the Node;
        returns the op's (filename, line) if that was looked up (the graph's tag then reuses it), else None.

        >>> CaptureSession().after_op_traces(torch.mul, torch.ones(2)) is None  # no timeline records
        True
        """
        where = None
        with _not_your_subclass():
            for tracker in self.traces:
                try:
                    if tracker.wants_sites and tracker.allocated_since():  # the ledger saw it, not its line
                        where = where or user_location(2)
                        tracker.after_op(out, where, _op_name(func)[0])
                    if isinstance(out, torch.Tensor) and out.grad_fn is not None:
                        tracker.claim_saved(out.grad_fn)
                except Exception as exc:  # noqa: BLE001 - the boundary inline (per op: free until a fault)
                    report(self.fault, "linking memory to its op and node", exc)
        return where

    def after_op_doctor(self, func, args, kwargs, out) -> None:
        """The doctor's look after an op that may write in place (into a tensor a Node saved).

        >>> CaptureSession().after_op_doctor(torch.Tensor.add_, (), {}, None)  # no side panel: no doctor
        """
        doctor = self.doctor
        if doctor is not None:
            try:
                doctor.after_op(func, args, kwargs or {}, out)
            except Exception as exc:  # noqa: BLE001 - the boundary inline (per op: its words only on a fault)
                report(self.fault, f"the doctor's look after {getattr(func, '__name__', 'an op')}", exc)

    def tag_failed(self, func, exc: BaseException) -> None:
        """Tagging the Nodes of ``func``'s output failed: a fault (the op's result stays as it is).

        >>> s = CaptureSession(); s.tag_failed(torch.mul, ValueError("x")); s.faults
        ['tagging mul failed: ValueError: x']
        """
        report(self.fault, f"tagging {getattr(func, '__name__', 'an op')}", exc)

    def note_error(self, func, args, kwargs, exc: RuntimeError) -> None:
        """Remember the shapes of an op that raised a shape error, to draw it after the cell."""
        describe = self.describe_error
        if not self.explain or describe is None:
            return
        with boundary(self.fault, "reading the failed op's shapes"):  # explaining never changes the error
            with untraced():
                record = describe(getattr(func, "__name__", ""), args, kwargs or {}, str(exc))
            if record is not None:
                filename, line = user_location(3)
                self.last_error = (id(exc), record, filename, line)

    def backward_begins(self, func, args, kwargs) -> tuple:
        """Arm what watches the user's backward (Node hooks, the memory trackers' lines and claims);
        never raises. Give what it returns to :meth:`backward_ends` once the backward returned or raised."""
        finish = None
        roots: list = []
        try:  # the boundary inline (each backward): the backward then runs unrecorded
            roots = _roots_of_backward(func, args, kwargs)
            # the side panel draws the latest backward's graph: its roots by id (a Node has no weakref,
            # and holding one would keep the user's graph alive)
            self.backward_roots = [node_id(r) for r in roots if hasattr(r, "metadata")]
            if self.record_grads:  # memory_trace() alone wants the backward's line, not its gradients
                finish = self.recorder.arm(roots)
        except Exception as exc:  # noqa: BLE001 - the boundary inline
            report(self.fault, "arming gradient hooks", exc)
        if finish is None and not self.traces and self.doctor is None and not self.before_backward:
            # a pass the cadence skips (or nothing records): what backward_ends reads, nothing more made
            return None, (), (), None, _NO_CHECKUP, roots
        for callback in list(self.before_backward):
            try:
                callback()
            except Exception as exc:  # noqa: BLE001 - the boundary inline
                report(self.fault, "preparing for a backward", exc)
        sites = [t for t in self.traces if t.wants_sites]
        claims = []
        frees = None
        doctor = self.doctor
        if self.traces or doctor is not None:
            with boundary(self.fault, "reading the backward's arguments"):  # each claiming Node is asked after
                frees = _frees_saved(func, args, kwargs)
        for tracker in self.traces:
            with boundary(self.fault, "preparing the memory timeline for backward"):  # the backward runs regardless
                if tracker in sites:  # the backward's allocations happen in C++, on behalf of this line
                    tracker.set_site(user_location(3))
                if frees is not False:  # (retain_graph: the Nodes keep what they saved)
                    # (the native hooks' pass armed for this backward knows its Nodes: no second walk)
                    claims.append((tracker, tracker.before_backward(roots, self.recorder.armed if finish else None)))
        checkup = None
        if doctor is not None:  # only while a side panel is open (its steps, graphs and gradients)
            with boundary(self.fault, "the doctor's look before a backward"):  # the backward runs regardless
                checkup = doctor.backward_begins(func, roots, frees)
        return finish, sites, claims, frees, (doctor, checkup), roots

    def backward_ends(self, watch: tuple, returned: bool, failed: Optional[BaseException] = None) -> None:
        """The backward armed by :meth:`backward_begins` returned (or raised ``failed``); never raises: each
        step is in the fault boundary, and the user's backward result (or error) stands."""
        finish, sites, claims, frees, (doctor, checkup), roots = watch
        for tracker in sites:
            with boundary(self.fault, "closing the backward's memory site"):
                tracker.set_site(None)
        for tracker, nodes in claims:
            with boundary(self.fault, "releasing freed activations"):
                tracker.after_backward(nodes, freed_all=returned and frees is True)
        if finish is not None:
            with boundary(self.fault, "completing the gradient records"):
                finish()
        if doctor is not None:  # after the gradient records: it reads this pass's first non-finite Node
            with boundary(self.fault, "the doctor's look after a backward"):
                doctor.backward_ends(checkup, returned, failed)
        # (each backward: the boundary inline, not a boundary object per callback)
        for read_graph in list(self.after_backward_of):
            try:
                read_graph(roots)
            except Exception as exc:  # noqa: BLE001 - the boundary inline
                report(self.fault, "reading the graph after backward", exc)
        for callback in list(self.after_backward):
            try:
                callback()
            except Exception as exc:  # noqa: BLE001 - the boundary inline
                report(self.fault, "refreshing views after backward", exc)

    def own_bytes(self) -> int:
        """What the session holds for itself: the gradient records of each Node and leaf (the memory
        trackers count their own)."""
        store = self.store
        return deep_bytes([store.nodes, store.leaves, store.dead, self.faults])

    def fault(self, message: str) -> None:
        """A failure inside forgeviz: logged and shown in views, never raised into the user's code
        (fault.py's boundary words it). Told once per cell or capture() block (:meth:`new_cell`): a fault
        in the mode or a hook would otherwise be told once per op or per Node.

        >>> s = CaptureSession()
        >>> s.fault("tagging mul failed: ValueError: x"); s.fault("tagging mul failed: ValueError: x")
        >>> s.faults, s.fault_count
        (['tagging mul failed: ValueError: x'], 1)
        """
        if message in self._told:
            return
        self._told.add(message)
        log.warning("forgeviz: %s", message)
        self.faults.append(message)
        self.fault_count += 1
        del self.faults[:-20]

    def new_cell(self) -> None:
        """A cell (or a capture() block outside one) begins: the faults it meets are told again, and a "within P%"
        cadence summarises its first backward pass."""
        self._told.clear()
        budget = self.recorder.budget
        if budget is not None:
            budget.new_cell()

    def faults_since(self, count: int) -> list[str]:
        """Distinct fault messages after the first ``count`` (may run on autograd threads: no I/O)."""
        new = self.faults[max(0, len(self.faults) - (self.fault_count - count)):]
        return list(dict.fromkeys(new))


_session: Optional[CaptureSession] = None


def get_session() -> CaptureSession:
    """The kernel's one capture session (created on first use, not installed)."""
    global _session
    if _session is None:
        _session = CaptureSession()
    return _session


def current_module_path() -> Optional[str]:
    """The path of the innermost module running now (the root's type name for the root itself), or None.

    >>> current_module_path() is None
    True
    """
    current = get_session().modules.current()
    if not current:
        return None
    _, root_type, path, _ = current
    return path if path else root_type
