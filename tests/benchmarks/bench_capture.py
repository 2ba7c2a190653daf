"""What graph capture costs a training loop: the cell of a notebook under ``%load_ext forgeviz``.

Arms, interleaved round by round in one process per MLP and reported as ratios to "off":

  off                        plain torch
  capture, no summaries      the TorchFunctionMode that tags ops, module paths (no gradient records)
  capture, torch summaries   ...plus every Node's gradients summarised with torch ops, by Python hooks
  capture, Python hooks      ...summarised in one pass by forgeviz's native library, from Python hooks
  capture, native hooks      ...by C++ Node hooks, recorded when the backward ends (the default)
  capture, device summaries  ...on the device path (FORGEVIZ_SUMMARIES=device: here its torch ops)
  capture, CUDA path's CPU work  ...its Triton path with the kernels stubbed out: what a GPU step pays its CPU,
                             less Triton's launches (~25 us each on an H100 host) and the copies
  ...with Python hooks       the same with a Python hook per Node (as without the native library)

On a GPU (``bench_capture.py 256 32 cuda``; run by default when CUDA is available) the arms are:

  capture (default)           as a notebook cell runs it: C++ Node hooks hand each gradient to
                              device_summary: Triton's kernels, no host read until the pass ends
  capture, Python hooks       the same with a Python hook per Node (as without the native library)
  capture, torch ops          the same with torch ops instead of Triton (a GPU without Triton)
  capture, read at once       FORGEVIZ_SUMMARIES=read: each gradient summarised and read back at once
                              (a host read per gradient: the default before issue 27)

and on both devices:

  memory timeline             forgeviz.memory_trace(device=...): on CUDA the allocator's history, and the
                              op capture that categorises memory (no gradient summaries); on the CPU
                              forgeviz's ledger of the CPU allocator and the same op capture
  torch.profiler(memory)      torch.profiler with profile_memory=True, for comparison

The memory arms' ratios are their steady state (the steps alone); starting and finishing a recording
(forgeviz walks the objects that exist once; the profiler builds its trace) is printed apart, in ms.

and ``bench_capture.py gpt2 cuda`` / ``bench_capture.py resnet cuda`` run the same arms on a training step
of the GPT-2-small shape (``tests/scenarios.py``, GPT-2's vocabulary, seq 512, batch 8) and of the
ResNet-18-like CNN (``bench_graph.py``, batch 128 at 64×64), which fill an H100-class GPU reasonably.
On the CPU, ``bench_capture.py gpt2`` keeps GPT-2-small's 12 blocks (d=768) with vocab 1024, seq 64, batch 2.

With ``FORGEVIZ_BENCH_CADENCE=1`` (any device) the arms after "capture, no summaries" are instead the
cadences of ``%fv grads``: each (the default), every 10, and shown (a graph view of one step drawn: its
Nodes, and the parameters' every step).

``bench_capture.py ops`` counts, per backward of a training step (``.grad`` reset first; with
``FORGEVIZ_BENCH_ACCUMULATE=1`` accumulating), the aten ops the device path issues per unique gradient
and its host reads, on the MLP and the GPT-2 shape (torch path), and where Triton is installed the MLP's
Triton launches (interpreted on a CPU; the interpreter's own copies are not counted).

``bench_capture.py profile gpt2|resnet|mlp [cuda]`` prints where the default arm's time goes (torch.profiler's
busiest ops by device and CPU time, cProfile's busiest Python functions): not ratios, places to look.

``bench_capture.py pieces [width batch [cuda]]`` times each piece of the MLP's step (forward, zero_grad, backward,
optimizer step) on this thread's CPU clock (``time.thread_time``), with forgeviz off, capturing without
summaries, with ``%fv grads off`` (each pass skipped: what a cadence's skipped pass costs), capturing as by
default, and the same with torch's global module hooks taken off ("...no module hooks": what a module stack that
needed no module hook, from frames say, would save at most; ops then carry no module), interleaved; it prints µs
per step and piece, and what each adds; the Python functions each piece calls (and the C functions Python calls:
``sys.setprofile``'s events, counted in one step), which the machine's noise leaves alone; and
the summaries' own arithmetic in a step (each unique gradient of a backward summarised by ``fv_summarize_tensor``
outside any hook): capture without summaries plus that is as low as the default arm can go. With ``cuda`` (gpu.sh's
``pieces``) the MLP is on the GPU, the default arm is the device path itself, and each arm's wall time a step
(the GPU waited for at each round's end) is printed beside its thread time: thread time that grows with the wall
time is the host's work (hooks, launches) or a wait for the GPU (CUDA spins while it waits; ``profile`` names the
calls); wall time that grows alone is the GPU's own time past the host's.

``bench_capture.py budget [mlp|gpt2] [cuda]`` times the ``within P%`` cadences of ``%fv grads`` (10%, 5%, 2%) beside
off, capturing without summaries and each: each arm's round a cell of ``FORGEVIZ_BENCH_STEPS`` training steps
(200 for the MLP, 12 for GPT-2), so that a budget starts as a cell starts it (its first pass summarised, its
second measuring a pass without summaries); it prints each arm's ratio to off and the share of its passes
summarised.

``bench_capture.py mechanism [width batch]`` times the MLP's forward tagged by another mechanism than forgeviz's
TorchFunctionMode and module hooks (``capture_probe.cpp``, a probe built on first use: a thread-local RecordFunction
callback tagging each new Node, with the module named from the nearest ``forward`` frame rather than by module hooks):
what a redesign of capture would save, µs a forward beside forgeviz's own in the same run.

Run: ``.venv/bin/python tests/benchmarks/bench_capture.py`` (or ``bench_capture.py 256 32`` for one
MLP). Not a test: timings are noisy, so nothing here asserts.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from _bench import interleaved, memory_arms, mlp, run_as_a_cell, train  # first: it puts this checkout on sys.path

import forgeviz
from forgeviz._capture import native, summary
from forgeviz._capture.cadence import EACH, OFF, SHOWN, Cadence, Within
from forgeviz._capture.grads import BackwardRecorder
from forgeviz._capture.modules import module_hooks
from forgeviz._capture.session import get_session

ROUNDS = int(os.environ.get("FORGEVIZ_BENCH_ROUNDS", "15"))
STEPS = 10


def real_model(name: str, device: str):
    """(model, opt, x, y, loss_fn) for a named model: "gpt2" or "resnet"."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench_graph import ResNet18Like

    from scenarios import make_gpt2

    if name == "gpt2":
        # On a 2-core CPU, GPT-2-small's blocks (12, d=768) with a small vocabulary, seq 64, batch 2: a
        # step of seconds, not minutes
        vocab, seq, batch = (50257, 512, 8) if device != "cpu" else (1024, 64, 2)
        model, x = make_gpt2(vocab=vocab, seq=seq), torch.randint(0, vocab, (batch, seq), device=device)
        y = torch.randint(0, vocab, (batch * seq,), device=device)
        loss_fn = lambda out, y: torch.nn.functional.cross_entropy(out.flatten(0, 1), y)  # noqa: E731
    else:
        torch.manual_seed(0)
        model, x = ResNet18Like(), torch.randn(128, 3, 64, 64, device=device)
        y, loss_fn = torch.randint(0, 10, (128,), device=device), torch.nn.functional.cross_entropy
    model = model.to(device)
    return model, torch.optim.Adam(model.parameters()), x, y, loss_fn


@contextlib.contextmanager
def cuda_path_on_cpu(pending, on: bool = True):
    """(``on``) The CUDA path's bookkeeping on CPU tensors: FORGEVIZ_SUMMARIES=device and ``pending``'s
    Triton path with its kernels stubbed out, what a GPU step pays its CPU less the launches."""
    if not on:
        yield
        return
    kernels = (pending._triton, pending._triton_many, pending._interpreted, pending._kernels_on_cpu)
    pending._triton = pending._triton_many = lambda *args: None
    pending._interpreted = True  # (what lets the Triton path take CPU tensors)
    pending._kernels_on_cpu = False  # (as on a GPU: a launch runs no torch op here)
    os.environ["FORGEVIZ_SUMMARIES"] = "device"
    try:
        yield
    finally:
        pending._triton, pending._triton_many, pending._interpreted, pending._kernels_on_cpu = kernels
        os.environ.pop("FORGEVIZ_SUMMARIES", None)


def without_module_hooks(loop: Callable[[], None]) -> Callable[[], None]:
    """``loop`` run after taking off the global module hooks forgeviz registered with torch for the cell (the cell's
    end removes them again, a no-op, and the next cell registers new ones): what a module stack that needed no module
    hook would save at most. Its ops then carry no module path, and a memory timeline or the doctor would miss each
    root call. Only while no compiled module lives: the hooks are then on each module, and none are taken off."""
    def run() -> None:
        for handle in module_hooks._forward:
            handle.remove()
        loop()
    return run


def warm_loop(width: int, batch: int, device: str, model_name: str, steps: int) -> tuple:
    """(model, opt, x, y, loss_fn, loop): the named model ("gpt2", "resnet"; else the MLP of ``width`` at ``batch``)
    and a loop of ``steps`` training steps on it (waiting for the GPU at its end), run once to warm up."""
    if model_name:
        model, opt, x, y, loss_fn = real_model(model_name, device)
    else:
        model, opt, x, y = mlp(width, batch, device)
        loss_fn = torch.nn.functional.mse_loss

    def loop():
        train(model, opt, x, y, steps, loss_fn)
        if device != "cpu":
            torch.cuda.synchronize()

    loop()  # warm up
    native.load()
    return model, opt, x, y, loss_fn, loop


def case(width: int, batch: int, device: str = "cpu", model_name: str = "") -> dict[str, float]:
    model, opt, x, y, loss_fn, loop = warm_loop(width, batch, device, model_name, STEPS)
    session = get_session()
    one_pass = summary._summarize_natively

    hooks = native.hooks
    device_path = session.recorder.device
    kernels = (device_path._triton, device_path._triton_many)

    def cell(record_grads: bool, native_summaries: bool = True, native_hooks: bool = True, mode: str = "",
             triton: bool = True, cadence: Cadence = EACH, stubbed: bool = False):
        """mode: FORGEVIZ_SUMMARIES ("device": every float gradient summarised on its device, device_summary;
        "read": CUDA's read at once). triton: False for the device path's torch ops. cadence: which passes
        record (``%fv grads``). stubbed (on the CPU): :func:`cuda_path_on_cpu`."""
        def run():
            if mode:
                os.environ["FORGEVIZ_SUMMARIES"] = mode
            summary._summarize_natively = one_pass if native_summaries else (lambda t, histogram: None)
            native.hooks = hooks if native_hooks else (lambda: None)
            device_path._triton, device_path._triton_many = kernels if triton else (None, None)
            session.recorder.cadence = cadence
            with cuda_path_on_cpu(device_path, stubbed):
                run_as_a_cell(session, loop, record_grads)
            session.recorder.cadence = EACH
            summary._summarize_natively = one_pass
            native.hooks = hooks
            device_path._triton, device_path._triton_many = kernels
            os.environ.pop("FORGEVIZ_SUMMARIES", None)
        return run

    # A graph view of one step, as a user looking at the model draws it: "shown" records its Nodes, and of
    # a training loop's later graphs the parameters' (their AccumulateGrad Nodes are the same every step).
    view = forgeviz.graph(loss_fn(model(x), y))  # noqa: F841 - alive while the arms run
    starts: dict[str, list[float]] = {}  # the memory arms' start and finish, paid once per recording
    if device == "cpu":
        arms = {"capture, torch summaries": cell(True, native_summaries=False, native_hooks=False),
                "capture, Python hooks": cell(True, native_hooks=False), "capture, native hooks": cell(True),
                "capture, device summaries": cell(True, mode="device"),
                "capture, CUDA path's CPU work": cell(True, stubbed=True),
                "...with Python hooks": cell(True, stubbed=True, native_hooks=False)}
    else:
        arms = {"capture (default)": cell(True), "capture, Python hooks": cell(True, native_hooks=False),
                "capture, torch ops": cell(True, triton=False), "capture, read at once": cell(True, mode="read")}
    arms |= memory_arms(loop, device, starts)
    if os.environ.get("FORGEVIZ_BENCH_CADENCE"):  # %fv grads: each (the default), every 10, shown
        arms = {"grads each": cell(True), "grads every 10": cell(True, cadence=10),
                "grads shown": cell(True, cadence=SHOWN)}
    medians = interleaved({"off": loop, "capture, no summaries": cell(False)} | arms, ROUNDS)
    base = medians["off"]
    for name, seconds in starts.items():
        print(f"  {name}: start and finish {statistics.median(seconds) * 1e3:.1f} ms, once per recording "
              f"(the ratio is its steady state: the {STEPS} steps alone)")
    return {name: t / base for name, t in medians.items()} | {"off_ms_per_step": base / STEPS * 1e3}


def budget(name: str, device: str) -> None:
    """The ``within P%`` cadences beside each and capture without summaries (see the module's docstring)."""
    steps = int(os.environ.get("FORGEVIZ_BENCH_STEPS", "12" if name == "gpt2" else "200"))
    loop = warm_loop(256, 32, device, "gpt2" if name == "gpt2" else "", steps)[-1]
    session = get_session()
    shares: dict[str, list[float]] = {}  # per within arm: the share of each round's passes summarised

    def cell(record_grads: bool, cadence: Cadence = EACH, arm: str = ""):
        def run():
            session.recorder.cadence = cadence  # (a budget made anew: as a cell starts one)
            run_as_a_cell(session, loop, record_grads)
            made = session.recorder.budget
            if made is not None:
                shares.setdefault(arm, []).append(made.summarised / max(1, made.summarised + made.skipped))
            session.recorder.cadence = EACH
        return run

    arms = {"off": loop, "capture, no summaries": cell(False), "grads each": cell(True)}
    for percent in (10, 5, 2):
        arm = f"grads within {percent}%"
        arms[arm] = cell(True, Within(percent / 100), arm)
    medians = interleaved(arms, ROUNDS)
    base = medians["off"]
    print(f"{name}, {device} ({torch.cuda.get_device_name() if device != 'cpu' else 'cpu'}, torch {torch.__version__}):"
          f" off {base / steps * 1e3:.2f} ms/step, {ROUNDS} rounds of {steps} steps, arms interleaved")
    for arm, seconds in medians.items():
        summarised = (f"; {statistics.median(shares[arm]) * 100:.0f}% of passes summarised (median of rounds)"
                      if arm in shares else "")
        print(f"  {arm}: {seconds / base:.3f}x{summarised}")


def pieces(width: int, batch: int, device: str = "cpu") -> None:
    """Per-piece thread_time of the MLP's step in each arm, and on a GPU each arm's wall time a step (see the
    module's docstring)."""
    model, opt, x, y = mlp(width, batch, device)
    loss_fn = torch.nn.functional.mse_loss
    clock = time.thread_time_ns
    names = ("forward", "zero_grad", "backward", "step")
    cuda = device != "cpu"

    def steps(times: dict) -> None:
        wall = time.perf_counter_ns()
        for _ in range(STEPS):
            t0 = clock()
            loss = loss_fn(model(x), y)
            t1 = clock()
            opt.zero_grad()
            t2 = clock()
            loss.backward()
            t3 = clock()
            opt.step()
            t4 = clock()
            for name, spent in zip(names, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                times[name].append(spent)
        if cuda:  # (the round's steps queued on the GPU, waited for once: its time a step, with the host's)
            torch.cuda.synchronize()
            times["wall"].append((time.perf_counter_ns() - wall) / STEPS)

    def counted(calls: dict) -> None:
        """Three steps, the third's calls counted by piece: (Python functions, C functions called from Python) run
        on this thread, sys.setprofile's events. Counts, not times: a noisy machine leaves them alone."""
        count = [0, 0]

        def profiler(frame, event, arg) -> None:
            if event == "call":
                count[0] += 1
            elif event == "c_call":
                count[1] += 1

        def piece(name: str, run: Callable):
            count[:] = [0, 0]
            sys.setprofile(profiler)
            try:
                return run()
            finally:
                sys.setprofile(None)
                calls[name] = tuple(count)

        for _ in range(3):
            loss = piece("forward", lambda: loss_fn(model(x), y))
            piece("zero_grad", opt.zero_grad)
            piece("backward", loss.backward)
            piece("step", opt.step)

    native.load()
    session = get_session()
    hooks = native.hooks
    arms = {"off": None, "capture, no summaries": False, "capture, grads off": True, "capture (default)": True,
            "...no module hooks": True, "CUDA path's CPU work": True, "...with Python hooks": True}
    if cuda:  # (the default arm is the CUDA path itself there)
        del arms["CUDA path's CPU work"]
    times = {arm: {name: [] for name in (*names, "wall")} for arm in arms}
    calls: dict = {arm: {} for arm in arms}
    steps({name: [] for name in (*names, "wall")})  # warm up (on a GPU, Triton's first compile too)
    for round_ in range(ROUNDS + 1):
        for arm, record_grads in arms.items():
            loop = (lambda: steps(times[arm])) if round_ else (lambda: counted(calls[arm]))  # (round 0: counts)
            if record_grads is None:
                loop()
                continue
            native.hooks = (lambda: None) if arm.endswith("Python hooks") else hooks
            session.recorder.cadence = OFF if arm.endswith("grads off") else EACH  # (off: each pass skipped)
            if arm.endswith("module hooks"):  # torch's global module hooks taken off once the cell installed them
                loop = without_module_hooks(loop)
            with cuda_path_on_cpu(session.recorder.device, not cuda and arm.startswith(("CUDA", "...with"))):
                run_as_a_cell(session, loop, record_grads)
            native.hooks = hooks
            session.recorder.cadence = EACH
    walls = {arm: by.pop("wall") for arm, by in times.items()}
    walls = {arm: statistics.median(wall) / 1e3 for arm, wall in walls.items()} if cuda else {}
    median = {arm: {name: statistics.median(t) / 1e3 for name, t in by.items()} for arm, by in times.items()}
    print(f"MLP {width} wide, batch {batch}, {device}: median µs per step of each piece (thread_time, {ROUNDS} rounds "
          f"× {STEPS} steps)" + (", and the wall time a step (the GPU waited for at each round's end)" if cuda else ""))
    print(f"  {'':24}" + "".join(f"{name:>11}" for name in (*names, "total", *(["wall"] if cuda else []))))
    for arm, by in median.items():
        extra = "" if arm == "off" else "  (+" + ", +".join(
            f"{by[n] - median['off'][n]:.0f}" for n in names) + ")"
        wall = f"{walls[arm]:11.1f}" if cuda else ""
        ratio = f"  {walls[arm] / walls['off']:.3f}× off" if cuda and arm != "off" else ""
        print(f"  {arm:24}" + "".join(f"{by[n]:11.1f}" for n in names) + f"{sum(by.values()):11.1f}{wall}"
              + extra + ratio)
    print("  Python functions called on this thread per step, by piece (and C functions called from Python), a "
          "step's count: what the times above cost in the interpreter, without their noise")
    for arm, by in calls.items():
        print(f"  {arm:24}" + "".join(f"{f'{by[n][0]} ({by[n][1]})':>15}" for n in names))
    if cuda:  # (the native CPU summaries' arithmetic is not the GPU's)
        return
    arithmetic, unique = summaries_arithmetic(model, opt, x, y, loss_fn)
    off, bare = sum(median["off"].values()), sum(median["capture, no summaries"].values())
    default = sum(median["capture (default)"].values())
    print(f"  the summaries' arithmetic alone: {arithmetic:.1f} µs a step ({unique} unique gradients a backward, one "
          f"fv_summarize_tensor each, less a ctypes call's cost); capture without summaries plus that: "
          f"{(bare + arithmetic) / off:.3f}× off, the floor of the default arm's {default / off:.3f}×")


def summaries_arithmetic(model, opt, x, y, loss_fn) -> tuple[float, int]:
    """The native summaries' own arithmetic in a step (µs, median of ROUNDS × STEPS backward passes) and how many
    unique gradients a backward summarises: each gradient the pass's Nodes receive and send, kept by Python Node
    hooks, one per tensor and one per memory a larger dense one shares with a view of it (as grad_hooks.cpp's
    Pass::summarize shares them), then summarised by fv_summarize_tensor with the hooks' sample and bins, timed
    on the thread's clock, less the same number of ctypes calls on a one-element tensor."""
    import ctypes

    from torch._prims_common import is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense

    from forgeviz._capture.grads import iter_graph
    from forgeviz._capture.summary import HISTOGRAM_BINS, HISTOGRAM_SAMPLE, SMALL_NUMEL

    lib = native.load()
    out, counts = (ctypes.c_double * (4 + SMALL_NUMEL))(), (ctypes.c_int64 * HISTOGRAM_BINS)()
    clock = time.thread_time_ns

    def summarise(tensors: list) -> int:
        start = clock()
        for t in tensors:
            lib.fv_summarize_tensor(ctypes.c_void_p(t._cdata), HISTOGRAM_SAMPLE, HISTOGRAM_BINS, SMALL_NUMEL, out,
                                    counts)
        return clock() - start

    one = [torch.zeros(1)] * 64
    call = min(summarise(one) for _ in range(50)) / len(one)  # a ctypes call's own cost
    spent, unique = [], 0
    for _ in range(ROUNDS * STEPS):
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        kept: list = []
        handles = [node.register_hook(lambda ins, outs: kept.extend(g for g in (*ins, *outs) if g is not None))
                   for node in iter_graph([loss.grad_fn])]
        loss.backward()
        for handle in handles:
            handle.remove()
        seen: dict = {}
        for g in kept:
            dense = g.numel() > SMALL_NUMEL and is_non_overlapping_and_dense(g)
            seen.setdefault((g.data_ptr(), g.numel(), g.dtype) if dense else id(g), g)
        unique = len(seen)
        spent.append(summarise(list(seen.values())) - call * unique)
        opt.step()
    return statistics.median(spent) / 1e3, unique


def mechanism(width: int, batch: int) -> None:
    """What tagging the MLP's forward costs by each mechanism (issue 27's CPU target: how far another design of
    capture would go), µs a forward (thread time, median of interleaved rounds, one torch thread): forgeviz as a
    cell runs it (its TorchFunctionMode and module hooks, no gradient summaries), then ``capture_probe.cpp``'s
    thread-local RecordFunction callback: alone, tagging each new Node with its op and line, with forgeviz's
    module stack kept by its module hooks too, and naming the module from the nearest ``forward`` frame instead
    of any module hook. The probe is built into forgeviz's cache folder on first use."""
    import importlib.machinery
    import importlib.util

    from forgeviz._capture.modules import ModuleStack

    source = Path(__file__).with_name("capture_probe.cpp")
    key = hashlib.sha256(source.read_bytes()).hexdigest()[:10]
    built = native._compile_extension([source], native.cache_dir() / f"capture_probe-{native._torch_key()}-{key}.so",
                                      "capture probe", False, False, None)
    loader = importlib.machinery.ExtensionFileLoader("_capture_probe", str(built))
    probe = importlib.util.module_from_spec(importlib.util.spec_from_loader("_capture_probe", loader))
    loader.exec_module(probe)

    torch.set_num_threads(1)
    model, _, x, y = mlp(width, batch)
    clock, forwards = time.thread_time_ns, 200

    def forward() -> None:
        for _ in range(forwards):
            torch.nn.functional.mse_loss(model(x), y)

    native.load()
    session = get_session()
    files = {__file__: True}  # the user's file: this one, where the forward is called
    paths = {id(module): name for name, module in model.named_modules()}

    def probed(mode: int, module_stack: bool = False) -> Callable[[], None]:
        def run() -> None:
            stack = ModuleStack() if module_stack else None
            if stack is not None:
                stack.install()
                stack.use_native(native.hooks())
            probe.start(mode, files, paths)
            try:
                forward()
            finally:
                probe.stop()
                if stack is not None:
                    stack.uninstall()
        return run

    arms = {"off": forward, "forgeviz (mode, module hooks)": lambda: run_as_a_cell(session, forward, False),
            "probe: callback alone": probed(0), "probe: tags (op, line)": probed(1),
            "probe: tags + forgeviz's module hooks": probed(1, module_stack=True),
            "probe: tags + module from frames": probed(2)}

    def thread_time(run: Callable[[], None]) -> Callable[[], float]:
        def arm() -> float:  # (interleaved takes an arm's own seconds: this thread's, not the wall's)
            start = clock()
            run()
            return (clock() - start) / 1e9
        return arm

    medians = interleaved({name: thread_time(run) for name, run in arms.items()}, ROUNDS)
    probe.start(2, files, paths)
    try:
        loss = torch.nn.functional.mse_loss(model(x), y)
    finally:
        probe.stop()
    last = loss.grad_fn.next_functions[0][0].metadata.get("fv_probe")
    per_forward = {name: seconds / forwards * 1e6 for name, seconds in medians.items()}
    print(f"MLP {width} wide, batch {batch}: µs a forward (thread time, one torch thread, {ROUNDS} rounds × "
          f"{forwards}); the probe's last tag: {last}")
    for name, spent in per_forward.items():
        print(f"  {name:40} {spent:8.1f}" + ("" if name == "off" else f"  (+{spent - per_forward['off']:.1f})"))


def profile(name: str, device: str) -> None:
    """Where the default arm's time goes on ``name`` ("mlp", "gpt2" or "resnet"): torch.profiler's busiest
    ops, by device time and by CPU time, over two steps; then cProfile's busiest Python functions over
    three; and how many gradients each backward summarised. (Profilers slow what they watch: the
    ratios are case()'s; this says where to look.)"""
    import cProfile
    import pstats

    if name == "mlp":
        model, opt, x, y = mlp(256, 32, device)
        loss_fn = torch.nn.functional.mse_loss
    else:
        model, opt, x, y, loss_fn = real_model(name, device)

    def loop(steps: int) -> None:
        train(model, opt, x, y, steps, loss_fn)
        if device != "cpu":
            torch.cuda.synchronize()

    loop(3)
    native.load()
    session = get_session()
    run_as_a_cell(session, lambda: loop(3))  # warm: the device buffers, the kernels compiled
    before = session.recorder.device.summarised
    activities = [torch.profiler.ProfilerActivity.CPU] + (
        [torch.profiler.ProfilerActivity.CUDA] if device != "cpu" else [])
    with torch.profiler.profile(activities=activities) as prof:
        run_as_a_cell(session, lambda: loop(2))
    print(f"{name}, {device}: {(session.recorder.device.summarised - before) / 2:.0f} gradients summarised on "
          "the device a backward")
    averages = prof.key_averages()
    for key in (["self_device_time_total"] if device != "cpu" else []) + ["self_cpu_time_total"]:
        print(averages.table(sort_by=key, row_limit=18, max_name_column_width=60))
    profiler = cProfile.Profile()
    profiler.enable()
    run_as_a_cell(session, lambda: loop(3))
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(22)


if __name__ == "__main__":
    torch.set_num_threads(2)
    if len(sys.argv) == 1:
        for device in ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]:
            for width, batch in [(1024, 256), (256, 32)]:  # each in a fresh process
                subprocess.run([sys.executable, __file__, str(width), str(batch), device], check=True)
    elif sys.argv[1] == "pieces":
        pieces(int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:5]) if len(sys.argv) > 3 else pieces(256, 32)
    elif sys.argv[1] == "ops":  # the device path's aten ops per unique gradient, and host reads, per backward
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        import importlib.util

        from op_count import HOST_READS, backward_ops
        from torch.utils._python_dispatch import _disable_current_modes

        from forgeviz._capture.grads import GradStore

        os.environ["FORGEVIZ_SUMMARIES"] = "device"
        accumulate = os.environ.get("FORGEVIZ_BENCH_ACCUMULATE")  # =1: .grad accumulates (each .grad summarised too)
        if not torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = "1"  # (read when the kernels are defined) CPU tensors, interpreted
        paths = ["torch"] + (["triton"] if importlib.util.find_spec("triton") else [])
        for path, name in [(p, n) for p in paths for n in ("mlp", "gpt2")]:
            if path == "triton" and name == "gpt2":
                continue  # interpreted kernels over GPT-2's 85M parameter elements: minutes; the MLP shows the count
            os.environ["FORGEVIZ_TRITON"] = "1" if path == "triton" else "0"
            if name == "mlp":
                model, _, x, y = mlp(256, 32)
                loss_fn = torch.nn.functional.mse_loss
            else:
                model, _, x, y, loss_fn = real_model("gpt2", "cpu")
                x, y = x[:1, :64], y[:64]  # the same Nodes, a shorter sequence
            def make_loss():  # a training step's: .grad reset first, so the parameters' go to add_leaf
                if not accumulate:
                    model.zero_grad(set_to_none=True)
                return loss_fn(model(x), y)

            backward_ops(make_loss)
            plain = backward_ops(make_loss)
            recorder = BackwardRecorder(GradStore(), print)
            launches = []

            def launch(kernel, count):
                def run(*args):
                    launches.append(count(args))
                    with _disable_current_modes():  # the interpreter's own copies are no op of forgeviz's on a GPU
                        kernel(*args)
                return run

            if recorder.device._triton is not None:  # count the kernels' launches (not aten ops)
                recorder.device._triton = launch(recorder.device._triton, lambda args: 1)
                recorder.device._triton_many = launch(recorder.device._triton_many, lambda args: args[1])
            backward_ops(make_loss, recorder.arm)  # the first pass makes the device buffer
            before, launches[:] = recorder.device.summarised, []
            ops = backward_ops(make_loss, recorder.arm)
            unique = recorder.device.summarised - before
            ours = ops - plain
            held = recorder.device.held  # elements a batch held at most (float32 here: 4 bytes each)
            kernels = (f", {len(launches) / unique:.2f} Triton launches each ({len(launches)}: "
                       f"{sum(n > 1 for n in launches)} multi-tensor, for {sum(n for n in launches if n > 1)} .grad)"
                       if path == "triton" else "")
            how = f"{name}, {path} path" + (", .grad accumulating" if accumulate else "")
            print(f"{how}: {unique} unique gradients a backward, {sum(ours.values()) / unique:.2f} "
                  f"aten ops each{kernels}, host reads {sum(ops[n] for n in HOST_READS)}; a batch held at most "
                  f"{held} elements ({held * 4 / 2**20:.1f} MiB, + ~{held * 40 / 2**20:.0f} MiB while reduced); "
                  f"by op: {dict(ours)}")
    elif sys.argv[1] == "budget":  # budget [mlp|gpt2] [cuda]
        budget(sys.argv[2] if len(sys.argv) > 2 else "mlp", sys.argv[3] if len(sys.argv) > 3 else "cpu")
    elif sys.argv[1] == "mechanism":  # tagging by another mechanism: capture_probe.cpp
        mechanism(*(int(a) for a in sys.argv[2:4])) if len(sys.argv) > 3 else mechanism(256, 32)
    elif sys.argv[1] == "profile":  # profile gpt2|resnet|mlp [cuda]
        profile(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "cpu")
    elif sys.argv[1] in ("gpt2", "resnet"):
        name, device = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "cpu"
        result = case(0, 0, device, name)
        print(f"{name}, {device} ({torch.cuda.get_device_name() if device != 'cpu' else 'cpu'}, torch "
              f"{torch.__version__}): off {result.pop('off_ms_per_step'):.2f} ms/step; "
              + ", ".join(f"{k} {v:.3f}x" for k, v in result.items()))
    else:
        width, batch, device = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "cpu"
        result = case(width, batch, device)
        print(f"MLP {width} wide, batch {batch}, {device}: off {result.pop('off_ms_per_step'):.2f} ms/step; "
              + ", ".join(f"{k} {v:.2f}x" for k, v in result.items()))
