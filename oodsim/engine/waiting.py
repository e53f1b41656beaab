"""Watching a run's work land: futures as they finish, and a cluster that has lost its workers
or whose scheduler no longer answers.

:func:`as_landed` yields futures as they finish (in-process tasks, computed one by one in
order) and gives up with :class:`~oodsim.errors.ClusterError` when the cluster has had no
worker for ``worker_timeout`` seconds, when the scheduler is lost, or when it has not answered
for ``scheduler_timeout`` seconds, instead of waiting forever: finished work stays cached.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError
from typing import Any

from oodsim.clusters.job_watch import watch_of
from oodsim.engine.inprocess import is_deferred
from oodsim.environment import read
from oodsim.errors import ClusterError

#: seconds the scheduler may take to answer one request while the run waits (it answers in
#: milliseconds; a busy one in seconds)
ANSWER_TIMEOUT = 10.0
#: seconds without any answer from the scheduler, while work is pending, before the run stops
#: (a scheduler stopped with SIGSTOP or hung, or a network that drops its packets without
#: closing the connection, held a run forever); a busy scheduler can be slow to answer
SCHEDULER_SILENT_TIMEOUT = 300.0
#: the environment variable that sets another ``SCHEDULER_SILENT_TIMEOUT`` (seconds)
SCHEDULER_TIMEOUT_ENV = "OODSIM_SCHEDULER_TIMEOUT"


def configured_scheduler_timeout() -> float:
    """Seconds a run waits for a scheduler that does not answer: ``$OODSIM_SCHEDULER_TIMEOUT``,
    else :data:`SCHEDULER_SILENT_TIMEOUT`; :class:`SpecError` for a value outside its range
    (:mod:`oodsim.environment`: from 5 s, the floor below which a healthy scheduler is taken
    for a silent one, to a week)."""
    seconds = read(SCHEDULER_TIMEOUT_ENV)
    return SCHEDULER_SILENT_TIMEOUT if seconds is None else seconds


def as_landed(
    futures: Sequence[Any],
    worker_timeout: float | None,
    poll: float = 2.0,
    no_worker: Callable[[float, str], None] | None = None,
    unanswered: Callable[[float, float], None] | None = None,
    scheduler_timeout: float = SCHEDULER_SILENT_TIMEOUT,
) -> Iterator[Any]:
    """Futures as they finish; a cluster without any worker for ``worker_timeout`` seconds
    raises :class:`ClusterError` instead of waiting forever (finished work stays cached), and
    so does a job cluster whose jobs will never give a worker (:mod:`oodsim.clusters.job_watch`).
    While it has none, ``no_worker(seconds, hint)`` is told how long that has been and what
    its jobs' batch system says (so a job cluster whose jobs are queued, or fail before their
    worker starts, never waits in silence), and ``no_worker(0.0, "")`` once it has workers
    again.

    Each wait of ``poll`` seconds in which nothing lands, the scheduler is asked for its
    workers, with a deadline (:data:`ANSWER_TIMEOUT`): one that has not answered for
    ``scheduler_timeout`` seconds stops the run with :class:`ClusterError`; meanwhile
    ``unanswered(seconds, scheduler_timeout)`` is told how long it has been silent, and
    ``unanswered(0.0, scheduler_timeout)`` once it answers again."""
    if is_deferred(futures):  # in-process tasks: computed here, one by one, in order
        for future in futures:
            future.compute()
            yield future
        return
    # distributed loads only when a cluster is needed (cached runs start none)
    from distributed import wait

    pending = set(futures)
    idle_since: float | None = None
    answered = time.monotonic()  # when the scheduler last answered (or work last landed)
    silent = False  # unanswered() was told that it does not answer
    deadline = min(ANSWER_TIMEOUT, scheduler_timeout / 4)
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
            idle_since, answered = None, time.monotonic()
            continue
        client = next(iter(pending)).client
        watch = watch_of(client)  # a job cluster's jobs, as its batch system says
        if watch is not None and watch.verdict is not None:
            raise ClusterError(watch.verdict)
        working = threads(client, deadline)
        now = time.monotonic()
        if working is None:  # no answer: a stopped or hung scheduler, or a lost network
            if now - answered > scheduler_timeout:
                raise _silent(client, scheduler_timeout, f"{len(pending)} tasks pending")
            if unanswered is not None:
                unanswered(now - answered, scheduler_timeout)
                silent = True
            continue
        if silent and unanswered is not None:
            unanswered(0.0, scheduler_timeout)  # it answers again
        answered, silent = now, False
        if worker_timeout is None and no_worker is None:
            continue
        if working:
            if idle_since is not None and no_worker is not None:
                no_worker(0.0, "")  # the workers are back
            idle_since = None
        elif idle_since is None:
            idle_since = now
        elif no_worker is not None:
            no_worker(now - idle_since, watch.hint if watch is not None else "")
        if (
            idle_since is not None
            and worker_timeout is not None
            and (now - idle_since > worker_timeout)
        ):
            raise ClusterError(
                f"the Dask cluster has had no worker for {worker_timeout:.0f} s with "
                f"{len(pending)} tasks pending; finished work is cached, run "
                "again (or restart the workers) to resume"
            )


def threads(client: Any, deadline: float) -> int | None:
    """The cluster's threads, as its scheduler tells them within ``deadline`` seconds; None
    when it does not answer (or the connection to it fails)."""
    try:
        return sum(client.nthreads(callback_timeout=deadline).values())
    except (TimeoutError, OSError):
        return None


def gathered(future: Any, scheduler_timeout: float) -> Any:
    """``future.result()`` of a future that has finished: its result comes through the
    scheduler, so one that does not answer for ``scheduler_timeout`` seconds stops the run
    with :class:`ClusterError` instead of holding it forever."""
    try:
        return future.result(timeout=scheduler_timeout)
    except TimeoutError:
        if future.status == "error":
            raise  # the task's own error
        raise _silent(future.client, scheduler_timeout, "a finished result to fetch") from None


def _silent(client: Any, seconds: float, waiting: str) -> ClusterError:
    """The error of a run whose scheduler has not answered for ``seconds``."""
    return ClusterError(
        f"the Dask scheduler at {client.scheduler.address} has not answered for {seconds:.0f} s "
        f"with {waiting} (stopped, hung, or a network that drops its packets); finished work "
        f"is cached, run again to resume once it answers (${SCHEDULER_TIMEOUT_ENV} sets how "
        "long to wait)"
    )
