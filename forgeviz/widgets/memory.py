"""The memory timeline: an anywidget over the pure TS canvas renderer.

Events travel as binary columns (one buffer per column, ``EVENT_COLUMNS`` order) in ``events``
messages; the JSON ``timeline`` trait holds only the small tables.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import traitlets

from .._capture.memory import MemoryTracker
from .._capture.session import CaptureSession
from ..model import memory as m
from ..model.broadcast import format_bytes
from .base import RequestError, RequestWidget, Saved, esm

CHUNK_EVENTS = 200_000  # events per message: 6 MB at most
MAX_SAVED_EVENTS = 4_000  # a saved timeline keeps its events up to this many (30 bytes each, base64)


class MemoryWidget(RequestWidget):
    """A live memory timeline. Create it with ``forgeviz.memory()`` or ``%%fv memory``."""

    _esm = esm("memory.js")
    timeline = traitlets.Dict().tag(sync=True)
    requests = ("replay", "gone", "detail")  # a view's replay request announces it
    view_name = "memory"

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

    def _saved(self) -> Saved:
        """The timeline trait and its events, as the ``events`` message the view gets after a replay
        (left out past ``MAX_SAVED_EVENTS``)."""
        timeline = self.model
        traits = {"timeline": dataclasses.asdict(timeline), "warnings": list(self.warnings)}
        count = timeline.count
        if count > MAX_SAVED_EVENTS:
            return Saved(self.summary(), traits,
                         cut=f"{count:,} events: the events are saved for at most {MAX_SAVED_EVENTS:,}")
        cols = self._tracker.columns(0, count)
        message = ({"type": "events", "start": 0, "count": count, "reset": True},
                   [cols[name] for name, _ in m.EVENT_COLUMNS])
        return Saved(self.summary(), traits, messages=[message])

    def refresh(self) -> None:
        """Send the tables and the events recorded since the last refresh (to a live timeline, only
        while a view draws it)."""
        # A timeline no view draws any more is sent nothing (ten re-runs of forgeviz.memory() must not
        # mean ten streams after every cell): a view that appears asks for a replay.
        if self._live and not self._views:
            return
        try:
            self.timeline = dataclasses.asdict(self.model)
            self._stream(self._sent, reset=False)
        except Exception as exc:  # noqa: BLE001 - a forgeviz fault is shown, never raised into the cell
            self._session.fault(f"sending memory events failed: {exc!r}")
            self._warn(f"forgeviz could not update the timeline: {exc!r}")

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
