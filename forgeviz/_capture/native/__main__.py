"""``python -m forgeviz._capture.native``: build forgeviz's native libraries for the installed torch."""

import sys

from . import build, build_hooks, build_reader, hooks, hooks_unavailable_reason, load, reader, reader_unavailable_reason

if __name__ == "__main__":
    print(f"forgeviz native memory tracker: {build()}")
    load()  # proves it loads and can wrap this torch's CPU allocator
    try:
        print(f"forgeviz native gradient hooks: {build_hooks()}")
        if hooks() is None:  # built but not loadable (a symbol this torch does not export): say so, red
            raise SystemExit(f"forgeviz native gradient hooks do not load: {hooks_unavailable_reason()}")
    except RuntimeError as exc:  # gradients are then recorded by Python hooks: slower, not wrong
        print(f"forgeviz native gradient hooks were not built ({exc}); Python hooks record gradients",
              file=sys.stderr)
    try:
        print(f"forgeviz native gradient reader: {build_reader()}")
        if reader() is None:
            raise SystemExit(f"forgeviz native gradient reader does not load: {reader_unavailable_reason()}")
    except RuntimeError as exc:  # a recording then reads applied gradients on a Python thread: slower, not wrong
        print(f"forgeviz native gradient reader was not built ({exc}); a recording reads gradients in Python",
              file=sys.stderr)
