"""The status line's time left (:mod:`oodsim.engine.time_left`): its range holds the true time
left of recorded real runs (``benchmarks/recordings``: loaded and quieter machines, one and two
workers) and of simulated ones, in at least 80 % of the landings where it is shown."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from oodsim.engine.time_left import ROUNDS_BEFORE_ESTIMATE, TimeLeft, replay, time_left
from tests.conftest import ROOT

RECORDINGS = sorted((ROOT / "benchmarks" / "recordings").glob("*.json"))


def _coverage(said: list[tuple[float, TimeLeft]]) -> float:
    return sum(estimate.holds(truth) for truth, estimate in said) / len(said)


def _simulated(seed: int, slots: int, total: int, slower_from: float | None) -> list[list]:
    """The landings of a simulated run: ``slots`` workers that start after a start-up and take
    the seeds one by one; a seed's duration is gamma-distributed around 3 s (shape 4), twice
    as long for seeds that start after ``slower_from`` seconds (a machine that got busy)."""
    rng = random.Random(seed)
    free = [rng.uniform(8.0, 12.0) for _ in range(slots)]  # the start-up
    landed = []
    for _ in range(total):
        worker = min(range(slots), key=free.__getitem__)
        start = free[worker]
        slow = 2.0 if slower_from is not None and start >= slower_from else 1.0
        free[worker] = start + slow * rng.gammavariate(4.0, 0.75)
        landed.append(free[worker])
    return [[when, False, False, slots] for when in sorted(landed)]


@pytest.mark.parametrize("path", RECORDINGS, ids=[path.stem for path in RECORDINGS])
def test_a_recorded_run_gets_a_range_from_its_second_round(path: Path) -> None:
    recording = json.loads(path.read_text(encoding="utf-8"))
    said = replay(recording["landings"], recording["total"])
    slots = recording["landings"][-1][3]
    assert len(said) == recording["total"] - ROUNDS_BEFORE_ESTIMATE * slots
    assert all(e.low <= e.middle <= e.high for _, e in said)


def test_the_range_holds_the_time_left_of_recorded_runs() -> None:
    """Pooled over every recording (each one's share is printed by benchmarks/progress.py)."""
    said = []
    for path in RECORDINGS:
        recording = json.loads(path.read_text(encoding="utf-8"))
        said += replay(recording["landings"], recording["total"])
    assert len(RECORDINGS) >= 4
    assert _coverage(said) >= 0.8


@pytest.mark.parametrize("slower_from", [None, 60.0], ids=["steady", "busy-after-a-minute"])
@pytest.mark.parametrize("slots", [1, 2])
def test_the_range_holds_the_time_left_of_simulated_runs(
    slots: int, slower_from: float | None
) -> None:
    said = []
    for seed in range(20):
        said += replay(_simulated(seed, slots, 60, slower_from), 60)
    assert _coverage(said) >= 0.8


def test_the_range_narrows_as_a_steady_run_goes_on() -> None:
    landings = _simulated(0, 2, 200, None)
    said = replay(landings, 200)
    relative = [(e.high - e.low) / e.middle for _, e in said]
    assert relative[-20] < relative[len(relative) // 2] < relative[0]


def test_nothing_is_said_before_two_rounds_or_after_the_last_seed() -> None:
    assert time_left([10.0, 11.0, 13.0], done=3, total=10, slots=2) is None
    assert time_left([10.0, 11.0, 13.0, 14.0], done=10, total=10, slots=2) is None
    estimate = time_left([10.0, 11.0, 13.0, 14.0], done=4, total=10, slots=2)
    assert estimate is not None and estimate.low < estimate.middle < estimate.high
    # the start-up counts for the upper end: the landings so far came in 4 s after 10 s of it
    assert estimate.high >= 6 * 14.0 / 4
