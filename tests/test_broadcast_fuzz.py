"""Hypothesis fuzz of the broadcasting and matmul rules against torch as the oracle.

The rules under test are forgeviz's own (``forgeviz.model.broadcast``, plain Python); torch judges
them on meta tensors, so nothing is allocated.
"""

from __future__ import annotations

import os
import re

import torch
from hypothesis import HealthCheck, event, given, settings, strategies as st

from forgeviz._capture.broadcast import plan_broadcast
from forgeviz.model.broadcast import broadcast_shape, check_dims, matmul_plan

CASES = int(os.environ.get("FV_FUZZ_CASES", 10_000))
MESSAGE = re.compile(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) "
                     r"at non-singleton dimension (\d+)")
SETTINGS = dict(max_examples=CASES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

shape = st.lists(st.integers(0, 5), max_size=6)
# Sizes 0-5 rarely broadcast by chance: half the shapes are "nearly compatible" variants of a base.


@st.composite
def shape_groups(draw):
    count = draw(st.sampled_from([2, 2, 3]))
    if draw(st.booleans()):
        return [draw(shape) for _ in range(count)]
    base = draw(st.lists(st.integers(0, 5), min_size=1, max_size=6))
    out = []
    for _ in range(count):
        keep = draw(st.integers(0, len(base)))
        s = [draw(st.sampled_from([n, n, 1, draw(st.integers(0, 5))])) for n in base[len(base) - keep:]]
        out.append(s)
    return out


@settings(**SETTINGS)
@given(shape_groups())
def test_broadcast_rule_matches_torch(shapes):
    names = [f"x{i}" for i in range(len(shapes))]
    checks, conflict = check_dims(shapes, names)
    metas = [torch.empty(s, device="meta") for s in shapes]
    try:
        expected = list(torch.broadcast_shapes(*map(tuple, shapes)))
    except RuntimeError:
        expected = None
    event("broadcasts" if expected is not None else "conflict")
    assert broadcast_shape(shapes) == expected
    if expected is not None:
        assert conflict is None and [c.size for c in reversed(checks)] == expected
        assert all(c.verdict != "conflict" for c in checks)
        return
    # torch's own message names the first conflicting dim and the two sizes it met there.
    try:
        torch.broadcast_tensors(*metas)
        raise AssertionError("broadcast_tensors accepted shapes broadcast_shapes refused")
    except RuntimeError as exc:
        size_a, size_b, dim = map(int, MESSAGE.search(str(exc)).groups())
    assert conflict is not None and conflict.sizes == [size_a, size_b]
    assert conflict.dim == dim + (len(checks) - max(len(s) for s in shapes[: conflict.operands[1] + 1]))
    assert next(c for c in checks if c.dim == conflict.dim).verdict == "conflict"


@settings(**SETTINGS)
@given(st.lists(st.integers(0, 5), max_size=5), st.lists(st.integers(0, 5), max_size=5), st.booleans())
def test_matmul_rule_matches_torch(a, b, inner_equal):
    if inner_equal and a and b:  # make matching inner dims common enough to test the batch rule
        if len(b) == 1:
            b = [a[-1]]
        else:
            b[-2] = a[-1]
    plan = matmul_plan(a, b)
    try:
        expected = list(torch.matmul(torch.empty(a, device="meta"), torch.empty(b, device="meta")).shape)
    except RuntimeError:
        expected = None
    event("matmul works" if expected is not None else "matmul fails")
    assert plan.result_shape == expected, (a, b)


@settings(**{**SETTINGS, "max_examples": max(1, CASES // 10)})
@given(shape_groups(), st.sampled_from(["+", "*", "broadcast"]))
def test_small_values_are_torchs(shapes, op):
    shapes = [[min(n, 3) for n in s] for s in shapes]
    tensors = [torch.arange(torch.Size(s).numel(), dtype=torch.float32).reshape(s) * (10 ** k)
               for k, s in enumerate(shapes)]
    plan = plan_broadcast(tensors, [f"x{i}" for i in range(len(shapes))], op if len(shapes) == 2 else "broadcast")
    if not plan.ok or plan.operands[0].expanded_values is None:
        return
    for operand, expanded in zip(plan.operands, torch.broadcast_tensors(*tensors)):
        assert operand.expanded_values == [f"{v:g}" for v in expanded.reshape(-1).tolist()]
        assert operand.expanded_stride == list(expanded.stride())
    if plan.result_values is not None:
        result = tensors[0] + tensors[1] if op == "+" else tensors[0] * tensors[1]
        assert plan.result_values == [f"{v:g}" for v in result.reshape(-1).tolist()]
