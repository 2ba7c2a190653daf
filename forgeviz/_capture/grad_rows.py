"""The rows of a recording's grads stream (``forgeviz.model.run.GRADS``, in schema order), and the columns the
writer's thread makes of a whole segment of them (:func:`grads_segment`).

The training thread keeps numbers, not rows: a step's parameter numbers (``NativePass.leaf_stats``' bytes, five
doubles a parameter) and a backward's Node numbers (``node_stats``' bytes, six doubles a Node) stand in the
segment's list as ``functools.partial`` of :func:`_leaf_rows` and :func:`_node_rows`. The writer's thread turns
the numbers of all the steps of a segment that share a plan (a parameter list, a recorded graph) into columns
at once, with numpy: a tuple per row, taken apart again into columns, cost that thread about 55 µs of CPU
and GIL a step of MLP-256 (24 rows; now 11-17), and its tuples set off the cyclic GC's full collections, which hold
the GIL too (``bench_record.py writer``). Names and module paths are codes into the segment's strings (:class:`Coded`)
and the writer's thread gives the GIL up between pieces of work (``breathe``): the training thread, which takes the GIL
back after each torch op, waited out a whole segment's build before, up to 4.6 ms once every few hundred steps (now
about 1 ms at most). The figures are those of the rows :func:`parameter_rows` makes, bit for bit: the same
operations, in the same order.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Optional

import numpy as np

from ..model.run import GRADS_COLUMNS, MODULE, NODE, PARAMETER
from .grads import NODE_STATS_SIZE

LEAF_STATS = "=5d"  # min, max, sum, norm, numel: a parameter's numbers in NativePass.leaf_stats's bytes
NONFINITE = "nonfinite-grad"  # the doctor's kind (doctor/nonfinite_grad.py), headless
_NULLABLE = {"fingerprint": np.uint32, "sharded": np.bool_, "graph": np.int32, "node": np.int32}
_TYPED = {"step": np.int64, "norm": np.float64, "min": np.float64, "max": np.float64, "mean": np.float64,
          "numel": np.int64}
# columns made as codes (Coded): kind's into _KINDS, the others' into the _Segment's strings
_STRINGS = ("kind", "name", "module")
_KINDS = (PARAMETER, MODULE, NODE)
_KIND_CODE = {kind: code for code, kind in enumerate(_KINDS)}
_BREATHE_BEFORE = ("norm", "fingerprint")  # (_chunk: its columns in three pieces)


class Coded:
    """A string column as int32 codes into ``table`` (-1: null): the writer's thread builds a segment's names
    with numpy on integers, and pyarrow decodes them (``pa.array(coded, pa.string())``, through
    ``__arrow_array__``) in C++ with the GIL released. As Python strings, a segment's 8,000 names each went
    through numpy's object arrays and then pyarrow's conversion, which held the GIL for about 3 ms a segment: the
    training thread waited that long for it once in each few hundred steps.

    >>> import pyarrow as pa
    >>> coded = Coded(np.array([1, -1, 0], dtype=np.int32), ["fc", "fc.weight"])
    >>> coded.tolist(), pa.array(coded, pa.string()).to_pylist()
    (['fc.weight', None, 'fc'], ['fc.weight', None, 'fc'])
    """

    __slots__ = ("codes", "table")

    def __init__(self, codes: np.ndarray, table: list) -> None:
        self.codes = codes
        self.table = table

    def __len__(self) -> int:
        return len(self.codes)

    def tolist(self) -> list:
        table = self.table
        return [table[c] if c >= 0 else None for c in self.codes.tolist()]

    def __arrow_array__(self, type=None):  # noqa: A002 - pyarrow's protocol names it so
        import pyarrow as pa  # (only on the writer's thread: importing forgeviz does not load pyarrow)

        null = self.codes < 0
        if type is not None and pa.types.is_dictionary(type):  # (kind's: its own small table)
            return pa.DictionaryArray.from_arrays(pa.array(self.codes, type.index_type, mask=null),
                                                  pa.array(self.table, type.value_type))
        coded = pa.DictionaryArray.from_arrays(pa.array(self.codes, pa.int32(), mask=null),
                                               pa.array(self.table or [""], pa.string()))
        return coded if type is None else coded.cast(type)


class _Segment:
    """What a segment's builders share on the writer's thread: its strings, each given one code (its position in
    ``table``) as the builders meet them, and the writer's ``breathe``, called between their numpy pieces.

    >>> segment = _Segment(); segment.codes(["a", "b", "a", None]).tolist(), segment.table
    ([0, 1, 0, -1], ['a', 'b'])
    """

    def __init__(self, breathe: Optional[Callable[[], None]] = None) -> None:
        self.table: list = []
        self._code: dict = {}
        self.breathe = breathe or _never

    def code(self, value) -> int:
        if value is None:
            return -1
        code = self._code.get(value)
        if code is None:
            code = self._code[value] = len(self.table)
            self.table.append(value)
        return code

    def codes(self, values) -> np.ndarray:
        code = self.code
        return np.array([code(v) for v in values], dtype=np.int32)


def _never() -> None:
    pass


def _num(value) -> float:
    """A summary's float (JSON-safe strings for non-finite values back to floats)."""
    return float(value) if value is not None else math.nan


def _figures(s) -> tuple[float, float, float, float, int]:
    """(norm, min, max, mean, numel) of a TensorSummary, as floats (JSON's strings for non-finite ones back)."""
    return _num(s.norm), _num(s.min), _num(s.max), _num(s.mean), s.numel


def nonfinite_parameters(step: int, named: list[tuple[str, str]]) -> tuple:
    """The ``nonfinite-grad`` finding (a findings row) of a step whose applied gradients of ``named``
    ((name, module) each, the first first) are not finite.

    >>> nonfinite_parameters(2, [("fc.weight", "fc")])[1:5]
    ('nonfinite-grad', 'fc.weight', None, 'fc')
    """
    first, module = named[0]
    others = f" (and {len(named) - 1} other parameter(s))" if len(named) > 1 else ""
    return (step, NONFINITE, first, None, module,
            f"the gradient the optimizer applied to {first}{others} at step {step} is not finite (NaN or infinite)")


def parameter_rows(step: int, read: list) -> tuple[list[tuple], list[tuple]]:
    """:func:`read_parameters`' rows and findings from ``(name, module, sharded, (norm, min, max, mean, numel,
    fingerprint or None))`` per parameter, its gradient read already (by :func:`_read_one` or the native reader).
    (:func:`_parameter_columns` makes the same figures for many steps at once.)

    >>> rows, found = parameter_rows(4, [("w", "fc", False, (5.0, -4.0, 3.0, -0.5, 2, None)),
    ...                                  ("b", "fc", False, (12.0, 12.0, 12.0, 12.0, 1, None))])
    >>> [r[1:9] for r in rows], found
    ([('parameter', 'w', 'fc', 5.0, -4.0, 3.0, -0.5, 2), ('parameter', 'b', 'fc', 12.0, 12.0, 12.0, 12.0, 1), \
('module', 'fc', 'fc', 13.0, -4.0, 12.0, 3.6666666666666665, 3)], [])
    """
    rows, nonfinite = [], []
    modules: dict[str, list[float]] = {}  # path -> [sum of squares, min, max, sum, numel]
    for name, module, sharded, (norm, lo, hi, mean, numel, fp) in read:
        if not math.isfinite(norm):
            nonfinite.append((name, module))
        rows.append((step, PARAMETER, name, module, norm, lo, hi, mean, numel, fp, sharded, None, None))
        m = modules.get(module)
        if m is None:
            modules[module] = [norm * norm, lo, hi, mean * numel, numel]
        else:
            m[0] += norm * norm
            m[1], m[2] = min(m[1], lo), max(m[2], hi)
            m[3] += mean * numel
            m[4] += numel
    for path, (squares, lo, hi, total, numel) in modules.items():
        rows.append((step, MODULE, path, path, math.sqrt(squares), lo, hi, total / max(numel, 1), numel, None,
                     None, None, None))
    return rows, [nonfinite_parameters(step, nonfinite)] if nonfinite else []


def _native_rows(step: int, described: list, reader, job) -> list[tuple]:
    """The parameter and module rows of a step whose gradients the native reader read, every one (none
    left to Python: all finite, so no finding), from the numbers its ``job`` keeps. A segment's are made
    together, by :func:`grads_segment`."""
    segment = _Segment()
    return _rows(_in_order([_native_columns(described, [0], [step], [reader.packed(job)], segment)], segment))


def _leaf_rows(step: int, described: list, stats: bytes) -> list[tuple]:
    """The parameter and module rows of a step whose gradients the backward before it summarised, unchanged
    since (:meth:`NativePass.leaf_stats`'s ``stats``, five doubles a parameter of ``described``, numel -1 for
    one with no ``.grad``). A segment's are made together, by :func:`grads_segment`.

    >>> import struct
    >>> stats = struct.pack("=10d", -4.0, 3.0, -1.0, 5.0, 2, 0, 0, 0, 0, -1)  # (b: no .grad)
    >>> [r[1:9] for r in _leaf_rows(7, [("w", "fc", False), ("b", "fc", False)], stats)]
    [('parameter', 'w', 'fc', 5.0, -4.0, 3.0, -0.5, 2), ('module', 'fc', 'fc', 5.0, -4.0, 3.0, -0.5, 2)]
    """
    segment = _Segment()
    return _rows(_in_order([_leaf_columns(described, [0], [step], [stats], segment)], segment))


def _node_rows(step: int, graph: int, described: tuple, stats: bytes, on_device: list) -> list[tuple]:
    """The Node rows of one backward from the native hooks' ``node_stats``: six doubles per Node (its
    position in the walk, numel, min, max, sum, norm), and (position, summary) of the gradients the device
    path summarised, after them (their numbers are in: a segment with such rows waits for the read-back
    first, :meth:`Recorder._flush`; one with none still has no row). ``described``: per position in the walk,
    (name, module, the Node's position in the recorded graph, None past its cut). A segment's are made
    together, by :func:`grads_segment`.

    >>> import struct
    >>> from forgeviz._capture.grads import NODE_STATS
    >>> from forgeviz.model.graph import TensorSummary
    >>> s = TensorSummary([2], "float32", "cpu", 2, 5.0, -3.0, 4.0, 0.5)
    >>> [row[2:9] + row[-1:] for row in _node_rows(1, 0, (("MulBackward0", None, 1), ("AddBackward0", "fc", 0)),
    ...                                            struct.pack(NODE_STATS, 0, 4, -1, 1, 0, 2), [(1, s)])]
    [('MulBackward0', None, 2.0, -1.0, 1.0, 0.0, 4, 1), ('AddBackward0', 'fc', 5.0, -3.0, 4.0, 0.5, 2, 0)]
    """
    segment = _Segment()
    chunks = [_node_columns(described, graph, [0], [step], [stats], segment)]
    on = [(k, s) for k, s in on_device if s.norm is not None and described[k][2] is not None]
    if on:  # (device_summary fills norm last: a norm read means the rest is there), after the others
        chunks.append(_row_columns([_summary_row(step, graph, described, k, s) for k, s in on], [0] * len(on),
                                   segment, first=len(stats) // NODE_STATS_SIZE))
    return _rows(_in_order(chunks, segment))


def _summary_row(step: int, graph: int, described: tuple, k: int, s) -> tuple:
    """The row of the Node at position ``k`` of the walk of ``graph`` (``described``, as :func:`_node_rows`
    takes it; one in the recorded graph) from its gradient's summary ``s``.

    >>> from forgeviz.model.graph import TensorSummary
    >>> s = TensorSummary([2], "float32", "cpu", 2, 5.0, -3.0, 4.0, 0.5)
    >>> _summary_row(3, 0, (("MulBackward0", "fc", 0),), 0, s)
    (3, 'node', 'MulBackward0', 'fc', 5.0, -3.0, 4.0, 0.5, 2, None, None, 0, 0)
    """
    name, module, at = described[k]
    return (step, NODE, name, module, *_figures(s), None, None, graph, at)


def grads_segment(items: list, breathe: Callable[[], None] = _never) -> dict[str, np.ndarray]:
    """A segment of the grads stream as columns (numpy arrays, masked where a column has nulls; the names
    :class:`Coded`), from its rows
    and row builders (the ``functools.partial`` of a builder and the numbers the training thread kept), in
    their order, on the writer's thread, calling ``breathe`` between its pieces (the writer's: it gives the GIL up
    now and then, RunWriter.breathe). The builders :func:`_leaf_rows` and :func:`_node_rows` of the same
    plan (and :func:`_native_rows`', the native reader's) are made together: a numpy operation per column (and,
    for module rows, per parameter of the largest module) for the whole segment, where a row each cost a
    microsecond or more.

    >>> import struct
    >>> described = [("w", "fc", False)]
    >>> columns = grads_segment([functools.partial(_leaf_rows, 1, described, struct.pack("=5d", 1, 2, 3, 4, 2)),
    ...                          (1, "node", "MulBackward0", None, 1.0, 0.0, 1.0, 0.5, 2, None, None, 0, 3),
    ...                          functools.partial(_leaf_rows, 2, described, struct.pack("=5d", 0, 0, 0, 0, -1))])
    >>> columns["kind"].tolist(), columns["mean"].tolist(), columns["node"].tolist()
    (['parameter', 'module', 'node'], [1.5, 1.5, 0.5], [None, None, 3])
    """
    leaves: dict[int, tuple] = {}  # id(described) -> (described, [item index], [step], [stats])
    nodes: dict[tuple, tuple] = {}  # (id(described), graph) -> (described, graph, [item index], [step], [stats])
    read: dict[int, tuple] = {}  # id(described) -> (described, [item index], [step], [the native reader's numbers])
    segment = _Segment(breathe)  # the segment's names and module paths, coded
    rows, rows_at = [], []  # the rest: rows, and the index of the item each came from
    partial = functools.partial
    for i, item in enumerate(items):
        if not i & 127:
            breathe()
        kind = type(item)
        if kind is tuple:
            rows.append(item)
            rows_at.append(i)
            continue
        func = item.func if kind is partial else None
        if func is _leaf_rows:
            step, described, stats = item.args
            group = leaves.get(id(described))
            if group is None:
                group = leaves[id(described)] = (described, [], [], [])
            group[1].append(i)
            group[2].append(step)
            group[3].append(stats)
        elif func is _native_rows:
            step, described, reader, job = item.args
            group = read.get(id(described))
            if group is None:
                group = read[id(described)] = (described, [], [], [])
            group[1].append(i)
            group[2].append(step)
            group[3].append(reader.packed(job))
        elif func is _node_rows and not item.args[4]:
            step, graph, described, stats, _ = item.args
            group = nodes.get((id(described), graph))
            if group is None:
                group = nodes[(id(described), graph)] = (described, graph, [], [], [])
            group[2].append(i)
            group[3].append(step)
            group[4].append(stats)
        else:
            made = item()
            rows.extend(made)
            rows_at.extend([i] * len(made))
    chunks = []
    for build, groups in ((_leaf_columns, leaves), (_native_columns, read), (_node_columns, nodes)):
        for group in groups.values():
            breathe()
            chunks.append(build(*group, segment))
    if rows:
        breathe()
        chunks.append(_row_columns(rows, rows_at, segment))
    return _in_order(chunks, segment)


# A chunk: (segment item index per row, position within its item per row, {column: (values, null mask or None)}).
# A part, as the builders give it: {column: values, or None where all null}.
def _leaf_columns(described: list, at: list, steps: list, stats: list, segment: _Segment) -> tuple:
    """The parameter and module rows (:func:`parameter_rows`' figures) of the steps ``steps`` (items ``at`` of
    the segment), each with its ``leaf_stats`` bytes, as a chunk."""
    numbers = np.frombuffer(b"".join(stats), dtype=np.float64).reshape(len(stats), len(described), 5)
    return _parameter_columns(described, at, steps, numbers, None, segment)


def _native_columns(described: list, at: list, steps: list, packed: list, segment: _Segment) -> tuple:
    """:func:`_leaf_columns` of the steps the native reader read: ``packed``, each step's ``packed(job)`` (five
    doubles a parameter, min, max, sum, norm, numel, numel -1 for one with no ``.grad``; and a uint32 fingerprint a
    parameter, or None for a job read without them). Bytes, not a tuple a parameter: every tuple counted towards the
    cyclic GC's next collection, and the GIL this thread holds building them is the training thread's wait."""
    numbers = np.frombuffer(b"".join(stats for stats, _ in packed), dtype=np.float64).reshape(
        len(packed), len(described), 5)
    if all(prints is None for _, prints in packed):
        return _parameter_columns(described, at, steps, numbers, None, segment)
    blank = bytes(4 * len(described))  # (a step read without fingerprints: a world that grew since)
    prints = np.frombuffer(b"".join(blank if p is None else p for _, p in packed), dtype=np.uint32).reshape(
        len(packed), len(described))
    null = numbers[:, :, 4] < 0
    unprinted = [k for k, (_, p) in enumerate(packed) if p is None]
    if unprinted:
        null = null.copy()
        null[unprinted] = True
    return _parameter_columns(described, at, steps, numbers, (prints, null), segment)


def _parameter_columns(described: list, at: list, steps: list, numbers: np.ndarray, prints, segment: _Segment) -> tuple:
    """The parameter and module rows of ``numbers`` (steps x ``described`` x (min, max, sum, norm, numel);
    numel -1: no ``.grad``) and ``prints`` (None: no fingerprints; else their values and where they are None,
    a step's row each) as a chunk."""
    count = len(described)
    lo, hi, total, norm = (numbers[:, :, j] for j in range(4))
    numel = numbers[:, :, 4].astype(np.int64)  # (numel -1: no .grad)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(numel != 0, total / numel, np.nan)
    present = numel >= 0
    item, position = np.nonzero(present)  # the parameter rows, step by step, in described's order
    steps_of = np.asarray(steps, dtype=np.int64)
    parts = [{
        "step": steps_of[item], "kind": np.full(len(item), _KIND_CODE[PARAMETER], dtype=np.int32),
        "name": segment.codes([d[0] for d in described])[position],
        "module": segment.codes([d[1] for d in described])[position], "norm": norm[item, position],
        "min": lo[item, position], "max": hi[item, position], "mean": mean[item, position],
        "numel": numel[item, position], "sharded": np.array([bool(d[2]) for d in described])[position]}]
    if prints is not None:
        parts[0]["fingerprint"] = (prints[0][item, position], prints[1][item, position])
    keys = [(item, position)]
    segment.breathe()
    # Module rows: per set of parameters present (one for the whole segment, as a rule), each module's in the
    # order of its first parameter present, summed in the parameters' order, as parameter_rows sums them.
    if (present == present[:1]).all():
        patterns, which = present[:1], [slice(None)]
    else:
        patterns, inverse = np.unique(present, axis=0, return_inverse=True)
        which = [np.flatnonzero(inverse.reshape(-1) == p) for p in range(len(patterns))]
    for pattern, here in zip(patterns, which):
        order: dict = {}
        for k in np.flatnonzero(pattern).tolist():
            order.setdefault(described[k][1], []).append(k)
        if order:
            parts.append(_module_part(order, steps_of, here, lo[here], hi[here], norm[here], mean[here], numel[here],
                                      segment))
            steps_here = np.arange(len(numbers))[here]
            keys.append((np.repeat(steps_here, len(order)), np.tile(np.arange(count, count + len(order)),
                                                                     len(steps_here))))
    return _chunk(at, keys, parts, segment.breathe)


def _module_part(order: dict, steps_of: np.ndarray, here, lo, hi, norm, mean, numel, segment: _Segment) -> dict:
    """The module rows of the steps ``here`` (their parameters' numbers, a row a step), step by step, each
    module's in ``order`` (path -> its parameters' positions): the j-th parameter of every module at once,
    so each module sums its own in their order, as parameter_rows does."""
    paths = list(order)
    width = max(len(ks) for ks in order.values())
    at = np.array([ks + [-1] * (width - len(ks)) for ks in order.values()])  # modules x their parameters
    first = at[:, 0]
    n, c = norm[:, first], numel[:, first]
    squares, low, high, summed, counted = n * n, lo[:, first], hi[:, first], mean[:, first] * c, c
    for j in range(1, width):
        has, k = at[:, j] >= 0, np.maximum(at[:, j], 0)
        n, c, low_k, high_k = norm[:, k], numel[:, k], lo[:, k], hi[:, k]
        squares = np.where(has, squares + n * n, squares)
        low = np.where(has & (low_k < low), low_k, low)  # Python's min(a, b): a unless b < a
        high = np.where(has & (high_k > high), high_k, high)
        summed = np.where(has, summed + mean[:, k] * c, summed)
        counted = np.where(has, counted + c, counted)
    label = np.tile(segment.codes(paths), len(squares))
    return {"step": np.repeat(steps_of[here], len(paths)),
            "kind": np.full(len(label), _KIND_CODE[MODULE], dtype=np.int32),
            "name": label, "module": label, "norm": np.sqrt(squares).reshape(-1), "min": low.reshape(-1),
            "max": high.reshape(-1), "mean": (summed / np.maximum(counted, 1)).reshape(-1),
            "numel": counted.reshape(-1)}


def _node_columns(described: tuple, graph: int, at: list, steps: list, stats: list, segment: _Segment) -> tuple:
    """The Node rows (:func:`_node_rows`' figures, without the device path's) of the backward passes of
    ``graph`` taken at the steps ``steps`` (items ``at`` of the segment), each with its ``node_stats`` bytes."""
    sizes = np.array([len(s) for s in stats]) // NODE_STATS_SIZE
    numbers = np.frombuffer(b"".join(stats), dtype=np.float64).reshape(-1, 6)
    where = np.array([-1 if d[2] is None else d[2] for d in described], dtype=np.int32)
    k = numbers[:, 0].astype(np.int64)
    keep = np.flatnonzero(where[k] >= 0)  # (past the recorded graph's cut: no row)
    item = np.repeat(np.arange(len(stats)), sizes)[keep]
    position = (np.arange(len(k)) - np.repeat(np.cumsum(sizes) - sizes, sizes))[keep]  # (an item's, in order)
    k, numbers = k[keep], numbers[keep]
    numel = numbers[:, 1].astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(numel != 0, numbers[:, 4] / numel, np.nan)
    part = {"step": np.asarray(steps, dtype=np.int64)[item], "kind": np.full(len(k), _KIND_CODE[NODE], dtype=np.int32),
            "name": segment.codes([d[0] for d in described])[k],
            "module": segment.codes([d[1] for d in described])[k], "norm": numbers[:, 5],
            "min": numbers[:, 2], "max": numbers[:, 3], "mean": mean, "numel": numel,
            "graph": np.full(len(k), graph, dtype=np.int32), "node": where[k]}
    segment.breathe()
    return _chunk(at, [(item, position)], [part], segment.breathe)


def _row_columns(rows: list, at: list, segment: _Segment, first: int = 0) -> tuple:
    """A chunk of rows already made (tuples in schema order): ``at``, the item each came from, in order
    (``first``: the position within its item the first one takes)."""
    columns = {}
    for name, values in zip(GRADS_COLUMNS, zip(*rows)):
        if name == "kind":
            columns[name] = (np.array([_KIND_CODE[v] for v in values], dtype=np.int32), None)
        elif name in _STRINGS:
            columns[name] = (segment.codes(values), None)
        elif name in _NULLABLE:
            mask = np.array([v is None for v in values])
            columns[name] = (np.array([0 if v is None else v for v in values], dtype=_NULLABLE[name]), mask)
        else:
            columns[name] = (np.array(values, dtype=_TYPED.get(name, object)), None)
    return np.asarray(at, dtype=np.int64), np.arange(first, first + len(rows)), columns


def _chunk(at: list, keys: list, parts: list, breathe: Callable[[], None] = _never) -> tuple:
    """One chunk from ``parts`` (a column's values, (values, where null) or None where all null), each with its
    (index into ``at``, position) per row."""
    at_of = np.asarray(at, dtype=np.int64)
    sizes = [len(item) for item, _ in keys]
    columns = {}
    for name in GRADS_COLUMNS:
        if name in _BREATHE_BEFORE:
            breathe()
        pieces = [part.get(name) for part in parts]
        if name in _STRINGS:  # codes, -1 where null
            columns[name] = (np.concatenate([np.full(n, -1, dtype=np.int32) if p is None else p
                                             for p, n in zip(pieces, sizes)]), None)
            continue
        if all(p is not None and type(p) is not tuple for p in pieces):
            columns[name] = (np.concatenate(pieces), None)
            continue
        values, masks = [], []
        for p, n in zip(pieces, sizes):
            if p is None:
                values.append(np.zeros(n, dtype=_NULLABLE.get(name, object)))
                masks.append(np.ones(n, dtype=bool))
            elif type(p) is tuple:
                values.append(p[0])
                masks.append(p[1])
            else:
                values.append(p)
                masks.append(np.zeros(n, dtype=bool))
        columns[name] = (np.concatenate(values), np.concatenate(masks))
    return at_of[np.concatenate([item for item, _ in keys])], np.concatenate([pos for _, pos in keys]), columns


def _in_order(chunks: list, segment: _Segment) -> dict:
    """The chunks' rows as one segment's columns, in the order the items and their rows came (masked where
    a column has nulls; the string columns Coded, into ``segment``)."""
    if not chunks:
        return {name: (Coded(np.zeros(0, dtype=np.int32), list(_KINDS) if name == "kind" else segment.table)
                       if name in _STRINGS else np.zeros(0, dtype=_TYPED.get(name, object))) for name in GRADS_COLUMNS}
    order = np.lexsort((np.concatenate([c[1] for c in chunks]), np.concatenate([c[0] for c in chunks])))
    columns = {}
    breathe = segment.breathe
    for name in GRADS_COLUMNS:
        breathe()
        values = np.concatenate([c[2][name][0] for c in chunks])[order]
        if name in _STRINGS:
            columns[name] = Coded(values, list(_KINDS) if name == "kind" else segment.table)
            continue
        masks = [c[2][name][1] for c in chunks]
        if any(m is not None and m.any() for m in masks):
            mask = np.concatenate([m if m is not None else np.zeros(len(c[0]), dtype=bool)
                                   for m, c in zip(masks, chunks)])[order]
            values = np.ma.MaskedArray(values, mask=mask)
        columns[name] = values
    return columns


def _rows(columns: dict) -> list[tuple]:
    """Columns back as rows (tuples in schema order, None where null): for tests and the doctests."""
    return list(zip(*(columns[name].tolist() for name in GRADS_COLUMNS)))
