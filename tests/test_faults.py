"""Faults with real processes: killed workers and drivers, corrupt entries, concurrent runs,
stale locks, a full or read-only cache, diverging training. See docs/reliability.md."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import psutil
import pytest
import torch
import xarray as xr

import oodsim
from oodsim.cli import main as cli_main
from oodsim.engine import ClusterError, RunAborted
from oodsim.engine import progress as progress_module
from oodsim.keys import digest
from oodsim.models import register_architecture
from oodsim.models.architectures import small_cnn
from oodsim.models.classifier import Classifier
from oodsim.protocols.open_set import CHECKPOINT, OUTPUTS, entries
from oodsim.results import store_counts
from oodsim.specs import ExperimentSpec, load_spec
from oodsim.store import CorruptEntryWarning, Store
from oodsim.store.arrays import ARRAYS_ZIP
from oodsim.store.locks import _start_time
from tests import command_server
from tests.conftest import (
    children,
    cli_run_on,
    dask_cli_cluster,
    digits_toml,
    drop_file_permission_override,
    in_thread,
    small_digits,
    wait_for,
)

# --------------------------------------------------------------------------- helpers


def complete(cache: Path, kind: str) -> list[str]:
    """Keys of the complete entries of ``kind``, as the store lists them: an entry folder is
    complete once renamed into place. (A glob for meta files would also count a writer's
    ``.tmp-*`` folder, which holds its meta file before the rename: a worker killed between
    the two leaves one, and the count would read one entry too many.)"""
    return sorted(e.key for e in Store(cache).entries() if e.kind == kind)


def oodsim_cli(*args: str, **kwargs: Any) -> subprocess.Popen:
    """``oodsim ARGS`` as a real process in its own session (so all of its processes can be
    found and reaped by session id)."""
    return command_server.popen(
        [sys.executable, "-m", "oodsim.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kwargs,
    )


def run_quietly(
    spec_path: Path, cache: Path, *args: str, **kwargs: Any
) -> subprocess.CompletedProcess:
    """``oodsim run SPEC --workers 1 --cache CACHE --quiet ARGS`` to completion (300 s at most)."""
    command = [
        sys.executable,
        "-m",
        "oodsim.cli",
        "run",
        str(spec_path),
        "--workers",
        "1",
        "--cache",
        str(cache),
        "--quiet",
        *args,
    ]
    return command_server.run(command, capture_output=True, text=True, **{"timeout": 300, **kwargs})


def session_pids(sid: int) -> list[int]:
    """Live processes of session ``sid`` (Linux /proc)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid and fields[0] not in "ZX":
            pids.append(int(stat.parent.name))
    return pids


def reap_session(sid: int, timeout: float = 30.0) -> list[int]:
    """Wait for the processes of a killed session to exit; SIGKILL the ones that do not.
    Returns the pids that had to be killed."""
    deadline = time.monotonic() + timeout
    while session_pids(sid) and time.monotonic() < deadline:
        time.sleep(0.1)
    leftover = session_pids(sid)
    for pid in leftover:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return leftover


@contextlib.contextmanager
def own_cluster(n_workers: int = 2) -> Iterator[Any]:
    """A LocalCluster this test may kill workers of (the shared one must stay whole)."""
    from oodsim.engine import cluster_client

    with cluster_client(n_workers=n_workers) as client:
        yield client


def lock_owner(lock: Path) -> dict[str, Any] | None:
    """A lock file's holder, or None while it is being written or already gone."""
    try:
        return json.loads(lock.read_text())
    except (OSError, ValueError):
        return None


def test_digits_toml_matches_small_digits(tmp_path: Path) -> None:
    """The helper's TOML gives exactly the spec the API tests use (same keys, same cache)."""
    assert load_spec(digits_toml(tmp_path / "s.toml", 3)) == small_digits(3)


# --------------------------------------------------------------------------- workers and drivers


def test_worker_killed_mid_training_run_completes_like_a_clean_run(
    cluster_address: str, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    spec = small_digits(3)
    with own_cluster(2) as client:
        workers = set(client.run(os.getpid).values())
        address = client.scheduler.address
        thread, box = in_thread(
            lambda: oodsim.run(spec, address=address, cache=cache, progress=False)
        )
        # a worker holds a checkpoint's lock exactly while it trains that checkpoint
        lock, owner = wait_for(
            lambda: next(
                (
                    (p, lock_owner(p))
                    for p in (cache / "locks").glob("checkpoint-*.lock")
                    if lock_owner(p)
                ),
                None,
            ),
            120,
            "a training task",
        )
        key = lock.name.removeprefix("checkpoint-").removesuffix(".lock")
        assert owner["pid"] in workers
        os.kill(owner["pid"], signal.SIGKILL)
        assert not Store(cache).has(CHECKPOINT, key)  # the killed task left nothing visible
        thread.join(300)
        assert owner["pid"] not in set(client.run(os.getpid).values())  # it really died
    assert "error" not in box, box.get("error")
    faulty = box["result"]
    assert faulty.sizes["seed"] == 3 and not any(faulty.failure.values)
    assert store_counts(faulty)["computed"] == {CHECKPOINT: 3, OUTPUTS: 3}
    store = Store(cache)
    assert store.has(CHECKPOINT, key) and store.verify() == []
    assert list((cache / "locks").glob("*.lock")) == []  # the dead worker's lock was taken over
    clean = oodsim.run(spec, address=cluster_address, cache=tmp_path / "clean", progress=False)
    xr.testing.assert_identical(faulty.score, clean.score)
    xr.testing.assert_identical(faulty.failure, clean.failure)


def test_driver_killed_mid_run_rerun_computes_only_the_missing(
    cluster_address: str, tmp_path: Path
) -> None:
    cache, n = tmp_path / "cache", 5
    spec_path = digits_toml(tmp_path / "s.toml", n)
    args = ("run", str(spec_path), "--cache", str(cache), "--quiet")
    driver = oodsim_cli(*args, "--workers", "2", "--out", str(tmp_path / "first.zarr"))
    try:
        wait_for(lambda: len(complete(cache, CHECKPOINT)) >= 2, 180, "two checkpoints")
    finally:
        os.kill(driver.pid, signal.SIGKILL)
        driver.communicate()
    # its workers notice the dead driver and exit; none may keep writing during the re-run
    assert reap_session(driver.pid) == []
    assert driver.returncode == -signal.SIGKILL
    before = {kind: len(complete(cache, kind)) for kind in (CHECKPOINT, OUTPUTS)}
    assert 2 <= before[CHECKPOINT] < n and before[OUTPUTS] < n

    # the same command again (on the warm shared cluster, to keep the test short)
    rerun = oodsim_cli(*args, "--address", cluster_address, "--out", str(tmp_path / "second.zarr"))
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    results = oodsim.open_results(tmp_path / "second.zarr")
    counts = store_counts(results)
    assert counts["computed"] == {
        CHECKPOINT: n - before[CHECKPOINT],
        OUTPUTS: n - before[OUTPUTS],
    }
    assert results.sizes["seed"] == n and not any(results.failure.values)
    assert Store(cache).verify() == []


# --------------------------------------------------------------------------- corrupt entries


def _corrupt_three(cache: Path, spec: ExperimentSpec) -> dict[str, tuple[str, str]]:
    """Seed 0: truncate an outputs chunk; seed 1: alter checkpoint bytes (same size);
    seed 2: edit a field of an outputs meta.json. Returns what was damaged, by name."""
    store = Store(cache)
    (ckpt0, out0), (ckpt1, _), (_, out2) = (entries(spec, seed)[:2] for seed in range(3))
    chunk = store.place(*out0) / ARRAYS_ZIP
    chunk.write_bytes(chunk.read_bytes()[:-7])
    weight = store.place(*ckpt1) / ARRAYS_ZIP
    data = bytearray(weight.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weight.write_bytes(bytes(data))
    meta_path = store.place(*out2) / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["describe"] = "edited by hand"
    meta_path.write_text(json.dumps(meta))
    return {"truncated arrays file": out0, "altered checkpoint": ckpt1, "edited meta": out2}


def test_corrupt_entries_warned_and_recomputed_by_the_next_run(
    cluster_address: str, cache: Path
) -> None:
    spec = small_digits(3)
    first = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    damaged = _corrupt_three(cache, spec)
    with pytest.warns(CorruptEntryWarning) as caught:
        second = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    messages = " ".join(str(w.message) for w in caught)
    for kind, key in damaged.values():
        assert f"{kind}/{key[:12]}" in messages
    assert store_counts(second)["computed"] == {CHECKPOINT: 1, OUTPUTS: 2}
    xr.testing.assert_identical(first.score, second.score)
    assert Store(cache).verify() == []


def test_cache_verify_lists_corrupt_entries_and_repair_removes_them(
    cluster_address: str, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = small_digits(3)
    oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    damaged = _corrupt_three(cache, spec)
    assert cli_main(["cache", "verify", "--cache", str(cache)]) == 1
    listed = capsys.readouterr().out
    assert "3 corrupt entries" in listed
    for kind, key in damaged.values():
        assert f"corrupt: {kind}/{key}" in listed
    assert "checksum mismatch" in listed and "meta.json was altered" in listed
    assert cli_main(["cache", "verify", "--cache", str(cache), "--repair"]) == 0
    assert "3 corrupt entries removed" in capsys.readouterr().out
    store = Store(cache)
    assert not any(store.place(*entry).exists() for entry in damaged.values())
    assert cli_main(["cache", "verify", "--cache", str(cache)]) == 0
    assert len(list(store.entries())) == 6 - 3


def test_entry_with_unreadable_meta_is_replaced_not_blocking(tmp_path: Path) -> None:
    """A folder whose meta.json is gone or garbage would block the rename of its replacement;
    ``has`` quarantines it so the next ``put`` succeeds."""
    store = Store(tmp_path)
    key = digest("test_entry", 1, {"n": 24})
    path = store.put(OUTPUTS, key, {"x": np.arange(3)})
    (path / "meta.json").write_text("{not json")
    assert "unreadable meta" in store.verify()[0][1]
    with pytest.warns(CorruptEntryWarning, match="unreadable meta.json"):
        assert not store.has(OUTPUTS, key)
    store.put(OUTPUTS, key, {"x": np.arange(3)})
    assert store.get(OUTPUTS, key) is not None and store.verify() == []


# --------------------------------------------------------------------------- concurrent runs, locks


def test_two_overlapping_runs_at_once_share_work_and_agree(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    small = digits_toml(tmp_path / "a.toml", 3)
    large = digits_toml(tmp_path / "b.toml", 4, detectors='"msp", "energy"')
    runs = [
        oodsim_cli(
            "run",
            str(path),
            "--workers",
            "1",
            "--cache",
            str(cache),
            "--quiet",
            "--out",
            str(tmp_path / f"{path.stem}.zarr"),
        )
        for path in (small, large)
    ]
    for run in runs:
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
    a, b = (oodsim.open_results(tmp_path / f"{name}.zarr") for name in "ab")
    xr.testing.assert_identical(a.score, b.score.sel({"method": ["msp"], "seed": a.seed}))
    computed = [store_counts(r)["computed"] for r in (a, b)]
    # every key computed exactly once across both runs: the second waited for the first's lock
    assert sum(c.get(CHECKPOINT, 0) for c in computed) == 4
    assert sum(c.get(OUTPUTS, 0) for c in computed) == 4
    verify = command_server.run(
        [sys.executable, "-m", "oodsim.cli", "cache", "verify", "--cache", str(cache)],
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0 and "0 corrupt entries" in verify.stdout


def test_three_concurrent_runs_with_local_clusters_end_without_a_traceback(
    tmp_path: Path,
) -> None:
    """The probe: one of three concurrent runs (each with its own local cluster, one cache)
    ended rc 0 with a CommClosedError worker traceback on stderr. oodsim quiets its cluster
    before closing it, after a normal end too (measured since: 0 of 9 runs)."""
    cache = tmp_path / "cache"
    specs = [digits_toml(tmp_path / f"s{i}.toml", 1, start=i) for i in range(3)]
    runs = [
        oodsim_cli(
            "run",
            str(path),
            "--workers",
            "2",
            "--cache",
            str(cache),
            "--quiet",
            "--out",
            str(tmp_path / f"{path.stem}.zarr"),
        )
        for path in specs
    ]
    for run in runs:
        _, err = run.communicate(timeout=600)
        assert run.returncode == 0, err
        assert "Traceback" not in err and "Error" not in err, err


def _exited_pid() -> tuple[int, str | None]:
    """The pid and start time of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    start = wait_for(lambda: _start_time(child.pid), 10, "process start time")
    child.wait()
    return child.pid, start


def _zombie_pid() -> tuple[subprocess.Popen, int, str | None]:
    """A child that has exited but is not reaped yet (a zombie keeps its pid)."""
    child = subprocess.Popen(["true"])
    start = wait_for(lambda: _start_time(child.pid), 10, "process start time")
    wait_for(
        lambda: Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z",
        10,
        "a zombie",
    )
    return child, child.pid, start


def test_stale_locks_of_dead_zombie_and_reused_pids_are_taken_over(
    cluster_address: str, cache: Path
) -> None:
    import socket

    spec = small_digits(3)
    dead_pid, dead_start = _exited_pid()
    zombie, zombie_pid, zombie_start = _zombie_pid()
    owners = [
        {"pid": dead_pid, "start": dead_start},  # process gone
        {"pid": zombie_pid, "start": zombie_start},  # exited, parent has not reaped it
        {"pid": os.getpid(), "start": "1"},  # pid alive but reused by another process
    ]
    (cache / "locks").mkdir(parents=True)
    for seed, owner in enumerate(owners):
        key = entries(spec, seed)[0][1]
        lock = cache / "locks" / f"{CHECKPOINT}-{key}.lock"
        lock.write_text(json.dumps({"host": socket.gethostname(), "time": 0, **owner}))
    assert len(Store(cache).stale_locks()) == 3
    try:
        started = time.monotonic()
        results = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
        assert time.monotonic() - started < 120
    finally:
        zombie.wait()
    assert store_counts(results)["computed"] == {CHECKPOINT: 3, OUTPUTS: 3}
    assert list((cache / "locks").glob("*")) == []


def test_live_lock_is_waited_for_not_taken_over(tmp_path: Path) -> None:
    """A second process computing the same key waits for the live holder, then finds the entry
    and computes nothing."""
    code = (
        "import sys, time, numpy as np; from oodsim.store import Store\n"
        "from oodsim.keys import digest\n"
        "s = Store(sys.argv[1]); key = digest('test_entry', 1, {'n': 405})\n"
        "def slow():\n"
        "    time.sleep(float(sys.argv[2])); s.put('outputs', key, {'x': np.arange(3)})\n"
        "print(s.ensure('outputs', key, slow), flush=True)\n"
    )
    first = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path), "3"], text=True, stdout=subprocess.PIPE
    )
    wait_for(lambda: list((tmp_path / "locks").glob("*.lock")), 30, "the first lock")
    second = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), "0"], text=True, capture_output=True, timeout=60
    )
    assert first.communicate(timeout=60)[0].strip() == "True"
    assert second.stdout.strip() == "False", second.stderr  # waited, then loaded


# --------------------------------------------------------------------------- unusable cache


def _limit_file_size(limit: int) -> Callable[[], None]:
    def apply() -> None:  # runs in the child before exec; workers inherit both settings
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_full_cache_fails_at_the_write_with_a_clear_error_and_no_entry(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    spec_path = digits_toml(tmp_path / "s.toml", 2)
    run = run_quietly(
        spec_path, cache, "--out", str(tmp_path / "r.zarr"), preexec_fn=_limit_file_size(4096)
    )
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()  # the worker's own log of the task is left out
    assert len(lines) == 1, run.stderr
    last = lines[0]
    assert last.startswith("oodsim: error: could not write checkpoint entry")
    assert "File too large" in last and "run again" in last
    store = Store(cache)
    assert list(store.entries()) == []  # no entry, complete or half-written
    assert list(cache.glob("**/.tmp-*")) == []  # the failed write cleaned up after itself
    assert not (tmp_path / "r.zarr").exists()


def test_read_only_cache_fails_before_any_compute(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o555)
    spec_path = digits_toml(tmp_path / "s.toml", 2)
    started = time.monotonic()
    out = ("--out", str(tmp_path / "r.zarr"))  # never the user's results/ (the main job's)
    run = run_quietly(spec_path, cache, *out, timeout=120, preexec_fn=drop_file_permission_override)
    cache.chmod(0o755)
    assert run.returncode == 2, run.stderr
    assert f"cache directory {cache} is not writable" in run.stderr
    assert "Permission denied" in run.stderr
    assert list(cache.iterdir()) == []
    assert time.monotonic() - started < 60  # no cluster was started, nothing trained


# --------------------------------------------------------------------------- diverging training


def _with_lr(spec: ExperimentSpec, lr: float, **changes: Any) -> ExperimentSpec:
    return attrs.evolve(spec, training=attrs.evolve(spec.training, lr=lr), **changes)


class _InfiniteWhileTraining(torch.nn.Module):
    """Multiplies by ``scale`` in training mode, passes through in eval mode (the driver's
    contract check and inference)."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale if self.training else x


@register_architecture("test_fragile_cnn", replace=True)
def fragile_cnn(
    *, in_channels: int, n_classes: int, image_size: int, dropout: float, width: int
) -> Classifier:
    """``small_cnn`` whose features become infinite in training for about half of the seeds,
    by a draw from the seed's ``init`` stream: those seeds diverge at their first batch on any
    CPU (a large learning rate diverges or not by floating-point luck, which differs between
    processors)."""
    model = small_cnn(in_channels, n_classes, image_size, dropout, width)
    scale = math.inf if torch.rand(()) < 0.5 else 1.0
    model.encoder.append(_InfiniteWhileTraining(scale))
    return model


def test_diverging_seeds_are_recorded_as_failed_not_averaged(
    cluster_address: str, cache: Path
) -> None:
    from oodsim.stats import estimate

    spec = small_digits(6)
    spec = attrs.evolve(spec, model=attrs.evolve(spec.model, arch="test_fragile_cnn"))
    results = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    failed = results.failure.values != ""
    assert 0 < failed.sum() < 6, "test_fragile_cnn no longer diverges for some seeds only"
    assert all(r.startswith("training diverged:") for r in results.failure.values[failed])
    assert np.isnan(results.score.values[failed]).all()
    assert np.isfinite(results.score.values[~failed]).all()
    assert results.attrs["n_failed"] == failed.sum()
    auroc = estimate(results).sel({"method": "msp", "metric": "auroc"})
    assert int(auroc["n"]) == (~failed).sum()
    assert float(auroc["mean"]) == pytest.approx(
        results.score.sel({"method": "msp", "metric": "auroc"}).values[~failed].mean()
    )
    assert store_counts(results)["computed"][CHECKPOINT] == (~failed).sum()  # nothing stored


def _in_a_dask_worker() -> bool:
    from distributed import get_worker

    try:
        get_worker()
    except ValueError:
        return False
    return True


#: one line per crash of ``test_crashing_cnn``, for this test process (its local workers
#: inherit the variable that names the pytest-xdist worker)
CRASHES = Path(tempfile.gettempdir()) / (
    f"oodsim-test-crashes-{os.getuid()}-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
)


@register_architecture("test_crashing_cnn", replace=True)
def crashing_cnn(
    *, in_channels: int, n_classes: int, image_size: int, dropout: float, width: int
) -> Classifier:
    """``small_cnn`` that kills its worker process, as a crash in native code or the
    out-of-memory killer would, for about half of the seeds (a draw from the seed's ``init``
    stream). The driver's checks build it unharmed."""
    if _in_a_dask_worker() and torch.rand(()) < 0.5:
        with CRASHES.open("a") as log:
            log.write("crashed\n")
        os._exit(3)
    return small_cnn(in_channels, n_classes, image_size, dropout, width)


@pytest.fixture
def crashes() -> Iterator[Path]:
    """The log of ``test_crashing_cnn``'s crashes, empty at the start and removed after."""
    CRASHES.unlink(missing_ok=True)
    yield CRASHES
    CRASHES.unlink(missing_ok=True)


def test_work_that_kills_its_worker_fails_its_seed_not_the_run(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], crashes: Path
) -> None:
    """The probe: a seed whose work killed each worker that ran it (distributed tries four)
    ended the whole run with distributed's ``KilledWorker``, after its scheduler's log line
    and workers' tracebacks; the other seeds' results were lost with it. Now that seed fails,
    saying why, and the others are scored."""
    spec = small_digits(6)
    spec = attrs.evolve(spec, model=attrs.evolve(spec.model, arch="test_crashing_cnn"))
    results = oodsim.run(spec, n_workers=2, cache=tmp_path / "c", progress=False)
    failed = results.failure.values != ""
    assert 0 < failed.sum() < 6, "test_crashing_cnn no longer crashes for some seeds only"
    # four tries a seed, not four more when the seed was planned again (it was: 31 for 4)
    assert len(crashes.read_text().split()) <= 4 * failed.sum()
    for failure in results.failure.values[failed]:
        assert failure.startswith(
            "its worker process died each of the 4 times it ran the "
            "seed's task: killed by the system"
        ), failure
    assert np.isfinite(results.score.values[~failed]).all()
    # the checkpoints of the others are stored (their store events may be lost with a worker
    # that died holding them, and their tasks found done when distributed ran them again)
    assert len(complete(tmp_path / "c", CHECKPOINT)) == (~failed).sum()
    logged = capfd.readouterr().err
    assert "KilledWorker" not in logged and "marked as failed" not in logged, logged

    abort = attrs.evolve(spec, on_failure="abort")
    with pytest.raises(RunAborted, match=r"seed \d failed: its worker process died each of"):
        oodsim.run(abort, n_workers=2, cache=tmp_path / "c", progress=False)


def test_run_summary_shows_failed_seeds_and_why(
    cluster_address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_path = digits_toml(tmp_path / "s.toml", 2, lr="1e6")
    code = cli_run_on(cluster_address, spec_path, tmp_path)
    out = capsys.readouterr().out
    assert code == 0
    assert "2 of 2 simulations excluded from the estimates above:" in out
    assert "2 x failed: training diverged: training loss became nan in epoch 0 (seed 0, 1)" in out
    assert "2 simulations in " in out and ": 2 computed, 0 reused from the cache, 2 failed;" in out
    saved = oodsim.open_results(tmp_path / "r.zarr")
    assert (
        list(saved.failure.values) == ["training diverged: training loss became nan in epoch 0"] * 2
    )


def test_on_failure_abort_stops_the_run(
    cluster_address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _with_lr(small_digits(2), 1e6, on_failure="abort")
    with pytest.raises(RunAborted, match=r"seed \d failed: training diverged"):
        oodsim.run(spec, address=cluster_address, cache=tmp_path / "c", progress=False)
    spec_path = digits_toml(tmp_path / "s.toml", 2, lr="1e6")
    spec_path.write_text('on_failure = "abort"\n' + spec_path.read_text())
    code = cli_run_on(cluster_address, spec_path, tmp_path)
    assert code == 2
    assert "on_failure = 'abort'" in capsys.readouterr().err
    assert not (tmp_path / "r.zarr").exists()


def test_cluster_without_workers_stops_after_worker_timeout(tmp_path: Path) -> None:
    """The only worker (started with --no-nanny, so nothing restarts it) dies mid-run: the run
    stops with a ClusterError after ``worker_timeout`` instead of waiting forever."""
    with dask_cli_cluster(tmp_path, "--no-nanny") as (address, worker):
        cache = tmp_path / "cache"
        thread, box = in_thread(
            lambda: oodsim.run(
                small_digits(6), address=address, cache=cache, progress=False, worker_timeout=5
            )
        )
        wait_for(lambda: complete(cache, CHECKPOINT) or None, 120, "a first checkpoint")
        worker.kill()
        worker.wait()
        thread.join(timeout=90)
        assert not thread.is_alive(), "the run kept waiting for workers that never came"
        error = box.get("error")
        assert isinstance(error, ClusterError), box
        assert "no worker for 5 s" in str(error) and "cached" in str(error)
        # what finished is intact; the worker, killed at any moment, may leave a lock it had
        # just created and not yet written (the next run takes it over, `gc` removes it)
        problems = Store(cache).verify()
        assert [(info, why) for info, why in problems if info.kind != "locks"] == []


def test_a_lost_scheduler_stops_the_run_with_one_line(tmp_path: Path) -> None:
    """The scheduler at ``--cluster ADDRESS`` dies mid-run: the run ended with ``error:
    FuturesCancelledError: 6 Futures cancelled:`` (distributed cancels the futures of a lost
    scheduler). It now says what happened and that finished work is cached."""
    with dask_cli_cluster(tmp_path) as (address, _):
        spec = digits_toml(tmp_path / "spec.toml", 1000)
        cache = tmp_path / "cache"
        out = ["--cache", str(cache), "--out", str(tmp_path / "r.zarr")]
        run = command_server.popen(
            [sys.executable, "-m", "oodsim.cli", "run", str(spec), "--cluster", address, *out],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(lambda: complete(cache, CHECKPOINT) or run.poll(), 120, "a first checkpoint")
            scheduler = str(tmp_path / "scheduler.json")  # the fixture's scheduler file
            subprocess.run(["pkill", "-KILL", "-f", scheduler], check=True)
            _, err = run.communicate(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
                run.communicate()
    assert run.returncode == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("oodsim: error: lost the connection to the Dask scheduler"), err
    assert "finished work is cached" in last and "Traceback" not in err
    assert Store(cache).verify() == []  # what finished is intact


def _local_workers() -> list[psutil.Process]:
    """The workers of this process's local clusters: the children of its fork server (the
    session's shared cluster has some too)."""
    servers = children(os.getpid(), "multiprocessing.forkserver")
    return [worker for server in servers for worker in server.children()]


@contextlib.contextmanager
def _own_workers_stopped(
    cache: Path, until: Callable[[], bool] | None = None
) -> Iterator[list[psutil.Process]]:
    """For a block that runs on ``cache``: once its first checkpoint is stored, the workers
    its run started (not the session's shared cluster's) are stopped (SIGSTOP) and resumed
    once ``until()`` holds, or (None) only as the block ends. Yields the stopped workers."""
    others = {worker.pid for worker in _local_workers()}  # the session's shared cluster
    stopped: list[psutil.Process] = []

    def stop() -> None:
        wait_for(lambda: complete(cache, CHECKPOINT), 120, "a first checkpoint")
        stopped.extend(w for w in _local_workers() if w.pid not in others)
        for worker in stopped:
            worker.suspend()
        if until is not None:
            try:
                wait_for(until, 120, "the moment to resume the workers")
            finally:
                for worker in stopped:
                    worker.resume()

    helper = threading.Thread(target=stop, daemon=True)
    helper.start()
    try:
        yield stopped
        helper.join(timeout=10)
    finally:  # a nanny kills a stopped worker only after its own wait (tens of seconds)
        for worker in stopped:
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.resume()


def _alive(process: psutil.Process) -> bool:
    """Whether ``process`` still exists and is not a zombie waiting to be reaped."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_stopped_workers_are_told_on_the_status_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe: one worker stopped (SIGSTOP) held the run's other work back, and the status
    line stood still for 8.5 minutes. After ``QUIET_NOTICE`` seconds (here 3)
    without a progress note or a seed, the line says so; the run ends once they go on."""
    monkeypatch.setattr(progress_module, "QUIET_NOTICE", 3.0)
    stream = io.StringIO()
    cache = tmp_path / "cache"

    def told() -> bool:
        return "nothing heard from the work" in stream.getvalue()

    with _own_workers_stopped(cache, until=told) as stopped:
        results = oodsim.run(small_digits(4), n_workers=2, cache=cache, progress=stream)
    assert stopped, "no worker was stopped"
    assert "nothing heard from the work for 0:0" in stream.getvalue(), stream.getvalue()
    assert (results.failure.values == "").all()


def test_workers_stopped_for_good_are_restarted_and_the_run_ends(tmp_path: Path) -> None:
    """The probe: one of two workers stopped (SIGSTOP) for good held 2 of 8 seeds, and through
    the bounded window the whole run, until distributed's ``worker-ttl`` (5 minutes, checked
    once per ttl) had it restarted: 605 s. oodsim's local cluster now uses 60 s (126 s in the
    probe); here a ttl of the user's Dask configuration, which oodsim keeps, stands in for it
    so that the test takes seconds. Every worker is stopped, so that the run can only end
    through their restart; its scores are a 1-worker run's."""
    import dask.config

    cache = tmp_path / "cache"
    with (
        dask.config.set({"distributed.scheduler.worker-ttl": "2 s"}),
        _own_workers_stopped(cache) as stopped,
    ):
        results = oodsim.run(small_digits(4), n_workers=2, cache=cache, progress=False)
        left = [w.pid for w in stopped if _alive(w)]  # before the block resumes them
    assert len(stopped) == 2, "the workers were not stopped"
    assert not left, f"stopped workers outlived the run: {left}"
    assert (results.failure.values == "").all()
    alone = oodsim.run(small_digits(4), n_workers=1, cache=tmp_path / "alone", progress=False)
    xr.testing.assert_identical(results.score, alone.score)


@pytest.mark.parametrize(("configured", "saturation"), [(None, 1.0), (2.0, 2.0)])
def test_the_local_cluster_gives_a_worker_one_task_a_thread(
    configured: float | None, saturation: float
) -> None:
    """distributed's default queue of up to 1.1 tasks a thread becomes one on oodsim's local
    cluster, so that a worker's death is counted against the task that ran (see
    ``test_work_that_kills_its_worker_fails_its_seed_not_the_run``); a value the user
    configured is kept."""
    import dask.config

    from oodsim.clusters.cluster import cluster_client

    setting = {} if configured is None else {"distributed.scheduler.worker-saturation": configured}
    with dask.config.set(setting), cluster_client(None, 1) as client:
        found = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.WORKER_SATURATION)
    assert found == saturation


@pytest.mark.parametrize(("configured", "ttl"), [(None, 60.0), ("7 minutes", 420.0)])
def test_the_local_cluster_restarts_a_silent_worker_after_a_minute(
    configured: str | None, ttl: float
) -> None:
    """distributed's default ``worker-ttl`` (5 minutes) becomes 60 s on oodsim's local
    cluster; a ttl the user configured is kept."""
    import dask.config

    from oodsim.clusters.cluster import cluster_client

    setting = {} if configured is None else {"distributed.scheduler.worker-ttl": configured}
    with dask.config.set(setting), cluster_client(None, 1) as client:
        assert client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.worker_ttl) == ttl
