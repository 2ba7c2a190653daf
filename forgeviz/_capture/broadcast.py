"""Plan a broadcast or a matmul from real tensors or shapes, with torch as the judge.

The rule itself is in ``forgeviz.model.broadcast``; here torch answers: the result shape, its
own error message (from meta tensors, so nothing is allocated), fixes it accepts, and the values
of small tensors.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Optional, Sequence

import torch

from ..model import broadcast as m
from ..model.broadcast import BroadcastPlan, Conflict, Operand, Step
from ..model.strides import format_value, shape_tuple_text
from .untraced import untraced

ELEMENTWISE_OPS = {"+": torch.add, "-": torch.sub, "*": torch.mul, "/": torch.div, "broadcast": None}
# torch functions whose shape errors we can explain, by the names __torch_function__ sees.
OP_SYMBOLS = {
    "add": "+", "__add__": "+", "__radd__": "+", "add_": "+", "__iadd__": "+",
    "sub": "-", "__sub__": "-", "__rsub__": "-", "sub_": "-", "__isub__": "-",
    "mul": "*", "__mul__": "*", "__rmul__": "*", "mul_": "*", "__imul__": "*",
    "div": "/", "__truediv__": "/", "__rtruediv__": "/", "true_divide": "/", "div_": "/", "__itruediv__": "/",
    "broadcast_tensors": "broadcast", "where": "broadcast", "maximum": "broadcast", "minimum": "broadcast",
    "pow": "broadcast", "__pow__": "broadcast", "eq": "broadcast", "__eq__": "broadcast", "lt": "broadcast",
    "gt": "broadcast", "le": "broadcast", "ge": "broadcast", "ne": "broadcast",
    "matmul": "@", "__matmul__": "@", "__rmatmul__": "@", "mm": "@", "bmm": "@", "mv": "@",
    "linear": "@",  # F.linear(x, weight) is x @ weight.T: drawn that way
}
BROADCAST_ERROR = re.compile(r"must match the size of tensor|cannot be broadcast|Attempting to broadcast")
MATMUL_ERROR = re.compile(r"cannot be multiplied|Expected size for first two dimensions|size mismatch|"
                          r"must match the size of tensor|same reduction dim|inconsistent tensor size")


def as_operand_shape(value: object, what: str) -> tuple[list[int], Optional[torch.Tensor]]:
    """(shape, tensor or None) for a tensor or a shape; clear errors for anything else.

    >>> as_operand_shape((3, 1), "a")
    ([3, 1], None)
    """
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.is_nested:
            raise TypeError(f"{what}: expected a strided tensor or a shape, got a {value.layout} tensor")
        return list(value.shape), value
    if isinstance(value, (tuple, list, torch.Size)):
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in value):
            raise TypeError(f"{what}: a shape must hold ints, got {value!r:.60}")
        if any(n < 0 for n in value):
            raise ValueError(f"{what}: a shape cannot have a negative size, got {tuple(value)}")
        return list(value), None
    raise TypeError(f"{what}: expected a torch.Tensor or a shape (tuple, list or torch.Size of ints), "
                    f"got {type(value).__name__}: {value!r:.60}")


def _meta(shape: Sequence[int], t: Optional[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    if t is not None:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    return torch.empty(tuple(shape), dtype=dtype, device="meta")


def _operands(values: Sequence[object], names: Sequence[str], dtype: Optional[torch.dtype]) -> tuple:
    """(parsed (shape, tensor or None) pairs, shapes, tensors, the dtype for bare shapes, meta twins)."""
    parsed = [as_operand_shape(v, n) for v, n in zip(values, names)]
    default = dtype or torch.get_default_dtype()
    return (parsed, [s for s, _ in parsed], [t for _, t in parsed], default,
            [_meta(s, t, default) for s, t in parsed])


def _values(t: torch.Tensor) -> list[str]:
    return [format_value(v) for v in t.reshape(-1).tolist()]


def _real_message(parsed, dtype: torch.dtype, run) -> str:
    """torch's message on a real device: meta kernels word some errors differently. The operands
    are one element expanded to the shape (stride 0), so nothing big is allocated, and the op
    fails in its shape check before computing anything."""
    device = next((t.device for _, t in parsed if t is not None and t.device.type != "meta"), torch.device("cpu"))
    stand_ins = [torch.zeros((), dtype=t.dtype if t is not None else dtype, device=device).expand(shape)
                 for shape, t in parsed]
    try:
        run(*stand_ins)
    except RuntimeError as exc:
        return str(exc).splitlines()[0]
    return ""


def _torch_broadcast(metas: Sequence[torch.Tensor]) -> tuple[Optional[list[int]], str]:
    try:
        return list(torch.broadcast_tensors(*metas)[0].shape), ""
    except RuntimeError as exc:
        return None, str(exc).splitlines()[0]


def _fixes(shapes: list[list[int]], names: Sequence[str], pair: Sequence[int], matmul: bool = False) -> list[str]:
    """Fixes torch accepts: unsqueeze the right axis, or transpose. Each one is tried first."""
    def works(candidate: list[list[int]]) -> Optional[list[int]]:
        try:
            if matmul:
                return list(torch.matmul(*(torch.empty(s, device="meta") for s in candidate)).shape)
            return list(torch.broadcast_shapes(*(tuple(s) for s in candidate)))
        except RuntimeError:
            return None

    fixes: list[str] = []
    largest = max((math.prod(s) for s in shapes), default=0)
    for i in reversed(list(pair)):
        shape = shapes[i]
        if not matmul:
            for p in range(len(shape), -1, -1):  # unsqueeze nearest the right first
                new = shape[:p] + [1] + shape[p:]
                result = works([new if k == i else s for k, s in enumerate(shapes)])
                if result is not None and math.prod(result) <= largest:
                    where = -1 if p == len(shape) else p
                    fixes.append(f"{names[i]}.unsqueeze({where})  # {shape_tuple_text(new)}: "
                                 f"result {shape_tuple_text(result)}")
                    break
        if len(shape) >= 2:
            new = shape[:-2] + [shape[-1], shape[-2]]
            result = works([new if k == i else s for k, s in enumerate(shapes)])
            if result is not None and (matmul or math.prod(result) <= largest):
                fixes.append(f"{names[i]}.{'T' if len(shape) == 2 else 'mT'}  # {shape_tuple_text(new)}: "
                             f"result {shape_tuple_text(result)}")
    return fixes[:3]


def plan_broadcast(values: Sequence[object], names: Sequence[str], op: str = "broadcast",
                   dtype: Optional[torch.dtype] = None, source: Optional[str] = None,
                   torch_message: Optional[str] = None) -> BroadcastPlan:
    """Broadcast tensors or shapes; ``op`` is one of "+", "-", "*", "/", "broadcast" or "@".

    >>> plan = plan_broadcast([(3, 1), (1, 3)], ["a", "b"])
    >>> plan.ok, plan.result_shape, [c.verdict for c in plan.checks]
    (True, [3, 3], ['stretch', 'stretch'])
    """
    if op == "@":
        return matmul_broadcast_plan(values, names, dtype, source, torch_message)
    if op not in ELEMENTWISE_OPS:
        raise ValueError(f"op: expected one of {', '.join(repr(k) for k in [*ELEMENTWISE_OPS, '@'])}, got {op!r}")
    with untraced(), torch.no_grad():
        parsed, shapes, tensors, default, metas = _operands(values, names, dtype)
        checks, conflict = m.check_dims(shapes, names)
        result_shape, message = _torch_broadcast(metas)
        if result_shape is None and torch_message is None:
            message = _real_message(parsed, default, ELEMENTWISE_OPS[op] if op != "broadcast" and len(parsed) == 2
                                    else torch.broadcast_tensors) or message
        ndim = max((len(s) for s in shapes), default=0)
        ok = result_shape is not None
        if ok != (conflict is None):  # never seen; torch wins if it ever happens
            conflict = None if ok else Conflict(0, -ndim, [0, 1], [], f"torch says: {message}", [])
        if conflict is not None:
            conflict.fixes = _fixes(shapes, names, conflict.operands)
        result_dtype = None
        if ok and op != "broadcast" and len(metas) == 2:
            result_dtype = ELEMENTWISE_OPS[op](*metas).dtype  # e.g. int / int is float
        elif ok:
            result_dtype = functools.reduce(torch.promote_types, (t.dtype for t in metas))
        small = (ok and all(t is not None and t.device.type != "meta" for t in tensors)
                 and all(t.numel() <= m.SMALL_NUMEL for t in tensors) and math.prod(result_shape) <= m.SMALL_NUMEL)
        expanded = torch.broadcast_tensors(*tensors) if small else None
        operands = []
        for i, ((shape, t), meta) in enumerate(zip(parsed, metas)):
            es = meta.element_size()
            operands.append(Operand(
                names[i], shape, m.pad_shape(shape, ndim), ndim - len(shape),
                str(meta.dtype).removeprefix("torch."), es, math.prod(shape) * es,
                list(meta.stride()),
                list(meta.expand(result_shape).stride()) if ok else None,
                _values(t) if small else None,
                _values(expanded[i]) if small else None))
        result_values = None
        if small and op != "broadcast" and len(tensors) == 2:
            result_values = _values(ELEMENTWISE_OPS[op](*tensors))
        result_nbytes = None
        if ok and result_dtype is not None:
            result_nbytes = math.prod(result_shape) * torch.empty((), dtype=result_dtype).element_size()
        plan = BroadcastPlan(1, "elementwise", op, operands, ndim, checks, ok, result_shape,
                             str(result_dtype).removeprefix("torch.") if result_dtype is not None else None,
                             result_nbytes, result_values, conflict,
                             torch_message if torch_message is not None else message, None, [], source, None)
        plan.steps = _elementwise_steps(plan)
        return plan


def _elementwise_steps(plan: BroadcastPlan) -> list[Step]:
    shapes = ", ".join(f"{o.name} {shape_tuple_text(o.shape)}" for o in plan.operands)
    steps = [Step("align", "1. Align the shapes on the right", f"{shapes}: dims are matched from the last one "
                  "backwards, so the shapes are written right-aligned.", None)]
    padded = [o for o in plan.operands if o.ghost]
    steps.append(Step("pad", "2. Pad missing leading dims with 1",
                      "; ".join(f"{o.name} {shape_tuple_text(o.shape)} becomes {shape_tuple_text(o.padded)}"
                                for o in padded)
                      if padded else f"every operand already has {plan.ndim} dims", None))
    for check in plan.checks:
        steps.append(Step("compare", f"3. Compare dim {check.from_right}", check.text, check.dim))
        if plan.conflict is not None and check.dim == plan.conflict.dim:
            steps.append(Step("conflict", f"✗ dim {plan.conflict.from_right} cannot broadcast",
                              plan.conflict.text + ". Fixes: " + ("; ".join(plan.conflict.fixes) or "none found"),
                              plan.conflict.dim))
            return steps
    if plan.conflict is not None:
        steps.append(Step("conflict", "✗ the shapes cannot broadcast", plan.conflict.text, plan.conflict.dim))
        return steps
    stretched = [c for c in plan.checks if c.stretched]
    steps.append(Step("stretch", "4. Stretch the size-1 dims",
                      ("; ".join(f"dim {c.from_right}: " + ", ".join(plan.operands[i].name for i in c.stretched)
                                 + f" 1 → {c.size}" for c in stretched)
                       + ". Stretching is stride 0: the same values repeat, and no memory is copied")
                      if stretched else "nothing to stretch: all sizes already match", None))
    bytes_text = ""
    if plan.result_nbytes is not None:
        inputs = " + ".join(m.format_bytes(o.nbytes) for o in plan.operands if o.nbytes is not None)
        bytes_text = f" It allocates {m.format_bytes(plan.result_nbytes)}, from inputs of {inputs}."
    steps.append(Step("result", f"5. Result {shape_tuple_text(plan.result_shape)}",
                      f"the result has shape {shape_tuple_text(plan.result_shape)}." + bytes_text, None))
    return steps


def matmul_broadcast_plan(values: Sequence[object], names: Sequence[str], dtype: Optional[torch.dtype] = None,
                source: Optional[str] = None, torch_message: Optional[str] = None) -> BroadcastPlan:
    """``a @ b``: inner dims, batch dims, result, as torch.matmul decides.

    >>> plan = matmul_broadcast_plan([(2, 3, 4), (2, 4, 5)], ["a", "b"])
    >>> plan.ok, plan.result_shape, plan.matmul.inner
    (True, [2, 3, 5], [4, 4])
    """
    if len(values) != 2:
        raise TypeError(f"matmul takes exactly two operands, got {len(values)}")
    with untraced(), torch.no_grad():
        parsed, shapes, tensors, default, metas = _operands(values, names, dtype)
        mm = m.matmul_plan(shapes[0], shapes[1], names)
        try:
            result = torch.matmul(*metas)
            result_shape, message = list(result.shape), ""
        except RuntimeError as exc:
            result, result_shape, message = None, None, str(exc).splitlines()[0]
            if torch_message is None:
                message = _real_message(parsed, default, torch.matmul) or message
        ok = result_shape is not None
        conflict = None
        if not ok:
            if not mm.inner_ok and mm.inner:
                conflict = Conflict(-1, -1, [0, 1], mm.inner,
                                    f"the inner dims must be equal: {names[0]} has {mm.inner[0]} columns "
                                    f"(its last dim) but {names[1]} has {mm.inner[1]} rows "
                                    f"({'its only dim' if len(shapes[1]) == 1 else 'its second-to-last dim'})", [])
            else:
                bad = next((c for c in mm.batch_checks if c.verdict == "conflict"), None)
                conflict = Conflict(bad.dim if bad else 0, bad.from_right if bad else 0, [0, 1],
                                    [s for s in (bad.sizes if bad else []) if s is not None],
                                    (f"the batch dims must broadcast: {bad.text}" if bad
                                     else f"torch says: {message}"), [])
            conflict.fixes = _fixes(shapes, names, [0, 1], matmul=True)
        small = ok and all(t is not None and t.device.type != "meta" and t.numel() <= m.SMALL_NUMEL for t in tensors) \
            and math.prod(result_shape) <= m.SMALL_NUMEL
        operands = []
        for i, ((shape, t), meta) in enumerate(zip(parsed, metas)):
            es = meta.element_size()
            operands.append(Operand(names[i], shape, shape, 0, str(meta.dtype).removeprefix("torch."), es,
                                    math.prod(shape) * es, list(meta.stride()), None,
                                    _values(t) if small else None, None))
        result_nbytes = math.prod(result_shape) * result.element_size() if ok else None
        plan = BroadcastPlan(1, "matmul", "@", operands, max(len(s) for s in shapes), mm.batch_checks, ok,
                             result_shape, str(result.dtype).removeprefix("torch.") if ok else None, result_nbytes,
                             _values(torch.matmul(*tensors)) if small else None, conflict,
                             torch_message if torch_message is not None else message, mm, [], source, None)
        plan.steps = _matmul_steps(plan)
        return plan


def _matmul_steps(plan: BroadcastPlan) -> list[Step]:
    mm, (a, b) = plan.matmul, plan.operands
    steps = [Step("align", "1. Split each shape into batch dims and a matrix",
                  f"{a.name} {shape_tuple_text(a.shape)}: batch {shape_tuple_text(mm.a_batch)}, "
                  f"matrix {shape_tuple_text(mm.a_matrix)}; "
                  f"{b.name} {shape_tuple_text(b.shape)}: batch {shape_tuple_text(mm.b_batch)}, "
                  f"matrix {shape_tuple_text(mm.b_matrix)}"
                  + ("; " + "; ".join(mm.promoted) if mm.promoted else ""), None)]
    if not mm.inner:
        steps.append(Step("conflict", "✗ matmul needs 1-D or larger operands", "; ".join(mm.promoted), None))
        return steps
    steps.append(Step("inner", "2. The inner dims must match",
                      f"{a.name}'s last dim {mm.inner[0]} against {b.name}'s rows {mm.inner[1]}: "
                      + ("equal, so each output element sums over them" if mm.inner_ok else "they differ"), None))
    if not mm.inner_ok:
        steps.append(Step("conflict", "✗ the inner dims differ", plan.conflict.text + ". Fixes: "
                          + ("; ".join(plan.conflict.fixes) or "none found"), -1))
        return steps
    steps.append(Step("batch", "3. The batch dims broadcast",
                      "; ".join(f"dim {c.from_right}: {c.text}" for c in mm.batch_checks) or "no batch dims", None))
    if not plan.ok:
        steps.append(Step("conflict", "✗ the batch dims cannot broadcast", plan.conflict.text + ". Fixes: "
                          + ("; ".join(plan.conflict.fixes) or "none found"), plan.conflict.dim))
        return steps
    bytes_text = f" It allocates {m.format_bytes(plan.result_nbytes)}." if plan.result_nbytes is not None else ""
    steps.append(Step("result", f"4. Result {shape_tuple_text(plan.result_shape)}",
                      f"batch {shape_tuple_text(mm.batch_shape or [])} + ({mm.a_matrix[0]}, {mm.b_matrix[1]})"
                      + (", with the promoted 1-D dims dropped" if mm.promoted else "")
                      + f" = {shape_tuple_text(plan.result_shape)}." + bytes_text, None))
    return steps


def describe_failed_op(func_name: str, args: Sequence[object], kwargs: dict, message: str) -> Optional[tuple]:
    """What to remember about a failed torch op: shapes and dtypes only, never the tensors.

    Returns ``(op, [(shape, dtype), ...], message, names)`` when the error is a broadcast or matmul
    shape error we can explain, else None.
    """
    op = OP_SYMBOLS.get(func_name)
    if op is None:
        return None
    pattern = MATMUL_ERROR if op == "@" else BROADCAST_ERROR
    if not pattern.search(message):
        return None
    from .source import user_names

    operands, values = [], []
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, torch.Tensor):
            operands.append((list(value.shape), value.dtype))
            values.append(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            operands.append(([], torch.get_default_dtype() if isinstance(value, float) else torch.int64))
            values.append(value)
    if len(operands) < 2:
        return None
    keep = 2 if op == "@" else 3
    found = user_names(values[:keep], 3)
    names = [n or default for n, default in zip(found, ["a", "b", "c"])]
    if len(set(names)) < len(names):  # e.g. x + x: keep torch's a, b
        names = ["a", "b", "c"][: len(names)]
    operands = operands[:keep]
    if func_name == "linear":  # the weight is (out, in): the product uses its transpose
        (w_shape, w_dtype) = operands[1]
        operands[1] = (w_shape[::-1] if len(w_shape) == 2 else w_shape, w_dtype)
        names = [names[0] if found[0] else "input", "weight.T"]
    return op, operands, message, names


def plan_failed_op(record: tuple, source: Optional[str]) -> BroadcastPlan:
    """The plan for a remembered failed op, built from meta tensors of its real shapes."""
    op, operands, message, names = record
    values = [torch.empty(shape, dtype=dtype, device="meta") for shape, dtype in operands]
    plan = plan_broadcast(values, names, op if op in ELEMENTWISE_OPS or op == "@" else "broadcast",
                          source=source, torch_message=message)
    return plan
