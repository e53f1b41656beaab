"""A notice for plug-ins edited under the same version: the store records each registered
builder's and loader's source fingerprint per version, and a run whose code changed under the
same version warns, with the fix, without changing keys."""

from __future__ import annotations

import warnings
from pathlib import Path

import attrs
import pytest

import oodsim
from oodsim.models.architectures import small_cnn
from oodsim.models.registry import register_architecture
from oodsim.results import store_counts
from oodsim.store.plugin_sources import FOLDER, PluginChangedWarning, source_fingerprint
from tests.conftest import small_digits


def first_builder(in_channels, n_classes, image_size, dropout, width):
    return small_cnn(in_channels, n_classes, image_size, dropout, width)


def edited_builder(in_channels, n_classes, image_size, dropout, width):
    return small_cnn(in_channels, n_classes, image_size, dropout / 2, width)  # other results


def run(cache: Path):
    spec = small_digits(1)
    spec = attrs.evolve(spec, model=attrs.evolve(spec.model, arch="notice_cnn"))
    return oodsim.run(spec, cache=cache, cluster="in-process", progress=False)


def test_an_edited_builder_under_the_same_version_is_noticed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    register_architecture("notice_cnn", replace=True)(first_builder)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PluginChangedWarning)
        first = run(cache)
        run(cache)  # the same code again: no notice
    assert (cache / FOLDER / "architecture-notice_cnn-1.json").is_file()
    register_architecture("notice_cnn", replace=True)(edited_builder)
    with pytest.warns(PluginChangedWarning, match=r"'notice_cnn' \(version '1'\) has changed"):
        again = run(cache)
    assert store_counts(again)["computed"] == {}  # keys unchanged: the old entries are reused
    assert (again["score"].values == first["score"].values).all()
    register_architecture("notice_cnn", version="2", replace=True)(edited_builder)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PluginChangedWarning)
        bumped = run(cache)  # the fix the notice names: another version, computed again
    assert store_counts(bumped)["computed"].get("checkpoint") == 1


def test_fingerprints_follow_the_source_text() -> None:
    assert source_fingerprint(first_builder) != source_fingerprint(edited_builder)
    assert source_fingerprint(first_builder) == source_fingerprint(first_builder)
    namespace: dict = {}
    exec("def typed_in_a_notebook(x):\n    return x + 1\n", namespace)
    assert source_fingerprint(namespace["typed_in_a_notebook"]) is not None  # from its code
