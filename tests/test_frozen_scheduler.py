"""A scheduler at ``--cluster ADDRESS`` that stops answering mid-run (SIGSTOP: as a scheduler
that hangs, or a network that drops its packets without closing the connection).

A real ``dask scheduler`` and ``dask worker`` (processes of this test, as a user starts them),
a real ``oodsim run`` in a process of its own, and the scheduler frozen once the first
checkpoint is stored. The run used to wait forever: its status line blamed the work, and after
Ctrl-C or SIGTERM it printed its resume line and then waited forever for the scheduler to
unregister the run's worker plugin (only SIGKILL ended it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from oodsim.engine.placement import place
from oodsim.engine.waiting import SCHEDULER_TIMEOUT_ENV
from oodsim.errors import ClusterError, SpecError
from oodsim.protocols.open_set import CHECKPOINT
from oodsim.store import Store
from tests import command_server
from tests.conftest import ROOT, children, dask_cli_cluster, digits_toml, signalled, wait_for

#: the safety net of every wait here: a run that hangs fails the test instead of holding it
HANG = 120


@contextmanager
def _cluster(tmp_path: Path) -> Iterator[tuple[str, psutil.Process]]:
    """``dask_cli_cluster``'s address and its scheduler process, which the test may freeze:
    it is resumed before the cluster is stopped."""
    with dask_cli_cluster(tmp_path) as (address, _):
        [scheduler] = children(os.getpid(), str(tmp_path / "scheduler.json"))
        try:
            yield address, scheduler
        finally:
            scheduler.resume()


def _run_command(tmp_path: Path, address: str) -> list[str]:
    spec = digits_toml(tmp_path / "spec.toml", 6)
    out = ["--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "r.zarr")]
    return [sys.executable, "-m", "oodsim.cli", "run", str(spec), "--cluster", address, *out]


def _checkpoints(cache: Path) -> list[str]:
    return [e.key for e in Store(cache).entries() if e.kind == CHECKPOINT] if cache.exists() else []


@pytest.mark.parametrize(
    ("signum", "group"),
    [(signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c", "sigterm"],
)
def test_an_interrupted_run_ends_though_its_scheduler_is_frozen(
    tmp_path: Path, signum: int, group: bool
) -> None:
    """Ctrl-C (to the run's process group, as a terminal sends it) or SIGTERM (to the run
    alone, as ``kill`` sends it) once its scheduler is frozen: one resume line and the exit
    code of the signal. Every request to the scheduler while the run ends is bounded
    (``SHARED_CLOSE_TIMEOUT``), and one that is not answered is given up."""
    with _cluster(tmp_path) as (address, scheduler):
        cache = tmp_path / "cache"

        def frozen(_: subprocess.Popen) -> bool:
            if not _checkpoints(cache):
                return False
            scheduler.suspend()
            return True

        process, output = signalled(
            _run_command(tmp_path, address), frozen, signum=signum, group=group
        )
    assert process.returncode == 128 + signum, output
    last = output.strip().splitlines()[-1]
    assert last.startswith("oodsim: interrupted; "), output
    assert last.endswith("run the same spec again to resume."), output
    assert "Traceback" not in output and "error" not in output, output


def test_a_frozen_scheduler_stops_the_run_with_one_line(tmp_path: Path) -> None:
    """No signal: the run asks the scheduler, with a deadline, while it waits; after
    ``$OODSIM_SCHEDULER_TIMEOUT`` seconds without an answer (8 here, 300 by default) it stops
    with one line that names the scheduler. Meanwhile its status line says that the scheduler
    does not answer, not that the work may be stuck; what finished stays in the store."""
    env = dict(os.environ, **{SCHEDULER_TIMEOUT_ENV: "8"})
    cache = tmp_path / "cache"
    with _cluster(tmp_path) as (address, scheduler):
        run = command_server.popen(
            _run_command(tmp_path, address),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )
        try:
            wait_for(lambda: _checkpoints(cache) or run.poll() is not None, HANG, "a checkpoint")
            scheduler.suspend()
            _, err = run.communicate(timeout=HANG)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.communicate()
    assert run.returncode == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        f"oodsim: error: the Dask scheduler at {address} has not answered for 8 s"
    ), err
    assert "finished work is cached" in last and "Traceback" not in err, err
    assert "; the Dask scheduler has not answered for 0:" in err, err
    assert "nothing heard from the work" not in err, err
    assert _checkpoints(cache)  # what finished is in the store, intact
    problems = Store(cache).verify()  # (a worker stopped at any moment may leave a lock)
    assert [(info, why) for info, why in problems if info.kind != "locks"] == []


@pytest.mark.parametrize("value", ["soon", "0", "-5", "nan", "inf"])
def test_a_bad_scheduler_timeout_is_refused_before_compute(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(SCHEDULER_TIMEOUT_ENV, value)
    with pytest.raises(SpecError, match=f"{SCHEDULER_TIMEOUT_ENV}: '{value}' is not allowed"):
        place(None, 4, address="tcp://127.0.0.1:1")
    monkeypatch.setenv(SCHEDULER_TIMEOUT_ENV, " 90 ")
    assert place(None, 4, address="tcp://127.0.0.1:1").scheduler_timeout == 90.0
    monkeypatch.delenv(SCHEDULER_TIMEOUT_ENV)
    assert place(None, 4, address="tcp://127.0.0.1:1").scheduler_timeout == 300.0


def test_a_finished_result_is_fetched_within_the_scheduler_timeout(tmp_path: Path) -> None:
    """A finished seed's result comes through the scheduler: one frozen between a seed's end
    and the fetch of its result held the run in ``future.result()``, which waits forever.
    The fetch now stops the run with the same line after the scheduler timeout; a task's own
    ``TimeoutError`` is still the task's."""
    from distributed import Client, wait

    from oodsim.engine.waiting import gathered  # (here: the old code has none)

    def times_out() -> None:  # local: pickled by value, the workers need not import tests
        raise TimeoutError("the task's own")

    with _cluster(tmp_path) as (address, scheduler), Client(address, timeout=30) as client:
        own = client.submit(times_out, pure=False)
        done = client.submit(sum, [1, 2], pure=False)
        wait([own, done], timeout=HANG)
        with pytest.raises(TimeoutError, match="the task's own"):
            gathered(own, 2.0)
        scheduler.suspend()
        try:
            with pytest.raises(ClusterError, match=f"scheduler at {address} has not answered"):
                gathered(done, 2.0)
        finally:
            scheduler.resume()
