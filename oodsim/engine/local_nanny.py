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
"""

from __future__ import annotations

import logging

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
