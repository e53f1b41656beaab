"""The workers of oodsim's local cluster start from a fork server that imported torch once.

Dask's nanny starts each worker in a fresh interpreter (``spawn``), which then imports
distributed, numpy, torch, zarr and scipy: about 5 s of CPU per worker before it trains
anything, paid again for every worker a nanny restarts (7 s while training used
``torch.optim``, which imports ``torch._dynamo``; :mod:`oodsim.models.optimizer` avoids it).
Measured on a 2-core machine (with ``torch.optim``), a 2-seed digits run with 2 workers used
30 s of CPU with ``spawn`` and 17.5 s with the fork server, with bit-identical scores; the
saving grows with the number of workers.

With ``forkserver`` (Python's :mod:`multiprocessing` method, supported by Dask), one server
process per driver imports :data:`WORKER_MODULES` once and every worker is forked from it. The
server starts in the environment a spawned worker would get (Dask's
``distributed.nanny.pre-spawn-environ``: one BLAS/OpenMP thread; glibc's memory trimming left
alone, see :mod:`oodsim.clusters.nanny`), so numerics are those of a spawned worker. Like spawn,
it imports the main script once (as ``__mp_main__``): the ``if __name__ == "__main__":`` guard
is still needed. The server lives as long as the driver, so a second run in the same Python
session starts its workers at once. Where ``forkserver`` is not available (Windows), and for
CUDA clusters, workers are spawned as before.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import signal
import sys
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from oodsim.clusters import nanny, signals
from oodsim.store.locks import proc_stat

#: Dask's setting for the way a nanny starts its worker process.
METHOD_KEY = "distributed.worker.multiprocessing-method"
#: What every worker imports before its first task: the server imports it once for all.
WORKER_MODULES = (
    "distributed",
    "numpy",
    "torch",
    "zarr",
    "scipy.special",  # the detectors' κ (oodsim.detectors._scipy)
    "oodsim.clusters.cluster",
    "oodsim.engine.work",
    "oodsim.simulation.training",
    "oodsim.protocols.open_set",
    "oodsim.clusters.server_end",  # last: freezes the imports above, ends the server at once
)


def available() -> bool:
    """Whether this platform can fork workers from a server (not on Windows)."""
    return "forkserver" in multiprocessing.get_all_start_methods()


@contextlib.contextmanager
def forking() -> Iterator[dict[str, Any]]:
    """For the block, a local cluster's nannies fork their workers from the server, started
    here (keep the block open for the cluster's lifetime: a nanny that restarts its worker
    reads the setting again). Yields the ``LocalCluster`` options that go with it; where the
    platform cannot fork from a server, none, and workers are spawned."""
    if not available():
        yield {}
        return
    # distributed loads only when a cluster is needed (cached runs start none)
    import dask.config

    with dask.config.set({METHOD_KEY: "forkserver"}):
        start()
        yield {"env": worker_environment()}


def start() -> None:
    """Start this process's fork server, unless it runs already: it imports
    :data:`WORKER_MODULES` in the environment of a spawned Dask worker, shielded from Ctrl-C
    (which Python's server ignores only once its imports are done), like the workers it
    forks. Call it under Dask's ``forkserver`` setting (see :func:`forking`)."""
    # distributed loads only when a cluster is needed (cached runs start none)
    import dask.config
    from distributed.utils import get_mp_context

    context = get_mp_context()  # Dask sets its own preload list once per process: ours wins
    context.set_forkserver_preload(list(WORKER_MODULES))
    spawned = {
        name: str(value)
        for name, value in dask.config.get("distributed.nanny.pre-spawn-environ", {}).items()
        if name not in os.environ
    }
    spawned.pop(nanny.TRIM_VARIABLE, None)  # glibc reads it as the server starts
    spawned |= _safe_path()
    left = [nanny.TRIM_VARIABLE] if nanny.dasks_trim_in_environ() else []
    with _environment(spawned, without=left):
        # the fork server starts the resource tracker, whose start unblocks Ctrl-C in this
        # thread (its own shield, bpo-33613, which leaves SIGHUP to ours): started first, in
        # a block of its own, it leaves the fork server's shield alone
        with signals.shielded():
            multiprocessing.resource_tracker.ensure_running()
        with signals.shielded():
            multiprocessing.forkserver.ensure_running()


def stop_now() -> None:
    """Stop this process's fork server and every process it forked, at once (a run that ends
    at once: :func:`oodsim.clusters.signals.ended_with`; it neither waits nor takes locks). A
    worker forked as the run ends would print a traceback once the driver's semaphores are
    gone. The server is stopped first (SIGSTOP: it forks nothing more), then its children and
    the server are killed; the next cluster of this process starts a new server."""
    pid = getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)
    if not pid:
        return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGSTOP)
        for child in _children(pid):
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGKILL)
        os.kill(pid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux's ``/proc``; none elsewhere)."""
    found = []
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if entry.name.isdigit():
            fields = proc_stat(int(entry.name))  # [] for one that ended meanwhile
            if len(fields) > 1 and int(fields[1]) == pid:  # state, then the parent's id
                found.append(int(entry.name))
    return found


def worker_environment() -> dict[str, str]:
    """The driver's environment now, for a nanny to set in each worker it forks (a spawned
    worker would inherit it; a forked one has the server's, from when the server started).
    A nanny adds it to the server's environment: ``PYTHONSAFEPATH``, which the server may
    have started with (:func:`_safe_path`), is emptied (unset, to Python) unless the driver
    has it."""
    environment = dict(os.environ)
    if nanny.dasks_trim_in_environ():
        environment.pop(nanny.TRIM_VARIABLE)
    environment.setdefault(SAFE_PATH, "")
    return environment


#: Python's variable that keeps ``python -c`` from putting the working folder first on
#: ``sys.path``
SAFE_PATH = "PYTHONSAFEPATH"


def _safe_path() -> dict[str, str]:
    """``{"PYTHONSAFEPATH": "1"}`` for the fork server's environment unless this process has
    the working folder on ``sys.path`` (then the server has it too), or the variable is set.

    The server starts as ``python -c``, which puts the working folder first on ``sys.path``
    before it imports :data:`WORKER_MODULES`: a folder named ``oodsim`` there (a clone of
    the project, run from the folder that holds it) would shadow the installed package in the
    server and every worker it forks. Each worker then takes the driver's ``sys.path``
    (multiprocessing's preparation data), but modules the server imported stay imported."""
    if SAFE_PATH in os.environ:
        return {}
    here = os.path.realpath(os.getcwd())
    for entry in sys.path:
        if entry in ("", ".") or os.path.realpath(entry) == here:
            return {}
    return {SAFE_PATH: "1"}


@contextlib.contextmanager
def _environment(values: Mapping[str, str], without: Collection[str] = ()) -> Iterator[None]:
    """``values`` in ``os.environ`` and the names ``without`` out of it, for the duration of
    the block (a process started in it inherits that environment)."""
    removed = {name: os.environ.pop(name) for name in without if name in os.environ}
    os.environ.update(values)
    try:
        yield
    finally:
        for name in values:
            os.environ.pop(name, None)
        os.environ.update(removed)
