"""One way to get a Dask client, whatever the cluster (the engine watches its work land:
:mod:`oodsim.engine.waiting`).

:func:`cluster_client` starts a ``distributed.LocalCluster`` of worker processes (one torch
thread each), or a cluster of CUDA workers when CUDA and dask-cuda are present (one per GPU, or
``n_workers`` packed over the GPUs: :mod:`oodsim.clusters.gpu`), or a
cluster whose workers are batch jobs (SLURM, PBS, local jobs: a ``[cluster]`` table, see
:mod:`oodsim.clusters.jobqueue`), or connects to an existing scheduler at ``address``
(``dask scheduler``, :mod:`oodsim.clusters.address`). A local cluster is private: its
scheduler, nannies and workers listen on 127.0.0.1 with Dask's TLS and temporary credentials
that only this process and the workers it spawns hold, and serve no dashboard. A job cluster
uses TLS with temporary credentials too. An ``address`` is reached with the credentials of
Dask's configuration (``distributed.comm.tls.*``), or with those of a local cluster this
process started.

A run stopped by Ctrl-C, SIGTERM or an error closes its cluster in the middle of the work. What
that breaks (heartbeats to a closed scheduler, comms closed under a task) is not news to the
user, who has been told how to resume, so Dask logs nothing while it closes; and the workers of a
local cluster leave Ctrl-C, which a terminal sends to all of them too, to the driver
(:func:`dask_setup`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from oodsim.clusters import forkserver, gpu, nanny, signals
from oodsim.clusters.address import LOCAL_SECURITY, connect_client
from oodsim.clusters.dask_compat import warn_untested
from oodsim.clusters.dask_settings import LIGHT_MONITORING, NO_HTTP_ROUTES, unless_configured
from oodsim.clusters.guard import check_main_guard
from oodsim.clusters.job_cluster import check_jobs, job_cluster
from oodsim.clusters.quiet_logs import DroppedUnlessDebug, install
from oodsim.errors import ClusterError, format_warning
from oodsim.progress_notes import Listener
from oodsim.specs.cluster import ClusterSpec

LOCAL_WORKER_TIMEOUT = 120.0  # seconds without any worker before a local run gives up


# seconds each start of a local worker process may take: Dask's ``death_timeout`` of its
# nanny, which bounds the nanny's start with its worker's, and each restart of the worker by
# the nanny (nothing else, in distributed 2026.8: a worker that loses its scheduler closes at
# once anyway). A worker process that hung as it started (stopped, stuck on a file system)
# held ``LocalCluster(...)`` forever, or, restarted, its nanny. Forked workers register in
# seconds (the fork server's imports, about 5 s of CPU, come before the first): two minutes is
# generous on a loaded machine. A cluster whose workers do not all start stops the run with a
# ClusterError, one that started some of them too: nothing has run yet, and a machine where a
# worker cannot start in two minutes wants looking at rather than a run on fewer workers. A
# nanny whose restarted worker does not start closes, the process killed (clusters.local_nanny),
# and the run goes on with the other workers (``worker_timeout`` ends a run with none left).
LOCAL_START_TIMEOUT = 120.0


LOCAL_HOST = "127.0.0.1"  # a local cluster never listens on a network interface


# distributed closes a nanny for good when its worker has not come back within this time of
# being lost (default 15 s), even while the nanny is still restarting it: on a loaded machine,
# or with a worker killed again while it starts, that left local runs without workers. A
# nanny restarts its worker by itself; the local run's worker_timeout still ends a run that
# truly has none.
LOCAL_LOST_WORKER_TIMEOUT = "300 s"


# distributed restarts a worker that has sent no heartbeat (its event loop's, not oodsim's
# progress progress notes: a long training step sends those all along) for ``worker-ttl``, and
# checks once per ttl: with the default 5 minutes, a stopped (SIGSTOP) or hung local worker
# held its seeds, and through the bounded window the whole run, for 5 to 10 minutes (the
# probe: 605 s for 8 seeds). A local worker is a process on this machine: 60 s of silence
# means it is stuck, so oodsim's local cluster restarts it after 60 to 120 s. A ttl set in
# the user's Dask configuration (anything but the default) is kept.
LOCAL_WORKER_TTL = "60 s"


# distributed counts a worker's death against every task in its queue, not only the one that
# ran: with its default of up to 1.1 tasks a thread, seeds whose work was sound failed as
# KilledWorker beside one whose work killed its worker four times (the probe: 6 of 6 seeds
# failed where 4 crashed). One task a thread blames the one that ran; a value set in the
# user's Dask configuration is kept.
LOCAL_WORKER_SATURATION = 1.0

#: how oodsim's local cluster schedules, each setting with Dask's default (a value set in the
#: user's Dask configuration is kept: :func:`~oodsim.clusters.dask_settings.unless_configured`)
LOCAL_SCHEDULING = {
    "distributed.scheduler.worker-ttl": (LOCAL_WORKER_TTL, "5 minutes"),
    "distributed.scheduler.worker-saturation": (LOCAL_WORKER_SATURATION, 1.1),
}


#: this module as Dask's ``preload`` option names it: the workers of oodsim's local cluster run
#: its :func:`dask_setup` when they start
WORKER_PRELOAD = __name__


#: what a run whose local cluster did not start says (with LOCAL_START_TIMEOUT)
NOT_STARTED = (
    "the local Dask cluster did not start: a worker process had not started after {:.0f} s "
    "(stopped, or stuck: a file system that hangs, a machine out of memory); nothing was "
    "computed and no worker process is left. Check the machine (free memory, processes in "
    "state T or D, the cache and data folders) and run again"
)


#: seconds an interrupted run waits for its local workers to stop logging before it closes them
QUIET_TIMEOUT = 5.0
#: seconds an interrupted run waits for its local worker processes to die once killed
ABANDON_TIMEOUT = 5.0
#: seconds the close of the run's own local cluster may take (its workers end with the driver)
CLOSE_TIMEOUT = 30.0
#: seconds each request to a shared scheduler (an ``address``) may take while the run ends:
#: one that does not answer (stopped or hung; a network that drops its packets) held a run
#: stopped by Ctrl-C or SIGTERM forever after its resume line
SHARED_CLOSE_TIMEOUT = 3.0
#: ``worker_setup(client, shared)``: a context manager that sets the workers up for a run
SetUpWorkers = Callable[[Any, bool], contextlib.AbstractContextManager[Any]]


def private_options() -> dict[str, Any]:
    """The ``LocalCluster`` options that make a local cluster private (see the module):
    TLS with new temporary credentials, loopback only, no dashboard, and oodsim's nanny
    preload (:mod:`oodsim.clusters.nanny`)."""
    # distributed loads only when a cluster is needed (cached runs start none)
    from distributed.security import Security

    return {
        "security": Security.temporary(),  # in memory; spawned workers get it through a pipe
        "protocol": "tls",
        "host": LOCAL_HOST,
        "dashboard_address": None,
        # the scheduler's HTTP port: any free one (not 8787, with a warning when taken)
        "scheduler_kwargs": {"dashboard": False, "dashboard_address": f"{LOCAL_HOST}:0"},
        # workers keep glibc's default memory trimming: torch trains 2x faster (see the module)
        "preload_nanny": [nanny.PRELOAD],
        "preload": [WORKER_PRELOAD],  # workers leave Ctrl-C to the driver
    }


def dask_setup(worker: Any) -> None:
    """Dask's preload hook, run in each worker of oodsim's local cluster as it starts: Ctrl-C in
    a terminal reaches every process of the command, and a worker would die of it with a
    traceback; the driver, which gets it too, stops the workers itself. The same holds for
    SIGHUP, which the shell sends every process of the command when its terminal closes.
    oodsim's warnings (a corrupt cache entry recomputed) print as one line, as in the driver,
    and a heartbeat that the driver's scheduler does not answer is not logged."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    warnings.formatwarning = format_warning
    install("distributed.worker", _UnansweredHeartbeats)


class _UnansweredHeartbeats(DroppedUnlessDebug):
    """Drops a local worker's log of a heartbeat that its scheduler did not answer, unless
    ``--debug``: the scheduler lives in the driver, and a driver stopped for a while (Ctrl-Z
    of ``oodsim run`` alone, a machine under memory pressure) had each worker print a 30-line
    traceback every few seconds, about 180 lines in a minute, with nothing to act on. A
    driver that stays away is handled anyway: the workers close when it is gone."""

    def drops(self, record: logging.LogRecord) -> bool:
        return record.msg == "Failed to communicate with scheduler during heartbeat."


@contextlib.contextmanager
def _local_cluster(n_workers: int | None, told: Listener | None = None) -> Iterator[Any]:
    """A private local cluster (see the module docstring), closed on exit; ``told`` (a
    progress note listener: the status line) hears how its start goes."""
    # distributed loads only when a cluster is needed (cached runs start none)
    import dask.config
    from distributed import LocalCluster

    # it subclasses distributed's Nanny (loaded only when a cluster is needed)
    from oodsim.clusters.local_nanny import LocalNanny, StartTold, kill_now, quiet_given_up_starts

    quiet_given_up_starts()
    n = n_workers or os.cpu_count() or 1
    start = StartTold(told, n) if told is not None else None

    # every nanny of the cluster: a bounded start of its worker process, killed if it does not
    starting = {"death_timeout": LOCAL_START_TIMEOUT}
    private = private_options()
    # kept for the cluster's lifetime: a worker that the nanny restarts reads it again, and
    # the cluster reads the lost-worker timeout each time it loses one
    config = {
        **NO_HTTP_ROUTES,
        **unless_configured(LIGHT_MONITORING),
        **unless_configured(LOCAL_SCHEDULING),
        "distributed.deploy.lost-worker-timeout": LOCAL_LOST_WORKER_TIMEOUT,
    }
    with contextlib.ExitStack() as stack:
        stack.enter_context(dask.config.set(config))
        # a cluster interrupted while it starts cannot close its workers: Ctrl-C waits until
        # it has started (a second one does not), and then closes it (oodsim.clusters.signals);
        # the start is bounded on its own (LOCAL_START_TIMEOUT), and the 4 s clock of a stopped
        # command starts after it: workers forked as the command exits print tracebacks
        with signals.held(clocked=False):
            try:
                cluster = gpu.cuda_cluster({**private, **starting}, n_workers, nanny=LocalNanny)
                if cluster is None:
                    if start is not None:
                        start.starting()
                    # CPU workers fork from a server that imported torch once (clusters.forkserver)
                    forked = stack.enter_context(forkserver.forking())
                    # a run that ends at once stops the server first: a worker it forks then
                    # would print a traceback
                    stack.enter_context(signals.ended_with(forkserver.stop_now))
                    cluster = LocalCluster(
                        n_workers=n,
                        threads_per_worker=1,
                        processes=True,
                        silence_logs=logging.ERROR,
                        worker_class=LocalNanny if start is None else LocalNanny.telling(start),
                        **starting,
                        **private,
                        **forked,
                    )
            except TimeoutError:  # a nanny's start (distributed closed the cluster)
                raise ClusterError(NOT_STARTED.format(LOCAL_START_TIMEOUT)) from None
            finally:
                if start is not None:
                    start.started()
            stack.callback(_close_local, cluster)
            stack.enter_context(signals.ended_with(functools.partial(kill_now, cluster)))
        LOCAL_SECURITY[cluster.scheduler_address] = cluster.security
        try:
            yield cluster
        finally:
            LOCAL_SECURITY.pop(cluster.scheduler_address, None)


def _close_local(cluster: Any) -> None:
    """Close the run's own local cluster, within :data:`CLOSE_TIMEOUT`. A close distributed
    cannot finish does not fail a run whose work is done: seen where crashing work had killed
    workers until the end (a nanny that was starting a new worker asserted ``can only join a
    started process``, and a run whose seeds were all scored ended with that traceback). The
    worker processes, children of this one, end with it at the latest."""
    try:
        cluster.close(timeout=CLOSE_TIMEOUT)
    except Exception as error:  # Ctrl-C is not one: it goes on
        logging.getLogger(__name__).debug("the local cluster did not close: %r", error)


@contextlib.contextmanager
def cluster_client(
    address: str | None = None,
    n_workers: int | None = None,
    jobs: ClusterSpec | None = None,
    told: Listener | None = None,
    worker_setup: SetUpWorkers | None = None,
) -> Iterator[Any]:
    """A ``distributed.Client``: to ``address``; else to a new cluster of batch ``jobs``
    (SLURM, PBS, local jobs), or a new private local cluster, whose start ``told`` hears (a
    progress note listener: "local cluster: 1 of 2 workers ready"); a new cluster is closed on
    exit (its jobs cancelled). ``worker_setup(client, shared)``, a context manager, sets the
    workers up for the caller's work while the client is used (``shared``: the cluster at
    ``address`` outlives it; the engine's registers its worker plugin,
    :func:`oodsim.engine.submitter.set_up_workers`). After
    Ctrl-C or SIGTERM (a ``KeyboardInterrupt``), or an error that ends the run (a lost
    scheduler, whose client logged its own cancelled close with a traceback), it closes
    without a log line (see the module): the run says what happened in one line."""
    disabled = logging.root.manager.disable
    warn_untested()  # the internals oodsim uses are those of the versions it was tested with
    try:
        with _client(address, n_workers, jobs, told) as (client, local):
            try:  # Ctrl-C while the workers set up too (a broadcast cut short logged errors)
                shared = bool(address)
                with worker_setup(client, shared) if worker_setup else contextlib.nullcontext():
                    yield client
            except KeyboardInterrupt:  # the run stops: its work in flight is abandoned
                logging.disable(logging.CRITICAL)
                if local:
                    _abandon(client)  # killed workers print nothing
                raise
            except BaseException:
                _quiet(client, local)
                raise
            else:  # the run is over: closing its own cluster has nothing to tell the user
                if local:
                    _quiet(client, local)
    finally:
        logging.disable(disabled)


def _quiet(client: Any, local: bool) -> None:
    """Silence distributed's logs here and, on oodsim's own cluster, in its workers, before the
    cluster closes, so that a worker losing its scheduler at the close prints no
    ``CommClosedError`` traceback after a run that ended well."""
    logging.disable(logging.CRITICAL)
    if local:  # oodsim's workers end with the cluster: they go quiet too
        # (callback_timeout bounds the call: a busy worker does not hold up the stop)
        with contextlib.suppress(Exception):
            client.run(
                logging.disable,
                logging.CRITICAL,
                on_error="ignore",
                callback_timeout=QUIET_TIMEOUT,
            )


def _abandon(client: Any) -> None:
    """Kill the workers of the run's own local cluster at once (see
    :func:`oodsim.clusters.local_nanny.abandon`), within :data:`ABANDON_TIMEOUT`; a cluster
    that cannot (it is closing already) is closed as usual."""
    # loaded with the cluster (it subclasses distributed's Nanny)
    from oodsim.clusters.local_nanny import abandon

    cluster = getattr(client, "cluster", None)
    if cluster is None:
        return
    try:
        abandon(cluster, ABANDON_TIMEOUT)
    except Exception as error:
        logging.getLogger(__name__).debug("the local workers were not killed: %r", error)


@contextlib.contextmanager
def _client(
    address: str | None, n_workers: int | None, jobs: ClusterSpec | None, told: Listener | None
) -> Iterator[tuple[Any, bool]]:
    """``(client, local)`` of :func:`cluster_client`: ``local`` when the cluster is oodsim's
    local one (its workers are this process's children and write to its terminal)."""
    # distributed loads only when a cluster is needed (cached runs start none)
    from distributed import Client

    if address:
        client = connect_client(address)
        try:
            yield client, False
        finally:  # bounded (Client's own close waits up to 20 s, and raises then)
            with contextlib.suppress(Exception):
                client.close(timeout=SHARED_CLOSE_TIMEOUT)
        return
    if jobs is not None and jobs.is_jobs:
        check_jobs(jobs)
        with job_cluster(jobs) as cluster, Client(cluster) as client:
            yield client, False
        return
    check_main_guard()  # worker processes re-import the script: fail here, in one message
    with _local_cluster(n_workers, told) as cluster, Client(cluster) as client:
        yield client, True
