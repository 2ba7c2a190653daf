"""The native reader of the gradients an optimizer applies (grad_reader.cpp, issue 28's cost): its fingerprint
is the exact sum of the gradient's bit patterns, as Python's integers make it from the patterns torch shows (the
rank-divergence check compares fingerprints across ranks, so one must mean the same gradient whoever made it,
however it lies in memory); a recording read by it, at once or beside the step, writes exactly the rows the Python
reader writes, with torch's norms; and an optimizer that changes ``.grad`` inside ``step()`` is caught by either
reader. Fingerprints are made only where there are ranks to compare them (a run of one rank has none). With one rank,
a step after a backward that left ``.grad`` untouched reads nothing: its rows are that backward's summaries, and any
way of changing ``.grad`` in between sends the step back to the reader."""

from __future__ import annotations

import json
import re

import pytest
import torch

import forgeviz
from forgeviz._capture import native
from forgeviz._capture.recording import Recorder, _stats, fingerprint, fold_bit_sum

reader = native.reader()
needs_reader = pytest.mark.skipif(reader is None, reason="the native gradient reader is not built "
                                  "(python -m forgeviz._capture.native)")
needs_hooks = pytest.mark.skipif(native.hooks() is None, reason="the native gradient hooks are not built "
                                 "(python -m forgeviz._capture.native)")

_INTS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def bit_sum(t: torch.Tensor) -> int:
    """The oracle of a fingerprint: the bit patterns torch shows for ``t``'s elements, summed by Python's exact
    integers (neither forgeviz's C++ nor torch's sum), folded."""
    return fold_bit_sum(sum(t.contiguous().view(_INTS[t.element_size()]).reshape(-1).tolist()))


@pytest.fixture(params=["at once", "beside"])
def reads(request):
    """Each job read at once, in ``read`` on the calling thread (as the reader reads these tests' small jobs, the
    limit here past any), or by its thread beside the step (as a job of more than a few MiB is read)."""
    if reader is None:
        pytest.skip("the native gradient reader is not built (python -m forgeviz._capture.native)")
    before = reader.set_inline_bytes(-1 if request.param == "beside" else 1 << 40)
    yield request.param
    reader.set_inline_bytes(before)


@pytest.fixture
def beside():
    """Every job handed to the reader's thread, however small."""
    before = reader.set_inline_bytes(-1)
    yield
    reader.set_inline_bytes(before)


@needs_reader
def test_fingerprint_is_the_exact_bit_sum_for_every_length_layout_and_dtype():
    torch.manual_seed(0)
    # every tail length around the 16-element AVX2 loop, and long ones; any bit pattern (negative, NaN ones)
    for n in [*range(1, 70), 1023, 4097, 65_539]:
        for ints, floats in ((torch.int32, torch.float32), (torch.int64, torch.float64)):
            t = torch.randint(torch.iinfo(ints).min, torch.iinfo(ints).max, (n,), dtype=ints).view(floats)
            assert reader.fingerprint(t) == bit_sum(t) == fingerprint(t), (n, floats)
    t = torch.randn(37, 129)
    # order-free: transposed, every other column, broadcast (a zero stride) as their row-major copies
    for view in (t.t(), t[:, ::2], torch.randn(5, 1).expand(5, 300), t[3]):
        assert reader.fingerprint(view) == bit_sum(view) == fingerprint(view, native.load_if_built())
    changed = t.clone()
    changed[20, 100] = torch.nextafter(changed[20, 100], torch.tensor(9.0))  # one element, one bit
    assert reader.fingerprint(changed) != reader.fingerprint(t)
    for other in (t.to(torch.bfloat16), t.half(), torch.ones(0)):  # not read natively: Python's
        assert reader.fingerprint(other) is None
    for other in (t.to(torch.bfloat16), t.half()):
        assert fingerprint(other) == bit_sum(other)
    z = torch.randn(4, 3, dtype=torch.complex64)
    assert fingerprint(z) == bit_sum(torch.view_as_real(z)) and fingerprint(t.to_sparse()) == bit_sum(t)
    # lazily negated or conjugated (what their values are, not what their memory holds)
    assert fingerprint(torch._neg_view(-t)) == bit_sum(t)
    assert fingerprint(z.conj()) == bit_sum(torch.view_as_real(z.conj_physical()))


def test_read_gives_tensor_stats_and_fingerprint_or_none(reads):
    torch.manual_seed(1)
    grads = [torch.randn(300, 70), None, torch.randn(5, dtype=torch.float64), torch.randn(6, 4).t(),
             torch.tensor([1.0, float("nan")]), torch.randn(9).to(torch.bfloat16)]
    job = reader.read(grads)
    changed, left = reader.wait(job)
    numbers = reader.numbers(job)
    assert not changed and left == 2  # the NaN and bfloat16 ones (below), present and not read
    for g, got in zip(grads, numbers):
        if type(got) is not tuple:
            continue
        lo, hi, total, norm, numel, fp = got
        # the Python reader's numbers (tensor_stats.cpp's pass, float32 partial sums), bit for bit
        assert (norm, lo, hi, total / numel, numel) == _stats(g, native.load_if_built())
        exact = g.double()
        assert (lo, hi) == (exact.min().item(), exact.max().item())
        assert (total, norm) == pytest.approx((exact.sum().item(), exact.norm().item()), rel=1e-6)
        assert fp == bit_sum(g)
    # absent is None; NaN and bfloat16 come back as themselves, left to Python (which counts NaN, converts)
    assert [type(got).__name__ for got in numbers] == ["tuple", "NoneType", "tuple", "tuple", "Tensor", "Tensor"]
    assert all(got is g for g, got in zip(grads[4:], numbers[4:]))
    assert reader.read([None, None]) is None  # nothing to read: no job


def test_one_pass_gives_the_summary_s_stats_and_the_exact_bit_sum_for_every_length_and_layout(reads):
    """A job with fingerprints reads each gradient once (tensor_stats.cpp's fv_summarize_bit_sum_tensor: the bit
    patterns added in the summary's AVX2 loop, from the same loads): its stats are bit for bit those of the summary's
    own pass (the Python reader's), and its fingerprint Python's exact sum of torch's bit patterns, for every tail
    length around the 32-float step and the 512-float block, long rows, float64, and strided, transposed and
    broadcast gradients."""
    torch.manual_seed(3)
    lib = native.load_if_built()
    grads = [torch.randn(n, dtype=dtype) * 3 for n in (*range(1, 70), 511, 512, 513, 1023, 1025, 4097, 65_539)
             for dtype in (torch.float32, torch.float64)]
    t = torch.randn(37, 1029)
    grads += [t.t(), t[:, ::2], t[3], torch.randn(5, 1).expand(5, 700), t.double().t(), -t]
    job = reader.read(grads)
    assert reader.wait(job) == (False, 0)
    for g, got in zip(grads, reader.numbers(job)):
        lo, hi, total, norm, numel, fp = got
        assert (norm, lo, hi, total / numel, numel) == _stats(g, lib), g.shape
        assert fp == bit_sum(g), g.shape


def test_read_without_fingerprints_gives_the_same_stats_and_none(reads):
    """``read(grads, False, poll, False)`` (one rank: nothing to compare): the same summary, fingerprint None."""
    torch.manual_seed(1)
    grads = [torch.randn(300, 70), None, torch.randn(6, 4).t(), torch.tensor([1.0, float("nan")])]
    with_prints, without = reader.read(grads), reader.read(grads, False, False, False)
    assert reader.wait(with_prints) == (False, 1) and reader.wait(without) == (False, 1)  # the NaN one is left
    numbers = reader.numbers(without)
    assert numbers[0] == (*reader.numbers(with_prints)[0][:5], None)
    lo, hi, total, norm, numel, fp = numbers[2]
    assert (norm, lo, hi, total / numel, numel) == _stats(grads[2], native.load_if_built()) and fp is None
    assert numbers[1] is None and numbers[3] is grads[3]


def test_packed_gives_numbers_as_the_writer_takes_them(reads):
    """``packed(job)`` (the writer's columns of a rank's applied gradients): ``numbers(job)`` as two bytes objects,
    five doubles a gradient (numel -1 for one absent) and a uint32 fingerprint each (0 for one absent), or None for
    a job read without fingerprints; a job that left a gradient to Python is refused, and says so."""
    import struct

    torch.manual_seed(2)
    grads = [torch.randn(300, 70), None, torch.randn(6, 4).t(), torch.randn(5, dtype=torch.float64)]
    for fingerprinted in (True, False):
        job = reader.read(grads, False, False, fingerprinted)
        assert reader.wait(job) == (False, 0)
        stats, prints = reader.packed(job)
        numbers = reader.numbers(job)
        assert list(struct.iter_unpack("=5d", stats)) == [
            (0.0, 0.0, 0.0, 0.0, -1.0) if got is None else (*got[:4], float(got[4])) for got in numbers]
        if fingerprinted:
            assert list(struct.unpack(f"={len(grads)}I", prints)) == [0 if got is None else got[5] for got in numbers]
            assert numbers[0][5] == bit_sum(grads[0])
        else:
            assert prints is None
    job = reader.read([torch.tensor([1.0, float("nan")])])
    assert reader.wait(job) == (False, 1)
    with pytest.raises(ValueError, match="gradient 0 was left to Python"):
        reader.packed(job)


@needs_reader
def test_a_job_of_a_few_mib_is_read_at_once_and_a_larger_one_beside():
    """``counters()`` (bench_record.py's counts: hand-overs to the reader's thread, wake-ups, waits that blocked,
    polls, ns reading, ns in all; jobs read at once, ns reading them): a job of at most ``set_inline_bytes`` is read
    in ``read`` itself, on the calling thread, and counted there; a larger one is handed over, counted once, and
    takes the reader's thread some CPU time. Either way its numbers are the gradient's."""
    g = torch.randn(1 << 18)  # 1 MiB
    before = reader.set_inline_bytes(g.numel() * 4)
    try:
        counted = reader.counters()
        job = reader.read([g], False, False, True)
        after = reader.counters()
        assert len(after) == 8 and after[:6] == counted[:6]  # (nothing handed over, nothing woken)
        assert after[6] == counted[6] + 1 and after[7] > counted[7]
        assert reader.wait(job) == (False, 0) and reader.numbers(job)[0][5] == bit_sum(g)
        reader.set_inline_bytes(g.numel() * 4 - 1)
        job = reader.read([g], False, False, True)
        assert reader.wait(job) == (False, 0) and reader.numbers(job)[0][5] == bit_sum(g)
        done = reader.counters()
        assert done[0] == after[0] + 1 and done[1] - after[1] <= 1 and done[6] == after[6]
        assert done[4] > after[4] and done[5] >= done[4]
    finally:
        reader.set_inline_bytes(before)
    with pytest.raises(TypeError, match="expected one int, a number of bytes, got str"):
        reader.set_inline_bytes("4 MiB")


def test_the_reader_polls_only_where_this_ranks_share_of_the_cores_leaves_one(monkeypatch):
    """Polling for the next hand-over takes a core: where torch's threads, and under torchrun every local rank's,
    take all of them (CPU DDP, a rank a core), the reader sleeps until woken instead."""
    with forgeviz.capture() as session:
        recorder = Recorder(session, lambda rank, meta: None)
        recorder._cores = 4
        monkeypatch.setattr("os.cpu_count", lambda: 4)
        monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
        assert recorder._reader_polls()
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # four ranks of one thread on four cores: none to spare
        assert not recorder._reader_polls()
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
        assert recorder._reader_polls()
        monkeypatch.setattr(torch, "get_num_threads", lambda: 2)  # two ranks of two threads
        assert not recorder._reader_polls()
        recorder._cores = 3  # pinned to three of the machine's cores: they are this rank's
        assert recorder._reader_polls()
        recorder._reader.shutdown()


def test_read_takes_each_parameters_grad_itself(reads):
    """``read(params, True)``: the reader takes each parameter's ``.grad`` (the training thread builds no list)."""
    params = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(2))]
    assert reader.read(params, True) is None  # no gradient yet: no job
    params[1].grad = torch.randn(2)
    job = reader.read(params, True)
    assert reader.wait(job) == (False, 0)
    numbers = reader.numbers(job)
    assert numbers[0] is None and numbers[1][4:] == (2, bit_sum(params[1].grad))
    assert numbers[1][3] == pytest.approx(params[1].grad.double().norm().item(), rel=1e-6)
    with pytest.raises(TypeError, match="expected a list"):
        reader.read((params[0],), True)
    with pytest.raises(TypeError, match="item 1 is a str, expected a tensor or None"):
        reader.read([torch.ones(1), "x"])


@needs_reader
@pytest.mark.parametrize("poll", [True, False], ids=["polling", "woken"])
def test_every_hand_over_is_read_at_a_steady_pace_after_a_pause_and_back_to_back(poll, beside):
    """The worker polls for a job due at the hand-overs' pace (``poll``) or sleeps until woken: either way
    each job is read, whether it comes on time, after a pause (its pace then is stale), early, or two at
    once; and its numbers are its gradient's."""
    import time

    params = [torch.nn.Parameter(torch.randn(64, 32)), torch.nn.Parameter(torch.randn(32))]
    gaps = [0.001] * 12 + [0.03] + [0.001] * 6 + [0.0002] * 6 + [0.0] * 4  # steady, a pause, early, back to back
    jobs, waiting = [], []
    for k, gap in enumerate(gaps):
        for p in params:
            p.grad = torch.full_like(p, float(k + 1))  # (the job keeps the last step's .grad)
        job = reader.read(params, True, poll)
        jobs.append(job)
        waiting.append(job)
        if gap:  # a training step: the job waited for at its end, then the next one's gap
            assert all(reader.wait(j) == (False, 0) for j in waiting), k
            waiting = []
            time.sleep(gap)
    assert all(reader.wait(j) == (False, 0) for j in waiting)
    for k, job in enumerate(jobs):
        for p, (lo, hi, total, norm, numel, fp) in zip(params, reader.numbers(job)):
            assert (lo, hi, total, numel) == (k + 1, k + 1, (k + 1) * p.numel(), p.numel()), k
            assert norm == pytest.approx((k + 1) * p.numel() ** 0.5, rel=1e-6)
            assert fp == bit_sum(torch.full_like(p, float(k + 1)))

def _record(folder, model, opt, x, steps: int, native_reader: bool, world: int = 2, before_step=None,
            reuses: bool = False, after_backward=None, native_steps: bool = True):
    """``steps`` training steps recorded into ``folder``, the applied gradients read natively or not, as a rank of
    ``world`` (more than one: the gradients are fingerprinted); ``before_step(step)``, if given, first in each, and
    ``after_backward(step)`` between its backward and its optimizer step. ``reuses``: a step may take the backward's
    summaries of ``.grad`` unchanged since (else, as these tests of the readers want, every step reads).
    ``native_steps``: the hooks' common case in C++ where it is built (False: all in Python)."""

    with forgeviz.capture() as session:
        recorder = _recorder(session, folder)
        if not native_reader:
            recorder._native_reader = None
        recorder.world = world
        recorder._reuses = reuses
        recorder.native_steps = native_steps
        recorder.install()
        applied = _train(model, opt, x, steps, before_step, after_backward)
        recorder.close()
    return forgeviz.open(folder), applied, recorder


def _recorder(session, folder, on_fault=None, **settings) -> Recorder:
    """A Recorder of ``session`` writing rank folders under ``folder`` (its faults to ``on_fault``, by default the
    session's), with ``settings`` (segment_seconds, budget_bytes, …)."""
    from forgeviz.model.run import rank_folder
    from forgeviz.run.writer import RunWriter

    return Recorder(session, lambda rank, meta: RunWriter(folder / rank_folder(rank), meta,
                                                          on_fault or session.fault), **settings)


def _train(model, opt, x, steps: int, before_step=None, after_backward=None, after_step=None) -> list[dict]:
    """``steps`` training steps (numbered from 1; ``before_step(step)``, ``after_backward(step)`` and
    ``after_step(step)`` called where they say, if given); returns each step's ``.grad`` as ``step()`` applied it."""
    applied = []
    for step in range(1, steps + 1):
        if before_step is not None:
            before_step(step)
        loss = model(x).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        if after_backward is not None:
            after_backward(step)
        applied.append({n: p.grad.clone() for n, p in model.named_parameters()})
        opt.step()
        if after_step is not None:
            after_step(step)
    return applied


def _mlp(outputs: int = 3):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, outputs))
    return model, torch.optim.Adam(model.parameters(), lr=0.01), torch.randn(16, 64)


@needs_reader
@pytest.mark.parametrize("world", [2, 1], ids=["ranks", "one rank"])
def test_native_and_python_readers_record_the_same_rows(tmp_path, world):
    frames = []
    for native_reader in (True, False):
        model, opt, x = _mlp()
        run, applied, _ = _record(tmp_path / str(native_reader), model, opt, x, 3, native_reader, world)
        frame = run.frame()
        params = frame[frame["kind"] == "parameter"]
        for step, grads in enumerate(applied, 1):
            rows = params[params["step"] == step].set_index("name")
            assert set(rows.index) == set(grads)
            for name, g in grads.items():
                assert rows.loc[name, "norm"] == pytest.approx(g.norm().item(), rel=1e-6)
                if world > 1:
                    assert rows.loc[name, "fingerprint"] == bit_sum(g)
        if world == 1:  # nothing to compare a fingerprint with: none made
            assert params["fingerprint"].isna().all() and len(params) == 3 * 4
        frames.append(frame[frame["kind"] != "node"].reset_index(drop=True))
    assert frames[0].equals(frames[1])  # every number, bit for bit, and every CRC


def test_fingerprints_begin_when_torch_distributed_starts_after_recording(tmp_path, monkeypatch):
    """mp.spawn's ranks start torch.distributed after recording began (no torchrun variables): a rank is one
    of one until then, so its first steps have no fingerprint; its steps once it has started each have one."""
    from forgeviz._capture import recording

    started = []
    monkeypatch.setattr(recording, "_distributed", lambda: bool(started))
    monkeypatch.setattr(recording, "rank_and_world", lambda: (0, 2) if started else (0, 1))
    model, opt, x = _mlp()

    def before_step(step: int) -> None:
        if step == 3:
            started.append(True)  # init_process_group ran in the script

    run, applied, recorder = _record(tmp_path, model, opt, x, 4, reader is not None, 1, before_step)
    params = run.frame().query("kind == 'parameter'")
    assert run.meta(0)["world_size"] == 2 and recorder.world == 2
    assert params[params["step"] <= 2]["fingerprint"].isna().all()
    for step in (3, 4):
        rows = params[params["step"] == step].set_index("name")
        assert {name: rows.loc[name, "fingerprint"] for name in applied[step - 1]} == {
            name: bit_sum(g) for name, g in applied[step - 1].items()}


def _changed(model, change: str):
    """Changes model[0].weight's .grad after a backward, as ``change`` says (see the test below)."""
    grad = model[0].weight.grad
    if change == "in place":
        grad.mul_(3)
    elif change == ".data":  # (its writes move no version counter of .grad's)
        grad.data.mul_(3)
    elif change == "numpy":
        grad.numpy()[:] *= 3
    elif change == "replaced":
        model[0].weight.grad = grad * 3
    elif change == "clipped":
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    elif change == "AMP's unscale":  # (GradScaler.unscale_'s op: it writes .grad and moves no version counter)
        torch._amp_foreach_non_finite_check_and_unscale_([grad], torch.zeros(1), torch.tensor(3.0))
    elif change == "another backward":  # (of model[2] alone: the pass before it summarised model[0]'s .grad)
        model[2](torch.randn(16, 96)).sum().backward()


def _tripled(parameter) -> None:
    parameter.grad.mul_(3)  # a post-accumulate hook: inside backward, after AccumulateGrad, before the Node's hooks


@needs_reader
@pytest.mark.parametrize("summaries", ["native", "device"])
@pytest.mark.parametrize("change", [None, "in place", ".data", "numpy", "replaced", "clipped", "AMP's unscale",
                                    "another backward", "post-accumulate hook"])
def test_a_step_reads_grad_again_only_where_it_may_have_changed_since_backward(tmp_path, monkeypatch, change,
                                                                                summaries):
    """With one rank, a step whose ``.grad`` tensors are those the backward before it summarised, at the same
    versions, with no in-place op since and none of their memory handed out (``.data``, ``numpy()``: writes there
    move no version; nor does AMP's unscale), has that backward's numbers as its rows, and nothing is read again; a
    ``.grad`` changed in any of those ways, or by a post-accumulate hook inside backward, is read again at the step.
    Either way every row is torch's ``.grad`` as ``step()`` applies it. On the device path (a GPU's, run here on the
    CPU with FORGEVIZ_SUMMARIES=device) the backward's summaries are taken, and the step launches none."""
    if summaries == "device":
        monkeypatch.setenv("FORGEVIZ_SUMMARIES", "device")
    model, opt, x = _mlp()
    if change == "post-accumulate hook":
        model[0].weight.register_post_accumulate_grad_hook(_tripled)
    run, applied, recorder = _record(tmp_path, model, opt, x, 3, True, 1, reuses=True,
                                     after_backward=lambda step: change and _changed(model, change))
    assert recorder.reused == (3 if change is None else 0)
    if summaries == "device":  # the step's own summaries (DeviceSummaries, made at the first step that launches)
        assert (recorder._device_params is None) == (change is None)
    params = run.frame().query("kind == 'parameter'")
    for step, grads in enumerate(applied, 1):
        rows = params[params["step"] == step].set_index("name")
        assert set(rows.index) == set(grads)
        for name, g in grads.items():
            assert rows.loc[name, "norm"] == pytest.approx(g.norm().item(), rel=1e-6)
            assert (rows.loc[name, "min"], rows.loc[name, "max"]) == (g.min().item(), g.max().item())
            assert rows.loc[name, "mean"] == pytest.approx(g.mean().item(), rel=1e-6, abs=1e-9)
        assert rows["fingerprint"].isna().all()  # (one rank: nothing to compare)


@needs_reader
@needs_hooks
@pytest.mark.parametrize("world", [1, 2], ids=["one rank", "a rank of two"])
def test_the_hooks_common_case_in_cpp_records_what_the_python_hooks_record(tmp_path, monkeypatch, world):
    """grad_hooks.cpp's ``record_*`` hooks do a recorded step's common case (CPU gradients, no segment due; one rank:
    ``.grad`` as the backward left it; a rank of several: every ``.grad`` handed to the native reader, and its job
    waited for at the step's end) and hand the rest to the Recorder's methods. The same training run recorded with
    them and without, with steps that leave the common case (``.grad`` handed out through ``.data``, a second backward
    before a step, clipped gradients, a segment due every few steps), writes the same rows bit for bit, and its
    parameters' rows are torch's ``.grad`` as ``step()`` applied it (as a rank of two, fingerprinted: the exact sum of
    its bit patterns); with them, Python runs only for those steps."""
    from forgeviz._capture import recording

    monkeypatch.setattr(recording, "SEGMENT_ROWS", 40)  # (about twelve rows a step: a segment every third step or so)
    events = {3: ".data", 5: "another backward", 7: "clipped"}
    in_python: dict[bool, list] = {True: [], False: []}
    for name in ("_step_begins", "_step_ends", "_after_backward"):
        def counted(self, *args, _method=getattr(Recorder, name), _name=name):
            in_python[self.native_steps].append((_name, self.step))
            return _method(self, *args)

        monkeypatch.setattr(Recorder, name, counted)
    frames, reused = {}, {}
    for native_steps in (True, False):
        # (16 × 8 outputs: more than chain.SMALL, so no Node's gradients go to a Python hook, which Python records)
        model, opt, x = _mlp(8)
        run, applied, recorder = _record(tmp_path / str(native_steps), model, opt, x, 8, True, world, reuses=True,
                                         after_backward=lambda step: step in events and _changed(model, events[step]),
                                         native_steps=native_steps)
        frame = run.frame()
        params = frame.query("kind == 'parameter'")
        for step, grads in enumerate(applied, 1):
            rows = params[params["step"] == step].set_index("name")
            assert set(rows.index) == set(grads), step
            for name, g in grads.items():
                assert rows.loc[name, "norm"] == pytest.approx(g.norm().item(), rel=1e-6)
                assert (rows.loc[name, "min"], rows.loc[name, "max"]) == (g.min().item(), g.max().item())
                if world > 1:
                    assert rows.loc[name, "fingerprint"] == bit_sum(g)
            assert rows["fingerprint"].isna().all() == (world == 1)
        assert sorted(frame.query("kind == 'node'")["step"].unique()) == list(range(1, 9))
        frames[native_steps], reused[native_steps] = frame, recorder.reused
    assert frames[True].equals(frames[False])  # every row, every number, bit for bit
    python_steps = {name: {step for called, step in in_python[True] if called == name}
                    for name in ("_step_begins", "_step_ends", "_after_backward")}
    if world == 1:
        assert reused == {True: 5, False: 5}  # (steps 1, 2, 4, 6, 8: the others' .grad may have changed since backward)
        assert python_steps["_step_begins"] == {1, 3, 5, 7}  # the first (what it learns once), and each changed .grad
    else:  # (every step reads .grad as the all-reduce left it: the changes are read as any step's)
        assert reused == {True: 0, False: 0}
        assert python_steps["_step_begins"] == {1}
    assert python_steps["_after_backward"] == {1, 5}  # each graph's first pass, and a backward with no step since
    assert len(python_steps["_step_ends"]) < 8  # (the steps whose end writes a segment)
    assert len(in_python[False]) == 3 * 8 + 1  # (and the second backward's)


@needs_hooks
def test_rows_waiting_for_their_segment_stay_out_of_the_cyclic_gc(tmp_path, monkeypatch):
    """The C++ hooks' rows and row builders (every step's but the first) wait for their segment untracked by the
    cyclic GC (each one tracked was promoted to its oldest generation while it waited, and a few a step set off full
    collections, ~200 ms under the GIL); they hold no cycle, and a full collection while they wait loses none."""
    import gc

    from forgeviz._capture import recording
    from forgeviz.model.run import GRADS, STEPS

    monkeypatch.setattr(recording, "SEGMENT_ROWS", 10**9)  # (no segment until the end)
    model, opt, x = _mlp(8)
    with forgeviz.capture() as session:
        recorder = _recorder(session, tmp_path, segment_seconds=3600)
        recorder.install()
        applied = _train(model, opt, x, 12)
        waiting = {key: list(recorder._rows[key]) for key in (GRADS, STEPS)}
        tracked = [(getattr(item, "func", None), item[0] if type(item) is tuple else item.args[0])
                   for items in waiting.values() for item in items
                   if gc.is_tracked(item) or gc.is_tracked(getattr(item, "args", ()))]
        gc.collect()
        recorder.close()
    builders = [item for item in waiting[GRADS] if type(item) is not tuple]
    assert len(builders) >= 2 * 10 and len(waiting[STEPS]) >= 10  # (the C++ hooks took steps 2 to 12 at least)
    # (only the first step's, which the Recorder's Python methods made: what it learns once)
    assert tracked == [(recording._node_rows, 1), (recording._leaf_rows, 1)], tracked
    frame = forgeviz.open(tmp_path).frame()
    params = frame.query("kind == 'parameter'")
    for step, grads in enumerate(applied, 1):
        rows = params[params["step"] == step].set_index("name")
        for name, g in grads.items():
            assert rows.loc[name, "norm"] == pytest.approx(g.norm().item(), rel=1e-6)
    assert sorted(frame.query("kind == 'node'")["step"].unique()) == list(range(1, 13))


def _thinned(meta: dict, steps: int) -> list[int]:
    """The steps whose gradients a recording of ``steps`` steps keeps by its metadata: each step until the first
    ``downsampled`` mark, then every stride-th step (counted from step 1), none from ``over_budget_from_step``."""
    kept = []
    for step in range(1, steps + 1):
        if meta["over_budget_from_step"] is not None and step >= meta["over_budget_from_step"]:
            break
        stride = max([1] + [by for since, by in meta["downsampled"] if step >= since])
        if (step - 1) % stride == 0:
            kept.append(step)
    return kept


@needs_hooks
@pytest.mark.parametrize("native_steps", [True, False], ids=["hooks in C++", "hooks in Python"])
def test_gradients_past_half_the_budget_are_thinned_then_dropped_with_either_hooks(tmp_path, monkeypatch,
                                                                                   native_steps):
    """Past half its size budget a recording keeps every second step's gradients, past three quarters every fourth,
    and past the budget none (what a segment written finds: Recorder._budget, in Python). The C++ hooks' common case
    records each step only while nothing is thinned (Recorder._plain), so both keep the steps the metadata names,
    each with torch's ``.grad`` as ``step()`` applied it."""
    import time

    from forgeviz._capture import recording
    from forgeviz.run.writer import RunWriter

    monkeypatch.setattr(recording, "SEGMENT_ROWS", 40)  # (about twelve rows a step: a segment every third step or so)
    in_python, queued = [], []
    slow, submit = Recorder._after_backward, RunWriter.submit
    monkeypatch.setattr(Recorder, "_after_backward",
                        lambda self, roots: in_python.append(self.step) or slow(self, roots))
    monkeypatch.setattr(RunWriter, "submit", lambda self, *segment: queued.append(submit(self, *segment)) or queued[-1])
    model, opt, x = _mlp(8)
    with forgeviz.capture() as session:
        recorder = _recorder(session, tmp_path, budget_bytes=20_000, segment_seconds=3600.0)
        recorder.native_steps = native_steps
        recorder.install()

        def caught_up(step: int) -> None:
            # the budget counts what is written: a writer left behind would drop segments (each one queued: written,
            # or dropped as its rows failed)
            waited = time.monotonic()
            while recorder.writer.segments + recorder.writer.dropped < sum(queued) and time.monotonic() < waited + 30:
                time.sleep(0.001)

        applied = _train(model, opt, x, 40, after_step=caught_up)
        recorder.close()
    run = forgeviz.open(tmp_path)
    meta = run.meta(0)
    assert meta["dropped_segments"] == 0 and len(meta["downsampled"]) >= 2, meta  # (it got that far)
    assert meta["over_budget_from_step"] is not None, meta
    kept = _thinned(meta, 40)
    assert run.gradient_steps(0) == kept and 2 in kept and kept[-1] < 39
    params = run.frame().query("kind == 'parameter'")
    assert sorted(params["step"].unique()) == kept
    for step in kept:
        rows = params[params["step"] == step].set_index("name")
        for name, g in applied[step - 1].items():
            assert rows.loc[name, "norm"] == pytest.approx(g.norm().item(), rel=1e-6), (step, name)
    assert (len(in_python) < 40) == native_steps  # (C++: the first pass, and each one after a step that thinned)


def _kept_while_behind(meta: dict, steps: int) -> list[int]:
    """The oracle of a writer that fell behind: the steps the metadata's ``writer_thinned`` keeps (each entry's
    stride holds from its step until the next entry), less those ``dropped_steps`` gave up."""
    kept = []
    for step in range(1, steps + 1):
        stride = ([1] + [by for since, by in meta.get("writer_thinned", []) if step >= since])[-1]
        dropped = any(first <= step <= last for first, last, table in meta.get("dropped_steps", []) if table == "grads")
        if (step - 1) % stride == 0 and not dropped:
            kept.append(step)
    return kept


class _Grows(torch.nn.Module):
    """The MLP, its output squashed by tanh once ``grown``: another graph from then on."""

    def __init__(self) -> None:
        super().__init__()
        self.net, _, _ = _mlp(8)
        self.grown = False

    def forward(self, x):
        y = self.net(x)
        return y.tanh() if self.grown else y


def _stalled_writer(monkeypatch, steps: int, stalled: range, tmp_path, native_steps: bool = True,
                    grows_at: int = 0):
    """``steps`` recorded training steps (the MLP's; from ``grows_at`` on, if given, another graph) whose writer
    thread is stalled (a disk that stops answering) from the first segment until the step after ``stalled`` ends,
    then writes on; each step after that waits for it to catch up. Returns (each step's applied gradients, the
    recorder, the tables the writer thread wrote, in turn)."""
    import threading
    import time

    from forgeviz._capture import recording
    from forgeviz.run.writer import RunWriter

    monkeypatch.setattr(recording, "SEGMENT_ROWS", 40)  # (about twelve rows a step: a segment every third step or so)
    disk = threading.Event()
    append = RunWriter._append
    taken = []

    def stalled_append(self, table, columns):
        disk.wait(60)
        taken.append(table)
        return append(self, table, columns)

    monkeypatch.setattr(RunWriter, "_append", stalled_append)
    _, _, x = _mlp(8)
    model = _Grows()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    with forgeviz.capture() as session:
        recorder = _recorder(session, tmp_path, segment_seconds=3600.0)
        recorder.native_steps = native_steps
        recorder.install()

        def writer_answers(step: int) -> None:
            if step + 1 not in stalled:
                disk.set()
                waited = time.monotonic()
                while recorder.writer.backlog > 0 and time.monotonic() < waited + 30:
                    time.sleep(0.001)

        applied = _train(model, opt, x, steps, after_step=writer_answers,
                         before_step=lambda step: setattr(model, "grown", step == grows_at or model.grown))
        disk.set()
        recorder.close()
    return applied, recorder, taken


@needs_hooks
@pytest.mark.parametrize("native_steps", [True, False], ids=["hooks in C++", "hooks in Python"])
def test_a_writer_that_falls_behind_loses_nothing_the_recording_thins_then_catches_up(tmp_path, monkeypatch,
                                                                                      native_steps):
    """A writer whose disk stops answering for 120 steps: its queue fills (16 segments), and what it cannot take is
    held back and handed over with the next segment, not dropped; meanwhile the recording keeps every second step's
    gradients, then every fourth, … (the metadata's ``writer_thinned``), and once the writer has caught up, every
    second step's, and so on back to every step's. Every step's row, both graphs (the second one new while the
    queue was full) and the kept steps' gradients (torch's, as ``step()`` applied them) are in the file, and a step
    thinned out says why."""
    applied, recorder, taken = _stalled_writer(monkeypatch, 240, range(1, 121), tmp_path, native_steps, grows_at=105)
    run = forgeviz.open(tmp_path)
    meta = run.meta(0)
    assert meta["dropped_segments"] == 0 and "dropped_steps" not in meta and run.problems == [], meta
    thinned = meta["writer_thinned"]
    # a step thinner at each segment while the writer was stalled, to every 16th step, then a step back at each once
    # it answered, to every step
    assert [by for _, by in thinned] == [2, 4, 8, 16, 8, 4, 2, 1], thinned
    assert thinned[3][0] <= 121 < thinned[4][0], thinned
    assert run.steps == list(range(1, 241))  # every step's row, held back while the queue was full
    kept = _kept_while_behind(meta, 240)
    assert run.gradient_steps(0) == kept and len(kept) < 200 and kept[-3:] == [238, 239, 240]
    params = run.frame().query("kind == 'parameter'")
    for step in kept:
        rows = params[params["step"] == step].set_index("name")
        for name, g in applied[step - 1].items():
            assert rows.loc[name, "norm"] == pytest.approx(g.norm().item(), rel=1e-6), (step, name)
        graph, trait = run.graph_at(step, 0)  # (the second while the queue was full: held back, then written)
        assert graph == (step >= 105) and ("TanhBackward0" in json.dumps(trait)) == (step >= 105)
    thinned_out = next(step for step in range(1, 241) if step not in kept)
    assert "the writer fell behind the training loop" in run.why_no_step(0, thinned_out)
    assert (f"rank 0's gradients thinned: from step {thinned[0][0]} to {thinned[-1][0] - 1} the writer fell behind "
            "the training loop and every 2nd to every 16th step was kept") in run.header()
    assert taken.count("graphs") == 2 and len(taken) == recorder.writer.segments


def test_a_disk_that_fills_mid_run_stops_writing_and_nothing_is_held_for_it(tmp_path, monkeypatch):
    """The disk fills at the fourth segment: writing stops with one fault that says so, what was written stays
    readable, and the recorder neither holds rows back for a writer that takes no more nor thins what it records
    (its queue empty, not behind); training's numbers are as without forgeviz."""
    import errno
    import time

    from forgeviz._capture import recording
    from forgeviz.run.writer import RunWriter

    monkeypatch.setattr(recording, "SEGMENT_ROWS", 40)
    append, written = RunWriter._append, []

    def filling(self, table, columns):
        if len(written) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(table)
        return append(self, table, columns)

    monkeypatch.setattr(RunWriter, "_append", filling)
    model, opt, x = _mlp(8)
    plain = _train(*_mlp(8), 60)
    faults = []
    with forgeviz.capture() as session:
        recorder = _recorder(session, tmp_path, faults.append, segment_seconds=3600.0)
        recorder.install()

        def written_or_stopped(step: int) -> None:  # (a writer on a loaded machine is not the disk falling behind)
            waited = time.monotonic()
            while recorder.writer.backlog > 0 and not recorder.writer.broken and time.monotonic() < waited + 30:
                time.sleep(0.001)

        applied = _train(model, opt, x, 60, after_step=written_or_stopped)
        assert recorder._held == {} and recorder.writer_thinned == [] and recorder.stride == 1
        recorder.close()
    assert all(torch.equal(a[name], b[name]) for a, b in zip(applied, plain) for name in a)
    [fault] = faults  # (told once)
    assert re.fullmatch(rf"writing the (grads|steps|graphs) stream in {re.escape(str(tmp_path / 'rank0'))} failed: "
                        r"OSError: \[Errno 28\] No space left on device; recording stopped, training goes on", fault)
    with pytest.warns(UserWarning, match="No space left on device"):
        run = forgeviz.open(tmp_path)
    meta = run.meta(0)
    assert meta["dropped_segments"] == 0 and "writer_thinned" not in meta and "dropped_steps" not in meta, meta
    assert run.gradient_steps(0) and max(run.gradient_steps(0)) < 60


def test_a_disk_slow_to_answer_gets_fewer_larger_segments_before_anything_is_thinned(tmp_path, monkeypatch):
    """Each write 20 ms late (a disk slow to answer, not slow to fill), segments asked for every 10 ms: while the
    queue is behind, the small segments the clock makes come twice as far apart at each hand-over, and the
    gradient rows are thinned only once they are 16 times as far apart; no row is lost, and as the writer catches
    up the spacing comes back."""
    import time

    from forgeviz._capture import recording
    from forgeviz.run.writer import RunWriter

    append = RunWriter._append
    monkeypatch.setattr(RunWriter, "_append", lambda self, *segment: time.sleep(0.02) or append(self, *segment))
    paces = []  # (spacing, stride, segment_seconds, the stride before, the segment's rows) at each hand-over
    keep_pace = Recorder._keep_pace

    def kept_pace(self, backlog, handed):
        before = self._lag_stride
        keep_pace(self, backlog, handed)
        paces.append((self._lag_spacing, self._lag_stride, self.segment_seconds, before, handed))

    monkeypatch.setattr(Recorder, "_keep_pace", kept_pace)
    model, opt, x = _mlp(8)
    with forgeviz.capture() as session:
        recorder = _recorder(session, tmp_path, segment_seconds=0.01)
        recorder.install()
        applied = _train(model, opt, x, 600)
        recorder.close()
    run = forgeviz.open(tmp_path)
    meta = run.meta(0)
    assert meta["dropped_segments"] == 0 and run.steps == list(range(1, 601)), meta
    assert max(spacing for spacing, *_ in paces) >= 4, paces
    # thinned only once segments were 16 times as far apart, or large (half SEGMENT_ROWS: a fast machine's steps)
    assert all(spacing == 16 or handed >= recording.SEGMENT_ROWS // 2
               for spacing, stride, _, before, handed in paces if stride > before), paces
    assert all(seconds == pytest.approx(0.01 * spacing) for spacing, _, seconds, *_ in paces)
    kept = _kept_while_behind(meta, 600)
    assert run.gradient_steps(0) == kept
    params = run.frame().query("kind == 'parameter'").set_index(["step", "name"])
    for step in kept:
        for name, g in applied[step - 1].items():
            assert params.loc[(step, name), "norm"] == pytest.approx(g.norm().item(), rel=1e-6), (step, name)


@needs_hooks
def test_rows_held_back_past_their_bound_are_given_up_oldest_first_and_named(tmp_path, monkeypatch):
    """A writer stalled for 150 steps with room held back for 60 rows a stream: the oldest held segments are given
    up (counted, and their steps named in the metadata and in what opening the run says), the rows held since are
    written once the writer answers, and every step outside what was given up has its row and, if kept, torch's
    gradients."""
    from forgeviz._capture import recording

    monkeypatch.setattr(recording, "HELD_ROWS", 60)
    applied, _, _ = _stalled_writer(monkeypatch, 180, range(1, 151), tmp_path)
    with pytest.warns(UserWarning, match="dropped while recording"):
        run = forgeviz.open(tmp_path)
    meta = run.meta(0)
    dropped = meta["dropped_steps"]
    assert meta["dropped_segments"] == len(dropped) > 0 and {table for *_, table in dropped} <= {"grads", "steps"}
    assert all(first <= last <= 151 for first, last, _ in dropped), dropped
    [problem] = run.problems
    assert "segment(s) were dropped while recording" in problem
    assert all(f"{table} rows of steps {first}…{last}" in problem for first, last, table in dropped), problem
    lost = {step for first, last, table in dropped if table == "steps" for step in range(first, last + 1)}
    assert run.steps == [step for step in range(1, 181) if step not in lost]
    kept = _kept_while_behind(meta, 180)
    assert run.gradient_steps(0) == kept and kept[-1] > 170
    # the oldest went: the rows held last before the writer answered were written
    assert max(last for _, last, table in dropped if table == "grads") < max(k for k in kept if k <= 151)
    params = run.frame().query("kind == 'parameter'")
    for step in kept:
        rows = params[params["step"] == step].set_index("name")
        for name, g in applied[step - 1].items():
            assert rows.loc[name, "norm"] == pytest.approx(g.norm().item(), rel=1e-6), (step, name)
    first, last = next((first, last) for first, last, table in dropped if table == "grads")
    assert f"the rows of steps {first}…{last} were dropped: the writer fell behind" in run.why_no_step(0, first)


class _NaNAt(torch.nn.Module):
    """An MLP whose backward goes NaN while ``poisoned``: sqrt's derivative at 0 is infinite, times 0."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2))
        self.poisoned = False

    def forward(self, x):
        y = self.net(x)
        return y + (y[:, :1] * 0).sqrt() if self.poisoned else y


@needs_reader
def test_a_step_that_took_the_device_summaries_of_nan_gradients_has_its_finding(tmp_path, monkeypatch):
    """On the device path a step that took its backward's summaries (one rank) learns they are not finite only
    from the pass's read-back: the segment's writing waits for it, and the finding names the step's first
    parameter and its step, as when the step summarised them itself. The read-back is held back until waited
    for, as a GPU's copy lags (on the CPU it is done at once, and a pass found NaN is read at once)."""
    from forgeviz._capture.device_summary import DeviceSummaries

    monkeypatch.setenv("FORGEVIZ_SUMMARIES", "device")
    poll = DeviceSummaries.poll
    monkeypatch.setattr(DeviceSummaries, "poll", lambda self: not self._reading)  # the copy never done...
    monkeypatch.setattr(DeviceSummaries, "wait", lambda self: poll(self))  # ...until waited for
    torch.manual_seed(0)
    model = _NaNAt()
    run, applied, recorder = _record(tmp_path, model, torch.optim.SGD(model.parameters(), lr=0.1), torch.randn(4, 8),
                                     2, True, 1, reuses=True, before_step=lambda step: setattr(model, "poisoned",
                                                                                              step == 2))
    assert recorder.reused == 2 and recorder._device_params is None
    assert all(g.isfinite().all() for g in applied[0].values()) and all(g.isnan().any() for g in applied[1].values())
    [finding] = [f for f in run.findings if f.parameter is not None]
    assert (finding.kind, finding.step, finding.parameter, finding.module) == ("nonfinite-grad", 2, "net.0.weight",
                                                                               "net.0")
    params = run.frame().query("kind == 'parameter'").set_index(["step", "name"])
    for step, grads in enumerate(applied, 1):
        for name, g in grads.items():
            assert params.loc[(step, name), "norm"] == pytest.approx(g.norm().item(), rel=1e-6, nan_ok=True)


def _halve_grads(optimizer, args, kwargs):
    """Changes ``.grad`` in place inside ``step()`` (as foreach Nesterov SGD does): an optimizer's own step
    pre-hook runs after the global one that hands the gradients to the reader."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad.mul_(0.5)


@pytest.mark.parametrize("native_reader", [True, False] if reader is not None else [False])
def test_gradients_changed_inside_step_are_dropped_then_read_before_it(tmp_path, native_reader):
    model, _, x = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    opt.register_step_pre_hook(_halve_grads)
    run, applied, recorder = _record(tmp_path / "run", model, opt, x, 3, native_reader)  # (CRCs: what was read)
    assert recorder.torn_steps == [1]
    params = run.frame().query("kind == 'parameter'")
    assert sorted(set(params["step"])) == [2, 3]  # step 1 left out, then read before step() changes them
    for step in (2, 3):
        rows = params[params["step"] == step].set_index("name")
        for name, g in applied[step - 1].items():  # (read before the halving)
            assert rows.loc[name, "fingerprint"] == bit_sum(g)



def test_rows_built_on_the_writer_thread_that_fail_are_a_fault_and_writing_goes_on(tmp_path):
    """The recorder hands the writer functions that build a segment's rows (grads_segment, given the writer's
    Breather): one that raises is forgeviz's fault, said once, and only that segment is lost; later segments are
    written and read."""
    from forgeviz.model.run import GRADS
    from forgeviz.run.writer import RunWriter

    faults = []
    writer = RunWriter(tmp_path / "rank0", {"rank": 0, "world_size": 1, "format": "forgeviz-run",
                                            "format_version": 1}, faults.append)

    def broken(breathe):
        raise KeyError("no such parameter")

    row = (1, "parameter", "w", "fc", 5.0, -1.0, 4.0, 1.5, 2, 123, False, None, None)
    assert writer.submit(GRADS, broken)
    assert writer.submit(GRADS, lambda breathe: [row])
    writer.close({"finished": True})
    assert writer.dropped == 1 and writer.segments == 1 and not writer.broken
    assert faults == ["building a segment of the grads stream failed: KeyError: 'no such parameter'; that segment "
                      "is left out, recording goes on"]
    import pyarrow as pa

    with pa.OSFile(str(tmp_path / "rank0" / "grads.arrows"), "rb") as f:
        table = pa.ipc.open_stream(f).read_all()
    assert table.num_rows == 1 and table.column("fingerprint").to_pylist() == [123]


def test_a_disk_that_stops_answering_costs_the_exit_its_timeout_not_a_hang(tmp_path, monkeypatch):
    """The writer's thread stuck in a write (a hung network disk): a full queue takes no more segments (the caller
    keeps them: submit says False at once), and closing gives up after its timeout with a fault that says so, rather
    than waiting on the queue for ever; the segment written before the stall stays readable."""
    import threading
    import time

    import pyarrow as pa

    from forgeviz.model.run import STEPS
    from forgeviz.run.writer import QUEUE_SEGMENTS, RunWriter

    faults, disk, append = [], threading.Event(), RunWriter._append
    writer = RunWriter(tmp_path / "rank0", {"rank": 0}, faults.append)
    assert writer.submit(STEPS, [(1, 0.5, None, None)])
    waited = time.monotonic()
    while writer.segments == 0 and time.monotonic() < waited + 30:
        time.sleep(0.001)
    monkeypatch.setattr(RunWriter, "_append", lambda self, *segment: disk.wait(60) and append(self, *segment))
    taken = [writer.submit(STEPS, [(step, 0.5, None, None)]) for step in range(2, QUEUE_SEGMENTS + 10)]
    # (the thread holds one in its stuck write: the queue then takes QUEUE_SEGMENTS more, and no other)
    assert taken.count(True) in (QUEUE_SEGMENTS, QUEUE_SEGMENTS + 1) and taken[-1] is False and writer.backlog == 1.0
    started = time.monotonic()
    writer.close({"finished": True}, timeout=0.5)
    assert time.monotonic() - started < 10
    assert faults == ["finishing the writes failed: TimeoutError: the disk took no segment for 0.5 s; recording "
                      "stopped, training goes on"]
    # read while the write is still stuck: once the disk answers, the thread appends the next segment as this
    # reads, and a stream read mid-append ends in a partial message (a loaded CI machine met that race)
    try:
        with pa.OSFile(str(tmp_path / "rank0" / "steps.arrows"), "rb") as f:
            assert pa.ipc.open_stream(f).read_all().column("step").to_pylist() == [1]
    finally:
        disk.set()


@needs_reader
def test_a_step_with_a_gradient_left_to_python_keeps_every_row_in_order(tmp_path):
    """At step 2 a weight's gradient is a lazy negation (a neg view: its memory holds the values' negatives, which
    the native reader leaves to Python, as it does another dtype or a gradient that is not finite): that step's
    rows are built on the training thread,
    the other steps' on the writer's (from the numbers the native job keeps), and every row is torch's, in step
    order."""

    model, opt, x = _mlp()

    def negated(step: int) -> None:
        if step == 2:
            w = model[0].weight
            w.grad = torch._neg_view(-w.grad)  # the same values, negated in memory
            assert w.grad.is_neg() and reader.fingerprint(w.grad) is None

    with forgeviz.capture() as session:
        recorder = _recorder(session, tmp_path)
        recorder.world = 2  # (a rank of two: fingerprinted)
        recorder.install()
        applied = _train(model, opt, x, 3, after_backward=negated)
        recorder.close()
    frame = forgeviz.open(tmp_path).frame()
    params = frame[frame["kind"] == "parameter"]
    for step, grads in enumerate(applied, 1):
        rows = params[params["step"] == step].set_index("name")
        assert set(rows.index) == set(grads)
        for name, g in grads.items():
            assert rows.loc[name, "norm"] == pytest.approx(g.double().norm().item(), rel=1e-6)
            assert rows.loc[name, "fingerprint"] == bit_sum(g)
    modules = frame[frame["kind"] == "module"]
    assert sorted(set(modules["step"])) == [1, 2, 3] and set(modules["name"]) == {"0", "2"}
    assert list(frame["step"]) == sorted(frame["step"])  # each step's rows together, in step order
