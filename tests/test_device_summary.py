"""Gradient summaries on the gradient's device (device_summary.py), with torch as the oracle.

``FORGEVIZ_SUMMARIES=device`` runs the accelerator path on CPU tensors; the Triton kernel runs under
``TRITON_INTERPRET=1`` where Triton is installed (the ``test`` extra installs it).
"""

from __future__ import annotations

import importlib.util
import math
import os
import weakref

import pytest
import torch
from op_count import HOST_READS, backward_ops
from test_graph import request

from forgeviz._capture.device_summary import BINS, DeviceSummaries, edges
from forgeviz._capture.grads import BackwardRecorder, GradStore
from forgeviz._capture.session import get_session
from forgeviz._capture.summary import wire_float
from forgeviz.model.graph import TensorSummary

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # read when the kernel is defined: before its import

HAS_TRITON = importlib.util.find_spec("triton") is not None
PATHS = [pytest.param(False, id="torch-ops"),
         pytest.param(True, id="triton", marks=pytest.mark.skipif(not HAS_TRITON, reason="triton not installed"))]
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def cases(dtype, device="cpu"):
    """Gradients with the awkward values: NaN, ±inf, zeros, bin edges, non-contiguous, empty, small. On
    ``device``, their views taken there (``Tensor.to`` would make a sliced view contiguous)."""
    g = torch.randn(70, 33, generator=torch.Generator().manual_seed(0)).to(dtype).to(device) * 30
    g[0, :5] = 0
    g[1, :4] = torch.tensor([2.0 ** -20, -(2.0 ** -20), 2.0 ** 6, -(2.0 ** 6)])  # on bin edges, both signs
    g[2, :3] = torch.tensor([1e-30, 300.0, -1e4 if dtype != torch.float16 else -6e4])
    bad = g.clone()
    bad[3, :3] = torch.tensor([math.nan, math.inf, -math.inf])
    only_bad = torch.tensor([math.nan, math.inf] * 40, dtype=dtype, device=device)
    return {"plain": g, "nonfinite": bad, "transposed": bad.t(), "sliced": g[::2, 1::3],
            "zeros": torch.zeros(100, dtype=dtype, device=device),
            "empty": torch.zeros(0, 3, dtype=dtype, device=device),
            "small": g[:3, :4], "small-sliced": g[:8:2, 1:9:3], "no-finite": only_bad,
            "small-nonfinite": bad[2:4, :4]}


def expected(t: torch.Tensor) -> dict:
    x = t.double().reshape(-1)
    finite = x[torch.isfinite(x)]
    out = {"nan": int(torch.isnan(x).sum()), "inf": int(torch.isinf(x).sum()),
           "norm": float(torch.linalg.vector_norm(x)), "mean": float(x.mean()) if x.numel() else None}
    if finite.numel():
        out["min"], out["max"] = float(finite.min()), float(finite.max())
        out["hist"] = [int(c) for c in torch.histogram(finite, torch.tensor(edges(t.dtype), dtype=torch.float64)).hist]
    return out


def close(got, want) -> bool:
    if isinstance(got, str) or isinstance(want, float) and not math.isfinite(want):
        return str(got) == {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[str(want)]
    return math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-300)  # float64 sums of exact float64 values


@pytest.mark.parametrize("fill", ["native", "python"])
@pytest.mark.parametrize("triton", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_figures_equal_torch(dtype, triton, fill, monkeypatch):
    """Every figure equals torch's, filled from the read-back rows by native/device_path.cpp (rows with no side
    buffer: the batches' and Triton's) or by numpy (_fill_rows: without the library, and the per-gradient torch
    path's rows, float64's and the large ones')."""
    from forgeviz._capture import device_summary, native
    if fill == "native":
        assert native.hooks() is not None  # the path under test
        filled = []
        real = native.hooks().fill_device_rows
        monkeypatch.setattr(device_summary, "_native_fill", lambda: lambda *args: filled.append(1) or real(*args))
    else:
        monkeypatch.setattr(device_summary, "_native_fill", lambda: None)
    pending = DeviceSummaries(triton=triton)
    assert (pending._triton is not None) == triton
    # Compiled Triton runs on a GPU; interpreted (no GPU here) on CPU tensors.
    device = "cuda" if triton and torch.cuda.is_available() else "cpu"
    grads = cases(dtype, device)
    summaries = {name: pending.add(g) for name, g in grads.items()}
    assert all(s.norm is None for s in summaries.values())  # nothing read back before the flush
    # The kernels take every gradient whose memory they can read flat: not the sliced nor the small strided;
    # these, each smaller than BATCH_NUMEL, wait for one launch of the multi-tensor kernel (the transposed
    # one is the nonfinite one's memory: its summary shares those numbers)
    assert sum(len(items) for items in pending._dense.values()) == (4 if triton else 0)
    pending.flush()
    for name, g in grads.items():
        s, want = summaries[name], expected(g.cpu())
        assert (s.shape, s.dtype, s.numel) == (list(g.shape), str(dtype)[6:], g.numel()), name
        if g.numel() == 0:
            assert s.norm is None and s.histogram is None, name
            continue
        assert (s.nan_count, s.inf_count) == (want["nan"], want["inf"]), name
        assert close(s.norm, want["norm"]) and close(s.mean, want["mean"]), name
        if "min" in want:
            assert (s.min, s.max) == (want["min"], want["max"]), name  # exact: min and max are values
        else:
            assert s.min == s.max == "NaN" and s.histogram is None, name
        if g.numel() <= 64:  # (NaN and ±inf as the wire has them)
            assert s.values == [wire_float(v) for v in g.reshape(-1).double().tolist()], name
        elif "hist" in want:
            assert s.histogram.counts == want["hist"] and len(s.histogram.counts) == BINS, name
            assert s.histogram.edges == edges(dtype), name
    if fill == "native":  # (float64's rows are all the per-gradient path's: numpy fills them)
        assert filled if dtype != torch.float64 else not filled


def test_the_native_fill_equals_numpy_s_and_refuses_rows_that_do_not_fit():
    """native/device_path.cpp fills the same Python objects as _fill_rows from the same rows (floats where
    finite, wire strings where not, counts, values, histograms with the dtype's edges), and bad input is a
    clear error that changes nothing."""
    import numpy as np

    from forgeviz._capture import native
    from forgeviz._capture.device_summary import _LAYOUT, _VALUES, _WIRE_EDGES, ROW, _fill_rows
    from forgeviz.model.graph import Histogram

    hooks = native.hooks()
    assert hooks is not None  # the path under test
    pending = DeviceSummaries(triton=False)
    grads = [torch.tensor([3.0, -4.0] * 40), torch.tensor([1.0, math.inf, -2.0]), torch.zeros(100),
             torch.tensor([math.nan] * 70), torch.tensor([math.inf, -math.inf] * 50), torch.randn(9, 11) * 1e3,
             torch.tensor([2.0 ** -30, -(2.0 ** 9), 0.0] * 30, dtype=torch.bfloat16)]
    made = [pending.add(g) for g in grads]
    pending._reduce_batches()
    items = [(item[0], item[1], item[2], None) for item in pending._rows]
    assert len(items) == len(grads) and all(item[3] is None for item in pending._rows)
    rows = items[0][1].rows[:len(items)].numpy().copy()
    twin_of = {id(s): TensorSummary(s.shape, s.dtype, s.device, s.numel) for s, *_ in items}
    twin = [(twin_of[id(s)], None, index, None) for s, _, index, _ in items]
    fresh = [twin_of[id(s)] for s in made]  # (in the gradients' order: a batch puts the small ones first)
    want = _fill_rows(items, rows, {})
    assert hooks.fill_device_rows(twin, rows, _LAYOUT, Histogram, _WIRE_EDGES) is want is True
    for s, f in zip(made, fresh):
        assert repr(f) == repr(s)  # every attribute, its type too (a float is never an int, nor a string)
        assert [type(v) for v in (f.min, f.max, f.mean, f.norm)] == [type(v) for v in (s.min, s.max, s.mean, s.norm)]
    assert fresh[1].values == [1.0, "Infinity", -2.0] and fresh[3].min == "NaN" and fresh[3].histogram is None
    assert fresh[0].histogram.edges is _WIRE_EDGES["float32"] and sum(fresh[0].histogram.counts) == 80
    finite_only = [item for item in twin if item[0] in (fresh[0], fresh[2], fresh[5])]
    assert hooks.fill_device_rows(finite_only, rows, _LAYOUT, Histogram, _WIRE_EDGES) is False
    untouched = TensorSummary([2], "float32", "cpu", 2)
    bad = [([(untouched, None, len(items), None)], rows, _LAYOUT, Histogram, _WIRE_EDGES, IndexError, "row 7 of 7"),
           ([(untouched, None, 0, None)], rows.astype(np.float32), _LAYOUT, Histogram, _WIRE_EDGES, TypeError,
            "float64 rows"),
           ([(untouched, None, 0, None)], rows[:, :ROW - 1].copy(), _LAYOUT, Histogram, _WIRE_EDGES, TypeError,
            "float64 rows"),
           ([(untouched, None, 0, None)], rows, (ROW, 4, ROW, 64), Histogram, _WIRE_EDGES, ValueError, "layout"),
           ([(untouched,)], rows, _LAYOUT, Histogram, _WIRE_EDGES, TypeError, "(summary, buffer, row index, side)"),
           ([(untouched, None, 0, None)], rows, _LAYOUT, Histogram, [], TypeError, "wire_edges must be a dict")]
    for args in bad:
        with pytest.raises(args[-2], match=args[-1].replace("(", r"\(").replace(")", r"\)")):
            hooks.fill_device_rows(*args[:-2])
    assert untouched.norm is None and untouched.min is None  # nothing half-filled
    assert _VALUES < ROW


@pytest.mark.skipif(not HAS_TRITON, reason="triton not installed")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_a_large_gradient_shared_by_programs_equals_torch(dtype):
    """A gradient past BATCH_NUMEL takes a launch of its own, its blocks shared by the kernel's programs,
    several blocks each, each program adding its figures into the row once: every value in min, max, norm,
    mean, NaN and inf, a spread sample of its blocks in the histogram."""
    import forgeviz._capture.device_summary as ds
    from forgeviz._capture import device_summary_triton as kernels

    device = "cuda" if torch.cuda.is_available() else "cpu"
    n = max(ds.BATCH_NUMEL + 1, kernels._BLOCK * kernels._PROGRAMS * 2 + 77)  # 3 blocks for some programs
    clean = torch.randn(n, generator=torch.Generator().manual_seed(1)).to(dtype).to(device) * 1e3
    clean[7:100] = 0
    bad = clean.clone()
    bad[[5, n // 2, n - 1]] = torch.tensor([math.nan, math.inf, -math.inf], dtype=dtype, device=device)
    pending = DeviceSummaries(triton=True)
    summaries = [pending.add(g) for g in (clean, bad)]
    assert len(pending._rows) == 2 and not pending._dense  # launched at once, not held
    pending.flush()
    stride = kernels.binning_stride(n)
    assert stride > 1
    for g, s in zip((clean, bad), summaries):
        want = expected(g.cpu())
        assert (s.nan_count, s.inf_count, s.min, s.max) == (want["nan"], want["inf"], want["min"], want["max"])
        assert close(s.norm, want["norm"]) and close(s.mean, want["mean"])
        # the histogram: of the blocks 0, stride, 2 * stride, ... (at most BINNED_BLOCKS), every value of each
        binned = g.cpu().reshape(-1)[: -(-n // kernels._BLOCK) * kernels._BLOCK]
        binned = torch.cat([binned[b * kernels._BLOCK:(b + 1) * kernels._BLOCK]
                            for b in range(0, -(-n // kernels._BLOCK), stride)])
        assert s.histogram.counts == expected(binned)["hist"]
        assert sum(s.histogram.counts) <= kernels.BINNED_BLOCKS * kernels._BLOCK


def test_a_batch_of_mixed_gradients_equals_torch(monkeypatch):
    """One batch of every dtype but float64, sizes either side of SMALL_NUMEL and BATCH_NUMEL, NaN/inf,
    empties, strided, the same tensor twice; and a batch reduced early by its cap."""
    import forgeviz._capture.device_summary as ds
    monkeypatch.setattr(ds, "BATCH_ELEMENTS", 5000)  # a batch reduced mid-way too
    grads = []
    for dtype in DTYPES:
        grads += [g for name, g in cases(dtype).items()]
    big = torch.randn(ds.BATCH_NUMEL + 1)  # its own ops
    big[7] = math.nan
    grads += [big, torch.randn(ds.BATCH_NUMEL)[::2]]
    pending = DeviceSummaries(triton=False)
    summaries = [pending.add(g) for g in grads]
    assert pending.add(grads[0]) is summaries[0] and pending.held >= 5000
    pending.flush()
    for g, s in zip(grads, summaries):
        if g.numel() == 0:
            assert s.norm is None
            continue
        want = expected(g)
        assert (s.nan_count, s.inf_count) == (want["nan"], want["inf"])
        assert close(s.norm, want["norm"]) and close(s.mean, want["mean"])
        if "min" in want:
            assert (s.min, s.max) == (want["min"], want["max"])
        if g.numel() <= 64:
            assert s.values == [wire_float(v) for v in g.reshape(-1).double().tolist()]
        elif "hist" in want:
            assert s.histogram.counts == want["hist"]


@pytest.mark.parametrize("triton", PATHS)
def test_a_gradient_seen_twice_is_summarised_once(triton):
    """The same gradient, or another view of every element of its memory (a reshape, a transpose: what
    ViewBackward0 and TBackward0 pass on), is summarised once; each view's summary has its own shape."""
    device = "cuda" if triton and torch.cuda.is_available() else "cpu"
    pending = DeviceSummaries(triton=triton)
    g, big = torch.randn(48, device=device), torch.randn(600, 500, device=device)  # g: small (SMALL_NUMEL)
    big[3, 4] = math.nan
    first, large = pending.add(g), pending.add(big)
    assert pending.add(g) is first and pending.add(g.view(48)) is first  # same memory, shape, strides
    views = {"reshaped": (g.view(6, 8), pending.add(g.view(6, 8))),
             "transposed": (big.t(), pending.add(big.t())), "flat": (big.view(-1), pending.add(big.view(-1)))}
    # not shared: part of the memory; a small view whose values' row-major order is not the memory's
    half, small_transposed = big[:300], g.view(6, 8).t()
    others = {"half": (half, pending.add(half)), "small-transposed": (small_transposed, pending.add(small_transposed))}
    assert pending.summarised == 4  # g, big, half, small-transposed
    pending.flush()
    for name, (view, s) in {**views, **others, "first": (g, first), "large": (big, large)}.items():
        want = expected(view.cpu())
        assert s.shape == list(view.shape) and s.numel == view.numel(), name
        assert close(s.norm, want["norm"]), name
        assert (s.min, s.max, s.nan_count) == (want["min"], want["max"], want["nan"]), name
        if view.numel() <= 64:
            assert s.values == view.reshape(-1).double().tolist(), name
        elif not triton:  # (the kernels bin a sample of a gradient this large)
            assert sum(s.histogram.counts) == view.numel() - want["nan"], name
    assert views["transposed"][1].histogram.counts == views["flat"][1].histogram.counts == large.histogram.counts


@pytest.mark.skipif(not HAS_TRITON, reason="triton not installed")
def test_parameter_grads_in_one_launch_per_dtype_equal_torch(monkeypatch):
    """At a pass's end the parameters' .grad go to the multi-tensor Triton kernel: one launch per dtype,
    its figures torch's; a .grad it cannot read flat takes the one-tensor path."""
    pending = DeviceSummaries(triton=True)
    launches, many = [], pending._triton_many
    monkeypatch.setattr(pending, "_triton_many", lambda *args: (launches.append(args[1:4]), many(*args)))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    grads = []
    for dtype in (torch.float32, torch.bfloat16):
        c = cases(dtype, device)
        grads += [c["plain"], c["nonfinite"], c["transposed"], c["small"].contiguous(), c["zeros"], c["sliced"]]
    grads.append(torch.randn(3000, device=device, dtype=torch.float32))  # several blocks of one tensor
    grads.append(cases(torch.float64, device)["nonfinite"])
    parameters, summaries = [], []
    for g in grads:
        p = torch.zeros_like(g, requires_grad=True)
        summaries.append(pending.add_leaf(g, p))  # as AccumulateGrad's hook sees it
        p.grad = g
        parameters.append(p)
    pending.flush()
    # float32: 4 flat + the 3000 (largest 3000), bfloat16: 4, float64: 1 (each "transposed" is its dtype's
    # "nonfinite" memory: summarised with it); each "sliced" (not dense) on its own
    assert sorted(launches, key=str) == sorted([(5, 3000, torch.float32), (4, 70 * 33, torch.bfloat16),
                                                (1, 70 * 33, torch.float64)], key=str)
    for g, s in zip(grads, summaries):
        want = expected(g.cpu())
        assert (s.nan_count, s.inf_count) == (want["nan"], want["inf"])
        assert close(s.norm, want["norm"]) and close(s.mean, want["mean"])
        assert (s.min, s.max) == (want["min"], want["max"])
        if g.numel() <= 64:
            assert s.values == [wire_float(v) for v in g.reshape(-1).double().tolist()]
        else:
            assert s.histogram.counts == want["hist"]


def test_accumulate_grad_keeps_the_incoming_gradient(monkeypatch):
    """Why parameter gradients are not held on the device path: AccumulateGrad makes the incoming
    gradient the parameter's .grad (no copy) only when nothing else holds it. With forgeviz on, every
    parameter's .grad is still the very gradient that arrived (its memory, seen by a tensor hook that
    keeps only its address); a held gradient (the control) is copied instead."""
    monkeypatch.setenv("FORGEVIZ_SUMMARIES", "device")
    monkeypatch.setenv("FORGEVIZ_TRITON", "0")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 10))
    x = torch.randn(600, 64)  # a weight's gradient is then computed from 600 rows: large enough to matter
    arrived, held = {}, []

    def step(recorder=None, hold=False):
        model.zero_grad(set_to_none=True)
        arrived.clear()
        def seen(g, p):
            arrived[p] = g.data_ptr()  # its address only: a reference would itself make AccumulateGrad copy
            if hold:
                held.append(g)

        handles = [p.register_hook(lambda g, p=p: seen(g, p)) for p in model.parameters()]
        loss = model(x).pow(2).mean()
        finish = recorder.arm([loss.grad_fn]) if recorder is not None else None
        loss.backward()
        if finish is not None:
            finish()
        for handle in handles:
            handle.remove()
        held.clear()
        return {p: p.grad.data_ptr() == arrived[p] for p in model.parameters()}

    kept_without = step()
    assert any(kept_without.values())  # torch keeps some (here: all) incoming gradients as .grad
    recorder = BackwardRecorder(GradStore(), pytest.fail)
    step(recorder)  # the first pass makes the device buffer
    assert step(recorder) == kept_without
    assert recorder.device.summarised >= len(kept_without)
    assert not all(step(hold=True).values())  # the control: a gradient held elsewhere is copied


@pytest.mark.parametrize("code, node, want", [
    ("z = x * y\nw = z + x\nloss = w ** 2", "z", [[48.0], [32.0]]),  # x fed by Mul and Add: .grad is 48 + 16
    ("z = x * x\nloss = z.sum()", "z", [[2.0], [2.0]]),  # one Node feeds x twice: .grad is 4
])
def test_a_leaf_fed_twice_keeps_each_nodes_own_gradient(nb, monkeypatch, code, node, want):
    """The device path summarises a gradient bound for a parameter as that .grad when the pass ends,
    only where that gradient alone becomes .grad: a parameter fed by two edges is given their sum."""
    from scenarios import by_label

    monkeypatch.setenv("FORGEVIZ_SUMMARIES", "device")
    nb.ok("x = torch.tensor([2.], requires_grad=True)\ny = torch.tensor([3.], requires_grad=True)\n"
          f"{code}\ng = forgeviz.graph(loss)\nloss.backward()")
    records = get_session().store.get(by_label(nb["g"].model, node).id).records
    assert [s.values for s in records[-1].grad_inputs] == want
    x_grad = nb["x"].grad.tolist()
    assert x_grad == ([64.0] if "y" in code else [4.0])  # torch's: the sum of what each edge gave
    leaf = next(n for n in nb["g"].model.nodes if n.name.endswith("AccumulateGrad") and n.label == "x")
    assert get_session().store.get(leaf.id).records[-1].grad_outputs[0].values == x_grad


def numbers(s) -> tuple:
    """A summary's figures, to compare two paths' (None for no summary)."""
    if s is None:
        return None
    return (s.shape, s.dtype, s.numel, s.norm, s.min, s.max, s.mean, s.nan_count, s.inf_count, s.values,
            s.histogram and (s.histogram.counts, s.histogram.edges))


def node_figures(store, roots) -> list:
    """Each Node's latest record as numbers, in the graph's order."""
    from forgeviz._capture.grads import iter_graph, node_id
    return [(type(node).__name__, [numbers(s) for s in (record.grad_outputs + record.grad_inputs)])
            for node in iter_graph(roots)
            for record in [store.get(node_id(node)).records[-1]]]


def one_pass(recorder, loss, python_hooks: bool, monkeypatch) -> int:
    """A backward of ``loss`` (its graph kept) recorded by ``recorder``; with ``python_hooks``, as without the
    native library. Returns the pass's index."""
    from forgeviz._capture import native
    with monkeypatch.context() as patch:
        if python_hooks:
            patch.setattr(native, "hooks", lambda: None)
        finish = recorder.arm([loss.grad_fn])
        loss.backward(retain_graph=True)
        finish()
    return recorder.store.passes


@pytest.mark.parametrize("fresh", [True, False], ids=["grad-reset", "accumulating"])
def test_native_hooks_take_the_device_path_as_python_hooks_do(monkeypatch, fresh):
    """With the native library, a graph on the device path (CUDA's, or any with FORGEVIZ_SUMMARIES=device)
    gets C++ hooks that call DeviceSummaries.add per gradient, not a Python hook per Node: no Node is
    handed to Python, every Node's figures equal the Python hooks' on the same graph, and the parameters'
    .grad histories equal torch's .grad."""
    from forgeviz._capture import native
    assert native.hooks() is not None  # the path under test
    monkeypatch.setenv("FORGEVIZ_SUMMARIES", "device")
    monkeypatch.setenv("FORGEVIZ_TRITON", "0")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.Tanh(), torch.nn.Linear(96, 10))
    x = torch.randn(40, 64)
    loss = torch.nn.functional.cross_entropy(model(x) @ torch.randn(10, 10).t(), torch.arange(40) % 10)
    if not fresh:
        model(x).sum().backward()  # .grad there already: AccumulateGrad adds into it
    ours, python = BackwardRecorder(GradStore(), pytest.fail), BackwardRecorder(GradStore(), pytest.fail)
    before = {p: None if p.grad is None else p.grad.clone() for p in model.parameters()}
    index = one_pass(ours, loss, False, monkeypatch)
    after_ours = {p: p.grad.clone() for p in model.parameters()}
    assert ours.store.unread_pass(index) is not None  # recorded in C++, read when asked
    assert ours.store.python_recorded(index) == []  # and no Node handed to a Python hook
    # a leaf's history keeps the device path's summary itself, not the pass (which holds all of the pass's)
    assert all(type(ours.store._leaf_history(p, False).values[-1]) is TensorSummary for p in model.parameters())
    for p in model.parameters():  # reset, so that the second pass sees what the first saw
        p.grad = None if before[p] is None else before[p].clone()
    one_pass(python, loss, True, monkeypatch)
    assert python.store.unread_pass(1) is None
    got, want = node_figures(ours.store, [loss.grad_fn]), node_figures(python.store, [loss.grad_fn])
    assert len(got) == 12 and got == want  # (NLL, log-softmax, mm, 2 addmm, tanh, 2 t, 4 leaves)
    for p in model.parameters():
        s = ours.store.leaf_history(p).values[-1]
        truth = expected(after_ours[p])
        assert s.shape == list(p.shape) and close(s.norm, truth["norm"])
        assert (s.min, s.max) == (truth["min"], truth["max"])
        assert numbers(s) == numbers(python.store.leaf_history(p).values[-1])


@pytest.mark.parametrize("read_back", ["at-once", "later"])
def test_native_device_path_finds_the_first_nonfinite_node(monkeypatch, read_back):
    """On the device path the native hooks keep a NaN gradient's summary (the CPU path hands it to Python):
    the first Node whose gradients went non-finite is found from the pass's rows once the numbers are in: at
    the pass's end on the CPU, or, as on CUDA, when a later poll finds its copy done ("later": the read-back
    held back until wait()). With Python hooks, from their records, the same way."""
    from forgeviz._capture.grads import iter_graph, node_id
    monkeypatch.setenv("FORGEVIZ_SUMMARIES", "device")
    monkeypatch.setenv("FORGEVIZ_TRITON", "0")
    if read_back == "later":
        poll = DeviceSummaries.poll
        monkeypatch.setattr(DeviceSummaries, "poll", lambda self: not self._reading)
        monkeypatch.setattr(DeviceSummaries, "wait", lambda self: poll(self))
    x = torch.tensor([1.0, 4.0, 9.0], requires_grad=True)
    w = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
    marked = []  # the passes whose first non-finite Node was found among native rows
    mark = GradStore.mark_first_nonfinite
    monkeypatch.setattr(GradStore, "mark_first_nonfinite",
                        lambda store, index, source: (marked.append(index), mark(store, index, source))[1])
    for python_hooks in (False, True):
        loss = (torch.sqrt(w) * x).sum() * 2  # d sqrt(w)/dw at w = 0: infinity, from SqrtBackward0 on
        recorder = BackwardRecorder(GradStore(), pytest.fail)
        index = one_pass(recorder, loss, python_hooks, monkeypatch)
        if read_back == "later":
            assert recorder.store.first_nonfinite(index) is None and not recorder.store.nonfinite_found
            recorder.device.wait()
        assert marked == ([] if python_hooks else [index])
        marked.clear()
        nid, record = recorder.store.first_nonfinite(index)
        assert list(recorder.store.nonfinite_found) == [(index, nid)]
        names = {node_id(n): type(n).__name__ for n in iter_graph([loss.grad_fn])}
        assert names[nid] == "SqrtBackward0", python_hooks
        assert record.grad_inputs[0].inf_count == 1 and record.grad_outputs[0].inf_count == 0
        assert w.grad[0] == math.inf
        x.grad = w.grad = None


@pytest.mark.parametrize("python_hooks", [False, True], ids=["native", "python-hooks"])
def test_a_read_back_still_in_flight_keeps_its_pass_of_dead_nodes_and_no_more(monkeypatch, python_hooks):
    """On a GPU the CPU runs ahead: a pass's copy may still be in flight when the next pass is armed (a pass's
    flush waits only for the pass before). The store then forgets every dead Node but that pass's, which it
    keeps until its numbers come: its first non-finite Node is told with its record, and the store never
    stops forgetting. Here the read-back is held back until the next flush waits for it, and the store prunes
    dead Nodes at every pass."""
    from forgeviz._capture.grads import iter_graph, node_id
    monkeypatch.setenv("FORGEVIZ_SUMMARIES", "device")
    monkeypatch.setenv("FORGEVIZ_TRITON", "0")
    poll = DeviceSummaries.poll
    monkeypatch.setattr(DeviceSummaries, "poll", lambda self: not self._reading)
    monkeypatch.setattr(DeviceSummaries, "wait", lambda self: poll(self))
    store = GradStore(prune_every=1)
    recorder = BackwardRecorder(store, pytest.fail)
    w = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
    held, nan_pass, sqrt_id = [], None, None
    for k in range(30):
        x = torch.full((3,), float(k + 1), requires_grad=True)
        loss = ((torch.sqrt(w) if k == 20 else w * 2) * x).tanh().sum()  # sqrt'(0) = inf at pass 21
        index = one_pass(recorder, loss, python_hooks, monkeypatch)
        nodes = {node_id(n): type(n).__name__ for n in iter_graph([loss.grad_fn])}
        if k == 20:
            nan_pass, sqrt_id = index, next(nid for nid, name in nodes.items() if name == "SqrtBackward0")
            assert store.first_nonfinite(index) is None and not store.nonfinite_found  # (its numbers: a pass later)
        if k == 21:  # the NaN pass's numbers came as this pass ended: its first non-finite Node, still recorded
            assert list(store.nonfinite_found) == [(nan_pass, sqrt_id)]
            entry = store.get(sqrt_id)
            assert entry is not None and entry.records[-1].backward_index == nan_pass
            assert entry.records[-1].grad_inputs[0].inf_count == 1
        del loss, x  # this pass's Nodes die
        kept = set(store._nodes).union(*(batch[3] for batch in store._unread))
        held.append(len(kept))
        assert len(kept) <= 2 * len(nodes), (k, held)  # this pass's, and the one before at most
    assert w.grad[0] == math.inf


@pytest.mark.parametrize("python_hooks", [False, True], ids=["native", "python-hooks"])
def test_autograd_grad_on_the_device_path_summarises_what_it_returns(monkeypatch, python_hooks):
    """torch.autograd.grad runs no AccumulateGrad, so a gradient bound for a parameter without .grad is not
    summarised as that .grad when the pass ends (it stays None) but as itself, the gradient returned."""
    from forgeviz._capture import native
    from forgeviz._capture.grads import node_id
    monkeypatch.setenv("FORGEVIZ_SUMMARIES", "device")
    monkeypatch.setenv("FORGEVIZ_TRITON", "0")
    if python_hooks:
        monkeypatch.setattr(native, "hooks", lambda: None)
    x, y = torch.tensor([2.], requires_grad=True), torch.tensor([3.], requires_grad=True)
    w, a = torch.randn(30, 20, requires_grad=True), torch.randn(30, 20)
    z, big = x * y, w * a
    loss = ((z + x) ** 2).sum() + big.sum()
    recorder = BackwardRecorder(GradStore(), pytest.fail)
    finish = recorder.arm([loss.grad_fn])
    dx, dy, dw = torch.autograd.grad(loss, [x, y, w])
    finish()
    assert x.grad is None and w.grad is None and (dx.item(), dy.item()) == (64.0, 32.0)
    mul = recorder.store.get(node_id(z.grad_fn)).records[-1]
    assert [s.values for s in mul.grad_inputs] == [[48.0], [32.0]]
    [to_w, _] = recorder.store.get(node_id(big.grad_fn)).records[-1].grad_inputs
    assert close(to_w.norm, expected(dw)["norm"]) and (to_w.min, to_w.max) == (a.min().item(), a.max().item())


@pytest.mark.parametrize("where", ["python-add", "native-add"])
def test_a_device_summary_that_fails_is_a_fault_not_a_broken_backward(monkeypatch, where):
    """A fault of the device path under the native hooks goes through the fault boundary: reported once per
    failure, the Node left unrecorded this pass, and backward's gradients are torch's. Whether the hooks called
    DeviceSummaries.add (here replaced by one that raises) or its common case in C++ (device_path.cpp), which
    raises what it met."""
    monkeypatch.setenv("FORGEVIZ_SUMMARIES", "device")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    x = torch.randn(4, 8)
    model(x).sum().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    faults = []
    recorder = BackwardRecorder(GradStore(), faults.append)

    def broken(grad):
        raise ValueError("no room on the device")

    if where == "python-add":
        recorder.device.add = broken
        said = "ValueError: no room on the device"
    else:  # (what the C++ reads of the class, made wrong)
        monkeypatch.setattr(DeviceSummaries, "_native_config", ("not", "the", "constants"))
        said = "TypeError: device_add: _native_config is (TensorSummary, SMALL_NUMEL"
    loss = model(x).sum()
    finish = recorder.arm([loss.grad_fn])
    loss.backward()
    finish()
    assert all(torch.equal(p.grad, w) for p, w in zip(model.parameters(), want))
    assert faults and all(f"summarising a gradient on its device failed: {said}" in f for f in faults), faults
    assert recorder.store.get(loss.grad_fn.metadata["fv_id"]) is None  # its gradient went to the broken add


def test_recorded_node_rows_come_from_the_device_path_summaries(monkeypatch):
    """A recording reads a native pass's Node numbers with node_stats: on the device path, the summaries
    device_summary filled, by the graph's positions."""
    from forgeviz._capture.grads import NODE_STATS_SIZE, iter_graph, node_id
    from forgeviz._capture.recording import _node_rows
    monkeypatch.setenv("FORGEVIZ_SUMMARIES", "device")
    monkeypatch.setenv("FORGEVIZ_TRITON", "0")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    loss = model(torch.randn(8, 16)).pow(2).mean()
    recorder = BackwardRecorder(GradStore(), pytest.fail)
    index = one_pass(recorder, loss, False, monkeypatch)
    nodes = iter_graph([loss.grad_fn])
    ids = [node_id(n) for n in nodes]
    stats, on_device = recorder.store.unread_pass(index).node_stats(ids)
    assert len(stats) == 0 * NODE_STATS_SIZE and sorted(k for k, _ in on_device) == list(range(len(nodes)))
    described = tuple((type(n).__name__, None, len(nodes) - 1 - k) for k, n in enumerate(nodes))
    rows = {row[-1]: row for row in _node_rows(3, 0, described, stats, on_device)}  # at each Node's graph position
    for k, nid in enumerate(ids):
        s, row = recorder.store.get(nid).records[-1].grad_outputs[0], rows[len(nodes) - 1 - k]
        assert row[4:9] == (s.norm, s.min, s.max, s.mean, s.numel) and row[2] == described[k][0]


def test_ops_each_path_issues():
    """Counted with a TorchDispatchMode: a batched gradient issues no op when added, a batch 13 for all of
    its gradients (15 with small ones' values, + 2 the first time), a large or float64 gradient 7 (its flat
    view, bucketize, counts, per-bucket min and max, sum, norm), and nothing holds a large one."""
    from op_count import _Count

    import forgeviz._capture.device_summary as ds
    pending = DeviceSummaries(triton=False)
    pending.add(torch.randn(ds.BATCH_NUMEL + 1))  # the first large one makes the buffer and its side buffer,
    pending.add(torch.randn(3, dtype=torch.float64))  # (float64 ones: theirs)
    pending.add(torch.randn(3))
    pending.flush()  # the first batch its bins
    for first in (True, False):  # a training loop's next step: the same shapes
        small = [torch.randn(300, 30), torch.randn(30, 300).t(), torch.randn(8)]
        with _Count() as adding:
            for g in small:
                pending.add(g)
        assert sum(adding.ops.values()) == 0
        with _Count() as reducing:
            pending._reduce_batches()
        # 13, + 2 to keep the small one's values, + its index tensors' copies, once for these shapes
        assert sum(reducing.ops.values()) == 13 + 2 + (2 if first else 0), dict(reducing.ops)
        pending.flush()  # the pass's end: the next one's rows start where this one's did
    for make in (lambda: torch.randn(600, 500), lambda: torch.randn(500, 600).t(),
                 lambda: torch.randn(70, 33, dtype=torch.float64), lambda: torch.randn(8, 8, dtype=torch.float64)):
        big = make()
        with _Count() as large:
            pending.add(big)
        per_gradient = sum(large.ops.values()) - large.ops["aten::copy_"] - large.ops["aten::slice"]
        # min and max as plain reductions (amin, amax, each of a nan_to_num), not scatter_reduce_'s atomics
        assert per_gradient == 9 and large.ops["aten::bucketize"] == 1, dict(large.ops)
        assert "aten::scatter_reduce_.two" not in large.ops and large.ops["aten::amin"] == 1, dict(large.ops)
        if big.numel() > 64:
            assert sum(large.ops.values()) == 9
        ref = weakref.ref(big)
        del big
        assert ref() is None  # not held until the pass's end
    pending.flush()


def test_a_multi_tensor_launch_reuses_its_table_for_the_same_gradients():
    """The multi-tensor launch's table (data pointers, numels, rows) goes up once for a batch of the same
    addresses (a training loop's steps) and afresh for others; its numbers are always the batch's own."""
    pending = DeviceSummaries(triton=False)
    tables = []
    pending._triton = lambda flat, row: None
    pending._triton_many = lambda table, n, most, dtype, rows: tables.append(table)
    pending._interpreted = True  # (what lets the Triton path take CPU tensors)
    grads = [torch.randn(30, 20), torch.randn(7)]
    for batch in (grads, grads, [torch.randn(30, 20), grads[1]]):
        for g in batch:
            pending.add(g)
        pending.flush()
        want = [g.data_ptr() for g in batch] + [g.numel() for g in batch] + [0, 1]
        assert tables[-1].tolist() == want
    assert tables[1] is tables[0] and tables[2] is not tables[0]


def test_a_large_gradient_s_launch_on_a_gpu_takes_its_row_with_no_op_and_no_switch(monkeypatch):
    """A gradient past BATCH_NUMEL that Triton reads flat is one launch into the next row, with nothing else: no
    aten op (a transposed one's flat view is a view, as_strided), and neither untraced's nor no_grad's switches,
    which cost a cold backward more than the launch's own Python. A buffer that must grow first grows under them
    (its ops are forgeviz's own). Kernels stubbed, as on a GPU: CPU tensors take the Triton path."""
    from op_count import _Count

    import forgeviz._capture.device_summary as ds
    launched, switched = [], []
    pending = DeviceSummaries(triton=False)
    pending._triton = lambda flat, row: launched.append((flat, row))
    pending._triton_many = lambda *args: None
    pending._interpreted, pending._kernels_on_cpu = True, False

    class Untraced(ds.untraced_no_grad):
        def __enter__(self):
            switched.append(1)
            return super().__enter__()

    monkeypatch.setattr(ds, "untraced_no_grad", Untraced)
    first = torch.randn(ds.BATCH_NUMEL + 1)
    pending.add(first)  # the buffer is made and grown: under the switches
    assert len(switched) == 1 and len(launched) == 1
    room = len(pending._buffers[first.device].views) - pending._buffers[first.device].used
    grads = [torch.randn(600, 500), torch.randn(500, 600).t(), torch.randn(ds.BATCH_NUMEL + 7)]
    with _Count() as counted:
        summaries = [pending.add(g) for g in grads]
    assert room >= len(grads) and len(switched) == 1  # no switch: the rows were there
    assert sum(counted.ops.values()) == counted.ops["aten::as_strided"] == 1, dict(counted.ops)  # the transposed one
    buffer = pending._buffers[first.device]
    assert [index for _, _, index, _ in pending._rows] == [0, 1, 2, 3] == list(range(buffer.used))
    assert [row.data_ptr() for _, row in launched] == [buffer.views[k].data_ptr() for k in range(4)]
    flat = launched[2][0]  # the transposed gradient, read as its memory
    assert flat.shape == (300_000,) and flat.data_ptr() == grads[1].data_ptr() and flat.is_contiguous()
    assert [s.shape for s in summaries] == [[600, 500], [600, 500], [ds.BATCH_NUMEL + 7]]
    buffer.used = len(buffer.views)  # full: the next launch grows the buffer, under the switches
    pending.add(torch.randn(ds.BATCH_NUMEL + 3))
    assert len(switched) == 2 and len(launched) == 5


def _state(pending: DeviceSummaries) -> dict:
    """What add and add_leaf change, comparable across two DeviceSummaries fed the same gradients."""
    def tensor(t):
        return (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype) if isinstance(t, torch.Tensor) else t

    def item(x):
        if isinstance(x, tuple):
            return tuple(item(v) for v in x)
        if isinstance(x, weakref.ref):
            return ("ref", tensor(x()))
        if isinstance(x, TensorSummary):
            return repr(x)
        return tensor(x) if not hasattr(x, "views") else ("buffer", x.device)

    return {"seen": {key: item(v) for key, v in pending._seen.items()},
            "dense": {key: [item(v) for v in items] for key, items in pending._dense.items()},
            "batches": {key: [item(v) for v in items] for key, items in pending._batches.items()},
            "rows": [item(v) for v in pending._rows], "views": [item(v) for v in pending._views],
            "leaves": [item(v) for v in pending._leaves], "batched": pending._batched,
            "summarised": pending.summarised, "used": {d: b.used for d, b in pending._buffers.items()}}


@pytest.mark.parametrize("kernels", ["torch-ops", "triton-on-a-gpu", "triton-interpreted"])
def test_the_native_add_changes_what_python_s_add_changes(kernels):
    """native/device_path.cpp's add and add_leaf (the native hooks call them, not DeviceSummaries' methods) leave a
    DeviceSummaries as its Python methods do, gradient by gradient: the summaries, the memory seen (views sharing a
    first one's numbers), the batches held, the rows launched into (kernels stubbed: on a GPU, or interpreted, whose
    launches take the switches), the leaves queued; and what they cannot take (a gradient keyed by its shape: not
    dense) they leave untouched for Python. The numbers after the flush are the same."""
    from forgeviz._capture import native
    hooks = native.hooks()
    assert hooks is not None  # the path under test
    import forgeviz._capture.device_summary as ds

    def make() -> DeviceSummaries:
        pending = DeviceSummaries(triton=False)
        if kernels != "torch-ops":
            pending._triton = lambda flat, row: row[2].add_(flat.double().sum())  # (a stand-in reduction)
            pending._triton_many = lambda table, n, most, dtype, rows: None
            pending._interpreted, pending._kernels_on_cpu = True, kernels == "triton-interpreted"
        return pending

    torch.manual_seed(0)
    big = torch.randn(600, 500)
    weight = torch.nn.Parameter(torch.randn(30, 20))
    grads = [torch.randn(30, 20), big, big.t(), big.view(-1), big, torch.tensor(2.5), torch.zeros(0, 3),
             torch.randn(ds.BATCH_NUMEL + 5), torch.randn(5, 7, dtype=torch.float64),
             torch.randn(40, 40, dtype=torch.bfloat16), torch.randn(8, 9)[:, :4], torch.randn(200, 300)[::2]]
    ours, theirs = make(), make()
    handled = []
    for k, g in enumerate(grads):
        made = hooks.device_add(ours, g, None)
        handled.append(made is not NotImplemented)
        if made is NotImplemented:  # (as the native hooks do then)
            made = ours.add(g)
        want = theirs.add(g)
        assert repr(made) == repr(want), k
        assert _state(ours) == _state(theirs), k
    # what the native add leaves to Python: the strided ones that are not dense (keyed by their shape)
    assert handled == [True] * 10 + [False, False]
    leaf_grad = torch.randn(30, 20)
    made = hooks.device_add(ours, leaf_grad, weight)
    assert repr(made) == repr(theirs.add_leaf(leaf_grad, weight)) and _state(ours) == _state(theirs)
    ours.flush()
    theirs.flush()
    assert _state(ours) == _state(theirs)
    for g in grads:  # (after the flush: a fresh pass, every gradient new again)
        assert repr(hooks.device_add(ours, g, None) if g.is_contiguous() else ours.add(g)) == repr(theirs.add(g))
    ours.flush()
    theirs.flush()


@pytest.mark.parametrize("replaced", [False, True], ids=["as-built", "add-replaced-on-the-class"])
def test_the_native_hooks_add_in_cpp_unless_the_method_was_replaced(monkeypatch, replaced):
    """Under the native hooks no Python frame of DeviceSummaries.add or add_leaf runs for the common cases; a method
    replaced on the class (a test's spy, a user's patch) is the one called, for every gradient, not bypassed."""
    import sys

    monkeypatch.setenv("FORGEVIZ_SUMMARIES", "device")
    monkeypatch.setenv("FORGEVIZ_TRITON", "0")
    calls = []
    if replaced:
        add, add_leaf = DeviceSummaries.add, DeviceSummaries.add_leaf
        monkeypatch.setattr(DeviceSummaries, "add", lambda self, g: calls.append("add") or add(self, g))
        monkeypatch.setattr(DeviceSummaries, "add_leaf",
                            lambda self, g, p: calls.append("leaf") or add_leaf(self, g, p))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    loss = model(torch.randn(8, 16)).pow(2).mean()
    recorder = BackwardRecorder(GradStore(), pytest.fail)
    finish = recorder.arm([loss.grad_fn])
    assert recorder.armed is not None  # the native hooks
    entered = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_name in ("add", "add_leaf", "_summary") and \
                frame.f_code.co_filename.endswith("device_summary.py"):
            entered.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        loss.backward()
    finally:
        sys.setprofile(None)
    finish()
    assert recorder.device.summarised > 0
    if replaced:
        assert calls.count("leaf") == 4 and calls.count("add") >= 4 and "_summary" in entered
    else:
        assert entered == [] and calls == []
    for p in model.parameters():  # the figures are torch's either way
        s = recorder.store.leaf_history(p).values[-1]
        assert close(s.norm, float(p.grad.double().norm())) and s.shape == list(p.shape)


def test_the_native_add_refuses_what_is_not_a_device_summaries():
    from forgeviz._capture import native
    hooks = native.hooks()
    assert hooks is not None
    with pytest.raises(AttributeError, match="_native_config"):
        hooks.device_add(object(), torch.ones(3), None)
    with pytest.raises(TypeError, match="expected \\(pending, a tensor, a tensor or None\\)"):
        hooks.device_add(DeviceSummaries(triton=False), [1.0], None)
    assert hooks.device_add(DeviceSummaries(triton=False), torch.ones(3, dtype=torch.int64), None) is NotImplemented


def test_bins_are_the_dtypes_edges():
    e = edges(torch.float16)
    assert len(e) == BINS + 1 and e[0] == -65504.0 and e[-1] == 65504.0 and e == sorted(e)
    assert e[BINS // 2: BINS // 2 + 2] == [0.0, 2.0 ** -24]  # the zero bin holds exact zeros only


def mlp_loss():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10))
    return lambda: torch.nn.functional.cross_entropy(model(torch.randn(32, 256)), torch.arange(32) % 10)


def test_backward_issues_few_ops_and_no_host_read(monkeypatch):
    monkeypatch.setenv("FORGEVIZ_SUMMARIES", "device")
    monkeypatch.setenv("FORGEVIZ_TRITON", "0")  # the torch path: its ops are what a dispatch mode sees
    make_loss = mlp_loss()
    backward_ops(make_loss)  # warm: AccumulateGrad then adds into existing .grad in both runs
    plain = backward_ops(make_loss)
    store = GradStore()
    recorder = BackwardRecorder(store, pytest.fail)
    backward_ops(make_loss, recorder.arm)  # a loop's first step makes the device buffer: counted below, not
    before = recorder.device.summarised
    with_summaries = backward_ops(make_loss, recorder.arm)
    unique = recorder.device.summarised - before
    ours = with_summaries - plain
    per_gradient = sum(ours.values()) / unique
    print(f"aten ops per unique gradient: {per_gradient:.1f} over {unique} gradients: {dict(ours)}")
    assert not any(with_summaries[name] for name in HOST_READS)
    # a batch's 13-17 ops shared by its gradients (the issue's target: 2): 1.1 measured, a transposed weight
    # gradient counted with the memory it views (0.91 when it was counted apart)
    assert unique >= 10 and per_gradient <= 1.5


def test_training_step_figures_in_the_inspector(nb, monkeypatch):
    monkeypatch.setenv("FORGEVIZ_SUMMARIES", "device")
    nb.ok("torch.manual_seed(0)\n"
          "model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.Tanh(), torch.nn.Linear(96, 1))\n"
          "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
          "x = torch.randn(16, 64)")
    nb.ok("loss = model(x).pow(2).mean()\ng = forgeviz.graph(loss)\nopt.zero_grad()\nloss.backward()\nopt.step()")
    weight = nb["model"][0].weight
    # The step changed the weight, not its .grad: the gradient that flowed is weight.grad.
    node = next(n for n in nb["g"].model.nodes if n.label == "0.weight")
    detail = request(nb["g"], {"type": "inspect", "request_id": 1, "node": node.id})["detail"]
    got = detail["grads"][-1]["grad_outputs"][0]
    want = expected(weight.grad)
    assert (got["nan_count"], got["inf_count"]) == (0, 0)
    assert (got["min"], got["max"]) == (want["min"], want["max"])
    assert close(got["norm"], want["norm"]) and close(got["mean"], want["mean"])
    assert got["histogram"]["counts"] == want["hist"] and got["histogram"]["edges"] == edges(torch.float32)


def transformer_step(device: str):
    """A small transformer's training step (forward, backward, AdamW step) under capture, as a notebook
    cell under ``%load_ext forgeviz`` runs it; returns (model, step(sync_mode), recorder)."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(torch.nn.Embedding(100, 64), layer, torch.nn.Linear(64, 100)).to(device)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randint(0, 100, (4, 16), device=device)
    recorder = BackwardRecorder(GradStore(), pytest.fail)

    def step(during_backward=None, zero_grad=True):
        if zero_grad:
            opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), x.flatten())
        finish = recorder.arm([loss.grad_fn])
        with during_backward or _Nothing():
            loss.backward()
            finish()
        grads = {p: p.grad.clone() for p in model.parameters()}
        opt.step()
        return grads
    return model, step, recorder


class _Nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def leaf_summaries(recorder, model) -> dict:
    """The parameters' latest .grad summaries, from the recorder's leaf histories."""
    return {p: recorder.store.leaf_history(p).values[-1] for p in model.parameters()}


def check_parameter_figures(recorder, model, grads) -> None:
    recorder.device.wait()
    for p, s in leaf_summaries(recorder, model).items():
        want = expected(grads[p].cpu())
        assert s.numel == p.numel() and close(s.norm, want["norm"]) and close(s.mean, want["mean"])
        assert (s.min, s.max) == (want["min"], want["max"]) and s.nan_count == 0


def test_training_step_reads_nothing_back_during_backward(monkeypatch):
    monkeypatch.setenv("FORGEVIZ_SUMMARIES", "device")
    monkeypatch.setenv("FORGEVIZ_TRITON", "0")
    from op_count import _Count
    model, step, recorder = transformer_step("cpu")
    step()
    counter = _Count()
    grads = step(counter)
    assert counter.ops and not any(counter.ops[name] for name in HOST_READS)
    check_parameter_figures(recorder, model, grads)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (tests/benchmarks/gpu.sh runs it)")
def test_cuda_training_step_is_sync_free():
    """With forgeviz's default CUDA path, whole training steps (forward, backward, AdamW) make no
    synchronising call: one after zero_grad (the parameters' .grad summarised at the pass's end), one
    that accumulates into the .grad already there (the incoming gradients summarised as they arrive).
    The figures, polled after, equal torch's: the leaves' .grad, and what reached each AccumulateGrad."""
    model, step, recorder = transformer_step("cuda")
    step()  # the first pass makes the buffer, the pinned memory and the bins
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        grads = step()
        accumulated = step(zero_grad=False)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    check_parameter_figures(recorder, model, accumulated)
    # each AccumulateGrad's incoming gradient in the second step: .grad after it, less .grad before it
    arrived = [r.records[-1].grad_outputs[0] for r in recorder.store.nodes.values()
               if not r.records[-1].grad_inputs and r.records[-1].grad_outputs]
    for p in model.parameters():
        want = float((accumulated[p].double() - grads[p].double()).norm())
        assert any(s.shape == list(p.shape) and s.norm == pytest.approx(want, rel=1e-5) for s in arrived), p.shape
