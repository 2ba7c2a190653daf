"""What every view shares: its bundled ESM, its warnings, the views that draw it, and answering
validated requests from the browser."""

from __future__ import annotations

import base64
import dataclasses
import inspect
import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Optional

import anywidget
import traitlets
from IPython.display import display

from .. import headless
from .._capture.fault import boundary
from .._capture.session import CaptureSession
from .page import STATIC, standalone_page

_MISSING_FRONTEND = """
export default { render({ el }) {
  el.textContent = "forgeviz: the browser bundle is missing (forgeviz/static/" + "%s" + "). " +
    "Install forgeviz with pip so its frontend is built.";
} };
"""
MAX_WARNINGS = 5  # the newest warnings a view shows

# A view's own data in a saved notebook, drawn with no kernel by the Lab renderer (src/lab/mime.ts).
MIME_TYPE = "application/vnd.forgeviz.v1+json"
SAVED_VERSION = 1
# The most one output's forgeviz JSON may weigh: 20 outputs stay under 5 MB. Details go first.
MAX_SAVED_BYTES = 200_000
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
#: The saved PNG's pixels per SVG unit, sharpest first: the first that keeps the output within
#: ``MAX_SAVED_BYTES`` and the PNG within ``MAX_PNG_BYTES`` is saved. Not 2 (sharp on HiDPI): the
#: PNG is what a reader with no SVG shows, and 2x weighs twice 1x (S1's graph 32 KB, not 15 KB).
PNG_SCALES = (1.0, 0.5)
#: The most a saved PNG may weigh (base64): 20 outputs of a notebook, their widget state saved too,
#: stay under 5 MB (tests/test_saved_notebooks.py); a bigger picture's PNG is drawn at half scale.
MAX_PNG_BYTES = 48_000


@dataclass
class Saved:
    """What one view keeps in a saved notebook (``RequestWidget._saved`` makes it).

    ``summary`` is the one-line ``text/plain``; ``traits`` the synced trait values the browser view
    draws from; ``details`` precomputed replies to its requests (the graph's inspector), optional;
    ``messages`` custom messages a view gets after it renders (``(content, buffers)``: the memory
    timeline's events), optional. ``details`` and ``messages`` are left out, with the reason in
    ``cut``, when the output would pass ``MAX_SAVED_BYTES``.
    """

    summary: str
    traits: dict
    details: dict = field(default_factory=dict)
    messages: list = field(default_factory=list)
    cut: Optional[str] = None


def saved_payload(view: str, saved: Saved, max_bytes: int = MAX_SAVED_BYTES) -> Optional[dict]:
    """The ``application/vnd.forgeviz.v1+json`` value for ``saved``, within ``max_bytes`` (JSON):
    the details and messages are dropped first (``details_cut`` says so); None if even the traits
    do not fit.

    >>> p = saved_payload("graph", Saved("forgeviz graph: 1 Node", {"graph": {}}, {"nodes": {"1": {}}}))
    >>> p["view"], p["traits"], p["details"]
    ('graph', {'graph': {}}, {'nodes': {'1': {}}})
    >>> saved_payload("graph", Saved("s", {"graph": {}}, {"nodes": {"1": "x" * 200}}), max_bytes=200)["details_cut"]
    'the saved details would pass 200 bytes'
    """
    messages = [{"content": content, "buffers": [base64.b64encode(bytes(b)).decode("ascii") for b in buffers or ()]}
                for content, buffers in saved.messages]
    payload: dict = {"version": SAVED_VERSION, "view": view, "summary": saved.summary, "traits": saved.traits,
                     "details": saved.details, "messages": messages}
    if saved.cut:
        payload["details_cut"] = saved.cut
    if len(json.dumps(payload, separators=(",", ":"))) <= max_bytes:
        return payload
    payload.update(details={}, messages=[], details_cut=f"the saved details would pass {max_bytes} bytes")
    if len(json.dumps(payload, separators=(",", ":"))) <= max_bytes:
        return payload
    return None


def _json_size(value: object) -> int:
    """What ``value`` weighs in an output, as ``saved_payload`` counts it (compact JSON).

    >>> _json_size({"image/png": "iVBORw0K"})
    24
    """
    return len(json.dumps(value, separators=(",", ":")))


def _split_bundle(bundle: object) -> tuple[dict, Optional[dict]]:
    """anywidget's ``(data, metadata)`` or ipywidgets' ``data`` as ``(data, metadata)``.

    >>> _split_bundle(({"text/plain": "w"}, {})), _split_bundle({"text/plain": "w"}), _split_bundle(None)
    (({'text/plain': 'w'}, {}), ({'text/plain': 'w'}, None), ({}, None))
    """
    if isinstance(bundle, tuple):
        return dict(bundle[0]), bundle[1]
    return (dict(bundle) if isinstance(bundle, dict) else {}), None


def _saved_key(payload: object) -> Optional[str]:
    """A saved payload as text to compare (None for none)."""
    return None if payload is None else json.dumps(payload, sort_keys=True, default=str)


def esm(name: str) -> Any:
    """The built ESM ``forgeviz/static/<name>`` (a path anywidget watches), or a module that says
    it is missing.

    >>> "the browser bundle is missing" in str(esm("nothing.js"))
    True
    """
    path = STATIC / name
    return path if path.exists() else _MISSING_FRONTEND % name


class RequestError(ValueError):
    """A browser request that does not fit the wire format."""


def _one_of(names) -> str:
    """``'a', 'b' or 'c'``.

    >>> _one_of(["html"]), _one_of(["inspect", "dot", "graphviz"])
    ("'html'", "'inspect', 'dot' or 'graphviz'")
    """
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


class RequestWidget(anywidget.AnyWidget):
    """An anywidget that answers the browser's requests: custom messages carrying a request_id.

    A subclass lists the request types it answers in ``requests`` (the order its error message
    names them in) and answers each ``kind`` with a method ``_answer_<kind>(request_id, content)``
    that returns ``(reply, buffers)``. A ``RequestError`` becomes an error reply with its message;
    any other failure is a forgeviz fault, logged, and answered with an error too.

    ``view`` and ``gone`` are answered here: a browser view announces itself when it renders and
    says "gone" when its output is cleared or its cell re-run, so a widget can stop refreshing
    views that no longer exist (``_views``).
    """

    warnings = traitlets.List(traitlets.Unicode()).tag(sync=True)
    # What a browser view shows beyond the data (zoom, pinned cell), as it reports it: the wire's
    # ``view_state_type`` as a dict, ``{}`` until a view says. ``save(state="shown")`` draws it.
    view_state = traitlets.Dict().tag(sync=True)
    #: The wire dataclass of this view's state (None: a view with nothing beyond its data to save).
    view_state_type: ClassVar[Optional[type]] = None
    requests: ClassVar[tuple[str, ...]] = ()
    # The view's name in forgeviz/views.json (the saved output says which view draws it).
    view_name: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        missing = [kind for kind in cls.requests if not callable(getattr(cls, f"_answer_{kind}", None))]
        if missing:
            raise TypeError(f"{cls.__name__} lists requests without an _answer_<type> method: {missing}")

    def __init__(self, session: CaptureSession, **kwargs) -> None:
        super().__init__(**kwargs)
        self._session = session
        self._faults_seen = session.fault_count
        # The browser views drawing this widget, by the ids they announce when they render; None
        # until one does.
        self._views: Optional[set] = None
        # The outputs showing this view (``_ipython_display_``), and the saved data they hold.
        self._displays: list = []
        self._displayed: Optional[str] = None
        self.on_msg(self._on_request)

    # --- warnings -------------------------------------------------------------------------
    def _warn(self, *texts: str) -> None:
        """Show ``texts`` under the view (the newest ``MAX_WARNINGS`` stay)."""
        self.warnings = [*self.warnings, *texts][-MAX_WARNINGS:]

    def _show_new_faults(self) -> None:
        """The session's faults since this view last looked, as warnings."""
        new_faults = self._session.faults_since(self._faults_seen)
        if new_faults:
            self._faults_seen = self._session.fault_count
            self._warn(*(f"forgeviz: {m}" for m in new_faults))

    # --- the views that draw it --------------------------------------------------------------
    def _track_view(self, content: dict, present: bool) -> None:
        """Note a view that rendered (``present``) or was removed."""
        view = content.get("view")  # None from a view that sends no id
        if view is not None and (not isinstance(view, int) or isinstance(view, bool)):
            raise RequestError(f"expected an integer view id, got {view!r}")
        if self._views is None:
            self._views = set()
        if present:
            self._views.add(view)
        else:
            self._views.discard(view)

    def _view_appeared(self) -> None:
        """A browser view announced itself: catch it up (a subclass's own refresh policy)."""

    def _answer_view(self, request_id: int, content: dict) -> tuple[dict, None]:
        self._track_view(content, present=True)
        self._view_appeared()
        return {"type": "view", "request_id": request_id}, None

    def _answer_gone(self, request_id: int, content: dict) -> tuple[dict, None]:
        self._track_view(content, present=False)
        return {"type": "gone", "request_id": request_id}, None

    # --- the output a notebook saves ---------------------------------------------------------
    def _saved(self) -> Saved:
        """What a saved notebook keeps of this view: each view says (its summary, traits, details)."""
        raise NotImplementedError(f"{type(self).__name__} saves nothing")

    def _offline_renderings(self, payload: dict, room: int) -> tuple[dict, dict, list[str]]:
        """The picture for readers with no forgeviz renderer, drawn headless by the browser's own
        renderers (``forgeviz.headless``), as ``(data, metadata, left_out)``:

        - ``image/svg+xml``: styles as presentation attributes, no ``<style>`` or ``style=``, so
          it survives GitHub's and nbviewer's CSS stripping; nbconvert's HTML (sanitised or not)
          shows it as an ``<img>``, its markdown as an extracted file, VS Code as an image;
        - ``image/png`` (base64), its size in ``metadata``: JupyterLab draws no SVG of an
          untrusted notebook, but a PNG, and nbconvert's SanitizeHTML keeps only a PNG;
          rasterised at the first of ``PNG_SCALES`` that fits (``MAX_PNG_BYTES``).

        No ``text/html``: nbconvert prefers it to an image and its sanitiser escapes an ``<svg>``
        or ``<img>`` in it to source text. Each part goes in while the output stays within
        ``room`` more bytes; ``left_out`` names those that did not fit. Empty for a view not drawn
        headless; a failure is a recorded fault and leaves the rest of the bundle."""
        if self.view_name not in headless.HEADLESS_VIEWS:
            return {}, {}, []
        # the saved picture is a bonus: never break the display
        with boundary(self._session.fault, f"drawing the saved {self.view_name} picture") as guard:
            svg = headless.render_svg(self.view_name, payload["traits"], messages=payload.get("messages"))
            data: dict = {}
            if _json_size(svg) <= room:
                data["image/svg+xml"] = svg
                room -= _json_size(svg)
            width, height = headless.svg_size(svg)
            for scale in PNG_SCALES:
                png = base64.b64encode(headless.svg_to_png(svg, scale)).decode("ascii")
                if _json_size(png) <= min(room, MAX_PNG_BYTES):
                    data["image/png"] = png
                    # the PNG's pixels are ``scale`` × the picture's size: shown at the picture's size
                    metadata = {"image/png": {"width": round(width), "height": round(height)}}
                    break
            else:
                metadata = {}
        if guard.failed:
            return {}, {}, []
        left_out = [name for mime, name in (("image/svg+xml", "SVG"), ("image/png", "PNG")) if mime not in data]
        return data, metadata, left_out

    def _check_view_state(self, state: dict) -> None:
        """Raise ValueError when ``state`` (its keys and types checked already) names something this
        view does not hold (a view's own checks: a tensor's name, a storage)."""

    def _view_state_for(self, state: object) -> Optional[dict]:
        """The view state ``save`` draws: None for ``"default"``, the browser's for ``"shown"``, or a
        dict of ``view_state_type``'s fields, checked.

        >>> import forgeviz
        >>> forgeviz.broadcast((3, 1), (1, 3))._view_state_for("shown")
        Traceback (most recent call last):
        ...
        ValueError: state: the broadcast view has no zoom or pinned cell to save; expected state='default', got 'shown'
        """
        if isinstance(state, str) and state == "default":
            return None
        kind = self.view_state_type
        if kind is None:
            raise ValueError(f"state: the {self.view_name} view has no zoom or pinned cell to save; "
                             f"expected state='default', got {state!r}")
        names = [f.name for f in fields(kind)]
        example = ", ".join(f"{name!r}: ..." for name in names)
        if isinstance(state, str) and state == "shown":
            if not self.view_state:
                raise ValueError(f"state='shown': no browser has reported what this {self.view_name} view shows "
                                 f"(display it in JupyterLab first), or pass the state as a dict {{{example}}}")
            state = dict(self.view_state)
        if not isinstance(state, dict):
            raise ValueError(f"state: expected 'default', 'shown' or a dict {{{example}}}, got {state!r}")
        unknown = [k for k in state if k not in names]
        if unknown:
            raise ValueError(f"state: unknown key {unknown[0]!r}; expected {_one_of(names)}")
        self._check_view_state(state)
        return dict(state)

    #: More formats ``save`` writes for this view: suffix → the name of the method returning the file's
    #: text (str) or bytes; it is given ``theme=`` when it takes one.
    save_formats: ClassVar[dict[str, str]] = {}

    def _saved_for_file(self) -> Saved:
        """What ``save`` draws: the saved output's data unless a view keeps more for a file."""
        return self._saved()

    def save(self, path: "str | Path", theme: str = "light", state: object = "default") -> Path:
        """Write this view to ``path``, in the format its suffix names: ``.svg``, ``.png`` (drawn
        headless: no browser, display or system binary), ``.html`` (self-contained, offline,
        interactive where the data allows), and the view's own (``.dot`` for a graph, ``.gif`` for a
        broadcast).

        ``state`` is what the stride and memory views draw beyond their data: ``"default"`` (as
        first drawn), ``"shown"`` (the zoom, units or pinned cell the browser view shows now), or a
        dict of their ``view_state_type`` (``StridesViewState``, ``MemoryViewState``), e.g.
        ``{"pinned": {"tensor": "y", "index": [1, 0]}}`` or ``{"range": [0.5, 1.2]}``.

        >>> import forgeviz
        >>> forgeviz.broadcast((3, 1), (1, 3)).save("b.jpg")
        Traceback (most recent call last):
        ...
        ValueError: expected a path ending in .svg, .png, .html or .gif, got 'b.jpg'
        """
        path = Path(path)
        suffix = path.suffix.lower()
        own = dict(self.save_formats)
        formats = [".svg", ".png", ".html", *own]
        if suffix not in formats:
            raise ValueError(f"expected a path ending in {', '.join(formats[:-1])} or {formats[-1]}, got {str(path)!r}")
        if theme not in ("light", "dark"):
            raise ValueError(f"theme: expected 'light' or 'dark', got {theme!r}")
        view_state = self._view_state_for(state)
        saved = self._saved_for_file()
        if view_state:
            saved = replace(saved, traits={**saved.traits, "view_state": view_state})
        if suffix in own:
            method = getattr(self, own[suffix])
            out = method(theme=theme) if "theme" in inspect.signature(method).parameters else method()
            if isinstance(out, (bytes, bytearray)):
                path.write_bytes(out)
            else:
                path.write_text(out, encoding="utf-8")
        elif suffix == ".html":
            payload = saved_payload(self.view_name, saved, max_bytes=1 << 62) or {}
            path.write_text(standalone_page(payload, theme), encoding="utf-8")
        else:
            headless.save(self.view_name, saved.traits, path, theme, messages=saved.messages)
        return path

    def _ipython_display_(self, **kwargs) -> None:
        """Show this view as a display with an id (``_repr_mimebundle_``'s bundle), so that the
        output can follow the view when it changes later (``refresh_saved``)."""
        data, metadata = _split_bundle(self._repr_mimebundle_(**kwargs))
        handle = display(data, metadata=metadata or {}, raw=True, display_id=True)
        if handle is not None:
            self._displays.append(handle)
            self._displayed = _saved_key(data.get(MIME_TYPE))

    def refresh_saved(self) -> None:
        """Update the outputs showing this view to its latest state (after a backward, new events),
        so a notebook run with no browser (nbclient, papermill, ``nbconvert --execute``) saves the
        pictures as they end up. While a browser view draws it, the outputs are left alone: the
        live view already shows the state, and JupyterLab writes it when the notebook is saved
        (src/lab/refresh.ts). A fault is recorded, never raised.

        >>> import forgeviz
        >>> forgeviz.broadcast((3, 1), (1, 3)).refresh_saved()  # never displayed: nothing to update
        """
        if not self._displays or self._views:
            return
        with boundary(self._session.fault, f"updating the saved {self.view_name or 'view'} output"):
            if _saved_key(saved_payload(self.view_name, self._saved())) == self._displayed:
                return  # what the outputs hold already
            data, metadata = _split_bundle(self._repr_mimebundle_())
            self._displayed = _saved_key(data.get(MIME_TYPE))
            for handle in self._displays:
                handle.update(data, metadata=metadata or {}, raw=True)

    def _repr_mimebundle_(self, **kwargs):
        """The widget's own bundle (its view while the kernel has the model), plus a one-line
        ``text/plain`` and the view's data as ``application/vnd.forgeviz.v1+json``, which JupyterLab
        draws with no kernel (src/lab/mime.ts). A fault here leaves the widget's bundle as it is.
        """
        bundle = super()._repr_mimebundle_(**kwargs)
        data, metadata = _split_bundle(bundle)
        if WIDGET_VIEW not in data:
            return bundle  # not displayable as a widget (closed): nothing to add either
        with boundary(self._session.fault, f"saving the {self.view_name or 'view'} output") as guard:
            saved = self._saved()
            payload = saved_payload(self.view_name, saved)
            extra: dict = {"text/plain": saved.summary}
            extra_metadata: dict = {}
            if payload is not None:
                extra[MIME_TYPE] = payload
                pictures, extra_metadata, left_out = self._offline_renderings(
                    payload, MAX_SAVED_BYTES - _json_size({**data, **extra}))
                extra.update(pictures)
                if left_out:
                    extra["text/plain"] += (f"\n(the saved picture leaves out its {' and '.join(left_out)}: "
                                            f"too big for a saved output)")
        if guard.failed:
            return bundle
        data.update(extra)
        if extra_metadata:
            metadata = {**(metadata or {}), **extra_metadata}
        return data if metadata is None else (data, metadata)

    # --- requests -------------------------------------------------------------------------
    def _answer(self, kind: object, request_id: int, content: dict) -> tuple[dict, Optional[list]]:
        if not isinstance(kind, str) or kind not in self.requests:
            raise RequestError(f"unknown request type {kind!r}; expected {_one_of(self.requests)}")
        return getattr(self, f"_answer_{kind}")(request_id, content)

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


class ModelWidget(RequestWidget):
    """A view drawn from one wire model that stays as it was given (a broadcast plan, a ranks grid): the
    model is kept as ``model`` and sent in the synced trait ``model_trait`` names.

    >>> import forgeviz
    >>> isinstance(forgeviz.broadcast((3, 1), (1, 4)), ModelWidget)
    True
    """

    model_trait = ""  # the subclass's synced trait that carries the model

    def __init__(self, model, session) -> None:
        super().__init__(session)
        self._model = model
        setattr(self, self.model_trait, dataclasses.asdict(model))

    @property
    def model(self):
        """The plain wire model being shown."""
        return self._model
