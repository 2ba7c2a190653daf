"""The broadcasting animation: an anywidget over the pure TS renderer."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

import traitlets

from .. import headless
from ..model.broadcast import BroadcastPlan, format_bytes
from .base import ModelWidget, RequestError, Saved, esm, saved_payload
from .page import standalone_page


class BroadcastWidget(ModelWidget):
    """A step-by-step animation of broadcasting (or matmul). Create it with ``forgeviz.broadcast(a, b)``."""

    _esm = esm("broadcast.js")
    plan = traitlets.Dict().tag(sync=True)
    model_trait = "plan"
    requests = ("html",)
    view_name = "broadcast"
    save_formats = {".gif": "to_gif"}

    def summary(self) -> str:
        """One line on what this view shows, from its plan.

        >>> import forgeviz
        >>> forgeviz.broadcast((3, 1), (1, 4), op="+").summary()
        'forgeviz broadcast: a (3, 1) + b (1, 4) → (3, 4), 48 B; 6 steps'
        >>> forgeviz.broadcast((3,), (4,), op="+").summary()[:56]
        'forgeviz broadcast: a (3,) + b (4,) fails at dim -1: 3 v'
        """
        plan: BroadcastPlan = self.model
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
        >>> "forgeviz-data" in forgeviz.broadcast((3, 1), (1, 3)).to_html()
        True
        """
        page = standalone_page(saved_payload(self.view_name, self._saved(), max_bytes=1 << 62) or {}, theme)
        if path is not None:
            Path(path).write_text(page, encoding="utf-8")
        return page

    def to_gif(self, theme: str = "light") -> bytes:
        """The animation as an animated GIF, as the view's GIF button saves it (one frame per step,
        a second each, the last three), drawn headless. ``save("x.gif")`` writes it.

        >>> import forgeviz
        >>> forgeviz.broadcast((3, 1), (1, 4)).to_gif()[:6]  # doctest: +SKIP
        b'GIF89a'
        """
        return headless.render_gif(self._saved().traits, theme)

    def save_steps(self, folder: Union[str, Path], theme: str = "light") -> list[Path]:
        """Write each step as the view shows it to ``folder`` (made if missing) as ``step-01.svg``,
        ``step-02.svg``, ... (one for a plan without steps), for slides; returns the paths in order.

        >>> import forgeviz
        >>> [p.name for p in forgeviz.broadcast((3, 1), (1, 4)).save_steps("steps")][:2]  # doctest: +SKIP
        ['step-01.svg', 'step-02.svg']
        """
        folder = Path(folder)
        steps = headless.render_steps(self._saved().traits, theme)
        folder.mkdir(parents=True, exist_ok=True)
        width = max(2, len(str(len(steps))))
        paths = []
        for k, svg in enumerate(steps, 1):
            path = folder / f"step-{k:0{width}d}.svg"
            path.write_text(svg, encoding="utf-8")
            paths.append(path)
        return paths

    def _answer_html(self, request_id: int, content: dict) -> tuple[dict, None]:
        theme = content.get("theme", "light")
        if theme not in ("light", "dark"):
            raise RequestError(f"expected theme 'light' or 'dark', got {theme!r}")
        return {"type": "html", "request_id": request_id, "html": self.to_html(theme=theme)}, None
