"""The workers of oodsim's local cluster fork from one server that imported torch once
(:mod:`oodsim.clusters.forkserver`), and still see what a spawned worker would."""

from __future__ import annotations

import gc
import multiprocessing
import os
import subprocess
import sys

import pytest

from oodsim.clusters.forkserver import WORKER_MODULES
from oodsim.engine import cluster_client

pytestmark = pytest.mark.skipif(
    "forkserver" not in multiprocessing.get_all_start_methods(), reason="no fork server here"
)


def _worker_state() -> dict:
    """Runs on a worker: where it came from and what it holds before any task."""
    return {
        "parent": os.getppid(),
        "loaded": all(name in sys.modules for name in WORKER_MODULES),
        "method": multiprocessing.get_start_method(allow_none=True),
        "omp": os.getenv("OMP_NUM_THREADS"),
        "probe": os.getenv("OODSIM_FORK_PROBE"),
        "frozen": gc.get_freeze_count(),
    }


def test_workers_fork_from_one_server_that_imported_their_modules() -> None:
    with cluster_client(n_workers=2) as client:
        states = list(client.run(_worker_state).values())
    assert len(states) == 2
    parents = {state["parent"] for state in states}
    assert len(parents) == 1 and parents != {os.getpid()}  # one server, not the driver
    assert all(state["loaded"] for state in states)  # torch, zarr, oodsim: imported once
    assert {state["omp"] for state in states} == {"1"}  # as Dask sets a spawned worker's
    assert all(state["frozen"] > 10_000 for state in states)  # the server's imports


def test_the_servers_end_is_set_up_only_in_the_fork_server() -> None:
    """Imported elsewhere, oodsim.clusters.server_end freezes nothing and ends nothing early: the
    interpreter's own exit handlers still run after it."""
    code = (
        "import atexit, gc\n"
        "atexit.register(print, 'exit handlers ran')\n"
        "import oodsim.clusters.server_end\n"
        "print(gc.get_freeze_count())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "0\nexit handlers ran\n"), done.stderr


def test_the_driver_environment_of_each_run_reaches_its_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server started by an earlier run keeps the environment of then; a variable set
    since (a data folder, a debug switch) still reaches the next run's workers."""
    with cluster_client(n_workers=1) as client:
        assert set(client.run(os.getenv, "OODSIM_FORK_PROBE").values()) == {None}
    monkeypatch.setenv("OODSIM_FORK_PROBE", "set later")
    with cluster_client(n_workers=1) as client:
        assert [s["probe"] for s in client.run(_worker_state).values()] == ["set later"]
