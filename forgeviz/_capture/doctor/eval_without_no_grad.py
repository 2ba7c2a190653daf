"""``eval-without-no-grad``: a module call built a graph that no backward will use. Told when that graph
dies without any backward running it; when a variable still keeps it after the same call ran again under
no_grad, or after an optimizer step changed a tensor it saved (no backward can use it any more); and at
the end of the cell that built them, when a container in the namespace keeps the graphs of two or more
separate calls that no backward has used (a validation loop that keeps its outputs).

An unused graph that one variable keeps is left alone otherwise: its backward may come in a later cell
(``out = model(x)``, then ``loss(out).backward()``)."""

from __future__ import annotations

import collections
import weakref
from typing import Optional

import torch

from ..source import user_location
from .detector import CellEnd, Checkup, Detector
from .graphs import LEAF_SEQUENCE_NR, WALK_LIMIT, saved_bytes, version_error, walk
from .sites import site_of, size

REACH_LIMIT = 10_000  # Nodes a backward's walk visits, looking for the module outputs it uses
MAX_UNUSED = 256  # module outputs watched while no backward has used them
DEAD_BATCH = 64  # deaths settled during a backward (a long loop in one cell), not all at the cell's end
_FIX = "Evaluate under `with torch.no_grad():` (or torch.inference_mode()); model.eval() alone does not"


class _ForwardWatch:
    """Kept in the ``metadata`` of a module call's output Node, a dict that dies with the Node: so does
    this, and tells the doctor (``__del__``, which may run on any thread: one append). Each output
    Node of one call has its own, under the call's ``key``.

    >>> dead = collections.deque(); watch = _ForwardWatch(7, dead); del watch; list(dead)
    [7]
    """

    __slots__ = ("key", "dead")

    def __init__(self, key: int, dead: collections.deque) -> None:
        self.key, self.dead = key, dead

    def __del__(self) -> None:
        self.dead.append(self.key)


def _output_nodes(output) -> tuple:
    """The distinct, not yet watched, Nodes of the tensors a module returned in a tuple, list or dict
    (such as transformers' ModelOutput), the first 16 of them.

    >>> y = torch.ones(1, requires_grad=True) * 2; len(_output_nodes((y, y, 3)))
    1
    """
    if isinstance(output, (tuple, list)):
        items = output[:16]
    elif isinstance(output, dict):
        items = list(dict.values(output))[:16]
    else:
        return ()
    nodes: dict = {}
    for t in items:
        node = t.grad_fn if isinstance(t, torch.Tensor) else None
        if node is not None and "fv_doctor_forward" not in node.metadata:
            nodes[id(node)] = node
    return tuple(nodes.values())


def _holder(key: int, user_ns: Optional[dict]) -> Optional[str]:
    """The namespace name of a tensor whose Node is the watched module output ``key`` (None if none).

    >>> _holder(1, {}) is None
    True
    """
    for name, value in list((user_ns or {}).items()):
        if name.startswith("_") or not isinstance(value, torch.Tensor):
            continue
        node = value.grad_fn
        watch = node.metadata.get("fv_doctor_forward") if node is not None else None
        if watch is not None and watch.key == key:
            return name
    return None


class EvalWithoutNoGrad(Detector):
    """Watches the output Node of each outermost module call that built a graph: until a backward
    reaches it (used), or it dies unused."""

    kind = "eval-without-no-grad"

    def __init__(self, doctor) -> None:
        super().__init__(doctor)
        # module calls whose output Nodes are watched (key → [(filename, line), its module's type, Nodes alive,
        # whether it is separate: no argument of it had autograd history, so its graph is its own]), those no
        # backward has reached yet (key → their lowest sequence number), and deaths
        self._forwards: dict[int, list] = {}
        self._unused: dict[int, int] = {}
        self._keys = iter(range(1, 1 << 62))
        self._dead: collections.deque = collections.deque()
        # (id(module), id(its first input)) → (key, ref(module), ref(input)) of each watched call, and the
        # watched calls the same module ran again on the same input under no_grad (key → that call's place)
        self._calls: dict[tuple, tuple] = {}
        self._superseded: dict[int, tuple] = {}

    def uninstall(self) -> None:
        self._forwards.clear()  # (their Nodes' watches, left in metadata, tell no one)
        self._unused.clear()
        self._calls.clear()
        self._superseded.clear()
        self._dead.clear()

    # --- module calls ----------------------------------------------------------------------------------
    def module_call(self, module, args: tuple, output) -> None:
        """When the call built a graph, gets its output Node watched: until a backward reaches it, or it dies."""
        with torch._C.DisableTorchFunction():  # (reading grad_fn through a mode costs a call into it)
            if isinstance(output, torch.Tensor):  # the common case, without a loop
                node = output.grad_fn
                if node is None or "fv_doctor_forward" in node.metadata:
                    if node is None and self._calls and not torch.is_grad_enabled():
                        self._recomputed(module, args)
                    return
                nodes = (node,)
            else:
                nodes = _output_nodes(output)
                if not nodes:
                    if self._calls and not torch.is_grad_enabled():
                        self._recomputed(module, args)
                    return
            key = next(self._keys)
            first = args[0] if args and isinstance(args[0], torch.Tensor) else None
            if first is not None:  # to tell the same call, made again under no_grad
                calls = self._calls
                calls[(id(module), id(first))] = (key, weakref.ref(module), weakref.ref(first))
                if len(calls) > 2 * MAX_UNUSED:
                    for call, entry in list(calls.items()):
                        if entry[0] not in self._unused:
                            del calls[call]
            dead = self._dead
            for node in nodes:
                node.metadata["fv_doctor_forward"] = _ForwardWatch(key, dead)
            separate = True  # (a loop, not any(...): one argument, most often)
            for arg in args:
                if isinstance(arg, torch.Tensor) and arg.grad_fn is not None:
                    separate = False
                    break
            self._forwards[key] = [user_location(2), type(module).__name__, len(nodes), separate]
            unused = self._unused
            unused[key] = nodes[0]._sequence_nr() if len(nodes) == 1 else min(n._sequence_nr() for n in nodes)
            if len(unused) > MAX_UNUSED:  # the oldest unused outputs, still alive, are no longer watched
                for old in list(unused)[:-MAX_UNUSED]:
                    del unused[old]
                    self._forwards.pop(old, None)

    def _recomputed(self, module, args) -> None:
        """A module call without gradients (no_grad, inference_mode): a watched call of the same module on
        the same input, still unused, was the same evaluation with a graph."""
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        entry = self._calls.get((id(module), id(first)))
        if entry is None or entry[1]() is not module or entry[2]() is not first or entry[0] not in self._unused:
            return
        del self._calls[(id(module), id(first))]
        self._superseded.setdefault(entry[0], user_location(2))

    # --- backward passes -------------------------------------------------------------------------------
    def backward_begins(self, checkup: Checkup) -> None:
        """The watched module outputs this backward reaches are used. A Node is numbered after the
        Nodes it leads to, so the walk leaves out every Node numbered below the oldest one watched: in
        a training step it visits the loss's few Nodes, not the model's."""
        unused, roots = self._unused, checkup.roots
        if not unused or not roots:
            return
        for root in roots:  # the common case first: a loss one op away from the model's output
            for child, _ in root.next_functions:
                if child is not None:
                    watch = child.metadata.get("fv_doctor_forward")
                    if watch is not None and unused.pop(watch.key, None) is not None and not unused:
                        return
        lowest = min(unused.values()) if len(unused) > 1 else next(iter(unused.values()))
        seen: set[int] = set()
        stack = list(roots)
        while stack:
            node = stack.pop()
            watch = node.metadata.get("fv_doctor_forward")
            if watch is not None and unused.pop(watch.key, None) is not None and not unused:
                return
            for child, _ in node.next_functions:
                if child is not None and lowest <= child._sequence_nr() != LEAF_SEQUENCE_NR and id(child) not in seen:
                    seen.add(id(child))
                    stack.append(child)
            if len(seen) > REACH_LIMIT:
                return

    def backward_ends(self, checkup: Checkup, returned: bool) -> None:
        if len(self._dead) > DEAD_BATCH:  # a long loop in one cell: settle them now, not all at its end
            self._dead_forwards()

    # --- after a cell ----------------------------------------------------------------------------------
    def end_cell(self, end: CellEnd) -> None:
        self._dead_forwards()
        self._held_forwards(end.user_ns)
        self._stale_forwards(end)
        self._kept_evaluations(end)

    def _told(self, key: int) -> Optional[list]:
        """Stop watching the call ``key`` (it is told now, or used): its entry, None when it was not watched."""
        self._unused.pop(key, None)
        return self._forwards.pop(key, None)

    def _dead_forwards(self) -> None:
        dead = self._dead
        while dead:
            key = dead.popleft()
            entry = self._forwards.get(key)
            if entry is None:
                continue
            entry[2] -= 1
            if entry[2] > 0:
                continue  # another of its outputs' Nodes lives on
            del self._forwards[key]
            if self._unused.pop(key, None) is None:
                continue  # a backward used it
            site = site_of(*entry[0])
            explanation = (f"The {entry[1]} call at {site.text() if site else 'an unknown line'} ran with gradients "
                           "on: it built an autograd graph, kept its activations for a backward, and the graph was "
                           "freed without any backward using it.")
            self.doctor.report(self.kind, site, explanation, _FIX + ".")

    def _held_forwards(self, user_ns: Optional[dict]) -> None:
        """Watched calls that the same module made again on the same input under no_grad, while their own
        graphs, still unused, stay alive (held by a variable): the graph was an evaluation too, kept for a
        backward that does not come."""
        superseded, self._superseded = self._superseded, {}
        for key, again in superseded.items():
            if self._unused.pop(key, None) is None:
                continue  # a backward used it, or it died (and was told then)
            entry = self._forwards.pop(key, None)
            if entry is None:
                continue
            site = site_of(*entry[0])
            later = site_of(*again)
            name = _holder(key, user_ns)
            held = f"`{name}` holds" if name else "something still holds"
            explanation = (f"The {entry[1]} call at {site.text() if site else 'an unknown line'} ran with gradients "
                           "on: it built an autograd graph and kept its activations for a backward. No backward has "
                           f"used it, the same call ran again under no_grad at "
                           f"{later.text() if later else 'an unknown line'} on the same input, and {held} the "
                           "first one's graph, with its activations, for nothing.")
            self.doctor.report(self.kind, site, explanation, _FIX + (f"; or `del {name}`." if name else "."))

    def _stale_forwards(self, end: CellEnd) -> None:
        """After a cell that stepped an optimizer: watched calls, still unused, whose graph the namespace
        keeps while a tensor the graph saved has been changed in place since (the step's weights): no
        backward can run through it any more, so it is kept for nothing."""
        if not self.doctor.steps or not self._unused or end.user_ns is None:
            return
        budget = [WALK_LIMIT]
        seen: set[int] = set()
        for name, _, held in end.holders():
            def stale(node, key: int, name: str = name) -> bool:
                self._stale_forward(key, node, name, budget)
                return True  # (what lies below is that call's own graph)

            self._walk_to_unused(held, budget, seen, stale)

    def _walk_to_unused(self, held: list, budget: list, seen: set, at_call) -> None:
        """Walk back from ``held``'s graphs (their Nodes no older than the oldest unused watched call's
        output, each once over ``seen``, within ``budget``) and call ``at_call(node, key)`` at the output
        Node of each unused watched call; it returns whether to stop there (below is that call's graph)."""
        unused = self._unused
        if not unused:  # (told all there is to tell)
            return
        lowest = min(unused.values())
        stack = [t.grad_fn for t in held if t.grad_fn._sequence_nr() >= lowest]
        while stack and unused and budget[0] > 0:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            budget[0] -= 1
            watch = node.metadata.get("fv_doctor_forward")
            if watch is not None and watch.key in unused and at_call(node, watch.key):
                continue
            for child, _ in node.next_functions:
                if child is not None and lowest <= child._sequence_nr() != LEAF_SEQUENCE_NR:
                    stack.append(child)

    def _stale_forward(self, key: int, node, name: str, budget: list) -> None:
        """Report the watched call ``key`` (its output Node ``node``, reached from ``name``) if a Node of its
        graph can no longer give a tensor it saved: changed in place since."""
        nodes = walk([node], budget[0])
        budget[0] -= len(nodes)
        changed = next(((n, hit) for n in nodes if type(n).__name__ != "AccumulateGrad"
                        for hit in (version_error(n),) if hit is not None), None)
        if changed is None:
            return
        entry = self._told(key)
        if entry is None:
            return
        site = site_of(*entry[0])
        saver, (slot, _) = changed
        explanation = (f"The {entry[1]} call at {site.text() if site else 'an unknown line'} ran with gradients on: "
                       "it built an autograd graph and kept its activations for a backward. No backward used it, and "
                       f"a tensor it saved ({type(saver).__name__}'s {slot.removeprefix('_saved_')}) has been "
                       "changed in place since (an optimizer step changes the weights), so none can any more: "
                       f"`{name}` keeps that graph, with its activations, for nothing.")
        self.doctor.report(self.kind, site, explanation, _FIX + f"; or `{name} = {name}.detach()`.")

    def _kept_evaluations(self, end: CellEnd) -> None:
        """A container in the namespace (a list, tuple, dict or deque) that keeps the graphs of two or more
        separate watched calls that no backward has used: a validation loop without no_grad that keeps its
        outputs (``val.append(model(xb))``). A training step's graphs are used by its backward
        (``losses.append(loss)`` is graph-kept-alive's), and one graph may still meet its backward in a
        later cell; so may a chain of calls each fed the last one's output (an RNN's steps): one graph."""
        if len(self._unused) < 2 or end.user_ns is None:
            return
        budget = [WALK_LIMIT]
        for name, value, held in end.holders():
            if isinstance(value, torch.Tensor) or len(held) < 2 or len(self._unused) < 2 or budget[0] <= 0:
                continue
            calls = self._separate_unused(held, budget)
            if len(calls) < 2:
                continue
            entries = [self._told(key) for key in calls]
            nodes = walk(calls.values())
            kept = saved_bytes(nodes)
            site = site_of(*entries[0][0])
            modules = " and ".join(dict.fromkeys(entry[1] for entry in entries))
            explanation = (f"{len(calls)} {modules} calls, the first at {site.text() if site else 'an unknown line'}, "
                           f"ran with gradients on: each built an autograd graph of its own and kept its activations "
                           f"for a backward, and no backward has used any of them. `{name}` keeps them all, with "
                           f"{'at least ' if len(nodes) >= WALK_LIMIT else ''}{size(kept)} of activations saved for "
                           "backward, for as long as it holds them.")
            self.doctor.report(self.kind, site, explanation, _FIX + f": then `{name}` keeps the outputs alone.",
                               times=len(calls))

    def _separate_unused(self, held: list, budget: list) -> dict:
        """{key: output Node} of the separate watched calls, still unused, whose graphs ``held`` reaches,
        oldest first. The walk stops at each (below is its own graph), goes on through a call fed another's
        output, and leaves out Nodes older than the oldest unused call's output."""
        forwards = self._forwards
        found: dict = {}

        def separate(node, key: int) -> bool:
            entry = forwards.get(key)
            if entry is not None and entry[3]:
                found.setdefault(key, node)
                return True
            return False  # a call fed another's output: the walk goes on through it

        self._walk_to_unused(held, budget, set(), separate)
        return dict(sorted(found.items()))
