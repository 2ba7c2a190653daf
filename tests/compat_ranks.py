"""One rank of test_compat.py's two-process check: DDP, then FSDP2 (``fully_shard``), over gloo on
loopback, each trained a few steps with forgeviz off and then under ``forgeviz.capture()``.

Started by the test with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set. Prints one JSON line: for
each wrapper, what differs between off and on (must be nothing), the backward passes forgeviz recorded,
the faults it logged, and for DDP whether the all-reduced gradients are equal on every rank; or, where
torch cannot run the wrapper on CPU, the exact error it gave.
"""

from __future__ import annotations

import datetime
import json
import os

import torch
import torch.distributed as dist

import forgeviz
from forgeviz._capture.session import get_session

STEPS = 3


def _model() -> torch.nn.Module:
    torch.manual_seed(0)  # the same weights on every rank, as DDP and FSDP expect
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of a tensor (an FSDP2 parameter or gradient is a DTensor shard)."""
    return (t.to_local() if hasattr(t, "to_local") else t).detach().clone()


def train(wrap, on: bool) -> tuple[list[torch.Tensor], list[torch.Tensor], bool]:
    """``STEPS`` SGD steps on this rank's own batches: the grads of each step, the parameters, and
    whether they are sharded (DTensors)."""
    model = wrap(_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    grads = []
    for step in range(STEPS):
        x = torch.randn(8, 8, generator=torch.Generator().manual_seed(100 * dist.get_rank() + step))
        opt.zero_grad()
        if on:
            with forgeviz.capture():
                model(x).square().mean().backward()
        else:
            model(x).square().mean().backward()
        grads += [_local(p.grad) for p in model.parameters()]
        opt.step()
    params = list(model.parameters())
    return grads, [_local(p) for p in params], any(hasattr(p, "to_local") for p in params)


def compare(wrap) -> tuple[dict, list[torch.Tensor]]:
    """Off, then on: what differs, what forgeviz recorded and logged; and the grads with it on."""
    session = get_session()
    off = train(wrap, False)
    passes, faults = session.store.passes, session.fault_count
    on = train(wrap, True)
    report = {"passes": session.store.passes - passes, "faults": session.faults_since(faults), "differs": [],
              "sharded": on[2]}
    for kind, a, b in (("grad", off[0], on[0]), ("param", off[1], on[1])):
        report["differs"] += [f"{kind} {i}" for i, (x, y) in enumerate(zip(a, b, strict=True)) if not torch.equal(x, y)]
    return report, on[0]


def ddp() -> dict:
    from torch.nn.parallel import DistributedDataParallel

    report, grads = compare(DistributedDataParallel)
    # After the all-reduce every rank holds the same gradients: gather them and compare bit for bit.
    flat = torch.cat([g.flatten() for g in grads])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    report["ranks_equal"] = all(torch.equal(gathered[0], g) for g in gathered[1:])
    return report


def fsdp() -> dict:
    try:
        from torch.distributed.fsdp import fully_shard

        def wrap(model):
            for layer in model:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer)
            return fully_shard(model)

        train(wrap, False)  # does torch run it here at all?
    except Exception as exc:  # noqa: BLE001 - reported to the test, which skips saying exactly this
        return {"unsupported": f"{type(exc).__name__}: {exc}"}
    return compare(wrap)[0]


def main() -> None:
    torch.set_num_threads(1)  # two ranks on two cores
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    try:
        result = {"rank": dist.get_rank(), "ddp": ddp(), "fsdp": fsdp()}
    finally:
        dist.destroy_process_group()
    print(json.dumps(result), flush=True)
    # torch's gloo threads can abort the process as it exits ("terminate called without an active
    # exception"): the same DDP and FSDP2 steps without forgeviz imported aborted 5 times in 16 here.
    # The result is printed: leave without running C++'s static destructors.
    os._exit(0)


if __name__ == "__main__":
    assert os.environ.get("MASTER_ADDR") == "127.0.0.1"
    main()
