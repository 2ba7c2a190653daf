"""Imported first by the benchmarks: they measure this checkout's forgeviz, never a copy installed
earlier into the venv (``pip install .`` is not editable, so an edit would otherwise go unmeasured)."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if sys.path[:1] != [ROOT]:
    sys.path.insert(0, ROOT)
