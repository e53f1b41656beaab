"""Where a run's work goes: this process, an existing scheduler, batch jobs, or a local cluster.

:func:`place` reads the options of :func:`oodsim.run` (``cluster``, ``address``,
``n_workers``, ``worker_timeout``) with the spec's ``[cluster]`` table, rejects what does not
fit together, and checks what can fail before any compute (dask-jobqueue and the submit
command of batch jobs; the ``__main__`` guard a local cluster's workers need). The
:class:`Placement` it returns is all the engine needs to start the cluster on first need.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from oodsim.clusters.cluster import LOCAL_WORKER_TIMEOUT
from oodsim.clusters.guard import check_main_guard
from oodsim.clusters.job_cluster import check_jobs
from oodsim.engine.waiting import SCHEDULER_SILENT_TIMEOUT, configured_scheduler_timeout
from oodsim.errors import SpecError
from oodsim.limits import over
from oodsim.specs.cluster import ClusterSpec, resolve_cluster, runs_in_process


@attrs.frozen
class Placement:
    """Where a run computes: in this process (``in_process``), on the scheduler at
    ``address``, on a cluster of batch ``jobs``, or on a new local cluster of ``n_workers``
    processes (None: one a core). ``worker_timeout``: seconds without any worker, while
    work is pending, before the run stops (None: it waits); ``scheduler_timeout``: seconds
    without an answer from the scheduler, while work is pending, before the run stops."""

    in_process: bool = False
    address: str | None = None
    jobs: ClusterSpec | None = None
    n_workers: int | None = None
    worker_timeout: float | None = None
    scheduler_timeout: float = SCHEDULER_SILENT_TIMEOUT


def place(
    table: ClusterSpec | None,
    n_seeds: int,
    *,
    cluster: Any = None,
    address: str | None = None,
    n_workers: int | None = None,
    worker_timeout: float | None = None,
) -> Placement:
    """The :class:`Placement` of a run of ``n_seeds`` seeds whose spec has the ``[cluster]``
    ``table`` (None: none), given :func:`oodsim.run`'s options; a clear
    :class:`~oodsim.errors.SpecError` (or :class:`~oodsim.engine.ClusterError`) before any
    compute for options that contradict each other or a cluster that cannot start."""
    if n_workers is not None and (isinstance(n_workers, bool) or n_workers < 1):
        raise SpecError("workers", n_workers, "a number of worker processes >= 1")
    if n_workers is not None and (too_many := over(n_workers, "local_workers")):
        raise SpecError("workers", n_workers, *too_many)  # each takes a process and memory
    if worker_timeout is not None and not (
        isinstance(worker_timeout, int | float)
        and not isinstance(worker_timeout, bool)
        and math.isfinite(worker_timeout)
        and worker_timeout > 0
    ):
        raise SpecError("worker_timeout", worker_timeout, "a finite number of seconds > 0")
    in_process = runs_in_process(table, cluster, address, n_workers, n_seeds)
    if in_process and n_workers not in (None, 1):
        raise SpecError("workers", n_workers, "no worker count with an in-process run")
    jobs, address = resolve_cluster(table, cluster, address)
    if jobs is not None:
        if n_workers is not None:
            raise SpecError(
                "workers",
                n_workers,
                f"no worker count with a {jobs.kind} cluster: [cluster] n_jobs x processes",
            )
        check_jobs(jobs)  # dask-jobqueue and the submit command, before any compute
    elif address is None and not in_process:  # a local cluster's workers re-import the script
        check_main_guard()
    if worker_timeout is None and address is None and (jobs is None or jobs.kind == "local-jobs"):
        # local processes (a local cluster, or local jobs: no batch queue to wait in) start
        # within seconds; a batch system's jobs may queue for hours, so they get no default
        worker_timeout = LOCAL_WORKER_TIMEOUT
    silent = configured_scheduler_timeout()  # $OODSIM_SCHEDULER_TIMEOUT, checked before compute
    return Placement(in_process, address, jobs, n_workers, worker_timeout, silent)
