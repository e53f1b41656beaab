"""A cluster whose workers are batch jobs (SLURM, PBS, local jobs: a ``[cluster]`` table):
the checks before any compute (:func:`check_jobs`), and the cluster itself
(:func:`job_cluster`), secured with TLS and temporary credentials that lie in a folder every
node sees while the run lasts. dask-jobqueue's side (options, job scripts, the keeper that
resubmits lost jobs) is :mod:`oodsim.clusters.jobqueue`; what the batch system says of the jobs,
:mod:`oodsim.clusters.job_watch`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from oodsim.clusters import jobqueue, signals
from oodsim.clusters.dask_settings import LIGHT_MONITORING, NO_HTTP_ROUTES, unless_configured
from oodsim.clusters.job_watch import JobWatch
from oodsim.errors import ClusterError, SpecError
from oodsim.specs.cluster import ClusterSpec

#: the name of a run's folder of TLS credentials in ``shared_directory`` begins with this,
#: then ``<host>-<pid>-``: a later run on that host removes the folder of a run that died
#: without its cleanup (SIGKILL, a crash), whose private keys would lie there for good
TLS_PREFIX = "oodsim-tls-"


def check_jobs(spec: ClusterSpec) -> None:
    """Before any compute: a job cluster needs dask-jobqueue and its batch system's submit
    command (``sbatch``, ``qsub``) on ``PATH``; :class:`ClusterError` in one line otherwise."""
    try:
        jobqueue.cluster_class(spec.kind)
    except ImportError:
        raise ClusterError(
            f"a {spec.kind} cluster needs dask-jobqueue, which is not installed: {jobqueue.INSTALL}"
        ) from None
    command = jobqueue.SUBMIT_COMMANDS.get(spec.kind)
    if command is not None and shutil.which(command) is None:
        raise ClusterError(
            f"a {spec.kind} cluster submits its workers with `{command}`, which is not on PATH; "
            "run oodsim on a login node of the batch system (or use --cluster ADDRESS, "
            "see docs/cluster.md)"
        )
    if spec.kind == "local-jobs" and spec.python and not _runnable(spec.python):
        raise SpecError(  # local jobs run it on this machine (a batch node's cannot be seen)
            "cluster.python",
            spec.python,
            "a Python interpreter that exists and can be run here (local jobs start it)",
        )
    if spec.interface:
        _check_interface(spec.interface)
    if spec.log_directory:
        _check_log_directory(Path(spec.log_directory).expanduser())


def _check_interface(name: str) -> None:
    """The scheduler listens on ``interface`` here, on the driver's machine: a name this
    machine lacks failed as the cluster started (``RuntimeError: Cluster failed to start``,
    then tracebacks of dask-jobqueue's credential files)."""
    import psutil  # distributed's dependency, loaded only for a job cluster

    found = sorted(psutil.net_if_addrs())
    if name not in found:
        raise SpecError(
            "cluster.interface",
            name,
            "a network interface of this machine: " + ", ".join(found),
            "The scheduler listens on it here, the workers on their nodes",
        )


def _runnable(program: str) -> bool:
    """Whether ``program`` (a path, or a name on PATH) is an executable file."""
    found = shutil.which(program)
    return found is not None and os.access(found, os.X_OK)


def _check_log_directory(folder: Path) -> None:
    """The jobs' ``log_directory`` exists as a folder (or can be made) and takes new files:
    dask-jobqueue would otherwise fail in callbacks, with tracebacks and no clear line."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".oodsim-probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as error:
        raise SpecError(
            "cluster.log_directory",
            str(folder),
            "a folder the jobs can write their logs in",
            f"{error.strerror or error}",
        ) from None


def credentials_folder(spec: ClusterSpec) -> Path:
    """A new folder, readable only by this user, for the run's temporary TLS credentials: in
    ``shared_directory`` (default ``~/.oodsim/cluster``), which every node must see; local
    jobs need no shared one."""
    own = f"{TLS_PREFIX}{socket.gethostname()}-"
    if spec.shared_directory is None and spec.kind == "local-jobs":
        return Path(tempfile.mkdtemp(prefix=f"{own}{os.getpid()}-"))
    base = Path(spec.shared_directory or jobqueue.DEFAULT_SHARED).expanduser().absolute()
    try:
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        _remove_abandoned(base, own)
        return Path(tempfile.mkdtemp(prefix=f"{own}{os.getpid()}-", dir=base))
    except OSError as error:
        raise ClusterError(
            f"cannot create a folder for the cluster's TLS credentials in {base} "
            f"({error.strerror or error}); set [cluster] shared_directory to a writable folder "
            "that every node sees"
        ) from None


def _remove_abandoned(base: Path, own: str) -> None:
    """Remove the credential folders in ``base`` of runs on this host (names starting with
    ``own``) whose process is gone: a run killed before its cleanup left its keys there."""
    for folder in base.glob(f"{own}*"):
        pid = folder.name[len(own) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _submit_failure(error: BaseException) -> str:
    """The batch system's own words from dask-jobqueue's error (``sbatch: error: ...``)."""
    text = str(error)
    _, _, stderr = text.partition("stderr:\n")
    lines = [line.strip() for line in (stderr or text).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


@contextlib.contextmanager
def job_cluster(spec: ClusterSpec) -> Iterator[Any]:
    """A cluster whose workers are ``spec.n_jobs`` batch jobs (dask-jobqueue), secured with TLS
    and temporary credentials; jobs that end while it runs are submitted again, and jobs that
    will never give a worker stop the run (:mod:`oodsim.clusters.job_watch`); on exit (an error
    and Ctrl-C too) every job is cancelled and the credentials are deleted."""
    # distributed loads only when a cluster is needed (cached runs start none)
    import dask.config
    from distributed.security import Security

    cluster_class = jobqueue.cluster_class(spec.kind)
    shared = credentials_folder(spec)
    cluster = None
    try:
        with contextlib.ExitStack() as stack:
            # a run that ends at once (a second Ctrl-C, a close that hangs) still cancels its
            # jobs and names those that may be queued, from the first submission to the end
            # of the cluster's close (entered before the cluster: left after its close)
            stack.enter_context(signals.ended_with(lambda: jobqueue.end_now(cluster, spec.kind)))
            # Ctrl-C waits until the jobs are submitted (a second one does not): a job that
            # sbatch submitted while the cluster was interrupted would not be cancelled
            with signals.held():
                # the scheduler runs in this process and reads them at start
                with dask.config.set({**NO_HTTP_ROUTES, **unless_configured(LIGHT_MONITORING)}):
                    options = jobqueue.cluster_options(spec, Security.temporary(), shared)
                    try:
                        cluster = stack.enter_context(cluster_class(**options))
                    except (OSError, ValueError) as error:
                        message = f"the {spec.kind} cluster could not start: {error}"
                        raise ClusterError(message) from None
                try:  # submit now, so that a refused job is an error here, in one line
                    cluster.sync(jobqueue.submit_jobs, cluster, spec.n_jobs)
                except Exception as error:
                    raise ClusterError(
                        f"submitting {spec.kind} jobs failed: {_submit_failure(error)}"
                    ) from None
            # the keeper resubmits jobs that lost their workers; the watch stops a run whose
            # jobs will never give one (all ended, or held for a reason that never clears)
            with jobqueue.JobKeeper(cluster) as keeper, JobWatch(cluster, spec, keeper.seen):
                yield cluster
    finally:
        if cluster is not None:
            jobqueue.forget_credentials(cluster)
        shutil.rmtree(shared, ignore_errors=True)
