"""Spec validation: one clear error before any compute, naming field, value and allowed values."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import oodsim
from oodsim.errors import SpecError, UnknownNameError
from oodsim.specs import (
    DatasetSpec,
    DetectorSpec,
    ExperimentSpec,
    ModelSpec,
    OODSetSpec,
    SeedsSpec,
    SplitSpec,
    load_spec,
    spec_from_dict,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["digits.toml", "fashion_mnist.toml"])
def test_shipped_specs_load_and_roundtrip(name: str) -> None:
    spec = load_spec(ROOT / "specs" / name)
    again = spec_from_dict(spec.to_dict())
    assert again == spec and again.key == spec.key


def test_python_and_toml_build_the_same_spec() -> None:
    spec = ExperimentSpec(
        name="digits",
        dataset=DatasetSpec(name="digits"),
        model=ModelSpec(width=16),
        seeds=SeedsSpec(n=3),
    )
    data = {
        "name": "digits",
        "dataset": {"name": "digits"},
        "model": {"width": 16},
        "seeds": {"n": 3},
    }
    assert spec_from_dict(data) == spec


def test_unknown_dataset_suggests_close_match() -> None:
    with pytest.raises(UnknownNameError, match=r"'fashion_mnst'.*Did you mean 'fashion_mnist'"):
        DatasetSpec(name="fashion_mnst")


def test_unknown_names_in_toml_name_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[dataset]\nname = "digits"\n[model]\narch = "resnet19"\n')
    with pytest.raises(SpecError, match=r"arch: 'resnet19'.*Did you mean 'resnet18'"):
        load_spec(path)


@pytest.mark.parametrize(
    ("split", "message"),
    [
        ({"n_known": 11}, r"at most 10 classes"),
        ({"n_known": 10}, r"at least one OOD test class"),
        ({"n_known": 6, "n_ood_val": 3, "n_ood_test": 2}, r"at most 10 classes"),
        ({"fractions": [0.5, 0.3, 0.3]}, r"summing to 1"),
        ({"fractions": [0.8, 0.2, 0.0]}, r"fractions"),
        ({"n_known": -1}, r"n_known: -1 .*at least 2 known classes"),
        ({"n_known": 0}, r"n_known: 0"),
        ({"n_ood_val": -2}, r"n_ood_val: -2 .*>= 0"),
        ({"n_known": 3, "known_classes": [[0, 1]]}, r"n_known=3"),
        ({"n_known": 2, "known_classes": [[0, 12]]}, r"class ids in 0..9"),
    ],
)
def test_impossible_splits_fail_at_construction(split: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec_from_dict({"dataset": {"name": "digits"}, "split": split})


def test_unknown_detector_metric_and_parameters() -> None:
    with pytest.raises(UnknownNameError, match="Did you mean 'energy'"):
        DetectorSpec(name="enrgy")
    with pytest.raises(UnknownNameError, match="Did you mean 'auroc'"):
        ExperimentSpec(dataset=DatasetSpec(name="digits"), metrics=("aroc",))
    with pytest.raises(UnknownNameError, match="temperature"):
        DetectorSpec(name="temperature", params={"temprature": 2.0})


def test_wrong_types_and_extra_keys_in_toml(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[dataset]\nname = "digits"\n[seeds]\nn = "many"\n')
    with pytest.raises(SpecError, match=r"seeds.n"):
        load_spec(path)
    path.write_text('[dataset]\nname = "digits"\ncolour = "red"\n')
    with pytest.raises(SpecError, match="colour"):
        load_spec(path)


def test_toml_syntax_error_gives_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text('[dataset]\nname = "digits\n')
    with pytest.raises(SpecError, match=rf"^{re.escape(str(path))}:2:15: invalid TOML: Illegal"):
        load_spec(path)


def test_detectors_and_ood_sets_from_toml() -> None:
    spec = spec_from_dict(
        {
            "dataset": {"name": "digits"},
            "detectors": ["msp", {"name": "energy", "temperature": 2.0}],
            "ood": [
                "held_out",
                "uniform_noise",
                {"kind": "dataset", "dataset": "fashion_mnist", "n_samples": 100},
            ],
        }
    )
    assert [d.label for d in spec.detectors] == ["msp", "energy(temperature=2.0)"]
    assert [o.label for o in spec.ood] == ["held_out", "uniform_noise", "fashion_mnist"]
    assert spec.ood[1].size == 1000 and spec.varies_ood


def test_duplicate_labels_and_bad_ood_rejected() -> None:
    with pytest.raises(SpecError, match="distinct"):
        ExperimentSpec(dataset=DatasetSpec(name="digits"), detectors=("msp", "msp"))
    with pytest.raises(SpecError, match="kind = 'dataset'"):
        OODSetSpec(kind="dataset")
    with pytest.raises(UnknownNameError, match="gaussian_noise"):
        OODSetSpec(kind="gausian_noise")


def test_pinned_streams_validated() -> None:
    assert SeedsSpec(pinned={"class_split": 3}).pinned == (("class_split", 3),)
    with pytest.raises(UnknownNameError, match="Did you mean 'class_split'"):
        SeedsSpec(pinned={"class_splt": 3})


def test_split_defaults_to_all_remaining_classes() -> None:
    assert SplitSpec().n_ood_test is None


@pytest.mark.parametrize(
    ("typo", "table", "meant"),
    [("max_epochs", "training", "max_epochs"), ("n_known", "split", "n_known")],
)
def test_a_misspelled_field_name_gets_a_close_match(tmp_path, typo, table, meant) -> None:
    text = (ROOT / "specs" / "digits.toml").read_text().replace(typo, typo[:-1])
    (tmp_path / "typo.toml").write_text(text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if t.startswith(f"{typo[:-1]} ="))
    with pytest.raises(
        UnknownNameError,
        match=rf"typo\.toml:{line}: {table}\.{typo[:-1]}: '{typo[:-1]}'.*'{meant}'\?$",
    ):
        oodsim.load(tmp_path / "typo.toml")
