"""The nanny of oodsim's local clusters: Dask's, but a worker process that has not started
is killed when the nanny stops it, instead of being waited for.

oodsim's local cluster bounds each start of a worker process (Dask's ``death_timeout``,
``LOCAL_START_TIMEOUT`` of :mod:`oodsim.engine.cluster`): a process that hangs as it starts
(stopped with SIGSTOP, stuck on a file system, swapped out) used to hold ``LocalCluster(...)``,
or a nanny restarting its worker, forever. When that bound runs out, or the cluster closes
while a worker process starts, distributed's nanny cannot stop the process: it waits for the
start to end (forever, when it closes meanwhile), or, once the start has been given up, fails
with ``AssertionError: Status.starting`` and forgets the process, which then outlives the run
(a stopped one held the driver's exit forever: multiprocessing joins its children at exit).
A process that has not started has nothing to save, so :class:`LocalNanny` kills it
(SIGKILL, which acts on a stopped process too) and then stops as Dask's nanny does.

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
from typing import Any

from distributed import Nanny
from distributed.core import Status

from oodsim.engine.quiet_logs import DroppedUnlessDebug, install

#: distributed's logger of the nannies, which run in the driver's process
LOGGER = "distributed.nanny"


class LocalNanny(Nanny):
    """Dask's :class:`~distributed.Nanny`, whose :meth:`kill` kills a worker process that
    has not started (see the module)."""

    async def kill(self, timeout: float = 5, reason: str = "nanny-kill") -> None:
        worker = self.process  # distributed's WorkerProcess: its start and its OS process
        process = getattr(worker, "process", None)
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
    run that ends at once (:func:`oodsim.engine.signals.end_at_once`), in a signal handler."""
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
