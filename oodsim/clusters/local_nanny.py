"""The nanny of oodsim's local clusters: Dask's, but a worker process that has not started
is killed when the nanny stops it, instead of being waited for.

oodsim's local cluster bounds each start of a worker process (Dask's ``death_timeout``,
``LOCAL_START_TIMEOUT`` of :mod:`oodsim.clusters.cluster`): a process that hangs as it starts
(stopped with SIGSTOP, stuck on a file system, swapped out) would otherwise hold
``LocalCluster(...)``, or a nanny restarting its worker, forever. When that bound runs out, or
the cluster closes while a worker process starts, distributed's nanny cannot stop the process:
it waits for the start to end (forever, when it closes meanwhile), or, once the start has been
given up, fails with ``AssertionError: Status.starting`` and forgets the process, which then
outlives the run (a stopped one held the driver's exit forever: multiprocessing joins its
children at exit). A process that has not started has nothing to save, so :class:`LocalNanny`
kills it (SIGKILL, which acts on a stopped process too) and then stops as Dask's nanny does.

A nanny whose restarted worker does not start within that bound closes for good; distributed
logs it as ``Timed out connecting Nanny … to scheduler`` and ``Failed to restart worker after
its process exited`` with a 40-line traceback, in the middle of the run's status lines. The run
says what it means itself (the status line's "no worker", then a ``ClusterError`` if no worker
is left), so :func:`quiet_given_up_starts` leaves those two logs to ``--debug``.

A run stopped by Ctrl-C, SIGTERM or SIGHUP abandons the work in flight: :func:`abandon` kills
every worker process of the cluster at once. Dask's close asks each worker to finish its task
first and kills it only after 4 s (``Nanny.close``'s 5 s timeout, times 0.8): a Ctrl-C of the
README's run exited 4 to 10 s after its resume line. Nothing is lost by killing: a worker
writes each store entry into a temporary sibling and renames it into place, so an entry is
whole or absent, a lock of a dead process is stale (taken over by the next run), and
``oodsim cache gc`` removes the temporary leftovers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any, ClassVar

from distributed import Nanny
from distributed.core import Status

from oodsim.clusters.dask_compat import worker_os_process
from oodsim.clusters.quiet_logs import DroppedUnlessDebug, install

#: distributed's logger of the nannies, which run in the driver's process
LOGGER = "distributed.nanny"


class StartTold:
    """Tells a listener of progress notes (:mod:`oodsim.progress_notes`'s messages, the status
    line's ``Progress.heard``) how the start of a local cluster of ``n`` workers goes: "local
    cluster: starting 2 workers", then "local cluster: 1 of 2 workers ready" as each worker has
    registered, and nothing once :meth:`started` (a worker that its nanny restarts later is not
    news)."""

    def __init__(self, told: Callable[[dict[str, Any]], None], n: int) -> None:
        self.told, self.n = told, n
        self.ready = 0
        self.done = False
        self._lock = threading.Lock()  # the nannies start on the cluster's event loop

    def starting(self) -> None:
        self._say(f"starting {self.n} worker{'s' * (self.n != 1)}")

    def one_ready(self) -> None:
        with self._lock:
            self.ready += 1
            ready = self.ready
        self._say(f"{ready} of {self.n} workers ready")

    def started(self) -> None:
        self.done = True

    def _say(self, stage: str) -> None:
        if not self.done:
            with contextlib.suppress(Exception):  # the status line is never worth a failed start
                self.told({"task": "local cluster", "stage": stage})


class LocalNanny(Nanny):
    """Dask's :class:`~distributed.Nanny`, whose :meth:`kill` kills a worker process that
    has not started (see the module), and which says when its worker is ready
    (:meth:`telling`)."""

    #: told when this class's workers are ready (a class of :meth:`telling`), else None
    start_told: ClassVar[StartTold | None] = None

    @classmethod
    def telling(cls, told: StartTold) -> type[LocalNanny]:
        """This class, whose nannies tell ``told`` when their worker is ready."""
        return type(cls.__name__, (cls,), {"start_told": told, "__module__": __name__})

    async def start_unsafe(self) -> Any:
        started = await super().start_unsafe()
        if self.start_told is not None and self.process is not None:
            self.start_told.one_ready()
        return started

    async def kill(self, timeout: float = 5, reason: str = "nanny-kill") -> None:
        worker = self.process  # distributed's WorkerProcess: its start and its OS process
        process = worker_os_process(self)
        if worker is not None and process is not None and worker.status == Status.starting:
            await process.kill()  # queued after the start: the process exists by then
            await process.join(timeout)  # its exit marks the worker stopped
        await super().kill(timeout=timeout, reason=reason)

    async def abandon(self, timeout: float) -> None:
        """Kill the worker process now (SIGKILL: a stopped one too), without a restart: the
        nanny then closes itself (Dask's ``close_gracefully``, which a cluster's close also
        uses). Waits up to ``timeout`` seconds for the process to end."""
        self.close_gracefully(reason="run-interrupted")
        process = getattr(self.process, "process", None)  # WorkerProcess → its OS process
        if process is not None and process.pid is not None:
            with contextlib.suppress(ValueError):  # closed meanwhile: it has ended
                await process.kill()
                await process.join(timeout)


def kill_now(cluster: Any) -> None:
    """SIGKILL the worker processes of ``cluster`` from this thread, without waiting: for a
    run that ends at once (:func:`oodsim.clusters.signals.end_at_once`), in a signal handler."""
    for nanny in list(cluster.workers.values()):
        pid = getattr(nanny, "pid", None)
        if pid:
            with contextlib.suppress(OSError):  # ended meanwhile
                os.kill(pid, signal.SIGKILL)


async def _abandon_all(cluster: Any, timeout: float) -> None:
    nannies = [w for w in list(cluster.workers.values()) if isinstance(w, LocalNanny)]
    await asyncio.gather(*(nanny.abandon(timeout) for nanny in nannies))


def abandon(cluster: Any, timeout: float) -> None:
    """Kill the worker processes of ``cluster`` (a local cluster of :class:`LocalNanny`) at
    once, from the driver's thread, waiting up to ``timeout`` seconds (see the module): their
    work is abandoned. The cluster's close then has only its scheduler left to close."""
    cluster.sync(_abandon_all, cluster, timeout, callback_timeout=timeout)


class _GivenUpStarts(DroppedUnlessDebug):
    """Drops distributed's logs of a worker start that a :class:`LocalNanny` gave up (see the
    module), unless ``--debug``."""

    def drops(self, record: logging.LogRecord) -> bool:
        if record.msg == "Timed out connecting Nanny '%s' to scheduler '%s'":
            return bool(record.args) and isinstance(record.args[0], LocalNanny)
        error = record.exc_info[1] if record.exc_info else None
        restart = record.msg == "Failed to restart worker after its process exited"
        return restart and isinstance(error, TimeoutError)


def quiet_given_up_starts() -> None:
    """Install :class:`_GivenUpStarts` on distributed's nanny logger of this process, once."""
    install(LOGGER, _GivenUpStarts)
