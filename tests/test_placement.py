"""Where a run's work goes (:func:`oodsim.engine.placement.place`): decided once, before any
compute, from ``oodsim.run``'s options and the spec's ``[cluster]`` table."""

from __future__ import annotations

import pytest

from oodsim.clusters.cluster import LOCAL_WORKER_TIMEOUT
from oodsim.engine.placement import Placement, place
from oodsim.errors import SpecError
from oodsim.specs.cluster import ClusterSpec

SCHEDULER = "tls://127.0.0.1:8786"


def test_a_local_run_gets_the_local_worker_timeout_and_a_scheduler_none() -> None:
    assert place(None, 10, n_workers=2) == Placement(
        n_workers=2, worker_timeout=LOCAL_WORKER_TIMEOUT
    )
    assert place(None, 10, n_workers=1) == Placement(
        in_process=True, n_workers=1, worker_timeout=LOCAL_WORKER_TIMEOUT
    )
    # an existing scheduler's workers may come later: the run waits unless told otherwise
    assert place(None, 10, address=SCHEDULER) == Placement(address=SCHEDULER)
    assert place(None, 10, cluster=SCHEDULER, worker_timeout=30) == Placement(
        address=SCHEDULER, worker_timeout=30
    )


def test_batch_jobs_wait_in_their_queue_and_local_jobs_do_not() -> None:
    local_jobs = ClusterSpec(kind="local-jobs")
    assert place(local_jobs, 10) == Placement(jobs=local_jobs, worker_timeout=LOCAL_WORKER_TIMEOUT)
    # the spec's table gives way to the run's cluster option, which may name an address
    assert place(local_jobs, 10, cluster=SCHEDULER) == Placement(address=SCHEDULER)
    assert place(local_jobs, 10, cluster="in-process").in_process


@pytest.mark.parametrize(
    ("table", "options", "message"),
    [
        (None, {"n_workers": 0}, "a number of worker processes >= 1"),
        (None, {"n_workers": True}, "a number of worker processes >= 1"),
        # --workers 24 for 2 seeds started 29 processes; 1000 would take about 47 GB
        (None, {"n_workers": 1000}, "at most 128 worker processes .*OODSIM_LIMITS=local_workers"),
        (None, {"worker_timeout": float("inf")}, "a finite number of seconds > 0"),
        (None, {"worker_timeout": 0}, "a finite number of seconds > 0"),
        (None, {"cluster": "in-process", "n_workers": 2}, "no worker count with an in-process"),
        (None, {"cluster": SCHEDULER, "address": SCHEDULER}, "--cluster or --address, not both"),
        (ClusterSpec(kind="local-jobs"), {"n_workers": 2}, "no worker count with a local-jobs"),
    ],
)
def test_options_that_contradict_each_other_are_refused(
    table: ClusterSpec | None, options: dict, message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        place(table, 10, **options)
