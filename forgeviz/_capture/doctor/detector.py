"""What a detector is: a :class:`Detector` subclass overrides the hooks it needs, and the Doctor
(``__init__.py``) calls only those, each inside its fault boundary (a fault becomes a warning, never the
user's error). The Doctor owns every torch hook; a detector registers none of its own unless it must
(missing-zero-grad's optimizer pre-step hook, while it has something to check)."""

from __future__ import annotations

from typing import Callable, Iterator, Optional

import torch

from .graphs import ATOMS, graph_tensors, public
from .sites import Site, site_here

# the hooks a detector may override (the Doctor calls a detector's only if it does)
HOOKS = ("begin_cell", "end_cell", "op_raised", "wrote", "module_call", "backward_begins", "backward_ends",
         "backward_failed", "step_post")


_OVERRIDES: dict[type, list[str]] = {}  # Detector subclass → the hooks it overrides


class Checkup:
    """One backward, from just before it to just after: its function, the Nodes it starts from, whether it
    frees its graph (False for ``retain_graph``), the gradient store's pass count, its line (looked up
    once, when a detector first asks) and what each detector noted before it (``notes``, by kind).

    >>> c = Checkup(torch.Tensor.backward, [], True, 0); c.notes["missing-zero-grad"] = [1]; c.frees
    True
    """

    __slots__ = ("func", "roots", "frees", "passes", "notes", "_site", "_looked")

    def __init__(self, func, roots: list, frees: Optional[bool], passes: int) -> None:
        self.func, self.roots, self.frees, self.passes = func, roots, frees, passes
        self.notes: dict = {}
        self._site: Optional[Site] = None
        self._looked = False

    def site(self) -> Optional[Site]:
        """The backward's line in the user's code (the same from before it as from after it)."""
        if not self._looked:
            self._site, self._looked = site_here(), True
        return self._site


class CellEnd:
    """What a cell left, for the detectors that look after it: its namespace (None outside IPython), the
    exception it ended with, and one scan of the namespace shared by all of them (:meth:`holders`).

    >>> y = torch.ones(1, requires_grad=True) * 2
    >>> [name for name, _, _ in CellEnd({"y": y, "_y": y, "n": 3}, None).holders()]
    ['y']
    """

    def __init__(self, user_ns: Optional[dict], error: Optional[BaseException]) -> None:
        self.user_ns, self.error = user_ns, error
        self._holders: Optional[list] = None

    def holders(self) -> list[tuple[str, object, list[torch.Tensor]]]:
        """(name, value, its tensors with a graph) for each public name whose value holds any: looked up
        once per cell, by the first detector that asks."""
        if self._holders is None:
            self._holders = list(scan(self.user_ns))
        return self._holders


def scan(user_ns: Optional[dict]) -> Iterator[tuple[str, object, list[torch.Tensor]]]:
    """(name, value, its tensors with a graph) for each public name of ``user_ns`` whose value holds any:
    a tensor, or a list, tuple, dict or deque of them (``graphs.graph_tensors``).

    >>> y = torch.ones(1, requires_grad=True) * 2
    >>> [(name, len(held)) for name, _, held in scan({"y": y, "ys": [y, y], "In": [y], "x": y.detach()})]
    [('y', 1), ('ys', 2)]
    """
    for name, value in list((user_ns or {}).items()):
        if public(name) and type(value) not in ATOMS:
            held = graph_tensors(value)
            if held:
                yield name, value, held


class Detector:
    """One kind of incident (``kind``, a ``FINDING_KINDS`` entry), watched through the Doctor's hooks.

    A subclass keeps its own state and overrides the hooks it needs; it reports through
    ``self.doctor.report(self.kind, site, explanation, fix)``. The Doctor's shared state it may read:
    ``cell`` (the running cell), ``marks`` (the autograd sequence number after each backward that freed its
    graph), ``running`` (the module calls running now), ``steps`` (optimizer steps in this cell),
    ``namespace()`` and ``installed``.

    >>> class Quiet(Detector):
    ...     kind = "nonfinite-grad"
    >>> Quiet(None).hooks()
    []
    """

    kind = ""

    def __init__(self, doctor) -> None:
        self.doctor = doctor  # the Doctor (__init__.py), which imports every detector

    def hooks(self) -> list[str]:
        """The names of the hooks this detector's class overrides (found once per class)."""
        cls = type(self)
        found = _OVERRIDES.get(cls)
        if found is None:
            found = _OVERRIDES[cls] = [name for name in HOOKS if getattr(cls, name) is not getattr(Detector, name)]
        return list(found)

    def uninstall(self) -> None:
        """The Doctor is uninstalled: drop what is followed, and any hook of the detector's own."""

    def clear(self) -> None:
        """The findings were cleared: forget what was reported (what is followed stays)."""

    # --- hooks (the Doctor calls only those a subclass overrides) ---------------------------------------
    def begin_cell(self, cell: Optional[int]) -> None:
        """A cell begins (its execution count)."""

    def end_cell(self, end: CellEnd) -> None:
        """A cell ended: ``end`` has its namespace, its error and the namespace's graphs."""

    def op_raised(self, op: str, site: Site, exc: BaseException, operands: Callable[[], list]) -> None:
        """An op the notebook's code ran raised ``exc`` (on its way up, untouched: keep no reference to it).
        ``operands()`` describes what the op was given as plain data: (device, dtype, shape) each."""

    def wrote(self, func, target) -> None:
        """An op wrote in place into ``target`` (its first argument: a tensor, or a list for ``_foreach_``)."""

    def module_call(self, module: torch.nn.Module, args: tuple, output) -> None:
        """An outermost module call returned ``output``, while capturing."""

    def backward_begins(self, checkup: Checkup) -> None:
        """A backward is about to run (what it reaches is ``checkup.roots``)."""

    def backward_ends(self, checkup: Checkup, returned: bool) -> None:
        """That backward is over: it returned, or raised (then ``backward_failed`` follows)."""

    def backward_failed(self, checkup: Checkup, failed: BaseException) -> None:
        """That backward raised ``failed``, which stays as it is (keep no reference to it)."""

    def step_post(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimizer step has run."""
