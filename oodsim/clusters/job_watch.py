"""Watching a job cluster's own jobs while it has no worker: a run whose SLURM or PBS jobs will
never give one stops with ``ClusterError`` instead of waiting forever.

Batch clusters have no ``worker_timeout`` by default (a job may queue for hours), so a run whose
jobs had all failed (a prologue or ``python`` that fails, a job script that exits at once), or
that SLURM holds for a reason that never clears (``PartitionConfig``: more cores than a node
has), would wait forever, its status line saying ``no worker yet``. While the cluster has no
worker, :class:`JobWatch` asks the batch system about the run's jobs (by their ids) every
:data:`LOOK_EVERY` seconds, the first time after :data:`FIRST_LOOK` seconds (each command
bounded by :data:`COMMAND_TIMEOUT`; a missing or failing command is no answer, and the run
waits). It gives its verdict when no job can give a worker any more: each has ended without a
worker ever joining (the :class:`~oodsim.clusters.jobqueue.JobKeeper` resubmits only jobs that
had workers) or waits for a reason that never clears. :func:`~oodsim.engine.waiting.as_landed`
raises it; closing the cluster then cancels every job. The reading of the commands' output is
:mod:`oodsim.clusters.job_states`.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from oodsim.clusters.batch_commands import run_bounded
from oodsim.clusters.job_states import (
    JobState,
    parse_qstat,
    parse_sacct,
    parse_squeue,
    qstat_command,
    sacct_command,
    squeue_command,
)
from oodsim.periodic import Periodic
from oodsim.specs.cluster import ClusterSpec

#: seconds without any worker before the first look at the jobs
FIRST_LOOK = 10.0
#: seconds between two looks while the cluster still has no worker
LOOK_EVERY = 30.0
#: seconds a command of the batch system may take (a slow controller is no answer)
COMMAND_TIMEOUT = 20.0
#: seconds between two checks of whether the cluster has a worker
TICK = 1.0
#: the states of a job still waiting in the queue (SLURM's; PBS's queued, held, waiting)
WAITING = frozenset({"PENDING", "Q", "H", "W"})
#: the queue command of each batch system, for the status line
QUEUE_COMMANDS = {"slurm": "squeue", "pbs": "qstat"}

#: scheduler address → the watch of a job cluster of this process (read by ``as_landed``)
WATCHES: dict[str, JobWatch] = {}

logger = logging.getLogger(__name__)


def watch_of(client: Any) -> JobWatch | None:
    """The :class:`JobWatch` of the job cluster that ``client`` is connected to, if any."""
    try:
        return WATCHES.get(client.scheduler.address)
    except AttributeError:  # not a Dask client (tests' fakes)
        return None


def _run(command: list[str]) -> subprocess.CompletedProcess | None:
    """``command``'s answer, or None when it is missing, fails to start or takes over
    :data:`COMMAND_TIMEOUT` seconds (then it is killed with its process group). It runs in a
    session of its own (a terminal's Ctrl-C is the driver's), in the C locale."""
    done = run_bounded(command, COMMAND_TIMEOUT, env={**os.environ, "LC_ALL": "C"})
    if done is None:
        logger.debug("oodsim: %s gave no answer in %g s", command[0], COMMAND_TIMEOUT)
    return done


def job_states(kind: str, ids: Sequence[str]) -> dict[str, JobState] | None:
    """What the batch system of ``kind`` says of the jobs ``ids`` (every one of them, for
    SLURM; those it knows of, for PBS), or None without an answer. SLURM's jobs that ``squeue``
    no longer lists are named by ``sacct`` where accounting is on."""
    if kind == "slurm":
        done = _run(squeue_command(ids))
        if done is None:
            return None
        states = parse_squeue(ids, done.returncode, done.stdout, done.stderr)
        forgotten = [i for i, s in (states or {}).items() if not s.state]
        if states and forgotten and (accounted := _run(sacct_command(forgotten))) is not None:
            states |= parse_sacct(forgotten, accounted.returncode, accounted.stdout)
        return states
    if kind == "pbs":
        done = _run(qstat_command(ids))
        return None if done is None else parse_qstat(ids, done.stdout, done.stderr)
    return None


class JobWatch(Periodic):
    """The watch of a job cluster's jobs (see the module). ``verdict``: the one-line reason to
    stop, once there is one; ``hint``: what the status line says while there is no worker.
    ``seen``: the names of the jobs whose workers joined (the keeper's, which resubmits
    those)."""

    thread_name = "oodsim-job-watch"
    # a run that ends does not wait for a look in progress (a slow squeue: up to
    # COMMAND_TIMEOUT); the thread ends with that look
    join_timeout = 1.0

    def __init__(self, cluster: Any, spec: ClusterSpec, seen: Collection[str]) -> None:
        self.cluster, self.kind, self.seen = cluster, spec.kind, seen
        folder = spec.log_directory
        self.log_directory = str(Path(folder).expanduser().absolute()) if folder else None
        self.queue = QUEUE_COMMANDS.get(spec.kind)
        self.verdict: str | None = None
        self.hint = self._first_hint()
        self.idle_since: float | None = None
        self.looked = -float("inf")
        super().__init__(TICK)

    def __enter__(self) -> JobWatch:
        WATCHES[self.cluster.scheduler_address] = self
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        WATCHES.pop(self.cluster.scheduler_address, None)

    def tick(self) -> None:
        try:
            self.check(time.monotonic())
        except Exception as error:  # a failed look must not end the run; the next retries
            if not self._stop.is_set():  # (a look that outlived the cluster says nothing)
                logger.warning("oodsim: could not ask about the cluster's jobs: %s", error)

    def check(self, now: float) -> None:
        """Look at the jobs when the cluster has had no worker long enough (see the module)."""
        if self.verdict is not None or self.queue is None:
            return
        if self.cluster.scheduler_info.get("workers"):
            self.idle_since = None
            self.hint = self._first_hint()
            return
        if self.idle_since is None:
            self.idle_since = now
        if now - self.idle_since < FIRST_LOOK or now - self.looked < LOOK_EVERY:
            return
        self.looked = now
        jobs = self._jobs()
        if not jobs:
            return
        ids = list(jobs.values())
        states = job_states(self.kind, ids)
        if not states:
            return
        self.hint = self._hint(ids, states)
        known = [states[i] for i in ids if i in states]
        if len(known) < len(ids) or self._jobs() != jobs or self._resubmitted(jobs):
            return
        if self.cluster.scheduler_info.get("workers"):  # one joined meanwhile
            return
        if all(s.ended or s.never for s in known):
            self.verdict = self._verdict(known)

    def _jobs(self) -> dict[str, str]:
        """Each job of the cluster by name, its batch id; nothing while one is submitted."""
        jobs = {name: job.job_id for name, job in list(self.cluster.workers.items())}
        return {} if not all(jobs.values()) else {n: str(i) for n, i in jobs.items()}

    def _resubmitted(self, jobs: dict[str, str]) -> bool:
        """Whether a job of the cluster's will be submitted (again): one the cluster should
        have and has not, or one whose workers joined (the keeper resubmits it once they are
        gone)."""
        return bool(set(self.cluster.worker_spec) - set(jobs) or set(jobs) & set(self.seen))

    def _logs(self, ids: Sequence[str]) -> str:
        """Where the jobs ``ids`` write their output (dask-jobqueue's names in
        ``log_directory``; else the batch system's own, in the folder they were submitted
        from)."""
        if self.kind == "slurm":
            names = [f"oodsim-worker-{i}.err" for i in ids] if self.log_directory else []
            names = names or [f"slurm-{i}.out" for i in ids]
        else:
            names = [f"oodsim-worker.e{i}" for i in ids]  # PBS: the job's stderr
        folder = self.log_directory or f"{os.getcwd()} (set [cluster] log_directory)"
        return f"{', '.join(names)} in {folder}"

    def _first_hint(self) -> str:
        """What the status line says before a look (and of local jobs, which have no queue
        and write no logs: their worker's output comes to the driver)."""
        if self.queue is None:
            return "the local jobs' workers have not connected"
        where = f"see their logs in {self.log_directory}" if self.log_directory else ""
        return (
            f"the {self.kind} jobs may be queued ({self.queue}) or failing{where and ': '}{where}"
        )

    def _hint(self, ids: Sequence[str], states: dict[str, JobState]) -> str:
        """What the status line says after a look: each job's state, and where the logs of
        those that started are."""
        told = [states[i] for i in ids if i in states]
        said = ", ".join(f"{s.job_id} {s.describe()}" for s in told)
        started = [s.job_id for s in told if s.state not in WAITING]
        logs = f"; their logs: {self._logs(started)}" if started else ""
        return f"{self.queue} says of the {self.kind} jobs: {said}{logs}"

    def _verdict(self, states: list[JobState]) -> str:
        ids = [s.job_id for s in states]
        named = ", ".join(f"{s.job_id} {s.describe()}" for s in states)
        never = [s for s in states if s.never]
        system = "SLURM" if self.kind == "slurm" else "PBS"
        if never:
            return (
                f"the {self.kind} jobs of the run can never start as submitted: {system} holds "
                f"them for a reason that does not clear by waiting ({named}): the [cluster] "
                "table asks for more than the queue, partition, account or QOS allows per job "
                "(cores, memory, walltime, queue, account, job_extra); oodsim cancelled them. "
                "Finished work is cached: fix the table and run again to resume"
            )
        return (
            f"every {self.kind} job of the run ended without a worker joining it ({named}), "
            f"and none is left to give one: their logs: {self._logs(ids)} (a prologue or "
            "python that fails, a job script that exits at once). Finished work is cached: "
            "fix the [cluster] table and run again to resume"
        )
