"""The broadcasting model: how shapes align, pad, stretch and combine. Plain data, no torch.

These dataclasses are the ONE definition of the wire format of the broadcast view
(``src/model/wire.ts`` is generated from them by ``forgeviz.model.tsgen``).

Dims are numbered in the result, left to right (0 .. ndim-1); ``from_right`` is the same dim
counted from the right (-1 is the last), which is how the rule reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional, Sequence

# Values are shown when every operand and the result have at most this many elements.
SMALL_NUMEL = 64


@dataclass
class Operand:
    """One input, as given (a tensor, or just a shape)."""

    name: str
    shape: list[int]
    padded: list[int]  # left-padded with 1s to the result's rank
    ghost: int  # how many of ``padded``'s leading dims are padding (drawn as ghost dims)
    dtype: Optional[str]  # None when only a shape was given
    element_size: Optional[int]
    nbytes: Optional[int]  # numel · element_size
    stride: Optional[list[int]]
    expanded_stride: Optional[list[int]]  # after expand to the result shape: 0 on stretched dims
    values: Optional[list[str]]  # row-major, small tensors only
    expanded_values: Optional[list[str]]  # row-major over the result shape (torch.broadcast_tensors)


@dataclass
class DimCheck:
    """Step 3 for one dim: equal, a size 1 that stretches, or a conflict."""

    dim: int
    from_right: int
    sizes: list[Optional[int]]  # per operand; None where the operand has no such dim (padded)
    verdict: Literal["equal", "stretch", "conflict"]
    size: Optional[int]  # the result's size, None on a conflict
    stretched: list[int]  # operands whose size-1 (or padded) dim stretches to ``size``
    text: str


@dataclass
class Conflict:
    """Why broadcasting fails, in plain words, with fixes torch accepts."""

    dim: int
    from_right: int
    operands: list[int]  # the two operands whose sizes clash
    sizes: list[int]
    text: str
    fixes: list[str]  # each checked with torch.broadcast_shapes before it is offered


@dataclass
class Step:
    """One frame of the animation."""

    kind: Literal["align", "pad", "compare", "stretch", "result", "conflict", "inner", "batch"]
    title: str
    text: str
    dim: Optional[int]  # the dim this step is about, for per-dim compare steps


@dataclass
class MatmulPlan:
    """``a @ b``: the inner dims that must match, the batch dims that broadcast."""

    a_shape: list[int]
    b_shape: list[int]
    a_matrix: list[int]  # (n, k) after a 1-D a is promoted to (1, k)
    b_matrix: list[int]  # (k, m) after a 1-D b is promoted to (k, 1)
    promoted: list[str]  # what 1-D promotion did, in words
    inner: list[int]  # [k of a, k of b]
    inner_ok: bool
    a_batch: list[int]
    b_batch: list[int]
    batch_checks: list[DimCheck]
    batch_shape: Optional[list[int]]
    result_shape: Optional[list[int]]


@dataclass
class BroadcastPlan:
    """A broadcast (or matmul) of some operands, step by step, with torch's verdict."""

    version: int
    kind: Literal["elementwise", "matmul"]
    op: str  # e.g. "+", "broadcast", "@"
    operands: list[Operand]
    ndim: int
    checks: list[DimCheck]  # right to left, the order the rule reads
    ok: bool
    result_shape: Optional[list[int]]
    result_dtype: Optional[str]
    result_nbytes: Optional[int]
    result_values: Optional[list[str]]  # the op's result, small tensors only
    conflict: Optional[Conflict]
    torch_message: str  # torch's own error message, verbatim, when it fails
    matmul: Optional[MatmulPlan]
    steps: list[Step]
    source: Optional[str]  # where it came from, e.g. "cell [5], line 2: c = a + b"
    message: Optional[str]


# Messages between the browser and the kernel.
@dataclass
class HtmlRequest:
    """Asks for the whole animation as a self-contained offline HTML page."""

    type: Literal["html"]
    request_id: int
    theme: Literal["light", "dark"]


@dataclass
class HtmlReply:
    """The HTML page, ready to download."""

    type: Literal["html"]
    request_id: int
    html: str


WIRE_TYPES = [Operand, DimCheck, Conflict, Step, MatmulPlan, BroadcastPlan, HtmlRequest, HtmlReply]


def pad_shape(shape: Sequence[int], ndim: int) -> list[int]:
    """Left-pad with 1s to ``ndim`` dims.

    >>> pad_shape([4], 3)
    [1, 1, 4]
    """
    return [1] * (ndim - len(shape)) + list(shape)


def check_dims(shapes: Sequence[Sequence[int]], names: Sequence[str]) -> tuple[list[DimCheck], Optional[Conflict]]:
    """Steps 2–3 of the rule for every dim, right to left, and the first conflict.

    torch folds the shapes pairwise, left to right, and within a pair reads dims right to
    left; the conflict reported is the first one that fold meets.

    >>> checks, conflict = check_dims([[3, 4], [3]], ["a", "b"])
    >>> [c.verdict for c in checks], conflict.dim, conflict.sizes
    (['conflict', 'stretch'], 1, [4, 3])
    """
    ndim = max((len(s) for s in shapes), default=0)
    padded = [pad_shape(s, ndim) for s in shapes]
    checks = []
    for dim in range(ndim - 1, -1, -1):
        sizes = [p[dim] if dim >= ndim - len(s) else None for p, s in zip(padded, shapes)]
        real = [p[dim] for p in padded]
        big = {n for n in real if n != 1}
        if len(big) > 1:
            verdict, size, stretched = "conflict", None, []
            text = ("sizes " + ", ".join(f"{names[i]}: {n}" for i, n in enumerate(real) if n != 1)
                    + " differ and none of them is 1, so they cannot stretch to match")
        else:
            size = big.pop() if big else 1
            stretched = [i for i, n in enumerate(real) if n == 1 and size != 1]
            verdict = "stretch" if stretched else "equal"
            if stretched:
                text = (", ".join(names[i] for i in stretched) + f" {'has' if len(stretched) == 1 else 'have'} "
                        f"size 1 here and stretches to {size} (stride 0: the same values repeat, no copy)")
            else:
                text = f"all sizes are {size}"
        checks.append(DimCheck(dim, dim - ndim, sizes, verdict, size, stretched, text))
    conflict = _first_conflict(shapes, names, ndim)
    return checks, conflict


def _first_conflict(shapes, names, ndim) -> Optional[Conflict]:
    """The conflict torch reports: fold left to right, each pair read right to left."""
    if not shapes:
        return None
    acc = list(shapes[0])
    owner = [0] * len(acc)  # which operand set each dim of the running shape
    for j in range(1, len(shapes)):
        other = list(shapes[j])
        n = max(len(acc), len(other))
        a, b = pad_shape(acc, n), pad_shape(other, n)
        own = [0] * (n - len(owner)) + owner
        for dim in range(n - 1, -1, -1):
            if a[dim] != b[dim] and a[dim] != 1 and b[dim] != 1:
                i = own[dim]
                result_dim = dim + (ndim - n)
                return Conflict(result_dim, result_dim - ndim, [i, j], [a[dim], b[dim]],
                                f"at dim {result_dim - ndim} (dim {result_dim} of the result) {names[i]} has "
                                f"size {a[dim]} and {names[j]} has size {b[dim]}: they differ and neither is 1, "
                                "so neither can stretch", [])
        acc = [x if y == 1 else y for x, y in zip(a, b)]
        owner = [own[d] if b[d] == 1 or a[d] == b[d] else j for d in range(n)]
    return None


def broadcast_shape(shapes: Sequence[Sequence[int]]) -> Optional[list[int]]:
    """The result shape, or None when the shapes do not broadcast.

    >>> broadcast_shape([[3, 1], [1, 3]]), broadcast_shape([[3, 4], [3]])
    ([3, 3], None)
    """
    checks, conflict = check_dims(shapes, [f"#{i}" for i in range(len(shapes))])
    if conflict is not None or any(c.verdict == "conflict" for c in checks):
        return None
    return [c.size for c in reversed(checks)]


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def format_bytes(n: int) -> str:
    """Bytes in binary units, exact when they divide.

    >>> format_bytes(32 * 2**20), format_bytes(4096), format_bytes(100)
    ('32 MiB', '4 KiB', '100 B')
    """
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if n % size == 0 else f"{value:.2f} {unit}"
    return f"{n} B"


def matmul_plan(a: Sequence[int], b: Sequence[int], names: Sequence[str] = ("a", "b")) -> MatmulPlan:
    """The matmul rule: promote 1-D operands, match the inner dims, broadcast the batch dims.

    >>> p = matmul_plan([2, 3, 4], [4, 5])
    >>> p.inner, p.inner_ok, p.batch_shape, p.result_shape
    ([4, 4], True, [2], [2, 3, 5])
    >>> matmul_plan([3, 4], [5, 6]).result_shape is None
    True
    """
    a, b = list(a), list(b)
    promoted = []
    if not a or not b:
        return MatmulPlan(a, b, [], [], ["matmul needs both operands to be at least 1-D"], [], False, [], [], [],
                          None, None)
    am = [1, a[0]] if len(a) == 1 else a[-2:]
    bm = [b[0], 1] if len(b) == 1 else b[-2:]
    if len(a) == 1:
        promoted.append(f"{names[0]} is 1-D: treated as a row (1, {a[0]}), and that 1 is dropped from the result")
    if len(b) == 1:
        promoted.append(f"{names[1]} is 1-D: treated as a column ({b[0]}, 1), and that 1 is dropped from the result")
    a_batch, b_batch = a[:-2], b[:-2]
    inner = [am[1], bm[0]]
    inner_ok = inner[0] == inner[1]
    checks, conflict = check_dims([a_batch, b_batch], names)
    batch = None if conflict else [c.size for c in reversed(checks)]
    result = None
    if inner_ok and batch is not None:
        result = batch + ([am[0]] if len(a) > 1 else []) + ([bm[1]] if len(b) > 1 else [])
    return MatmulPlan(a, b, am, bm, promoted, inner, inner_ok, a_batch, b_batch, checks, batch, result)
