"""Worker processes of oodsim's own local cluster that stop (SIGSTOP, standing in for a process
that hangs: a stuck file system, a swapped-out process), as the cluster starts or mid-run: the
run ends with the documented outcome instead of hanging, and leaves no process behind. See
docs/reliability.md (Faults)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

import oodsim
from oodsim.clusters import cluster as cluster_module
from oodsim.engine import ClusterError
from oodsim.protocols.open_set import CHECKPOINT
from oodsim.store import Store
from tests import stalling_preload
from tests.conftest import children, in_time, small_digits, wait_for

#: seconds a test waits for a run that should have ended (it hung before the fix)
PATIENCE = 150.0


def _forked() -> set[psutil.Process]:
    """The live processes forked by this process's fork server (local workers: the session's
    shared cluster has some too)."""
    found = set()
    for server in children(os.getpid(), "multiprocessing.forkserver"):
        try:
            found |= {w for w in server.children() if w.status() != psutil.STATUS_ZOMBIE}
        except psutil.Error:
            continue
    return found


def _stopped(processes: set[psutil.Process]) -> set[psutil.Process]:
    found = set()
    for process in processes:
        try:
            if process.status() == psutil.STATUS_STOPPED:
                found.add(process)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def stall(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The folder that tells the workers of the local clusters started in the test when to
    stop themselves (:mod:`tests.stalling_preload`). Whatever the test leaves (a run that
    hung: the old code), the workers it started are killed afterwards, stopped or not."""
    folder = tmp_path / "stall"
    folder.mkdir()
    monkeypatch.setenv(stalling_preload.VARIABLE, str(folder))
    monkeypatch.setattr(cluster_module, "WORKER_PRELOAD", stalling_preload.PRELOAD)
    before = _forked()
    yield folder
    for process in _forked() - before:
        try:
            process.kill()
        except psutil.Error:
            continue


def _self_stopped(stall: Path) -> list[psutil.Process]:
    """The worker processes that stopped themselves (:mod:`tests.stalling_preload`) and are
    still there (zombies left out), however they were started."""
    found = []
    for marker in stall.glob("stopped-*"):
        try:
            process = psutil.Process(int(marker.name.removeprefix("stopped-")))
            if process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            continue
    return found


def _entries(cache: Path) -> list[tuple[str, str]]:
    return sorted((e.kind, e.key) for e in Store(cache).entries())


def test_a_worker_stopped_as_the_cluster_starts_stops_the_run_in_one_line(
    tmp_path: Path, stall: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    """The probe: a worker process stopped while the local cluster started held
    ``LocalCluster(...)`` forever (nothing printed with --quiet; the status line's "nothing
    heard from the work" every 6 s otherwise). The start is now bounded (here 10 s instead of
    ``LOCAL_START_TIMEOUT``'s 120): the run stops with a ClusterError, the stopped worker is
    killed with the others, and what the cache held is intact."""
    monkeypatch.setattr(cluster_module, "LOCAL_START_TIMEOUT", 10.0, raising=False)
    cache = tmp_path / "cache"
    oodsim.run(small_digits(1), cache=cache, progress=False)  # in process: computed before
    held = _entries(cache)
    before = _forked()
    (stall / "first").touch()  # the first worker that starts stops itself
    with pytest.raises(ClusterError) as caught:
        in_time(
            lambda: oodsim.run(small_digits(3), n_workers=2, cache=cache, progress=False),
            PATIENCE,
        )
    assert list(stall.glob("stopped-*")), "no worker stopped itself"
    message = str(caught.value)
    assert "\n" not in message
    assert "did not start" in message and "had not started after 10 s" in message, message
    assert "nothing was computed" in message and "Check the machine" in message, message
    assert not _self_stopped(stall), "the stopped worker outlived the run"
    assert not _forked() - before, "workers outlived the run"
    assert _entries(cache) == held and Store(cache).verify() == []
    assert "Traceback" not in capfd.readouterr().err


def test_workers_stopped_mid_run_and_again_as_they_restart_end_the_run(
    tmp_path: Path, stall: Path, capfd: pytest.CaptureFixture
) -> None:
    """Every worker stopped once the first checkpoint is stored, and every worker its nanny
    starts in its place stopped as it starts (a machine where every worker hangs): distributed
    restarts the silent workers after ``worker-ttl`` (here 2 s), their replacements never
    register, and the run stops after ``worker_timeout`` (here 5 s) without a worker, with a
    ClusterError. Before, the run raised that error only after the close of the cluster had
    waited 30 s for the nannies, which wait forever for a worker that does not start; the
    stopped workers outlived the run, and Python's exit waited for them forever."""
    import dask.config

    cache = tmp_path / "cache"
    before = _forked()
    stopped: set[psutil.Process] = set()

    def stop_all() -> None:
        wait_for(
            lambda: any(e.kind == CHECKPOINT for e in Store(cache).entries()), 120, "a checkpoint"
        )
        (stall / "all").touch()  # replacements stop themselves
        stopped.update(_forked() - before)
        for worker in stopped:
            try:
                worker.suspend()
            except psutil.Error:
                continue

    helper = threading.Thread(target=stop_all, daemon=True)
    helper.start()
    with (
        dask.config.set({"distributed.scheduler.worker-ttl": "2 s"}),
        pytest.raises(ClusterError) as caught,
    ):
        in_time(
            lambda: oodsim.run(
                small_digits(4), n_workers=2, cache=cache, progress=False, worker_timeout=5
            ),
            PATIENCE,
        )
    helper.join(10)
    assert stopped, "no worker was stopped"
    error = str(caught.value)
    assert "no worker for 5 s" in error and "cached" in error
    assert list(stall.glob("stopped-*")), "no replacement worker started (and stopped)"
    assert not _self_stopped(stall), "stopped replacements outlived the run"
    assert not _stopped(_forked() - before), "stopped workers outlived the run"
    assert not _forked() - before, "workers outlived the run"
    assert _entries(cache), "the first checkpoint is kept"
    problems = Store(cache).verify()  # a worker stopped mid-write leaves a lock at most
    assert [(info, why) for info, why in problems if info.kind != "locks"] == []
    assert "Traceback" not in capfd.readouterr().err  # distributed's, of the nannies
