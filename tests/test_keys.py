"""Content keys: stable across processes and hash seeds, sensitive to semantics only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from oodsim.keys import canonical, digest
from oodsim.specs import DatasetSpec, ExperimentSpec, load_spec

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "specs" / "digits.toml"


def _key_in_subprocess(hash_seed: str) -> str:
    code = f"import oodsim; print(oodsim.load_spec({str(DIGITS)!r}).key)"
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def test_key_identical_across_processes_and_hash_seeds() -> None:
    keys = {_key_in_subprocess(seed) for seed in ("0", "1", "12345", "random")}
    assert len(keys) == 1
    assert keys == {load_spec(DIGITS).key}
    assert len(keys.pop()) == 64


@pytest.mark.parametrize(
    "change",
    [
        lambda s: attrs.evolve(s, split=attrs.evolve(s.split, n_known=5)),
        lambda s: attrs.evolve(s, split=attrs.evolve(s.split, fractions=(0.5, 0.25, 0.25))),
        lambda s: attrs.evolve(s, model=attrs.evolve(s.model, dropout=0.3)),
        lambda s: attrs.evolve(s, model=attrs.evolve(s.model, arch="resnet18")),
        lambda s: attrs.evolve(s, training=attrs.evolve(s.training, lr=0.02)),
        lambda s: attrs.evolve(
            s,
            training=attrs.evolve(
                s.training, augment=attrs.evolve(s.training.augment, rotation=5.0)
            ),
        ),
        lambda s: attrs.evolve(s, dataset=DatasetSpec(name="fashion_mnist")),
        lambda s: attrs.evolve(s, dataset=attrs.evolve(s.dataset, max_per_class=100)),
        lambda s: attrs.evolve(s, detectors=("msp", "energy")),
        lambda s: attrs.evolve(s, metrics=("auroc",)),
        lambda s: attrs.evolve(s, seeds=attrs.evolve(s.seeds, n=51)),
        lambda s: attrs.evolve(s, seeds=attrs.evolve(s.seeds, pinned={"class_split": 1})),
        lambda s: attrs.evolve(s, ood=("held_out", "uniform_noise")),
    ],
)
def test_semantic_changes_change_the_key(change) -> None:
    spec = load_spec(DIGITS)
    assert change(spec).key != spec.key


def test_execution_settings_do_not_change_the_key() -> None:
    spec = load_spec(DIGITS)
    moved = attrs.evolve(
        spec, name="renamed", dataset=attrs.evolve(spec.dataset, root="/elsewhere", download=True)
    )
    assert moved.key == spec.key


def test_nested_specs_enter_by_key_and_dask_tokenize() -> None:
    from dask.base import tokenize

    spec = load_spec(DIGITS)
    assert canonical(spec.dataset) == {"$key": spec.dataset.key}
    assert tokenize(spec) == tokenize(load_spec(DIGITS))
    assert spec.__dask_tokenize__() == spec.key


def test_digest_rejects_nan_and_unknown_types() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        digest("x", 1, {"a": float("nan")})
    with pytest.raises(TypeError):
        digest("x", 1, {"a": object()})
    assert digest("x", 1, {"a": 1, "b": 2}) == digest("x", 1, {"b": 2, "a": 1})
    assert digest("x", 1, {"a": 1}) != digest("x", 2, {"a": 1})


def test_spec_is_frozen() -> None:
    spec = load_spec(DIGITS)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        spec.name = "x"  # type: ignore[misc]
    assert isinstance(spec, ExperimentSpec)
