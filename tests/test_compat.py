"""The compatibility suite (issue 26, SCENARIOS.md T2): the everyday training features of torch, each
run as one seeded training step with forgeviz off and on, bit-identical both ways.

"On" is each way a user turns forgeviz on: a notebook cell under ``%load_ext forgeviz`` (a real IPython
shell, cell hooks firing), ``with forgeviz.capture():`` and ``with forgeviz.memory_trace():``. Each arm
must have recorded something (a backward pass, tagged Nodes, memory events), or the test could pass with
forgeviz silently off, and none may log a forgeviz fault.

``test_every_scenario_in_one_process`` runs them all one after another, compile first (Dynamo leaves its
fake tensors behind, which once broke the memory trace of every later step), so that state one feature
leaves behind and the next trips over is caught. The two-process DDP and FSDP2 checks are in
``compat_ranks.py``, started here.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Callable

import pytest
import torch
from torch.overrides import TorchFunctionMode

import forgeviz
from forgeviz._capture import native
from forgeviz._capture.session import get_session
from forgeviz.model.memory import ALLOC

HAS_CXX = shutil.which(os.environ.get("CXX", "g++")) is not None or shutil.which("c++") is not None
NO_CXX = "inductor needs a C++ compiler (./dev.sh test installs g++)"


# --- the scenarios: each a seeded training step returning its results by name ---------------------

def _mlp(width: int = 16) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.GELU(), torch.nn.Linear(width, 4))


def _batch(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _step(model: torch.nn.Module, loss: torch.Tensor, out: torch.Tensor, lr: float = 0.1, **more) -> dict:
    """Backward, one SGD step, then what a user would compare: output, loss, grads, stepped parameters."""
    loss.backward()
    return _finish(model, out=out, loss=loss, **more)


def _finish(model: torch.nn.Module, lr: float = 0.1, **results) -> dict:
    """One SGD step on the grads the model holds, and every result by name (detached copies)."""
    for name, p in model.named_parameters():
        results[f"grad.{name}"] = p.grad
    torch.optim.SGD(model.parameters(), lr=lr).step()
    for name, p in model.named_parameters():
        results[f"param.{name}"] = p
    return {k: v.detach().clone() for k, v in results.items()}


def _compiled(backend: str) -> dict:
    torch._dynamo.reset()  # each run compiles afresh: the same graphs off and on
    model = _mlp()
    compiled = torch.compile(model, backend=backend)
    out = compiled(_batch(16, 8))
    return _step(model, out.square().mean(), out)


def compile_aot_eager() -> dict:
    return _compiled("aot_eager")


def compile_inductor() -> dict:
    return _compiled("inductor")


def _checkpointed(reentrant: bool) -> dict:
    from torch.utils.checkpoint import checkpoint

    model = _mlp()
    x = _batch(16, 8).requires_grad_()  # reentrant checkpointing needs an input that requires grad
    out = checkpoint(model, x, use_reentrant=reentrant)
    return _step(model, out.square().mean(), out, x_grad=x)


def checkpoint_reentrant() -> dict:
    return _checkpointed(True)


def checkpoint_non_reentrant() -> dict:
    return _checkpointed(False)


def autocast_bf16() -> dict:
    model = _mlp()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(_batch(16, 8))
        loss = out.float().square().mean()
    return _step(model, loss, out)


def vmap_grad() -> dict:
    """Per-sample gradients with torch.func, then a step on their mean."""
    from torch.func import functional_call, grad, vmap

    model = _mlp()
    params = {k: v.detach() for k, v in model.named_parameters()}
    x, y = _batch(6, 8), _batch(6, 4, seed=2)

    def loss_of(p, xi, yi):
        return torch.nn.functional.mse_loss(functional_call(model, p, (xi[None],)), yi[None])

    per_sample = vmap(grad(loss_of), in_dims=(None, 0, 0))(params, x, y)
    for name, p in model.named_parameters():
        p.grad = per_sample[name].mean(0)
    x.requires_grad_()
    out = model(x)  # and an eager backward, into the input only: the pass a capture records
    (x_grad,) = torch.autograd.grad(out.square().sum(), x)
    return _finish(model, out=out, x_grad=x_grad, **{f"per_sample.{k}": v for k, v in per_sample.items()})


def double_backward() -> dict:
    """A gradient penalty: create_graph=True, then backward through the first gradient."""
    model = _mlp()
    x = _batch(16, 8).requires_grad_()
    out = model(x)
    (gx,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    loss = out.square().mean() + gx.square().sum()
    return _step(model, loss, out, gx=gx)


def sparse_embedding() -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(20, 6, sparse=True), torch.nn.Linear(6, 3))
    out = model(torch.tensor([[1, 4, 4, 7], [0, 4, 19, 2]]))
    loss = out.square().mean()
    loss.backward()
    assert model[0].weight.grad.is_sparse
    return _finish(model, out=out, loss=loss)


def user_hooks() -> dict:
    """Tensor hooks that change a gradient, module pre/forward/backward hooks, a post-accumulate hook."""
    model = _mlp()
    seen = []
    model[0].register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    model[1].register_forward_hook(lambda m, args, out: out + 0.5)
    model[2].register_full_backward_hook(lambda m, gin, gout: (gin[0] * 3,))
    model[2].weight.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.clone()))
    out = model(_batch(16, 8))
    out.register_hook(lambda g: g.flip(0))
    result = _step(model, out.square().mean(), out)
    result["post_accumulate_seen"] = seen[0]
    return result


def anomaly_mode() -> dict:
    model = _mlp()
    with torch.autograd.detect_anomaly():
        out = model(_batch(16, 8))
        return _step(model, out.square().mean(), out)


def anomaly_nan() -> dict:
    """Anomaly mode's own error (a backward that makes NaN): raised as it is, same type and message."""
    model = _mlp()
    with torch.autograd.detect_anomaly(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anomaly mode's "Error detected in DivBackward0" with the forward's trace
        out = model(_batch(16, 8))
        loss = (torch.zeros(()) / torch.zeros(())) * out.sum()  # 0/0: DivBackward0 returns NaN
        loss.backward()
    raise AssertionError("anomaly mode let a NaN backward pass")


class _OpCount(TorchFunctionMode):
    """A user's own mode: counts what it sees and scales every GELU's output by 1.5."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += 1
        out = func(*args, **(kwargs or {}))
        return out * 1.5 if func is torch.nn.functional.gelu else out


def torch_function_mode() -> dict:
    model = _mlp()
    mode = _OpCount()
    with mode:
        out = model(_batch(16, 8))
        loss = out.square().mean()
    result = _step(model, loss, out)
    result["ops_the_mode_saw"] = torch.tensor(mode.count)
    return result


def device_context() -> dict:
    with torch.device("cpu"):
        model = _mlp()
        out = model(_batch(16, 8))
        result = _step(model, out.square().mean(), out, extra=torch.ones(3).cumsum(0))
    return result


class _Logged(torch.Tensor):
    """A ``__torch_function__`` subclass that keeps its type through ops and counts them."""

    ops = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.ops += 1
        return super().__torch_function__(func, types, args, kwargs or {})


def torch_function_subclass() -> dict:
    _Logged.ops = 0
    model = _mlp()
    x = _batch(16, 8).as_subclass(_Logged)
    out = model(x)
    assert type(out) is _Logged
    result = _step(model, out.square().mean(), out.as_subclass(torch.Tensor))
    result["ops_the_subclass_saw"] = torch.tensor(_Logged.ops)
    return result


def parametrizations() -> dict:
    from torch.nn.utils import parametrizations as P

    model = _mlp()
    P.orthogonal(model[0])
    P.weight_norm(model[2])
    out = model(_batch(16, 8))
    result = _step(model, out.square().mean(), out)
    result["orthogonal_weight"] = model[0].weight.detach().clone()  # recomputed from the stepped parameters
    return result


class _StraightThroughRound(torch.autograd.Function):
    """A custom Function: round forward, the gradient scaled by the input's sign backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.round()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.sign()


def custom_function() -> dict:
    model = _mlp()
    out = _StraightThroughRound.apply(model(_batch(16, 8)) * 4)
    return _step(model, out.square().mean(), out)


# Compile first: what it leaves behind (Dynamo's fake tensors) is what the later steps must survive.
SCENARIOS: dict[str, Callable[[], dict]] = {f.__name__: f for f in [
    compile_aot_eager, compile_inductor, checkpoint_reentrant, checkpoint_non_reentrant, autocast_bf16,
    vmap_grad, double_backward, sparse_embedding, user_hooks, anomaly_mode, anomaly_nan, torch_function_mode,
    device_context, torch_function_subclass, parametrizations, custom_function]}


RAISES = {"anomaly_nan": RuntimeError}  # the scenarios whose step raises, off and on alike


def _skip_reason(name: str) -> str | None:
    return NO_CXX if name == "compile_inductor" and not HAS_CXX else None


# --- running a scenario off and on ----------------------------------------------------------------

class Outcome:
    """What one run gave: its results by name, or the exception it raised; its wall time; what forgeviz
    recorded while it ran, and the faults forgeviz logged."""

    def __init__(self, results: dict | None = None, raised: BaseException | None = None) -> None:
        self.results, self.raised = results, raised
        self.seconds = 0.0
        self.recorded = ""  # what shows that forgeviz was on (empty when off, or when it missed)
        self.faults: list[str] = []


def _run(fn: Callable[[], dict]) -> Outcome:
    try:
        return Outcome(fn())
    except Exception as exc:  # noqa: BLE001 - a scenario's exception is a result to compare
        return Outcome(raised=exc)


def _timed(outcome: Callable[[], Outcome]) -> Outcome:
    start = time.perf_counter()
    result = outcome()
    result.seconds = time.perf_counter() - start
    return result


def run_off(name: str) -> Outcome:
    """The reference: forgeviz not loaded, nothing recording."""
    session = get_session()
    assert not session.installed and not session.traces, "forgeviz must be off for the reference run"
    return _timed(lambda: _run(SCENARIOS[name]))


def _passes_since(passes: int) -> str:
    new = get_session().store.passes - passes
    return f"{new} backward passes recorded" if new else ""


def run_capture(name: str) -> Outcome:
    session = get_session()
    passes, faults = session.store.passes, session.fault_count

    def run() -> Outcome:
        with forgeviz.capture():
            return _run(SCENARIOS[name])

    outcome = _timed(run)
    outcome.recorded, outcome.faults = _passes_since(passes), session.faults_since(faults)
    return outcome


def run_memory_trace(name: str) -> Outcome:
    session = get_session()
    faults = session.fault_count
    traces = []

    def run() -> Outcome:
        with forgeviz.memory_trace() as trace:
            traces.append(trace)
            return _run(SCENARIOS[name])

    outcome = _timed(run)
    allocs = int((traces[0].events["action"] == ALLOC).sum())
    outcome.recorded = f"{allocs} allocations traced" if allocs else ""
    outcome.faults = session.faults_since(faults)
    return outcome


def run_in_notebook(nb, name: str) -> Outcome:
    """The scenario called from a notebook cell under ``%load_ext forgeviz``, loaded for it alone."""
    session = get_session()
    nb.ok("%load_ext forgeviz")
    passes, faults = session.store.passes, session.fault_count
    nb.shell.user_ns["scenario"] = SCENARIOS[name]
    start = time.perf_counter()
    cell = nb.run("result = scenario()")
    seconds = time.perf_counter() - start
    error = cell.error_before_exec or cell.error_in_exec
    outcome = Outcome(raised=error) if error is not None else Outcome(nb["result"])
    outcome.seconds = seconds
    outcome.recorded, outcome.faults = _passes_since(passes), session.faults_since(faults)
    nb.ok("%unload_ext forgeviz")
    for name_ in ("scenario", "result"):
        nb.shell.user_ns.pop(name_, None)
    return outcome


def differences(off: Outcome, on: Outcome) -> list[str]:
    """How ``on`` differs from ``off``: results not bit for bit the same, an exception not the same
    type and message, a forgeviz fault, or nothing recorded (forgeviz was not on at all)."""
    found = [f"forgeviz fault: {fault}" for fault in on.faults]
    if not on.recorded:
        found.append("forgeviz recorded nothing: it was not on")
    if off.raised is not None or on.raised is not None:
        said = [None if e is None else (type(e), str(e)) for e in (off.raised, on.raised)]
        if said[0] != said[1]:
            found.append(f"raised {said[1]!r:.300} where off raised {said[0]!r:.300}")
        return found
    if off.results.keys() != on.results.keys():
        return [*found, f"results {sorted(on.results)} where off gave {sorted(off.results)}"]
    for key, want in off.results.items():
        got = on.results[key]
        if (got.dtype, got.layout, got.shape) != (want.dtype, want.layout, want.shape):
            found.append(f"{key}: {got.dtype} {got.layout} {tuple(got.shape)} where off gave "
                         f"{want.dtype} {want.layout} {tuple(want.shape)}")
        elif not all(torch.equal(a, b) for a, b in zip(_parts(got), _parts(want), strict=True)):
            found.append(f"{key}: not bit-identical (largest difference "
                         f"{(_dense(got).double() - _dense(want).double()).abs().max().item():.3g})")
    return found


def _parts(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """What makes a tensor bit for bit: its values, and a sparse tensor's indices too."""
    if t.is_sparse:
        t = t.coalesce()
        return t.indices(), t.values()
    return (t,)


def _dense(t: torch.Tensor) -> torch.Tensor:
    return t.to_dense() if t.is_sparse else t


ARMS = {"capture": lambda nb, name: run_capture(name), "memory_trace": lambda nb, name: run_memory_trace(name),
        "notebook": run_in_notebook}


@pytest.mark.parametrize("summaries", ["", "device"], ids=["cpu-path", "device-path"])
def test_every_scenario_in_one_process(nb, monkeypatch, summaries):
    """Every scenario in order in this one process (compile first), off then on each way: all
    bit-identical, each arm recorded something and logged no fault. Every failing scenario is named. Then
    again with the gradients summarised as on a GPU (FORGEVIZ_SUMMARIES=device: the native hooks hand each
    one to device_summary)."""
    monkeypatch.setenv("FORGEVIZ_SUMMARIES", summaries)
    nb.ok("%unload_ext forgeviz")  # the reference runs have forgeviz off; the notebook arm loads it
    failures, ran, skipped = [], [], []
    print()
    for name in SCENARIOS:
        reason = _skip_reason(name)
        if reason is not None:
            skipped.append(f"{name}: {reason}")
            continue
        off = run_off(name)
        if type(off.raised) is not RAISES.get(name, type(None)):
            failures.append(f"{name} [off]: the scenario itself raised {off.raised!r}")
            continue
        times = [f"off {off.seconds:.2f} s"]
        for arm, run in ARMS.items():
            on = run(nb, name)
            times.append(f"{arm} {on.seconds:.2f} s")
            failures += [f"{name} [{arm}]: {problem}" for problem in differences(off, on)]
        ran.append(name)
        print(f"compat {name:26} " + ", ".join(times))
    nb.ok("%load_ext forgeviz")  # as the fixture left it
    for line in skipped:  # shown in pytest's warnings summary, not only in the captured output
        warnings.warn(pytest.PytestWarning(f"compat scenario skipped: {line}"), stacklevel=1)
    assert not failures, "\n".join(failures)
    assert len(ran) + len(skipped) == len(SCENARIOS)


@pytest.mark.parametrize("name", ["vmap_grad", "torch_function_subclass"])
def test_regressions_found_by_this_suite(name):
    """What this suite found, alone. vmap_grad: forgeviz armed gradient hooks on torch.func's
    storage-less wrappers and adopted them as memory ("Cannot access storage of TensorWrapper"
    faults); it now steps aside while a transform runs. torch_function_subclass: forgeviz's own reads
    of the outputs (grad_fn, storage, shape) reached the subclass's __torch_function__, which counted 3
    (capture) and 51 (memory_trace) more calls than without forgeviz; and 7 more under capture with the
    Python gradient hooks (a kernel's first cells, before the native ones are built), whose op tags read
    each output's grad_fn outside the subclass guard."""
    off = run_off(name)
    for arm in (run_capture, run_memory_trace):
        assert differences(off, arm(name)) == []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native, "hooks", lambda: None)  # the Python paths: hooks, op tags
        assert differences(off, run_capture(name)) == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_and_fsdp2_over_gloo_on_two_ranks():
    """Two processes on loopback (compat_ranks.py): DDP and FSDP2 train with forgeviz off, then under
    capture(), bit-identical on each rank, forgeviz recording every backward and logging no fault;
    DDP's all-reduced gradients are equal on both ranks."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": "2",
           "OMP_NUM_THREADS": "1"}
    script = Path(__file__).with_name("compat_ranks.py")
    ranks = [subprocess.Popen([sys.executable, str(script)], env={**env, "RANK": str(r)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(2)]
    start = time.perf_counter()
    try:
        outputs = [rank.communicate(timeout=120) for rank in ranks]
    finally:
        for rank in ranks:  # a rank left waiting on its peer never outlives the test
            if rank.poll() is None:
                rank.kill()
                rank.wait()
    print(f"\ncompat ddp+fsdp2, two ranks: {time.perf_counter() - start:.1f} s")
    reports = []
    for rank, (out, err) in zip(ranks, outputs, strict=True):
        assert rank.returncode == 0, f"rank exited with {rank.returncode}:\n{err[-3000:]}"
        reports.append(json.loads(out.strip().splitlines()[-1]))
    steps = 3
    for report in reports:
        ddp = report["ddp"]
        assert ddp == {"passes": steps, "faults": [], "differs": [], "sharded": False, "ranks_equal": True}, report
        fsdp = report["fsdp"]
        if "unsupported" in fsdp:
            pytest.skip(f"FSDP2 on CPU gloo: torch {torch.__version__} raised {fsdp['unsupported']}")
        assert fsdp == {"passes": steps, "faults": [], "differs": [], "sharded": True}, report
