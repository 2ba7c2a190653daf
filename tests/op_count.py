"""The aten ops that forgeviz issues while a backward pass runs, counted with a TorchDispatchMode."""

from __future__ import annotations

from collections import Counter

from torch.utils._python_dispatch import TorchDispatchMode

HOST_READS = ("aten::_local_scalar_dense", "aten::item")


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[f"aten::{func._schema.name.removeprefix('aten::')}"] += 1
        return func(*args, **(kwargs or {}))


def backward_ops(make_loss, arm=None) -> Counter:
    """The aten ops run by ``make_loss().backward()``, with hooks armed by ``arm(roots) -> finish``
    when given (``finish()`` is counted too); subtract a run without ``arm`` for forgeviz's own."""
    loss = make_loss()
    finish = arm([loss.grad_fn]) if arm is not None else None
    with _Count() as counter:
        loss.backward()
        if finish is not None:
            finish()
    return counter.ops
