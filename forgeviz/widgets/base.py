"""What every view shares: its bundled ESM, and answering validated requests from the browser."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import anywidget

from .._capture.session import CaptureSession

STATIC = Path(__file__).resolve().parents[1] / "static"
_MISSING_FRONTEND = """
export default { render({ el }) {
  el.textContent = "forgeviz: the browser bundle is missing (forgeviz/static/" + "%s" + "). " +
    "Install forgeviz with pip so its frontend is built.";
} };
"""


def esm(name: str) -> Any:
    """The built ESM ``forgeviz/static/<name>`` (a path anywidget watches), or a module that says
    it is missing."""
    path = STATIC / name
    return path if path.exists() else _MISSING_FRONTEND % name


class RequestError(ValueError):
    """A browser request that does not fit the wire format."""


class RequestWidget(anywidget.AnyWidget):
    """An anywidget that answers the browser's requests: custom messages carrying a request_id.

    Subclasses implement ``_answer``. A ``RequestError`` becomes an error reply with its message;
    any other failure is a forgeviz fault, logged, and answered with an error too.
    """

    def __init__(self, session: CaptureSession, **kwargs) -> None:
        super().__init__(**kwargs)
        self._session = session
        # The browser views drawing this widget, by the ids they announce when they render; None
        # until one does. A view's cleanup says "gone" when its output is cleared or its cell re-run,
        # so a widget can stop being refreshed for views that no longer exist.
        self._views: Optional[set] = None
        self.on_msg(self._on_request)

    def _track_view(self, kind: str, content: dict) -> None:
        """Note a view that rendered (any ``kind`` but "gone") or was removed ("gone")."""
        view = content.get("view")  # None from a view that sends no id
        if view is not None and (not isinstance(view, int) or isinstance(view, bool)):
            raise RequestError(f"expected an integer view id, got {view!r}")
        if self._views is None:
            self._views = set()
        if kind == "gone":
            self._views.discard(view)
        else:
            self._views.add(view)

    def _answer(self, kind: object, request_id: int, content: dict) -> tuple[dict, Optional[list]]:
        raise NotImplementedError

    def _after_reply(self, kind: object) -> None:
        """Runs once the reply is sent (e.g. streaming that must follow it)."""

    def _on_request(self, _widget, content, buffers) -> None:
        request_id = content.get("request_id") if isinstance(content, dict) else None
        try:
            if not isinstance(content, dict):
                raise RequestError(f"expected a request object, got {type(content).__name__}")
            if not isinstance(request_id, int) or isinstance(request_id, bool):
                raise RequestError(f"expected an integer request_id, got {request_id!r}")
            reply, reply_buffers = self._answer(content.get("type"), request_id, content)
        except RequestError as exc:
            reply, reply_buffers = {"type": "error", "request_id": request_id, "message": str(exc)}, None
        except Exception as exc:  # noqa: BLE001 - a forgeviz fault is answered, never raised
            self._session.fault(f"answering {content!r:.80} failed: {exc!r}")
            reply, reply_buffers = {"type": "error", "request_id": request_id,
                                    "message": f"forgeviz failed: {exc!r}"}, None
        self.send(reply, reply_buffers)
        if reply["type"] != "error":
            self._after_reply(reply["type"])
