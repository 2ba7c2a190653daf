"""The cadence of gradient summaries (``%fv grads``, ``forgeviz.capture(grads=...)``), through real cells,
with torch's own gradients as the oracle."""

from __future__ import annotations

import random
import statistics

import pytest
import torch
from IPython.core.error import UsageError
from test_graph import request

import forgeviz
from forgeviz._capture.cadence import CREDIT_SECONDS, EARLY, REMEASURE_EVERY, WINDOW, SummaryBudget
from forgeviz._capture.grads import EACH, iter_graph, node_id
from forgeviz._capture.session import get_session

from scenarios import by_label

TRAIN = """
torch.manual_seed(0)
fc1, fc2 = torch.nn.Linear(4, 3), torch.nn.Linear(3, 1)
x = torch.randn(5, 4)
steps = []  # per step: (the ReLU's output h, its grad_fn, torch's dL/dh, fc1.weight's .grad)
for _ in range(7):
    h = torch.relu(fc1(x))
    loss = fc2(h).square().mean()
    seen = []
    h.register_hook(lambda g: seen.append(g.clone()))
    fc1.zero_grad()
    loss.backward()
    steps.append((h, h.grad_fn, seen[0], fc1.weight.grad.clone()))
"""


@pytest.fixture
def cadence():
    """The session's cadence, put back to the default after the test."""
    recorder = get_session().recorder
    yield recorder
    recorder.cadence = EACH


def test_every_3_records_backward_1_4_7_with_torchs_figures(nb, cadence):
    first = get_session().store.passes
    nb.ok("%fv grads every 3")
    nb.ok(TRAIN)
    store = get_session().store
    assert store.passes == first + 7
    steps = nb["steps"]
    recorded = [k for k, (_, node, _, _) in enumerate(steps, 1) if store.get(node_id(node)) is not None]
    assert recorded == [1, 4, 7]
    for k, (h, node, dh, weight_grad) in enumerate(steps, 1):
        grads = store.get(node_id(node))
        if k not in (1, 4, 7):
            assert grads is None  # no hook ran on a skipped pass: nothing recorded
            continue
        (record,) = grads.records
        assert record.backward_index == first + k
        arriving = record.grad_outputs[0]
        assert arriving.values == dh.flatten().tolist()  # 15 elements: exact values
        assert arriving.norm == pytest.approx(dh.norm().item(), rel=1e-6)
        assert (arriving.min, arriving.max) == (dh.min().item(), dh.max().item())
        assert arriving.mean == pytest.approx(dh.mean().item(), rel=1e-5, abs=1e-9)
    # fc1.weight's AccumulateGrad is one Node, reached from each step's graph: passes 1, 4 and 7 again
    accumulate = next(n for n in iter_graph([steps[0][1]])
                      if type(n).__name__ == "AccumulateGrad" and n.variable is nb["fc1"].weight)
    records = store.get(node_id(accumulate)).records
    assert [r.backward_index - first for r in records] == [1, 4, 7]
    for record, k in zip(records, (1, 4, 7)):
        assert record.grad_outputs[0].values == steps[k - 1][3].flatten().tolist()


def test_shown_records_only_the_nodes_of_a_drawn_graph(nb, cadence):
    nb.ok("%fv grads shown")
    nb.ok("u = torch.tensor([1., 2.], requires_grad=True)\nalone = (u * 5).sum()\nalone.backward()")
    store = get_session().store
    assert store.get(node_id(nb["alone"].grad_fn)) is None  # no view: nothing records
    nb.ok("x = torch.tensor([2.], requires_grad=True)\ny = torch.tensor([3.], requires_grad=True)\n"
          "z = x * y\nw = z + x\nloss = w ** 2\ng = forgeviz.graph(loss)\n"
          "other = (u * 7).sum()")
    nb.ok("loss.backward(retain_graph=True)\nother.backward()")
    graph = nb["g"].model
    mul = store.get(by_label(graph, "z").id).records[-1]
    assert mul.grad_outputs[0].values == [16.0]  # dloss/dz = 2w = 16
    assert [g.values for g in mul.grad_inputs] == [[48.0], [32.0]]
    assert store.get(by_label(graph, "x").id).records[-1].grad_outputs[0].values == nb["x"].grad.tolist() == [64.0]
    # the graph nobody draws: neither its op nor its leaf recorded anything
    assert store.get(node_id(nb["other"].grad_fn)) is None
    assert store.get(node_id(nb["other"].grad_fn.next_functions[0][0].next_functions[0][0])) is None
    assert nb["u"].grad.tolist() == [12.0, 12.0]  # the user's result is torch's all the same


def test_off_records_nothing_and_the_inspector_says_so(nb, cadence):
    nb.ok("x = torch.tensor([2.], requires_grad=True)\nloss = (x * 3) ** 2\ng = forgeviz.graph(loss)")
    nb.ok("loss.backward(retain_graph=True)")  # each (the default): recorded
    store = get_session().store
    graph = nb["g"].model
    loss_id = by_label(graph, "loss").id
    recorded = store.passes
    nb.ok("%fv grads off")
    nb.ok("loss.backward(retain_graph=True)\nloss.backward()")
    assert [r.backward_index for r in store.get(loss_id).records] == [recorded]
    assert store.passes == recorded + 2  # the skipped passes are counted: "2 steps ago"
    assert nb["x"].grad.tolist() == [108.0]  # 3 × 36: torch's result stands
    detail = request(nb["g"], {"type": "inspect", "request_id": 1, "node": loss_id})["detail"]
    assert detail["grads"][-1]["backward_index"] == recorded
    assert detail["backward_passes"] == recorded + 2
    assert detail["grad_cadence"] == "off"
    nb.ok("%fv grads every 10")
    detail = request(nb["g"], {"type": "inspect", "request_id": 2, "node": loss_id})["detail"]
    assert detail["grad_cadence"] == "every 10"


@pytest.mark.parametrize("bad", ["every 0", "every", "sometimes", "every -2", "every 2.5", "each 3", "within 5",
                                 "within 0%", "within 100%", "within -5%", "within five%", "within nan%", "within"])
def test_a_bad_magic_says_what_it_expected_and_changes_nothing(nb, cadence, bad):
    nb.ok("%fv grads every 5")
    with pytest.raises(UsageError) as info:
        nb.shell.run_line_magic("fv", f"grads {bad}")
    assert str(info.value).startswith(f"%fv grads: expected each, every N (N ≥ 1), within P% (0 < P < 100), shown or "
                                      f"off; got '{bad}'")
    assert cadence.cadence == 5


def test_the_magic_alone_says_the_setting(nb, cadence, capsys):
    nb.ok("%fv grads every 10")
    capsys.readouterr()
    nb.ok("%fv grads")
    assert "gradient summaries: every 10 (the next backward pass, then every 10th)" in capsys.readouterr().out
    nb.ok("%fv grads every 1")  # every pass: the same as each
    assert cadence.cadence == "each"


@pytest.mark.parametrize("bad", [0, -3, True, 2.5, "every 0", "often", "Each", "within 150%", 0.05])
def test_a_bad_keyword_raises_before_capturing(cadence, bad):
    cadence.cadence = "shown"
    session = get_session()
    expected = r"expected each, every N \(N ≥ 1\), within P% \(0 < P < 100\), shown or off; got "
    with pytest.raises(ValueError, match=expected):
        with forgeviz.capture(grads=bad):
            pass
    assert cadence.cadence == "shown" and not session.capturing


def test_the_keyword_sets_the_cadence_inside_its_block(cadence):
    x = torch.tensor([1., 2.], requires_grad=True)
    store = get_session().store
    with forgeviz.capture(grads=2):
        assert cadence.cadence == 2
        first = store.passes
        nodes = []
        for _ in range(4):
            loss = (x * 3).sum()
            nodes.append(loss.grad_fn)
            loss.backward()
    assert cadence.cadence == EACH  # as it was before the block
    # counted from the setting: its first pass records, then every second one
    assert [store.get(node_id(n)) is not None for n in nodes] == [True, False, True, False]
    assert store.passes == first + 4


def test_unload_ext_puts_the_default_cadence_back(nb):
    nb.ok("%fv grads every 5")
    assert get_session().recorder.cadence == 5
    nb.ok("%unload_ext forgeviz")
    nb.ok("%load_ext forgeviz")
    assert get_session().recorder.cadence == EACH  # a later %load_ext starts from the defaults
    nb.ok("x = torch.tensor([2.], requires_grad=True)\nloss = (x * 3) ** 2\nloss.backward()")
    record = get_session().store.get(node_id(nb["loss"].grad_fn)).records[-1]
    assert record.grad_outputs[0].values == [1.0] and nb["x"].grad.tolist() == [36.0]


class StepClock:
    """A budget's clock for a loop whose steps take 16 ms (2**-6 s), and 8 ms more when their backward pass was
    summarised: the budget reads it as each pass begins (a step's end)."""

    def __init__(self, budget) -> None:
        self.budget, self.at, self.reads = budget, 0.0, 0

    def __call__(self) -> float:
        if self.reads:
            self.at += 2**-6 + (2**-7 if self.budget.summarising else 0.0)
        self.reads += 1
        return self.at


WITHIN_TRAIN = TRAIN.replace("range(7)", "range(10)")


def test_within_summarises_a_cell_s_first_pass_then_what_fits_with_torchs_figures(nb, cadence, capsys):
    nb.ok("%fv grads within 25%")
    assert cadence.cadence == forgeviz._capture.cadence.Within(0.25)
    clock = nb.shell.user_ns["clock"] = StepClock(cadence.budget)
    cadence.budget.clock = clock
    first = get_session().store.passes
    nb.ok(WITHIN_TRAIN)
    store = get_session().store
    assert store.passes == first + 10
    recorded = [store.get(node_id(node)) is not None for _, node, _, _ in nb["steps"]]
    # the cell's first pass; its second's and third's steps measure the loop's pace (16 ms); then, on the credit
    # those two earned, four summaries in a row, then two (16 ms) in every three steps (64 ms): 25% of the loop's time
    assert recorded == [True, False, False, True, True, True, True, False, True, True]
    assert (cadence.budget.pace, cadence.budget.cost) == (2**-6, 2**-7)
    for k, (_, node, dh, _) in enumerate(nb["steps"], 1):
        grads = store.get(node_id(node))
        if grads is None:
            continue
        (record,) = grads.records
        assert record.backward_index == first + k
        arriving = record.grad_outputs[0]
        assert arriving.values == dh.flatten().tolist()
        assert arriving.norm == pytest.approx(dh.norm().item(), rel=1e-6)
        assert (arriving.min, arriving.max) == (dh.min().item(), dh.max().item())
    accumulate = next(n for n in iter_graph([nb["steps"][0][1]])
                      if type(n).__name__ == "AccumulateGrad" and n.variable is nb["fc1"].weight)
    records = store.get(node_id(accumulate)).records
    assert [r.backward_index - first for r in records][-3:] == [7, 9, 10]
    for record in records[-3:]:
        assert record.grad_outputs[0].values == nb["steps"][record.backward_index - first - 1][3].flatten().tolist()
    # a new cell: its first pass is summarised again, and its second and third measure again
    nb.ok(WITHIN_TRAIN.replace("range(10)", "range(3)"))
    assert [store.get(node_id(node)) is not None for _, node, _, _ in nb["steps"]] == [True, False, False]
    nb.ok("g = forgeviz.graph(loss)")
    loss_id = by_label(nb["g"].model, "loss").id
    detail = request(nb["g"], {"type": "inspect", "request_id": 1, "node": loss_id})["detail"]
    assert detail["grad_cadence"] == "within 25%"
    assert detail["backward_passes"] == first + 13
    assert detail["grads"] == []  # the cell's last pass went unsummarised: the view says why
    capsys.readouterr()
    nb.ok("%fv grads")
    said = capsys.readouterr().out
    assert "gradient summaries: within 25% (a cell's first backward pass, then as many as fit in 25% of" in said
    assert "the last cell that ran backward passes summarised 1 of 3" in said


def test_within_on_the_real_clock_summarises_the_block_s_first_pass_and_measures_on_its_second(cadence):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    x = torch.randn(16, 64)
    store = get_session().store
    nodes, grads = [], []
    with forgeviz.capture(grads="within 1%"):
        assert cadence.cadence == forgeviz._capture.cadence.Within(0.01)
        budget = cadence.budget
        for _ in range(6):
            loss = model(x).square().mean()
            nodes.append(loss.grad_fn)
            model.zero_grad()
            loss.backward()
            grads.append(model[0].weight.grad.clone())
    recorded = [store.get(node_id(n)) is not None for n in nodes]
    assert recorded[:2] == [True, False]
    assert budget.pace is not None and budget.pace > 0
    assert budget.summarised == sum(recorded) and budget.skipped == 6 - sum(recorded)
    assert cadence.cadence == EACH and cadence.budget is None  # as it was before the block
    first = store.get(node_id(nodes[0])).records[-1].grad_outputs[0]
    assert first.values == [1.0]  # dloss/dloss
    torch.testing.assert_close(grads[-1], model[0].weight.grad)  # torch's result stands


def _budget_run(budget, now: list, costs: list) -> list:
    """Each step's pass begun on ``budget`` and whether it was summarised; ``costs``: per step, (its seconds,
    seconds more when summarised)."""
    summarised = []
    for step, more in costs:
        summarised.append(budget.begins())
        now[0] += step + (more if summarised[-1] else 0.0)
    return summarised


def test_a_budget_measures_the_pace_again_after_8_passes_early_then_after_64():
    now = [0.0]
    budget = SummaryBudget(0.5, clock=lambda: now[0])
    summarised = _budget_run(budget, now, [(2**-6, 2**-10)] * 260)  # summaries cost 6%: room for all
    # two unsummarised (a step after a summarised pass, then one at the loop's pace) after every EARLY summarised
    # until WINDOW steps at the pace were measured, then after every REMEASURE_EVERY
    early = [k for first in range(1, 1 + (EARLY + 2) * WINDOW, EARLY + 2) for k in (first, first + 1)]
    later = early[-1] + REMEASURE_EVERY + 1
    assert [k for k, s in enumerate(summarised) if not s] == early + [later, later + 1]
    assert (budget.pace, budget.cost) == (2**-6, 2**-10)
    assert (budget.summarised, budget.skipped) == (260 - 2 * WINDOW - 2, 2 * WINDOW + 2)


def _longest_run(summarised: list) -> int:
    longest = run = 0
    for s in summarised:
        run = run + 1 if s else 0
        longest = max(longest, run)
    return longest


def test_a_pause_or_a_slow_step_in_a_loop_sets_off_no_burst_of_summaries():
    def run(pause: float) -> list:
        now = [0.0]
        budget = SummaryBudget(0.25, clock=lambda: now[0])
        first = _budget_run(budget, now, [(2**-6, 2**-6)] * 10)  # summaries double a step: one pass in three
        now[0] += pause  # (a validation loop, a plot; a slow step) after the tenth step
        return first + _budget_run(budget, now, [(2**-6, 2**-6)] * 20)

    steady = run(0.0)
    assert steady[:4] == [True, False, False, True] and _longest_run(steady) == 1
    assert sum(steady[10:]) == 7  # (the step after one summarised is twice as long: 1 in 3 of the loop's time)
    for pause in (10.0, 2**-5):  # ten seconds (a pause: neither earned nor charged); a step three times as long
        after = run(pause)
        # (the slow step earned a quarter of its time: one more summary, at most two in a row)
        assert _longest_run(after) <= 2 and abs(sum(after[10:]) - sum(steady[10:])) <= 1, (pause, after)


def test_credit_saved_while_summaries_were_cheap_is_capped():
    now = [0.0]
    budget = SummaryBudget(0.5, clock=lambda: now[0])
    _budget_run(budget, now, [(2**-6, 2**-10)] * 300)  # summaries cost 6% at a 50% budget: credit piles up
    assert budget.credit == pytest.approx(0.5 * CREDIT_SECONDS, abs=0.02)
    # then they cost three steps each (a summarised step of 64 ms earns 32 and spends 48): the 1 s saved pays for
    # 64 of them, and then one pass in three; uncapped, the 2.2 s saved would summarise almost all 120
    burst = _budget_run(budget, now, [(2**-6, 3 * 2**-6)] * 120)
    assert 75 <= sum(burst) <= 90, sum(burst)


def test_a_budget_charges_a_summary_what_it_slows_the_step_after_it_too():
    now = [0.0]
    budget = SummaryBudget(0.1, clock=lambda: now[0])
    extra = total = 0.0
    before = False  # whether the pass before was summarised
    for _ in range(400):
        summarised = budget.begins()
        # a 16 ms step; a summarised pass adds 8 ms to its own, and 4 ms to the next step's if that one is not
        added = 2**-7 if summarised else 2**-8 if before else 0.0
        now[0] += 2**-6 + added
        extra, total, before = extra + added, total + 2**-6 + added, summarised
    assert (budget.pace, budget.cost) == (2**-6, 2**-7 + 2**-8)
    assert 0.085 <= extra / total <= 0.105  # the summaries' share of the loop's time: within 10%


@pytest.mark.parametrize("share", [0.02, 0.05, 0.1])
def test_a_budget_keeps_to_its_share_on_a_noisy_machine_whose_speed_drifts(share):
    """Steps of 1.3 ms with 15% noise each (a lognormal factor), on a machine 30% faster or slower from one spell
    of 300 steps to the next (a VM's neighbours); a summary adds 0.2 ms to its step and 0.04 ms to the next one.
    Compared across spells, medians of steps minutes apart read summaries as free (realised: 9.4% of the loop's
    time at within 5%, 3.4% at within 2%); pairs of steps in a row do not, and a pace measured again every 8 or 64
    passes keeps a loop that summarises every other pass measured."""
    realised = []
    for seed in range(12):
        rnd = random.Random(seed)
        now = [0.0]
        budget = SummaryBudget(share, clock=lambda: now[0])
        spent = total = 0.0
        before, speed = False, 1.0
        for step in range(4000):
            if step % 300 == 0:
                speed = 1.0 + rnd.uniform(-0.3, 0.3)
            summarised = budget.begins()
            added = (2e-4 if summarised else 4e-5 if before else 0.0) * speed
            took = 1.3e-3 * speed * rnd.lognormvariate(0.0, 0.15) + added
            now[0] += took
            spent, total, before = spent + added, total + took, summarised
        realised.append(spent / total)
    assert share * 0.5 <= statistics.mean(realised) <= share * 1.15, realised
    assert max(realised) <= share * 1.35, realised
