"""Where an incident happened, and how the doctor tells it: the user's cell and line (:class:`Site`), the
Node that made a tensor, a byte count, an exception's message. Shared by every detector."""

from __future__ import annotations

import os
import sys
import sysconfig
from typing import NamedTuple, Optional

from ..fault import message  # noqa: F401 - the detectors read it here
from ..source import cell_number, source_line, user_location


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {os.path.abspath(p) + os.sep for key in ("stdlib", "platstdlib", "purelib", "platlib")
            if (p := paths.get(key))}
    return tuple(sorted(dirs))


_LIBRARY_DIRS = _library_dirs()


def in_library(filename: str) -> bool:
    """Whether ``filename`` is Python's own library or an installed package (not the user's code).

    >>> in_library(os.__file__), in_library("<ipython-input-3-abc>")
    (True, False)
    """
    return filename.startswith(_LIBRARY_DIRS) or f"{os.sep}site-packages{os.sep}" in filename \
        or f"{os.sep}dist-packages{os.sep}" in filename


class Site(NamedTuple):
    """Where something happened: the notebook cell's line (None outside a cell) and the innermost
    user frame (a cell, or a file of the user's that the cell called).

    >>> Site(3, 2, "y = x.log()", None, None).text()
    'cell [3], line 2'
    """

    cell: Optional[int]
    line: Optional[int]
    source: str
    filename: Optional[str]  # the innermost user frame's
    file_line: Optional[int]

    def text(self) -> str:
        """``cell [3], line 2`` (and the user's file and line when the op ran in one)."""
        where = f"cell [{self.cell}], line {self.line}" if self.cell is not None else (
            f"line {self.line}" if self.line is not None else "an unknown line")
        if self.filename is not None and cell_number(self.filename) is None:
            where = f"{os.path.basename(self.filename)}:{self.file_line} (called from {where})" \
                if self.cell is not None else f"{os.path.basename(self.filename)}:{self.file_line}"
        return where


def site_here() -> Optional[Site]:
    """The Site of the nearest user frame that called into forgeviz (torch and forgeviz frames skipped).

    >>> site_here() is None or isinstance(site_here(), Site)
    True
    """
    filename, line = user_location(2)
    if filename is None:
        return None
    cell = cell_number(filename)
    if cell is not None:
        return Site(cell, line, source_line(filename, line) or "", filename, line)
    frame = sys._getframe(1)
    try:  # a file of the user's: the notebook cell that called it
        while frame is not None:
            outer = cell_number(frame.f_code.co_filename)
            if outer is not None:
                number = frame.f_lineno
                return Site(outer, number, source_line(frame.f_code.co_filename, number) or "", filename, line)
            frame = frame.f_back
    finally:
        del frame
    return Site(None, line, source_line(filename, line) or "", filename, line)


def from_notebook(site: Site) -> bool:
    """Whether the notebook's code (a cell, or a file of the user's) ran what happened at ``site``.

    >>> from_notebook(Site(None, 4, "", os.__file__, 4))
    False
    """
    return site.filename is not None and (site.cell is not None or not in_library(site.filename))


def site_of(filename: Optional[str], line: Optional[int]) -> Optional[Site]:
    """The Site of a (filename, line) that ``user_location`` gave (None for none).

    >>> site_of(None, 3) is None
    True
    """
    if filename is None:
        return None
    return Site(cell_number(filename), line, source_line(filename, line) or "", filename, line)


def tag_site(node) -> Optional[Site]:
    """The line that made ``node``, from the capture session's tag in its metadata (None untagged).

    >>> import torch; tag_site((torch.ones(1, requires_grad=True) * 2).grad_fn) is None
    True
    """
    tag = node.metadata.get("fv_op")
    return site_of(tag[2], tag[3]) if tag else None


def node_text(node) -> str:
    """``SigmoidBackward0 (made by sigmoid at cell [3], line 2)``; its type alone when untagged.

    >>> import torch; node_text((torch.ones(1, requires_grad=True) * 2).grad_fn)
    'MulBackward0'
    """
    name = type(node).__name__
    tag = node.metadata.get("fv_op")
    site = site_of(tag[2], tag[3]) if tag else None
    return f"{name} (made by {tag[0]} at {site.text()})" if site is not None else name


def size(n: int) -> str:
    """``1536 bytes (1.5 KiB)``.

    >>> size(1536), size(12)
    ('1536 bytes (1.5 KiB)', '12 bytes')
    """
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n} bytes ({n / scale:.1f} {unit})"
    return f"{n} bytes"
