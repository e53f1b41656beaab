"""Clusters whose workers are batch jobs, through dask-jobqueue: SLURM, PBS, or jobs run as local
processes (``local-jobs``, for tests and CI).

This module knows dask-jobqueue: the cluster class of a kind, the options of its scheduler and
jobs (:func:`cluster_options`), the script a job runs (:func:`job_script`) and the
:class:`JobKeeper` that submits a new job for every one that ended while the run goes on
(preempted, killed, past its walltime). :mod:`oodsim.clusters.cluster` starts and closes the
cluster and turns failures into ``ClusterError``. dask-jobqueue is the optional extra
``[cluster]``; it is imported only when a job cluster is asked for.

Every job cluster is secured like the private local cluster as far as batch jobs allow: TLS
with temporary credentials made for the run (``Security.temporary()``), whose worker copies
dask-jobqueue writes into a folder that only the user can read on a file system the nodes see;
no dashboard; the scheduler's and the workers' HTTP ports on 127.0.0.1. Each job runs one
worker process per core with one thread (torch: one thread, deterministic algorithms, as set by
:mod:`oodsim.engine.work`) under a nanny.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shlex
import signal
import threading
import time
from pathlib import Path
from typing import Any

from oodsim.clusters import nanny
from oodsim.clusters.batch_commands import start_bounded, stop_in_flight
from oodsim.clusters.dask_compat import (
    UNCANCELLED,
    CommandsInOwnSession,
    WorkerInOwnSession,
    correct_state,
)
from oodsim.periodic import Periodic
from oodsim.specs.cluster import ClusterSpec, walltime_seconds

#: How to get dask-jobqueue.
INSTALL = 'pip install "oodsim[cluster]"'
#: dask-jobqueue's cluster class and the batch system's submit command of each job kind.
_CLASSES = {"slurm": "SLURMCluster", "pbs": "PBSCluster", "local-jobs": "LocalCluster"}
SUBMIT_COMMANDS = {"slurm": "sbatch", "pbs": "qsub"}
CANCEL_COMMANDS = {"slurm": "scancel", "pbs": "qdel"}
#: A job's name in the queue (``squeue``, ``qstat``).
JOB_NAME = "oodsim-worker"
#: HTTP ports (Dask opens them even without a dashboard) on loopback only.
LOOPBACK_HTTP = "127.0.0.1:0"
#: Seconds between two checks of the :class:`JobKeeper`.
KEEP_INTERVAL = 1.0
#: A job's workers retire this long before its walltime at most (a tenth of a shorter one).
RETIRE_BEFORE = 300.0
#: Where the run's temporary TLS credentials go without ``[cluster] shared_directory``.
DEFAULT_SHARED = "~/.oodsim/cluster"
#: Where the scheduler of a job script shown by :func:`job_script` would be.
SCHEDULER_PLACEHOLDER = "tls://SCHEDULER-HOST:PORT"

logger = logging.getLogger(__name__)


def cluster_class(kind: str) -> Any:
    """dask-jobqueue's cluster class of a job kind; ImportError without dask-jobqueue."""
    handler = signal.getsignal(signal.SIGINT)
    try:
        # the optional extra [cluster]: imported only when a job cluster is asked for
        import dask_jobqueue
        from dask_jobqueue.local import LocalCluster
    finally:
        # importing dask_jobqueue (its runner module) makes Ctrl-C call sys.exit(), which
        # exits with 0 and says nothing; it stays a KeyboardInterrupt: oodsim then says what
        # is in the store and exits with 130
        main = threading.current_thread() is threading.main_thread()
        if main and handler is not None and signal.getsignal(signal.SIGINT) is not handler:
            signal.signal(signal.SIGINT, handler)
    return LocalCluster if kind == "local-jobs" else getattr(dask_jobqueue, _CLASSES[kind])


@functools.cache
def job_class(kind: str) -> Any:
    """dask-jobqueue's job class of a kind, with the processes it starts in a session of their
    own. A terminal sends Ctrl-C to every process of its session: it killed an ``sbatch`` that
    had submitted its job before dask-jobqueue read the job's id (a job that nobody cancels),
    or a ``scancel`` as the run closed, and a local job's worker as it started (a traceback
    after the resume line). The run stops its jobs itself. ImportError without dask-jobqueue."""
    base = cluster_class(kind).job_cls
    own = (WorkerInOwnSession,) if kind == "local-jobs" else (CommandsInOwnSession,)
    return type(base.__name__, (*own, base), {"__module__": __name__})


def cancel_now(cluster: Any) -> list[str]:
    """Cancel every job of ``cluster`` without waiting for the batch system: a run that ends at
    once (:func:`oodsim.clusters.signals.end_at_once`, in a signal handler) would otherwise leave
    its jobs queued or running. The batch system's cancel command (``scancel``, ``qdel``)
    starts in a session of its own and is left to finish (killed after
    :data:`~oodsim.clusters.batch_commands.SUBMIT_TIMEOUT` seconds); a local job's worker is sent
    SIGTERM (it closes itself and its own worker process). The ids of the jobs cancelled."""
    jobs = list(cluster.workers.values())
    ids = [str(job.job_id) for job in jobs if getattr(job, "job_id", None)]
    command = getattr(cluster.job_cls, "cancel_command", None)
    if command and ids:
        start_bounded([*shlex.split(command), *ids])
    elif command is None:  # local jobs: the job's id is its worker's process id
        for job_id in ids:
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(job_id), signal.SIGTERM)
    return ids


#: How to list, and to cancel, the jobs of a batch system that carry the run's job name.
BY_NAME = {
    "slurm": (f"squeue --me --name {JOB_NAME}", f"scancel --me --name {JOB_NAME}"),
    "pbs": (f"qselect -u $USER -N {JOB_NAME}", f"qdel $(qselect -u $USER -N {JOB_NAME})"),
}


def end_now(cluster: Any | None, kind: str) -> str | None:
    """End ``cluster``'s jobs without waiting (a run that ends at once): kill the batch
    commands in flight (a submission that does not answer, a cancel that hangs), send the
    cancel of every job submitted and not confirmed cancelled (:func:`cancel_now`, and
    :data:`UNCANCELLED` for jobs a closing cluster no longer lists; ``cluster`` None: not
    made yet), and return the line that says which submissions may still be queued and how
    to cancel them (None where nothing can be: local jobs). It neither waits nor takes locks
    (:func:`oodsim.clusters.signals.ended_with`)."""
    uncancelled = set(UNCANCELLED)  # before the kills below: a killed cancel confirms nothing
    stopped = stop_in_flight()
    ids = [] if cluster is None else cancel_now(cluster)
    if kind not in BY_NAME:
        return None
    rest = sorted(uncancelled - set(ids), key=lambda job_id: (len(job_id), job_id))
    if rest:  # jobs the cluster no longer lists (its close has begun): cancelled too
        start_bounded([*shlex.split(CANCEL_COMMANDS[kind]), *rest])
        ids += rest
    submit = SUBMIT_COMMANDS[kind]
    unanswered = [command for command in stopped if Path(command[0]).name == submit]
    if not unanswered and not ids:
        return None
    told = []
    if unanswered:
        many = len(unanswered) > 1
        told.append(
            f"{len(unanswered)} `{submit}` had not answered and {'were' if many else 'was'} "
            f"killed ({'each' if many else 'it'} may have queued a job oodsim never heard of)"
        )
    if ids:
        jobs = "job" if len(ids) == 1 else "jobs"
        told.append(f"the cancel of {jobs} {', '.join(ids)} was sent, not confirmed")
    listing, cancelling = BY_NAME[kind]
    return (
        f"oodsim: jobs of this run may still be queued: {'; '.join(told)}. List them with "
        f"`{listing}`; cancel them with `{cancelling}`"
    )


def _config_name(kind: str) -> str:
    return "local" if kind == "local-jobs" else kind


def _absolute(path: str | None) -> str | None:
    """A folder as an absolute path: a job may start elsewhere (PBS: in the home folder)."""
    return None if path is None else str(Path(path).expanduser().absolute())


def job_options(spec: ClusterSpec) -> dict[str, Any]:
    """The options of one job (dask-jobqueue's ``Job`` keywords) that oodsim sets; every other
    one comes from dask-jobqueue's configuration (``~/.config/dask/jobqueue.yaml``)."""
    # dask's configuration: only when a job cluster is asked for
    import dask.config

    config = _config_name(spec.kind)
    extra_args = list(dask.config.get(f"jobqueue.{config}.worker-extra-args", None) or [])
    options: dict[str, Any] = {
        "cores": spec.cores,
        "memory": spec.memory,
        "processes": spec.worker_processes,
        "nanny": True,  # restarts a worker that died; sets OMP_NUM_THREADS=1 and friends
        "python": spec.python,
        "interface": spec.interface or ("lo" if spec.kind == "local-jobs" else None),
        "log_directory": _absolute(spec.log_directory),
        "job_name": JOB_NAME,
        # no dashboard; the worker's HTTP port (health, metrics) on loopback only
        "worker_extra_args": [
            *extra_args,
            "--no-dashboard",
            "--dashboard-address",
            LOOPBACK_HTTP,
            # workers keep glibc's default memory trimming (torch trains 2x faster)
            "--preload-nanny",
            nanny.PRELOAD,
        ],
    }
    if spec.kind != "local-jobs":  # the local backend runs the worker command without a shell
        options["worker_extra_args"] += lifetime_args(spec.walltime)
        options |= {
            "queue": spec.queue,
            "walltime": spec.walltime,
            "account": spec.account,
            "job_script_prologue": list(spec.prologue) or None,
            "job_extra_directives": list(spec.job_extra) or None,
        }
    return options


def lifetime_args(walltime: str | None) -> list[str]:
    """``dask worker`` options that end a job's workers before its ``walltime`` (``HH:MM:SS``)
    ends the job: ``--lifetime`` of the walltime less :data:`RETIRE_BEFORE` (a tenth of a
    shorter walltime), and ``--lifetime-stagger`` of half that margin, so that jobs started
    together do not all end at once. The workers and their nanny close gracefully, the job
    ends, and :class:`JobKeeper` submits it again. None without a walltime of the spec's own
    (dask-jobqueue's configured one is the batch system's to enforce)."""
    if walltime is None:
        return []
    total = walltime_seconds(walltime)
    margin = min(RETIRE_BEFORE, total / 10)
    return ["--lifetime", f"{int(total - margin)}s", "--lifetime-stagger", f"{int(margin / 2)}s"]


def cluster_options(spec: ClusterSpec, security: Any, shared: str | Path) -> dict[str, Any]:
    """Every keyword of the cluster class: the job's options, TLS with ``security`` (whose
    worker credentials dask-jobqueue writes into ``shared``) and a scheduler without a
    dashboard (on ``interface`` when given, else on every interface: TLS keeps it closed)."""
    return {
        **job_options(spec),
        "job_cls": job_class(spec.kind),
        "security": security,
        "protocol": "tls://",
        "shared_temp_directory": str(shared),
        "scheduler_options": {"dashboard": False, "dashboard_address": LOOPBACK_HTTP},
        "silence_logs": "error",
    }


def job_script(spec: ClusterSpec) -> str:
    """The script a job of ``spec`` runs, as it would be submitted, except that the
    scheduler's address and the credential files are placeholders (nothing is started or
    written). ImportError without dask-jobqueue."""
    # distributed loads only when a cluster is needed (cached runs start none)
    from distributed.security import Security

    folder = f"{spec.shared_directory or DEFAULT_SHARED}/oodsim-tls-XXXX"
    security = Security(
        tls_ca_file=f"{folder}/ca.pem",
        tls_worker_cert=f"{folder}/worker.pem",
        tls_worker_key=f"{folder}/worker.key",
    )
    job = job_class(spec.kind)(
        SCHEDULER_PLACEHOLDER,
        name=JOB_NAME,
        protocol="tls://",
        security=security,
        **job_options(spec),
    )
    return job.job_script()


async def submit_jobs(cluster: Any, n_jobs: int) -> None:
    """Submit ``n_jobs`` jobs now, on the cluster's event loop: a job that the batch system
    refuses raises here (``scale`` alone would only log it, and the run would wait forever)."""
    # distributed loads only when a cluster is needed (cached runs start none)
    from distributed.core import Status

    try:
        # one job first: a refusal is then one error, not one more unretrieved per job
        for jobs in dict.fromkeys((1, n_jobs)):
            # what scale(jobs=) does, without the reconciliation it schedules (which would
            # log the same refusal once more)
            while len(cluster.worker_spec) < jobs:
                cluster.worker_spec.update(cluster.new_worker_spec())
            await correct_state(cluster)  # start what it lacks
    except BaseException:
        for job in cluster.workers.values():  # refused: never started, nothing to cancel
            if job.status == Status.created:
                job.status = Status.failed  # what closing the cluster expects of such a job
        raise


def forget_credentials(cluster: Any) -> None:
    """Close (and so delete) the files in which dask-jobqueue wrote the workers' temporary
    credentials (it keeps them open as ``_job_<part>`` attributes for the cluster's life)."""
    for name, value in list(vars(cluster).items()):
        if name.startswith("_job_") and callable(getattr(value, "close", None)):
            with contextlib.suppress(OSError):
                value.close()


class JobKeeper(Periodic):
    """Keeps ``n_jobs`` jobs: a job whose workers all left (preempted, killed, past its
    walltime) is closed and submitted again while the run goes on.

    A job counts as gone once it had workers and none of them has been seen for
    ``lost_after`` seconds (twice distributed's ``deploy.lost-worker-timeout``, so that a
    worker that its nanny restarts or that reconnects is not replaced). A job still waiting in
    the queue, or one that never started a worker, is left alone: its replacement would fail
    the same way. Their tasks need no care: the scheduler gives the tasks of a lost worker to
    the others (distributed gives up on a task after ``scheduler.allowed-failures`` deaths).
    """

    thread_name = "oodsim-job-keeper"

    def __init__(self, cluster: Any, lost_after: float | None = None) -> None:
        # distributed loads only when a cluster is needed (cached runs start none)
        import dask.config
        from dask.utils import parse_timedelta

        if lost_after is None:
            timeout = dask.config.get("distributed.deploy.lost-worker-timeout")
            lost_after = 2 * float(parse_timedelta(timeout, default="s"))
        self.cluster, self.lost_after = cluster, lost_after
        self.seen: set[str] = set()  # jobs whose workers were seen
        self.missing: dict[str, float] = {}  # job → when its workers were last all gone
        self.replaced = 0
        super().__init__(KEEP_INTERVAL)

    def tick(self) -> None:
        try:
            self.check()
        except Exception as error:  # a failed check must not end the run; the next retries
            logger.warning("oodsim: could not check the cluster's jobs: %s", error)

    def check(self) -> None:
        """Close and submit again the jobs that are gone (see the class docstring)."""
        cluster = self.cluster
        workers = cluster.scheduler_info.get("workers", {}).values()
        alive = {str(worker.get("name")) for worker in workers}
        now = time.monotonic()
        lost, closed = [], []
        for name, spec in list(cluster.worker_spec.items()):
            members = {f"{name}{suffix}" for suffix in spec.get("group", [""])}
            if members & alive:
                self.seen.add(name)
                self.missing.pop(name, None)
            elif name in self.seen:
                gone_for = now - self.missing.setdefault(name, now)
                if name not in cluster.workers:  # distributed closed it (a one-worker job)
                    closed.append(name)
                elif gone_for >= self.lost_after:
                    lost.append(name)
        if not (lost or closed):
            return
        for name in [*lost, *closed]:
            self.missing.pop(name, None)
        self.replaced += len(lost) + len(closed)
        logger.info("oodsim: jobs %s ended; submitting them again", sorted(lost + closed))
        try:
            cluster.sync(_replace, cluster, lost)
        finally:  # only now: until its new job is in, the JobWatch leaves it alone
            self.seen.difference_update([*lost, *closed])


async def _replace(cluster: Any, lost: list[str]) -> None:
    """Close the jobs ``lost`` (``scancel``; already gone is fine) and submit a job for every
    one the cluster should have and does not (dask-jobqueue's own reconciliation)."""
    for name in lost:
        job = cluster.workers.pop(name, None)
        if job is not None:
            with contextlib.suppress(Exception):  # the job may be gone from the queue already
                await job.close()
    await correct_state(cluster)  # start what the spec lacks
