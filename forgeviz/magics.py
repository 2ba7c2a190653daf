"""``%fv``: the notebook commands."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from ._capture.cadence import cadence_of, describe_cadence
from ._capture.session import get_session
from .api import broadcast, graph, strides
from .views import COMMANDS as EXAMPLES

COMMANDS = tuple(EXAMPLES)  # every view's commands, from views.json; each is answered by ForgevizMagics._fv_<command>


def split_expressions(text: str) -> list[str]:
    """Split on spaces and commas outside brackets and quotes.

    >>> split_expressions("loss t[:, 1:3], f(a, b)")
    ['loss', 't[:, 1:3]', 'f(a, b)']
    """
    parts, depth, current, quote = [], 0, [], None
    for ch in text:
        if quote:
            current.append(ch)
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
            current.append(ch)
        elif ch in "([{":
            depth += 1
            current.append(ch)
        elif ch in ")]}":
            depth -= 1
            current.append(ch)
        elif ch in " ,\t" and depth == 0:
            if current:
                parts.append("".join(current))
                current = []
        else:
            current.append(ch)
    if current:
        parts.append("".join(current))
    return parts


@magics_class
class ForgevizMagics(Magics):
    @line_magic
    def fv(self, line: str):
        """``%fv graph loss [more ...]``: draw the autograd graph of the named tensors.
        ``%fv strides t t.T t[:, 1:3]``: draw how the tensors map onto their storage.
        ``%fv broadcast a b`` / ``%fv matmul a b``: animate the broadcasting (or matmul) rule.
        ``%fv explain off`` / ``on``: draw (or not) the shapes of ops that fail with a shape error.
        ``%fv memory off`` / ``on``: pause (or resume) the kernel's memory tracking, e.g. for speed.
        ``%fv grads each`` / ``every N`` / ``within P%`` / ``shown`` / ``off``: which backward passes record gradient
        summaries (``%fv grads`` alone says which do now)."""
        command, _, rest = line.strip().partition(" ")
        if command not in COMMANDS:
            raise UsageError(f"%fv: expected one of {', '.join(COMMANDS)}, got {command or 'nothing'!r}. "
                             "Examples: " + "; ".join(EXAMPLES.values()))
        return getattr(self, f"_fv_{command}")(rest)

    # --- one method per command of views.json -------------------------------------------------
    def _fv_graph(self, rest: str):
        _, values = self._evaluate("graph", rest)
        return graph(*values, namespace=self.shell.user_ns)

    def _fv_strides(self, rest: str):
        names, values = self._evaluate("strides", rest)
        return strides(*values, names=names)

    def _fv_broadcast(self, rest: str):
        names, values = self._evaluate("broadcast", rest)
        return broadcast(*values, op="broadcast", names=names)

    def _fv_matmul(self, rest: str):
        names, values = self._evaluate("matmul", rest)
        return broadcast(*values, op="@", names=names)

    def _fv_explain(self, rest: str) -> None:
        get_session().explain = _on_off("explain", rest)

    def _fv_memory(self, rest: str) -> None:
        get_session().memory_enabled = _on_off("memory", rest)  # the timeline shows the gap

    def _fv_grads(self, rest: str) -> None:
        """Set the cadence of gradient summaries (none given: leave it), and say what it is now."""
        recorder = get_session().recorder
        if rest.strip():
            try:
                recorder.cadence = cadence_of(rest)
            except ValueError as exc:
                raise UsageError(f"%fv grads: {exc}. Example: {EXAMPLES['grads']}") from None
        print(f"forgeviz gradient summaries: {describe_cadence(recorder.cadence)}")
        counted = recorder.budget.last_cell if recorder.budget is not None else None
        if counted is not None:
            summarised, skipped = counted
            print(f"the last cell that ran backward passes summarised {summarised} of {summarised + skipped}")

    def _evaluate(self, command: str, rest: str) -> tuple[list[str], list]:
        """The expressions after ``%fv <command>`` (at least one), and their values."""
        expressions = split_expressions(rest)
        if not expressions:
            raise UsageError(f"%fv {command}: name at least one tensor, e.g. {EXAMPLES[command]}")
        return expressions, [self.shell.ev(e) for e in expressions]

    @cell_magic("fv")
    def fv_cell(self, line: str, cell: str):
        """``%%fv memory``: run the cell and draw the memory it allocated and freed."""
        if line.strip() != "memory":
            raise UsageError(f"%%fv: expected 'memory', got {line.strip() or 'nothing'!r}. Example: %%fv memory")
        import linecache

        from ._capture.memory_choice import make_tracker
        from ._capture.source import MAGIC_CELL, current_cell
        from .widgets.memory import MemoryWidget

        session = get_session()
        count = current_cell() or self.shell.execution_count
        filename = MAGIC_CELL % count
        linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)  # source lines for hover
        tracker = make_tracker(fault=session.fault)
        tracker.default_cell = count
        tracker.mark_cell(count)
        # The mode links saved activations to their nodes (nested in the cell's own capture).
        with session.recording(tracker=tracker):
            exec(compile(cell, filename, "exec"), self.shell.user_ns)  # noqa: S102 - the user's own cell, as IPython runs it
        return MemoryWidget(tracker, session, live=False)


def _on_off(command: str, rest: str) -> bool:
    """``on`` → True, ``off`` → False; anything else is a UsageError."""
    choice = rest.strip()
    if choice not in ("on", "off"):
        raise UsageError(f"%fv {command}: expected 'on' or 'off', got {choice or 'nothing'!r}")
    return choice == "on"
