"""forgeviz's native library: compiled once per torch build, loaded with ctypes.

``cpu_ledger.cpp`` wraps c10's CPU allocator, so tracking costs a hash insert per allocation
instead of a Python call per op. ``tensor_stats.cpp`` summarises a CPU gradient in one pass
instead of a dozen torch ops. It needs a C++ compiler and torch's headers (in every torch
wheel); without them forgeviz falls back to Python (the dispatch-mode tracker, and torch ops for
summaries), and says so.

A second library, ``grad_hooks.cpp`` (with ``tensor_stats.cpp``), records the gradients of a backward
pass with C++ Node hooks instead of Python ones (grads.py) and tags ops (session.py). It is a Python
extension module: it needs Python's headers and links torch's Python bindings; without it gradients
are recorded by Python hooks, and ops tagged in Python.

Build both ahead of time (``./dev.sh`` does) with ``python -m forgeviz._capture.native``; under
``%load_ext forgeviz`` the missing ones are built in the background (``background.py``) and used from
the next cell on.

>>> lib = load()  # doctest: +SKIP
>>> lib.fv_abi_version()  # doctest: +SKIP
1
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Optional

import torch

from ..untraced import use_native_pause

SOURCES = [Path(__file__).with_name("cpu_ledger.cpp"), Path(__file__).with_name("tensor_stats.cpp")]
HOOK_SOURCES = [Path(__file__).with_name("tensor_stats.cpp"), Path(__file__).with_name("grad_hooks.cpp"),
                Path(__file__).with_name("device_path.cpp")]
READER_SOURCES = [Path(__file__).with_name("tensor_stats.cpp"), Path(__file__).with_name("grad_reader.cpp")]
EXTENSION_HEADERS = [Path(__file__).with_name("extension.h")]  # included by both: part of their source keys
ABI_VERSION = 3
# The niceness of a background build: the user's cells get about 3× its CPU share. At 10 (about 9×)
# a build on 2 cores shared with other busy processes had not finished after 10 minutes (20-40 s alone).
BACKGROUND_NICE = 5
# Builds of other sources kept beside a new one, per library and torch (prune_builds)
KEPT_BUILDS = 3
HOOKS_ABI_VERSION = 17
READER_ABI_VERSION = 5


class FvRecord(ctypes.Structure):
    """Mirror of ``FvRecord`` in cpu_ledger.cpp."""

    _fields_ = [("sid", ctypes.c_uint32), ("node", ctypes.c_uint32), ("bytes", ctypes.c_double),
                ("op", ctypes.c_uint16), ("module", ctypes.c_uint16), ("cell", ctypes.c_uint16),
                ("line", ctypes.c_uint16), ("category", ctypes.c_uint8), ("pad", ctypes.c_uint8 * 7)]


_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_error: Optional[str] = None
# The extension modules by name (_grad_hooks, _grad_reader): (the module or None, why it did not load or
# None), once a load was tried and its outcome is final
_extensions: dict[str, tuple[object, Optional[str]]] = {}
# While this process builds in the background (background.py), a library that lands is used only
# once ``adopt()`` says so: at a cell boundary, never in the middle of a cell.
_deferred = False


def cache_dir() -> Path:
    """Where builds live: ``$FORGEVIZ_CACHE`` or ``~/.cache/forgeviz``, one folder per torch build."""
    base = os.environ.get("FORGEVIZ_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "forgeviz")
    return Path(base) / "native"


def _torch_lib_dir() -> str:
    return os.path.join(os.path.dirname(torch.__file__), "lib")


def _torch_key() -> str:
    return hashlib.sha256(f"{torch.__version__}|{_torch_lib_dir()}|{sys.platform}".encode()).hexdigest()[:10]


@functools.lru_cache(maxsize=4)
def _source_key(sources: tuple = tuple(SOURCES)) -> str:
    # Read once per process and source list (the ledger's, the hooks', the reader's): every capture() or
    # memory_trace() asks whether a build exists.
    return hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:10]


def library_path() -> Path:
    """The shared library for this source and this torch build (it may not exist yet)."""
    return cache_dir() / f"cpu_ledger-{_torch_key()}-{_source_key()}.so"


def hooks_library_path() -> Path:
    """The gradient hooks library for this source and this torch build (it may not exist yet)."""
    return cache_dir() / f"grad_hooks-{_torch_key()}-{_source_key(tuple(HOOK_SOURCES + EXTENSION_HEADERS))}.so"


def reader_library_path() -> Path:
    """The applied-gradient reader library for this source and this torch build (it may not exist yet)."""
    return cache_dir() / f"grad_reader-{_torch_key()}-{_source_key(tuple(READER_SOURCES + EXTENSION_HEADERS))}.so"


def compiler() -> Optional[str]:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


def build(verbose: bool = False, background: bool = False, tick: Optional[Callable[[], None]] = None) -> Path:
    """Compile ``SOURCES`` against the installed torch (10-15 s on 2 cores). Returns the library path.

    ``background``: at low priority (``nice``), so the user's cells are not starved; ``tick()`` is
    called about every second while it waits (for the compiler, or for another process's build).
    Raises ``RuntimeError`` saying what is missing (a compiler, torch's headers) and what the
    compiler printed.

    >>> build().exists()  # doctest: +SKIP
    True
    """
    return _compile(SOURCES, library_path(), "native memory tracker", [], [], verbose, background, tick)


def build_hooks(verbose: bool = False, background: bool = False,
                tick: Optional[Callable[[], None]] = None) -> Path:
    """Compile ``HOOK_SOURCES`` against the installed torch and Python (about 20 s). Returns the
    library path (``background`` and ``tick`` as for :func:`build`).

    Raises ``RuntimeError`` saying what is missing (a compiler, torch's or Python's headers) and what
    the compiler printed.

    >>> build_hooks().exists()  # doctest: +SKIP
    True
    """
    return _compile_extension(HOOK_SOURCES, hooks_library_path(), "native gradient hooks", verbose, background, tick)


def build_reader(verbose: bool = False, background: bool = False,
                 tick: Optional[Callable[[], None]] = None) -> Path:
    """Compile ``READER_SOURCES`` (a recording's reader of applied gradients) against the installed torch
    and Python, as :func:`build_hooks` does. Returns the library path.

    >>> build_reader().exists()  # doctest: +SKIP
    True
    """
    return _compile_extension(READER_SOURCES, reader_library_path(), "native gradient reader", verbose, background,
                              tick)


def _compile_extension(sources: list[Path], target: Path, what: str, verbose: bool, background: bool,
                       tick: Optional[Callable[[], None]]) -> Path:
    """A Python extension module linked with torch's Python bindings."""
    if target.exists():
        return target
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        raise RuntimeError(f"Python's headers were not found in {include} (apt-get install python3-dev)")
    return _compile(sources, target, what, [include], ["-ltorch_python"], verbose, background, tick)


@contextlib.contextmanager
def _build_lock(tick: Optional[Callable[[], None]]) -> Iterator[None]:
    """One build at a time across processes (two kernels starting together): the second waits, then
    finds the library built. The library itself is written by an atomic replace either way."""
    cache_dir().mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # not POSIX: the atomic replace alone keeps the file whole
        yield
        return
    with open(cache_dir() / ".build.lock", "w") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if tick is not None:
                    tick()
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run_compiler(cmd: list[str], tick: Optional[Callable[[], None]]) -> tuple[int, str]:
    """Run the compiler, calling ``tick()`` about every second while it works."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while True:
        try:
            _, err = proc.communicate(timeout=1.0)
            return proc.returncode, err
        except subprocess.TimeoutExpired:
            if tick is not None:
                tick()


def _compile(sources: list[Path], target: Path, what: str, includes: list[str], libraries: list[str],
             verbose: bool, background: bool = False, tick: Optional[Callable[[], None]] = None) -> Path:
    if target.exists():
        return target
    cxx = compiler()
    if cxx is None:
        raise RuntimeError(f"forgeviz's {what} needs a C++ compiler (g++), and none was found on "
                           "PATH; install one (apt-get install g++) or set $CXX")
    if shutil.which(cxx) is None:
        raise RuntimeError(f"forgeviz's {what} needs a C++ compiler, and $CXX names {cxx!r}, which was not "
                           "found; install one (apt-get install g++) or point $CXX at it")
    with _build_lock(tick):
        if target.exists():  # another process built it while this one waited
            return target
        return _compile_now(sources, target, what, includes, libraries, verbose, background, tick, cxx)


def _compile_now(sources: list[Path], target: Path, what: str, includes: list[str], libraries: list[str],
                 verbose: bool, background: bool, tick: Optional[Callable[[], None]], cxx: str) -> Path:
    from torch.utils.cpp_extension import include_paths

    includes = [*include_paths(), *includes]
    if not any(os.path.exists(os.path.join(p, "c10", "core", "CPUAllocator.h")) for p in includes):
        raise RuntimeError(f"torch's C++ headers were not found (looked in {includes})")
    target.parent.mkdir(parents=True, exist_ok=True)
    libdir = _torch_lib_dir()
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        # Lower priority in the background, so the user's cells come first (nice is in coreutils).
        nice = ["nice", "-n", str(BACKGROUND_NICE)] if background and shutil.which("nice") else []
        cmd = [*nice, cxx, "-O2", "-shared", "-fPIC", "-std=c++20", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
               *[f"-I{p}" for p in includes], *map(str, sources), f"-L{libdir}", "-lc10", "-ltorch_cpu",
               *libraries, f"-Wl,-rpath,{libdir}", "-o", str(out)]
        try:
            code, err = _run_compiler(cmd, tick)
        except OSError as exc:  # the compiler could not be started at all
            raise RuntimeError(f"forgeviz's {what} could not start the C++ compiler {cxx!r}: {exc}") from None
        if code != 0:
            raise RuntimeError(f"compiling forgeviz's {what} failed ({cxx} exit {code}):\n{err[-3000:]}")
        if verbose:
            print(" ".join(cmd), file=sys.stderr)
        os.replace(out, target)  # atomic: two kernels building at once both end with a whole file
    prune_builds(target)
    return target


def prune_builds(target: Path, kept: int = KEPT_BUILDS) -> list[Path]:
    """Delete the builds of ``target``'s library for this torch from other sources but the ``kept`` newest;
    returns what it deleted. Not all of them: two checkouts of forgeviz on one machine (a work tree, and a
    clone its tests run from) would each delete the other's at every build, and the other's next kernel
    would build again (a process that loaded one keeps its mapping, but its next one finds none).

    >>> import tempfile; folder = Path(tempfile.mkdtemp())
    >>> for k in range(6): _ = (folder / f"grad_hooks-{_torch_key()}-{k}.so").write_bytes(b""); os.utime(
    ...     folder / f"grad_hooks-{_torch_key()}-{k}.so", (k, k))
    >>> sorted(p.name.rsplit("-", 1)[1] for p in prune_builds(folder / f"grad_hooks-{_torch_key()}-5.so", kept=2))
    ['0.so', '1.so', '2.so']
    """
    stem = target.name.split("-", 1)[0]
    others = []
    for path in target.parent.glob(f"{stem}-{_torch_key()}-*.so"):  # other sources, same torch
        try:
            others.append((path.stat().st_mtime, path))
        except OSError:  # (deleted meanwhile by another build)
            continue
    others = sorted((o for o in others if o[1] != target), reverse=True)
    deleted = [path for _, path in others[kept:]]
    for path in deleted:
        path.unlink(missing_ok=True)  # a process that loaded it keeps its mapping
    return deleted


def _declare(lib: ctypes.CDLL) -> None:
    c = ctypes
    vp, i64, u64, dbl, i32, u32 = c.c_void_p, c.c_int64, c.c_uint64, c.c_double, c.c_int, c.c_uint32
    sigs = {
        "fv_abi_version": (i32, []), "fv_now": (dbl, []), "fv_install": (i32, []),
        "fv_ledger_new": (vp, [i64, dbl]), "fv_ledger_delete": (None, [vp]),
        "fv_ledger_recording": (None, [vp, i32]), "fv_set_context": (None, [vp, u32, u32, u32, u32]),
        "fv_intern": (i32, [c.c_char_p]), "fv_pause": (None, [i32]), "fv_record_ops": (None, [i32]),
        "fv_track": (i64, [vp, u64, dbl, i32, c.c_char_p, i32, i32, i32, dbl]),
        "fv_untrack": (i32, [vp, u64, i64]), "fv_recategorize": (i64, [vp, u64, i32, u32, u32]),
        "fv_claim": (i64, [vp, u64, u32, u32, i32]), "fv_release": (i32, [vp, u64, i64]),
        "fv_recategorize_many": (i64, [vp, vp, i64, i32, vp]), "fv_release_many": (i64, [vp, vp, vp, i64]),
        "fv_own_bytes": (dbl, [vp]),
        "fv_fresh_address": (vp, [vp]), "fv_name_fresh": (i64, [vp, u64, u64, dbl]),
        "fv_sid_of": (i64, [vp, u64, dbl]), "fv_forget_fresh": (None, [vp]),
        "fv_find": (i32, [vp, u32, c.POINTER(FvRecord)]), "fv_lookup": (i32, [vp, u64, c.POINTER(FvRecord)]),
        "fv_live": (i64, [vp, c.POINTER(u64), c.POINTER(FvRecord), i64]),
        "fv_stats": (i64, [vp, c.POINTER(dbl)]), "fv_cut": (None, [vp, i64, c.POINTER(dbl)]),
        "fv_publish": (None, [vp, i64]), "fv_copy": (i64, [vp, i64, i64, c.POINTER(vp)]),
        "fv_patch_cell": (None, [vp, i64, i32, i32]),
        "fv_op_count": (i32, []), "fv_op_name": (c.c_char_p, [i32]),
        "fv_summarize": (i32, [vp, i32, i32, c.POINTER(i64), c.POINTER(i64), i64, i32, c.POINTER(dbl),
                               c.POINTER(i64), c.POINTER(dbl), i64]),
        # No argtypes: ctypes then passes its arrays as pointers without converting anything.
        "fv_summarize_tensor": (i32, None), "fv_bit_sum_tensor": (i32, None),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes


_unlocked: Optional[ctypes.CDLL] = None


def load(build_if_missing: bool = True) -> ctypes.CDLL:
    """The loaded library with its allocator installed; builds it first if needed.

    Raises ``RuntimeError`` (with the reason) when it cannot be built or installed; the reason is
    remembered, so a kernel tries once.
    """
    global _lib, _error
    with _lock:
        if _lib is not None:
            return _lib
        if _error is not None:
            raise RuntimeError(_error)
        try:
            path = library_path()
            if not path.exists():
                if not build_if_missing:
                    raise RuntimeError(f"the native memory tracker is not built for torch {torch.__version__}; "
                                       "run: python -m forgeviz._capture.native")
                path = build()
            # PyDLL keeps the GIL across calls (they are short and never wait on Python): cheaper.
            lib = ctypes.PyDLL(str(path))
            _declare(lib)
            if lib.fv_abi_version() != ABI_VERSION:
                raise RuntimeError(f"{path} is ABI {lib.fv_abi_version()}, expected {ABI_VERSION}")
            if not lib.fv_install():
                raise RuntimeError("torch's CPU allocator is not one forgeviz can wrap (is another tool wrapping it?)")
        except (OSError, RuntimeError) as exc:
            _error = str(exc)
            raise RuntimeError(_error) from None
        _lib = lib
        use_native_pause(lib.fv_pause)  # forgeviz's own allocations are not the user's memory
        return lib


def load_if_built() -> Optional[ctypes.CDLL]:
    """The library, loaded now if it is already built for this torch; else None (never builds, and
    a library not built yet is not remembered as a failure: a later ``load()`` may still build it).

    Graph capture uses it for one-pass gradient summaries when it can have them for free.
    """
    if _lib is not None or _error is not None or not library_path().exists():
        return _lib
    try:
        return load(build_if_missing=False)
    except RuntimeError:
        return None


def loaded() -> Optional[ctypes.CDLL]:
    """The library if this process loaded it, else None (never builds or loads)."""
    return _lib


def unlocked() -> Optional[ctypes.CDLL]:
    """The loaded library (None if this process did not load it) through ``ctypes.CDLL``, whose calls
    release the GIL: for a thread that reads big tensors beside the training thread (a recording's
    reader). Only its pure functions (``fv_summarize_tensor``) are for that thread.

    >>> unlocked() is None or unlocked().fv_abi_version() == ABI_VERSION
    True
    """
    global _unlocked
    if _lib is None:
        return None
    if _unlocked is None:
        lib = ctypes.CDLL(_lib._name)  # the same mapping: dlopen counts a second reference
        _declare(lib)
        _unlocked = lib
    return _unlocked


def hooks():
    """The gradient hooks library as a Python module (``_grad_hooks``: tag, arm, finish, rows, forget,
    summary, walk, node_stats), loaded now if it is built for this torch and Python; else None (never
    builds; a load that failed is remembered, see ``hooks_unavailable_reason``).

    >>> hooks() is None or hooks().ABI_VERSION == HOOKS_ABI_VERSION
    True
    """
    return _extension("_grad_hooks", hooks_library_path, HOOKS_ABI_VERSION)


def reader():
    """The applied-gradient reader as a Python module (``_grad_reader``: read, wait, numbers, fingerprint), loaded
    now if it is built for this torch and Python; else None (never builds; a load that failed is remembered).

    >>> reader() is None or reader().ABI_VERSION == READER_ABI_VERSION
    True
    """
    return _extension("_grad_reader", reader_library_path, READER_ABI_VERSION)


def _extension(name: str, path: Callable[[], Path], abi: int):
    """The extension module ``name``: loaded once it is built (and, during a background build, adopted)."""
    known = _extensions.get(name)
    if known is not None or _deferred:
        return known[0] if known is not None else None
    module, error = _load_extension(path(), name, abi)
    if module is not None or error is not None:  # (not built yet: asked again next time)
        _extensions[name] = (module, error)
    return module


def _load_extension(path: Path, name: str, abi: int) -> tuple[object, Optional[str]]:
    """(the extension module at ``path``, None), or (None, why it did not load); (None, None) when it is
    not built."""
    if not path.exists():
        return None, None
    with _lock:
        try:  # an extension module: its functions take Python objects as they are
            spec = importlib.util.spec_from_file_location(f"{__name__}.{name}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            if module.ABI_VERSION != abi:
                raise RuntimeError(f"{path} is ABI {module.ABI_VERSION}, expected {abi}")
            return module, None
        except (ImportError, OSError, RuntimeError, AttributeError) as exc:
            return None, str(exc)


def defer() -> None:
    """Libraries built from now on wait for :func:`adopt` (a background build started)."""
    global _deferred
    _deferred = True


def adopt() -> None:
    """Use what was built since :func:`defer` (forgeviz calls it at a cell boundary)."""
    global _deferred
    _deferred = False


def hooks_unavailable_reason() -> Optional[str]:
    """Why the gradient hooks library could not load in this process, or None."""
    return _extensions.get("_grad_hooks", (None, None))[1]


def reader_unavailable_reason() -> Optional[str]:
    """Why the applied-gradient reader could not load in this process, or None."""
    return _extensions.get("_grad_reader", (None, None))[1]


def unavailable_reason() -> Optional[str]:
    """Why the native tracker could not load in this process, or None (not tried, or loaded)."""
    return _error

