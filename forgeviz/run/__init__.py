"""Recorded runs: the file format (:mod:`.format`), its background writer (:mod:`.writer`) and its reader
(:mod:`.reader`, ``forgeviz.open``). Imports pyarrow, never torch.

>>> from forgeviz.run import FORMAT_VERSION
>>> FORMAT_VERSION
1
"""

from ..model.run import FORMAT_VERSION
from .reader import Finding, Run, open_run

__all__ = ["FORMAT_VERSION", "Finding", "Run", "open_run"]
