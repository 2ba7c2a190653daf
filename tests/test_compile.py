"""torch.compile under forgeviz (scenario T1): Dynamo makes the same graphs, graph breaks and recompiles
with forgeviz capturing as without it, fullgraph=True still runs, and results are bit-identical.

Dynamo's own counters (``torch._dynamo.utils.counters``) are the oracle, read for the same model and
inputs with forgeviz off and on, each run from a reset Dynamo.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from torch._dynamo.utils import counters

import forgeviz

from scenarios import make_blocks


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))


def _gpt() -> torch.nn.Module:
    return make_blocks(n_layer=2, d=32, n_head=4)


MODELS = {"mlp": (_mlp, (16, 32)), "gpt": (_gpt, (2, 8, 32))}


def _step(make, shape, on: bool, device: str = "cpu", **compile_kwargs):
    """One compiled training step from a reset Dynamo: Dynamo's counters, the output and the grads."""
    torch._dynamo.reset()
    counters.clear()
    model = make().to(device)
    compiled = torch.compile(model, **compile_kwargs)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1)).to(device)
    if on:
        with forgeviz.capture():
            out = compiled(x)
            out.square().mean().backward()
    else:
        out = compiled(x)
        out.square().mean().backward()
    seen = {"graphs": counters["stats"]["unique_graphs"], "breaks": dict(counters["graph_break"]),
            "recompiles": dict(counters["recompiles"])}
    return seen, out.detach(), [p.grad.clone() for p in model.parameters()]


def _same(off, on) -> None:
    assert on[0] == off[0]  # graphs, graph breaks (with Dynamo's reasons), recompiles
    assert torch.equal(on[1], off[1])
    assert all(torch.equal(a, b) for a, b in zip(on[2], off[2], strict=True))


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("fullgraph", [False, True])
@pytest.mark.parametrize("dynamic", [False, True])
def test_aot_eager_compiles_as_without_forgeviz(model, fullgraph, dynamic):
    make, shape = MODELS[model]
    off = _step(make, shape, False, backend="aot_eager", fullgraph=fullgraph, dynamic=dynamic)
    assert off[0]["graphs"] >= 1 and not off[0]["breaks"]
    _same(off, _step(make, shape, True, backend="aot_eager", fullgraph=fullgraph, dynamic=dynamic))


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="inductor needs a C++ compiler (./dev.sh test installs g++)")
def test_inductor_compiles_as_without_forgeviz():
    make, shape = MODELS["gpt"]
    _same(_step(make, shape, False, backend="inductor"), _step(make, shape, True, backend="inductor"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA-only: no CUDA GPU on this machine")
@pytest.mark.parametrize("model", MODELS)
def test_inductor_on_cuda_compiles_as_without_forgeviz(model):
    """Triton kernels, CUDA graphs off: the same Dynamo graphs and bit-identical results on the GPU."""
    make, shape = MODELS[model]
    _same(_step(make, shape, False, "cuda", backend="inductor"), _step(make, shape, True, "cuda", backend="inductor"))


def test_a_graph_break_of_the_user_is_the_same_with_forgeviz():
    """A print inside forward breaks the graph, with or without forgeviz: the same break, once."""

    class Chatty(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

        def forward(self, x):
            h = self.a(x).relu()
            print("halfway")
            return self.b(h)

    def make():
        torch.manual_seed(0)
        return Chatty()

    off = _step(make, (4, 8), False, backend="aot_eager")
    assert sum(off[0]["breaks"].values()) == 1
    _same(off, _step(make, (4, 8), True, backend="aot_eager"))


@pytest.mark.parametrize("backend", ["native", "dispatch"])
def test_memory_trace_after_a_compile_counts_real_storages_only(backend, monkeypatch):
    """Dynamo's caches keep fake tensors alive after any compile: the memory trace's seeding walk
    passes them by (it raised "Cannot access data pointer of Tensor" in the user's cell), and its
    live totals still equal a gc walk of the storages that hold data."""
    import gc

    from torch._subclasses.fake_tensor import FakeTensorMode

    from forgeviz._capture.memory import live_storage_bytes

    monkeypatch.setenv("FORGEVIZ_MEMORY_BACKEND", backend)
    torch._dynamo.reset()
    model = _mlp()
    torch.compile(model, backend="aot_eager")(torch.randn(4, 32)).sum().backward()
    with FakeTensorMode():
        fake = torch.ones(1024, 1024)  # noqa: F841 - held on purpose: 4 MiB that are not memory
    with forgeviz.memory_trace() as trace:
        x = torch.randn(64, 32)
        out = model(x)
        gc.collect()
        live = live_storage_bytes()
        assert trace.tracker.tracked_bytes() == live
        assert trace.live_bytes == sum(live.values())
        assert trace.tracker.backend == backend
    assert out.shape == (64, 8)


def _torch_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if "global hooks" in str(w.message)]


def test_no_warning_from_torch_and_capture_on_and_off_compiles_nothing_again():
    """forgeviz's module hooks leave a compiled module alone: torch.compile(module) warns about global
    module hooks, and Dynamo would trace and guard them; no hooks are placed on the compiled module
    and below, and forgeviz's mode steps aside for the compiled call, so Dynamo sees what it sees
    without forgeviz, and entering or leaving capture() makes no new graph."""
    import warnings

    torch._dynamo.reset()
    counters.clear()
    model = _mlp()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with forgeviz.capture():
            compiled = torch.compile(model, backend="aot_eager")
            compiled(torch.randn(4, 32)).sum().backward()
        for _ in range(3):
            compiled(torch.randn(4, 32)).sum().backward()
            with forgeviz.capture():
                out = compiled(torch.randn(4, 32))
                out.sum().backward()
    assert _torch_warnings(caught) == []
    assert counters["stats"]["unique_graphs"] == 1 and not counters["recompiles"]
    assert type(out.grad_fn).__name__ == "CompiledFunctionBackward"


def test_eager_modules_keep_their_paths_beside_a_compiled_one():
    """While a compiled module lives, forgeviz hooks each module instead of torch's global hooks:
    modules made before and after the compile still name the ops they run."""
    from forgeviz._capture.modules import module_hooks

    torch._dynamo.reset()
    before = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
    compiled = torch.compile(_mlp(), backend="aot_eager")
    after = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sigmoid())
    with forgeviz.capture():
        assert module_hooks.per_module
        compiled(torch.randn(2, 32))
        a = before(torch.randn(2, 4, requires_grad=True))
        b = after(torch.randn(2, 4, requires_grad=True))
    assert not module_hooks.per_module  # capture() ended: no hooks of forgeviz's are left anywhere
    assert a.grad_fn.metadata["fv_op"][4][2:] == ("1", "Tanh")
    assert b.grad_fn.metadata["fv_op"][4][2:] == ("1", "Sigmoid")
    assert b.grad_fn.next_functions[0][0].metadata["fv_op"][4][2:] == ("0", "Linear")
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in (*before.modules(), *after.modules()))


def test_what_a_compiled_backward_saves_is_activation_memory():
    """The compiled region's Node (CompiledFunctionBackward) holds the activations its backward needs:
    the memory timeline counts them as activations until the backward frees them. The oracle is the
    Node's own saved tensors, less those that are parameters or the input."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
    compiled = torch.compile(model, backend="aot_eager")
    compiled(torch.randn(64, 256)).sum().backward()
    with forgeviz.memory_trace() as trace:
        x = torch.randn(64, 256)
        out = compiled(x)
        known = {p.untyped_storage().data_ptr() for p in (*model.parameters(), x)}
        saved = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in out.grad_fn.saved_tensors}
        expected = sum(n for ptr, n in saved.items() if ptr not in known)
        assert expected == 2 * 64 * 512 * 4  # the first Linear's output and its GELU, kept for backward
        assert trace.bytes_by_category()["activation"] == expected
        out.sum().backward()
        assert trace.bytes_by_category()["activation"] == 0


@pytest.mark.parametrize("what", ["module", "function"])
def test_cells_under_load_ext_compile_once(nb, what):
    """Cell after cell under %load_ext forgeviz, a compiled model (or a compiled training function)
    keeps its one graph: no cell's hooks or mode make Dynamo compile again, and no break is added."""
    nb.ok("import torch\nfrom torch._dynamo.utils import counters\ntorch._dynamo.reset(); counters.clear()")
    nb.ok("torch.manual_seed(0)\n"
          "model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))")
    if what == "module":
        nb.ok("compiled = torch.compile(model, backend='aot_eager')\nstep = lambda x: compiled(x).square().mean()")
    else:
        nb.ok("step = torch.compile(lambda x: model(x).square().mean(), backend='aot_eager')")
    for _ in range(4):
        nb.ok("loss = step(torch.randn(4, 8)); loss.backward()")
    assert nb.ok("counters['stats']['unique_graphs']") == 1
    assert nb.ok("sum(counters['graph_break'].values()) + sum(counters['recompiles'].values())") == 0
    assert nb.ok("all(p.grad is not None for p in model.parameters())")


@pytest.mark.parametrize("model", MODELS)
def test_dynamo_explain_says_the_same_with_forgeviz(model):
    """torch._dynamo.explain (graphs, breaks, their reasons, ops per graph) is the same under capture()."""
    make, shape = MODELS[model]

    def explain(on: bool):
        torch._dynamo.reset()
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
        if on:
            with forgeviz.capture():
                out = torch._dynamo.explain(make())(x)
        else:
            out = torch._dynamo.explain(make())(x)
        return (out.graph_count, out.graph_break_count, [r.reason for r in out.break_reasons],
                [len(ops) for ops in out.ops_per_graph])

    off = explain(False)
    assert off[0] == 1 and off[1] == 0
    assert explain(True) == off


def test_the_first_compile_of_a_process_under_forgeviz_works():
    """forgeviz's hooks started before Dynamo was ever loaded: torch.compile(model) then builds its
    wrapper, whose registration forgeviz sees from inside torch's registration hooks (it must not add
    hooks there: torch iterates them, "OrderedDict mutated during iteration" broke the user's cell).
    In a fresh process, so that Dynamo is not loaded yet."""
    import subprocess
    import sys

    code = """
import sys, torch, forgeviz
assert "torch._dynamo.eval_frame" not in sys.modules
with forgeviz.capture():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    compiled = torch.compile(model, backend="aot_eager")
    out = compiled(torch.randn(2, 4))
    out.sum().backward()
print(type(out.grad_fn).__name__, model[0].weight.grad.shape)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["CompiledFunctionBackward", "torch.Size([4,", "4])"]
