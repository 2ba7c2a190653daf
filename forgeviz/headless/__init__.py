"""Draw a view with no browser, no display and no system binary: the same SVG the browser draws, and a PNG.

The browser's own renderers (``forgeviz/static/headless.js``: src/render/ with happy-dom and
Graphviz compiled to WASM) run inside this process in V8 (``mini-racer``); ``resvg-py`` rasterises
the SVG with the DejaVu Sans font shipped beside this module. One engine per process, started on
the first call in a thread of its own (a V8 isolate belongs to one thread) and reused; the
functions may be called from any thread. Nothing heavy loads on ``import forgeviz``.

``traits`` is what the view's widget syncs to the browser: for the graph view
``{"graph": w.graph, "state": w.state, "expanded": list(w.expanded)}`` (or just the widget:
``traits_of(w)``), for strides ``{"layout": w.layout}``, for broadcast ``{"plan": w.plan}``, for
ranks ``{"grid": w.grid}``, for memory ``{"timeline": w.timeline}`` with its events as ``messages``
(the custom messages a saved output keeps: ``saved_payload(...)["messages"]``, or ``(content, buffers)``
pairs). The broadcast view also gives its animated GIF (``render_gif``) and one SVG per step (``render_steps``).

>>> import forgeviz.headless as headless
>>> headless.HEADLESS_VIEWS
('graph', 'strides', 'broadcast', 'memory', 'ranks')
>>> headless.save("graph", {}, "out.jpg")
Traceback (most recent call last):
...
ValueError: expected .svg or .png (or .gif for broadcast), got '.jpg'
"""

from __future__ import annotations

import base64
import json
import math
import queue
import struct
import threading
import zlib
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Union

from ..views import VIEWS

__all__ = ["HEADLESS_VIEWS", "HeadlessError", "render_gif", "render_png", "render_steps", "render_svg", "save",
           "svg_size", "svg_to_png", "traits_of"]

HERE = Path(__file__).resolve().parent
BUNDLE = HERE.parent / "static" / "headless.js"
FONT = HERE / "DejaVuSans.ttf"

#: The views drawn headless, and the trait holding each one's data (with the keys it must have).
_DATA: dict[str, tuple[str, tuple[str, ...]]] = {
    "graph": ("graph", ("nodes", "edges", "modules", "repeats")),
    "strides": ("layout", ("tensors", "strips")),
    "broadcast": ("plan", ("operands", "steps")),
    "memory": ("timeline", ("cells", "count")),
    "ranks": ("grid", ("ranks", "steps", "modules")),
}
HEADLESS_VIEWS = tuple(_DATA)
#: Each view's synced traits that the drawing reads.
_TRAITS = {"graph": ("graph", "state", "expanded", "warnings"), "strides": ("layout", "warnings"),
           "broadcast": ("plan", "warnings"), "memory": ("timeline", "warnings"), "ranks": ("grid", "warnings")}
THEMES = ("light", "dark")
#: How long one render may take, engine start included (a big graph's layout is seconds).
TIMEOUT_S = 180.0
#: The broadcast GIF's widest frame, in pixels, as the browser's GIF button (src/render/broadcast/export.ts).
GIF_MAX_WIDTH = 1000


class HeadlessError(RuntimeError):
    """The headless engine failed: its JavaScript error's message, or why it could not start."""


def traits_of(widget: Any) -> dict:
    """The synced traits of a forgeviz widget that its view draws from, as ``render_svg`` takes them.

    >>> class W:  # a stand-in for forgeviz.graph(loss)
    ...     graph = {"nodes": {}, "edges": {}, "modules": {}, "repeats": {}}
    ...     state, expanded, warnings = {}, ("m",), []
    >>> sorted(traits_of(W()))
    ['expanded', 'graph', 'state', 'warnings']
    """
    for view, (trait, keys) in _DATA.items():
        value = getattr(widget, trait, None)
        if isinstance(value, Mapping) and all(k in value for k in keys):
            out = {}
            for name in _TRAITS[view]:
                if hasattr(widget, name):
                    v = getattr(widget, name)
                    out[name] = list(v) if isinstance(v, (list, tuple)) else v
            return out
    raise TypeError(f"expected a forgeviz graph, strides, broadcast, memory or ranks widget with its data; "
                    f"got {type(widget).__name__}")


def _check(view: Any, traits: Any, theme: Any) -> None:
    if not isinstance(view, str) or view not in {v.name for v in VIEWS}:
        raise ValueError(f"view must be one of {', '.join(repr(v.name) for v in VIEWS)}; got {view!r}")
    if view not in _DATA:
        raise NotImplementedError(f"the {view} view cannot be drawn headless yet "
                                  f"(headless: {', '.join(HEADLESS_VIEWS)})")
    if theme not in THEMES:
        raise ValueError(f"theme must be 'light' or 'dark'; got {theme!r}")
    trait, keys = _DATA[view]
    if not isinstance(traits, Mapping):
        raise TypeError(f"traits must be a dict of the {view} widget's traits (e.g. {{{trait!r}: widget.{trait}}}); "
                        f"got {type(traits).__name__}")
    value = traits.get(trait)
    if not isinstance(value, Mapping) or not all(k in value for k in keys):
        got = (f"keys {sorted(value)}" if isinstance(value, Mapping) else type(value).__name__) if trait in traits \
            else f"no {trait!r}, only {sorted(traits)}"
        raise ValueError(f"traits[{trait!r}] must be the {view} widget's {trait!r} trait "
                         f"(a dict with {', '.join(keys)}); got {got}")


def _finite(value: Any) -> Any:
    """``value`` with non-finite floats as None (JSON has no NaN; the browser gets None too)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _to_json(traits: Mapping) -> str:
    try:
        return json.dumps(traits, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(traits), allow_nan=False)


class _Engine:
    """One V8 context with headless.js loaded, owned by one daemon thread; jobs come by a queue."""

    def __init__(self) -> None:
        self._jobs: "queue.Queue[tuple[Callable[[Any], Any], Future]]" = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="forgeviz-headless", daemon=True)
        self._started = Future()
        self._thread.start()

    def _run(self) -> None:
        try:
            from py_mini_racer import MiniRacer

            if not BUNDLE.exists():
                raise HeadlessError(f"{BUNDLE} is missing: build the frontend (jlpm build), "
                                    "or install forgeviz with pip")
            ctx = MiniRacer()
            ctx.eval(BUNDLE.read_text(encoding="utf-8"))
        except BaseException as err:  # noqa: BLE001 - handed to every caller
            self._started.set_exception(err)
            return
        self._started.set_result(None)
        while True:
            job, fut = self._jobs.get()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(job(ctx))
            except BaseException as err:  # noqa: BLE001 - raised in the caller's thread
                fut.set_exception(err)

    def failed(self) -> bool:
        return self._started.done() and self._started.exception() is not None

    def call(self, job: Callable[[Any], Any], timeout: float) -> Any:
        if threading.current_thread() is self._thread:
            raise HeadlessError("forgeviz.headless called from inside its own engine")
        self._started.result(timeout)
        fut: Future = Future()
        self._jobs.put((job, fut))
        return fut.result(timeout)


_engine: Optional[_Engine] = None
_engine_lock = threading.Lock()


def _get_engine() -> _Engine:
    global _engine
    with _engine_lock:
        failed = _engine is not None and _engine.failed()
        if _engine is None or failed:  # (an engine that could not start is tried again: the bundle may be built now)
            _engine = _Engine()
        return _engine


def _js_message(err: BaseException) -> str:
    text = str(err).strip()
    # mini-racer's text: "JavaScript rejected promise with reason: Error: <message>", then the stack
    first = text.splitlines()[0] if text else type(err).__name__
    for prefix in ("JavaScript rejected promise with reason: ", "Uncaught ", "Error: "):
        first = first.removeprefix(prefix)
    return first


def _messages_json(messages: Optional[Iterable]) -> str:
    """The custom messages as the headless view takes them: ``[{"content", "buffers": [base64]}]``.

    ``messages`` holds saved ones (``{"content": ..., "buffers": [base64 text]}``, as in a saved
    output) or sent ones (``(content, buffers)``, buffers as bytes).

    >>> _messages_json([({"type": "events"}, [b"\\x01"]), {"content": {"n": 1}, "buffers": ["AQ=="]}])
    '[{"content": {"type": "events"}, "buffers": ["AQ=="]}, {"content": {"n": 1}, "buffers": ["AQ=="]}]'
    """
    out = []
    for m in messages or ():
        if isinstance(m, Mapping) and "content" in m:
            buffers = [b if isinstance(b, str) else base64.b64encode(bytes(b)).decode("ascii")
                       for b in m.get("buffers") or ()]
            out.append({"content": m["content"], "buffers": buffers})
        elif isinstance(m, (tuple, list)) and len(m) == 2:
            content, buffers = m
            out.append({"content": content,
                        "buffers": [base64.b64encode(bytes(b)).decode("ascii") for b in buffers or ()]})
        else:
            raise TypeError(f"expected each message as {{'content', 'buffers'}} or (content, buffers); got {m!r:.80}")
    return json.dumps(_finite(out), allow_nan=False)


def _eval(source: str, what: str) -> Any:
    """Evaluate ``source`` in the engine (awaiting a promise) and return its value; a JavaScript
    error becomes a HeadlessError saying ``what`` failed."""

    def job(ctx: Any) -> Any:
        try:
            from py_mini_racer import JSPromise

            value = ctx.eval(source)
            return value.get(timeout=TIMEOUT_S) if isinstance(value, JSPromise) else value
        except Exception as err:
            if not type(err).__module__.startswith("py_mini_racer"):
                raise
            raise HeadlessError(f"forgeviz could not {what}: {_js_message(err)}") from None

    return _get_engine().call(job, TIMEOUT_S + 30)


def render_svg(view: str, traits: Mapping, theme: str = "light", *, messages: Optional[Iterable] = None) -> str:
    """The standalone SVG the browser's export button saves for ``view``, drawn from ``traits``.

    ``traits`` is the view's widget's synced traits (``traits_of(widget)``); ``theme`` 'light' or
    'dark' (JupyterLab's colours); ``messages`` the custom messages the view gets once drawn (the
    memory timeline's events: a saved output's ``messages``). Raises ValueError or TypeError for bad
    input, HeadlessError with the JavaScript message when drawing fails.

    >>> import torch, forgeviz                                          # doctest: +SKIP
    >>> x = torch.tensor([2.], requires_grad=True); loss = (x * 3).sum()  # doctest: +SKIP
    >>> svg = render_svg("graph", traits_of(forgeviz.graph(loss)))       # doctest: +SKIP
    >>> svg.startswith("<?xml")                                          # doctest: +SKIP
    True
    """
    _check(view, traits, theme)
    # ``view_state`` (a zoom or pinned cell, ``save(state=...)``) is never one of ``traits_of``'s
    data = _to_json({k: traits[k] for k in (*_TRAITS[view], "view_state") if k in traits})
    source = (f"forgevizRender({json.dumps(view)}, {json.dumps(data)}, {json.dumps(theme)}, "
              f"{json.dumps(_messages_json(messages))})")
    svg = _eval(source, f"draw the {view} view")
    if not isinstance(svg, str) or "<svg" not in svg:
        raise HeadlessError(f"the headless engine returned no SVG for the {view} view")
    return svg


def render_steps(traits: Mapping, theme: str = "light") -> list[str]:
    """The broadcast view's every step as a standalone SVG, each what the view shows at that step
    (its SVG button's file): one per step of the plan, one for a plan without steps.

    >>> b = forgeviz.broadcast(torch.ones(3, 1), torch.ones(1, 4))  # doctest: +SKIP
    >>> len(render_steps(traits_of(b))) == len(b.plan["steps"])     # doctest: +SKIP
    True
    """
    _check("broadcast", traits, theme)
    data = _to_json({k: traits[k] for k in _TRAITS["broadcast"] if k in traits})
    out = _eval(f"forgevizSteps({json.dumps(data)}, {json.dumps(theme)})", "draw the broadcast steps")
    steps = json.loads(out) if isinstance(out, str) else None
    if not isinstance(steps, list) or not all(isinstance(s, str) and "<svg" in s for s in steps):
        raise HeadlessError("the headless engine returned no SVG steps for the broadcast view")
    return steps


def _png_rows(png: bytes) -> dict:
    """A PNG's size, channels and inflated (still filtered) scanlines, base64: what the engine's
    GIF encoder unfilters.

    >>> svg = '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="2"><rect width="4" height="2"/></svg>'
    >>> f = _png_rows(svg_to_png(svg, 1.0)); (f["width"], f["height"], f["channels"] in (3, 4))
    (4, 2, True)
    """
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise HeadlessError("the rasteriser returned no PNG")
    pos, idat, head = 8, [], None
    while pos + 8 <= len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        kind, body = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body[:13])
        elif kind == b"IDAT":
            idat.append(body)
    if head is None or head[2] != 8 or head[3] not in (2, 6) or head[6] != 0:
        raise HeadlessError(f"expected an 8-bit RGB(A) non-interlaced PNG, got header {head}")
    return {"width": head[0], "height": head[1], "channels": 4 if head[3] == 6 else 3,
            "rows": base64.b64encode(zlib.decompress(b"".join(idat))).decode("ascii")}


def svg_size(svg: str) -> tuple[float, float]:
    """The width and height a standalone SVG declares (its root's ``width`` and ``height``).

    >>> svg_size('<?xml version="1.0"?><svg xmlns="x" version="1.1" width="348" height="40">')
    (348.0, 40.0)
    """
    root = svg[svg.index("<svg"):svg.index(">", svg.index("<svg"))]
    size = {}
    for part in root.split():
        for name in ("width", "height"):
            if part.startswith(f'{name}="'):
                size[name] = float(part[len(name) + 2:part.index('"', len(name) + 2)])
    if len(size) < 2:
        raise HeadlessError(f"the SVG has no {' or '.join(n for n in ('width', 'height') if n not in size)}")
    return size["width"], size["height"]


def render_gif(traits: Mapping, theme: str = "light") -> bytes:
    """The broadcast view's animated GIF, as its GIF button saves it: one frame per step (each
    ``render_steps`` SVG, at most 1000 pixels wide), a second each and the last three, looping;
    encoded by the browser's own encoder (gifenc).

    >>> gif = render_gif(traits_of(forgeviz.broadcast(torch.ones(3, 1), torch.ones(1, 4))))  # doctest: +SKIP
    >>> gif[:6]                                                                            # doctest: +SKIP
    b'GIF89a'
    """
    steps = render_steps(traits, theme)
    frames = [_png_rows(svg_to_png(svg, min(1.0, GIF_MAX_WIDTH / svg_size(svg)[0]))) for svg in steps]
    size = (frames[0]["width"], frames[0]["height"])
    if any((f["width"], f["height"]) != size for f in frames):
        sizes = sorted({(f["width"], f["height"]) for f in frames})
        raise HeadlessError(f"the broadcast frames differ in size: {sizes}")
    out = _eval(f"forgevizEncodeGif({json.dumps(json.dumps(frames))})", "encode the broadcast GIF")
    if not isinstance(out, str):
        raise HeadlessError("the headless engine returned no GIF")
    return base64.b64decode(out)


def svg_to_png(svg: str, scale: float = 2.0) -> bytes:
    """Rasterise a standalone SVG (``render_svg``'s) to PNG bytes at ``scale``, with the shipped font.

    >>> svg = '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="2"><rect width="4" height="2"/></svg>'
    >>> svg_to_png(svg, scale=1.0)[:8]
    b'\\x89PNG\\r\\n\\x1a\\n'
    """
    if not isinstance(scale, (int, float)) or not 0 < scale <= 16:
        raise ValueError(f"scale must be a number in (0, 16]; got {scale!r}")
    import resvg_py

    family = "DejaVu Sans"
    return bytes(resvg_py.svg_to_bytes(svg_string=svg, zoom=float(scale), skip_system_fonts=True,
                                       font_files=[str(FONT)], font_family=family, sans_serif_family=family,
                                       serif_family=family, monospace_family=family))


def render_png(view: str, traits: Mapping, theme: str = "light", scale: float = 2.0, *,
               messages: Optional[Iterable] = None) -> bytes:
    """``render_svg``'s picture as PNG bytes, ``scale`` pixels per SVG unit (2: sharp on HiDPI).

    >>> png = render_png("graph", traits_of(forgeviz.graph(loss)), theme="dark")  # doctest: +SKIP
    >>> png[:4]                                                                   # doctest: +SKIP
    b'\\x89PNG'
    """
    return svg_to_png(render_svg(view, traits, theme, messages=messages), scale)


def save(view: str, traits: Mapping, path: Union[str, Path], theme: str = "light", *,
         messages: Optional[Iterable] = None) -> Path:
    """Draw ``view`` into ``path``, SVG or PNG by its suffix (or a GIF of a broadcast's steps);
    returns the path. ``messages``: as for ``render_svg`` (the memory timeline's events).

    >>> save("graph", traits_of(forgeviz.graph(loss)), "loss.png")  # doctest: +SKIP
    PosixPath('loss.png')
    >>> save("graph", {}, "loss.jpg")
    Traceback (most recent call last):
    ...
    ValueError: expected .svg or .png (or .gif for broadcast), got '.jpg'
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".svg":
        path.write_text(render_svg(view, traits, theme, messages=messages), encoding="utf-8")
    elif suffix == ".png":
        path.write_bytes(render_png(view, traits, theme, messages=messages))
    elif suffix == ".gif" and view == "broadcast":
        path.write_bytes(render_gif(traits, theme))
    else:
        raise ValueError(f"expected .svg or .png (or .gif for broadcast), got {suffix!r}")
    return path
