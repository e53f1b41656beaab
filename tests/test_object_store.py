"""A cache on object storage, end to end against a real S3-compatible server on 127.0.0.1
(moto's server mode, :mod:`tests.s3_server`): a run of two workers whose worker is killed while
it trains gives the local backend's results and entries byte for byte; a rerun computes nothing,
an added detector only its κ; a writer killed mid-entry leaves nothing visible; a bucket that
does not exist, or credentials that are refused, are one line before any compute, and no
secret is ever printed or stored."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
import xarray as xr

import oodsim
from oodsim.keys import digest
from oodsim.protocols.open_set import CHECKPOINT, KAPPA
from oodsim.results import store_counts
from oodsim.store import Store
from oodsim.store.arrays import ARRAYS_ZIP
from tests import s3_server
from tests.conftest import ROOT, digits_toml, in_thread, small_digits, wait_for

#: result attributes that tell how a run went (what it computed, its seconds), not what it found
RUN_ATTRS = {"store", "simulation_seconds", "wall_seconds"}


@pytest.fixture
def url(s3_endpoint: str) -> str:
    """A cache's location in a new bucket of the tests' S3 server."""
    return f"s3://{s3_server.new_bucket(s3_endpoint)}/cache"


def entry_digests(store: Store) -> dict[tuple[str, str], str]:
    """The sha256 of every entry's arrays, by (kind, key)."""
    found = {}
    for info in store.entries():
        with store.backend.open(info.kind, info.key, ARRAYS_ZIP) as handle:
            found[info.kind, info.key] = hashlib.sha256(handle.read()).hexdigest()
    return found


def live_lock(store: Store, kind: str) -> tuple[str, dict[str, Any]] | None:
    """A lock on computing an entry of ``kind`` and its holder's record, if one is held."""
    fs, folder = store.backend.fs, f"{store.backend.root}/locks"
    try:
        names = fs.ls(folder, detail=False)
    except FileNotFoundError:
        return None
    for name in names:
        if name.rsplit("/", 1)[1].startswith(f"{kind}-"):
            try:
                return name, json.loads(fs.cat_file(name))
            except (OSError, ValueError):
                continue
    return None


@pytest.mark.slow
def test_a_run_on_object_storage_is_the_local_run_byte_for_byte(url: str, tmp_path: Path) -> None:
    from oodsim.engine import cluster_client

    spec = small_digits(3)
    store = Store(url)
    with cluster_client(n_workers=2) as client:
        workers = set(client.run(os.getpid).values())
        address = client.scheduler.address
        thread, box = in_thread(
            lambda: oodsim.run(spec, address=address, cache=url, progress=False)
        )

        def training() -> tuple[str, dict[str, Any]] | None:
            if not thread.is_alive():  # the run ended before any checkpoint's lock was seen
                pytest.fail(f"the run ended early: {box}")
            return live_lock(store, CHECKPOINT)

        _, owner = wait_for(training, 120, "a training task")
        assert owner["pid"] in workers
        os.kill(owner["pid"], signal.SIGKILL)  # mid-training: its checkpoint half written
        thread.join(300)
    assert "error" not in box, box.get("error")
    on_s3 = box["result"]
    assert on_s3.sizes["seed"] == 3 and not any(on_s3.failure.values)
    local = oodsim.run(spec, cache=tmp_path / "local", n_workers=2, progress=False)
    xr.testing.assert_equal(on_s3, local)  # every variable and coordinate, with their attrs
    differ = {
        k
        for k in on_s3.attrs.keys() | local.attrs.keys()
        if on_s3.attrs.get(k) != local.attrs.get(k)
    }
    assert differ <= RUN_ATTRS, differ  # what only says how each run went
    assert entry_digests(store) == entry_digests(Store(tmp_path / "local"))
    assert store.verify() == [] and store.stale_locks() == []

    again = oodsim.run(spec, cache=url, n_workers=2, progress=False)  # all cached
    assert store_counts(again)["computed"] == {}
    xr.testing.assert_identical(again.score, on_s3.score)
    added = attrs.evolve(spec, detectors=(*spec.detectors, "odin"))
    more = oodsim.run(added, cache=url, n_workers=2, progress=False)
    assert store_counts(more)["computed"] == {KAPPA: 6}  # ID and OOD κ of 3 seeds: no training


WRITER = """
import sys
import numpy as np
from oodsim.keys import digest
from oodsim.store import Store
store = Store(sys.argv[1])
key = digest("killed_writer", 1, {"n": 1})
store.ensure("outputs", key, lambda: store.put("outputs", key, {"x": np.ones(60_000_000)}))
"""


def test_a_writer_killed_mid_entry_leaves_nothing_visible_and_a_rerun_completes(
    url: str, tmp_path: Path
) -> None:
    staging = tmp_path / "tmp"
    staging.mkdir()
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, url], env={**os.environ, "TMPDIR": str(staging)}, cwd=ROOT
    )
    # its entry is written locally (480 MB of arrays), record last, then uploaded: kill it then
    wait_for(lambda: list(staging.glob("oodsim-outputs-*/meta.json")), 120, "the upload")
    writer.send_signal(signal.SIGKILL)
    writer.wait(30)
    store = Store(url)
    key = digest("killed_writer", 1, {"n": 1})
    assert store.backend.read_meta("outputs", key) is None and not store.has("outputs", key)
    assert list(store.entries()) == [] and store.verify() == []
    computed = store.ensure("outputs", key, lambda: store.put("outputs", key, {"x": np.ones(3)}))
    assert computed and store.verify_entry("outputs", key)  # the dead writer's lock taken over
    assert store.stale_locks() == []


def failing_run(spec_file: Path, cache: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "oodsim.cli", "run", str(spec_file), "--cache", cache],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
        cwd=spec_file.parent,
    )


def test_a_missing_bucket_or_refused_credentials_is_one_line_before_any_compute(
    s3_endpoint: str, tmp_path: Path
) -> None:
    spec_file = digits_toml(tmp_path / "digits.toml", 2)
    missing = failing_run(spec_file, "s3://no-such-bucket-oodsim/cache", {})
    denying = s3_server.start(authenticate=True)
    denied_endpoint = denying.endpoint
    try:
        bucket = "refused"
        denied = failing_run(
            spec_file, f"s3://{bucket}/cache", {"FSSPEC_S3_ENDPOINT_URL": denied_endpoint}
        )
    finally:
        denying.kill()
    secret = s3_server.CREDENTIALS["AWS_SECRET_ACCESS_KEY"]
    for run, says in (
        (missing, "the bucket no-such-bucket-oodsim does not exist"),
        (denied, "access denied"),
    ):
        assert run.returncode != 0
        lines = run.stderr.strip().splitlines()  # (what it was to do, if it could read,) why not
        assert len(lines) <= 2 and lines[0].startswith("oodsim: "), run.stderr
        error = lines[-1]
        assert error.startswith("oodsim: error: cannot use the cache s3://") and says in error
        assert "Traceback" not in run.stderr and "training" not in run.stderr
        assert secret not in run.stdout + run.stderr


@pytest.mark.slow
def test_credentials_are_never_stored_in_entries_or_results(url: str, tmp_path: Path) -> None:
    spec = small_digits(1)
    results = oodsim.run(spec, cache=url, out=tmp_path / "r.zarr", n_workers=1, progress=False)
    secret = s3_server.CREDENTIALS["AWS_SECRET_ACCESS_KEY"].encode()
    key_id = s3_server.CREDENTIALS["AWS_ACCESS_KEY_ID"].encode()
    store = Store(url)
    for path in store.backend.fs.find(store.backend.root):
        data = store.backend.fs.cat_file(path)
        assert secret not in data and key_id not in data, path
    for path in (tmp_path / "r.zarr").rglob("*"):
        if path.is_file():
            assert secret not in path.read_bytes() and key_id not in path.read_bytes()
    assert results.attrs  # (what was searched holds the run's provenance)


@pytest.mark.slow
def test_results_on_object_storage_are_written_whole_read_back_and_reported(
    s3_endpoint: str, tmp_path: Path
) -> None:
    from oodsim.results import OutputError, read_pointer, save_results
    from oodsim.results.remote import POINTER

    bucket = s3_server.new_bucket(s3_endpoint)
    url = f"s3://{bucket}/results/digits.zarr"
    spec = small_digits(2)
    first = oodsim.run(spec, cache=tmp_path / "cache", out=url, progress=False)
    xr.testing.assert_identical(oodsim.open_results(url), first)
    on_disk = json.loads(
        (save_results(first, tmp_path / "r.zarr") / "oodsim-results.json").read_text()
    )
    store = Store(f"s3://{bucket}/cache")  # (only its file system is used)
    fs = store.backend.fs
    pointer = read_pointer(url)
    uploaded = json.loads(
        fs.cat_file(f"{bucket}/results/digits.zarr/{pointer['version']}/oodsim-results.json")
    )
    assert uploaded["files"] == on_disk["files"]  # the same zarr files, byte for byte
    assert pointer["key"] == spec.key and pointer["name"] == spec.name

    versions, written = [pointer["version"]], {spec.key: first}
    read: list[xr.Dataset] = []
    writing = threading.Event()

    def reader() -> None:  # reads while the results are replaced, until the last write
        while not writing.is_set():
            read.append(oodsim.open_results(url))

    thread = threading.Thread(target=reader)
    thread.start()
    for detectors in (("msp", "odin"), ("msp", "energy")):  # the spec edited, run again
        edited = attrs.evolve(spec, detectors=detectors)
        written[edited.key] = oodsim.run(edited, cache=tmp_path / "cache", out=url, progress=False)
        versions.append(read_pointer(url)["version"])
        assert oodsim.open_results(url).attrs["spec_key"] == edited.key
    writing.set()
    thread.join(60)
    assert len(read) > 2
    for results in read:  # each read is one of the written results, whole
        xr.testing.assert_identical(results, written[results.attrs["spec_key"]])
    held = sorted(p.rsplit("/", 1)[1] for p in fs.ls(f"{bucket}/results/digits.zarr"))
    assert held == sorted([POINTER, *versions[1:]])  # the current and the one before

    fs.pipe_file(f"{bucket}/elsewhere/notes.txt", b"a user's file")
    with pytest.raises(OutputError, match="not oodsim results"):
        oodsim.run(spec, cache=tmp_path / "cache", out=f"s3://{bucket}/elsewhere", progress=False)

    report = subprocess.run(
        [sys.executable, "-m", "oodsim.cli", "report", url],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "digits.report" / "summary.md").is_file()


def test_gc_keeps_a_write_in_progress_and_removes_a_dead_holders_lock(url: str) -> None:
    store = Store(url)
    store.ensure_writable()
    fs, root = store.backend.fs, store.backend.root
    key = digest("gc_entry", 1, {"n": 1})
    leftover = f"{root}/outputs/{key[:2]}/{key}/0123456789abcdef/{ARRAYS_ZIP}"
    fs.pipe_file(leftover, b"half an upload")  # files that no record names (yet)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    record = {"host": os.uname().nodename, "pid": int(dead.stdout), "start": None, "time": 0.0}
    fs.pipe_file(f"{root}/locks/outputs-{key}.lock", json.dumps(record).encode())
    other = {"host": "another-host", "pid": 1, "start": None}  # a holder on another machine
    for name, touched in (("old", time.time() - 1000), ("live", time.time())):
        lock = {**other, "time": touched}
        fs.pipe_file(f"{root}/locks/outputs-{name}.lock", json.dumps(lock).encode())
    assert list(store.entries()) == [] and store.verify() == []  # no record: no entry
    expired = [f"{store.location}/locks/outputs-{name}.lock" for name in (key, "old")]
    assert sorted(store.stale_locks()) == sorted(expired)  # dead, or untouched for 1000 s
    collected = store.gc(older_than=0)
    assert sorted(collected.removed) == sorted(expired)
    assert fs.exists(f"{root}/locks/outputs-live.lock")
    assert fs.exists(leftover)  # younger than a lock's touch window: maybe being written
    assert store.ensure("outputs", key, lambda: store.put("outputs", key, {"x": np.arange(2)}))
    assert store.verify() == []


def test_an_entry_removed_by_another_process_is_read_again_not_from_memory(
    url: str,
) -> None:
    """A process remembers the records it has read (an entry never changes once committed):
    one that another process removed meanwhile is found gone at the read of its files."""
    store, key = Store(url), digest("seen_entry", 1, {"n": 1})
    store.put("outputs", key, {"x": np.arange(3)})
    assert store.has("outputs", key)  # remembered here
    code = "import sys; from oodsim.store import Store; "
    code += "print(Store(sys.argv[1]).backend.remove('outputs', sys.argv[2], 'a test'))"
    other = subprocess.run([sys.executable, "-c", code, url, key], capture_output=True, text=True)
    assert other.stdout.strip() == "True", other.stderr
    assert store.get("outputs", key) is None and not store.has("outputs", key)
    store.put("outputs", key, {"x": np.arange(4)})
    np.testing.assert_array_equal(Store(url).get("outputs", key).arrays["x"], np.arange(4))


def test_prefetch_reads_the_records_and_sizes_of_many_entries_ahead(url: str) -> None:
    from oodsim.store.objects import SEEN

    keys = [digest("prefetched", 1, {"n": n}) for n in range(5)]
    for key in keys[:4]:  # the last one is never written
        Store(url).put("outputs", key, {"x": np.arange(3)})
    SEEN.clear()  # (as a new process)
    reader = Store(url)
    reader.prefetch([("outputs", key) for key in keys])
    assert [(reader.location, "outputs", key) in SEEN for key in keys] == [True] * 4 + [False]
    assert [reader.has("outputs", key) for key in keys] == [True] * 4 + [False]
    assert reader.get("outputs", keys[0]) is not None
