"""Recording runs (issue 28, SCENARIOS T4): ``python -m forgeviz record`` under torchrun with two gloo ranks on
loopback, read back with ``forgeviz.open``; every figure checked against what torch itself said on that rank
(record_ranks.py writes it, knowing nothing of forgeviz). Then a killed process, and bad input."""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Optional

import pytest
import torch

import forgeviz
from forgeviz.__main__ import main as cli_main
from forgeviz.model.run import FORMAT_VERSION

SCRIPT = Path(__file__).with_name("record_ranks.py")
STEPS = 4
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(tmp: Path, mode: str, *options: str, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    """record_ranks.py ``mode`` on two gloo ranks under ``python -m forgeviz record [options]`` (``env``: more
    environment)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
               "--master-port", str(_free_port()), "-m", "forgeviz", "record", "-o", str(tmp / "run"), *options,
               "--", str(SCRIPT), str(tmp), mode]
    return subprocess.run(command, env={**ENV, **(env or {})}, capture_output=True, text=True, timeout=120)


def _torch_norms(tmp: Path, rank: int) -> dict[int, dict[str, float]]:
    return {int(k): v for k, v in json.loads((tmp / f"torch-rank{rank}.json").read_text()).items()}


def _check_norms(run, tmp: Path) -> None:
    assert run.ranks == [0, 1] and run.steps == list(range(1, STEPS + 1)), run
    for rank in run.ranks:
        mine = _torch_norms(tmp, rank)
        for step in run.steps:
            recorded = run.grad_norms(rank, step)
            assert recorded.keys() == mine[step].keys()
            for name, norm in mine[step].items():
                assert recorded[name] == pytest.approx(norm, rel=1e-12, abs=1e-15), (rank, step, name)


PATHS = pytest.mark.parametrize("summaries", ["", "device"], ids=["cpu-path", "device-path"])


def _check_fingerprints(run, tmp: Path, summaries: str) -> None:
    """Each recorded fingerprint is torch's: the sum of the gradient's bit patterns, folded, on either path (the
    CPU's native reader, or the device path as on a GPU)."""
    from forgeviz._capture.recording import fold_bit_sum

    params = run.frame().query("kind == 'parameter'")
    assert len(params) == 2 * STEPS * 4
    for rank in run.ranks:
        assert run.meta(rank)["fingerprint"] == "bit-sum"
        prints = json.loads((tmp / f"prints-rank{rank}.json").read_text())
        for row in params[params["rank"] == rank].itertuples():
            assert row.fingerprint == fold_bit_sum(prints[str(row.step)][row.name]), (rank, row.step, row.name)


@PATHS
def test_ddp_two_ranks(tmp_path, summaries):
    """With FORGEVIZ_SUMMARIES=device the applied gradients take the GPU's path (summarised and fingerprinted
    on their device, no host read) on the CPU."""
    done = _torchrun(tmp_path, "ddp", env={"FORGEVIZ_SUMMARIES": summaries})
    assert done.returncode == 0, done.stderr[-3000:]
    run = forgeviz.open(tmp_path / "run")
    assert run.problems == []
    _check_norms(run, tmp_path)
    _check_fingerprints(run, tmp_path, summaries)
    meta = run.meta(1)
    assert (meta["rank"], meta["world_size"], meta["format_version"], meta["torch"]) == (1, 2, FORMAT_VERSION,
                                                                                          torch.__version__)
    assert meta["command"] == [str(SCRIPT), str(tmp_path), "ddp"] and meta["finished"] and meta["dropped_segments"] == 0
    df = run.frame()
    assert list(df.columns[:9]) == ["rank", "step", "kind", "name", "module", "norm", "min", "max", "mean"]
    params = df[df.kind == "parameter"]
    # after DDP's all-reduce the applied gradients are equal, bit for bit, on both ranks: and torch agrees
    by_rank = params.pivot_table(index=["step", "name"], columns="rank", values="fingerprint", aggfunc="first")
    assert len(by_rank) == STEPS * 4 and (by_rank[0] == by_rank[1]).all()
    assert run.findings == []
    # a module's row is its parameters' gradients together
    step2 = params[(params["rank"] == 0) & (params.step == 2) & (params.module == "module.0")]
    module = df[(df["rank"] == 0) & (df.step == 2) & (df.kind == "module") & (df.name == "module.0")]
    assert module.norm.item() == pytest.approx(math.sqrt((step2.norm ** 2).sum()), rel=1e-12)
    assert module["min"].item() == step2["min"].min() and module["max"].item() == step2["max"].max()
    # Nodes: the local gradient (before the all-reduce) that reached each Node, per step, and the graph once
    nodes = df[(df.kind == "node") & (df["rank"] == 0) & (df.step == 1)]
    graph = run.graph(step=1)
    labels = graph["nodes"]["columns"]["name"]
    assert len(nodes) > 0 and set(nodes.graph) == {0}
    assert {labels[i] for i in nodes.node} >= {"AddmmBackward0", "GeluBackward0"}, labels
    assert sorted(run.module_norms())[0][:3] == (0, 1, "module.0")


@PATHS
def test_rank_that_diverges_is_flagged(tmp_path, summaries):
    done = _torchrun(tmp_path, "diverge", env={"FORGEVIZ_SUMMARIES": summaries})
    assert done.returncode == 0, done.stderr[-3000:]
    run = forgeviz.open(tmp_path / "run")
    _check_norms(run, tmp_path)  # rank 1's doubled gradient is what its optimizer applied, and recorded
    _check_fingerprints(run, tmp_path, summaries)
    assert _torch_norms(tmp_path, 1)[3]["module.0.weight"] == pytest.approx(
        2 * _torch_norms(tmp_path, 0)[3]["module.0.weight"], rel=1e-12)
    [finding] = run.findings
    assert (finding.kind, finding.ranks, finding.step, finding.parameter) == ("rank_divergence", (0, 1), 3,
                                                                              "module.0.weight")
    assert "step 3" in finding.message
    # ranks whose fingerprints are of two kinds (an older forgeviz's CRC-32s on the CPU, and bit-sums) are not
    # compared: no false finding
    meta = tmp_path / "run" / "rank1" / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "fingerprint": "crc32"}))
    assert [f for f in forgeviz.open(tmp_path / "run").findings if f.kind == "rank_divergence"] == []


def test_ranks_started_by_mp_spawn_recording_from_before_they_start_torch_distributed(tmp_path):
    """Ranks that torch.multiprocessing.spawn starts (PyTorch's DDP tutorial: no torchrun variables), each inside
    ``forgeviz.record()`` from before its init_process_group: each writes its own folder (both wrote rank0/ when
    the folder was named as recording began), with a rank of two's fingerprints, and rank 1's divergence is
    flagged."""
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "spawn"], env=ENV, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    run = forgeviz.open(tmp_path / "run")
    assert run.problems == []
    assert [(run.meta(r)["rank"], run.meta(r)["world_size"]) for r in run.ranks] == [(0, 2), (1, 2)]
    _check_norms(run, tmp_path)
    _check_fingerprints(run, tmp_path, "")
    [finding] = run.findings
    assert (finding.kind, finding.ranks, finding.step, finding.parameter) == ("rank_divergence", (0, 1), 3,
                                                                              "module.0.weight")


@PATHS
def test_nonfinite_gradient_on_one_rank_is_found(tmp_path, summaries):
    """The doctor's nonfinite-grad, recorded headless: rank 1's backward at step 2 goes NaN at a sqrt (its
    local gradients, before the all-reduce); after the all-reduce both ranks apply NaN gradients. With
    FORGEVIZ_SUMMARIES=device, as on a GPU: the native hooks keep the device path's summaries, NaN ones too."""
    done = _torchrun(tmp_path, "nan", env={"FORGEVIZ_SUMMARIES": summaries})
    assert done.returncode == 0, done.stderr[-3000:]
    run = forgeviz.open(tmp_path / "run")
    mine = {rank: _torch_norms(tmp_path, rank) for rank in run.ranks}
    assert all(math.isfinite(n) for rank in (0, 1) for n in mine[rank][1].values())  # torch: step 1 finite...
    assert all(math.isnan(n) for rank in (0, 1) for n in mine[rank][2].values())  # ...step 2 NaN on both ranks
    assert all(math.isnan(run.grad_norms(rank, 2)[name]) for rank in (0, 1) for name in mine[rank][2])
    found = [f for f in run.findings if f.step <= 2]
    by_kind = {(f.node is not None, f.step): f for f in found}
    assert set(by_kind) == {(True, 2), (False, 2)}, found  # nothing at step 1
    node = by_kind[(True, 2)]
    assert (node.kind, node.ranks, node.node, node.parameter) == ("nonfinite-grad", (1,), "SqrtBackward0", None)
    assert "gradients it received were finite" in node.message
    param = by_kind[(False, 2)]
    assert (param.kind, param.ranks, param.parameter, param.module) == ("nonfinite-grad", (0, 1), "module.0.weight",
                                                                         "module.0")
    # rank 1's Node rows at step 2 include the NaN ones (the CPU path hands them to Python); at step 1, every
    # Node that received a gradient has its row, finite
    nodes = run.frame().query("kind == 'node' and rank == 1")
    assert nodes[(nodes.step == 2) & (nodes.name == "SqrtBackward0")].norm.notna().all()
    assert nodes[nodes.step == 2].norm.isna().any()
    first = nodes[nodes.step == 1]
    assert {"AddmmBackward0", "GeluBackward0"} <= set(first.name) and first.norm.map(math.isfinite).all()


def test_fsdp2_two_ranks(tmp_path):
    done = _torchrun(tmp_path, "fsdp")
    if done.returncode != 0 and "fully_shard" in done.stderr and not (tmp_path / "torch-rank0.json").exists():
        pytest.skip(f"FSDP2 on CPU gloo did not run under torch {torch.__version__}: {done.stderr[-500:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    run = forgeviz.open(tmp_path / "run")
    _check_norms(run, tmp_path)  # each rank's own shard, as torch's to_local() gives it
    params = run.frame().query("kind == 'parameter'")
    assert params.sharded.all() and run.findings == []  # shards differ by design: never compared


def _open_warned(path: Path, *said: str):
    """forgeviz.open(path), which must warn each of ``said`` (and nothing else)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = forgeviz.open(path)
    told = [str(w.message) for w in caught]
    assert len(told) == len(said) and all(any(s in t for t in told) for s in said), told
    return run


def _wait_for_steps(folder: Path, steps: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 90  # a bound for a stuck child, not a timing assertion
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "did not finish": it is running
                if len(forgeviz.open(folder).steps) >= steps:
                    return
        except (ValueError, FileNotFoundError):  # before its first metadata or segment
            pass
        time.sleep(0.2)
    raise AssertionError(f"the recording never reached {steps} steps; the script said {proc.poll()}")


def _signalled(command: list[str], ready, sent: signal.Signals, stdout=subprocess.DEVNULL) -> int:
    """``command`` run until ``ready(process)`` returns, then sent ``sent``: its exit status."""
    proc = subprocess.Popen(command, env=ENV, stdout=stdout, stderr=subprocess.PIPE, text=True)
    try:
        ready(proc)
        proc.send_signal(sent)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode


def record_then_kill(tmp_path: Path, *options: str) -> Path:
    """``python -m forgeviz record`` of a script that trains forever, SIGKILLed once 3 steps are on disk:
    the run's folder."""
    _signalled([sys.executable, "-m", "forgeviz", "record", "-o", str(tmp_path / "run"), *options,
                "--segment-seconds", "0.1", "--", str(SCRIPT), str(tmp_path), "forever"],
               lambda proc: _wait_for_steps(tmp_path / "run", 3, proc), signal.SIGKILL)
    return tmp_path / "run"


def test_killed_process_opens_to_its_last_segment(tmp_path):
    run = _open_warned(record_then_kill(tmp_path), "rank0: recording did not finish")
    steps = run.steps
    assert steps[:3] == [1, 2, 3] and steps == list(range(1, len(steps) + 1))
    assert set(run.grad_norms(0, 1)) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    # cut the grads stream inside its last segment, as a kill mid-write does: the segments before it open
    grads = tmp_path / "run" / "rank0" / "grads.arrows"
    whole = len(run.frame())
    grads.write_bytes(grads.read_bytes()[:-7])
    cut = _open_warned(tmp_path / "run", "grads.arrows: cut short or corrupted after", "did not finish")
    assert 0 < len(cut.frame()) < whole and any("cut short" in p for p in cut.problems)


def _terminated(command: list[str]) -> int:
    """``command`` (the ``forever`` script, bare or recorded) sent SIGTERM once it said step 5: its exit status."""
    def said_step_5(proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            if line.strip() == "step 5":
                return

    return _signalled(command, said_step_5, signal.SIGTERM, subprocess.PIPE)


def test_a_sigterm_writes_what_was_recorded_then_ends_the_process_as_it_would_have(tmp_path):
    """A scheduler's preemption, torchrun ending the other ranks when one fails: ``python -m forgeviz record`` given
    SIGTERM first writes the steps recorded since its last segment (here every one: segments an hour apart, so
    without it the file would hold none), naming the signal and the last step in the metadata; then the process
    ends by the signal, with the exit status the script alone has."""
    plain = _terminated([sys.executable, str(SCRIPT), str(tmp_path), "forever"])
    recorded = _terminated([sys.executable, "-m", "forgeviz", "record", "-o", str(tmp_path / "run"),
                            "--segment-seconds", "3600", "--", str(SCRIPT), str(tmp_path), "forever"])
    assert plain == recorded == -signal.SIGTERM
    run = _open_warned(tmp_path / "run", "rank0: the script was ended by SIGTERM after step")
    meta = run.meta(0)
    last = meta["steps"]
    assert meta["terminated"] == f"SIGTERM after step {last}" and last >= 5 and meta["finished"], meta
    # every step up to the last whole one, with the gradients step() applied; and of the step under way when the
    # signal came, what it had recorded: its backward's Nodes, and what step() was applying if it had begun
    assert run.steps in (list(range(1, last + 1)), list(range(1, last + 2))) and run.gradient_steps(0) == run.steps
    applied = sorted(run.frame().query("kind == 'parameter'")["step"].unique())
    assert applied in (list(range(1, last + 1)), list(range(1, last + 2)))
    assert set(run.grad_norms(0, last)) == {"0.weight", "0.bias", "2.weight", "2.bias"}


def test_a_rank_that_fails_leaves_every_rank_s_steps_until_then(tmp_path):
    """Rank 1 raises at step 3; torchrun then ends rank 0 (SIGTERM), unless gloo's closed connection reached it
    first. Either way, with segments an hour apart (nothing on disk before the end), each rank's file holds its
    steps 1 and 2 with the gradients step() applied, and says how its recording ended."""
    done = _torchrun(tmp_path, "crash", "--segment-seconds", "3600")
    assert done.returncode != 0 and "rank 1 fails at step 3" in done.stderr, done.stderr[-2000:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (rank 0 may say it was ended by SIGTERM: said below)
        run = forgeviz.open(tmp_path / "run")
    assert run.ranks == [0, 1] and run.steps[:2] == [1, 2], run.steps
    for rank in run.ranks:
        meta = run.meta(rank)
        assert meta["finished"] and meta["steps"] == 2, meta
        assert meta.get("terminated") in (None, "SIGTERM after step 2"), meta
        assert set(run.grad_norms(rank, 2)) == {"module.0.weight", "module.0.bias", "module.2.weight",
                                                "module.2.bias"}


def test_a_sigterm_that_comes_inside_forgeviz_is_taken_from_the_script_s_code(tmp_path):
    """Where the signal found the main thread decides whether the recording is written at once: in the script's
    code (or torch's) yes; in forgeviz's own (a hook mid-step, the writer's fault report) it is taken again a few ms
    later, so that nothing is written half-updated."""
    from forgeviz.api import _in_forgeviz
    from forgeviz.run.writer import RunWriter

    seen = []
    writer = RunWriter(tmp_path / "rank0", {"rank": 0}, lambda said: seen.append(_in_forgeviz(sys._getframe())))
    writer._fail("writing", OSError("no disk"))  # (forgeviz's code calls the function: it stands above it)
    writer.close({})
    assert seen == [True] and not _in_forgeviz(sys._getframe())


def test_a_run_that_lost_segments_or_stopped_writing_says_so(tmp_path):
    """What the writer counted as dropped (rows held back past their bound, a segment's rows that failed to build)
    and why it stopped writing are in the rank's metadata: ``forgeviz.open`` tells them with the rest (its problems,
    and a warning), and shows what was written; rows given up are named by their steps."""
    import json

    _train(folder=tmp_path / "run")
    meta_path = tmp_path / "run" / "rank0" / "meta.json"
    meta = json.loads(meta_path.read_text())
    assert meta["dropped_segments"] == 0 and forgeviz.open(tmp_path / "run").problems == []
    stopped = "writing the grads stream in /x failed: OSError: [Errno 28] No space left on device; recording stopped"
    meta_path.write_text(json.dumps({**meta, "dropped_segments": 2, "faults": [stopped]}))
    run = _open_warned(tmp_path / "run", "rank0: 2 segment(s) were dropped while recording", "No space left")
    assert run.problems == ["rank0: 2 segment(s) were dropped while recording (the writer fell behind the training "
                            "loop); those rows are missing", f"rank0: {stopped}"]
    assert run.steps == [1, 2, 3]
    dropped = [[2, 2, "grads"], [1, 3, "steps"]]
    meta_path.write_text(json.dumps({**meta, "dropped_segments": 2, "dropped_steps": dropped}))
    run = _open_warned(tmp_path / "run", "rank0: 2 segment(s) were dropped while recording")
    assert run.problems == ["rank0: 2 segment(s) were dropped while recording (the writer fell behind the training "
                            "loop: grads rows of steps 2, steps rows of steps 1…3); those rows are missing"]


def _train(steps: int = 3, folder=None, caplog=None) -> list[torch.Tensor]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)

    def loop():
        for k in range(steps):
            opt.zero_grad()
            net(torch.full((2, 3), float(k + 1))).square().sum().backward()
            opt.step()

    if folder is None:
        loop()
    else:
        with forgeviz.record(folder):
            loop()
    return [p.detach().clone() for p in net.parameters()]


def test_in_code_record_and_bad_input(tmp_path, caplog):
    plain = _train()
    recorded = _train(folder=tmp_path / "run")
    assert all(torch.equal(a, b) for a, b in zip(plain, recorded, strict=True))  # recording changes nothing
    run = forgeviz.open(tmp_path / "run")
    assert run.steps == [1, 2, 3] and run.problems == []
    with pytest.raises(KeyError, match="no step 9 recorded; recorded steps: 1, 2, 3"):
        run.grad_norms(0, 9)
    with pytest.raises(KeyError, match=r"Run.graph\(\): no step 9 recorded; recorded steps: 1, 2, 3"):
        run.graph(9)
    with pytest.raises(TypeError, match=r"forgeviz.open\(\) expects a run's folder as a str or path, got int: 42"):
        forgeviz.open(42)
    # a missing rank: the metadata says two
    meta = tmp_path / "run" / "rank0" / "meta.json"
    said = json.loads(meta.read_text())
    meta.write_text(json.dumps({**said, "world_size": 2}))
    assert _open_warned(tmp_path / "run", "rank(s) 1 of 2 missing").ranks == [0]
    # a rank from a newer forgeviz is left out, by name; with no other rank, nothing can be shown
    shutil.copytree(tmp_path / "run" / "rank0", tmp_path / "run" / "rank1")
    (tmp_path / "run" / "rank1" / "meta.json").write_text(json.dumps({**said, "rank": 1, "world_size": 2,
                                                                      "format_version": FORMAT_VERSION + 1}))
    assert _open_warned(tmp_path / "run", "rank1: written by a newer forgeviz",
                        "rank(s) 1 of 2 missing or unreadable").ranks == [0]
    with pytest.raises(ValueError, match="written by a newer forgeviz"):
        forgeviz.open(tmp_path / "run" / "rank1")
    with pytest.raises(FileNotFoundError, match="expected the folder of a recorded run"):
        forgeviz.open(tmp_path / "nowhere")
    expected = r"grads=\.\.\.\) expects 'each', 'off', 'within P%' \(0 < P < 100\) or a positive int N"
    for wrong in ("sometimes", "shown", -2, True, 2.5):  # ("shown": a view's Nodes, which a script draws none of)
        with pytest.raises(ValueError, match=expected):
            with forgeviz.record(tmp_path / "x", grads=wrong):
                pass
    # an unwritable folder (under a file): a warning, and training goes on with the same result
    (tmp_path / "file").write_text("")
    with caplog.at_level(logging.WARNING, logger="forgeviz"):
        unwritten = _train(folder=tmp_path / "file" / "run")
    assert all(torch.equal(a, b) for a, b in zip(plain, unwritten, strict=True))
    assert any("recording stopped, training goes on" in r.getMessage() for r in caplog.records), caplog.text


def test_the_command_line_refuses_bad_input_before_a_run_is_made(tmp_path, capsys):
    """``python -m forgeviz record`` with a wrong option or a missing script: argparse's error (status 2), naming
    the option, what it expects and what was given; no traceback, and no run folder left behind."""
    script = tmp_path / "train.py"
    script.write_text("")
    cases = [(["--grads", "every-3", "--", str(script)], "argument --grads expects 'each', 'off', 'within P%'",
              "got 'every-3'"),
             (["--grads", "shown", "--", str(script)], "argument --grads expects", "got 'shown'"),
             (["--budget-mb", "0", "--", str(script)], "argument --budget-mb expects a positive number of megabytes",
              "got 0.0"),
             (["--segment-seconds", "-1", "--", str(script)], "argument --segment-seconds expects a number of "
              "seconds, 0 or more", "got -1.0"),
             (["--", str(tmp_path / "nosuch.py")], "expected a script to run", "nosuch.py': no such file"),
             (["-m", "no_such_module_anywhere"], "expected a module to run (-m)", "'no_such_module_anywhere'")]
    for options, expected, given in cases:
        with pytest.raises(SystemExit) as ended:
            cli_main(["record", "-o", str(tmp_path / "run"), *options])
        said = capsys.readouterr().err
        assert ended.value.code == 2 and expected in said and given in said and "Traceback" not in said, said
        assert not (tmp_path / "run").exists()


def test_a_recording_within_a_share_keeps_the_steps_whose_backward_was_summarised(tmp_path):
    plain = _train(6)
    torch.manual_seed(0)  # (_train's model, steps and data)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    applied = []  # each step's .grad, as the optimizer applies it
    with forgeviz.record(tmp_path / "run", grads="within 50%") as session:
        budget = session.recorder.budget
        for k in range(6):
            opt.zero_grad()
            net(torch.full((2, 3), float(k + 1))).square().sum().backward()
            applied.append({name: p.grad.norm().item() for name, p in net.named_parameters()})
            opt.step()
        summarised = budget.summarised
    assert all(torch.equal(a, b) for a, b in zip(plain, [p.detach() for p in net.parameters()], strict=True))
    run = forgeviz.open(tmp_path / "run")
    assert run.steps == [1, 2, 3, 4, 5, 6] and run.problems == []
    assert json.loads((tmp_path / "run" / "rank0" / "meta.json").read_text())["grads"] == "within 50%"
    kept = run.gradient_steps(0)
    # the block's first backward is summarised and its second never (it measures the loop's pace); a step's
    # parameter gradients are recorded where its backward's were, as the optimizer applied them
    assert kept[0] == 1 and 2 not in kept and len(kept) == summarised
    for step in kept:
        assert run.grad_norms(0, step) == pytest.approx(applied[step - 1], rel=1e-6)
        assert {r["kind"] for r in run.rows_at(0, step)} == {"parameter", "module", "node"}
    assert run.grad_norms(0, 2) == {}
    assert "fit within 50% of the loop's time (grads=)" in run.why_no_step(0, 2)
    with pytest.raises(ValueError, match=r"expects 'each', 'off', 'within P%' \(0 < P < 100\) or a positive int"):
        with forgeviz.record(tmp_path / "x", grads="within 100%"):
            pass


def test_a_step_that_calls_super_step_counts_once(tmp_path):
    """An optimizer subclass whose step() calls super().step(): once the parent's step is patched (any
    instance of it made earlier), torch runs the global step hooks twice per step; the run still has one
    step per step, and one applied gradient per parameter per step, equal to torch's."""

    class ScaledSGD(torch.optim.SGD):
        def step(self, closure=None):
            return super().step(closure)

    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    torch.optim.SGD(net.parameters(), lr=0.1)  # patches SGD.step for every later instance
    opt = ScaledSGD(net.parameters(), lr=0.1)
    seen = []
    with forgeviz.record(tmp_path / "run"):
        for k in range(3):
            opt.zero_grad()
            net(torch.full((2, 3), float(k + 1))).square().sum().backward()
            seen.append({name: p.grad.double().norm().item() for name, p in net.named_parameters()})
            opt.step()
    run = forgeviz.open(tmp_path / "run")
    assert run.steps == [1, 2, 3]
    for step, norms in zip(run.steps, seen, strict=True):
        got = run.grad_norms(0, step)
        assert len(got) == 2 and sorted(got.values()) == pytest.approx(sorted(norms.values()), rel=1e-12)


@pytest.mark.parametrize("hooks", ["native", "python"])
def test_node_rows_wait_for_a_read_back_that_lags(tmp_path, monkeypatch, hooks):
    """On a GPU a pass's summaries arrive when its copy's event says so, a step or more later: a segment
    written before that waits for them (once, after the optimizer step), so every Node has its row, and the
    backward that went NaN (step 2) gets its finding. Here the device path runs on the CPU
    (FORGEVIZ_SUMMARIES=device) with its read-back held back until wait(). The store forgets dead Nodes at every
    pass here (every 256 deaths otherwise, so whether step 2's Nodes were forgotten before their numbers came
    hung on what ran before): a pass whose numbers are still to come keeps its Nodes."""
    from forgeviz._capture import native
    from forgeviz._capture.device_summary import DeviceSummaries
    from forgeviz._capture.session import get_session

    monkeypatch.setattr(get_session().store, "prune_every", 1)

    monkeypatch.setenv("FORGEVIZ_SUMMARIES", "device")
    if hooks == "python":  # as without the native library
        monkeypatch.setattr(native, "hooks", lambda: None)
    poll = DeviceSummaries.poll
    monkeypatch.setattr(DeviceSummaries, "poll", lambda self: not self._reading)  # the copy never done...
    monkeypatch.setattr(DeviceSummaries, "wait", lambda self: poll(self))  # ...until waited for
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    outputs = []  # torch's gradient of the loss's input Node, per step: the loss's own grad_fn receives 1
    with forgeviz.record(tmp_path / "run"):
        for k in range(3):
            opt.zero_grad()
            y = net(torch.full((2, 4), float(k + 1)))
            y.register_hook(lambda g: outputs.append(g.double().norm().item()))
            loss = y.square().sum()
            if k == 1:
                loss = loss + (y[:, :1] * 0).sqrt().sum()  # adds 0; its backward: sqrt'(0) = inf, times 0: NaN
            loss.backward()
            if k == 1:
                opt.zero_grad()  # (a step that applies nothing: the weights stay finite)
            opt.step()
    run = forgeviz.open(tmp_path / "run")
    nodes = run.frame().query("kind == 'node'")
    assert sorted(set(nodes.step)) == [1, 2, 3] and nodes[nodes.step != 2].norm.notna().all()
    for step, want in enumerate(outputs, 1):  # what reached the last Linear's AddmmBackward0
        if step != 2:
            got = nodes[(nodes.step == step) & (nodes.name == "AddmmBackward0")].norm
            assert any(g == pytest.approx(want, rel=1e-12) for g in got), (step, list(got), want)
    [finding] = [f for f in run.findings if f.node is not None]
    assert (finding.kind, finding.step, finding.node) == ("nonfinite-grad", 2, "SqrtBackward0"), run.findings


def test_applied_gradients_on_the_device_path_read_nothing_back(tmp_path, monkeypatch):
    """On a GPU the step pre-hook summarises and fingerprints each .grad on its device: no host read (which would
    wait for the GPU), no op on the gradient's bytes beyond its reductions. Here the device path runs on the CPU
    (FORGEVIZ_SUMMARIES=device), as rank 0 of two (fingerprints are made only to compare ranks), and every aten op
    the hook issues is counted; the rows' numbers are torch's."""
    from op_count import HOST_READS, _Count

    from forgeviz._capture.recording import Recorder, fold_bit_sum

    monkeypatch.setenv("FORGEVIZ_SUMMARIES", "device")
    monkeypatch.setenv("WORLD_SIZE", "2")
    issued = []
    read = Recorder._read_on_device

    def counted(self, plan, leaf_pass):
        with _Count() as counter:
            read(self, plan, leaf_pass)
        issued.append(counter.ops)

    monkeypatch.setattr(Recorder, "_read_on_device", counted)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    applied = []
    with forgeviz.record(tmp_path / "run"):
        for k in range(3):
            opt.zero_grad()
            net(torch.full((2, 4), float(k + 1))).square().sum().backward()
            applied.append({n: p.grad.clone() for n, p in net.named_parameters()})
            opt.step()
    assert len(issued) == 3 and not any(ops[name] for ops in issued for name in HOST_READS), issued
    assert all(ops["aten::sum"] == 4 for ops in issued), issued  # a fingerprint per gradient
    with pytest.warns(UserWarning, match="missing"):
        run = forgeviz.open(tmp_path / "run")
    params = run.frame().query("kind == 'parameter'")
    assert len(params) == 3 * 4
    for row in params.itertuples():
        grad = applied[row.step - 1][row.name]
        assert row.norm == pytest.approx(grad.double().norm().item(), rel=1e-12)
        assert (row.min, row.max, row.mean) == pytest.approx((grad.min().item(), grad.max().item(),
                                                              grad.double().mean().item()), rel=1e-12)
        assert row.fingerprint == fold_bit_sum(grad.view(torch.int32).sum(dtype=torch.int64).item())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA-only: a GPU's recording reads nothing back")
@pytest.mark.parametrize("world", [2, 1], ids=["ranks", "one rank"])
def test_recording_on_cuda_reads_nothing_back(tmp_path, monkeypatch, world):
    """A recorded training loop on a GPU (as rank 0 of two, so its fingerprints are made too; or as the one rank,
    whose steps take the backward's device summaries of each .grad and launch none) runs under
    torch.cuda.set_sync_debug_mode("error"): no host read in capture's hooks nor in the recorder's; the applied
    gradients' rows, made once a segment waited for the read-back, are torch's."""
    from forgeviz._capture.recording import Recorder, fold_bit_sum

    if world == 2:
        monkeypatch.setenv("WORLD_SIZE", "2")
    recorders = []
    install = Recorder.install
    monkeypatch.setattr(Recorder, "install", lambda self: (recorders.append(self), install(self))[1])
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10)).cuda()
    opt = torch.optim.AdamW(net.parameters())
    x = torch.randn(32, 64, device="cuda")
    applied = []

    def step():
        opt.zero_grad()
        net(x).square().mean().backward()
        applied.append({n: p.grad.clone() for n, p in net.named_parameters()})
        opt.step()

    with forgeviz.record(tmp_path / "run"):
        step()  # the first: buffers, pinned memory, the allocator history
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(3):
                step()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    if world == 2:  # (rank 1's folder is missing)
        with pytest.warns(UserWarning, match="missing"):
            run = forgeviz.open(tmp_path / "run")
    else:
        run = forgeviz.open(tmp_path / "run")
    params = run.frame().query("kind == 'parameter'")
    assert sorted(set(params.step)) == [1, 2, 3, 4] and len(params) == 4 * 4
    [recorder] = recorders
    assert recorder.reused == (4 if world == 1 else 0) and (recorder._device_params is None) == (world == 1)
    for row in params.itertuples():
        grad = applied[row.step - 1][row.name]
        assert row.norm == pytest.approx(grad.double().norm().item(), rel=1e-6), (row.step, row.name)
        assert (row.min, row.max) == (grad.min().item(), grad.max().item())
        if world == 2:
            assert row.fingerprint == fold_bit_sum(grad.view(torch.int32).sum(dtype=torch.int64).item())
    assert params["fingerprint"].isna().all() == (world == 1)  # (one rank: nothing to compare)


def test_the_command_says_when_the_native_helpers_are_not_built(tmp_path):
    """A fresh machine's `python -m forgeviz record`: the native libraries are not built (an empty cache), so
    the run takes the Python paths. The command says so once, with the command that builds them, and
    records the same steps; with them built (the test environment's cache) it says nothing."""
    script = tmp_path / "train.py"
    script.write_text("import torch\nnet = torch.nn.Linear(3, 1)\nopt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
                      "for _ in range(2):\n    opt.zero_grad(); net(torch.ones(2, 3)).sum().backward(); opt.step()\n")
    said = {}
    for cache in ("empty", "built"):
        env = {**ENV, "FORGEVIZ_CACHE": str(tmp_path / "cache")} if cache == "empty" else ENV
        done = subprocess.run([sys.executable, "-m", "forgeviz", "record", "-o", str(tmp_path / cache), "--",
                               str(script)], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        said[cache] = done.stderr
        assert forgeviz.open(tmp_path / cache).steps == [1, 2]
    assert said["empty"].count("python -m forgeviz._capture.native") == 1, said["empty"]
    assert "memory tracker, gradient hooks, gradient reader are not built" in said["empty"]
    assert "not built" not in said["built"], said["built"]
