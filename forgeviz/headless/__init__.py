"""Draw a view with no browser, no display and no system binary: the same SVG the browser draws, and a PNG.

The browser's own renderers (``forgeviz/static/headless.js``: src/render/ with happy-dom and
Graphviz compiled to WASM) run inside this process in V8 (``mini-racer``); ``resvg-py`` rasterises
the SVG with the DejaVu Sans font shipped beside this module. One engine per process, started on
the first call in a thread of its own (a V8 isolate belongs to one thread) and reused; the
functions may be called from any thread. Nothing heavy loads on ``import forgeviz``.

``traits`` is what the view's widget syncs to the browser: for the graph view
``{"graph": w.graph, "state": w.state, "expanded": list(w.expanded)}`` (or just the widget:
``traits_of(w)``), for strides ``{"layout": w.layout}``, for broadcast ``{"plan": w.plan}``.
The memory view is not drawn headless (its timeline streams from the kernel).

>>> import forgeviz.headless as headless
>>> headless.HEADLESS_VIEWS
('graph', 'strides', 'broadcast')
>>> headless.save("graph", {}, "out.jpg")
Traceback (most recent call last):
...
ValueError: expected .svg or .png, got '.jpg'
"""

from __future__ import annotations

import json
import math
import queue
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Union

from ..views import VIEWS

__all__ = ["HEADLESS_VIEWS", "HeadlessError", "render_png", "render_svg", "save", "traits_of"]

HERE = Path(__file__).resolve().parent
BUNDLE = HERE.parent / "static" / "headless.js"
FONT = HERE / "DejaVuSans.ttf"

#: The views drawn headless, and the trait holding each one's data (with the keys it must have).
_DATA: dict[str, tuple[str, tuple[str, ...]]] = {
    "graph": ("graph", ("nodes", "edges", "modules", "repeats")),
    "strides": ("layout", ("tensors", "strips")),
    "broadcast": ("plan", ("operands", "steps")),
}
HEADLESS_VIEWS = tuple(_DATA)
#: Each view's synced traits that the drawing reads.
_TRAITS = {"graph": ("graph", "state", "expanded", "warnings"), "strides": ("layout", "warnings"),
           "broadcast": ("plan", "warnings")}
THEMES = ("light", "dark")
#: How long one render may take, engine start included (a big graph's layout is seconds).
TIMEOUT_S = 180.0


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
    raise TypeError(f"expected a forgeviz graph, strides or broadcast widget with its data; "
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


def render_svg(view: str, traits: Mapping, theme: str = "light") -> str:
    """The standalone SVG the browser's export button saves for ``view``, drawn from ``traits``.

    ``traits`` is the view's widget's synced traits (``traits_of(widget)``); ``theme`` 'light' or
    'dark' (JupyterLab's colours). Raises ValueError or TypeError for bad input, NotImplementedError
    for a view not drawn headless (memory), HeadlessError with the JavaScript message when drawing
    fails.

    >>> import torch, forgeviz                                          # doctest: +SKIP
    >>> x = torch.tensor([2.], requires_grad=True); loss = (x * 3).sum()  # doctest: +SKIP
    >>> svg = render_svg("graph", traits_of(forgeviz.graph(loss)))       # doctest: +SKIP
    >>> svg.startswith("<?xml")                                          # doctest: +SKIP
    True
    """
    _check(view, traits, theme)
    data = _to_json({k: traits[k] for k in _TRAITS[view] if k in traits})
    source = f"forgevizRender({json.dumps(view)}, {json.dumps(data)}, {json.dumps(theme)})"

    def job(ctx: Any) -> str:
        try:
            return ctx.eval(source).get(timeout=TIMEOUT_S)
        except Exception as err:
            if not type(err).__module__.startswith("py_mini_racer"):
                raise
            raise HeadlessError(f"forgeviz could not draw the {view} view: {_js_message(err)}") from None

    svg = _get_engine().call(job, TIMEOUT_S + 30)
    if not isinstance(svg, str) or "<svg" not in svg:
        raise HeadlessError(f"the headless engine returned no SVG for the {view} view")
    return svg


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


def render_png(view: str, traits: Mapping, theme: str = "light", scale: float = 2.0) -> bytes:
    """``render_svg``'s picture as PNG bytes, ``scale`` pixels per SVG unit (2: sharp on HiDPI).

    >>> png = render_png("graph", traits_of(forgeviz.graph(loss)), theme="dark")  # doctest: +SKIP
    >>> png[:4]                                                                   # doctest: +SKIP
    b'\\x89PNG'
    """
    return svg_to_png(render_svg(view, traits, theme), scale)


def save(view: str, traits: Mapping, path: Union[str, Path], theme: str = "light") -> Path:
    """Draw ``view`` into ``path``, SVG or PNG by its suffix; returns the path.

    >>> save("graph", traits_of(forgeviz.graph(loss)), "loss.png")  # doctest: +SKIP
    PosixPath('loss.png')
    >>> save("graph", {}, "loss.jpg")
    Traceback (most recent call last):
    ...
    ValueError: expected .svg or .png, got '.jpg'
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".svg":
        path.write_text(render_svg(view, traits, theme), encoding="utf-8")
    elif suffix == ".png":
        path.write_bytes(render_png(view, traits, theme))
    else:
        raise ValueError(f"expected .svg or .png, got {suffix!r}")
    return path
