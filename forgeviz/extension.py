"""The IPython side: %load_ext forgeviz wires capture to cell events."""

from __future__ import annotations

from .api import names
from .capture.session import get_session, untraced


class _CellHooks:
    """Enter capture before each cell, leave it after, then refresh views that saw a backward."""

    def __init__(self, shell) -> None:
        self.shell = shell
        self.session = get_session()

    def pre_run_cell(self, info=None) -> None:
        self.session.modules.reset()
        self.session.enter()

    def post_run_cell(self, result=None) -> None:
        session = self.session
        session.exit()
        try:
            with untraced():
                names().scan(self.shell.user_ns)
        except Exception as exc:  # noqa: BLE001
            session.fault(f"reading notebook names failed: {exc!r}")
        for widget in list(session.widgets):
            if widget.dirty:
                widget.refresh()

    def mark_dirty(self) -> None:
        for widget in list(self.session.widgets):
            widget.dirty = True


_hooks: _CellHooks | None = None


def load(shell) -> None:
    global _hooks
    if _hooks is not None:
        return
    from .magics import ForgevizMagics

    session = get_session()
    session.install()
    _hooks = _CellHooks(shell)
    shell.events.register("pre_run_cell", _hooks.pre_run_cell)
    shell.events.register("post_run_cell", _hooks.post_run_cell)
    session.after_backward.append(_hooks.mark_dirty)
    shell.register_magics(ForgevizMagics)


def unload(shell) -> None:
    """Remove every hook and mode forgeviz installed."""
    global _hooks
    if _hooks is None:
        return
    session = get_session()
    shell.events.unregister("pre_run_cell", _hooks.pre_run_cell)
    shell.events.unregister("post_run_cell", _hooks.post_run_cell)
    if _hooks.mark_dirty in session.after_backward:
        session.after_backward.remove(_hooks.mark_dirty)
    session.uninstall()
    shell.magics_manager.magics["line"].pop("fv", None)
    shell.magics_manager.magics["cell"].pop("fv", None)
    _hooks = None
