"""A training script that test_record.py runs under ``python -m forgeviz record`` (with torchrun for two
ranks, or alone). It knows nothing of forgeviz: it writes torch's own figures, each applied gradient's
float64 norm per step (read just before ``optimizer.step()``), to ``<out>/torch-rank<N>.json``, and its two
fingerprint to ``<out>/prints-rank<N>.json``: the int64 sum of its elements' bit patterns (its float32 values
read as int32), by torch.

``record_ranks.py OUT MODE``; MODE: ``ddp`` (DDP over gloo), ``fsdp`` (FSDP2 ``fully_shard``), ``diverge``
(DDP; rank 1 doubles its first parameter's gradient after the all-reduce at step 3), ``crash`` (DDP; rank 1 raises
at step 3, before its backward: torchrun then ends rank 0), ``nan`` (DDP; at step
2 rank 1's backward sends a NaN from a sqrt at 0, its forward finite), ``single`` (one
process, no torch.distributed), ``forever`` (single, until killed), ``spawn`` (run alone: two ranks started by
``torch.multiprocessing.spawn``, as PyTorch's DDP tutorial starts them, no torchrun variables; each records in code,
``forgeviz.record(OUT/run)``, entered before it starts torch.distributed; then as ``diverge``).
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist

STEPS = 4


def model() -> torch.nn.Module:
    torch.manual_seed(0)  # the same weights on every rank, as DDP and FSDP expect
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


def wrap(net: torch.nn.Module, mode: str) -> torch.nn.Module:
    if mode in ("ddp", "diverge", "nan", "crash"):
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(net)
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for layer in net:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        return fully_shard(net)
    return net


def local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def fingerprint(grad: torch.Tensor) -> int:
    """The int64 sum of its bit patterns; holds nothing after (a test counts gradient bytes)."""
    return grad.view(torch.int32).sum(dtype=torch.int64).item()


def main(out: Path, mode: str) -> None:
    if mode == "spawn":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        torch.multiprocessing.spawn(spawned, args=(out, port), nprocs=2)
        return
    distributed = mode not in ("single", "forever")
    if distributed:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    train(out, mode, distributed)


def spawned(rank: int, out: Path, port: int) -> None:
    """Mode ``spawn``'s rank ``rank``: recording from before torch.distributed starts."""
    import forgeviz

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    with forgeviz.record(out / "run"):
        dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
        train(out, "diverge", True)


def train(out: Path, mode: str, distributed: bool) -> None:
    torch.set_num_threads(1)
    rank = dist.get_rank() if distributed else 0
    net = wrap(model(), mode)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    norms: dict[int, dict[str, float]] = {}
    prints: dict[int, dict[str, tuple[int, int]]] = {}
    step = 0
    while step < STEPS or mode == "forever":
        step += 1
        x = torch.randn(8, 8, generator=torch.Generator().manual_seed(100 * rank + step))
        opt.zero_grad()
        y = net(x)
        loss = y.square().mean()
        if mode == "crash" and step == 3:
            if rank == 1:
                raise RuntimeError("rank 1 fails at step 3")
            print(f"rank 0 at step {step}", flush=True)
        if mode == "nan" and rank == 1 and step == 2:
            loss = loss + (y[:, :1] * 0).sqrt().sum()  # adds 0; its backward: sqrt'(0) = inf, times 0: NaN
        loss.backward()
        if mode == "diverge" and rank == 1 and step == 3:
            next(iter(net.parameters())).grad.mul_(2.0)  # after DDP's all-reduce: only this rank's
        norms[step] = {n: local(p.grad).detach().double().norm().item() for n, p in net.named_parameters()}
        prints[step] = {n: fingerprint(local(p.grad).detach()) for n, p in net.named_parameters()}
        opt.step()
        if mode == "forever":
            print(f"step {step}", flush=True)
    (out / f"torch-rank{rank}.json").write_text(json.dumps(norms))
    (out / f"prints-rank{rank}.json").write_text(json.dumps(prints))
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
