"""The background writer of one rank's recording: segments go through a bounded queue to a thread
that appends them to Arrow IPC streams. The training thread never waits on the disk: a full queue
takes no segment (the recorder holds it back and thins what it records until the writer catches up:
recording.py's ``Recorder._hand``), and a write that fails (a full disk, an unwritable folder) is reported
once through ``on_fault`` and ends writing; training goes on.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import pyarrow as pa

from ..model.run import CUDA_MEMORY, MEMORY, META
from .format import COMPRESSION, SCHEMAS, SUFFIX
from .memory import MemorySegments, cuda_batch

QUEUE_SEGMENTS = 16  # segments waiting for the disk, at most (each a few hundred KB at most)
_STOP = object()


class Breather:
    """Called often by the writer thread's longer work (a segment's columns): once it has held the GIL ``hold``
    seconds, it sleeps ``rest`` seconds. The training thread gives the GIL up at every torch op and waits for
    it after; a thread that holds it is made to let go only after CPython's switch interval (5 ms), so a
    segment built in one go (2-6 ms on MLP-256) stalled a step by as much, once every few hundred steps. A
    shorter sleep is not enough: ``time.sleep(0)`` or 50 µs gives the GIL back to the writer before the waiting
    thread has woken up to take it (measured: the stalls stayed at 4-5.6 ms).

    >>> breathe = Breather(hold=0.0); breathe(); breathe.rests
    1
    """

    def __init__(self, hold: float = 3e-4, rest: float = 1e-3) -> None:
        self.hold, self.rest = hold, rest
        self.rests = 0
        self._since = time.perf_counter()

    def begin(self) -> None:
        """A piece of work begins: its hold counts from now."""
        self._since = time.perf_counter()

    def __call__(self) -> None:
        if time.perf_counter() - self._since >= self.hold:
            time.sleep(self.rest)
            self.rests += 1
            self._since = time.perf_counter()


class RunWriter:
    """Writes rank ``rank``'s files under ``folder`` (made if missing).

    >>> import tempfile
    >>> w = RunWriter(Path(tempfile.mkdtemp()) / "rank0", {"rank": 0}, print)
    >>> w.submit("steps", {"step": [1], "time": [0.5], "live_bytes": [None], "peak_bytes": [None]})
    True
    >>> w.close({"finished": True}); w.segments, sorted(p.name for p in w.folder.iterdir())
    (1, ['meta.json', 'steps.arrows'])
    """

    def __init__(self, folder: Path, meta: dict, on_fault: Callable[[str], None]) -> None:
        self.folder = Path(folder)
        self.meta = dict(meta)
        self.on_fault = on_fault
        self.segments = 0
        self.dropped = 0  # segments left out: rows that failed to build here, or that the recorder gave up holding
        self.bytes = 0  # written so far (the recorder downsamples against its budget with it)
        self.broken = ""  # why writing stopped, once it did
        self._queue: "queue.Queue" = queue.Queue(QUEUE_SEGMENTS)
        self._streams: dict[str, tuple] = {}
        self._options = pa.ipc.IpcWriteOptions(compression=COMPRESSION)
        self._memory = MemorySegments()  # the memory stream's state (its thinning past the budget)
        self.breathe = Breather()  # (the GIL given up now and then while a segment is built)
        self._write_meta()
        self._thread = threading.Thread(target=self._run, name="forgeviz-record", daemon=True)
        if not self.broken:
            self._thread.start()

    def submit(self, table: str, columns, wait: float = 0.0) -> bool:
        """Queue one segment of ``table``: its columns as lists, or its rows as tuples in the schema's
        order (turned into columns here, on the writer thread), or a function of :class:`Breather` that gives
        those rows or columns (called on the writer thread: the recorder's training thread keeps numbers, not
        rows; it calls the breather between its pieces). False when it was not taken: the queue stayed full
        for ``wait`` seconds (the caller still has the segment, to hand over later). Once writing stopped (its fault
        told once), every segment is taken and let go: there is nothing to hold it for."""
        if self.broken:
            return True
        try:
            self._queue.put((table, columns), block=wait > 0, timeout=wait if wait > 0 else None)
            return True
        except queue.Full:
            return False

    @property
    def backlog(self) -> float:
        """How full the queue of segments waiting for the disk is: 0 (empty) to 1 (QUEUE_SEGMENTS, full)."""
        return self._queue.qsize() / QUEUE_SEGMENTS

    def close(self, final: dict, timeout: float = 60.0) -> None:
        """Write what is queued (waiting up to ``timeout`` seconds for it), close the streams and write the final
        metadata. A disk that stops answering costs the exit ``timeout``, not a hang: what it did not take is left
        out, and the metadata says so."""
        if self._thread.is_alive():
            try:  # what was recorded is written before the exit, if the disk lets it
                self._queue.put((_STOP, None), timeout=timeout)
                self._thread.join(timeout)
            except queue.Full:
                pass
        if self._thread.is_alive():  # (stuck in a write: its streams are left as they are, whole up to a segment)
            self._fail("finishing the writes", TimeoutError(f"the disk took no segment for {timeout:g} s"))
        else:
            for sink, writer in self._streams.values():
                try:
                    writer.close()
                    sink.close()
                except (OSError, pa.ArrowException):
                    pass
            self._streams.clear()
        self.meta.update(final, segments=self.segments, bytes=self.bytes, dropped_segments=self.dropped)
        if self._memory.thinned:
            self.meta["memory_downsampled"] = self._memory.thinned  # [from step, events per segment at most]
        if self.broken:
            self.meta["faults"] = [*self.meta.get("faults", []), self.broken]
        self._write_meta()

    def _write_meta(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            temp = self.folder / (META + ".tmp")
            temp.write_text(json.dumps(self.meta, indent=1))
            os.replace(temp, self.folder / META)  # a reader sees the old metadata or the new, whole
        except OSError as exc:
            self._fail(f"writing the run's metadata in {self.folder}", exc)

    def _fail(self, what: str, exc: BaseException) -> None:
        if not self.broken:
            self.broken = f"{what} failed: {type(exc).__name__}: {exc}; recording stopped, training goes on"
            self.on_fault(self.broken)

    def _run(self) -> None:
        while True:
            table, columns = self._queue.get()
            if table is _STOP:
                return
            if self.broken:
                continue  # drain: the training thread must never block on a full queue
            try:
                self._append(table, columns)
            except (OSError, pa.ArrowException, ValueError, TypeError) as exc:
                self._fail(f"writing the {table} stream in {self.folder}", exc)

    def _append(self, table: str, columns: dict) -> None:
        schema = SCHEMAS[table]
        if table == MEMORY:  # the ledger's events, thinned past half the budget
            batch = self._memory.batch(columns, self.bytes, int(self.meta.get("budget_bytes") or 2**62))
        elif table == CUDA_MEMORY:  # a snapshot's entries since the last segment, and its segments
            batch = cuda_batch(columns)
        else:
            self.breathe.begin()
            if callable(columns):  # rows or columns built here, off the training thread
                try:
                    columns = columns(self.breathe)
                except Exception as exc:  # noqa: BLE001 (forgeviz's fault, not the disk's: this segment only)
                    self.dropped += 1
                    self.on_fault(f"building a segment of the {table} stream failed: {type(exc).__name__}: {exc}; "
                                  "that segment is left out, recording goes on")
                    return
            if not isinstance(columns, dict):  # rows
                columns = dict(zip(schema.names, map(list, zip(*columns))))
            arrays = []
            for field in schema:
                self.breathe()
                arrays.append(pa.array(columns[field.name], field.type))
            batch = pa.record_batch(arrays, schema=schema)
        stream = self._streams.get(table)
        if stream is None:
            sink = pa.OSFile(str(self.folder / (table + SUFFIX)), "wb")
            stream = self._streams[table] = (sink, pa.ipc.new_stream(sink, schema, options=self._options))
        sink, writer = stream
        writer.write_batch(batch)
        sink.flush()  # a segment is whole on disk before the next begins: a SIGKILL loses at most one
        self.bytes = sum(s.tell() for s, _ in self._streams.values())
        self.segments += 1


def make_writer(folder: Path, meta: dict, on_fault: Callable[[str], None]) -> Optional[RunWriter]:
    """A started writer, or None (reported through ``on_fault``) when the folder cannot be written."""
    writer = RunWriter(folder, meta, on_fault)
    return None if writer.broken else writer
