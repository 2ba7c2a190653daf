"""forgeviz: see inside PyTorch while you work.

>>> import forgeviz
>>> callable(forgeviz.graph)
True
"""

from ._version import __version__
from .api import broadcast, capture, cuda_snapshot, graph, memory, memory_trace, ranks, record, show, strides
from .run import open_run as open  # noqa: A001 - forgeviz.open(path), as the issue names it

__all__ = ["__version__", "broadcast", "capture", "cuda_snapshot", "graph", "load_ipython_extension", "memory",
           "memory_trace", "open", "ranks", "record", "show", "strides", "unload_ipython_extension"]


def load_ipython_extension(shell) -> None:
    """``%load_ext forgeviz``: capture every later cell."""
    from .extension import load

    load(shell)


def unload_ipython_extension(shell) -> None:
    """``%unload_ext forgeviz``: remove every hook and mode."""
    from .extension import unload

    unload(shell)


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "forgeviz"}]
