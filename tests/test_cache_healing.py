"""A cache that heals itself: whatever is malformed in an entry or a lock is found, moved aside
and recomputed in the same run (or reported in one line with the path and the fix), and
``cache verify --repair`` and ``gc`` remove what could block a run without ever following a
link out of the cache. See docs/reliability.md, "Cache healing".

Every scenario tampers with a copy of one clean cache between two runs; the second run must give
results identical to the clean run. No test waits without a bound.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
import xarray as xr

import oodsim
from oodsim.cli import main as cli_main
from oodsim.data import load_dataset, register_dataset
from oodsim.detectors import register
from oodsim.keys import digest
from oodsim.protocols.open_set import CHECKPOINT, OUTPUTS, PROTOCOL, class_split_label, entries
from oodsim.results import store_counts
from oodsim.seeds import SeedStreams
from oodsim.simulation.splits import split_classes
from oodsim.specs import DatasetSpec, DetectorSpec, OODSetSpec
from oodsim.store import META_DIGEST, QUARANTINE_PREFIX, CorruptEntryWarning, Store
from oodsim.store.arrays import ARRAYS_ZIP
from oodsim.store.digests import file_checksums, file_sizes, meta_digest
from oodsim.store.locks import _start_time
from tests import command_server
from tests.conftest import (
    CLEAN_SEEDS,
    ROOT,
    digits_toml,
    in_time,
    run_read_only,
    small_digits,
)

N_SEEDS = CLEAN_SEEDS  # the shared clean cache's (conftest.clean)
HOST = socket.gethostname()


# --------------------------------------------------------------------------- helpers


def entry(cache: Path, kind: str, seed: int = 0) -> Path:
    """The folder of seed ``seed``'s checkpoint or outputs entry."""
    found = dict(entries(small_digits(N_SEEDS), seed))
    return Store(cache).place(kind, found[kind])


def arrays_file(folder: Path) -> Path:
    """The one file that holds an entry's arrays."""
    return folder / ARRAYS_ZIP


def flip_a_byte(path: Path) -> None:
    """Alter one byte in the middle of ``path``; its size stays the same."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def heals(address: str, cache: Path, clean: tuple[Path, Any], *, warns: bool = True) -> Any:
    """Run the clean spec again on ``cache``: results identical to the clean run, a
    ``CorruptEntryWarning`` when ``warns``, and a cache that verifies clean afterwards."""
    spec = small_digits(N_SEEDS)
    if warns:
        with pytest.warns(CorruptEntryWarning):
            result = oodsim.run(spec, address=address, cache=cache, progress=False)
    else:
        result = oodsim.run(spec, address=address, cache=cache, progress=False)
    xr.testing.assert_identical(clean[1].score, result.score)
    assert Store(cache).verify() == []
    return result


# --------------------------------------------------------------------------- corrupt entries


def test_a_same_size_flipped_byte_in_an_outputs_arrays_file_is_recomputed_in_the_same_run(
    cluster_address: str, copy: Path, clean: tuple[Path, Any]
) -> None:
    flip_a_byte(arrays_file(entry(copy, OUTPUTS)))
    result = heals(cluster_address, copy, clean)
    assert store_counts(result)["computed"] == {OUTPUTS: 1}
    assert not np.any(result.failure.values != "")


#: JSON nested 30,000 levels deep (60 kB): Python's parser gives up with a RecursionError.
DEEP_JSON = b"[" * 30_000 + b"]" * 30_000


@pytest.mark.parametrize(
    "content",
    [b"{}", b"{not json", b"[1, 2]", b"", b'{"files": {"../../x": "0"}}', DEEP_JSON],
    ids=["empty-record", "not-json", "a-list", "empty-file", "files-outside", "nested-deep"],
)
def test_a_meta_file_of_the_wrong_form_is_recomputed_in_the_same_run(
    cluster_address: str, copy: Path, clean: tuple[Path, Any], content: bytes
) -> None:
    (entry(copy, OUTPUTS) / "meta.json").write_bytes(content)
    result = heals(cluster_address, copy, clean)
    assert store_counts(result)["computed"] == {OUTPUTS: 1}


def _replace_by_file(path: Path) -> None:
    shutil.rmtree(path)
    path.write_text("not a folder")


def _replace_by_fifo(path: Path) -> None:
    shutil.rmtree(path)
    os.mkfifo(path)


@pytest.mark.parametrize(
    ("level", "replace", "recomputed"),
    [
        ("entry", _replace_by_file, {OUTPUTS: 1}),
        ("prefix", _replace_by_file, {OUTPUTS: 1}),
        ("kind", _replace_by_file, {OUTPUTS: 2}),
        ("entry", _replace_by_fifo, {OUTPUTS: 1}),
    ],
    ids=["key-folder-file", "prefix-folder-file", "kind-folder-file", "key-folder-fifo"],
)
def test_a_file_where_a_folder_belongs_is_moved_aside_and_recomputed(
    cluster_address: str,
    copy: Path,
    clean: tuple[Path, Any],
    level: str,
    replace: Callable[[Path], None],
    recomputed: dict[str, int],
) -> None:
    folder = entry(copy, OUTPUTS)
    target = {"entry": folder, "prefix": folder.parent, "kind": folder.parent.parent}[level]
    if level == "prefix":  # the other seed's outputs may share the prefix folder
        recomputed = {OUTPUTS: len(list(target.iterdir()))}
    replace(target)
    result = heals(cluster_address, copy, clean)
    assert store_counts(result)["computed"] == recomputed


def test_a_link_where_an_entry_belongs_is_removed_never_its_target(
    cluster_address: str, copy: Path, clean: tuple[Path, Any], tmp_path: Path
) -> None:
    folder = entry(copy, OUTPUTS)
    outside = tmp_path / "outside"
    shutil.move(folder, outside)  # a real entry, now outside the cache, linked back in
    folder.symlink_to(outside, target_is_directory=True)
    before = sorted(p.relative_to(outside) for p in outside.rglob("*"))
    with pytest.warns(CorruptEntryWarning, match="a symbolic link"):
        result = heals(cluster_address, copy, clean, warns=False)
    assert store_counts(result)["computed"] == {OUTPUTS: 1}
    assert not folder.is_symlink() and folder.is_dir()
    assert sorted(p.relative_to(outside) for p in outside.rglob("*")) == before


def _rezip(path: Path, edit: Callable[[dict[str, bytes]], None]) -> None:
    """Rewrite the arrays ZIP at ``path`` with its members edited by ``edit``."""
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    edit(members)
    path.unlink()
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for name in sorted(members):
            archive.writestr(name, members[name])


def _largest_chunk(members: dict[str, bytes]) -> str:
    return max((n for n in members if "/c/" in n), key=lambda n: len(members[n]))


def _drop_chunk(members: dict[str, bytes]) -> None:
    del members[_largest_chunk(members)]


def _rename_array(members: dict[str, bytes]) -> None:
    array = _largest_chunk(members).split("/")[0]
    for name in [n for n in members if n.split("/")[0] == array]:
        members[name.replace(array, f"{array}_renamed", 1)] = members.pop(name)


def _extra_array(members: dict[str, bytes]) -> None:
    array = _largest_chunk(members).split("/")[0]
    for name in [n for n in members if n.split("/")[0] == array]:
        members[name.replace(array, "extra", 1)] = members[name]


def _inflate_chunk(members: dict[str, bytes]) -> None:
    members[_largest_chunk(members)] += bytes(64)


def reseal(folder: Path) -> None:
    """Update an entry's meta record (checksums, sizes, its own digest) to its files as they
    are now: what someone who edits an entry and covers the traces does."""
    meta = json.loads((folder / "meta.json").read_text())
    meta["files"], meta["sizes"] = file_checksums(folder), file_sizes(folder)
    meta[META_DIGEST] = meta_digest(meta)
    (folder / "meta.json").write_text(json.dumps(meta, sort_keys=True))


@pytest.mark.parametrize(
    "edit",
    [_drop_chunk, _rename_array, _extra_array, _inflate_chunk],
    ids=["missing", "renamed", "extra", "inflated"],
)
def test_a_resealed_arrays_zip_whose_members_differ_from_meta_is_recomputed(
    cluster_address: str, copy: Path, clean: tuple[Path, Any], edit: Callable
) -> None:
    """The probe: an outputs ZIP that lost its largest array's chunk, resealed, read that
    array as zeros; the seed turned "degenerate" and `cache verify` said clean."""
    folder = entry(copy, OUTPUTS)
    _rezip(arrays_file(folder), edit)
    reseal(folder)
    problems = Store(copy).verify()
    assert [info.key for info, _ in problems] == [folder.name], problems
    result = heals(cluster_address, copy, clean)
    assert store_counts(result)["computed"] == {OUTPUTS: 1}
    assert not np.any(result.failure.values != "")


def test_a_missing_arrays_file_is_recomputed_in_the_same_run(
    cluster_address: str, copy: Path, clean: tuple[Path, Any]
) -> None:
    arrays_file(entry(copy, OUTPUTS)).unlink()
    result = heals(cluster_address, copy, clean)
    assert store_counts(result)["computed"] == {OUTPUTS: 1}


def test_a_meta_file_replaced_by_a_fifo_is_never_opened(
    cluster_address: str, copy: Path, clean: tuple[Path, Any]
) -> None:
    meta = entry(copy, CHECKPOINT) / "meta.json"
    meta.unlink()
    os.mkfifo(meta)  # opening it for reading would block forever
    result = in_time(lambda: heals(cluster_address, copy, clean), 240)
    assert store_counts(result)["computed"] == {CHECKPOINT: 1}


# tampering while the run goes on: a detector that, in the driver, damages the outputs of seed 1
# while seed 0 is scored; seed 1 then finds its entry corrupt when it is read
_TAMPER: dict[str, Any] = {}


@register("test_heal_tamper", needs={"logits"}, replace=True)
def _tamper_then_msp(outputs: Any, *, fit: Any = None) -> np.ndarray:
    target = _TAMPER.pop("path", None) if _TAMPER.get("pid") == os.getpid() else None
    if target is not None:
        flip_a_byte(target)
    logits = np.asarray(outputs.logits, dtype=np.float64)
    soft = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (soft / soft.sum(axis=1, keepdims=True)).max(axis=1)


def test_an_entry_corrupted_while_the_run_scores_is_recomputed_once(
    cluster_address: str, tmp_path: Path
) -> None:
    spec = small_digits(N_SEEDS, detectors=("msp", "test_heal_tamper"))
    cache = tmp_path / "cache"
    first = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    outputs = Store(cache).place(*entries(spec, 1)[1])
    _TAMPER.update(pid=os.getpid(), path=arrays_file(outputs))
    with pytest.warns(CorruptEntryWarning, match="checksum mismatch"):
        second = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    assert "path" not in _TAMPER  # the tampering happened, during the run
    xr.testing.assert_identical(first.score, second.score)
    assert store_counts(second)["computed"] == {OUTPUTS: 1}


def test_an_entry_damaged_inside_its_own_task_is_recomputed_once(
    cluster_address: str, tmp_path: Path
) -> None:
    """Damage between a task's write of its outputs and its own read of them (for a
    model-based κ): the task fails with a lost entry, and the engine computes the seed once
    more in the same run instead of reporting it failed. The damage comes from the OOD
    dataset's loader, which the task calls between those two steps, once."""
    cache, marker = tmp_path / "cache", tmp_path / "damaged-once"

    def damaging_digits(root=None, download=False, image_size=None):
        outputs = [p for p in (cache / OUTPUTS).glob("*/*") if p.is_dir()]
        if outputs and not marker.exists():  # on the worker, after the outputs were written
            marker.write_text(str(outputs[0]))
            flip_a_byte(arrays_file(outputs[0]))
        return load_dataset("digits")

    register_dataset(
        "test_damaging_digits", n_classes=10, hflip=False, description="x", replace=True
    )(damaging_digits)
    ood = OODSetSpec(kind="dataset", dataset=DatasetSpec(name="test_damaging_digits"))
    spec = small_digits(1, ood=(OODSetSpec(kind="held_out"), ood))
    spec = attrs.evolve(
        spec, detectors=("msp", DetectorSpec(name="mc_dropout", params={"n_passes": 2}))
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CorruptEntryWarning)
        results = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    assert marker.exists()  # the damage happened
    assert list(results.failure.values) == [""]
    assert np.isfinite(results.score.values).all()
    assert store_counts(results)["computed"][OUTPUTS] == 2  # written, damaged, written again


def test_class_split_labels_never_come_from_an_altered_record(tmp_path: Path) -> None:
    """A seed's class split is drawn again from its stream, so a checkpoint record replaced
    or edited between planning and scoring cannot relabel it."""
    spec = small_digits(2)
    store = Store(tmp_path / "cache")
    expected = [PROTOCOL(spec).seed_coords(seed, store)["class_split"] for seed in (0, 1)]
    assert expected[0] != "" and len(set(expected)) == 2
    labels = [class_split_label(spec, seed) for seed in (0, 1)]
    assert labels == expected
    streams = SeedStreams(0, {})
    assert expected[0] == split_classes(10, spec.split, streams).label


# --------------------------------------------------------------------------- locks


def _dead_pid() -> tuple[int, str | None]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    start = None
    while start is None and child.poll() is None:
        start = _start_time(child.pid)
    child.wait(timeout=30)
    return child.pid, start


def _record(**fields: Any) -> bytes:
    return json.dumps({"host": HOST, "pid": 1, "start": None, "time": 0.0, **fields}).encode()


def _write(content: bytes, mtime: float | None = None) -> Callable[[Path, Path], None]:
    def make(lock: Path, outside: Path) -> None:
        lock.write_bytes(content)
        if mtime is not None:
            os.utime(lock, (mtime, mtime))

    return make


def _folder(lock: Path, outside: Path) -> None:
    lock.mkdir()
    (lock / "inside").write_text("x")


def _link(lock: Path, outside: Path) -> None:
    lock.symlink_to(outside)


def _fifo(lock: Path, outside: Path) -> None:
    os.mkfifo(lock)


def _dead_holder(lock: Path, outside: Path) -> None:
    pid, start = _dead_pid()
    lock.write_bytes(_record(pid=pid, start=start))


LOCKS: dict[str, Callable[[Path, Path], None]] = {
    "garbage": _write(b"\x00\xffgarbage", mtime=time.time() - 60),
    "empty-future-mtime": _write(b"", mtime=time.time() + 10**8),
    "a-list": _write(b"[1, 2]"),
    "empty-record": _write(b"{}"),
    "pid-text": _write(_record(pid="abc")),
    "pid-0": _write(_record(pid=0)),
    "pid-minus-1": _write(_record(pid=-1)),
    "pid-huge": _write(_record(pid=10**30)),
    "pid-true": _write(_record(pid=True)),
    "no-host": _write(b'{"pid": 1}'),
    "host-number": _write(_record(host=7)),
    "dead-holder": _dead_holder,
    "a-folder": _folder,
    "a-link-out": _link,
    "a-fifo": _fifo,
    "huge": _write(b"[" + b"0," * 50_000 + b"0]"),
    "nested-deep": _write(DEEP_JSON),
}


@pytest.mark.parametrize("name", list(LOCKS))
def test_a_malformed_lock_is_taken_over_without_traceback_or_wait(
    tmp_path: Path, name: str
) -> None:
    """Store level, for every kind of lock: ``ensure`` computes the key, in bounded time."""
    store = Store(tmp_path / "cache")
    key = digest("test_entry", 1, {"n": 776})
    (store.backend.root / "locks").mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    LOCKS[name](store.backend.root / "locks" / f"{OUTPUTS}-{key}.lock", outside)

    def compute() -> None:
        store.put(OUTPUTS, key, {"x": np.arange(3)})

    assert in_time(lambda: store.ensure(OUTPUTS, key, compute), 60) is True
    assert store.get(OUTPUTS, key) is not None
    assert outside.read_text() == "keep me"
    assert list((store.backend.root / "locks").iterdir()) == []


@pytest.mark.parametrize(
    "names",
    [
        ("garbage", "empty-record", "pid-minus-1", "a-folder"),
        ("pid-text", "dead-holder", "a-link-out", "empty-future-mtime"),
    ],
    ids=["garbage-schema-pid-folder", "text-pid-dead-link-future"],
)
def test_malformed_locks_on_keys_a_run_must_compute_do_not_stop_it(
    cluster_address: str, copy: Path, clean: tuple[Path, Any], tmp_path: Path, names: tuple
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    needed = [e for seed in range(N_SEEDS) for e in entries(small_digits(N_SEEDS), seed)]
    for (kind, key), name in zip(needed, names, strict=True):
        shutil.rmtree(Store(copy).place(kind, key))
        LOCKS[name](copy / "locks" / f"{kind}-{key}.lock", outside)
    result = in_time(lambda: heals(cluster_address, copy, clean, warns=False), 240)
    assert store_counts(result)["computed"] == {CHECKPOINT: 2, OUTPUTS: 2}
    assert outside.read_text() == "keep me"
    assert list((copy / "locks").iterdir()) == []


def test_a_lock_of_a_live_holder_is_waited_for_then_taken_over_when_it_exits(
    cluster_address: str, copy: Path, clean: tuple[Path, Any]
) -> None:
    kind, key = entries(small_digits(N_SEEDS), 0)[1]
    shutil.rmtree(Store(copy).place(kind, key))
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    try:
        start = None
        while start is None and holder.poll() is None:
            start = _start_time(holder.pid)
        lock = copy / "locks" / f"{kind}-{key}.lock"
        lock.write_bytes(_record(pid=holder.pid, start=start))
        assert Store(copy).stale_locks() == []  # live: not taken over
        result = in_time(lambda: heals(cluster_address, copy, clean, warns=False), 240)
    finally:
        holder.kill()
        holder.wait()
    assert store_counts(result)["computed"] == {OUTPUTS: 1}


def test_a_file_where_the_locks_folder_belongs_is_moved_aside(
    cluster_address: str, copy: Path, clean: tuple[Path, Any]
) -> None:
    shutil.rmtree(entry(copy, OUTPUTS))
    shutil.rmtree(copy / "locks")
    (copy / "locks").write_text("not a folder")
    result = heals(cluster_address, copy, clean, warns=False)  # moved aside on a worker
    assert store_counts(result)["computed"] == {OUTPUTS: 1}


# --------------------------------------------------------------------------- read-only folders


def _permissions_apply(folder: Path) -> bool:
    """Whether a process started like the test's is refused writes in a read-only folder."""
    folder.mkdir()
    probe = run_read_only([sys.executable, "-c", f"open({str(folder / 'x')!r}, 'w')"], [folder], 60)
    return probe.returncode != 0


def test_a_corrupt_entry_that_cannot_be_moved_aside_is_one_clear_error(
    cluster_address: str, copy: Path, clean: tuple[Path, Any], tmp_path: Path
) -> None:
    if not _permissions_apply(tmp_path / "probe"):
        pytest.skip("this process ignores permission bits and cannot drop that privilege")
    checkpoint = entry(copy, CHECKPOINT)
    flip_a_byte(arrays_file(checkpoint))
    spec_path = digits_toml(tmp_path / "s.toml", N_SEEDS)
    command = [sys.executable, "-m", "oodsim.cli", "run", str(spec_path), "--quiet"]
    command += ["--address", cluster_address, "--cache", str(copy), "--out", str(tmp_path / "r")]
    # the entry cannot be renamed out of its folder; the bug this guards against was a worker
    # spinning forever
    run = run_read_only(command, [checkpoint.parent], timeout=180, cwd=ROOT)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert lines[0].startswith(f"oodsim: error: corrupt cache entry {CHECKPOINT}/")
    assert str(checkpoint) in lines[0] and "checksum mismatch" in lines[0]
    assert "Permission denied" in lines[0]
    assert f"rm -rf '{checkpoint}'" in lines[0] and f"make {checkpoint.parent} writable" in lines[0]
    heals(cluster_address, copy, clean)  # the fix applied: the next run heals


@pytest.mark.parametrize("workers", ["1", "2"], ids=["in-process", "local-cluster"])
def test_the_command_says_a_corrupt_entry_was_recomputed_in_one_line(
    copy: Path, tmp_path: Path, workers: str
) -> None:
    """``oodsim run`` on a cache with a corrupt checkpoint: the warning is one line, from the
    driver or from a local worker. It was Python's two, the second the source line
    ``warnings.warn(`` of oodsim's store, which a user cannot act on."""
    flip_a_byte(arrays_file(entry(copy, CHECKPOINT)))
    spec_path = digits_toml(tmp_path / "s.toml", N_SEEDS)
    command = [sys.executable, "-m", "oodsim.cli", "run", str(spec_path), "--quiet"]
    command += ["--workers", workers, "--cache", str(copy)]
    run = command_server.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(f"oodsim: warning: corrupt cache entry {CHECKPOINT}/")
    assert lines[0].endswith("moved aside, it will be recomputed"), lines[0]


def test_the_store_reports_rather_than_spins_when_an_entry_or_lock_cannot_move(
    tmp_path: Path,
) -> None:
    """What a worker does with a corrupt checkpoint in a read-only folder: ``get`` and ``ensure``
    raise ``StoreError`` (the loop that retrains on a corrupt read stops)."""
    if not _permissions_apply(tmp_path / "probe"):
        pytest.skip("this process ignores permission bits and cannot drop that privilege")
    store, key, other = (
        Store(tmp_path / "cache"),
        digest("test_entry", 1, {"n": 177}),
        digest("test_entry", 1, {"n": 371}),
    )
    path = store.put(CHECKPOINT, key, {"w": np.arange(1000.0)})
    flip_a_byte(arrays_file(path))
    (store.put(CHECKPOINT, other, {"w": np.arange(3.0)}) / "meta.json").write_text("{}")
    locks = store.backend.root / "locks"
    locks.mkdir()
    (locks / f"{OUTPUTS}-{key}.lock").write_text("[]")  # not a lock: stale at once
    code = (
        "import sys\nfrom oodsim.store import Store, StoreError\n"
        "store, key, other = Store(sys.argv[1]), sys.argv[2], sys.argv[3]\n"
        "def worker():  # a worker loading a checkpoint, retraining a corrupt one\n"
        "    while store.get('checkpoint', key) is None:\n"
        "        store.ensure('checkpoint', key, lambda: None)\n"
        "calls = (worker, lambda: store.has('checkpoint', other),\n"
        "         lambda: store.ensure('outputs', key, lambda: None),\n"
        "         lambda: store.ensure('outputs', other, lambda: None))\n"
        "for call in calls:\n"
        "    try:\n        call()\n    except StoreError as error:\n        print(error)\n"
    )
    command = [sys.executable, "-c", code, str(store.backend.root), key, other]
    run = run_read_only(command, [path.parent, locks], timeout=60, cwd=ROOT)
    lines = run.stdout.strip().splitlines()
    assert run.returncode == 0 and len(lines) == 4, run.stderr
    assert "checksum mismatch" in lines[0] and "not an entry record" in lines[1]
    for line, folder in zip(lines[:2], (path, path.parent / other), strict=True):
        assert f"at {folder} (" in line and "cannot be moved aside: Permission denied" in line
        assert f"rm -rf '{folder}'" in line and f"make {path.parent} writable" in line
    stale = locks / f"{OUTPUTS}-{key}.lock"
    assert lines[2].startswith(f"the lock {stale} is stale (not an oodsim lock")
    assert f"cannot be removed: Permission denied. Remove it (rm -rf '{stale}')" in lines[2]
    assert lines[3].startswith(f"cannot create the lock file {locks / f'{OUTPUTS}-{other}.lock'}")
    assert f"Permission denied; make {locks} writable" in lines[3]


# --------------------------------------------------------------------------- verify --repair, gc


def test_cache_gc_says_what_it_could_not_remove(copy: Path, tmp_path: Path) -> None:
    """A stale lock in a locks folder this user cannot write: ``oodsim cache gc`` names it and
    exits 1; it used to say ``removed 0 leftovers`` and exit 0 (a probe on a read-only
    mount), as if the cache were clean."""
    if not _permissions_apply(tmp_path / "probe"):
        pytest.skip("this process ignores permission bits and cannot drop that privilege")
    locks = copy / "locks"
    locks.mkdir(exist_ok=True)
    garbage = locks / f"{OUTPUTS}-garbage.lock"
    garbage.write_bytes(b"\x00garbage")  # not a lock, and old: stale
    os.utime(garbage, (0, 0))
    command = [sys.executable, "-m", "oodsim.cli", "cache", "gc", "--cache", str(copy)]
    done = run_read_only(command, [locks], timeout=120)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0] == f"could not remove {garbage}: Permission denied", lines
    assert lines[-1].startswith("removed 0 leftovers") and "1 could not be removed" in lines[-1]
    assert f"make {copy} writable" in lines[-1]
    assert garbage.exists()
    assert cli_main(["cache", "gc", "--cache", str(copy)]) == 0  # writable again: removed
    assert not garbage.exists()


def _tamper_layout(cache: Path, outside: Path) -> dict[str, Path]:
    """A file in place of a key folder, a prefix folder and a kind folder; garbage locks; a
    quarantine leftover with a read-only folder inside; links to a folder outside the cache
    in place of an entry and of a kind folder. ``outside`` holds a copy of a real entry."""
    seed0, seed1 = entry(cache, OUTPUTS, 0), entry(cache, CHECKPOINT, 1)
    shutil.copytree(seed0, outside / "entry")
    (outside / "ee" / ("ee" + "5" * 62)).mkdir(parents=True)
    (outside / "ee" / ("ee" + "5" * 62) / "meta.json").write_text("{}")  # corrupt, outside
    _replace_by_file(seed0)
    _replace_by_file(seed1.parent)
    (cache / "severity_kappa").write_text("not a folder")  # a kind folder that is a file
    (cache / "locks" / "outputs-garbage.lock").write_bytes(b"\x00garbage")
    os.utime(cache / "locks" / "outputs-garbage.lock", (0, 0))
    (cache / "locks" / "outputs-folder.lock").mkdir()
    leftover = seed0.parent / f"{QUARANTINE_PREFIX}{seed0.name}-deadbeef"
    (leftover / "arrays.zarr").mkdir(parents=True)
    (leftover / "arrays.zarr" / "chunk").write_text("x")
    (leftover / "arrays.zarr").chmod(0o555)
    link = seed0.parent / (seed0.parent.name + "5" * 62)
    link.symlink_to(outside / "entry", target_is_directory=True)
    (cache / "ood_outputs").symlink_to(outside, target_is_directory=True)
    return {"link": link, "leftover": leftover}


def _outside_intact(outside: Path) -> None:
    assert (outside / "entry" / "meta.json").is_file()
    assert (outside / "ee" / ("ee" + "5" * 62) / "meta.json").read_text() == "{}"


def test_cache_verify_repair_removes_what_blocks_and_never_follows_links(
    cluster_address: str,
    copy: Path,
    clean: tuple[Path, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    outside = tmp_path / "outside"
    made = _tamper_layout(copy, outside)
    assert cli_main(["cache", "verify", "--cache", str(copy)]) == 1
    listed = capsys.readouterr().out
    assert "a file where a folder belongs" in listed and "a symbolic link (to " in listed
    assert "locks/outputs-garbage.lock" in listed and "locks/outputs-folder.lock" in listed
    _outside_intact(outside)
    assert cli_main(["cache", "verify", "--cache", str(copy), "--repair"]) == 0
    assert "corrupt entries removed" in capsys.readouterr().out
    _outside_intact(outside)
    assert not made["link"].exists() and not made["link"].is_symlink()
    assert not made["leftover"].exists()
    assert not (copy / "ood_outputs").is_symlink() and not (copy / "severity_kappa").exists()
    assert list((copy / "locks").iterdir()) == []
    assert cli_main(["cache", "verify", "--cache", str(copy)]) == 0
    result = heals(cluster_address, copy, clean, warns=False)
    assert store_counts(result)["computed"] == {CHECKPOINT: 1, OUTPUTS: 1}


def test_cache_commands_treat_a_deeply_nested_meta_as_corrupt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A meta.json nested 30,000 levels deep used to stop ``cache ls``, ``verify`` and
    ``verify --repair`` with a RecursionError, bricking the cache until removed by hand."""
    store = Store(tmp_path / "cache")
    key = digest("test_entry", 1, {"n": 1024})
    folder = store.put(OUTPUTS, key, {"x": np.arange(3)})
    (folder / "meta.json").write_bytes(DEEP_JSON)
    assert cli_main(["cache", "ls", "--cache", str(store.backend.root)]) == 0
    assert cli_main(["cache", "verify", "--cache", str(store.backend.root)]) == 1
    assert "nested too deeply" in capsys.readouterr().out
    assert cli_main(["cache", "verify", "--cache", str(store.backend.root), "--repair"]) == 0
    assert not folder.exists()
    assert cli_main(["cache", "verify", "--cache", str(store.backend.root)]) == 0
    assert store.get(OUTPUTS, key) is None  # gone: a run computes it again


def test_cache_commands_read_a_cache_through_a_linked_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/caching.md suggests linking a cache onto a larger disk; ``oodsim run`` reads the
    link, and ``cache ls|verify`` read the link itself: "total 0.00 MB", "0 corrupt entries"
    over a corrupt entry."""
    store = Store(tmp_path / "cache")
    key = digest("test_entry", 1, {"n": 226})
    folder = store.put(OUTPUTS, key, {"x": np.arange(3)})
    link = tmp_path / "link"
    link.symlink_to(store.backend.root, target_is_directory=True)
    assert Store(link).get(OUTPUTS, key) is not None
    assert cli_main(["cache", "ls", "--cache", str(link)]) == 0
    assert key[:16] in capsys.readouterr().out
    data = bytearray((folder / ARRAYS_ZIP).read_bytes())
    data[len(data) // 2] ^= 0xFF  # its checksum no longer matches
    (folder / ARRAYS_ZIP).write_bytes(bytes(data))
    assert cli_main(["cache", "verify", "--cache", str(link)]) == 1
    assert f"corrupt: {OUTPUTS}/{key}" in capsys.readouterr().out
    assert link.is_symlink() and folder.exists()  # found, not moved: verify only reads


def test_cache_gc_removes_what_blocks_and_never_follows_links(
    copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tmp_path / "outside"
    made = _tamper_layout(copy, outside)
    tmp_link = copy / "outputs" / ".tmp-link"
    tmp_link.symlink_to(outside, target_is_directory=True)
    os.utime(tmp_link, (0, 0), follow_symlinks=False)
    assert cli_main(["cache", "gc", "--cache", str(copy)]) == 0
    assert "Traceback" not in capsys.readouterr().err
    _outside_intact(outside)
    for path in (made["link"], made["leftover"], tmp_link, copy / "ood_outputs"):
        assert not path.exists() and not path.is_symlink(), path
    assert not (copy / "severity_kappa").exists()
    assert list((copy / "locks").iterdir()) == []
    assert list(copy.glob("**/.tmp-*")) == []
    assert Store(copy).verify() == []  # nothing left that verify would flag
