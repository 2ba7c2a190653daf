"""Recording a training script (``forgeviz.record``, ``python -m forgeviz record``): per optimizer step, the
gradients the optimizer applies (read in a global optimizer step pre-hook, so after DDP's all-reduce,
clipping and anything the script did to ``.grad``), each module's parameters together, the gradient that
reached each Node during backward (this rank's own, from the session's records), each distinct autograd
graph once, and memory per step. Rows gather here and go to :class:`forgeviz.run.writer.RunWriter` a
segment at a time; the disk is the writer thread's.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
import weakref
import zlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import torch

from .._version import __version__
from ..model.graph import graph_trait
from ..run.format import FORMAT, FORMAT_VERSION, GRADS, GRAPHS, MODULE, NODE, PARAMETER, SCHEMAS, STEPS, rank_folder
from ..run.writer import RunWriter
from .fault import boundary, guarded
from .names import NameIndex
from .summary import summarize
from .untraced import untraced
from .walk import build_graph, reachable

SEGMENT_ROWS = 8192  # a segment is written once this many rows wait...
SEGMENT_SECONDS = 2.0  # ...or this long after the last one (what a SIGKILL can lose at most)
BUDGET_BYTES = 256 * 2**20
MAX_GRAPHS = 32  # distinct graphs recorded per rank, at most
GRAPH_NODES = 20_000


def rank_and_world() -> tuple[int, int]:
    """This process's rank and world size: torch.distributed's once initialised, else torchrun's
    ``RANK`` / ``WORLD_SIZE``, else (0, 1)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def fingerprint(grad: torch.Tensor) -> int:
    """CRC-32 of a tensor's bytes, in row-major order: equal tensors (bit for bit) give equal numbers.

    >>> a, b = torch.tensor([1., 2.]), torch.tensor([1., 3.])
    >>> fingerprint(a) == fingerprint(a.clone()) != fingerprint(b)
    True
    """
    t = grad.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    return zlib.crc32(t.contiguous().view(-1).view(torch.uint8).numpy())


class Recorder:
    """Records one rank into ``folder/rank<N>/`` while installed (see the module's docstring)."""

    def __init__(self, session, folder: Path, every: int = 1, command: Optional[list[str]] = None,
                 budget_bytes: int = BUDGET_BYTES, segment_seconds: float = SEGMENT_SECONDS) -> None:
        self.session = session
        self.segment_seconds = segment_seconds
        self.every = every  # parameters are recorded on steps 1, 1 + every, …; 0: none
        self.budget = budget_bytes
        self.rank, self.world = rank_and_world()
        self.step = 1  # the optimizer step under way (steps are counted from 1 at optimizer.step())
        self.stride = 1  # raised as the size budget fills (older steps keep their detail)
        self.downsampled: list[list[int]] = []  # [from step, stride]
        self.over_budget_at: Optional[int] = None
        self._t0 = time.perf_counter()
        self._last_flush = self._t0
        self._rows = {name: {f.name: [] for f in SCHEMAS[name]} for name in (GRADS, STEPS)}
        self._names: dict[int, tuple] = {}  # id(parameter) -> (weakref, name, module path)
        self._graphs: dict[tuple, int] = {}  # structure -> graph id
        self._pending: Optional[tuple[int, list]] = None  # (graph id, [(node id, name, module)]) of a backward
        self._counting = None  # a weakref to the optimizer whose steps count
        self._handles: list = []
        self._peak = 0
        self.writer = RunWriter(Path(folder) / rank_folder(self.rank), self._meta(command), session.fault)

    def _meta(self, command) -> dict:
        return {"format": FORMAT, "format_version": FORMAT_VERSION, "forgeviz": __version__,
                "torch": torch.__version__, "python": platform.python_version(),
                "device": "cuda" if torch.cuda.is_available() else "cpu", "rank": self.rank,
                "world_size": self.world, "command": list(command if command is not None else sys.argv),
                "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "grads": "off" if not self.every else "each" if self.every == 1 else f"every {self.every}",
                "budget_bytes": self.budget, "finished": False}

    # --- lifecycle ---------------------------------------------------------------------------
    def install(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._handles = [register_optimizer_step_pre_hook(self._step_begins),
                         register_optimizer_step_post_hook(self._step_ends)]
        self.session.before_backward.append(self._before_backward)
        self.session.after_backward.append(self._after_backward)

    def uninstall(self) -> None:
        """Remove the hooks (the writer stays open: :meth:`install` again, or :meth:`close`)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for hooks, hook in ((self.session.before_backward, self._before_backward),
                            (self.session.after_backward, self._after_backward)):
            if hook in hooks:
                hooks.remove(hook)

    def close(self) -> None:
        """Remove the hooks, write what waits, and the final metadata."""
        self.uninstall()
        with boundary(self.session.fault, "writing the recording's last segment"):
            self._flush()
        rank, world = rank_and_world()  # torch.distributed may have started after recording did
        self.writer.meta.update(rank=rank, world_size=world)
        self.writer.close({"finished": True, "steps": self.step - 1, "downsampled": self.downsampled,
                           "over_budget_from_step": self.over_budget_at})

    # --- per step ----------------------------------------------------------------------------
    def _records_step(self) -> bool:
        return bool(self.every) and self.over_budget_at is None and (self.step - 1) % (self.every * self.stride) == 0

    @guarded("recording the gradients the optimizer applies")
    def _step_begins(self, optimizer, args, kwargs) -> None:
        if self._counting is None:
            self._counting = weakref.ref(optimizer)
        if not self._records_step():
            return
        rows = self._rows[GRADS]
        modules: dict[str, list[float]] = {}  # path -> [sum of squares, min, max, sum, numel]
        with untraced(), torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    grad = p.grad
                    if grad is None:
                        continue
                    sharded = hasattr(grad, "to_local")
                    local = grad.to_local() if sharded else grad
                    s = summarize(local, histogram=False)
                    name, module = self._name(p)
                    norm, lo, hi, mean = (_num(s.norm), _num(s.min), _num(s.max), _num(s.mean))
                    self._append(rows, PARAMETER, name, module, norm, lo, hi, mean, s.numel,
                                 fingerprint(local), sharded)
                    m = modules.get(module)
                    if m is None:
                        modules[module] = [norm * norm, lo, hi, mean * s.numel, s.numel]
                    else:
                        m[0] += norm * norm
                        m[1], m[2] = min(m[1], lo), max(m[2], hi)
                        m[3] += mean * s.numel
                        m[4] += s.numel
        for path, (squares, lo, hi, total, numel) in modules.items():
            self._append(rows, MODULE, path, path, math.sqrt(squares), lo, hi, total / max(numel, 1), numel)

    def _append(self, rows, kind, name, module, norm, lo, hi, mean, numel, fp=None, sharded=None, graph=None,
                node=None) -> None:
        for key, value in (("step", self.step), ("kind", kind), ("name", name), ("module", module),
                           ("norm", norm), ("min", lo), ("max", hi), ("mean", mean), ("numel", numel),
                           ("fingerprint", fp), ("sharded", sharded), ("graph", graph), ("node", node)):
            rows[key].append(value)

    def _name(self, p) -> tuple[str, str]:
        known = self._names.get(id(p))
        if known is not None and known[0]() is p:
            return known[1], known[2]
        found = self.session.modules.parameters.lookup(p)
        name, module = (found[0], found[1]) if found else (f"param{len(self._names)}", "")
        self._names[id(p)] = (weakref.ref(p), name, module)
        return name, module

    @guarded("counting an optimizer step")
    def _step_ends(self, optimizer, args, kwargs) -> None:
        if self._counting is None or self._counting() is not optimizer:
            return  # a second optimizer's step is not another step
        rows = self._rows[STEPS]
        live = peak = None
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            live, peak = torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()
        else:
            for tracker in self.session.traces:  # a memory_trace() or the kernel's timeline, when one runs
                live, peak = tracker.live_bytes(), tracker.peak_bytes()
                break
        for key, value in (("step", self.step), ("time", time.perf_counter() - self._t0), ("live_bytes", live),
                           ("peak_bytes", peak)):
            rows[key].append(value)
        self.step += 1
        now = time.perf_counter()
        if len(self._rows[GRADS]["step"]) >= SEGMENT_ROWS or now - self._last_flush >= self.segment_seconds:
            self._flush()

    def _flush(self) -> None:
        self._last_flush = time.perf_counter()
        for name, columns in self._rows.items():
            if columns["step"]:
                self.writer.submit(name, columns)
                self._rows[name] = {key: [] for key in columns}
        self._budget()

    def _budget(self) -> None:
        """Past half the budget, every second recorded step is kept; past three quarters every fourth, …;
        past the budget, no more gradient rows (steps and memory go on). Said in the metadata."""
        used = self.writer.bytes
        if used >= self.budget:
            if self.over_budget_at is None:
                self.over_budget_at = self.step
            return
        wanted = 1
        while used >= self.budget * (1 - 0.5 ** wanted) and wanted < 16:
            wanted += 1
        stride = 2 ** (wanted - 1)
        if stride > self.stride:
            self.stride = stride
            self.downsampled.append([self.step, stride])

    # --- per backward ------------------------------------------------------------------------
    def _before_backward(self, roots: list) -> None:
        self._pending = None
        if not self._records_step() or not self.session.record_grads:
            return
        with untraced():
            nodes, _ = reachable(roots, GRAPH_NODES)
            described = []
            for node in nodes:
                tag = node.metadata.get("fv_op")
                if tag is None and hasattr(node, "variable"):  # a leaf's AccumulateGrad: named by its parameter
                    name, module = self._name(node.variable)
                else:
                    name, module = node.name(), (tag[4][2] if tag and tag[4] else None)
                described.append((node.metadata.get("fv_id"), name, module))
            shape = tuple((name, module) for _, name, module in described)
            graph = self._graphs.get(shape)
            if graph is None and len(self._graphs) < MAX_GRAPHS:
                graph = self._graphs[shape] = len(self._graphs)
                live = build_graph(roots, self.session, NameIndex(), max_nodes=GRAPH_NODES)
                self.writer.submit(GRAPHS, {"graph": [graph], "step": [self.step], "nodes": [len(described)],
                                            "json": [json.dumps(graph_trait(live.graph))]})
                described = [(n.id, name, module) for n, (_, name, module) in zip(live.graph.nodes, described)]
        if graph is not None:
            self._pending = (graph, described)

    def _after_backward(self) -> None:
        pending, self._pending = self._pending, None
        store = self.session.store
        if pending is None or store.recorded != store.passes:
            return
        graph, described = pending
        rows = self._rows[GRADS]
        for position, (nid, name, module) in enumerate(described):
            grads = store.get(nid) if nid is not None else None
            if not grads or not grads.records or grads.records[-1].backward_index != store.recorded:
                continue
            outputs = grads.records[-1].grad_outputs
            s = outputs[0] if outputs else None
            if s is None or s.norm is None:
                continue
            self._append(rows, NODE, name, module, _num(s.norm), _num(s.min), _num(s.max), _num(s.mean), s.numel,
                         graph=graph, node=position)


def _num(value) -> float:
    """A summary's float (JSON-safe strings for non-finite values back to floats)."""
    return float(value) if value is not None else math.nan
