"""Keys cover the data: a dataset read from files is keyed by a fingerprint of those files
(:mod:`oodsim.data.fingerprint`), so two folders under one name, or changed files, never
share cached models, outputs or scores; moving the same files elsewhere keeps the cache."""

from __future__ import annotations

import shutil
from pathlib import Path

import attrs
import numpy as np
import pytest
from PIL import Image
from sklearn.datasets import load_digits

import oodsim
from oodsim.data import fingerprint as fp
from oodsim.data.builtin import FASHION_MNIST_DEBIAN, fashion_mnist_files
from oodsim.keys import content_key
from oodsim.protocols.severity.spec import SourceSpec
from oodsim.results import store_counts
from oodsim.specs import DatasetSpec
from tests.conftest import small_digits


def digits_folder(root: Path, invert: bool = False, per_class: int = 40) -> Path:
    """scikit-learn's digits as a folder of class folders of 8x8 PNGs (optionally inverted)."""
    digits = load_digits()
    images = np.clip(digits.images * 16.0, 0, 255).astype(np.uint8)
    for label in range(10):
        folder = root / f"digit{label}"
        folder.mkdir(parents=True)
        for i, image in enumerate(images[digits.target == label][:per_class]):
            Image.fromarray(255 - image if invert else image).save(folder / f"{i}.png")
    return root


def folder_spec(root: Path) -> DatasetSpec:
    return DatasetSpec(name="image_folder", root=str(root))


def test_a_second_folder_under_the_same_name_is_computed_not_read_from_the_cache(
    tmp_path: Path,
) -> None:
    """The probe's silent wrong result: a folder of inverted digits got the first folder's
    scores with `computed {}`."""
    cache = tmp_path / "cache"
    plain, inverted = digits_folder(tmp_path / "plain"), digits_folder(tmp_path / "inv", True)
    runs = {}
    for name, root in (("plain", plain), ("inverted", inverted)):
        spec = small_digits(1, dataset=folder_spec(root))
        runs[name] = oodsim.run(spec, cache=cache, cluster="in-process", progress=False)
    assert store_counts(runs["inverted"])["computed"].get("checkpoint") == 1
    scores = [runs[name]["score"].values for name in ("plain", "inverted")]
    assert not np.allclose(*scores)
    # the same files moved elsewhere: the same key, nothing computed
    moved = shutil.copytree(plain, tmp_path / "elsewhere" / "plain")
    again = oodsim.run(
        small_digits(1, dataset=folder_spec(moved)),
        cache=cache,
        cluster="in-process",
        progress=False,
    )
    assert store_counts(again)["computed"] == {}
    np.testing.assert_array_equal(again["score"].values, scores[0])


def test_a_folder_rewritten_in_place_between_two_runs_of_one_process_is_computed(
    tmp_path: Path,
) -> None:
    """The probe: the images rewritten in place (`cp new/* folder/`: no folder's time moves)
    between two ``oodsim.run`` calls of one script; the second run reported the old images'
    cached scores with `computed {}`."""
    import os

    cache, root = tmp_path / "cache", digits_folder(tmp_path / "data")
    spec = small_digits(1, dataset=folder_spec(root))
    first = oodsim.run(spec, cache=cache, cluster="in-process", progress=False)
    times = {folder: folder.stat().st_mtime_ns for folder in [root, *root.iterdir()]}
    for image in root.glob("*/*.png"):
        pixels = np.asarray(Image.open(image))
        with image.open("r+b") as handle:  # in place, as cp does
            Image.fromarray(255 - pixels).save(handle, format="PNG")
            handle.truncate()
    for folder, ns in times.items():
        os.utime(folder, ns=(ns, ns))
    second = oodsim.run(spec, cache=cache, cluster="in-process", progress=False)
    assert store_counts(second)["computed"].get("checkpoint") == 1
    assert not np.allclose(first["score"].values, second["score"].values)


def test_what_changes_the_fingerprint(tmp_path: Path) -> None:
    root = digits_folder(tmp_path / "a", per_class=3)
    first = content_key(folder_spec(root))
    image = root / "digit3" / "1.png"

    def key_now() -> str:
        fp._MEMO.clear()  # another process: nothing remembered
        return content_key(folder_spec(root))

    assert key_now() == first
    pixels = np.asarray(Image.open(image))
    Image.fromarray(pixels ^ 1).save(image)  # other pixels, same size on disk or not
    changed = key_now()
    assert changed != first
    image.rename(root / "digit3" / "renamed.png")
    renamed = key_now()
    assert renamed not in (first, changed)
    (root / "digit3" / "extra.png").write_bytes(image.with_name("0.png").read_bytes())
    assert key_now() not in (first, changed, renamed)
    # within one process a file added to a class folder is seen without clearing anything
    before = content_key(folder_spec(root))
    shutil.copy(root / "digit4" / "0.png", root / "digit4" / "copy.png")
    assert content_key(folder_spec(root)) != before
    # a missing folder has a key of its own (the run fails where it reads the data)
    assert content_key(folder_spec(tmp_path / "missing")) not in (first, changed, renamed)


def test_large_folders_hash_a_sample_of_files_and_of_big_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fp, "SAMPLE_FILES", 4)
    monkeypatch.setattr(fp, "WHOLE_FILE", 1000)
    monkeypatch.setattr(fp, "BLOCK", 10)
    root = tmp_path / "big" / "class0"
    root.mkdir(parents=True)
    for i in range(10):
        (root / f"{i}.bin").write_bytes(bytes(2000))
    assert fp._sample(10) == [0, 3, 6, 9]
    base = fp.fingerprint([root.parent])
    fp._MEMO.clear()
    (root / "0.bin").write_bytes(bytes([1]) + bytes(1999))  # first block of a sampled file
    sampled = fp.fingerprint([root.parent])
    assert sampled != base
    fp._MEMO.clear()
    (root / "0.bin").write_bytes(bytes(2000))
    (root / "1.bin").write_bytes(bytes([1]) + bytes(1999))  # a file outside the sample
    assert fp.fingerprint([root.parent]) == base  # same names and sizes: documented limit


@pytest.mark.skipif(
    not FASHION_MNIST_DEBIAN.is_dir(), reason="needs Debian's dataset-fashion-mnist"
)
def test_fashion_mnist_is_keyed_by_its_files(tmp_path: Path) -> None:
    debian = DatasetSpec(name="fashion_mnist")
    copy = tmp_path / "fmnist"
    copy.mkdir()
    for path in fashion_mnist_files(None):
        shutil.copy(path, copy / path.name)
    assert content_key(attrs.evolve(debian, root=str(copy))) == content_key(debian)
    labels = next(copy.glob("t10k-labels*"))
    data = bytearray(labels.read_bytes())
    data[len(data) // 2] ^= 1  # one byte changed, the size kept
    labels.write_bytes(bytes(data))
    fp._MEMO.clear()
    assert content_key(attrs.evolve(debian, root=str(copy))) != content_key(debian)


def test_severity_image_folder_sources_of_one_name_differ_by_their_files(tmp_path: Path) -> None:
    a = digits_folder(tmp_path / "a", per_class=2)
    b = digits_folder(tmp_path / "b", invert=True, per_class=2)
    sources = [SourceSpec(kind="image_folder", name="pool", root=str(r)) for r in (a, b)]
    assert content_key(sources[0]) != content_key(sources[1])
    sharded = [attrs.evolve(s, shard_size=5) for s in sources]  # keyed by name and classes
    assert content_key(sharded[0]) == content_key(sharded[1])
