"""The memory timeline: an anywidget over the pure TS canvas renderer.

Events travel as binary columns (one buffer per column, ``EVENT_COLUMNS`` order) in ``events``
messages; the JSON ``timeline`` trait holds only the small tables. A saved output keeps every
event up to ``MAX_SAVED_EVENTS``; a longer timeline is saved downsampled (``downsample``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Optional

import numpy as np
import traitlets

from .._capture.fault import boundary
from .._capture.memory import MemoryTracker
from .._capture.session import CaptureSession
from ..model import memory as m
from ..model.broadcast import format_bytes
from ..model.memory_outline import PEAK_ZOOM, _arrays, downsample  # noqa: F401 - (names this module had)
from .base import MAX_SAVED_BYTES, RequestError, RequestWidget, Saved, esm

CHUNK_EVENTS = 200_000  # events per message: 6 MB at most
MAX_SAVED_EVENTS = 2_000  # a saved timeline keeps its events up to this many (30 bytes each, base64): 80 KB
SAVED_EVENT_BYTES = 41  # one event in a saved output's JSON: 30 bytes in base64, and a margin
class MemoryWidget(RequestWidget):
    """A live memory timeline. Create it with ``forgeviz.memory()`` or ``%%fv memory``."""

    _esm = esm("memory.js")
    timeline = traitlets.Dict().tag(sync=True)
    requests = ("replay", "gone", "detail")  # a view's replay request announces it
    view_name = "memory"
    view_state_type = m.MemoryViewState

    def __init__(self, tracker: MemoryTracker, session: CaptureSession, live: bool = True,
                 message: Optional[str] = None) -> None:
        super().__init__(session)
        self._tracker = tracker
        self._message = message
        self._sent = 0  # events already streamed to the browser
        self._dropped_seen = tracker.dropped
        self._live = live
        self.timeline = dataclasses.asdict(self.model)
        if live:
            session.widgets.add(self)

    @property
    def tracker(self) -> MemoryTracker:
        """The tracker whose timeline this view draws."""
        return self._tracker

    def follow(self, tracker: MemoryTracker, note: str) -> None:
        """Draw ``tracker`` from now on, saying ``note`` (the kernel's tracker was replaced: at the
        next refresh, the view's events start over from the new one's)."""
        self._tracker = tracker
        self._sent, self._dropped_seen = 0, -1  # -1: the next _stream resets the view
        self._warn(note)

    @property
    def dirty(self) -> bool:
        return self._live

    @dirty.setter
    def dirty(self, _value: bool) -> None:
        pass

    @property
    def model(self) -> m.MemoryTimeline:
        return self._tracker.timeline(message=self._message)

    def summary(self) -> str:
        """One line on what this timeline holds, from the tracker (``forgeviz memory (cpu): 1,204
        events over 3 cells, peak 12.50 MiB, live 4 MiB``)."""
        t = self.model
        if t.message and not t.count:
            return f"forgeviz memory ({t.device}): {t.message}"
        return (f"forgeviz memory ({t.device}): {t.count:,} events over {len(t.cells)} cells, "
                f"peak {format_bytes(t.peak_bytes)}, live {format_bytes(t.live_bytes)}")

    def _saved(self, whole: bool = False) -> Saved:
        """The timeline trait and its events, as the ``events`` message the view gets after a replay.
        Past ``MAX_SAVED_EVENTS`` (or what fits in ``MAX_SAVED_BYTES``) the events are downsampled
        (``downsample``: the same outline and peak, no hover details) and ``cut`` says so; ``whole``
        keeps every event (a file drawn from it: a zoom shows each storage)."""
        timeline = self.model
        asdict = dataclasses.asdict(timeline)
        traits = {"timeline": asdict, "warnings": list(self.warnings)}
        count = timeline.count
        room = (MAX_SAVED_BYTES - len(json.dumps(traits)) - 2_000) // SAVED_EVENT_BYTES
        budget = count if whole else min(MAX_SAVED_EVENTS, room)
        cols = self._tracker.columns(0, count)
        cut = None
        if count > budget and budget >= 4:
            cols, index, points = downsample(cols, budget)
            kept = len(index)
            # the view reads the new events: their count, and each cell's first one among them
            asdict = {**asdict, "count": kept, "cells": [
                {**c, "index": int(np.searchsorted(index, c["index"]))} for c in asdict["cells"]]}
            traits["timeline"] = asdict
            cut = (f"{count:,} events saved as {kept:,} at {points:,} points in time: at each, the exact live "
                   f"bytes per category at the highest total in its slice (peak kept); no storage details")
            count = kept
        elif count > budget:
            return Saved(self.summary(), traits, cut=f"{count:,} events: no room for them in the saved output")
        message = ({"type": "events", "start": 0, "count": count, "reset": True},
                   [cols[name] for name, _ in m.EVENT_COLUMNS])
        return Saved(self.summary(), traits, messages=[message], cut=cut)

    def _saved_for_file(self) -> Saved:
        return self._saved(whole=True)

    def _check_view_state(self, state: dict) -> None:
        """``x`` is 'time' or 'index'; ``range`` two finite numbers, start before end; ``pinned`` a
        storage this timeline recorded.

        >>> import forgeviz
        >>> with forgeviz.memory_trace() as trace:
        ...     _ = [0] * 10
        >>> trace.widget()._check_view_state({"x": "events"})
        Traceback (most recent call last):
        ...
        ValueError: state['x']: expected 'time' or 'index', got 'events'
        """
        x = state.get("x", "time")
        if x not in ("time", "index"):
            raise ValueError(f"state['x']: expected 'time' or 'index', got {x!r}")
        span = state.get("range")
        if span is not None and not (
                isinstance(span, (list, tuple)) and len(span) == 2
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in span)
                and span[0] < span[1]):
            raise ValueError(f"state['range']: expected [start, end] with start < end (seconds, or event numbers "
                             f"with x='index'), got {span!r:.80}")
        pinned = state.get("pinned")
        if pinned is None:
            return
        if not isinstance(pinned, int) or isinstance(pinned, bool):
            raise ValueError(f"state['pinned']: expected a storage id (an integer), got {pinned!r:.40}")
        storages = _arrays(self._tracker.columns(0, self._tracker.count)).get("storage")
        if storages is None or not (storages == pinned).any():
            known = f"{int(storages.min())}–{int(storages.max())}" if storages is not None and len(storages) else "none"
            raise ValueError(f"state['pinned']: no storage {pinned} in this timeline (storage ids {known})")

    def refresh(self) -> None:
        """Send the tables and the events recorded since the last refresh (to a live timeline, only
        while a view draws it)."""
        # A timeline no view draws any more is sent nothing (ten re-runs of forgeviz.memory() must not
        # mean ten streams after every cell): a view that appears asks for a replay.
        if self._live and not self._views:
            return
        with boundary(self._session.fault, "sending memory events") as guard:  # shown, never raised into the cell
            self.timeline = dataclasses.asdict(self.model)
            self._stream(self._sent, reset=False)
        if guard.failed:
            self._warn(f"forgeviz: {guard.failed}")

    def _stream(self, start: int, reset: bool) -> None:
        tracker = self._tracker
        if tracker.dropped != self._dropped_seen:
            start, reset = 0, True  # older history was merged and every index moved: send it all again
        self._dropped_seen = tracker.dropped
        count = tracker.count
        while start < count or reset:
            end = min(count, start + CHUNK_EVENTS)
            cols = tracker.columns(start, end)
            self.send({"type": "events", "start": start, "count": end - start, "reset": reset},
                      [cols[name] for name, _ in m.EVENT_COLUMNS])
            start, reset = end, False
        self._sent = count
        tracker.publish(count)

    def _answer_replay(self, request_id: int, content: dict) -> tuple[dict, None]:
        self._track_view(content, present=True)
        self.timeline = dataclasses.asdict(self.model)  # not refreshed while no view was drawing
        # the events follow the reply (see _after_reply)
        return {"type": "replay", "request_id": request_id, "count": self._tracker.count}, None

    def _answer_detail(self, request_id: int, content: dict) -> tuple[dict, None]:
        sid = content.get("storage")
        if not isinstance(sid, int) or isinstance(sid, bool) or sid < 0:
            raise RequestError(f"expected a storage id (a non-negative integer), got {sid!r}")
        try:
            detail = self._tracker.detail(sid)
        except KeyError as exc:
            raise RequestError(str(exc.args[0])) from None
        return {"type": "detail", "request_id": request_id, "detail": dataclasses.asdict(detail)}, None

    def _after_reply(self, kind) -> None:
        if kind == "replay":
            self._stream(0, reset=True)
