"""The content-addressed store: atomic writes, checksums, maintenance."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import oodsim.store.locks as store_locks
from oodsim import progress_notes
from oodsim.keys import digest
from oodsim.store import CorruptEntryWarning, Store, StoreError
from oodsim.store.arrays import ARRAYS_ZIP
from oodsim.store.layout import is_cache
from oodsim.store.locks import (
    STALE_LOCK_SECONDS,
    TOUCH_SECONDS,
    LockToucher,
    _start_time,
    why_stale,
)

KEY = digest("test_entry", 1, {"n": 124})  # under the prefix folder "ab"
#: three more keys, for entries of their own
KEY_A, KEY_B, KEY_C = (
    digest("test_entry", 1, {"n": 27}),
    digest("test_entry", 1, {"n": 7}),
    digest("test_entry", 1, {"n": 24}),
)


def _arrays() -> dict[str, np.ndarray]:
    return {"logits": np.arange(12, dtype=np.float32).reshape(4, 3), "labels": np.arange(4)}


def test_put_get_roundtrip_records_events(tmp_path: Path) -> None:
    store = Store(tmp_path)
    assert not store.has("outputs", KEY)
    store.put("outputs", KEY, _arrays(), {"describe": "x"})
    entry = store.get("outputs", KEY)
    assert entry is not None
    np.testing.assert_array_equal(entry.arrays["logits"], _arrays()["logits"])
    assert entry.meta["describe"] == "x" and entry.meta["shapes"]["labels"] == [4]
    assert store.counts() == {"computed": {"outputs": 1}, "loaded": {"outputs": 1}}
    assert store.place("outputs", KEY) == tmp_path / "outputs" / "ab" / KEY


def test_exception_during_write_leaves_no_entry(tmp_path: Path) -> None:
    store = Store(tmp_path)

    bad = {"ok": np.zeros(3), "bad": object()}  # zarr cannot store an object: fails mid-write
    with pytest.raises(Exception):  # noqa: B017 - any failure must leave nothing behind
        store.put("outputs", KEY, bad)  # type: ignore[arg-type]
    assert not store.has("outputs", KEY)
    assert list((tmp_path / "outputs" / "ab").iterdir()) == []


def _slow_writer(root: str) -> None:
    store = Store(root)
    big = {f"a{i}": np.random.default_rng(i).random((200, 200)) for i in range(400)}
    store.put("outputs", KEY, big)


def _slow_locked_writer(root: str) -> None:
    """A run's write: under the key's lock, as :meth:`Store.ensure` computes."""
    store = Store(root)
    store.ensure("outputs", KEY, lambda: _slow_writer(root))


def test_gc_never_removes_the_temporary_folder_of_a_live_writer(tmp_path: Path) -> None:
    """The probe: `oodsim cache gc --older-than 0` during a run deleted the live writer's
    temporary folder, and the run aborted. Here the folder is even made to look old."""
    process = multiprocessing.get_context("spawn").Process(
        target=_slow_locked_writer, args=(str(tmp_path),)
    )
    process.start()
    folder = tmp_path / "outputs" / "ab"
    deadline = time.time() + 60
    while time.time() < deadline and not (
        folder.is_dir() and any(p.name.startswith(".tmp-") for p in folder.iterdir())
    ):
        time.sleep(0.01)
    (tmp,) = [p for p in folder.iterdir() if p.name.startswith(".tmp-")]
    os.utime(tmp, (time.time() - 3600,) * 2)
    assert Store(tmp_path).gc(older_than=0).removed == []
    process.join(120)
    assert process.exitcode == 0
    assert Store(tmp_path).verify() == [] and Store(tmp_path).has("outputs", KEY)


def test_kill_between_write_and_rename_leaves_no_visible_entry(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    process = ctx.Process(target=_slow_writer, args=(str(tmp_path),))
    process.start()
    folder = tmp_path / "outputs" / "ab"
    deadline = time.time() + 60
    while time.time() < deadline:  # wait until the temporary entry is being written
        if folder.is_dir() and any(p.name.startswith(".tmp-") for p in folder.iterdir()):
            break
        time.sleep(0.01)
    time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)
    process.join()
    store = Store(tmp_path)
    assert not store.has("outputs", KEY)
    assert store.get("outputs", KEY) is None
    leftovers = [p for p in folder.iterdir()]
    assert leftovers and all(p.name.startswith(".tmp-") for p in leftovers)
    assert store.gc(older_than=0).removed == []  # younger than the touch window: could be live
    for leftover in leftovers:
        os.utime(leftover, (time.time() - STALE_LOCK_SECONDS - 1,) * 2)
    assert store.gc(older_than=0).removed and not any(folder.iterdir())
    store.put("outputs", KEY, _arrays())  # the next run recomputes it
    assert store.has("outputs", KEY)


def test_corrupt_entry_is_detected_warned_and_dropped(tmp_path: Path) -> None:
    store = Store(tmp_path)
    path = store.put("outputs", KEY, _arrays())
    arrays = path / ARRAYS_ZIP  # the entry's one file of arrays
    arrays.write_bytes(arrays.read_bytes()[:-3] + b"xyz")
    assert [problem for _, problem in store.verify()]
    with pytest.warns(CorruptEntryWarning, match="recomputed"):
        assert store.get("outputs", KEY) is None
    assert not store.has("outputs", KEY)


def test_verify_repair_removes_entry_with_altered_meta(tmp_path: Path) -> None:
    store = Store(tmp_path)
    path = store.put("checkpoint", KEY, _arrays())
    meta = json.loads((path / "meta.json").read_text())
    meta["files"] = {k: "0" * 64 for k in meta["files"]}
    (path / "meta.json").write_text(json.dumps(meta))
    problems = store.verify(repair=True)
    assert len(problems) == 1 and "checksum" in problems[0][1]
    assert not store.has("checkpoint", KEY)


def test_concurrent_writer_keeps_first_entry(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.put("outputs", KEY, _arrays())
    store.put("outputs", KEY, {"logits": np.ones((1, 1))})  # loses the race: theirs is kept
    entry = store.get("outputs", KEY)
    assert entry is not None and entry.arrays["logits"].shape == (4, 3)


def test_unusable_cache_root_fails_early(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")  # works for root too, unlike chmod
    with pytest.raises(StoreError, match="not writable"):
        Store(blocker / "cache").ensure_writable()


def _foreign_lock(path: Path, age: float) -> None:
    """A lock record of a process on another node, last touched ``age`` seconds ago."""
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"host": "node-elsewhere", "pid": 4242, "start": "1", "time": time.time() - age}
    path.write_text(json.dumps(record))
    os.utime(path, (time.time() - age, time.time() - age))


def test_a_lock_of_another_node_is_live_while_touched_and_stale_after_missed_touches(
    tmp_path: Path,
) -> None:
    """Across nodes no pid can be checked: a holder touches its lock every touch, and a
    lock untouched for ten of them (its job was preempted, its node crashed) is taken over,
    so another node computes that key within minutes, not hours."""
    store = Store(tmp_path / "cache")
    fresh = tmp_path / "cache" / "locks" / "checkpoint-aa.lock"
    _foreign_lock(fresh, age=3 * TOUCH_SECONDS)
    assert why_stale(fresh) == ""
    old = tmp_path / "cache" / "locks" / "checkpoint-bb.lock"
    _foreign_lock(old, age=STALE_LOCK_SECONDS + 5)
    assert why_stale(old).startswith("held by host node-elsewhere and untouched for ")
    with store.lock("checkpoint", "bb"):  # taken over without waiting
        record = json.loads(old.read_text())
        assert record["pid"] == os.getpid()
    assert not old.exists()


def test_a_held_lock_is_touched_by_its_toucher(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    lock.write_text("{}")
    os.utime(lock, (time.time() - 100, time.time() - 100))
    with LockToucher(lock, interval=0.05):
        deadline = time.monotonic() + 30
        while time.time() - lock.stat().st_mtime > 50 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert time.time() - lock.stat().st_mtime < 50  # touched: it looks alive to other nodes


def _hold_lock(root: str, taken: Any, release: Any) -> None:
    """Hold the lock of outputs/KEY, as a run computing it does, until ``release`` is set."""
    with Store(root).lock("outputs", KEY):
        taken.set()
        release.wait(120)


def test_a_forged_or_stopped_holder_is_named_while_waited_for_then_taken_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe: a lock of a stopped process (Ctrl-Z), or a forged live one (this host, pid
    1), made a second run wait for ever without a word. The waiter now says whose lock it
    waits for, and takes over a lock untouched for the touch window."""
    monkeypatch.setattr(store_locks, "LOCK_NOTICE_SECONDS", 0.2)
    store = Store(tmp_path)
    context = multiprocessing.get_context("spawn")
    taken, release = context.Event(), context.Event()
    holder = context.Process(target=_hold_lock, args=(str(tmp_path), taken, release))
    holder.start()
    try:
        assert taken.wait(60)
        os.kill(holder.pid, signal.SIGSTOP)  # Ctrl-Z: alive, but its touch stops
        lock = tmp_path / "locks" / f"outputs-{KEY}.lock"
        heard: list[str] = []
        done = threading.Event()

        def compute() -> None:
            store.put("outputs", KEY, _arrays())

        def second_run() -> None:
            def listener(message: dict) -> None:
                heard.append(message["stage"])

            progress_notes.listen_here(listener)
            try:
                store.ensure("outputs", KEY, compute)
            finally:
                progress_notes.stop_listening_here(listener)
            done.set()

        thread = threading.Thread(target=second_run, daemon=True)
        thread.start()
        deadline = time.time() + 30
        while not heard and time.time() < deadline:
            time.sleep(0.05)
        assert heard and f"pid {holder.pid} on host " in heard[0], heard
        assert "taken over once untouched for 200 s" in heard[0]
        assert not done.is_set()
        old = time.time() - STALE_LOCK_SECONDS - 1  # the window passes without a touch
        os.utime(lock, (old, old))
        thread.join(30)
        assert done.is_set() and store.has("outputs", KEY)
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        release.set()
        holder.join(30)
    # a forged live lock (this host, pid 1 with its real start time) is taken over the same way
    forged = tmp_path / "locks" / "outputs-cd.lock"
    record = {"host": socket.gethostname(), "pid": 1, "start": _start_time(1), "time": 0}
    forged.write_text(json.dumps(record))
    assert why_stale(forged) == ""
    os.utime(forged, (old, old))
    assert "has not touched it for" in why_stale(forged)


def test_move_kind_moves_intact_entries_drops_duplicates_and_leaves_corrupt_ones(tmp_path):
    """``Store.move_kind``: an entry keeps its key and arrays under the new kind and reads
    back intact; one the new kind holds already is dropped; a corrupt one stays where it is,
    named, for ``cache verify --repair``."""
    store = Store(tmp_path / "cache")
    arrays = {"logits": np.arange(12.0).reshape(4, 3)}
    for key in (KEY_A, KEY_B, KEY_C):
        store.put("old_kind", key, arrays, {"describe": f"entry {key[0]}"})
    store.put("new_kind", KEY_B, arrays, {"describe": "already moved"})
    corrupt = store.place("old_kind", KEY_C) / "arrays.zarr.zip"
    data = bytearray(corrupt.read_bytes())
    data[len(data) // 2] ^= 0xFF
    corrupt.write_bytes(bytes(data))

    moved = store.move_kind("old_kind", "new_kind")

    assert (moved.moved, moved.duplicates) == (1, 1)
    assert [key for key, _ in moved.left] == [KEY_C]
    assert "checksum mismatch" in moved.left[0][1]
    entry = Store(tmp_path / "cache").get("new_kind", KEY_A)
    assert entry is not None and entry.meta["kind"] == "new_kind"
    assert entry.meta["describe"] == "entry a"
    np.testing.assert_array_equal(entry.arrays["logits"], arrays["logits"])
    assert store.get("new_kind", KEY_B).meta["describe"] == "already moved"
    assert store.holds_kind("old_kind")  # the corrupt one stays in place
    assert [info.key for info, _ in store.verify()] == [KEY_C]  # only the corrupt one


def test_a_cache_deleted_under_a_writer_is_made_again_as_a_cache(tmp_path: Path) -> None:
    """The probe: the cache folder deleted while a run wrote; a worker's store, marked before,
    made the folder again without oodsim's mark, and `oodsim cache` then refused it."""
    store = Store(tmp_path / "c")
    store.put("outputs", KEY_A, {"x": np.arange(3)})
    assert is_cache(store.backend.root)
    shutil.rmtree(store.backend.root)
    store.put("outputs", KEY_B, {"x": np.arange(3)})
    assert is_cache(store.backend.root)
    assert store.has("outputs", KEY_B)


def test_callers_hold_a_store_never_its_root_path() -> None:
    """Outside :mod:`oodsim.store` a store is a ``Store``: where it is comes as text
    (``Store.location``), its checks as its methods, never ``store.root`` as a path."""
    package = Path(__file__).resolve().parents[1] / "oodsim"
    found = [
        f"{path.relative_to(package)}:{number}"
        for path in sorted(package.rglob("*.py"))
        if path.parent.name != "store"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\bstore\.root\b|\bbackend\.root\b", line)
    ]
    assert found == []
    store = Store(Path("relative") / "cache")
    assert store.location == str(Path.cwd() / "relative" / "cache") and not store.exists()
