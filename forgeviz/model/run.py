"""The names of a recorded run's parts (format version 1): what the capture side writes and
forgeviz.run reads. The streams' columns are in forgeviz/run/format.py (pyarrow schemas); these names
are here so that forgeviz._capture, which records, needs nothing above the model layer.
"""

from __future__ import annotations

FORMAT = "forgeviz-run"
FORMAT_VERSION = 1  # a reader refuses a rank written by a newer version, by name

META = "meta.json"
GRADS, GRAPHS, STEPS, FINDINGS, MEMORY = "grads", "graphs", "steps", "findings", "memory"
CUDA_MEMORY = "cuda_memory"  # a CUDA rank's allocator history (record(memory=True) where the model is on CUDA)

# kind of a gradient row
PARAMETER, MODULE, NODE = "parameter", "module", "node"
# the grads stream's columns, in order (their types: forgeviz/run/format.py's schema)
GRADS_COLUMNS = ("step", "kind", "name", "module", "norm", "min", "max", "mean", "numel", "fingerprint", "sharded",
                 "graph", "node")


def rank_folder(rank: int) -> str:
    """The sub-folder rank ``rank`` writes.

    >>> rank_folder(3)
    'rank3'
    """
    return f"rank{rank}"
