"""``%fv``: the notebook commands."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

COMMANDS = ("graph", "strides", "broadcast", "matmul", "explain", "memory")
EXAMPLES = {"graph": "%fv graph loss", "strides": "%fv strides t t.T t[:, 1:3]",
            "broadcast": "%fv broadcast a b", "matmul": "%fv matmul a b", "explain": "%fv explain off",
            "memory": "%fv memory off"}


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
        ``%fv memory off`` / ``on``: pause (or resume) the kernel's memory tracking, e.g. for speed."""
        from .api import broadcast, graph, strides
        from ._capture.session import get_session

        command, _, rest = line.strip().partition(" ")
        if command not in COMMANDS:
            raise UsageError(f"%fv: expected one of {', '.join(COMMANDS)}, got {command or 'nothing'!r}. "
                             "Examples: " + "; ".join(EXAMPLES.values()))
        if command in ("explain", "memory"):
            choice = rest.strip()
            if choice not in ("on", "off"):
                raise UsageError(f"%fv {command}: expected 'on' or 'off', got {choice or 'nothing'!r}")
            if command == "explain":
                get_session().explain = choice == "on"
            else:
                get_session().memory_enabled = choice == "on"  # the timeline shows the gap
            return None
        expressions = split_expressions(rest)
        if not expressions:
            raise UsageError(f"%fv {command}: name at least one tensor, e.g. {EXAMPLES[command]}")
        values = [self.shell.ev(e) for e in expressions]
        if command == "strides":
            return strides(*values, names=expressions)
        if command in ("broadcast", "matmul"):
            return broadcast(*values, op="@" if command == "matmul" else "broadcast", names=expressions)
        return graph(*values, namespace=self.shell.user_ns)

    @cell_magic("fv")
    def fv_cell(self, line: str, cell: str):
        """``%%fv memory``: run the cell and draw the memory it allocated and freed."""
        if line.strip() != "memory":
            raise UsageError(f"%%fv: expected 'memory', got {line.strip() or 'nothing'!r}. Example: %%fv memory")
        import linecache

        from ._capture.memory import make_tracker
        from ._capture.session import get_session
        from .widgets.memory import MemoryWidget

        from ._capture.source import current_cell

        session = get_session()
        count = current_cell() or self.shell.execution_count
        filename = f"<forgeviz %%fv memory cell [{count}]>"
        linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)  # source lines for hover
        tracker = make_tracker(fault=session.fault)
        tracker.default_cell = count
        tracker.mark_cell(count)
        tracker.start()
        session.enter()  # links saved activations to their nodes (nested in the cell's own capture)
        try:
            exec(compile(cell, filename, "exec"), self.shell.user_ns)  # noqa: S102 - the user's own cell
        finally:
            session.exit()
            tracker.stop()
        return MemoryWidget(tracker, session, live=False)
