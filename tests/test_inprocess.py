"""Runs without a cluster: when a run computes in-process, and that it behaves like a cluster
(the same store entries and results are checked in test_determinism)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import oodsim
from oodsim.engine.inprocess import Deferred, InProcess, is_deferred
from oodsim.errors import SpecError
from oodsim.results import store_counts
from oodsim.specs.cluster import ClusterSpec, runs_in_process
from tests.conftest import ROOT, digits_toml, small_digits


@pytest.mark.parametrize(
    ("table", "cluster", "address", "n_workers", "n_seeds", "expected"),
    [
        (None, None, None, 1, 10, True),  # --workers 1: a cluster would cost more than it gives
        (None, None, None, None, 1, True),  # one seed
        (None, None, None, None, 10, False),  # one worker per core
        (None, None, None, 2, 1, False),  # workers asked for
        (None, "local", None, 1, 10, False),  # --cluster local keeps a cluster
        (None, "in-process", None, None, 10, True),
        (ClusterSpec(kind="in-process"), None, None, None, 10, True),
        (ClusterSpec(kind="slurm"), None, None, None, 1, False),
        (ClusterSpec(kind="slurm"), "in-process", None, None, 10, True),
        (None, None, "tls://127.0.0.1:8786", 1, 1, False),  # a scheduler is named
        (None, "tls://127.0.0.1:8786", None, None, 1, False),
    ],
)
def test_which_runs_compute_in_process(
    table: ClusterSpec | None,
    cluster: str | None,
    address: str | None,
    n_workers: int | None,
    n_seeds: int,
    expected: bool,
) -> None:
    assert runs_in_process(table, cluster, address, n_workers, n_seeds) is expected


def test_deferred_tasks_compute_once_in_order_of_need() -> None:
    calls: list[str] = []

    def step(name: str, *upstream: int) -> int:
        calls.append(name)
        return 1 + sum(upstream)

    with InProcess() as client:
        first = client.submit(step, "first")
        second = client.submit(step, "second", first)
        assert calls == [] and first.status == second.status == "pending"
        assert second.result() == 2 and second.result() == 2
    assert calls == ["first", "second"]
    assert first.status == second.status == "finished"
    assert is_deferred([first, second]) and not is_deferred([first, object()])


def test_a_failed_task_keeps_its_error_like_a_dask_future() -> None:
    def fail() -> None:
        raise ValueError("boom")

    task = InProcess().submit(fail)
    task.compute()  # kept, not raised: the engine reads it through result()
    assert task.status == "error"
    with pytest.raises(ValueError, match="boom"):
        task.result()


def test_ctrl_c_in_a_task_is_not_swallowed() -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Deferred(interrupted, ()).compute()


def test_cancelled_tasks_never_run() -> None:
    calls: list[int] = []
    client = InProcess()
    tasks = [client.submit(calls.append, i) for i in range(3)]
    tasks[0].compute()
    client.cancel(tasks)
    assert [task.status for task in tasks] == ["finished", "cancelled", "cancelled"]
    with pytest.raises(RuntimeError, match="cancelled"):
        tasks[1].result()
    assert calls == [0]


def test_an_in_process_run_restores_torchs_settings(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    results = oodsim.run(small_digits(1), cache=tmp_path, progress=False)
    assert store_counts(results)["computed"]
    assert not any(results.failure.values)
    assert torch.get_num_threads() == threads
    assert torch.are_deterministic_algorithms_enabled() == deterministic


def test_a_worker_count_with_an_in_process_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no worker count with an in-process run"):
        oodsim.run(small_digits(2), cluster="in-process", n_workers=2, cache=tmp_path)
    assert list(tmp_path.iterdir()) == []  # refused before the store was opened


def test_oodsim_run_cluster_in_process_needs_no_main_guard(tmp_path: Path) -> None:
    """A script without ``if __name__ == "__main__":`` is fine when nothing is spawned."""
    spec = digits_toml(tmp_path / "digits.toml", 2)
    script = tmp_path / "unguarded.py"
    script.write_text(
        f"import oodsim\nresults = oodsim.run({str(spec)!r}, cluster='in-process', "
        f"cache={str(tmp_path / 'cache')!r}, progress=False)\n"
        "print(results.sizes['seed'], int(results.failure.any()))\n"
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout
    assert out.split() == ["2", "0"]
