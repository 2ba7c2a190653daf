"""Gradient summaries: the native one-pass path and the torch path both agree with torch itself."""

from __future__ import annotations

import pytest
import torch

from forgeviz._capture import native, summary as summary_module
from forgeviz._capture.summary import HISTOGRAM_BINS, HISTOGRAM_SAMPLE, SMALL_NUMEL, summarize


def cases() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    big = torch.randn(256, 256, generator=g)
    return {
        "contiguous 2-D": big,
        "transposed": big.t(),
        "every third column": torch.randn(32, 256, generator=g)[:, ::3],
        "permuted 3-D": torch.randn(4, 5, 6, generator=g).permute(2, 0, 1),
        # dims in memory order with ties (size-1 dims share a stride): the native pass sorts them itself
        "permuted 4-D with size-1 dims": torch.randn(3, 1, 40, 1, 5, generator=g).permute(4, 3, 0, 1, 2),
        "expanded (stride 0)": torch.randn(1, 300, generator=g).expand(7, 300),
        "odd length": torch.randn(1031, generator=g) * 5 + 2,
        # the native histogram bins eight samples at a time: every second element here, a tail of
        # four samples after them, and samples that cross short strided rows
        "every second element sampled": torch.randn(32, 256, generator=g),
        "a tail after the eights": torch.randn(4100 * 2 + 1, generator=g) * 1e-3,
        "short strided rows": torch.randn(300, 37, generator=g)[:, :35],
        "float64": torch.randn(500, dtype=torch.float64, generator=g),
        "large": torch.randn(1 << 20, generator=g),
        "small": torch.randn(3, 4, generator=g),
        "0-d": torch.tensor(-2.5),
        "constant": torch.full((1000,), 3.0),
    }


@pytest.fixture(params=["native", "torch"])
def path(request, monkeypatch):
    if request.param == "native":
        native.load()  # ./dev.sh installs g++; a build failure fails here, loudly
    else:
        monkeypatch.setattr(native, "_lib", None)  # as in a process that never loaded it
    return request.param


@pytest.mark.parametrize("name", list(cases()))
def test_summaries_agree_with_torch(name, path):
    t = cases()[name]
    if path == "native":  # the fast path really ran: a silent fallback would pass the rest
        assert summary_module._summarize_natively(t, True) is not None
    s = summarize(t)
    exact = t.double()
    assert (s.shape, s.dtype, s.numel) == (list(t.shape), str(t.dtype).removeprefix("torch."), t.numel())
    assert s.min == t.min().item() and s.max == t.max().item()
    # The native pass sums in double; torch sums float32 in float32 (1e-5 off on a million values).
    rel = 1e-6 if path == "native" or t.dtype == torch.float64 else 1e-4
    assert s.mean == pytest.approx(exact.mean().item(), rel=rel, abs=1e-9)
    assert s.norm == pytest.approx(exact.norm().item(), rel=rel)
    if t.numel() <= SMALL_NUMEL:
        assert s.values == t.reshape(-1).tolist() and s.histogram is None
        return
    assert s.values is None
    # Every step-th element in reshape(-1) order, binned over [min, max] like torch.histc.
    sample = t.reshape(-1)[:: max(1, t.numel() // HISTOGRAM_SAMPLE)].float()
    hi = s.max if s.max > s.min else s.min + 1
    expected = torch.histc(sample, bins=HISTOGRAM_BINS, min=s.min, max=hi)
    assert s.histogram.counts == [int(c) for c in expected.tolist()]
    assert sum(s.histogram.counts) == sample.numel()


def test_nonfinite_values_are_counted_by_torch(path):
    bad = torch.tensor([1.0, float("nan"), float("inf"), -2.0] * 100)
    assert summary_module._summarize_natively(bad, True) is None  # the native pass hands these over
    s = summarize(bad)
    assert (s.nan_count, s.inf_count, s.min, s.max) == (100, 100, -2.0, 1.0)
    assert s.mean == "NaN" and sum(s.histogram.counts) == 200  # the finite values only


OTHERS = {"float16": lambda: torch.arange(100, dtype=torch.float16), "int64": lambda: torch.arange(100),
          "empty": lambda: torch.zeros(0), "complex": lambda: torch.randn(8, dtype=torch.complex64)}


@pytest.mark.parametrize("name", list(OTHERS))  # made in the test: no tensor outlives it
def test_other_tensors_take_the_torch_path(name):
    t = OTHERS[name]()
    native.load()
    assert summary_module._summarize_natively(t, True) is None
    s = summarize(t)
    assert s.numel == t.numel()
    if t.numel():
        magnitude = t.abs() if t.is_complex() else t
        assert s.max == pytest.approx(magnitude.double().max().item())
        assert s.norm == pytest.approx(magnitude.double().norm().item(), rel=1e-3)


def test_a_summary_reaches_no_torch_function_mode(path):
    seen = []

    class Spy(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    t = torch.randn(300)
    with Spy():
        summarize(t)
    assert seen == []


def test_capture_uses_the_built_library_and_never_builds_it(tmp_path):
    # A fresh process: capture() outside IPython loads the library if it is built (./dev.sh builds
    # it), and with an empty cache neither builds it nor remembers that as a failure.
    import json
    import os
    import subprocess
    import sys

    native.load()  # built into the usual cache
    script = (
        "import json, torch, forgeviz\n"
        "from forgeviz._capture import native\n"
        "x = torch.randn(300, requires_grad=True)\n"
        "with forgeviz.capture():\n"
        "    (x * 2).sum().backward()\n"
        "print(json.dumps([native.loaded() is not None, native.unavailable_reason()]))\n"
    )
    for cache, expected in [(os.environ.get("FORGEVIZ_CACHE"), [True, None]), (str(tmp_path), [False, None])]:
        env = dict(os.environ)
        env.pop("FORGEVIZ_CACHE", None)
        if cache:
            env["FORGEVIZ_CACHE"] = cache
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout.splitlines()[-1]) == expected
    assert not list(tmp_path.rglob("*.so"))


@pytest.mark.parametrize("name", list(cases()))
def test_summaries_made_on_the_device_agree_with_torch(name, monkeypatch):
    # What a GPU gradient goes through, on a CPU tensor: nothing is read until flush(), then once.
    t = cases()[name]
    reads = []
    tolist = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: reads.append(1) or tolist(self))
    monkeypatch.setattr(torch.Tensor, "item", lambda self: pytest.fail("a read back before flush()"))
    pending = summary_module.DeferredSummaries()
    s, again = pending.summarize(t), pending.summarize(t * 2)
    assert reads == [] and s.norm is None
    pending.flush()
    assert reads == [1]
    monkeypatch.undo()  # the oracle below reads numbers its own way
    exact = t.double()
    assert (s.shape, s.numel) == (list(t.shape), t.numel())
    assert s.min == t.min().item() and s.max == t.max().item() and again.max == (t * 2).max().item()
    assert s.mean == pytest.approx(exact.mean().item(), rel=1e-6, abs=1e-9)
    assert s.norm == pytest.approx(exact.norm().item(), rel=1e-6)
    if t.numel() <= SMALL_NUMEL:
        assert s.values == t.reshape(-1).tolist() and s.histogram is None
        return
    sample = t.reshape(-1)[:: max(1, t.numel() // HISTOGRAM_SAMPLE)].float()
    hi = s.max if s.max > s.min else s.min + 1
    expected = [int(c) for c in torch.histc(sample, bins=HISTOGRAM_BINS, min=s.min, max=hi).tolist()]
    # Binned in float64 here, float32 in histc: a value on a bin edge may fall on either side.
    assert sum(s.histogram.counts) == sum(expected) == sample.numel()
    assert sum(abs(a - b) for a, b in zip(s.histogram.counts, expected)) <= 2


def test_device_summaries_count_what_is_not_finite():
    pending = summary_module.DeferredSummaries()
    bad = pending.summarize(torch.tensor([1.0, float("nan"), float("inf"), -2.0] * 100))
    none = pending.summarize(torch.full((100,), float("nan")))
    ints = pending.summarize(torch.arange(100))
    pending.flush()
    assert (bad.nan_count, bad.inf_count, bad.min, bad.max, bad.mean) == (100, 100, -2.0, 1.0, "NaN")
    assert sum(bad.histogram.counts) == 200  # the finite values of the sample only
    assert (none.nan_count, none.min, none.max, none.histogram) == (100, "NaN", "NaN", None)
    assert (ints.min, ints.max, ints.mean) == (0.0, 99.0, 49.5)


def test_device_summaries_neither_copy_from_the_host_nor_read_back_until_flush():
    # On a GPU either would wait for every queued kernel: torch.tensor(...) on the device (lift_fresh
    # and a copy), a number read back (_local_scalar_dense), or a copy to another device.
    from torch.utils._python_dispatch import TorchDispatchMode

    calls = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            calls.append((str(func), kwargs or {}))
            return func(*args, **(kwargs or {}))

    tensors = [torch.randn(300), torch.arange(100), torch.randn(5), torch.tensor([float("nan")] * 70)]
    pending = summary_module.DeferredSummaries()
    with Spy():
        for t in tensors:
            pending.summarize(t)
    names = {name for name, _ in calls}
    assert not names & {"aten.lift_fresh.default", "aten._local_scalar_dense.default", "aten.item.default",
                        "aten.copy_.default"}
    assert all("device" not in kwargs for name, kwargs in calls if name == "aten._to_copy.default")
    assert len(calls) > 10  # the spy saw the reductions themselves
    # A GPU backward is bound by launches from Python: at most 16 ops a gradient (there were 45-47), the
    # histograms are binned together at flush()
    assert len(calls) <= 16 * len(tensors) and not names & {"aten.scatter_add_.default", "aten.floor.default"}
