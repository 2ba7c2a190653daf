"""The IPython side: %load_ext forgeviz wires capture to cell events."""

from __future__ import annotations

from . import panel
from ._capture import native
from ._capture.fault import boundary
from ._capture.grads import EACH
from ._capture.modules import module_hooks
from ._capture.native.background import background
from ._capture.session import get_session
from ._capture.untraced import untraced
from .api import names


class _CellHooks:
    """Enter capture before each cell, leave it after, then refresh views that saw a backward."""

    def __init__(self, shell) -> None:
        self.shell = shell
        self.session = get_session()
        self.native_adopted = False  # what a background build made is in use (adopt_native)

    # IPython's cell events: each step in the fault boundary, so that a fault skips only its own step
    # (the cell still runs, captured, and the next cell starts clean) and IPython never prints an
    # "Error in callback" under the user's cell.
    def pre_run_cell(self, info=None) -> None:
        session = self.session
        session.new_cell()
        fault = session.fault
        if not self.native_adopted and background().done.is_set():
            with boundary(fault, "switching to the native helpers"):
                self.adopt_native()
        with boundary(fault, "forgetting the running modules"):
            session.modules.reset()
        memory = session.memory
        if memory is not None and session.memory_enabled:
            with boundary(fault, "starting memory tracking"):  # the cell runs anyway, untracked
                memory.mark_cell(0)  # its number is known for sure only after it ran
                memory.start()
        if session.cuda_history is not None:
            # the number this cell will get, stamped on the CUDA allocator's entries (or unstamped, on a fault)
            with boundary(fault, "marking the cell in the CUDA history"):
                session.cuda_history.mark_cell(self.shell.execution_count)
        doctor = session.doctor
        if doctor is not None:  # only while a side panel is open (forgeviz/panel.py)
            with boundary(fault, "the doctor's start of the cell"):
                doctor.begin_cell(self.shell.execution_count)
        host = panel.host()
        if host is not None and host.open:
            with boundary(fault, "the side panel's start of the cell"):
                host.cell_begins(self.shell.execution_count)
        with boundary(fault, "starting capture for the cell"):
            session.enter()

    def post_run_cell(self, result=None) -> None:
        session = self.session
        fault = session.fault
        host = panel.host()
        if host is not None:
            with boundary(fault, "stopping the side panel's live updates"):
                host.cell_ends()  # its live thread stops before the refreshes below run
        with boundary(fault, "stopping capture after the cell"):
            session.exit()
        if session.memory is not None:
            with boundary(fault, "stopping memory tracking after the cell"):
                session.memory.stop()
                count = getattr(result, "execution_count", None)
                if count is not None:
                    session.memory.name_cell(count)
        with boundary(fault, "reading notebook names"):  # the namespace may hold anything: older names stay
            with untraced():
                names().scan(self.shell.user_ns)
        for widget in list(session.widgets):
            if widget.dirty:
                with boundary(fault, "refreshing a view after the cell"):
                    widget.refresh()
                    widget.refresh_saved()
        doctor = session.doctor
        if doctor is not None:
            with boundary(fault, "the doctor's look after the cell"), untraced():
                doctor.end_cell(self.shell.user_ns, getattr(result, "error_in_exec", None),
                                getattr(result, "execution_count", None))
        if host is not None and host.open:
            with boundary(fault, "the side panel's end of the cell"):
                host.after_cell(getattr(result, "execution_count", None))
        self.explain(result)

    def explain(self, result) -> None:
        """Draw the operand shapes of a broadcast or matmul op that made this cell fail.

        The exception has already been raised and shown, untouched; this only adds a diagram below.
        """
        session = self.session
        record, session.last_error = session.last_error, None
        error = getattr(result, "error_in_exec", None)
        if record is None or error is None or not session.explain or id(error) != record[0]:
            return
        with boundary(session.fault, "explaining the shape error"):  # the user's error stays as it was
            from IPython.display import display

            from ._capture.broadcast import plan_failed_op
            from ._capture.source import cell_number, source_line
            from .widgets.broadcast import BroadcastWidget

            _, op_record, filename, line = record
            cell, text = cell_number(filename), source_line(filename, line)
            where = f"cell [{cell}], line {line}" if cell is not None else f"line {line}"
            with untraced():
                plan = plan_failed_op(op_record, f"{where}: {text}" if text else where)
            display(BroadcastWidget(plan, session))

    def adopt_native(self) -> None:
        """The background build landed: from this cell on, the native memory ledger takes over from
        the dispatch-mode tracker (seeded with the storages alive now, their categories kept) and the
        native gradient hooks from the Python ones. What the switch cannot carry is said."""
        from ._capture.memory_choice import chosen_backend, switch_to_native
        from .widgets.memory import MemoryWidget

        self.native_adopted = True
        build, session = background(), self.session
        native.adopt()  # gradient hooks and op tagging: native.hooks() is asked at each cell and backward
        cell, note = self.shell.execution_count, ""
        old = session.memory
        if old is not None and old.backend == "dispatch" and "memory tracker" in build.built:
            if chosen_backend() != "auto":
                note = "Memory tracking stays with the dispatch-mode tracker ($FORGEVIZ_MEMORY_BACKEND chose it)."
                build.adopted(cell, note)
                return
            # on a fault the dispatch-mode tracker goes on, as before
            with boundary(session.fault, "switching to the native memory tracker") as guard:
                new = switch_to_native(old, fault=session.fault)
            if guard.failed:
                note = f"Memory tracking stays with the dispatch-mode tracker ({guard.failed})."
            else:
                session.memory = new
                old.close()
                note = (f"The kernel's memory timeline restarted at cell [{cell}] with the native tracker: the "
                        "storages alive then are its baseline, with the categories they had (a tensor a graph "
                        "saved counts as an activation again only when a new graph saves it); the events before "
                        "are not carried over.")
                for widget in list(session.widgets):
                    if isinstance(widget, MemoryWidget) and widget.tracker is old:
                        widget.follow(new, note)
        build.adopted(cell, note)

    def mark_dirty(self) -> None:
        for widget in list(self.session.widgets):
            widget.dirty = True


_hooks: _CellHooks | None = None
_progress: "_NativeProgress | None" = None


class _NativeProgress:
    """The loading cell's output while forgeviz builds its native libraries in the background: one
    display, updated through its display_id (from the build's thread), never a print into whatever
    cell runs then."""

    def __init__(self, message: str, live: bool) -> None:
        from IPython.display import display

        self.live = live  # a kernel: the seconds tick; a terminal prints only the outcome
        self.handle = display({"text/plain": message}, raw=True, display_id=True)

    def update(self, status) -> None:
        if self.handle is not None and (self.live or status.state != "building"):
            self.handle.update({"text/plain": status.message}, raw=True)

# Events the kernel's live memory timeline keeps in full (30 B each: 1.9 MiB); older ones merge into
# the storages still alive then, so a long training run costs forgeviz the same after its first
# few hundred steps as after thousands (``forgeviz.memory_trace(max_events=...)`` keeps more).
LIVE_TIMELINE_EVENTS = 1 << 16


def load(shell) -> None:
    global _hooks
    if _hooks is not None:
        return
    from ._capture.broadcast import describe_failed_op
    from ._capture.memory_choice import make_tracker
    from .magics import ForgevizMagics

    session = get_session()
    session.install()
    session.describe_error = describe_failed_op  # shape errors are drawn after their cell (explain)
    # seeded at the first cell it sees; its history is bounded (older events merge, see LIVE_TIMELINE_EVENTS)
    # Never a compile here: what is missing is built in the background, and used from a later cell on.
    session.memory = make_tracker(max_events=LIVE_TIMELINE_EVENTS, fault=session.fault, build=False)
    _hooks = _CellHooks(shell)
    _start_native_build(shell)
    shell.events.register("pre_run_cell", _hooks.pre_run_cell)
    shell.events.register("post_run_cell", _hooks.post_run_cell)
    session.after_backward.append(_hooks.mark_dirty)
    shell.register_magics(ForgevizMagics)
    panel.install(shell, session)


def _start_native_build(shell) -> None:
    """Build what is missing of forgeviz's native libraries in the background, shown in this cell's output."""
    global _progress
    session = get_session()
    with boundary(session.fault, "starting the native build"):  # forgeviz runs its Python paths; the cell goes on
        build = background()
        told = build.done.is_set()  # an earlier %load_ext in this process said how its build went
        status = build.start()
        if status is None or told:
            return  # built already: nothing to say
        _progress = _NativeProgress(status.message, live=getattr(shell, "kernel", None) is not None)
        build.listen(_progress.update)


def unload(shell) -> None:
    """Remove every hook and mode forgeviz installed."""
    global _hooks, _progress
    if _hooks is None:
        return
    if _progress is not None:
        background().unlisten(_progress.update)
        _progress = None
    session = get_session()
    panel.uninstall()
    shell.events.unregister("pre_run_cell", _hooks.pre_run_cell)
    shell.events.unregister("post_run_cell", _hooks.post_run_cell)
    if _hooks.mark_dirty in session.after_backward:
        session.after_backward.remove(_hooks.mark_dirty)
    session.uninstall()
    module_hooks.close()
    if session.memory is not None:
        session.memory.close()
        session.memory = None
    if session.cuda_history is not None:
        session.cuda_history.stop()
        session.cuda_history = None
    session.memory_enabled = session.explain = True  # a later %load_ext starts from the defaults
    session.recorder.cadence = EACH  # (%fv grads)
    session.describe_error = None
    shell.magics_manager.magics["line"].pop("fv", None)
    shell.magics_manager.magics["cell"].pop("fv", None)
    _hooks = None
