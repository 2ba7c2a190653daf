"""``python -m forgeviz._capture.native``: build forgeviz's native libraries for the installed torch.

Each library is built and loaded; one that fails is said (with what forgeviz does without it) and the
others are still built. The exit status is 1 when any failed, so a script or CI that builds them sees it
(forgeviz itself works without them: ``./dev.sh lab`` goes on)."""

import sys

from . import build, build_hooks, build_reader, hooks, hooks_unavailable_reason, load, reader, reader_unavailable_reason


def main() -> int:
    failed = 0
    print(f"forgeviz native memory tracker: {build()}")
    load()  # proves it loads and can wrap this torch's CPU allocator
    for what, make, loaded, why, without in (
            ("gradient hooks", build_hooks, hooks, hooks_unavailable_reason, "Python hooks record gradients"),
            ("gradient reader", build_reader, reader, reader_unavailable_reason,
             "a recording reads the applied gradients in Python")):
        try:
            path = make()
            if loaded() is None:  # built, but not loadable (a symbol this torch does not export)
                raise RuntimeError(f"{path} does not load: {why()}")
            print(f"forgeviz native {what}: {path}")
        except RuntimeError as exc:  # slower without it, not wrong
            print(f"forgeviz native {what} were not built ({exc}); {without}", file=sys.stderr)
            failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main())
