"""The ranks view: an anywidget over the pure TS heatmap of gradient norms per rank, module and step."""

from __future__ import annotations

import dataclasses

import traitlets

from ..model.broadcast import format_bytes
from ..model.ranks import RanksGrid, downsample
from .base import ModelWidget, Saved, esm


class RanksWidget(ModelWidget):
    """Per-module gradient norms per rank per step, as a heatmap, and peak memory per rank.
    Create it with ``forgeviz.ranks(norms, peaks)``."""

    _esm = esm("ranks.js")
    grid = traitlets.Dict().tag(sync=True)
    model_trait = "grid"
    view_name = "ranks"

    def summary(self) -> str:
        """One line on what this view shows.

        >>> import forgeviz
        >>> forgeviz.ranks([(0, 1, "fc", 2.0), (1, 1, "fc", 2.5)], {0: 2048, 1: 4096}).summary()
        'forgeviz ranks: 2 ranks × 1 step × 1 module; peak memory 2 KiB – 4 KiB'
        """
        g: RanksGrid = self.model

        def n(count: int, word: str) -> str:
            return f"{count} {word}{'' if count == 1 else 's'}"

        text = f"forgeviz ranks: {n(len(g.ranks), 'rank')} × {n(len(g.steps), 'step')} × {n(len(g.modules), 'module')}"
        given = [p for p in g.peaks if p is not None]
        if given:
            low, high = min(given), max(given)
            text += f"; peak memory {format_bytes(low)}" + (f" – {format_bytes(high)}" if high != low else "")
        return f"{g.title}: {text}" if g.title else text

    def _saved(self) -> Saved:
        """The grid, its steps merged into columns when it would not fit a saved output."""
        saved = downsample(self.model)
        summary = self.summary() + (f" (saved: {saved.note})" if saved.note else "")
        return Saved(summary, {"grid": dataclasses.asdict(saved), "warnings": list(self.warnings)})

    def _saved_for_file(self) -> Saved:
        """A file (``save``) draws every step."""
        return Saved(self.summary(), {"grid": self.grid, "warnings": list(self.warnings)})
