"""Datasets as a public registry (issue 12, part 2): a user's array file reaches the Dask
workers, its loader's version enters the keys, and arrays of the wrong shape or dtype are one
clear error, before any compute, saying how to convert them."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import numpy as np
import pytest

import oodsim
from oodsim.data import (
    DatasetError,
    ImageData,
    available_datasets,
    load_dataset,
    register_dataset,
)
from oodsim.specs import DatasetSpec, OODSetSpec
from tests.conftest import small_digits


def write_npz(path: Path) -> Path:
    """Digits as a user would keep them: an .npz of uint8 images (N, H, W, 1) and labels."""
    digits = load_dataset("digits")
    np.savez(path, images=digits.images, labels=digits.labels)
    return path


def npz_loader(path: Path):
    def load(root=None, download=False, image_size=None) -> ImageData:
        with np.load(path) as arrays:
            return ImageData(arrays["images"], arrays["labels"], tuple(map(str, range(10))))

    return load


def test_an_array_file_dataset_runs_on_the_workers_and_its_version_enters_the_keys(
    tmp_path: Path, cluster_address: str, cache: Path
) -> None:
    path = write_npz(tmp_path / "digits.npz")
    register_dataset("test_npz_digits", n_classes=10, hflip=False, description="an .npz")(
        npz_loader(path)
    )
    assert "test_npz_digits" in available_datasets()
    spec = small_digits(2, dataset=DatasetSpec(name="test_npz_digits"))
    first = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    assert (first.failure.values == "").all()
    assert json.loads(first.attrs["store"])["computed"] == {"checkpoint": 2, "outputs": 2}
    # the same pixels under the built-in name give the same bits: the loader is the data
    builtin = oodsim.run(small_digits(2), address=cluster_address, cache=cache, progress=False)
    np.testing.assert_array_equal(first.score.values, builtin.score.values)

    before = spec.dataset.key
    register_dataset(
        "test_npz_digits",
        n_classes=10,
        hflip=False,
        description="an .npz",
        version="2",
        replace=True,
    )(npz_loader(path))
    assert spec.dataset.key != before  # the loader's version is part of the dataset's key
    bumped = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    assert json.loads(bumped.attrs["store"])["computed"] == {"checkpoint": 2, "outputs": 2}
    np.testing.assert_array_equal(bumped.score.values, first.score.values)


def test_an_ood_dataset_key_follows_its_loader_version(tmp_path: Path) -> None:
    path = write_npz(tmp_path / "d.npz")
    register_dataset("test_npz_ood", n_classes=10, hflip=False, description="x", replace=True)(
        npz_loader(path)
    )
    ood = OODSetSpec(kind="dataset", dataset=DatasetSpec(name="test_npz_ood"))
    before = ood.key
    register_dataset(
        "test_npz_ood", n_classes=10, hflip=False, description="x", version="7", replace=True
    )(npz_loader(path))
    assert ood.key != before


BAD_ARRAYS = [
    (
        "grayscale-without-channel",
        lambda d: (d.images[..., 0], d.labels),
        r"images have shape \(1797, 8, 8\): expected \(N, H, W, C\); add a channel axis",
    ),
    (
        "floats",
        lambda d: (d.images.astype(np.float32) / 255, d.labels),
        r"images are float32: expected uint8 .*\(images \* 255\)\.round\(\)\.astype\(np\.uint8\)",
    ),
    (
        "channels-first",
        lambda d: (np.moveaxis(d.images, -1, 1).repeat(4, axis=1), d.labels),
        r"images have shape \(1797, 4, 8, 8\): expected \(N, H, W, C\) with C = 1 or 3",
    ),
    (
        "float-labels",
        lambda d: (d.images, d.labels.astype(float)),
        r"labels are float64: expected integer class indices",
    ),
    (
        "labels-too-short",
        lambda d: (d.images, d.labels[:-1]),
        r"labels have shape \(1796,\) for 1797 images",
    ),
    (
        "labels-out-of-range",
        lambda d: (d.images, d.labels + 1),
        r"labels run from 1 to 10 but there are 10 class names: labels must be 0\.\.9",
    ),
]


@pytest.mark.parametrize(
    ("convert", "message"),
    [row[1:] for row in BAD_ARRAYS],
    ids=[row[0] for row in BAD_ARRAYS],
)
def test_wrong_arrays_are_one_clear_error_before_any_compute(
    tmp_path: Path, convert, message: str
) -> None:
    digits = load_dataset("digits")

    @register_dataset("test_bad_arrays", n_classes=10, hflip=False, description="x", replace=True)
    def bad(root=None, download=False, image_size=None) -> ImageData:
        images, labels = convert(digits)
        return ImageData(images, labels, digits.class_names)

    spec = small_digits(2, dataset=DatasetSpec(name="test_bad_arrays"))
    with pytest.raises(DatasetError, match=r"^dataset 'test_bad_arrays': " + message):
        oodsim.run(spec, n_workers=1, cache=tmp_path / "cache", progress=False)
    assert not (tmp_path / "cache").exists()


def test_a_loader_that_returns_something_else_or_other_classes_is_named(tmp_path: Path) -> None:
    @register_dataset("test_tuple", n_classes=10, hflip=False, description="x", replace=True)
    def as_tuple(root=None, download=False, image_size=None):
        digits = load_dataset("digits")
        return digits.images, digits.labels

    @register_dataset("test_twelve", n_classes=12, hflip=False, description="x", replace=True)
    def twelve(root=None, download=False, image_size=None):
        return load_dataset("digits")

    with pytest.raises(
        DatasetError, match=r"loader returned tuple; return oodsim\.data\.ImageData"
    ):
        load_dataset("test_tuple")
    with pytest.raises(DatasetError, match=r"registered with n_classes=12 .* returned 10 class"):
        load_dataset("test_twelve")


def test_names_cannot_be_taken_twice_and_built_ins_never_replaced() -> None:
    def loader(root=None, download=False, image_size=None):
        return load_dataset("digits")

    register_dataset("test_once", n_classes=10, hflip=False, description="x", replace=True)(loader)
    with pytest.raises(ValueError, match="already registered"):
        register_dataset("test_once", n_classes=10, hflip=False, description="x")(loader)
    with pytest.raises(ValueError, match="already registered"):
        register_dataset("digits", n_classes=10, hflip=False, description="x", replace=True)(loader)
    assert attrs.has(type(load_dataset("test_once")))


def test_loaded_data_is_shared_and_cannot_be_changed_in_place() -> None:
    """A process loads a dataset once, and every later seed there (and every later run of a
    script or notebook) reads the same arrays: an in-place change (``images[...] = 0`` to
    look at something) would change what those seeds train and are scored on."""
    data = DatasetSpec(name="digits").load()
    assert DatasetSpec(name="digits").load() is data
    with pytest.raises(ValueError, match="read-only"):
        data.images[0] = 0
    with pytest.raises(ValueError, match="read-only"):
        data.labels += 1


def test_a_loader_that_returns_other_arrays_fails_the_seeds_that_meet_them_again(
    tmp_path: Path,
) -> None:
    """A loader that shuffles without a seed: a later run that adds ODIN ran the cached model
    on other images than the cached outputs it is scored beside, with no error (a probe:
    ODIN's AUROC computed on a reshuffled dataset, beside msp's from the first one). Now the
    checkpoint records a digest of the arrays it was trained on, and a seed whose model meets
    other arrays fails, saying why; a loader that keeps its arrays passes."""
    from sklearn.datasets import load_digits

    shuffled = {"seed": 0}

    @register_dataset(
        "test_reshuffled", n_classes=10, hflip=False, description="digits, shuffled", replace=True
    )
    def reshuffled(root=None, download=False, image_size=None) -> ImageData:
        digits = load_digits()
        order = np.random.default_rng(shuffled["seed"]).permutation(len(digits.target))
        images = (digits.images[order] * 16).clip(0, 255).astype(np.uint8)[..., None]
        return ImageData(images, digits.target[order], [str(c) for c in range(10)])

    spec = small_digits(2, dataset=DatasetSpec(name="test_reshuffled"))
    first = oodsim.run(spec, cache=tmp_path, progress=False)
    assert not any(first.failure.values)
    with_odin = attrs.evolve(spec, detectors=("msp", "odin"))
    load_dataset.cache_clear()  # a new process loads again: the same arrays
    again = oodsim.run(with_odin, cache=tmp_path, progress=False)
    assert not any(again.failure.values)
    shuffled["seed"] = 1  # ... or other ones
    load_dataset.cache_clear()
    spec_b = attrs.evolve(spec, detectors=("msp", "odin", "mc_dropout"))
    later = oodsim.run(spec_b, cache=tmp_path, progress=False)
    failures = [str(f) for f in later.failure.values]
    assert all("returned other images or labels than when" in f for f in failures), failures
    load_dataset.cache_clear()
