"""``python -m forgeviz._capture.native``: build the native memory tracker for the installed torch."""

from . import build, load

if __name__ == "__main__":
    print(f"forgeviz native memory tracker: {build()}")
    load()  # proves it loads and can wrap this torch's CPU allocator
