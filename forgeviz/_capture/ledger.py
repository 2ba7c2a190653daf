"""The storage ledger: where a memory tracker keeps its storages and their events.

A :class:`~forgeviz._capture.memory.MemoryTracker` knows *what* a storage is (the categories, from
public hooks); a ledger knows *which* storages exist and *when* they came and went. Two ledgers
stand behind the one interface :class:`StorageLedger`:

- ``ledger_native.NativeLedger``: the C++ CPU allocator ledger (every CPU allocation, a fraction of
  the cost). It sees allocations below Python, so it is told where ops come from (:class:`SiteLedger`).
- ``ledger_dispatch.DispatchLedger``: a TorchDispatchMode sees each op's outputs on any device, and a
  ``weakref.finalize`` per storage records its free. Events are Python arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional, Protocol

import torch

from ..model import memory as m

# What a storage that a Node saves may be, to count as that Node's activation while it is saved:
# parameters, buffers, gradients, optimizer state and inputs keep their own role.
CLAIMABLE = (m.TEMPORARY, m.OTHER)

# The event columns' numpy kinds as ``array`` typecodes.
TYPECODES = {"float32": "f", "float64": "d", "uint32": "I", "uint16": "H", "uint8": "B"}


@dataclass
class StorageRecord:
    """What the tracker knows of one storage."""

    sid: int
    nbytes: int
    dtype: str
    shape: tuple
    category: int
    op: Optional[str]
    module: Optional[str]
    cell: Optional[int]
    line: Optional[int]
    filename: Optional[str]
    node: Optional[int] = None
    node_name: Optional[str] = None
    own: int = m.OTHER  # while claimed: the category it goes back to
    claims: int = 0  # how many live Nodes hold it as an activation


class LedgerStats(NamedTuple):
    """A ledger's totals: events held and merged away, live bytes, and the peak."""

    count: int
    dropped: int
    live_bytes: int
    peak_bytes: int
    peak_time: float


def intern(table: dict[str, int], value: Optional[str]) -> int:
    """The index of ``value`` in a growing string table (``NO_SMALL`` for None or a full table).

    >>> table = {}
    >>> intern(table, "fc1"), intern(table, "fc2"), intern(table, "fc1"), intern(table, None) == m.NO_SMALL
    (0, 1, 0, True)
    """
    if value is None:
        return m.NO_SMALL
    index = table.get(value)
    if index is None:
        if len(table) >= m.NO_SMALL - 1:
            return m.NO_SMALL
        index = table[value] = len(table)
    return index


class StorageLedger(Protocol):
    """How storages are tracked, their events stored and their columns read.

    Built as ``Ledger(max_events, fault)``; ``fault(message)`` reports a failure inside forgeviz.
    Keys are storage data pointers; ``sid`` is the ledger's own storage id (the ``storage`` column).
    """

    backend: str  # "native" or "dispatch"
    wants_sites: bool  # a SiteLedger: it must be told where ops come from
    # A category given late is dated from the allocation, so gradients can be read in bulk (after a
    # backward, before a step) instead of by a hook per parameter.
    late_categories: bool
    default_cell: Optional[int]  # the cell of code that IPython did not compile itself

    def begin(self) -> None:
        """Start seeing new storages."""

    def end(self) -> None:
        """Stop seeing new storages (frees of tracked ones are still recorded)."""

    def close(self) -> None:
        """Forget every finalizer."""

    def track(self, storage, category: int, op: Optional[str], shape: tuple, dtype: torch.dtype,
              where: Optional[tuple] = None, when: Optional[float] = None) -> Optional[StorageRecord]:
        """Start tracking a storage that exists (an alloc event); None if already tracked."""

    def recategorize(self, tensor: torch.Tensor, category: int, only_from: tuple = ()) -> None:
        """The tensor's storage is ``category`` (if its own category is one of ``only_from``, when
        given); tracked now if it was not. While Nodes hold it as an activation, a ``CLAIMABLE``
        category only changes what it goes back to; any other ends the claims."""

    def recategorize_all(self, tensors: list, category: int) -> None:
        """:meth:`recategorize` each of ``tensors`` (no ``only_from``): every parameter's ``.grad``
        after a backward, at once."""

    def claim(self, t: torch.Tensor, nid: int, grad_fn) -> Optional[tuple[int, int]]:
        """``grad_fn`` (node ``nid``) saved ``t``: if its storage is ``CLAIMABLE`` (or claimed already),
        it is an activation until every Node that claimed it released it. Returns (data pointer,
        storage id) to release it with, or None when nothing was claimed."""

    def release(self, key: int, sid: int) -> None:
        """A Node that claimed storage ``sid`` (at data pointer ``key``) freed its saved tensors or
        died: after the last one, the storage goes back to its own category (an event, dated now)."""

    def release_all(self, claims: list) -> None:
        """:meth:`release` each (data pointer, storage id) of ``claims``: what a backward's Nodes freed."""

    def lookup(self, key: int) -> Optional[StorageRecord]:
        """The live record at data pointer ``key``, if tracked."""

    def find(self, sid: int) -> tuple[StorageRecord, bool]:
        """Storage ``sid``'s record and whether it is alive; ``KeyError`` if the history has none."""

    def live(self) -> list[tuple[int, StorageRecord]]:
        """Every live tracked storage: (data pointer, record)."""

    def stats(self) -> LedgerStats:
        """Events held and merged away, live bytes and the peak."""

    def own_bytes(self) -> int:
        """The bytes the ledger holds for its own bookkeeping (events, tables), not the user's."""

    @property
    def ops(self) -> list[str]:
        """The op names the ``op`` column indexes."""

    @property
    def modules(self) -> list[str]:
        """The module paths the ``module`` column indexes."""

    def columns(self, start: int = 0, end: Optional[int] = None) -> dict[str, bytes]:
        """Events ``[start, end)`` of each column as little-endian bytes (copies)."""

    def publish(self, count: int) -> None:
        """The first ``count`` events were sent to a view (never rewritten after)."""

    def mark_cell(self, cell: int) -> None:
        """A notebook cell starts now (0: its number is known once it ran)."""

    def name_cell(self, cell: int) -> None:
        """The cell last marked with 0 turned out to be ``cell``."""

    def cell_marks(self) -> list[m.CellMark]:
        """Where each cell starts, moved as older history was merged."""


class SiteLedger(StorageLedger, Protocol):
    """A ledger that sees allocations where Python does not (C++), told where they come from:
    the line, module and op of each op, module call, optimizer step and backward pass."""

    def after_op(self, out, where: tuple, op: Optional[str] = None) -> None:
        """The op ``op``, called from Python at ``where`` (filename, line), returned ``out``."""

    def allocated_since(self) -> bool:
        """Whether anything was allocated since the last ``after_op``."""

    def push_site(self, where: Optional[tuple], module: Optional[str], op: Optional[str] = None) -> None:
        """Code at ``where`` in ``module`` (running ``op``) allocates from now until ``pop_site``."""

    def push_module(self, module: Optional[str]) -> None:
        """The same line now runs inside ``module`` (an inner module call)."""

    def pop_site(self) -> None:
        """Back to the site before the last push."""

    def step_begins(self, where: tuple, name: str) -> None:
        """An optimizer step called at ``where`` starts: what it allocates is ``name`` (e.g. "Adam.step")."""

    def step_ends(self) -> None:
        """The optimizer step ended."""


LedgerFactory = Callable[[int, Callable[[str], None]], StorageLedger]
