"""Hypothesis fuzz of the stride model against torch as the oracle.

Each case builds a random view chain on a storage filled with distinct values (its own element
index), draws it, and checks every logical element's storage index, the shares/copy verdicts, and
the .view/.reshape verdicts against what torch does for real.
"""

from __future__ import annotations

import math

import torch
from hypothesis import HealthCheck, event, given, settings, strategies as st

from forgeviz._capture.strides import describe, try_layout
from forgeviz.model.strides import addresses

CASES = int(__import__("os").environ.get("FV_FUZZ_CASES", 10_000))
DTYPES = [torch.int64, torch.float32, torch.float16, torch.bfloat16, torch.uint8, torch.bool,
          torch.complex64, torch.float64, torch.int32]


@st.composite
def shapes(draw, max_dims=6, max_numel=720):
    dims = draw(st.integers(0, max_dims))
    shape = []
    for _ in range(dims):
        shape.append(draw(st.integers(0, 5)))
        if math.prod(shape) > max_numel:
            shape[-1] = 1
    return shape


def _apply(draw, t: torch.Tensor) -> tuple[torch.Tensor, str]:
    """One random view op that torch accepts on ``t`` (falls back to the identity view)."""
    # Transposes, permutes and steps come twice: they make the non-contiguous layouts that matter.
    op = draw(st.sampled_from(["transpose", "transpose", "permute", "permute", "slice", "slice", "narrow",
                               "unsqueeze", "expand", "view", "reshape", "as_strided", "diagonal", "unfold"]))
    nd = t.dim()
    try:
        if op == "transpose" and nd >= 2:
            a, b = draw(st.integers(0, nd - 1)), draw(st.integers(0, nd - 1))
            return t.transpose(a, b), f"transpose({a}, {b})"
        if op == "permute" and nd >= 1:
            order = draw(st.permutations(range(nd)))
            return t.permute(*order), f"permute{tuple(order)}"
        if op == "slice" and nd >= 1:
            d = draw(st.integers(0, nd - 1))
            n = t.shape[d]
            start = draw(st.integers(0, n))
            stop = draw(st.integers(start, n))
            step = draw(st.integers(1, 3))
            index = [slice(None)] * nd
            index[d] = slice(start, stop, step)
            return t[tuple(index)], f"[dim {d}: {start}:{stop}:{step}]"
        if op == "narrow" and nd >= 1:
            d = draw(st.integers(0, nd - 1))
            start = draw(st.integers(0, t.shape[d]))
            length = draw(st.integers(0, t.shape[d] - start))
            return t.narrow(d, start, length), f"narrow({d}, {start}, {length})"
        if op == "unsqueeze" and nd < 6:
            d = draw(st.integers(0, nd))
            return t.unsqueeze(d), f"unsqueeze({d})"
        if op == "expand" and nd >= 1:
            sizes = [draw(st.integers(0, 3)) if n == 1 else n for n in t.shape]
            lead = draw(st.lists(st.integers(1, 3), max_size=max(0, min(2, 6 - nd))))
            return t.expand(*lead, *sizes), f"expand{tuple(lead + sizes)}"
        if op in ("view", "reshape"):
            new = _factor(draw, t.numel())
            return (t.view(new) if op == "view" else t.reshape(new)), f"{op}{tuple(new)}"
        if op == "as_strided":
            shape = draw(shapes(max_dims=3, max_numel=60))
            stride = [draw(st.integers(0, 6)) for _ in shape]
            offset = draw(st.integers(0, 4))
            return t.as_strided(shape, stride, t.storage_offset() + offset), f"as_strided({shape}, {stride}, +{offset})"
        if op == "diagonal" and nd >= 2:
            a, b = draw(st.permutations(range(nd)))[:2]
            off = draw(st.integers(-2, 2))
            return t.diagonal(off, a, b), f"diagonal({off}, {a}, {b})"
        if op == "unfold" and nd >= 1:
            d = draw(st.integers(0, nd - 1))
            size = draw(st.integers(0, t.shape[d]))
            step = draw(st.integers(1, 3))
            return t.unfold(d, size, step), f"unfold({d}, {size}, {step})"
    except RuntimeError:
        pass
    return t[...], "[...]"


def _factor(draw, numel: int) -> list[int]:
    """A random shape with this many elements (with 1s sprinkled in)."""
    if numel == 0:
        return draw(st.sampled_from([[0], [0, 3], [2, 0], [0, 1, 0]]))
    out, rest = [], numel
    while rest > 1 and len(out) < 5:
        f = draw(st.sampled_from([d for d in range(2, rest + 1) if rest % d == 0]))
        out.append(f)
        rest //= f
    if rest > 1:
        out.append(rest)
    for _ in range(draw(st.integers(0, 1))):
        out.insert(draw(st.integers(0, len(out))), 1)
    return out


@st.composite
def view_chains(draw):
    shape = draw(shapes())
    dtype = draw(st.sampled_from(DTYPES))
    steps = draw(st.sampled_from([0, 1, 2, 2, 3, 3, 4, 4]))
    ops = []
    index_base = torch.arange(max(1, math.prod(shape)), dtype=torch.int64)[: math.prod(shape)].reshape(shape)
    view = index_base
    for _ in range(steps):
        view, text = _apply(draw, view)
        ops.append(text)
    new_shape = _factor(draw, view.numel()) if draw(st.booleans()) else [-1]
    return shape, dtype, view, ops, new_shape


def _fill_with_indices(view: torch.Tensor) -> None:
    n = view.untyped_storage().nbytes() // 8
    torch.empty(0, dtype=torch.int64).set_(view.untyped_storage(), 0, (n,), (1,)).copy_(torch.arange(n))


def _twin(view: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The same layout over a storage of another dtype."""
    base = torch.zeros(view.untyped_storage().nbytes() // 8, dtype=dtype)
    return base.as_strided(view.shape, view.stride(), view.storage_offset())


@settings(max_examples=CASES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(view_chains())
def test_model_addresses_and_verdicts_match_torch(case):
    shape, dtype, view, ops, new_shape = case
    base = view._base if view._base is not None else view
    copy = view.clone()
    described = describe([view, base, copy], ["v", "base", "copy"]).layout
    v, b, c = described.tensors

    # Every logical element reads the storage element the model says: write each storage
    # element's own index into it, so reading through the view returns the address torch used.
    _fill_with_indices(view)
    assert v.stride == list(view.stride()) and v.storage_offset == view.storage_offset(), ops
    assert addresses(v.shape, v.stride, v.storage_offset) == view.reshape(-1).tolist(), ops
    assert v.is_contiguous == view.is_contiguous(), ops

    # Shares / copy verdicts equal data_ptr comparisons.
    same = view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert (v.strip == b.strip) == same
    copied = copy.untyped_storage().data_ptr() == view.untyped_storage().data_ptr()
    assert (c.strip == v.strip) == copied and described.strips[c.strip].copy == (not copied)

    # .view / .reshape / .contiguous verdicts equal what torch does on the real tensor.
    try:
        viewed = view.view(new_shape)
        works = True
    except RuntimeError:
        works = False
    event(f"view {'works' if works else 'fails'}; {len(ops)} ops; "
          f"{'zero stride' if 0 in v.stride else 'no zero stride'}")
    verdict = try_layout(v.shape, v.stride, "view", new_shape, 8)
    assert verdict.works == works, (ops, new_shape)
    if works:
        assert verdict.result_stride == list(viewed.stride()), (ops, new_shape)
    reshaped = view.reshape(new_shape)
    shares = reshaped._is_view() and reshaped.untyped_storage().data_ptr() == view.untyped_storage().data_ptr()
    r = try_layout(v.shape, v.stride, "reshape", new_shape, 8)
    assert r.copies == (not shares), (ops, new_shape)
    assert r.bytes == (reshaped.numel() * 8 if not shares else 0)
    contiguous = view.contiguous()
    cv = v.verdicts[2]
    assert cv.copies == (contiguous is not view) and cv.bytes == (view.numel() * 8 if cv.copies else 0)

    # Another dtype over the same layout: element size and strides from torch, same addresses.
    twin = _twin(view, dtype)
    t = describe([twin], ["twin"]).layout.tensors[0]
    assert t.element_size == twin.element_size() and t.stride == list(twin.stride())
    assert addresses(t.shape, t.stride, t.storage_offset) == view.reshape(-1).tolist()
