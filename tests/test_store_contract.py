"""The store's contract, the same on every backend (:mod:`oodsim.store.backend`): an entry is
visible only once committed and whole, the first complete entry wins, a corrupt one is removed
and computed again, locks exclude, records beside the entries round-trip. And the local
backend's keys and entries stay what they were before the seam (pinned below)."""

from __future__ import annotations

import hashlib
import json
import pickle
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pytest

import oodsim
from oodsim.keys import digest
from oodsim.protocols.open_set import entries
from oodsim.store import Backend, CorruptEntryWarning, LocalBackend, Store, StoreError
from oodsim.store.arrays import ARRAYS_ZIP, write_zip
from oodsim.store.digests import file_checksums, file_sizes, write_meta
from oodsim.store.objects import ObjectBackend
from tests.conftest import ROOT
from tests.s3_server import new_bucket

pytestmark = pytest.mark.filterwarnings("ignore:The data type .* does not have a Zarr V3")

KIND = "outputs"
ARRAYS = {
    "logits": np.arange(12, dtype=np.float32).reshape(3, 4),
    "labels": np.array([1, 0, 2], dtype=np.int64),
    "names": np.array(["a", "bc"]),
}

#: every backend the contract runs on, made empty for one test (its folder, its request)
BACKENDS: dict[str, Callable[[Path, pytest.FixtureRequest], Backend]] = {
    "local": lambda folder, _: LocalBackend(folder / "cache"),
    "s3": lambda _, request: ObjectBackend(
        f"s3://{new_bucket(request.getfixturevalue('s3_endpoint'))}/cache"
    ),
}


@pytest.fixture(params=sorted(BACKENDS))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return Store(BACKENDS[request.param](tmp_path, request))


def key_of(n: int):
    return digest("contract_entry", 1, {"n": n})


def put_one(location: str, n: int) -> str:
    """A worker process's put (the store opened again from its location)."""
    return str(Store(location).put(KIND, key_of(n), {"x": np.full(1000, n)}))


def test_an_entry_round_trips_with_its_record(store: Store) -> None:
    key = key_of(1)
    assert not store.has(KIND, key) and store.get(KIND, key) is None
    store.put(KIND, key, ARRAYS, {"describe": "contract"})
    entry = store.get(KIND, key)
    assert entry is not None and set(entry.arrays) == set(ARRAYS)
    for name, value in ARRAYS.items():
        np.testing.assert_array_equal(entry.arrays[name], value)
    assert entry.meta["describe"] == "contract" and store.meta(KIND, key)["key"] == key
    assert store.has(KIND, key) and store.verify_entry(KIND, key)
    (listed,) = store.entries()
    assert (listed.kind, listed.key, listed.describe) == (KIND, key, "contract")
    assert listed.size > 0
    assert store.counts() == {"computed": {KIND: 1}, "loaded": {KIND: 1}}


def test_an_entry_is_invisible_until_committed_and_the_first_one_wins(store: Store) -> None:
    key = key_of(2)
    backend = store.backend
    with backend.staging(KIND, key) as folder:
        write_zip(folder / ARRAYS_ZIP, {"x": np.arange(3)})
        record = {"kind": KIND, "key": str(key), "key_inputs": key.inputs}
        write_meta(folder, {**record, "files": file_checksums(folder), "sizes": file_sizes(folder)})
        assert backend.read_meta(KIND, key) is None and not store.has(KIND, key)
        assert list(store.entries()) == []
        store.put(KIND, key, {"x": np.arange(5)})  # a concurrent writer commits first
        assert not backend.commit(KIND, key, folder)  # put if absent: theirs is kept
    entry = store.get(KIND, key)
    assert entry is not None
    np.testing.assert_array_equal(entry.arrays["x"], np.arange(5))
    assert [info.key for info in store.entries()] == [key]


def test_two_processes_putting_one_entry_both_finish_and_one_copy_stays(store: Store) -> None:
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        places = list(pool.map(put_one, [store.location] * 4, [3] * 4))
    assert len(set(places)) == 1
    assert [info.key for info in store.entries()] == [key_of(3)]
    assert store.verify() == []
    np.testing.assert_array_equal(store.get(KIND, key_of(3)).arrays["x"], np.full(1000, 3))


def commit_lying_entry(store: Store, key) -> None:
    """Commit an entry whose record lies about its bytes (their checksum), sizes right."""
    with store.backend.staging(KIND, key) as folder:
        write_zip(folder / ARRAYS_ZIP, {"x": np.arange(3)})
        files = {ARRAYS_ZIP: hashlib.sha256(b"other bytes").hexdigest()}
        record = {"kind": KIND, "key": str(key), "key_inputs": key.inputs, "files": files}
        write_meta(folder, {**record, "sizes": file_sizes(folder)})
        assert store.backend.commit(KIND, key, folder)


def test_a_corrupt_entry_is_removed_and_computed_again(store: Store) -> None:
    key = key_of(4)
    backend = store.backend
    commit_lying_entry(store, key)
    assert store.has(KIND, key)  # sizes agree: the cheap check passes
    (problem,) = store.verify()
    assert problem[0].key == key and "checksum mismatch" in problem[1]
    with pytest.warns(CorruptEntryWarning, match="checksum mismatch"):
        assert store.get(KIND, key) is None
    assert backend.read_meta(KIND, key) is None and list(store.entries()) == []
    assert store.ensure(KIND, key, lambda: store.put(KIND, key, {"x": np.arange(3)}))
    assert store.verify_entry(KIND, key) and store.verify() == []


def test_a_run_counts_an_entry_done_by_its_checksums_where_reading_is_cheap(
    store: Store,
) -> None:
    """A local disk: checksums before a cached entry counts as done. Object storage: record
    and sizes (checksums would download every entry); the read checks the rest."""
    key = key_of(9)
    commit_lying_entry(store, key)
    with pytest.warns(CorruptEntryWarning, match="checksum mismatch"):
        done = store.counts_as_done(KIND, key)
        if done:  # (object storage) the read finds it
            assert store.get(KIND, key) is None
    assert done is not store.backend.reading_is_cheap
    assert store.backend.read_meta(KIND, key) is None  # removed either way


def test_verify_repair_removes_corrupt_entries(store: Store) -> None:
    key = key_of(5)
    store.put(KIND, key, {"x": np.arange(3)})
    with store.backend.staging(KIND, key_of(6)) as folder:  # a record that is not one
        (folder / "meta.json").write_text("[]")
        store.backend.commit(KIND, key_of(6), folder)
    assert [info.key for info, _ in store.verify()] == [key_of(6)]
    assert [info.key for info, _ in store.verify(repair=True)] == [key_of(6)]
    assert store.verify() == [] and [info.key for info in store.entries()] == [key]


def test_remove_takes_an_entry_out_of_sight(store: Store) -> None:
    key = key_of(7)
    store.put(KIND, key, {"x": np.arange(3)})
    assert store.backend.remove(KIND, key, "a test")
    assert not store.has(KIND, key) and store.get(KIND, key) is None
    assert not store.backend.remove(KIND, key, "a test")


def test_a_lock_excludes_another_holder_until_released(store: Store) -> None:
    order: list[str] = []
    held = threading.Event()

    def first() -> None:
        with store.lock(KIND, key_of(8)):
            held.set()
            time.sleep(0.5)
            order.append("first released")

    thread = threading.Thread(target=first)
    thread.start()
    held.wait(10)
    with store.lock(KIND, key_of(8)):
        order.append("second holds")
    thread.join()
    assert order == ["first released", "second holds"]
    assert store.stale_locks() == []


def test_records_beside_the_entries_round_trip(store: Store) -> None:
    with pytest.raises(FileNotFoundError):
        store.backend.read_record(".plugin-sources/a.json", 1 << 12)
    store.backend.write_record(".plugin-sources/a.json", {"source": "abc"})
    store.backend.write_record(".plugin-sources/a.json", {"source": "def"})
    assert store.backend.read_record(".plugin-sources/a.json", 1 << 12) == {"source": "def"}
    assert list(store.entries()) == []  # a record is not an entry


def test_a_missing_store_is_named_and_an_empty_one_is_clean(store: Store) -> None:
    assert not store.exists()
    with pytest.raises(StoreError, match="no cache at"):
        store.ensure_present()
    store.ensure_writable()
    assert store.exists()
    store.ensure_present()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert store.verify() == [] and store.gc().removed == []


# ----------------------------------------------------------------- the local backend, pinned
#: what the code before the backend seam wrote (commit d116e00), checked against it by hand
DIGITS_KEY = "04288eb3de6eb1e5b3a3a7c9767a99d1358c1fea51c37f772a40ad4e002e0ae5"
SEED0_ENTRIES = [
    ("checkpoint", "f33c9c2aa55735a40ecbe99773536d40fbf42e989ccb22a113fb5d1fa75032a4"),
    ("outputs", "5678a1e6221694c5cef3b1e74235fb606c921eb9fb0947bba688d10cfbc28f5d"),
]
PROBE_KEY = "1d06cddb49fc5f53a27dd5d7a80fbd4f6e05a62e2a10f580098a3ab103e5d4dc"
PROBE_ZIP = "646750e072d4ed18ac84f925232b2d369e7ee96b5177400c72c2bcf9ba606717"


def test_local_keys_and_entries_are_byte_identical_to_before_the_seam(tmp_path: Path) -> None:
    spec = oodsim.load_spec(ROOT / "specs" / "digits.toml")
    assert spec.key == DIGITS_KEY
    assert entries(spec, 0)[:2] == SEED0_ENTRIES
    key = digest("probe_entry", 1, {"n": 7})
    assert key == PROBE_KEY
    place = Store(tmp_path / "cache").put(KIND, key, ARRAYS, {"describe": "probe"})
    assert place == tmp_path / "cache" / KIND / key[:2] / key
    assert sorted(p.name for p in place.iterdir()) == [ARRAYS_ZIP, "meta.json"]
    assert hashlib.sha256((place / ARRAYS_ZIP).read_bytes()).hexdigest() == PROBE_ZIP
    meta = json.loads((place / "meta.json").read_text())
    assert {k: v for k, v in meta.items() if k not in ("created", "write_seconds")} == {
        "describe": "probe",
        "files": {ARRAYS_ZIP: PROBE_ZIP},
        "key": PROBE_KEY,
        "key_inputs": ["probe_entry", 1, "1", {"n": 7}],
        "kind": KIND,
        "meta_sha256": meta["meta_sha256"],
        "shapes": {"labels": [3], "logits": [3, 4], "names": [2]},
        "sizes": {ARRAYS_ZIP: 2195},
    }
    assert list(meta) == sorted(meta)  # written with sorted keys, as before


def test_a_store_pickles_to_one_that_reads_the_same_entries(store: Store) -> None:
    """What a Dask task may receive: a copy opens its own connection to the same entries."""
    key = key_of(10)
    store.put(KIND, key, {"x": np.arange(3)})
    copy = pickle.loads(pickle.dumps(store))
    assert copy.location == store.location and copy.has(KIND, key)
    np.testing.assert_array_equal(copy.get(KIND, key).arrays["x"], np.arange(3))
