"""The memory timeline: an anywidget over the pure TS canvas renderer.

Events travel as binary columns (one buffer per column, ``EVENT_COLUMNS`` order) in ``events``
messages; the JSON ``timeline`` trait holds only the small tables.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import anywidget
import traitlets

from ..capture.memory import MemoryTracker
from ..capture.session import CaptureSession
from ..model import memory as m
from .graph import STATIC, RequestError, _MISSING_FRONTEND

CHUNK_EVENTS = 200_000  # events per message: 6 MB at most


def _esm() -> Any:
    path = STATIC / "memory.js"
    return path if path.exists() else _MISSING_FRONTEND


class MemoryWidget(anywidget.AnyWidget):
    """A live memory timeline. Create it with ``forgeviz.memory()`` or ``%%fv memory``."""

    _esm = _esm()
    timeline = traitlets.Dict().tag(sync=True)
    warnings = traitlets.List(traitlets.Unicode()).tag(sync=True)

    def __init__(self, tracker: MemoryTracker, session: CaptureSession, live: bool = True,
                 message: Optional[str] = None) -> None:
        super().__init__()
        self._tracker = tracker
        self._session = session
        self._message = message
        self._sent = 0  # events already streamed to the browser
        self._dropped_seen = tracker.dropped
        self._live = live
        self.on_msg(self._on_request)
        self.timeline = dataclasses.asdict(tracker.timeline(message=message))
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

    def refresh(self) -> None:
        """Send the tables and the events recorded since the last refresh."""
        try:
            self.timeline = dataclasses.asdict(self._tracker.timeline(message=self._message))
            self._stream(self._sent, reset=False)
        except Exception as exc:  # noqa: BLE001 - a forgeviz fault is shown, never raised into the cell
            self._session.fault(f"sending memory events failed: {exc!r}")
            self.warnings = [*self.warnings, f"forgeviz could not update the timeline: {exc!r}"][-5:]

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

    def _on_request(self, _widget, content, buffers) -> None:
        request_id = content.get("request_id") if isinstance(content, dict) else None
        try:
            if not isinstance(content, dict):
                raise RequestError(f"expected a request object, got {type(content).__name__}")
            if not isinstance(request_id, int) or isinstance(request_id, bool):
                raise RequestError(f"expected an integer request_id, got {request_id!r}")
            kind = content.get("type")
            if kind == "replay":
                self.send({"type": "replay", "request_id": request_id, "count": self._tracker.count})
                self._stream(0, reset=True)
                return
            if kind == "detail":
                sid = content.get("storage")
                if not isinstance(sid, int) or isinstance(sid, bool) or sid < 0:
                    raise RequestError(f"expected a storage id (a non-negative integer), got {sid!r}")
                try:
                    detail = self._tracker.detail(sid)
                except KeyError as exc:
                    raise RequestError(str(exc.args[0])) from None
                reply = {"type": "detail", "request_id": request_id, "detail": dataclasses.asdict(detail)}
            else:
                raise RequestError(f"unknown request type {kind!r}; expected 'replay' or 'detail'")
        except RequestError as exc:
            reply = {"type": "error", "request_id": request_id, "message": str(exc)}
        except Exception as exc:  # noqa: BLE001
            self._session.fault(f"answering {content!r:.80} failed: {exc!r}")
            reply = {"type": "error", "request_id": request_id, "message": f"forgeviz failed: {exc!r}"}
        self.send(reply)
