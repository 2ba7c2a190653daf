"""The public functions, re-exported by ``forgeviz``: one per view (``graph``, ``strides``, ``broadcast``,
``memory``, ``cuda_snapshot`` and ``ranks``), and the ``with`` blocks ``capture()`` and ``memory_trace()``."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional, Sequence, Union

import torch

from ._capture.cadence import EACH, OFF, Within, cadence_of
from ._capture.fault import boundary
from ._capture.names import NameIndex
from ._capture.session import CaptureSession, get_session
from ._capture.source import names_by_identity
from ._capture.strides import accepts
from ._capture.walk import MAX_NODES, is_node
from ._version import __version__
from .model.run import rank_folder
from .run.writer import RunWriter
from .widgets.broadcast import BroadcastWidget
from .widgets.graph import GraphWidget
from .widgets.ranks import RanksWidget
from .widgets.strides import StridesWidget

_names = NameIndex()


def names() -> NameIndex:
    """The kernel's name index (shared by every view)."""
    return _names


def _user_namespace(depth: int) -> Mapping[str, object]:
    """The caller's names. In a notebook cell (or at module level) that is its globals dict,
    which a view may keep to rescan later. A function's locals are scanned now and not kept,
    because a copy of them would keep the user's tensors alive."""
    frame = sys._getframe(depth + 1)
    if frame.f_locals is not frame.f_globals:
        _names.scan(frame.f_locals)
    return frame.f_globals


def graph(*tensors_or_nodes, namespace: Optional[Mapping[str, object]] = None,
          max_nodes: int = MAX_NODES) -> GraphWidget:
    """A live widget of the autograd graph reachable from the given tensors or Nodes.

    Leaves are named after your variables, parameters after ``named_parameters``, and ops are
    grouped by module: a graph of more than 50 Nodes opens folded, one box per module, with
    repeated blocks stacked. Gradients appear after ``backward()`` runs under forgeviz. A graph of
    more than ``max_nodes`` Nodes is cut to those nearest the output, and the view says so.

    >>> import torch, forgeviz
    >>> x = torch.tensor([2.], requires_grad=True)
    >>> loss = (x * 3) ** 2
    >>> sorted(n.label for n in forgeviz.graph(loss).model.nodes)
    ['Mul', 'loss', 'x']
    """
    if not tensors_or_nodes:
        raise TypeError("forgeviz.graph() needs at least one torch.Tensor or autograd Node (e.g. loss or loss.grad_fn)")
    for value in tensors_or_nodes:
        if not isinstance(value, (torch.Tensor, torch.autograd.graph.GradientEdge)) and not is_node(value):
            raise TypeError(
                "forgeviz.graph() accepts torch.Tensor, autograd Node (a tensor's .grad_fn) or "
                f"GradientEdge arguments; got {type(value).__name__}: {value!r:.60}"
            )
    if not isinstance(max_nodes, int) or isinstance(max_nodes, bool) or max_nodes < 1:
        raise ValueError(f"forgeviz.graph(max_nodes=...) expects a positive int, got {max_nodes!r}")
    if namespace is None:
        namespace = _user_namespace(1)
    return GraphWidget(tensors_or_nodes, get_session(), _names, namespace, max_nodes)


def strides(*tensors, names: Optional[Sequence[str]] = None) -> StridesWidget:
    """A widget that draws how each tensor maps onto its storage.

    Tensors that share a storage are drawn over one strip; one with its own storage gets its own
    strip, marked "copy". Hover a cell to see the storage element it reads. numpy arrays are
    drawn too (zero-copy, through ``torch.from_numpy``).

    >>> import torch, forgeviz
    >>> t = torch.arange(12).reshape(3, 4)
    >>> view = forgeviz.strides(t, t.T, names=["t", "t.T"])
    >>> [(x.name, x.stride, x.strip) for x in view.model.tensors]
    [('t', [4, 1], 0), ('t.T', [1, 4], 0)]
    """
    if not tensors:
        raise TypeError("forgeviz.strides() needs at least one torch.Tensor (or numpy.ndarray), e.g. strides(t, t.T)")
    for value in tensors:
        if not accepts(value):
            raise TypeError("forgeviz.strides() accepts torch.Tensor or numpy.ndarray arguments; "
                            f"got {type(value).__name__}: {value!r:.60}")
    if names is None:
        names = _caller_names(tensors, lambda k: f"tensor {k}")
    elif isinstance(names, str) or len(names) != len(tensors):
        raise ValueError(f"forgeviz.strides(names=...) expects a list of {len(tensors)} names, one per tensor; "
                         f"got {names!r:.80}")
    return StridesWidget(tensors, [str(n) for n in names], get_session())


def broadcast(*operands, op: str = "broadcast", names: Optional[Sequence[str]] = None,
              dtype: Optional[torch.dtype] = None) -> BroadcastWidget:
    """A step-by-step animation of how the operands broadcast (``op="@"``: how they matmul).

    Operands are tensors or shapes. ``op`` is "broadcast" (just the rule), "+", "-", "*", "/" (the
    result's values are shown for small tensors) or "@". ``dtype`` prices shapes in bytes
    (default: torch's default dtype).

    >>> import forgeviz
    >>> plan = forgeviz.broadcast((64, 128, 1024), (1, 1, 1024)).model
    >>> plan.result_shape, plan.result_nbytes // 2**20, plan.operands[1].nbytes
    ([64, 128, 1024], 32, 4096)
    >>> forgeviz.broadcast((3, 4), (3,)).model.conflict.from_right
    -1
    """
    from ._capture.broadcast import plan_broadcast

    if len(operands) < 1 or (op == "@" and len(operands) != 2):
        raise TypeError("forgeviz.broadcast() needs operands to broadcast, e.g. broadcast(a, b) or "
                        "broadcast((3, 1), (1, 3)); matmul (op='@') takes exactly two")
    if names is None:
        names = _caller_names(operands, lambda k: "abcdefgh"[k] if k < 8 else f"tensor {k}")
    elif isinstance(names, str) or len(names) != len(operands):
        raise ValueError(f"forgeviz.broadcast(names=...) expects a list of {len(operands)} names, one per operand; "
                         f"got {names!r:.80}")
    plan = plan_broadcast(operands, [str(n) for n in names], op, dtype)
    return BroadcastWidget(plan, get_session())


def ranks(norms, peaks: Optional[Mapping[int, int]] = None, *, title: Optional[str] = None) -> RanksWidget:
    """A heatmap of per-module gradient norms per rank per step, and each rank's peak memory.

    ``norms`` is rows of ``(rank, step, module, norm)``: the norm of each module's parameter
    gradients as the optimizer applied them, per rank and step; or a frame whose
    ``itertuples(index=False)`` gives those four columns in that order (a pandas DataFrame with
    columns rank, step, module, norm). Modules are drawn in the order the rows first name them.
    NaN and inf norms are drawn as such. ``peaks`` maps a rank to its peak memory in bytes.
    The view colours norms on a log scale, one panel per rank, and its *Spread* mode shows the
    max/min ratio across ranks of each module and step, where a rank that diverges stands out.

    >>> import torch, forgeviz
    >>> fc = torch.nn.Linear(3, 1)
    >>> fc(torch.ones(2, 3)).sum().backward()
    >>> norm = torch.cat([p.grad.flatten() for p in fc.parameters()]).norm().item()
    >>> w = forgeviz.ranks([(0, 0, "fc", norm), (1, 0, "fc", norm)], {0: 1024, 1: 1024})
    >>> w.model.ranks, w.model.modules
    ([0, 1], ['fc'])
    """
    from .model.ranks import build_grid

    return RanksWidget(build_grid(norms, peaks, title), get_session())


def _caller_names(values, fallback) -> list[str]:
    """What the caller of the public function calls each value (its locals, then its globals),
    else ``fallback(k)``. Frames are not kept."""
    frame = sys._getframe(2)
    try:
        found = names_by_identity(values, frame.f_locals, frame.f_globals)
    finally:
        del frame
    return [n if n is not None else fallback(k) for k, n in enumerate(found)]


class MemoryTrace:
    """Allocation events recorded by :func:`memory_trace`: columns, a plotly figure, live bytes."""

    def __init__(self, tracker) -> None:
        self.tracker = tracker
        self.cuda = None  # the CudaTrace, read when the block ends (memory_trace(device="cuda"))

    def widget(self):
        """The timeline of this trace as a widget (a snapshot; the trace is not live). For a CUDA
        trace: the allocator's history, with reserved bytes, segments and OOMs."""
        from .widgets.memory import MemoryWidget

        if self.cuda is not None:
            from ._capture.cuda_memory import CudaTimelineSource

            return MemoryWidget(CudaTimelineSource(self.cuda), get_session(), live=False)
        return MemoryWidget(self.tracker, get_session(), live=False)

    @property
    def events(self) -> dict:
        """The events as a columnar table (name → numpy array): time, bytes, storage, node, op,
        module, cell, line, action, category. ``op``/``module`` index ``ops``/``modules``."""
        from ._capture.memory import events_table

        return events_table(self.tracker)

    ops = property(lambda trace: trace.tracker.ops, doc="The op names the events' ``op`` column indexes.")
    modules = property(lambda trace: trace.tracker.modules, doc="The module paths the ``module`` column indexes.")

    @property
    def live_bytes(self) -> int:
        """Bytes of the tracked storages alive now (including those that existed at the start)."""
        return self.tracker.live_bytes()

    @property
    def peak_bytes(self) -> int:
        return self.tracker.peak_bytes

    def bytes_by_category(self) -> dict[str, int]:
        """Live bytes now, per category."""
        from .model.memory import CATEGORIES

        out = dict.fromkeys(CATEGORIES, 0)
        for rec in self.tracker.records():
            out[CATEGORIES[rec.category]] += rec.nbytes
        return out

    def to_plotly(self, title: str = "forgeviz memory timeline"):
        """A plotly figure of live bytes stacked by category over time (for a CUDA trace: allocated
        by category, reserved, segment frees and OOMs)."""
        from .export import cuda_timeline_figure, timeline_figure

        if self.cuda is not None:
            return cuda_timeline_figure(self.cuda, title)
        return timeline_figure(self.events, title)


def memory(device: str = "cpu"):
    """The live memory timeline of this kernel since ``%load_ext forgeviz``.

    ``device="cuda"`` (or ``"cuda:N"``) shows that GPU's caching-allocator history instead, recorded
    from the first such call on (reserved vs allocated, segments, releases, OOMs), updated after
    every cell. Outside IPython use ``with forgeviz.memory_trace() as trace:`` instead.
    """
    from ._capture.cuda_memory import CudaHistory, LiveCudaSource, check_cuda_device
    from .widgets.memory import MemoryWidget

    session = get_session()
    if session.memory is None:
        raise RuntimeError("forgeviz.memory() shows the kernel's timeline since %load_ext forgeviz, which is not "
                           "loaded. Run %load_ext forgeviz first, or record a block with "
                           "`with forgeviz.memory_trace() as trace:` (or a cell with %%fv memory).")
    index = check_cuda_device(device)
    if device == "cpu":
        return MemoryWidget(session.memory, session, live=True)
    history = session.cuda_history
    if history is None or (index is not None and history.device != index):
        if history is not None:
            history.stop()
        tracker = session.memory
        history = session.cuda_history = CudaHistory(index, known=lambda: tracker.known_storages("cuda"))
        history.start()
        history.mark_cell(_running_cell())
    return MemoryWidget(LiveCudaSource(history), session, live=True)


def _running_cell() -> int:
    from IPython import get_ipython

    shell = get_ipython()
    return getattr(shell, "execution_count", 0) or 0


def cuda_snapshot(snapshot, device: int = 0):
    """Draw a CUDA allocator snapshot on the memory timeline: allocated by category, reserved, the
    segments and their fragmentation, what ``empty_cache()`` released, and any OOM.

    ``snapshot`` is the dict ``torch.cuda.memory._snapshot()`` returns, or the path of a pickle that
    ``torch.cuda.memory._dump_snapshot(path)`` wrote (taken with ``_record_memory_history`` on).
    Unlike PyTorch's memory_viz page, it needs no network and stays in the notebook.

    >>> view = cuda_snapshot({"segments": [], "device_traces": [[]]})
    >>> view.model.cuda.peak_reserved
    0
    """
    import os
    import pickle

    from ._capture.cuda_memory import CudaTimelineSource, parse_snapshot
    from .widgets.memory import MemoryWidget

    if isinstance(snapshot, (str, os.PathLike)):
        with open(snapshot, "rb") as f:  # the user's own file, written by torch's _dump_snapshot
            snapshot = pickle.load(f)
    source = CudaTimelineSource(parse_snapshot(snapshot, device))
    return MemoryWidget(source, get_session(), live=False)


@contextlib.contextmanager
def memory_trace(max_events: int = 1_000_000, device: str = "cpu") -> Iterator[MemoryTrace]:
    """Record storage allocations and frees inside a ``with`` block.

    Storages that already exist are seeded first, so in-place updates are not new memory.
    Older history is merged once there are more than ``max_events`` events. ``device="cuda"``
    (or ``"cuda:1"``) also records that GPU's caching-allocator history; ``trace.cuda`` then holds
    allocated vs reserved bytes, segments, what ``empty_cache()`` released and any OOM.

    >>> import torch, forgeviz
    >>> with forgeviz.memory_trace() as trace:
    ...     x = torch.ones(1024, 1024)
    >>> trace.bytes_by_category()["temporary"] >= 4 * 2**20
    True
    """
    from ._capture.cuda_memory import CudaHistory, check_cuda_device
    from ._capture.memory_choice import make_tracker

    index = check_cuda_device(device)  # None for "cpu"; raises, saying what is expected or missing
    session = get_session()
    tracker = make_tracker(max_events, fault=session.fault)
    trace = MemoryTrace(tracker)
    history = None
    if device != "cpu":
        history = CudaHistory(index, max_events, known=lambda: tracker.known_storages("cuda"))
        history.start()
    try:
        # Outside a capturing cell, only memory is asked for: no gradient summaries (the graph's job,
        # and several times the cost of a small model's backward).
        with session.recording(record_grads=None if session.capturing else False, tracker=tracker):
            yield trace
    finally:
        if history is not None:
            try:
                trace.cuda = history.trace()
            finally:
                history.stop()


@contextlib.contextmanager
def capture(grads: Optional[Union[str, int]] = None) -> Iterator[CaptureSession]:
    """Capture ops and gradients inside a ``with`` block, outside IPython.

    ``grads``: which backward passes inside the block record gradient summaries (as ``%fv grads``
    sets for the kernel): ``"each"``, every N-th (an int N: passes 1, 1 + N, ...), ``"within P%"`` (the
    block's first pass, then as many as fit in P% of the loop's time, measured pass by pass), ``"shown"``
    (only the Nodes a live graph view draws) or ``"off"``; None keeps the kernel's setting. A bad value
    raises ValueError before anything is captured.

    >>> import torch, forgeviz
    >>> x = torch.tensor([2.], requires_grad=True)
    >>> with forgeviz.capture(grads="each"):
    ...     loss = (x * 3) ** 2
    ...     loss.backward()
    >>> x.grad
    tensor([36.])
    """
    cadence = None if grads is None else cadence_of(grads)  # first: on a bad value nothing changes
    session = get_session()
    recorder = session.recorder
    kept = recorder.cadence
    if cadence is not None:
        recorder.cadence = cadence
    refresh_now = _refresh_after_backward
    if refresh_now not in session.after_backward:
        session.after_backward.append(refresh_now)
    try:
        with session.recording(record_grads=True):  # even inside a memory_trace()
            yield session
    finally:
        recorder.cadence = kept
        if not session.capturing and refresh_now in session.after_backward:
            session.after_backward.remove(refresh_now)


RECORDED_EVENTS = 2**18  # the recording's ledger holds this many events (8 MB), merging older ones: written by then
CUDA_HISTORY_ENTRIES = 2**20  # the allocator's ring between two segments (taken and cleared at each)


@contextlib.contextmanager
def record(path, *, grads: Union[str, int] = "each", budget_mb: float = 256,
           command: Optional[Sequence[str]] = None, segment_seconds: float = 2.0,
           memory: bool = False, _cuda: Optional[Callable[[], object]] = None,
           _write_at_sigterm: bool = False) -> Iterator[CaptureSession]:
    """Capture inside a ``with`` block and record it to the folder ``path`` (each rank in its own
    ``rank<N>/``), for :func:`forgeviz.open` to read later: per ``optimizer.step()``, each parameter's
    gradient as the optimizer applies it, each module's, each Node's (this rank's, during backward), each
    distinct autograd graph once, and memory per step.

    ``grads``: ``"each"`` step, every N-th (an int), ``"within P%"`` (the steps whose backward the cadence of
    that name summarised, as many as fit in P% of the loop's time: README; a rank of several reads each step's
    parameter gradients all the same, for the ranks to compare), or ``"off"`` (steps and graphs only). ``budget_mb``:
    the size the recording aims to stay under (past half of it, steps are thinned, then dropped; the
    metadata says from which step). ``segment_seconds``: a segment is written at least this often (what a
    killed process can lose at most). ``memory=True`` also records the memory timeline (the CPU ledger's
    events, as ``memory_trace()`` does; ``forgeviz.open(path).memory_view(rank)`` draws it): off by default,
    for its cost (README, *Recording scripts and ranks*). Where this process uses CUDA (seen at a backward or
    a step), it also records the current device's caching-allocator history (allocated, reserved, segments,
    OOMs), which ``run.memory(rank)`` then draws instead of the CPU ledger's. ``_cuda``: for tests, what
    starts that history (``cuda_memory.history_once_in_use``'s contract). Writing happens on a background thread; an
    unwritable folder or a full disk is a warning, and the block runs on. ``_write_at_sigterm``: ``python -m forgeviz
    record``'s: a SIGTERM writes what was recorded before the process ends (:func:`_written_at_sigterm`).

    >>> import tempfile, torch, forgeviz
    >>> net = torch.nn.Linear(3, 1); opt = torch.optim.SGD(net.parameters(), lr=0.1)
    >>> with forgeviz.record(tempfile.mkdtemp() + "/run") as session:
    ...     net(torch.ones(2, 3)).sum().backward(); opt.step()
    >>> net.weight.grad
    tensor([[2., 2., 2.]])
    """
    every, within = record_arguments(path, grads, budget_mb, segment_seconds, memory)
    from ._capture.cuda_memory import history_once_in_use
    from ._capture.recording import Recorder

    def open_writer(rank: int, meta: dict) -> RunWriter:  # capture records; forgeviz.run writes
        return RunWriter(Path(path) / rank_folder(rank), {**meta, "forgeviz": __version__}, session.fault)

    with capture(grads=grads if within is not None else every if every else "off") as session, \
            contextlib.ExitStack() as stack:
        recorder = None
        tracker = stack.enter_context(memory_trace(RECORDED_EVENTS)).tracker if memory else None
        cuda = _cuda or (history_once_in_use(CUDA_HISTORY_ENTRIES) if memory and torch.cuda.is_available() else None)
        with boundary(session.fault, "starting the recording"):
            recorder = Recorder(session, open_writer, every, None if command is None else list(command),
                                int(budget_mb * 2**20), segment_seconds, memory=tracker, cuda=cuda if memory else None,
                                within=within)
            recorder.install()
            if _write_at_sigterm:
                stack.enter_context(_written_at_sigterm(recorder, session))
        try:
            yield session
        finally:
            if recorder is not None:
                with boundary(session.fault, "finishing the recording"):
                    recorder.close()


def record_arguments(path, grads, budget_mb, segment_seconds, memory) -> tuple[int, Optional[float]]:
    """:func:`record`'s arguments checked before anything starts (``python -m forgeviz record`` checks its command
    line with it too): a TypeError or ValueError that says what was expected and what was given; else
    :func:`_record_cadence`'s (every, share).

    >>> record_arguments("runs/a", "every 10", 256, 2.0, False)
    (10, None)
    >>> record_arguments("runs/a", "each", 256, -1, False)
    Traceback (most recent call last):
    ...
    ValueError: forgeviz.record(segment_seconds=...) expects a number of seconds, 0 or more, got -1
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"forgeviz.record() expects the run's folder as a str or path, got {type(path).__name__}: "
                        f"{path!r:.60}")
    cadence = _record_cadence(grads)

    def number(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value < float("inf")

    if not number(budget_mb) or not budget_mb > 0:
        raise ValueError("forgeviz.record(budget_mb=...) expects a positive number of megabytes, "
                         f"got {budget_mb!r:.60}")
    if not number(segment_seconds) or not segment_seconds >= 0:  # (0: a segment at each step)
        raise ValueError("forgeviz.record(segment_seconds=...) expects a number of seconds, 0 or more, "
                         f"got {segment_seconds!r:.60}")
    if not isinstance(memory, bool):
        raise TypeError(f"forgeviz.record(memory=...) expects True or False, got {memory!r:.60}")
    return cadence


def _record_cadence(grads) -> tuple[int, Optional[float]]:
    """(every, share) for ``forgeviz.record(grads=...)``: every how many steps it records gradients (0: never) and,
    for ``"within P%"``, its share of the loop's time (else None). Parsed once, by :func:`cadence_of` (as
    ``capture()`` parses it); what a recording cannot take (``"shown"``: a script draws no view) is a ValueError
    that says what it can.

    >>> _record_cadence("each"), _record_cadence(10), _record_cadence("within 5%"), _record_cadence("off")
    ((1, None), (10, None), (1, 0.05), (0, None))
    """
    cadence = None
    if isinstance(grads, int) and not isinstance(grads, bool) and grads == 0:
        cadence = OFF  # (0 steps apart: never, as the command line's --grads 0 has always meant)
    else:
        try:
            cadence = cadence_of(grads)
        except ValueError:
            pass
    if isinstance(cadence, Within):
        return 1, cadence.share
    if cadence in (EACH, OFF) or isinstance(cadence, int):
        return (1 if cadence == EACH else 0 if cadence == OFF else cadence), None
    raise ValueError(f"forgeviz.record(grads=...) expects 'each', 'off', 'within P%' (0 < P < 100) or a positive "
                     f"int N (every N-th step), got {grads!r:.60}")


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_CLI = os.path.join(_PACKAGE, "__main__.py")  # (its frame stands below the script's; record()'s, suspended, on none)


def _in_forgeviz(frame) -> bool:
    """Whether ``frame`` (a signal's: where the main thread was) is forgeviz's code, or code forgeviz called: a frame
    of the package stands on the stack above the script's (the CLI's own stands below it)."""
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if name == _CLI:
            return False
        if name.startswith(_PACKAGE):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def _written_at_sigterm(recorder, session) -> Iterator[None]:
    """While the block runs, a SIGTERM (a scheduler's preemption, torchrun ending the other ranks when one fails)
    first writes what ``recorder`` holds (its last segment, the final metadata, naming the signal and the step; a
    few seconds at most), then ends the process as the signal would have: the same exit status. Without it, the
    last ``segment_seconds`` of the run, the steps just before the end, would be lost. Only where the process had no
    SIGTERM handler of its own (a script that sets one later replaces this), and on the main thread. A signal that
    comes while forgeviz's own code runs (a hook mid-step) is taken again a few ms later, from the script's code."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    deferred = [0]

    def ended(signum, frame) -> None:
        # (about a second of them; and for as long as the recording is being closed: close() has its own time limits)
        if _in_forgeviz(frame) and (deferred[0] < 200 or recorder.closed):
            deferred[0] += 1
            threading.Timer(0.005, os.kill, (os.getpid(), signum)).start()
            return
        signal.signal(signum, signal.SIG_DFL)
        with boundary(session.fault, "writing the recording at SIGTERM"):
            recorder.terminated = f"{signal.Signals(signum).name} after step {recorder.step - 1}"
            recorder.close(wait=2.0, timeout=10.0)
        os.kill(os.getpid(), signum)  # (the default action now: the process ends as it would have)

    previous = signal.signal(signal.SIGTERM, ended)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is ended:
            signal.signal(signal.SIGTERM, previous)


def _refresh_after_backward() -> None:
    widgets = get_session().widgets
    if len(widgets):  # (most backward passes have no view to refresh: a WeakSet's iteration took 7 µs a pass)
        for widget in list(widgets):
            widget.refresh()


def show(name: str, namespace: Optional[Mapping[str, object]] = None):
    """The view of the tensor the notebook calls ``name`` (a variable, or a module's parameter such as
    ``"model.fc1.weight"``): its graph when it has autograd history, else its stride view. What a
    click on a row of the side panel runs; the name is looked up attribute by attribute, never
    evaluated.

    >>> import torch, forgeviz
    >>> w = torch.zeros(2, 3)
    >>> [t.name for t in forgeviz.show("w", {"w": w}).model.tensors]
    ['w']
    >>> forgeviz.show("w.T", {"w": w})
    Traceback (most recent call last):
    ...
    ValueError: forgeviz.show('w.T'): expected the name of a tensor in the notebook (w.T is not one)
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"forgeviz.show() expects a tensor's name as a string, got {name!r:.60}")
    if namespace is None:
        namespace = _user_namespace(1)
    head, *attributes = name.split(".")
    value = namespace.get(head)
    for attribute in attributes:
        if value is None or not (attribute.isidentifier() or attribute.isdigit()):
            break
        if isinstance(value, torch.nn.Module):  # its own parameters, buffers and submodules only
            owned = {**dict(value.named_children()), **dict(value.named_buffers(recurse=False)),
                     **dict(value.named_parameters(recurse=False))}
            value = owned.get(attribute)
        else:
            value = None
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"forgeviz.show({name!r}): expected the name of a tensor in the notebook "
                         f"({name} is not one)")
    if value.grad_fn is not None:
        return graph(value, namespace=namespace)
    return strides(value, names=[name])
