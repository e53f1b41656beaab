"""Every use of distributed's and dask-jobqueue's internals, in one module: the private
methods oodsim overrides or calls, and the versions they were tested with.

- :class:`CommandsInOwnSession` and :class:`WorkerInOwnSession` override dask-jobqueue's
  ``Job._call``, ``_job_id_from_submit_output``, ``_close_job``, ``LocalJob._submit_job`` and a
  local job's ``close``: batch commands bounded in time and in a session of their own, a local
  job's worker too, closed even before its id is known.
- :func:`correct_state` calls distributed's ``SpecCluster._correct_state`` (start what the spec
  lacks), which ``scale`` would schedule with a reconciliation oodsim does not want.
- :func:`worker_os_process` reads the operating system's process of a nanny's worker.

:func:`untested_versions` says where the installed versions are outside :data:`TESTED`
(pyproject bounds them too); :mod:`oodsim.clusters.jobqueue` and the local nanny import these
names, nothing else in oodsim touches a private name of either package (a test greps).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import signal
import warnings
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from oodsim.clusters.batch_commands import Unanswered, call_bounded

#: The versions of each package these overrides were written for and tested with: the oldest
#: and the newest (the bounds in pyproject.toml).
TESTED = {"distributed": ("2024.1", "2026.8.0"), "dask-jobqueue": ("0.8", "0.9.0")}


def _release(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split("."):
        digits = "".join(c for c in part if c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def untested_versions() -> list[str]:
    """One line for each installed package of :data:`TESTED` outside its tested versions."""
    lines = []
    for package, (oldest, newest) in TESTED.items():
        try:
            installed = version(package)
        except PackageNotFoundError:
            continue
        if not _release(oldest) <= _release(installed)[: len(_release(newest))] <= _release(newest):
            lines.append(
                f"{package} {installed} is outside the versions oodsim was tested with "
                f"({oldest} to {newest})"
            )
    return lines


@functools.cache
def warn_untested() -> None:
    """Warn once a process (the first cluster) for each package outside its tested versions."""
    for line in untested_versions():
        warnings.warn(line, UntestedVersionWarning, stacklevel=3)


class UntestedVersionWarning(UserWarning):
    """distributed or dask-jobqueue is outside the versions oodsim's overrides were tested with."""


async def correct_state(cluster: Any) -> None:
    """distributed's ``SpecCluster._correct_state``: start the workers (jobs) the spec has and
    the cluster lacks, close those it no longer has."""
    await cluster._correct_state()


def worker_os_process(nanny: Any) -> Any:
    """The operating system's process (``multiprocessing``'s) of ``nanny``'s worker: its
    ``WorkerProcess.process``; None before it exists."""
    worker = getattr(nanny, "process", None)
    return None if worker is None else getattr(worker, "process", None)


class CommandsInOwnSession:
    """A job whose batch commands (``sbatch``, ``scancel``, ``qsub``, ``qdel``) run in a
    session of their own, each killed with its process group after
    :data:`~oodsim.clusters.batch_commands.SUBMIT_TIMEOUT` seconds."""

    @staticmethod
    async def _call(cmd: list[str], *, shell: bool = False, **kwargs: Any) -> str:
        return await call_bounded(cmd, shell=shell, **kwargs)

    def _job_id_from_submit_output(self, out: str) -> str:
        job_id = super()._job_id_from_submit_output(out)  # type: ignore[misc]
        UNCANCELLED.add(str(job_id))
        return job_id

    @classmethod
    async def _close_job(cls, job_id: str | None, cancel_command: str) -> None:
        """dask-jobqueue's (0.9), which also keeps :data:`UNCANCELLED` true."""
        if not job_id:
            return
        try:
            await cls._call([*shlex.split(cancel_command), job_id])
        except Unanswered:  # not confirmed: the job may still be queued
            return
        except RuntimeError:  # the batch system no longer knows the job: it is gone
            pass
        UNCANCELLED.discard(str(job_id))


#: The batch jobs this process submitted whose cancel the batch system has not confirmed (a run
#: that ends at once names them, :func:`oodsim.clusters.jobqueue.end_now`).
UNCANCELLED: set[str] = set()


class WorkerInOwnSession:
    """A local job whose worker runs in a session of its own: dask-jobqueue's
    ``LocalJob._submit_job`` (0.9), with ``start_new_session``."""

    process: Any
    job_id: str | None

    async def _submit_job(self, script_filename: str) -> str:
        # a local job's class exists, so dask-jobqueue (and tornado) are installed
        from tornado.process import Subprocess

        with open(script_filename) as script:
            command = script.read().strip().split()
        stream = Subprocess.STREAM
        self.process = Subprocess(command, stdout=stream, stderr=stream, start_new_session=True)
        lines = []
        while True:  # until the worker has registered, or says that it failed
            line = await self.process.stderr.read_until(b"\n")
            lines.append(line.decode())
            if b"Registered to:" in line:
                return str(self.process.pid)
            if b"error" in line.lower():
                raise RuntimeError("Worker failed\n\n" + "".join(lines))

    async def close(self) -> None:
        """dask-jobqueue's ``Job.close`` with ``LocalJob._close_job`` (0.9), also for a job
        closed while its worker starts (no id yet: their ``int(None)`` stopped the run) or
        after it ended: the worker's session is killed, if there is one."""
        process = getattr(self, "process", None)
        pid = int(self.job_id) if self.job_id else getattr(process, "pid", None)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # the worker leads a session of its own
