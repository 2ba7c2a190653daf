"""Where an op came from: the first frame outside torch and forgeviz, and its notebook cell."""

from __future__ import annotations

import linecache
import os
import sys
from typing import Callable, Mapping, Optional

import torch

_SKIP_DIRS = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep
    for m in (torch, sys.modules[__name__.rsplit(".", 2)[0]])
)
_is_user_file: dict[str, bool] = {}


def _user_file(filename: str) -> bool:
    known = _is_user_file.get(filename)
    if known is None:
        known = not (filename.startswith(_SKIP_DIRS) or filename.startswith("<frozen"))
        _is_user_file[filename] = known
    return known


def user_files() -> tuple[dict[str, bool], Callable[[str], bool]]:
    """(filename -> whether it is the user's, the function that decides a filename it does not hold and records it
    there): what a native walk of the frames reads, as :func:`user_location` does.

    >>> known, classify = user_files(); classify(torch.__file__), known[torch.__file__]
    (False, False)
    """
    return _is_user_file, _user_file


# native/grad_hooks.cpp's walk of the same frames (CaptureSession.enter sets it once the library is loaded)
_native_walk: Optional[Callable] = None


def use_native_walk(walk: Optional[Callable]) -> None:
    """Walk the frames with ``walk(depth, known, classify)`` (the native library's ``user_location``) from now on;
    None: in Python.

    >>> use_native_walk(lambda depth, known, classify: ("cell", 7)); user_location()
    ('cell', 7)
    >>> use_native_walk(None)
    """
    global _native_walk
    _native_walk = walk


def user_location(depth: int = 2) -> tuple[Optional[str], Optional[int]]:
    """(filename, line) of the nearest caller frame that is user code, not torch or forgeviz, from
    ``sys._getframe(depth)`` up.

    For an op inside ``model(x)`` this is the line of ``model(x)`` in the cell.

    >>> import sys
    >>> user_location(1) == (sys._getframe().f_code.co_filename, sys._getframe().f_lineno)
    True
    """
    walk = _native_walk
    if walk is not None:  # (the same walk, in C++: one per op that makes a Node)
        return walk(depth, _is_user_file, _user_file)
    frame = sys._getframe(depth)
    known = _is_user_file  # asked for every op: the lookup inline, a call only for a new file
    while frame is not None:
        filename = frame.f_code.co_filename
        user = known.get(filename)
        if user is None:
            user = _user_file(filename)
        if user:
            return filename, frame.f_lineno
        frame = frame.f_back
    return None, None


def user_frame_above(frame) -> tuple[Optional[str], Optional[int]]:
    """(filename, line) of the nearest user frame that called ``frame`` (not ``frame`` itself).

    >>> import sys
    >>> def callee():
    ...     return user_frame_above(sys._getframe())
    >>> callee()[1] == sys._getframe().f_lineno
    True
    """
    frame = frame.f_back
    try:
        while frame is not None:
            if _user_file(frame.f_code.co_filename):
                return frame.f_code.co_filename, frame.f_lineno
            frame = frame.f_back
        return None, None
    finally:
        del frame


def names_by_identity(values, *namespaces: Mapping[str, object]) -> list[Optional[str]]:
    """The first public name bound to each value in the namespaces (searched in order), else None.

    >>> a = object()
    >>> names_by_identity([a, 3.5], {"_hidden": a, "a": a})
    ['a', None]
    """
    wanted = {id(v) for v in values}
    by_id: dict[int, str] = {}
    for namespace in namespaces:
        for key, value in list(namespace.items()):
            if not key.startswith("_") and id(value) in wanted:
                by_id.setdefault(id(value), key)
    return [by_id.get(id(v)) for v in values]


def user_names(values, depth: int = 2) -> list[Optional[str]]:
    """The variable names the nearest user frame gives these objects (None where it has none).

    Reads that frame's globals only (reading a function's f_locals would pin its locals), and
    keeps nothing.
    """
    frame = sys._getframe(depth)
    while frame is not None and not _user_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return [None] * len(values)
    try:
        return names_by_identity(values, frame.f_globals)
    finally:
        del frame


#: The filename ``%%fv memory`` compiles its cell's body under (forgeviz/magics.py): ``MAGIC_CELL % count``.
MAGIC_CELL = "<forgeviz %%%%fv memory cell [%d]>"


def cell_number(filename: Optional[str]) -> Optional[int]:
    """The execution count of the IPython cell compiled under ``filename`` (or a ``%%fv memory`` cell's
    body), if any.

    >>> cell_number(MAGIC_CELL % 7)
    7
    """
    if filename is None:
        return None
    if filename.startswith("<forgeviz %%fv memory cell ["):
        digits = filename[len("<forgeviz %%fv memory cell ["):-2]
        return int(digits) if digits.isdigit() else None
    if _get_ipython is None:
        return None
    shell = _get_ipython()
    if shell is None:
        return None
    return getattr(shell.compile, "_filename_map", {}).get(filename)


try:  # imported once: cell_number runs at every module call the memory timeline sees
    from IPython import get_ipython as _get_ipython
except ImportError:  # pragma: no cover - IPython ships with the dependencies
    _get_ipython = None


def current_cell() -> Optional[int]:
    """The execution count of the notebook cell whose code is running now (the nearest frame
    IPython compiled), or None outside a cell."""
    frame = sys._getframe(1)
    try:
        while frame is not None:
            number = cell_number(frame.f_code.co_filename)
            if number is not None:
                return number
            frame = frame.f_back
        return None
    finally:
        del frame


def source_line(filename: Optional[str], line: Optional[int]) -> Optional[str]:
    """The text of that line (IPython registers cells with linecache), stripped."""
    if filename is None or line is None:
        return None
    text = linecache.getline(filename, line).strip()
    return text or None
