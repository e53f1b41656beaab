"""Failure kinds are data: the messages the code paths write are told apart by the records of
:mod:`oodsim.results.failures`, and the results keep the messages they always held."""

from __future__ import annotations

import pytest

from oodsim.artifacts.tasks import SeedFailed, stored
from oodsim.engine.submitter import worker_died
from oodsim.results import (
    CRASH,
    DEGENERATE,
    FAILURE_KINDS,
    LOST_ENTRY,
    WORKER_DIED,
    failure_kind,
)
from oodsim.store import Store


def test_a_lost_entry_is_told_apart_and_heals(tmp_path):
    with pytest.raises(SeedFailed) as caught:
        stored(Store(tmp_path / "cache"), "outputs", "ab" * 32, "outputs of seed 3")
    message = str(caught.value)
    # the message of old, byte for byte
    assert message == (
        "outputs of seed 3 (outputs abababababab) is missing or corrupt in the store; "
        "run again to recompute it"
    )
    kind = failure_kind(message)
    assert kind is LOST_ENTRY and kind.heals and not kind.excluded
    assert kind.detail(message) == "outputs of seed 3 (outputs abababababab)"


def test_a_degenerate_seed_is_an_exclusion_not_a_crash():
    message = DEGENERATE.message("balanced accuracy 0.21 is not above chance (0.20)")
    assert message.startswith("degenerate: ")  # what results of earlier versions hold
    kind = failure_kind(message)
    assert kind is DEGENERATE and kind.excluded and not kind.heals
    assert kind.detail(message) == "balanced accuracy 0.21 is not above chance (0.20)"


def test_anything_else_is_a_crash_and_no_failure_is_none():
    assert failure_kind("training diverged: loss is nan at epoch 2") is CRASH
    assert failure_kind("") is None
    assert [k.name for k in FAILURE_KINDS] == ["degenerate", "lost_entry", "worker_died", "crash"]
    assert sum(k.excluded for k in FAILURE_KINDS) == 1 and sum(k.heals for k in FAILURE_KINDS) == 1


def test_a_worker_that_died_is_a_crash_of_its_own_kind():
    """A seed whose work killed its worker on every try fails as a crash does (a report
    counts it as failed, nothing heals it); its kind tells the engine that the environment
    may be at fault (a run where it befalls every seed stops, see test_clusters.py)."""
    from distributed import KilledWorker

    message = worker_died(KilledWorker("oodsim-task-ab", "tls://127.0.0.1:1", 3))
    assert message is not None
    assert message.startswith("its worker process died each of the 4 times it ran the seed")
    kind = failure_kind(message)
    assert kind is WORKER_DIED and kind.meaning == CRASH.meaning
    assert not kind.excluded and not kind.heals
