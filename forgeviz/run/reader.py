"""Reading a recorded run: :func:`open_run` (``forgeviz.open``) gives a :class:`Run`.

Whatever can be read is read: a rank's stream cut short by a killed process gives its whole segments,
and a rank that cannot be read at all (missing, written by a newer forgeviz, corrupted) is left out.
Each such problem is in ``run.problems`` (and warned once when the run opens).
"""

from __future__ import annotations

import functools
import json
import math
import os
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import pyarrow as pa
import pyarrow.compute as pc

from ..model import run as fmt  # the format's names: fmt.GRADS, fmt.FORMAT_VERSION, ...
from .format import SCHEMAS, SUFFIX
from .memory import RecordedMemory, cuda_snapshot_of

FRAME_COLUMNS = ["rank", "step", "kind", "name", "module", "norm", "min", "max", "mean", "numel", "fingerprint",
                 "sharded", "graph", "node"]


@dataclass(frozen=True)
class Finding:
    """One thing the doctor found in a run: its ``kind``, the ``ranks`` concerned, the ``step``, the
    ``parameter`` (None for a Node's finding) or the ``node`` (its torch name; None for a parameter's) and
    its ``module``, and a ``message`` in words (the first rank's)."""

    kind: str
    ranks: tuple[int, ...]
    step: int
    parameter: Optional[str]
    message: str
    node: Optional[str] = None
    module: Optional[str] = None


@dataclass
class RankData:
    """What one rank wrote: its metadata and its streams as Arrow tables (whole segments only)."""

    rank: int
    meta: dict
    tables: dict[str, pa.Table]


def read_stream(path: Path, problems: list[str]) -> Optional[pa.Table]:
    """The whole segments of one Arrow IPC stream; a cut or corrupted tail is noted in ``problems``.

    >>> import tempfile; d = Path(tempfile.mkdtemp()); p = d / "s.arrows"
    >>> t = pa.table({"x": [1, 2]}); w = pa.ipc.new_stream(str(p), t.schema); w.write_table(t); w.close()
    >>> _ = p.write_bytes(p.read_bytes()[:-20]); problems = []
    >>> read_stream(p, problems).num_rows, problems[0].split(":")[0] == f"{d.name}/s.arrows"
    (0, True)
    """
    if not path.exists():
        return None
    data = path.read_bytes()
    batches = []
    schema = None
    try:
        reader = pa.ipc.open_stream(pa.BufferReader(data))
        schema = reader.schema
        while True:
            try:
                batches.append(reader.read_next_batch())
            except StopIteration:
                break
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        # (named with its rank's folder: each rank has files of the same names)
        problems.append(f"{path.parent.name}/{path.name}: cut short or corrupted after {len(batches)} whole segment(s) "
                        f"({type(exc).__name__}: {exc}); reading those")
    if schema is None:
        return None
    return pa.Table.from_batches(batches, schema=schema)


def _read_rank(folder: Path, problems: list[str]) -> Optional[RankData]:
    meta_path = folder / fmt.META
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        problems.append(f"{folder.name}: no readable {fmt.META} ({type(exc).__name__}: {exc}); rank left out")
        return None
    if meta.get("format") != fmt.FORMAT:
        problems.append(f"{folder.name}: {fmt.META} is not a forgeviz run (format {meta.get('format')!r}); left out")
        return None
    version = meta.get("format_version")
    if not isinstance(version, int) or version > fmt.FORMAT_VERSION:
        problems.append(f"{folder.name}: written by a newer forgeviz ({meta.get('forgeviz')}, run format "
                        f"{version}); this forgeviz reads format {fmt.FORMAT_VERSION} and older: upgrade forgeviz "
                        "to read it; rank left out")
        return None
    tables = {}
    for name in SCHEMAS:
        table = read_stream(folder / (name + SUFFIX), problems)
        tables[name] = table if table is not None else SCHEMAS[name].empty_table()
    if meta.get("terminated"):
        problems.append(f"{folder.name}: the script was ended by {meta['terminated']}; what it recorded until then was "
                        "written")
    if not meta.get("finished"):
        problems.append(f"{folder.name}: recording did not finish (the process was killed or is still "
                        "running); showing its whole segments")
    dropped = meta.get("dropped_segments") or 0
    if dropped:  # (held back past the recorder's bound; or its rows failed to build, which was also told, as a fault)
        spans = [f"{table} rows of steps {_between(first, last)}"
                 for first, last, table in meta.get("dropped_steps") or ()]
        problems.append(f"{folder.name}: {dropped} segment(s) were dropped while recording (the writer fell behind "
                        "the training loop" + (f": {', '.join(spans)}" if spans else "") + "); those rows are missing")
    problems.extend(f"{folder.name}: {fault}" for fault in meta.get("faults") or [])  # (writing stopped)
    return RankData(int(meta.get("rank", folder.name.removeprefix("rank") or 0)), meta, tables)


def open_run(path: Union[str, Path]) -> "Run":
    """Open a run recorded by ``python -m forgeviz record`` or ``forgeviz.record()``.

    ``path`` is the run's folder (with one ``rank<N>/`` per rank) or one rank's folder. Raises
    FileNotFoundError for a missing folder and ValueError when no rank can be read (saying why).

    >>> import forgeviz, tempfile
    >>> forgeviz.open(tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: forgeviz.open(): no recorded rank in /... (expected rank0/, rank1/, … each with meta.json)
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"forgeviz.open() expects a run's folder as a str or path, got {type(path).__name__}: "
                        f"{path!r:.60}")
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"forgeviz.open(): expected the folder of a recorded run, {str(folder)!r} is "
                                f"{'a file' if folder.exists() else 'missing'}")
    folders = [folder] if (folder / fmt.META).exists() else sorted(
        (p for p in folder.iterdir() if p.is_dir() and p.name.startswith("rank") and p.name[4:].isdigit()),
        key=lambda p: int(p.name[4:]))
    if not folders:
        raise ValueError(f"forgeviz.open(): no recorded rank in {folder} (expected rank0/, rank1/, … each "
                         f"with {fmt.META})")
    problems: list[str] = []
    ranks = [r for r in (_read_rank(f, problems) for f in folders) if r is not None]
    if not ranks:
        raise ValueError("forgeviz.open(): no rank of " + str(folder) + " could be read: " + "; ".join(problems))
    world = max(int(r.meta.get("world_size") or 1) for r in ranks)
    missing = sorted(set(range(world)) - {r.rank for r in ranks})
    if missing:
        problems.append(f"rank(s) {', '.join(map(str, missing))} of {world} missing or unreadable in {folder}; "
                        "showing the others")
    for problem in problems:
        warnings.warn(f"forgeviz.open(): {problem}", stacklevel=2)
    return Run(folder, ranks, problems)


class Run:
    """A recorded run: its ranks, steps, gradients, graphs, memory and findings.

    In a notebook it displays as a header (ranks, steps, command, problems, the doctor's findings), the
    ranks view (per-module gradient norm per rank per step, and peak memory per rank), the graph
    view with a step slider (:meth:`graph_view`) and the memory timeline of rank 0 when it was recorded
    (:meth:`memory_view`; else a line saying how to record it).
    """

    def __init__(self, folder: Path, ranks: list[RankData], problems: list[str]) -> None:
        self.folder = folder
        self._ranks = {r.rank: r for r in ranks}
        self.problems = problems
        self._findings: Optional[list[Finding]] = None
        self._steps_rows: dict[int, dict[int, list[dict]]] = {}
        self._memory: dict[int, Optional[RecordedMemory]] = {}

    def __repr__(self) -> str:
        return (f"<forgeviz Run {str(self.folder)!r}: ranks {self.ranks}, {len(self.steps)} steps"
                f"{', ' + str(len(self.problems)) + ' problem(s)' if self.problems else ''}>")

    @property
    def ranks(self) -> list[int]:
        """The ranks that could be read, in order."""
        return sorted(self._ranks)

    @property
    def steps(self) -> list[int]:
        """The optimizer steps recorded on any rank (1 is the first ``optimizer.step()``)."""
        found: set[int] = set()
        for data in self._ranks.values():
            for name in (fmt.GRADS, fmt.STEPS):
                found.update(data.tables[name].column("step").to_pylist())
        return sorted(found)

    def meta(self, rank: int) -> dict:
        """Rank ``rank``'s metadata (versions, device, world size, command, what was dropped)."""
        return dict(self._rank(rank).meta)

    def _rank(self, rank: int) -> RankData:
        if rank not in self._ranks:
            raise KeyError(f"Run: no rank {rank!r} in this run; its ranks are {self.ranks}")
        return self._ranks[rank]

    def _rows(self, rank: int, kind: str) -> list[dict]:
        table = self._rank(rank).tables[fmt.GRADS]  # (filtered by pyarrow: only the kind's rows become dicts)
        return table.filter(pc.equal(table["kind"].cast(pa.string()), kind)).to_pylist()

    def grad_norms(self, rank: int, step: int) -> dict[str, float]:
        """``{parameter name: norm}`` of the gradients the optimizer applied at ``step`` on ``rank``
        (after DDP's all-reduce, clipping, and whatever the script did to ``.grad``).

        >>> import tempfile, torch, forgeviz
        >>> net = torch.nn.Linear(2, 1); opt = torch.optim.SGD(net.parameters(), lr=0.1)
        >>> with forgeviz.record(folder := tempfile.mkdtemp()):
        ...     net(torch.ones(1, 2)).sum().backward(); opt.step()
        >>> forgeviz.open(folder).grad_norms(0, 1)  # d sum / d weight = [[1, 1]]: its norm is √2
        {'weight': 1.4142135623730951, 'bias': 1.0}
        """
        found = {r["name"]: r["norm"] for r in self._by_step(rank).get(step, ()) if r["kind"] == fmt.PARAMETER}
        if not found and step not in self.steps:
            raise KeyError(f"Run.grad_norms(): no step {step!r} recorded; recorded steps: "
                           f"{_span(self.steps)}")
        return found

    def frame(self):
        """Every gradient summary as a pandas DataFrame, one row per rank, step and parameter, module or
        Node: columns ``rank, step, kind ("module" | "node" | "parameter"), name, module, norm, min, max,
        mean``, then ``numel``, ``fingerprint`` (parameter rows: the sum of the applied gradient's bit
        patterns, folded, or a CRC-32 of its bytes in a run recorded on the CPU before that; made to compare
        ranks, so None in a run of one),
        ``sharded`` (a DTensor shard), ``graph`` and ``node`` (node rows: the recorded graph and the Node's
        position in its ``nodes``)."""
        import pandas as pd

        frames = []
        for rank in self.ranks:
            table = self._ranks[rank].tables[fmt.GRADS]
            df = table.to_pandas(types_mapper=_nullable().get)  # a column with nulls keeps its ints
            df.insert(0, "rank", rank)
            frames.append(df)
        df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=FRAME_COLUMNS)
        df["kind"] = df["kind"].astype(str)
        return df[FRAME_COLUMNS]

    def step_memory(self, rank: int) -> dict[str, list]:
        """Rank ``rank``'s memory per optimizer step, as columns: ``step``, ``time`` (seconds since
        recording began), ``live_bytes`` and ``peak_bytes`` (None where not measured)."""
        return self._rank(rank).tables[fmt.STEPS].to_pydict()

    def recorded_memory(self, rank: int, device: Optional[str] = None):
        """Rank ``rank``'s memory stream (``record(memory=True)``) as the memory view's source; None if
        it was not recorded. ``device``: ``"cuda"`` the CUDA allocator history, ``"cpu"`` the CPU ledger's
        events; None the CUDA history where the rank recorded one, else the CPU ledger's."""
        if device not in (None, "cpu", "cuda"):
            raise ValueError(f"Run.memory(device=...): expected None, 'cpu' or 'cuda', got {device!r:.60}")
        data = self._rank(rank)
        if device != "cpu" and (data.tables[fmt.CUDA_MEMORY].num_rows or device == "cuda"):
            return self._cuda_memory(rank, data)
        if rank not in self._memory:
            table = data.tables[fmt.MEMORY]
            thinned = data.meta.get("memory_downsampled")
            # events after the last optimizer.step() carry the next step's number: count the steps the rank took
            steps = set(table.column("step").to_pylist()) & set(data.tables[fmt.STEPS].column("step").to_pylist())
            self._memory[rank] = None if not data.meta.get("memory") else RecordedMemory(
                table, data.meta, f"{self.folder.name}, rank {rank}: {len(steps)} step(s) recorded"
                + (f"; an outline from step {thinned[0][0]} (the size budget)" if thinned else ""))
        return self._memory[rank]

    def _cuda_memory(self, rank: int, data: RankData):
        """The CUDA history rank ``rank`` recorded, parsed as the notebook parses a snapshot; None if none."""
        key = ("cuda", rank)
        if key not in self._memory:
            found = cuda_snapshot_of(data.tables[fmt.CUDA_MEMORY])
            if found is None:
                self._memory[key] = None
            else:  # the parser is the notebook's, and reads plain dicts (torch is imported only for CUDA runs)
                from .._capture.cuda_memory import CudaTimelineSource, parse_snapshot

                snapshot, device = found
                steps = data.tables[fmt.CUDA_MEMORY].column("step")
                self._memory[key] = CudaTimelineSource(parse_snapshot(snapshot, device), (
                    f"{self.folder.name}, rank {rank}: the CUDA allocator history of cuda:{device}, steps "
                    f"{pc.min(steps).as_py()}–{pc.max(steps).as_py()}"))
        return self._memory[key]

    def memory(self, rank: int, device: Optional[str] = None):
        """Rank ``rank``'s memory timeline as the memory view's wire model (a ``MemoryTimeline``: peak and
        live bytes, ops and modules; its events are ``memory_view(rank)``'s), rebuilt from the memory stream
        that ``forgeviz.record(..., memory=True)`` wrote. For a rank that used CUDA it is the CUDA allocator
        history's timeline (device ``cuda:N``: allocated, reserved, segments and OOMs, as the notebook's
        CUDA view); ``device="cpu"`` gives that rank's CPU ledger instead. Raises LookupError if it was not
        recorded.

        >>> import tempfile, torch, forgeviz
        >>> net = torch.nn.Linear(256, 256); opt = torch.optim.SGD(net.parameters(), lr=0.1)
        >>> with forgeviz.record(folder := tempfile.mkdtemp(), memory=True):
        ...     net(torch.ones(1, 256)).sum().backward(); opt.step()
        >>> forgeviz.open(folder).memory(0).peak_bytes >= 2 * (256 * 256 + 256) * 4  # parameters and grads
        True
        """
        source = self.recorded_memory(rank, device)
        if source is None:
            raise LookupError(f"Run.memory(): rank {rank} recorded no {device or 'memory'} timeline (record with "
                              "forgeviz.record(..., memory=True) or python -m forgeviz record --memory); "
                              "run.step_memory(rank) has what each step measured")
        return source.timeline()

    def memory_view(self, rank: int, device: Optional[str] = None):
        """The memory view (``forgeviz.memory``'s widget) drawing rank ``rank``'s recorded timeline (``device``:
        as :meth:`memory`)."""
        from ..api import get_session  # the widget (and torch) only when a view is asked for
        from ..widgets.memory import MemoryWidget

        self.memory(rank, device)  # (raises, saying so, when none was recorded)
        return MemoryWidget(self.recorded_memory(rank, device), get_session(), live=False)

    def peaks(self) -> dict[int, int]:
        """``{rank: peak bytes}``: of the memory timeline where it was recorded, else over the steps, for the
        ranks that measured memory."""
        peaks = {}
        for rank, data in self._ranks.items():
            source = self.recorded_memory(rank)
            if source is not None and source.count:
                peaks[rank] = source.peak_bytes()
                continue
            values = [v for v in data.tables[fmt.STEPS].column("peak_bytes").to_pylist() if v is not None]
            if values:
                peaks[rank] = max(values)
        return peaks

    def graph(self, step: Optional[int] = None, rank: Optional[int] = None) -> Optional[dict]:
        """The graph view's ``graph`` trait (folded by module, as JSON data) of the autograd graph that
        ran at ``step`` (None: the latest recorded) on ``rank`` (None: the first rank); None if no
        graph was recorded. A step that was not recorded is a KeyError, as in :meth:`grad_norms`."""
        table = self._rank(self.ranks[0] if rank is None else rank).tables[fmt.GRAPHS]
        if step is not None and step not in self.steps:
            raise KeyError(f"Run.graph(): no step {step!r} recorded; recorded steps: {_span(self.steps)}")
        graphs = table.to_pylist()
        if not graphs:
            return None
        if step is None:
            return json.loads(graphs[-1]["json"])
        nodes = [r for r in self._rows(rank if rank is not None else self.ranks[0], fmt.NODE) if r["step"] <= step]
        wanted = nodes[-1]["graph"] if nodes else None
        for g in reversed(graphs):
            if (wanted is not None and g["graph"] == wanted) or (wanted is None and g["step"] <= step):
                return json.loads(g["json"])
        return json.loads(graphs[0]["json"])

    @property
    def findings(self) -> list[Finding]:
        """The doctor's findings, by step: what each rank's recording found (``nonfinite-grad``: the first
        Node whose gradients went NaN or infinite in a backward, and the first parameter whose applied
        gradient is not finite), one finding for the ranks that found the same thing; and ranks whose
        applied gradients differ (``rank_divergence``), found when asked, by comparing each replicated
        parameter's gradient fingerprint across ranks."""
        if self._findings is None:
            recorded: dict[tuple, list] = {}
            for rank in self.ranks:
                for row in self._ranks[rank].tables[fmt.FINDINGS].to_pylist():
                    key = (row["step"], row["kind"], row["parameter"], row["node"], row["module"])
                    recorded.setdefault(key, [row["message"], []])[1].append(rank)
            found = [Finding(kind, tuple(ranks), step, parameter, message, node, module)
                     for (step, kind, parameter, node, module), (message, ranks) in recorded.items()]
            found += divergence(self._fingerprints())
            self._findings = sorted(found, key=lambda f: (f.step, f.kind, f.ranks))
        return list(self._findings)

    def _fingerprints(self) -> dict[tuple[int, str], dict[int, int]]:
        # (a rank's fingerprints are bit-pattern sums, or, recorded on the CPU by an older forgeviz, CRC-32s:
        # those of the most ranks are compared; a world that mixes them has no other way to be compared)
        kinds = {rank: self._rank(rank).meta.get("fingerprint", "crc32") for rank in self.ranks}
        common = max(set(kinds.values()), key=list(kinds.values()).count, default=None)
        found: dict[tuple[int, str], dict[int, int]] = defaultdict(dict)
        for rank in self.ranks:
            if kinds[rank] != common:
                continue
            for row in self._rows(rank, fmt.PARAMETER):
                if not row["sharded"] and row["fingerprint"] is not None:
                    found[(row["step"], row["name"])][rank] = row["fingerprint"]
        return found

    def module_norms(self) -> list[tuple[int, int, str, float]]:
        """``(rank, step, module, norm)`` rows: each module's parameters' applied gradient norm."""
        rows = []
        for rank in self.ranks:
            for r in self._rows(rank, fmt.MODULE):
                if r["norm"] is not None and math.isfinite(r["norm"]):
                    rows.append((rank, r["step"], r["name"], r["norm"]))
        return rows

    # --- the recorded graph view (run.graph_view) ---------------------------------------------
    def _by_step(self, rank: int) -> dict[int, list[dict]]:
        """Rank ``rank``'s gradient rows by step (read once)."""
        found = self._steps_rows.get(rank)
        if found is None:
            found = self._steps_rows[rank] = defaultdict(list)
            for row in self._rank(rank).tables[fmt.GRADS].to_pylist():
                found[row["step"]].append(row)
        return found

    def gradient_steps(self, rank: int) -> list[int]:
        """The steps of ``rank`` with gradient rows (Nodes' or parameters'), ascending: those a graph
        view can show. A recording keeps every step unless ``grads=N`` or its size budget thinned them."""
        return sorted(self._by_step(rank))

    def rows_at(self, rank: int, step: int) -> list[dict]:
        """The gradient rows of ``rank`` at ``step`` (as :meth:`frame`'s columns, less ``rank``)."""
        return list(self._by_step(rank).get(step, ()))

    def graph_at(self, step: int, rank: int) -> tuple[Optional[int], Optional[dict]]:
        """``(graph id, graph trait)`` of the autograd graph ``rank`` ran at ``step``: the graph its Node
        rows name, else the latest recorded by then; ``(None, None)`` when none was."""
        graphs = self._rank(rank).tables[fmt.GRAPHS].to_pylist()
        named = {r["graph"] for r in self.rows_at(rank, step) if r["kind"] == fmt.NODE}
        chosen = next((g for g in reversed(graphs) if g["graph"] in named), None)
        if chosen is None:
            chosen = next((g for g in reversed(graphs) if g["step"] <= step), None)
        return (None, None) if chosen is None else (chosen["graph"], json.loads(chosen["json"]))

    def why_no_step(self, rank: int, step: object) -> str:
        """Why ``step`` has no gradients on ``rank``, in words, with the steps that have them.

        >>> run.why_no_step(0, 99)  # doctest: +SKIP
        'expected a step with recorded gradients on rank 0 (1…4), got 99: the run has steps 1…4'
        """
        have = self.gradient_steps(rank)
        meta = self._rank(rank).meta
        said = f"expected a step with recorded gradients on rank {rank} ({_span(have)}), got {step!r}"
        if not isinstance(step, int) or isinstance(step, bool):
            return said
        lost = [f"the rows of steps {_between(first, last)} were dropped: the writer fell behind"
                for first, last, table in meta.get("dropped_steps") or ()
                if table == fmt.GRADS and first <= step <= last]
        if step not in self.steps and not lost:
            return f"{said}: the run has steps {_span(self.steps)}"
        reasons = []
        grads = meta.get("grads")
        if isinstance(grads, str) and grads.startswith("within "):
            reasons.append(f"gradients were recorded at the steps whose backward fit {grads} of the loop's time "
                           "(grads=)")
        elif grads not in (None, "each"):
            reasons.append(f"gradients were recorded {grads} steps (grads=)")
        for start, stride in meta.get("downsampled") or ():
            if step >= start:
                reasons.append(f"from step {start} the size budget kept every {_nth(stride)} step")
        lag = [(start, stride) for start, stride in meta.get("writer_thinned") or () if step >= start]
        if lag and lag[-1][1] > 1:
            reasons.append(f"from step {lag[-1][0]} the writer fell behind the training loop and every "
                           f"{_nth(lag[-1][1])} step was kept")
        reasons += lost
        over = meta.get("over_budget_from_step")
        if over is not None and step >= over:
            reasons.append(f"from step {over} the size budget was spent")
        return f"{said}: step {step} was not recorded" + (f" ({'; '.join(reasons)})" if reasons else "")

    def graph_view(self, step: Optional[int] = None, rank: Optional[int] = None):
        """The graph view of the autograd graph ``rank`` (None: the first) recorded, at ``step`` (None:
        the latest with gradients), with a step slider (and a rank selector) in its toolbar. Click a
        Node for its gradient at the step shown: the rank's own, from before any all-reduce, and for a
        parameter also the gradient the optimizer applied. Raises ValueError for a step or rank the run
        did not record, saying which it did.

        >>> view = forgeviz.open("runs/exp1").graph_view(step=2)  # doctest: +SKIP
        >>> view.show(3)  # doctest: +SKIP
        """
        from .._capture.session import get_session
        from ..widgets.recorded import RecordedGraphWidget

        return RecordedGraphWidget(self, step, self.ranks[0] if rank is None else rank, get_session())

    # --- what a run displays -------------------------------------------------------------------
    def header(self) -> str:
        """The run in a few lines of Markdown: where, ranks and steps, world size, command, torch,
        problems and the doctor's findings (what a displayed run shows first)."""
        first = self._rank(self.ranks[0]).meta
        world = max(int(d.meta.get("world_size") or 1) for d in self._ranks.values())
        command = " ".join(str(a) for a in first.get("command") or []) or "unknown"
        lines = [f"**forgeviz run** `{self.folder}`: rank{'s' if len(self.ranks) > 1 else ''} "
                 f"{', '.join(map(str, self.ranks))} of world size {world}, {len(self.steps)} step(s) "
                 f"({_span(self.steps)}); torch {first.get('torch', '?')} on {first.get('device', '?')}; "
                 f"gradients {first.get('grads', '?')}",
                 f"- command: `{command}`"]
        lines += [f"- ⚠ {problem}" for problem in self.problems]
        for rank in self.ranks:
            thinned = _thinning(self._rank(rank).meta)
            if thinned:
                lines.append(f"- rank {rank}'s gradients thinned: {'; '.join(thinned)}")
        findings = self.findings
        if findings:
            lines.append(f"- **{len(findings)} finding(s)**:")
            lines += [f"  - {f.kind} (rank{'s' if len(f.ranks) > 1 else ''} {', '.join(map(str, f.ranks))}, "
                      f"step {f.step}, {f.parameter or f.node}): {f.message}" for f in findings[:MAX_SHOWN_FINDINGS]]
            if len(findings) > MAX_SHOWN_FINDINGS:
                lines.append(f"  - … and {len(findings) - MAX_SHOWN_FINDINGS} more (`run.findings`)")
        else:
            lines.append("- no findings: the ranks' applied gradients agree" if len(self.ranks) > 1 else
                         "- no findings")
        return "\n".join(lines)

    def widget(self):
        """The ranks view of this run (``forgeviz.ranks``)."""
        from ..api import ranks  # the view builder (and torch) only when a run is shown

        return ranks(self.module_norms(), self.peaks() or None, title=f"{self.folder.name}: {len(self.ranks)} "
                     f"rank(s), {len(self.steps)} step(s)")

    def memory_ranks(self) -> list[int]:
        """The ranks that recorded a memory timeline (``record(memory=True)``, ``record --memory``).

        >>> forgeviz.open("runs/exp1").memory_ranks()  # doctest: +SKIP
        [0, 1]
        """
        return [rank for rank in self.ranks if self._ranks[rank].meta.get("memory")
                or self._ranks[rank].tables[fmt.CUDA_MEMORY].num_rows]

    def memory_note(self) -> str:
        """The line a displayed run shows about its memory: which rank's timeline is drawn and how to draw
        another's, or how to record one.

        >>> run.memory_note()  # doctest: +SKIP
        "(the memory timeline: rank 0's below; `run.memory_view(1)` draws rank 1's)"
        """
        recorded = self.memory_ranks()
        if not recorded:
            return ("(the memory timeline: not recorded; record it with `python -m forgeviz record --memory -o "
                    "<folder> -- <script>` or `forgeviz.record(<folder>, memory=True)`)")
        others = recorded[1:]
        if not others:
            return f"(the memory timeline: rank {recorded[0]}'s below)"
        more = "" if len(others) == 1 else f", and so on for ranks {_span(others)}"
        return (f"(the memory timeline: rank {recorded[0]}'s below; `run.memory_view({others[0]})` draws rank "
                f"{others[0]}'s{more})")

    def views(self) -> list:
        """What a displayed run shows after its header: the ranks view, the graph view, then a line on
        memory and, when one was recorded, the memory view of the first rank that recorded it (rank 0's,
        usually; ``run.memory_view(rank)`` draws another's). A view the run has nothing for is a line
        saying why, in its place."""
        shown: list = []
        for make, what in ((self.widget, "the ranks view"), (self.graph_view, "the graph view")):
            shown.append(_made(make, what))
        shown.append(self.memory_note())  # which rank's timeline is drawn, or how to record one
        recorded = self.memory_ranks()
        if recorded:
            shown.append(_made(functools.partial(self.memory_view, recorded[0]), "the memory timeline"))
        return shown

    def _repr_mimebundle_(self, include=None, exclude=None):
        text = self.header()
        return {"text/markdown": text, "text/plain": text}

    def _ipython_display_(self) -> None:
        """The header, the ranks view, the graph view with its step slider, then a rank's memory timeline
        (or a line saying how to record one): see :meth:`views`."""
        from IPython.display import Markdown, display

        display(self._repr_mimebundle_(), raw=True)  # the header (display(self) would come back here)
        for view in self.views():
            display(Markdown(view) if isinstance(view, str) else view)


MAX_SHOWN_FINDINGS = 8


def _made(make, what: str):
    """``make()``, or a line saying why ``what`` has nothing to draw (a run with no gradients, graph or
    memory: said, not raised)."""
    try:
        return make()
    except (ValueError, LookupError, ImportError) as exc:
        return f"({what}: {exc})"


def _nth(n: int) -> str:
    """``2`` → ``2nd``.

    >>> [_nth(n) for n in (1, 2, 3, 4, 11, 12, 22)]
    ['1st', '2nd', '3rd', '4th', '11th', '12th', '22nd']
    """
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@functools.cache
def _nullable() -> dict:
    """pandas' nullable dtypes by Arrow type (pandas is imported by frame() only)."""
    import pandas as pd

    return {pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype(), pa.uint32(): pd.UInt32Dtype(),
            pa.bool_(): pd.BooleanDtype()}


def divergence(fingerprints: dict[tuple[int, str], dict[int, int]]) -> list[Finding]:
    """A ``rank_divergence`` finding for each (step, parameter) whose fingerprints differ across ranks:
    the odd rank(s) out when most ranks agree, else every rank (sorted by step, then parameter).

    >>> [f.ranks for f in divergence({(3, "w"): {0: 7, 1: 7, 2: 9}, (3, "b"): {0: 1, 1: 2}, (4, "w"): {0: 5, 1: 5}})]
    [(0, 1), (2,)]
    """
    findings = []
    for (step, name), by_rank in sorted(fingerprints.items()):
        if len(set(by_rank.values())) <= 1:
            continue
        groups: dict[int, list[int]] = defaultdict(list)
        for rank, fp in sorted(by_rank.items()):
            groups[fp].append(rank)
        sizes = sorted((len(g) for g in groups.values()), reverse=True)
        if sizes[0] > 1 and sizes[0] > sizes[1]:  # a majority agrees: the others are the odd ones out
            majority = max(groups.values(), key=len)
            odd = tuple(sorted(r for r in by_rank if r not in majority))
            said = f"differs on rank{'s' if len(odd) > 1 else ''} {', '.join(map(str, odd))} from the other ranks"
        else:
            odd = tuple(sorted(by_rank))
            said = f"differs between ranks {', '.join(map(str, odd))}"
        findings.append(Finding("rank_divergence", odd, step, name,
                                f"the gradient the optimizer applied to {name} at step {step} {said} (after the "
                                "all-reduce it must be equal on every rank: a rank-dependent branch, or a "
                                "gradient changed after the all-reduce?)"))
    return findings


def _thinning(meta: dict) -> list[str]:
    """What thinned a rank's gradient rows, in words: its size budget, a writer that fell behind.

    >>> _thinning({"downsampled": [[40, 2]], "writer_thinned": [[9, 2], [12, 4], [30, 2], [33, 1]]})
    ['from step 40 the size budget kept every 2nd step', 'from step 9 to 32 the writer fell behind the training loop \
and every 2nd to every 4th step was kept']
    """
    said = [f"from step {start} the size budget kept every {_nth(stride)} step"
            for start, stride in meta.get("downsampled") or ()]
    if meta.get("over_budget_from_step") is not None:
        said.append(f"from step {meta['over_budget_from_step']} the size budget was spent")
    lag = meta.get("writer_thinned") or []
    if lag:
        strides = sorted({by for _, by in lag if by > 1})
        until = f" to {lag[-1][0] - 1}" if lag[-1][1] == 1 else ""
        kept = _nth(strides[0]) if len(strides) == 1 else f"{_nth(strides[0])} to every {_nth(strides[-1])}"
        said.append(f"from step {lag[0][0]}{until} the writer fell behind the training loop and every {kept} step "
                    "was kept")
    return said


def _between(first: int, last: int) -> str:
    """Steps ``first`` to ``last``, in words: ``3…9``, or ``3`` alone."""
    return f"{first}…{last}" if last != first else str(first)


def _span(steps: list[int]) -> str:
    return "none" if not steps else f"{steps[0]}…{steps[-1]}" if len(steps) > 3 else ", ".join(map(str, steps))
