"""The broadcasting animation: an anywidget over the pure TS renderer."""

from __future__ import annotations

import dataclasses
import html
import json
import re
from pathlib import Path
from typing import Optional, Union

import traitlets

from .._capture.session import CaptureSession
from ..model.broadcast import BroadcastPlan, format_bytes
from .base import STATIC, RequestError, RequestWidget, Saved, esm

# esbuild ends an ESM bundle with ``export{x as default, ...};``: the page binds that default export
# to a global instead, so the bundle runs from an inline script, offline, even from file://.
_EXPORTS = re.compile(r"export\s*\{([^}]*)\}\s*;?\s*$")


def standalone_html(plan: dict, theme: str = "light", title: str = "forgeviz broadcast") -> str:
    """A self-contained offline HTML page that plays this plan (no kernel, no network).

    >>> "<html" in standalone_html({"version": 1, "steps": []})
    True
    """
    source = (STATIC / "broadcast.js").read_text(encoding="utf-8") if (STATIC / "broadcast.js").exists() else ""
    match = _EXPORTS.search(source)
    default = None
    if match:
        for part in match.group(1).split(","):
            name, _, alias = part.strip().partition(" as ")
            if alias.strip() == "default":
                default = name.strip()
    if match is None or default is None:
        script = "document.body.textContent = 'forgeviz: the browser bundle is missing; install forgeviz with pip.';"
    else:
        script = source[: match.start()] + f"\nglobalThis.__forgevizBroadcast = {default};\n"
    dark = theme == "dark"
    colors = ("--jp-layout-color0:#111;--jp-layout-color1:#1e1e1e;--jp-layout-color2:#2b2b2b;"
              "--jp-ui-font-color1:rgba(255,255,255,.87);--jp-ui-font-color2:rgba(255,255,255,.54);"
              "--jp-ui-font-color3:rgba(255,255,255,.38);--jp-border-color1:#616161;--jp-border-color2:#424242;"
              ) if dark else ""
    data = json.dumps(plan).replace("</", "<\\/")
    script = script.replace("</script", "<\\/script")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{margin:16px;font-family:system-ui,sans-serif;background:{'#111' if dark else '#fff'};{colors}}}</style>
</head><body data-jp-theme-light="{'false' if dark else 'true'}"><div id="forgeviz"></div>
<script type="application/json" id="forgeviz-plan">{data}</script>
<script type="module">
{script}
const plan = JSON.parse(document.getElementById('forgeviz-plan').textContent);
const traits = {{ plan, warnings: [], static: true }};
const model = {{ get: k => traits[k], set() {{}}, on() {{}}, off() {{}}, save_changes() {{}} }};
globalThis.__forgevizBroadcast.render({{ model, el: document.getElementById('forgeviz') }});
</script></body></html>
"""


class BroadcastWidget(RequestWidget):
    """A step-by-step animation of broadcasting (or matmul). Create it with ``forgeviz.broadcast(a, b)``."""

    _esm = esm("broadcast.js")
    plan = traitlets.Dict().tag(sync=True)
    requests = ("html",)
    view_name = "broadcast"

    def __init__(self, plan: BroadcastPlan, session: CaptureSession) -> None:
        super().__init__(session)
        self._plan = plan
        self.plan = dataclasses.asdict(plan)

    @property
    def model(self) -> BroadcastPlan:
        """The plain BroadcastPlan being shown."""
        return self._plan

    def summary(self) -> str:
        """One line on what this view shows, from its plan.

        >>> import forgeviz
        >>> forgeviz.broadcast((3, 1), (1, 4), op="+").summary()
        'forgeviz broadcast: a (3, 1) + b (1, 4) → (3, 4), 48 B; 6 steps'
        >>> forgeviz.broadcast((3,), (4,), op="+").summary()[:56]
        'forgeviz broadcast: a (3,) + b (4,) fails at dim -1: 3 v'
        """
        plan = self._plan
        if not plan.operands:
            return f"forgeviz broadcast: {plan.message or 'nothing to show'}"

        def shape(s) -> str:
            return "(" + ", ".join(map(str, s)) + ("," if len(s) == 1 else "") + ")"

        join = f" {plan.op} " if plan.op not in ("broadcast",) else ", "
        operands = join.join(f"{o.name} {shape(o.shape)}" for o in plan.operands)
        if plan.ok and plan.result_shape is not None:
            size = f", {format_bytes(plan.result_nbytes)}" if plan.result_nbytes is not None else ""
            verdict = f"→ {shape(plan.result_shape)}{size}"
        elif plan.conflict is not None:
            c = plan.conflict
            verdict = f"fails at dim {c.from_right}: {' vs '.join(map(str, c.sizes))}"
        else:
            verdict = "fails"
        steps = len(plan.steps)
        return f"forgeviz broadcast: {operands} {verdict}; {steps} step{'s' if steps != 1 else ''}"

    def _saved(self) -> Saved:
        """The plan: every step of the animation is in it."""
        return Saved(self.summary(), {"plan": self.plan, "warnings": list(self.warnings)})

    def to_html(self, path: Optional[Union[str, Path]] = None, theme: str = "light") -> str:
        """The whole animation as a self-contained offline HTML page; written to ``path`` if given.

        >>> import forgeviz
        >>> "forgeviz-plan" in forgeviz.broadcast((3, 1), (1, 3)).to_html()
        True
        """
        if theme not in ("light", "dark"):
            raise ValueError(f"theme: expected 'light' or 'dark', got {theme!r}")
        page = standalone_html(self.plan, theme)
        if path is not None:
            Path(path).write_text(page, encoding="utf-8")
        return page

    def _answer_html(self, request_id: int, content: dict) -> tuple[dict, None]:
        theme = content.get("theme", "light")
        if theme not in ("light", "dark"):
            raise RequestError(f"expected theme 'light' or 'dark', got {theme!r}")
        return {"type": "html", "request_id": request_id, "html": self.to_html(theme=theme)}, None
