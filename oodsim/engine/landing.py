"""Watching a run's work land: futures as they finish, and a cluster that has lost its workers.

:func:`as_landed` yields futures as they finish (in-process tasks, computed one by one in
order) and gives up with :class:`~oodsim.errors.ClusterError` when the cluster has had no
worker for ``worker_timeout`` seconds, or when the scheduler is lost, instead of waiting
forever: finished work stays cached.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError
from typing import Any

from oodsim.engine.inprocess import is_deferred
from oodsim.engine.job_watch import watch_of
from oodsim.errors import ClusterError


def as_landed(
    futures: Sequence[Any],
    worker_timeout: float | None,
    poll: float = 2.0,
    no_worker: Callable[[float, str], None] | None = None,
) -> Iterator[Any]:
    """Futures as they finish; a cluster without any worker for ``worker_timeout`` seconds
    raises :class:`ClusterError` instead of waiting forever (finished work stays cached), and
    so does a job cluster whose jobs will never give a worker (:mod:`oodsim.engine.job_watch`).
    While it has none, ``no_worker(seconds, hint)`` is told how long that has been and what
    its jobs' batch system says (a job cluster whose jobs are queued, or fail before their
    worker starts, used to wait in silence), and ``no_worker(0.0, "")`` once it has workers
    again."""
    if is_deferred(futures):  # in-process tasks: computed here, one by one, in order
        for future in futures:
            future.compute()
            yield future
        return
    # distributed loads only when a cluster is needed (cached runs start none)
    from distributed import wait

    pending = set(futures)
    idle_since: float | None = None
    while pending:
        try:
            done, pending = wait(pending, timeout=poll, return_when="FIRST_COMPLETED")
        except TimeoutError:
            done = set()
        except CancelledError:  # distributed's words: "FuturesCancelledError: 6 Futures ..."
            if next(iter(pending)).client.status == "running":
                raise  # cancelled by someone, not lost with the scheduler
            raise ClusterError(
                "lost the connection to the Dask scheduler, and with it the work in flight "
                "(the scheduler stopped, or the network failed); finished work is cached, "
                "run again to resume"
            ) from None
        yield from done
        if done or not pending:
            idle_since = None
            continue
        client = next(iter(pending)).client
        watch = watch_of(client)  # a job cluster's jobs, as its batch system says
        if watch is not None and watch.verdict is not None:
            raise ClusterError(watch.verdict)
        if worker_timeout is None and no_worker is None:
            idle_since = None
            continue
        if client.nthreads():
            if idle_since is not None and no_worker is not None:
                no_worker(0.0, "")  # the workers are back
            idle_since = None
        elif idle_since is None:
            idle_since = time.monotonic()
        elif no_worker is not None:
            no_worker(time.monotonic() - idle_since, watch.hint if watch is not None else "")
        if (
            idle_since is not None
            and worker_timeout is not None
            and (time.monotonic() - idle_since > worker_timeout)
        ):
            raise ClusterError(
                f"the Dask cluster has had no worker for {worker_timeout:.0f} s with "
                f"{len(pending)} tasks pending; finished work is cached, run "
                "again (or restart the workers) to resume"
            )
