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

from oodsim.protocols.open_set import CHECKPOINT
from oodsim.store import Store
from tests.conftest import children, dask_cli_cluster, digits_toml, signalled


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
