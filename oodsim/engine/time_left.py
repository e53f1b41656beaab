"""The time left of a run: a prediction interval for the remaining time, from when its seeds
landed.

The gaps between landings measure the run's pace (seconds per seed with every slot busy). The
pace is the mean gap of a recent window (the gaps of the last :data:`PACE_MEMORY` seconds, at
least two rounds' worth), after the first landing, so that the start-up (a cluster's start,
imports, the first data loads) is not taken for work. A machine shared with other work does
not keep its pace: its load wanders around a level. So the log of the pace is modelled as an
Ornstein-Uhlenbeck process, with a spread (log-SD, :data:`PACE_SPREAD` a priori, the run's own
spread of block paces once it has seen some, weighed by :data:`PRIOR_SECONDS` against the
time it has observed) and a memory (:data:`PACE_MEMORY`). The remaining time is then
log-normal around ``left × pace``, with the variance of

- the window's mean gap (the gaps' squared coefficient of variation over the window's size),
- the drift between the mean pace over the window and the mean pace over the remaining time
  (small when both are short next to the memory; for a long window and a long horizon, each
  averages over the load's ups and downs),
- the gaps still to come (the coefficient of variation over the seeds left).

The range is the central :data:`LEVEL` of that distribution; its upper end is at least the
pace since the start (start-up included) times the seeds left, which the first rounds'
landings, often in bursts, may otherwise hide. ``benchmarks/progress.py`` replays real runs'
landings (:func:`replay`) and prints how often the range holds the true time left.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

#: the chance the range is meant to hold the true time left
LEVEL = 0.9
#: how much a shared machine's pace wanders around its level, a priori (log-SD: a factor 2)
PACE_SPREAD = math.log(2)
#: seconds over which a shared machine's pace changes (its load's memory)
PACE_MEMORY = 60.0
#: seconds a run observes before its own spread of paces weighs as much as PACE_SPREAD
PRIOR_SECONDS = 60.0
#: completed rounds (seeds per slot) before a time left is given
ROUNDS_BEFORE_ESTIMATE = 2
#: landings the estimate looks back on at most (a run of many seeds costs the same per landing)
HISTORY = 1000
#: the smallest squared coefficient of variation of the gaps assumed (a window of equal gaps
#: still says little of the next ones)
MIN_CV2 = 0.05


@dataclass(frozen=True)
class TimeLeft:
    """Seconds left: the middle (median) and a range meant to hold the truth with
    :data:`LEVEL`."""

    low: float
    middle: float
    high: float

    def holds(self, seconds: float) -> bool:
        return self.low <= seconds <= self.high


def time_left(
    computed: Sequence[float], done: int, total: int, slots: int, count: int | None = None
) -> TimeLeft | None:
    """The time left after ``done`` of ``total`` seeds landed, ``computed`` the times (seconds
    since the run started, in order) at which the computed ones (not from the cache) landed,
    with ``slots`` seeds running at once; None before :data:`ROUNDS_BEFORE_ESTIMATE` rounds
    have landed, or when nothing is left (see the module). ``computed`` may be the latest
    :data:`HISTORY` of them, ``count`` saying how many there were in all."""
    left, slots = total - done, max(1, slots)
    count = len(computed) if count is None else count
    if left <= 0 or count < max(2, ROUNDS_BEFORE_ESTIMATE * slots):
        return None
    recent_landings = computed[-HISTORY:]
    gaps = [b - a for a, b in zip(recent_landings, recent_landings[1:])]
    recent = _window(gaps, 2 * slots)
    pace = max(_mean(recent), 1e-3)
    cv2 = max(_variance(recent) / pace**2 if len(recent) > 1 else 1.0, MIN_CV2)
    spread2 = _spread2(gaps, cv2, 2 * slots, observed=recent_landings[-1] - recent_landings[0])
    middle = left * pace
    variance = cv2 / len(recent) + _drift(spread2, sum(recent), middle) + cv2 / left
    z = NormalDist().inv_cdf(0.5 + LEVEL / 2) * math.sqrt(variance)
    since_start = left * computed[-1] / count  # the start-up included
    return TimeLeft(middle * math.exp(-z), middle, max(middle * math.exp(z), since_start))


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _variance(values: Sequence[float]) -> float:
    """The sample variance (``statistics.variance`` is exact, and 20 times slower)."""
    mean = _mean(values)
    return math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)


def _window(gaps: Sequence[float], least: int) -> Sequence[float]:
    """The gaps of the last :data:`PACE_MEMORY` seconds, at least ``least`` of them (or all)."""
    count, span = 0, 0.0
    for gap in reversed(gaps):
        if count >= min(least, len(gaps)) and span + gap > PACE_MEMORY:
            break
        count, span = count + 1, span + gap
    return gaps[len(gaps) - count :]


def _spread2(gaps: Sequence[float], cv2: float, block: int, observed: float) -> float:
    """The squared log-spread of the pace: :data:`PACE_SPREAD`, weighed against the variance
    of the run's log mean gaps over blocks of ``block`` gaps (less what the gaps' own noise
    explains), in proportion to the ``observed`` seconds."""
    prior = PACE_SPREAD**2
    blocks = [gaps[i : i + block] for i in range(0, len(gaps) - block + 1, block)]
    if len(blocks) < 3:
        return prior
    logs = [math.log(max(_mean(b), 1e-9)) for b in blocks]
    own = max(_variance(logs) - cv2 / block, 0.0)
    return (prior * PRIOR_SECONDS + own * observed) / (PRIOR_SECONDS + observed)


def _drift(spread2: float, window: float, horizon: float) -> float:
    """The variance of the mean log pace over the next ``horizon`` seconds less its mean over
    the last ``window`` seconds, for a stationary Ornstein-Uhlenbeck process of variance
    ``spread2`` and memory :data:`PACE_MEMORY`."""

    def mean_variance(span: float) -> float:  # of the mean over ``span`` seconds, / spread2
        a = span / PACE_MEMORY
        return 2 / a**2 * (a - 1 + math.exp(-a)) if a > 0 else 1.0

    def kept(span: float) -> float:  # what the mean over ``span`` keeps of the value at its end
        a = span / PACE_MEMORY
        return (1 - math.exp(-a)) / a if a > 0 else 1.0

    both = mean_variance(horizon) + mean_variance(window) - 2 * kept(horizon) * kept(window)
    return spread2 * max(both, 0.0)


def replay(landings: Sequence[Sequence[float]], total: int) -> list[tuple[float, TimeLeft]]:
    """What :func:`time_left` says at each landing of a recorded run, with the true time left
    then: ``landings`` as :class:`~oodsim.engine.progress.Progress` records them (seconds since
    the start, cached, failed, slots; in order, every seed of the run). Landings where no time
    left is given are left out."""
    end = landings[-1][0]
    computed: list[float] = []
    said = []
    for done, (when, cached, _failed, slots) in enumerate(landings, start=1):
        if not cached:
            computed.append(when)
        estimate = time_left(computed, done, total, int(slots))
        if estimate is not None:
            said.append((end - when, estimate))
    return said
