"""The one-file arrays container of store entries: zarr v3 in a ZIP, checked against zarr itself."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import zarr

from oodsim.keys import Key, digest
from oodsim.store import Store
from oodsim.store.arrays import ARRAYS_FOLDER, ARRAYS_ZIP, read_arrays, read_zip, write_zip
from oodsim.store.digests import file_checksums, file_sizes, meta_digest

KEY = digest("test_entry", 1, {"n": 124})


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "logits": rng.normal(size=(7, 3)).astype(np.float32),
        "features.in_test": rng.normal(size=(7, 5)),
        "labels": np.arange(7, dtype=np.int64),
        "scalar": np.float64(2.5),
        "flags": np.array([True, False, True]),
        "bytes": np.arange(5, dtype=np.uint8),
        "half": np.linspace(0, 1, 4, dtype=np.float16),
        "complex": np.array([1 + 2j, 3 - 1j], dtype=np.complex64),
        "empty": np.zeros((0, 4), np.float32),
        "big_endian": np.arange(6, dtype=">i4").reshape(2, 3),
        "strided": np.arange(20, dtype=np.float64).reshape(4, 5)[:, ::2],
        "fortran": np.asfortranarray(rng.normal(size=(3, 4))),
    }


def _same(read: dict[str, np.ndarray], written: dict[str, np.ndarray]) -> None:
    assert sorted(read) == sorted(written)
    for name, value in written.items():
        expected = np.asarray(value)
        assert read[name].shape == expected.shape, name
        assert read[name].dtype == expected.dtype.newbyteorder("="), name
        np.testing.assert_array_equal(read[name], expected, err_msg=name)


def test_round_trip_keeps_values_types_and_shapes(tmp_path: Path) -> None:
    arrays = _arrays()
    write_zip(tmp_path / ARRAYS_ZIP, arrays)
    read = read_zip(tmp_path / ARRAYS_ZIP)
    _same(read, arrays)
    assert all(value.flags.writeable for value in read.values())  # like zarr's own arrays


def test_zarr_reads_what_oodsim_writes(tmp_path: Path) -> None:
    """The oracle: zarr's ZipStore opens the file as a zarr v3 group with the same arrays."""
    arrays = _arrays()
    write_zip(tmp_path / ARRAYS_ZIP, arrays)
    store = zarr.storage.ZipStore(tmp_path / ARRAYS_ZIP, mode="r")
    group = zarr.open_group(store, mode="r")
    _same({name: np.asarray(group[name][...]) for name in group.array_keys()}, arrays)
    store.close()


def test_oodsim_reads_what_zarr_writes_compressed(tmp_path: Path) -> None:
    """A group zarr wrote itself (zstd-compressed chunks) is read through zarr."""
    arrays = {"a": np.arange(12.0).reshape(3, 4), "b": np.arange(5, dtype=np.int32)}
    store = zarr.storage.ZipStore(tmp_path / ARRAYS_ZIP, mode="w")
    group = zarr.open_group(store, mode="w")
    for name, value in arrays.items():
        group.create_array(name, data=value, chunks=(2,) * value.ndim)
    store.close()
    _same(read_zip(tmp_path / ARRAYS_ZIP), arrays)


def test_strings_are_written_by_zarr_into_the_same_file(tmp_path: Path) -> None:
    arrays = {"names": np.array(["cat", "dog"]), "x": np.ones(2)}
    with pytest.warns(Warning):  # zarr: fixed-width strings have no v3 specification yet
        write_zip(tmp_path / ARRAYS_ZIP, arrays)
        read = read_zip(tmp_path / ARRAYS_ZIP)
    assert list(read["names"]) == ["cat", "dog"] and list(read["x"]) == [1.0, 1.0]


def test_the_same_arrays_give_the_same_bytes(tmp_path: Path) -> None:
    for name in ("one.zip", "two.zip"):
        write_zip(tmp_path / name, _arrays())
    digests = {
        hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in ("one.zip", "two.zip")
    }
    assert len(digests) == 1


@pytest.mark.parametrize("name", ["", "a/b", ".hidden"])
def test_names_that_zarr_would_nest_or_hide_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="array name"):
        write_zip(tmp_path / ARRAYS_ZIP, {name: np.ones(2)})
    assert not (tmp_path / ARRAYS_ZIP).exists()


def test_a_chunk_of_the_wrong_size_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / ARRAYS_ZIP
    write_zip(path, {"x": np.arange(4.0)})
    with zipfile.ZipFile(path) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    files["x/c/0"] = files["x/c/0"][:-8]
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    with pytest.raises(ValueError, match="not 32 bytes"):
        read_zip(path)


def test_a_store_entry_is_two_files(tmp_path: Path) -> None:
    store = Store(tmp_path)
    folder = store.put("outputs", KEY, _arrays())
    assert sorted(p.name for p in folder.iterdir()) == [ARRAYS_ZIP, "meta.json"]
    meta = json.loads((folder / "meta.json").read_text())
    assert list(meta["files"]) == [ARRAYS_ZIP]
    entry = store.get("outputs", KEY)
    assert entry is not None
    _same(entry.arrays, _arrays())


def _old_entry(store: Store, kind: str, key: Key, arrays: dict[str, np.ndarray]) -> Path:
    """An entry as oodsim wrote it before the ZIP: a zarr folder (zarr's defaults, zstd) and a
    meta record with a sha256 and size per file, bound to its key as records are now (one of
    that age names no key inputs and is computed again: tests/test_entry_binding.py)."""
    folder = store.place(kind, key)
    group = zarr.open_group(folder / ARRAYS_FOLDER, mode="w")
    for name, value in arrays.items():
        value = np.ascontiguousarray(value)
        group.create_array(name, data=value, chunks=value.shape or "auto")
    record = {
        "created": 0.0,
        "kind": kind,
        "key": key,
        "key_inputs": key.inputs,
        "files": file_checksums(folder),
        "sizes": file_sizes(folder),
    }
    record["meta_sha256"] = meta_digest(record)
    (folder / "meta.json").write_text(json.dumps(record, sort_keys=True))
    return folder


def test_entries_of_the_older_folder_layout_are_read_and_verified(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.ensure_writable()  # as a run does first: the cache is oodsim's
    arrays = {"logits": np.arange(6, dtype=np.float32).reshape(2, 3), "labels": np.arange(2)}
    folder = _old_entry(store, "outputs", KEY, arrays)
    assert store.verify_entry("outputs", KEY) and store.verify() == []
    entry = store.get("outputs", KEY)
    assert entry is not None
    _same(entry.arrays, arrays)
    _same(read_arrays(folder), arrays)
