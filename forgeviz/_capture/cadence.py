"""Which backward passes record gradient summaries (``%fv grads``, ``forgeviz.capture(grads=...)``).

EACH pass; every N-th (an int N >= 2: the first pass after the setting, then every N-th after it, so a
kernel's first backward records); WITHIN a share of a loop's time (:class:`Within`: as many passes as the
summaries' measured cost fits in, a cell's first always); only the Nodes a view SHOWS; or none (OFF). A
"step" is one backward pass: counted without an optimizer, and what records are numbered by.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Optional, Union

EACH, SHOWN, OFF = "each", "shown", "off"


@dataclass(frozen=True)
class Within:
    """A cadence that summarises as many backward passes as fit in ``share`` of a loop's time (0 < share < 1):
    what summarising costs is measured pass by pass (:class:`SummaryBudget`).

    >>> Within(0.05)
    Within(share=0.05)
    """

    share: float


Cadence = Union[int, str, Within]

# A budget's credit is capped at what this many seconds of a loop earn: credit saved while summaries were cheap
# does not pay for a long burst of them once they are not (a loop whose graph or batch grows)
CREDIT_SECONDS = 2.0
# A budget re-measures the pace of steps without summaries (a graph may change inside a loop) when this many passes
# went by without one: two passes in this many go unsummarised even when the budget has room (or when it summarises
# every other pass, and none follows an unsummarised one); and while fewer than WINDOW such steps were measured in
# the cell (its first ones run colder than the loop's), two in EARLY
REMEASURE_EVERY = 64
EARLY = 8
# What a summarised pass costs is the median of the latest steps whose pass was summarised less the pace, the median
# of as many latest steps whose pass was not, after one that was not either (at most this many of each kind): a
# step's noise (a collection, another process, a data loader's hiccup) moves a median little, where one step less
# another would charge or refund it whole
WINDOW = 15
# ... and, where the loop has them, of the latest this many pairs: the difference between a summarised step and the
# step at the pace two steps later, and between the step in between (after a summarised one) and that same step
# (see SummaryBudget._count_step). Pairs are noisier one by one (two steps' noise), so more of them.
PAIRS = 31
# A step this many times the pace is a pause (a validation loop, a plot, a checkpoint), not a step: it earns and
# costs nothing, and is not measured
PAUSE = 4.0


def _percent(share: float) -> str:
    return f"{share * 100:.6g}%"


def cadence_of(value) -> Cadence:
    """The cadence ``value`` names: "each", "shown", "off", "every N" or an int N >= 1 (1 is "each"),
    "within P%" (0 < P < 100).

    >>> cadence_of("every 10"), cadence_of(1), cadence_of(" shown "), cadence_of("within 5%")
    (10, 'each', 'shown', Within(share=0.05))
    >>> cadence_of("every 0")
    Traceback (most recent call last):
    ...
    ValueError: expected each, every N (N ≥ 1), within P% (0 < P < 100), shown or off; got 'every 0'
    """
    n = None
    if isinstance(value, int) and not isinstance(value, bool):  # True is an int, and no count
        n = value
    elif isinstance(value, str):
        words = value.split()
        if len(words) == 1 and words[0] in (EACH, SHOWN, OFF):
            return words[0]
        if len(words) == 2 and words[0] == "every" and words[1].isdecimal():
            n = int(words[1])
        if words and words[0] == "within":
            share = _share_of("".join(words[1:]))
            if share is not None:
                return Within(share)
    if n is None or n < 1:
        raise ValueError(f"expected each, every N (N ≥ 1), within P% (0 < P < 100), shown or off; got {value!r}")
    return EACH if n == 1 else n


def _share_of(text: str) -> Optional[float]:
    """``"5%"`` as 0.05; None unless a percentage strictly between 0 and 100."""
    if not text.endswith("%"):
        return None
    try:
        percent = float(text[:-1])
    except ValueError:
        return None
    return percent / 100 if 0 < percent < 100 else None  # (NaN compares false: None)


def cadence_text(cadence: Cadence) -> str:
    """How ``%fv grads`` spells a cadence: ``cadence_text(10)`` is ``'every 10'``.

    >>> [cadence_text(c) for c in ("each", 10, Within(0.05), "shown", "off")]
    ['each', 'every 10', 'within 5%', 'shown', 'off']
    """
    if isinstance(cadence, Within):
        return f"within {_percent(cadence.share)}"
    return f"every {cadence}" if isinstance(cadence, int) else cadence


def describe_cadence(cadence: Cadence) -> str:
    """The cadence in words, for ``%fv grads``.

    >>> describe_cadence(10)
    'every 10 (the next backward pass, then every 10th)'
    >>> describe_cadence(Within(0.05))
    "within 5% (a cell's first backward pass, then as many as fit in 5% of the loop's time)"
    """
    if isinstance(cadence, Within):
        return (f"within {_percent(cadence.share)} (a cell's first backward pass, then as many as fit in "
                f"{_percent(cadence.share)} of the loop's time)")
    if isinstance(cadence, int):
        return f"every {cadence} (the next backward pass, then every {cadence}th)"
    return {EACH: "each (every backward pass)", SHOWN: "shown (only the Nodes a live graph view draws)",
            OFF: "off (no backward pass)"}[cadence]


class _Steps:
    """The latest ``window`` values of one kind (step times, or the differences of pairs of steps), and their
    median: made once after a value is added, where a budget asks for it several times a pass."""

    __slots__ = ("times", "_median")

    def __init__(self, window: int = WINDOW) -> None:
        self.times: deque = deque(maxlen=window)
        self._median: Optional[float] = None

    def __len__(self) -> int:
        return len(self.times)

    def add(self, took: float) -> None:
        self.times.append(took)
        self._median = None

    def clear(self) -> None:
        self.times.clear()
        self._median = None

    def median(self, last: Optional[int] = None) -> float:
        """The median of the ``last`` latest, or of all (at least one must be there)."""
        if last is not None and last < len(self.times):
            return statistics.median(list(self.times)[-last:])
        if self._median is None:
            self._median = statistics.median(self.times)
        return self._median


class SummaryBudget:
    """Decides, pass by pass, which backward passes a :class:`Within` cadence summarises, from the loop's steps.

    A step is the time from one backward pass's start to the next's: the backward, what follows it (an
    optimizer step, whose kernels run colder after a summarised backward) and the next forward. A token
    bucket of seconds: each step earns ``share`` of its time (at most CREDIT_SECONDS' worth is kept), and a
    step whose pass was summarised spends what summarising costs: the median of the latest such steps less the
    pace, the median of as many latest steps whose pass was not, after one that was not either (WINDOW); plus
    what a summarised pass slows the step after it, the median of the latest unsummarised steps after a summarised
    one less the pace; or, when larger, the same from the latest PAIRS pairs of steps in a row (see
    :meth:`_count_step`), which a machine whose speed drifts moves alike. A pass is summarised while credit is
    left. So a
    loop whose summaries add 20% to its step at ``within 5%`` summarises about one pass in four, and one whose
    summaries cost 2% summarises every pass.

    - A cell's first pass is always summarised (what a notebook user looks at), and its step, a cold start, is
      not counted; its second and third are not: their steps measure what a summarised pass slows the step after
      it, and the loop's pace (none carried across cells, whose loops differ).
    - When REMEASURE_EVERY passes went by since a step at the loop's pace (EARLY, while fewer than WINDOW such
      steps were measured in the cell), the two after the next summarised pass are not: both measured again. (A
      loop that summarises every pass, or every other one, measures no such step of itself.)
    - A step over PAUSE times the pace is a pause, not a step: neither earned, charged nor measured.
    - Times are the training thread's wall clock (on a GPU, a loop that waits for its GPU each step, as
      ``loss.item()`` does, counts the summary kernels' GPU time too; one that never waits, only the host's).

    ``clock``: seconds, ``time.perf_counter`` unless a test gives its own.

    >>> now = [0.0]
    >>> budget = SummaryBudget(0.25, clock=lambda: now[0])
    >>> def step():  # a loop step of 16 ms (2**-6 s), and 8 ms more when its pass is summarised
    ...     summarised = budget.begins()
    ...     now[0] += 2**-6 + (2**-7 if summarised else 0.0)
    ...     return summarised
    >>> [step() for _ in range(10)]  # measuring, the 2nd and 3rd; then two summaries (16 ms) in three steps (64 ms)
    [True, False, False, True, True, True, True, False, True, True]
    """

    def __init__(self, share: float, clock: Callable[[], float] = time.perf_counter) -> None:
        self.share = share
        self.clock = clock
        self.credit = 0.0  # seconds of summarising still allowed
        # the latest steps' times: summarised; not, after one not summarised; not, after a summarised one
        self._summarised_steps, self._plain_steps, self._after_steps = _Steps(), _Steps(), _Steps()
        # paired: of three steps in a row (summarised, the one after it, one at the pace), the first's time and the
        # second's less the third's: a machine whose speed drifts (a VM's neighbours, a laptop's clock) moves the
        # three alike, where medians of steps minutes apart would compare a slow spell with a fast one
        self._paired_costs, self._paired_after = _Steps(PAIRS), _Steps(PAIRS)
        self._previous: tuple = ()  # (summarised, took) of the last two steps counted, in a row, oldest first
        self._summarised_before = False  # whether the pass before the last was summarised
        self._measuring = 0  # passes still to go unsummarised, to measure the pace (two at a time)
        self._last_began: Optional[float] = None  # the last pass's start (None: none yet in this cell)
        self._summarising = False
        self._first_of_cell = True
        self._cold = False  # whether the step under way is the cell's first (not counted)
        self._since_pace = 0  # passes since the last whose step is at the pace (unsummarised, after one not either)
        self.summarised = 0  # passes of the current cell summarised, and not
        self.skipped = 0
        self.last_cell: Optional[tuple[int, int]] = None  # (summarised, skipped) of the cell before, if it had any

    @property
    def summarising(self) -> bool:
        """Whether the pass under way (or the last one) is summarised."""
        return self._summarising

    @property
    def pace(self) -> Optional[float]:
        """What a step without summaries takes in this cell (seconds; None before one was measured): after one
        without them, or, before such a step was measured, after one with them."""
        plain = self._plain_steps or self._after_steps
        return plain.median() if plain else None

    @property
    def cost(self) -> Optional[float]:
        """What summarising a pass adds to the loop, as measured so far in this cell: to its step, and to the step
        after it (seconds; None before a step of each kind was measured)."""
        plain = self._plain_steps or self._after_steps
        k = min(len(self._summarised_steps), len(plain))
        if not k:
            return None
        cost = self._summarised_steps.median(k) - plain.median(k)
        if self._plain_steps and self._after_steps:  # (both kinds of unsummarised step: the slowing after, which
            # is never a speed-up: a difference of two medians below 0 is their noise)
            cost += max(0.0, self._after_steps.median() - self._plain_steps.median())
        if self._paired_costs:  # the larger: pairs see through a drifting machine, the medians of the latest steps
            # see at once summaries that grew dearer (a run of them measures no pair)
            cost = max(cost, self._paired_costs.median() + max(0.0, self._paired_after.median()))
        return max(0.0, cost)

    def new_cell(self) -> None:
        """A cell (or a ``capture()`` block) begins: its first pass is summarised and its pace measured anew."""
        if self.summarised or self.skipped:
            self.last_cell = (self.summarised, self.skipped)
        self._first_of_cell = True
        self._last_began = None
        for steps in (self._summarised_steps, self._plain_steps, self._after_steps, self._paired_costs,
                      self._paired_after):
            steps.clear()
        self._previous = ()
        self._summarised_before = False
        self._measuring = 0
        self.credit = 0.0
        self._since_pace = self.summarised = self.skipped = 0

    def begins(self) -> bool:
        """A backward pass begins (ending the step of the pass before): whether it is summarised."""
        now = self.clock()
        if self._last_began is not None:
            self._count_step(now - self._last_began)
        self._last_began = now
        self._cold = self._first_of_cell
        if self._first_of_cell:
            self._first_of_cell = False
            summarising = True
        else:
            if self._measuring == 0 and self._summarising and (
                    not (self._plain_steps or self._after_steps)
                    or self._since_pace >= (REMEASURE_EVERY if len(self._plain_steps) >= WINDOW else EARLY)):
                # two passes in a row unsummarised, after a summarised one: the first's step is one after a summarised
                # pass, the second's one after none (the pace), whatever the credit; the three make a pair
                self._measuring = 2
            if self._measuring:
                self._measuring -= 1
                summarising = False
            else:
                summarising = self.credit > 0
        self._summarised_before, self._summarising = self._summarising, summarising
        if summarising:
            self.summarised += 1
        else:
            self.skipped += 1
        self._since_pace = 0 if not (summarising or self._summarised_before) else self._since_pace + 1
        return summarising

    def _count_step(self, took: float) -> None:
        """The step of the last pass took ``took`` seconds: earned, and charged or measured. A step at the pace
        that follows a summarised step and the one after it, in a row, makes a pair: the summarised step less this
        one (what summarising cost), and the one after it less this one (what it slowed the next step)."""
        pace = self.pace
        if self._cold or (pace is not None and took > PAUSE * pace):
            self._previous = ()  # (no step in a row with the next)
            return
        self.credit = min(self.credit + self.share * took, self.share * CREDIT_SECONDS)
        summarised, previous = self._summarising, self._previous
        if summarised:
            self._summarised_steps.add(took)
            self.credit -= self.cost or 0.0
        elif self._summarised_before:  # (what a summarised pass slows the step after it was charged with that pass)
            self._after_steps.add(took)
        else:
            self._plain_steps.add(took)
            if len(previous) == 2 and previous[0][0] and not previous[1][0]:  # summarised, after it, this one
                self._paired_costs.add(previous[0][1] - took)
                self._paired_after.add(previous[1][1] - took)
        self._previous = (previous[-1], (summarised, took)) if previous else ((summarised, took),)
