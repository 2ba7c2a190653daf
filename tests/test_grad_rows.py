"""The columns the writer's thread makes of a segment of the grads stream (grad_rows.grads_segment) hold the
rows that parameter_rows (the parameters, their modules) and the Node rows' own arithmetic make one at a time,
bit for bit and in the same order: segments of many steps that share a plan, parameters missing at some steps,
non-finite numbers, empty gradients, rows made already, and builders of other kinds, mixed."""

from __future__ import annotations

import functools
import math
import random
import struct

import numpy as np
import pyarrow as pa

from forgeviz._capture.grad_rows import (
    LEAF_STATS,
    _leaf_rows,
    _native_rows,
    _node_rows,
    _rows,
    grads_segment,
    parameter_rows,
)
from forgeviz._capture.grads import NODE_STATS
from forgeviz.model.run import GRADS, GRADS_COLUMNS, NODE
from forgeviz.run.format import SCHEMAS


def _same(a, b) -> bool:
    """Equal rows, floats bit for bit (NaN equal to NaN)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, float) or isinstance(y, float):
            if not (isinstance(x, float) and isinstance(y, float)):
                return False
            if struct.pack("=d", x) != struct.pack("=d", y) and not (math.isnan(x) and math.isnan(y)):
                return False
        elif x != y or type(x) is not type(y):
            return False
    return True


def _numbers(rng: random.Random, missing: float) -> tuple:
    """A parameter's (min, max, sum, norm, numel) as leaf_stats keeps them; numel -1: no .grad."""
    if rng.random() < missing:
        return (0.0, 0.0, 0.0, 0.0, -1.0)
    numel = rng.choice([0, 1, 7, 65536]) if rng.random() < 0.2 else rng.randrange(1, 5000)
    pick = rng.random()
    special = [math.nan, math.inf, -math.inf]
    lo = rng.choice(special) if pick < 0.05 else rng.uniform(-3, 0)
    hi = rng.choice(special) if 0.05 <= pick < 0.1 else rng.uniform(0, 3)
    norm = math.nan if 0.1 <= pick < 0.13 else rng.uniform(0, 40)
    return (lo, hi, rng.uniform(-50, 50), norm, float(numel))


def _expected_leaf_rows(step: int, described: list, numbers: list) -> list[tuple]:
    """parameter_rows' rows, one parameter at a time, from the same numbers."""
    read = [(*d, (norm, lo, hi, total / int(numel) if int(numel) else math.nan, int(numel), None))
            for d, (lo, hi, total, norm, numel) in zip(described, numbers) if numel >= 0]
    return parameter_rows(step, read)[0]


class _Reader:
    """The native reader's packed(job), as grad_reader.cpp gives them, of a job held as numbers(job) gives it:
    (min, max, sum, norm, numel, fingerprint or None) per parameter, None for one with no .grad.
    (test_record_reader.py checks the real packed() against numbers().)"""

    def packed(self, job: list) -> tuple:
        stats = b"".join(struct.pack("=5d", *(got[:5] if got is not None else (0, 0, 0, 0, -1))) for got in job)
        if all(got is None or got[5] is None for got in job):
            return stats, None
        return stats, b"".join(struct.pack("=I", 0 if got is None else got[5]) for got in job)


def _expected_read_rows(step: int, described: list, numbers: list) -> list[tuple]:
    read = [(*d, (norm, lo, hi, total / numel if numel else math.nan, numel, fp))
            for d, got in zip(described, numbers) if got is not None for lo, hi, total, norm, numel, fp in (got,)]
    return parameter_rows(step, read)[0]


def _expected_node_rows(step: int, graph: int, described: tuple, numbers: list) -> list[tuple]:
    return [(step, NODE, described[int(k)][0], described[int(k)][1], norm, lo, hi,
             total / numel if numel else math.nan, int(numel), None, None, graph, described[int(k)][2])
            for k, numel, lo, hi, total, norm in numbers if described[int(k)][2] is not None]


def test_a_segment_s_columns_hold_the_rows_parameter_rows_makes_bit_for_bit():
    rng = random.Random(28)
    for trial in range(12):
        modules = [f"block.{m}" if m else "" for m in range(rng.randrange(1, 9))]
        described = [(f"p{k}", rng.choice(modules), rng.random() < 0.1) for k in range(rng.randrange(1, 40))]
        graph_described = tuple((f"Node{k}Backward0", rng.choice(modules + [None]),
                                 None if rng.random() < 0.2 else k) for k in range(rng.randrange(1, 30)))
        other = [(f"q{k}", "head", False) for k in range(3)]  # a second optimizer's plan
        items, expected = [], []
        for step in range(rng.randrange(1, 300)):
            graph = step % 2  # two recorded graphs, alternating
            walk = rng.sample(range(len(graph_described)), rng.randrange(0, len(graph_described) + 1))
            nodes = [(float(k), float(rng.randrange(0, 9)), -1.5, 2.5, rng.uniform(-9, 9), rng.uniform(0, 9))
                     for k in walk]
            items.append(functools.partial(_node_rows, step, graph, graph_described,
                                           b"".join(struct.pack(NODE_STATS, *n) for n in nodes), []))
            expected += _expected_node_rows(step, graph, graph_described, nodes)
            missing = 0.0 if trial % 3 == 0 else 0.15  # (the same parameters at every step, or not)
            numbers = [_numbers(rng, missing) for _ in described]
            items.append(functools.partial(_leaf_rows, step, described,
                                           b"".join(struct.pack(LEAF_STATS, *n) for n in numbers)))
            expected += _expected_leaf_rows(step, described, numbers)
            if step % 7 == 3:  # a row made already, a builder of another kind, a second optimizer's, between them
                row = (step, NODE, "Handed", "", 1.0, 0.0, 1.0, 0.5, 2, None, None, 1, 4)
                items.append(row)
                expected.append(row)
                rows = _expected_leaf_rows(step, other, [_numbers(rng, 0.0) for _ in other])
                items.append(functools.partial(lambda made: made, rows))
                expected += rows
            if trial % 2:  # the native reader's numbers (ranks: with fingerprints), read at the step
                job = [None if n[4] < 0 else (*n[:4], int(n[4]), rng.randrange(2**32) if trial % 4 == 1 else None)
                       for n in (_numbers(rng, missing) for _ in described)]
                items.append(functools.partial(_native_rows, step, described, _Reader(), job))
                expected += _expected_read_rows(step, described, job)
        columns = grads_segment(items)
        got = _rows(columns)
        assert len(got) == len(expected)
        bad = [(i, g, e) for i, (g, e) in enumerate(zip(got, expected)) if not _same(g, e)]
        assert not bad, f"trial {trial}: {len(bad)} rows differ, the first {bad[0]}"
        # and the writer takes the columns as they are (masked where null)
        schema = SCHEMAS[GRADS]
        assert tuple(schema.names) == GRADS_COLUMNS
        batch = pa.record_batch([pa.array(columns[f.name], f.type) for f in schema], schema=schema)
        assert batch.num_rows == len(expected)
        # every row as the writer writes it, its names decoded from their codes by pyarrow
        written = [tuple(r[name] for name in GRADS_COLUMNS) for r in batch.to_pylist()]
        bad = [(i, w, e) for i, (w, e) in enumerate(zip(written, expected)) if not _same(w, e)]
        assert not bad, f"trial {trial}: {len(bad)} written rows differ, the first {bad[0]}"


def test_a_segment_gives_the_gil_up_between_its_pieces():
    """grads_segment calls the writer's breather (which sleeps, letting the training thread take the GIL) before
    each chunk, each column and every 128 items, at least: a segment built in one go stalled a step by up to 5 ms."""
    described = [("w", "fc", False), ("b", "fc", False)]
    stats = struct.pack(f"={5 * len(described)}d", -1.0, 2.0, 1.0, 3.0, 4, 0.0, 1.0, 0.5, 1.0, 1)
    graph = (("MulBackward0", None, 1), ("AddBackward0", "fc", 0))
    items = []
    for step in range(300):
        items.append(functools.partial(_leaf_rows, step, described, stats))
        items.append(functools.partial(_node_rows, step, 0, graph, struct.pack(NODE_STATS, 0, 4, -1, 1, 0, 2), []))
    calls = []
    columns = grads_segment(items, lambda: calls.append(1))
    # at least: 600 items (5 calls), a chunk of parameter rows and one of Node rows (2, and more inside them), and a
    # call per column as the chunks are put in order
    assert len(calls) >= 5 + 2 + len(GRADS_COLUMNS)
    assert len(columns["step"]) == 300 * (2 + 1 + 1)  # w, b and their module; one Node row (position 0)


def test_a_segment_s_rows_keep_their_items_order():
    described = [("w", "fc", False), ("b", "fc", False), ("v", "out", False)]
    graph = (("AddmmBackward0", "fc", 0), ("MulBackward0", None, 1))
    items = []
    for step in range(3):
        items.append(functools.partial(_node_rows, step, 0, graph, struct.pack("=12d", 1, 4, 0, 1, 2, 3,
                                                                                0, 2, 0, 1, 2, 3), []))
        items.append(functools.partial(_leaf_rows, step, described,
                                       struct.pack("=15d", -1, 1, 0, 2, 4, 0, 0, 0, 0, -1, -2, 2, 1, 3, 2)))
    got = [(r[0], r[1], r[2]) for r in _rows(grads_segment(items))]
    assert got == [(s, kind, name) for s in range(3) for kind, name in
                   [("node", "MulBackward0"), ("node", "AddmmBackward0"), ("parameter", "w"), ("parameter", "v"),
                    ("module", "fc"), ("module", "out")]]
    assert np.asarray(grads_segment([])["step"]).size == 0
