"""``python -m forgeviz record -o DIR [--grads each|off|N|"within P%"] [--budget-mb MB] [--memory] -- script.py
args…``: run a training script as ``__main__`` with recording on (under torchrun too: each rank writes
``DIR/rank<N>/``). ``-m module`` in place of the script runs a module. The script's exit status is the command's. A
SIGTERM (a scheduler's preemption, torchrun ending the ranks) first writes what was recorded, then ends the process
as it would have.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import runpy
import sys


def main(argv=None) -> int:
    """Parse ``argv`` and run the script under :func:`forgeviz.record`.

    >>> main(["record", "-o", "x"])
    Traceback (most recent call last):
    ...
    SystemExit: 2
    """
    parser = argparse.ArgumentParser(prog="python -m forgeviz", description="Record a training script for "
                                     "forgeviz.open().")
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="run a script with recording on",
                              usage="python -m forgeviz record -o DIR [options] -- script.py [args…]")
    rec.add_argument("-o", "--output", required=True, help="the run's folder (each rank writes rank<N>/ in it)")
    rec.add_argument("--grads", default="each",
                     help="'each' step (default), 'off', 'within P%%' (as many as fit in P%% of the loop's time), "
                          "or N: every N-th step")
    rec.add_argument("--budget-mb", type=float, default=256, help="size to stay under, per rank (default 256)")
    rec.add_argument("--segment-seconds", type=float, default=2.0,
                     help="write a segment at least this often (what a killed process can lose; default 2)")
    rec.add_argument("--memory", action="store_true",
                     help="also record the memory timeline (the CPU ledger's events; off by default: it costs)")
    rec.add_argument("-m", dest="module", help="run a module (as python -m does) instead of a script")
    rec.add_argument("script", nargs=argparse.REMAINDER, help="-- script.py and its arguments")
    args = parser.parse_args(argv)
    rest = args.script[1:] if args.script[:1] == ["--"] else args.script
    if args.module is None and not rest:
        rec.error("expected the script to run after --, e.g. python -m forgeviz record -o runs/exp1 -- train.py")
    grads = int(args.grads) if args.grads.isdigit() else args.grads
    target = args.module or rest[0]
    # Said as python says it, before a run's folder is made: a typo would otherwise leave an empty run behind
    if args.module is None and not os.path.exists(target):
        rec.error(f"expected a script to run, got {target!r}: no such file")
    if args.module is not None and not _module_exists(args.module):
        rec.error(f"expected a module to run (-m), got {args.module!r}: no module of that name")
    from . import record  # torch, only once the command line is good
    from ._capture.native.background import LIBRARIES
    from .api import record_arguments

    try:
        record_arguments(args.output, grads, args.budget_mb, args.segment_seconds, args.memory)
    except (TypeError, ValueError) as exc:  # (its words, with the option's name for the keyword's)
        said = str(exc)
        for keyword, option in (("grads", "--grads"), ("budget_mb", "--budget-mb"),
                                ("segment_seconds", "--segment-seconds")):
            said = said.replace(f"forgeviz.record({keyword}=...)", f"argument {option}", 1)
        rec.error(said)

    missing = [name for name, path, _ in LIBRARIES if not path().exists()]
    if missing and os.environ.get("RANK", "0") == "0":  # (under torchrun, said once)
        print(f"forgeviz: the native {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not built for this "
              "torch, so this run records on forgeviz's Python paths (the same figures, at more cost per step). "
              f"Build {'it' if len(missing) == 1 else 'them'} once with: python -m forgeviz._capture.native",
              file=sys.stderr)

    sys.argv = [target, *(rest if args.module else rest[1:])]
    with record(args.output, grads=grads, budget_mb=args.budget_mb, segment_seconds=args.segment_seconds,
                memory=args.memory, command=[target, *sys.argv[1:]], _write_at_sigterm=True):
        if args.module:
            runpy.run_module(args.module, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))  # as python script.py does
            runpy.run_path(target, run_name="__main__")
    return 0


def _module_exists(name: str) -> bool:
    """Whether ``python -m name`` would find a module (its parent packages are imported to look, as it does).

    >>> _module_exists("json"), _module_exists("no_such_module_anywhere.sub")
    (True, False)
    """
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


if __name__ == "__main__":
    sys.exit(main())
