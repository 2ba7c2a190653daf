"""What the side panel costs a cell (forgeviz/panel.py), side by side in one run.

  closed        ``%load_ext forgeviz``, no panel connected: a trivial cell's time
  open          the same cell with a panel connected (a stand-in comm that keeps what is sent): the
                doctor watching, the tensor listing and the state sent after the cell
  added         open − closed, per cell: the target is at most 2 ms with 300 tensors in the namespace
  listing       list_tensors() alone over that namespace, cold (a new lister: nothing reused)

The namespace holds 300 tensors: 200 plain ones (a 64×64 float each) and the 100 weights and biases of a
50-layer MLP, with their gradients after a backward, so grad norms are read too.

Run: ``.venv/bin/python tests/benchmarks/bench_panel.py``. Not a test: nothing asserts.
"""

from __future__ import annotations

import statistics
import time

from IPython.core.interactiveshell import InteractiveShell

from _bench import ROOT  # noqa: F401 - first: it puts this checkout on sys.path

from forgeviz import panel
from forgeviz._capture.namespace import list_tensors

CELLS = 200


class KeepingComm:
    def __init__(self) -> None:
        self.sent = 0

    def send(self, data) -> None:
        self.sent += 1

    def on_msg(self, cb) -> None:
        pass

    def on_close(self, cb) -> None:
        self.close_cb = cb

    def close(self) -> None:
        pass


def per_cell(shell, cells: int = CELLS) -> float:
    """The median of ``cells`` runs of a trivial cell, in ms."""
    times = []
    for _ in range(cells):
        start = time.perf_counter()
        shell.run_cell("pass", store_history=False)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    shell = InteractiveShell.instance()
    shell.run_cell("%load_ext forgeviz\nimport torch")
    shell.run_cell("for i in range(200):\n    globals()[f't{i}'] = torch.randn(64, 64)\n"
                   "mlp = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(50)])\n"
                   "mlp(torch.randn(8, 64)).sum().backward()")
    tensors = len(list_tensors(shell.user_ns).rows)
    host = panel.host()
    rounds = []
    for _ in range(3):  # alternate, so drift on a noisy machine falls on both sides
        closed = per_cell(shell)
        comm = KeepingComm()
        host._opened(comm, {})
        opened = per_cell(shell)
        comm.close_cb({})
        rounds.append((closed, opened))
    start = time.perf_counter()
    for _ in range(20):
        list_tensors(shell.user_ns)
    listing = (time.perf_counter() - start) / 20 * 1e3
    closed = statistics.median(r[0] for r in rounds)
    opened = statistics.median(r[1] for r in rounds)
    print(f"namespace: {tensors} tensors")
    print(f"{'closed':<10}{closed:8.3f} ms/cell")
    print(f"{'open':<10}{opened:8.3f} ms/cell")
    print(f"{'added':<10}{opened - closed:8.3f} ms/cell   (target ≤ 2 ms)")
    print(f"{'listing':<10}{listing:8.3f} ms   (cold: a new lister each time; after a cell rows are reused)")


if __name__ == "__main__":
    main()
