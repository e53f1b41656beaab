"""The first-contact API: detector specs from dicts as from TOML tables, stats that draw are
reproducible by default, and ``oodsim.select`` around xarray's ``sel(method=...)`` trap."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
import xarray as xr

import oodsim
from oodsim import stats
from oodsim.errors import SpecError, UnknownNameError
from oodsim.results import LabelError
from oodsim.specs import DatasetSpec, DetectorSpec, ExperimentSpec
from tests.conftest import ROOT, digits_toml, small_digits
from tests.factories import synthetic_results

ODIN = {"name": "odin", "params": {"temperature": 1000.0}}
ODIN_TOML = '{ name = "odin", params = { temperature = 1000.0 } }'

# --------------------------------------------------------------------------- detector dicts


def _toml_spec(tmp_path: Path, detectors: str) -> Any:
    return oodsim.load(digits_toml(tmp_path / "spec.toml", 4, detectors=detectors))


def _toml_error(tmp_path: Path, detectors: str) -> SpecError:
    with pytest.raises(SpecError) as caught:
        _toml_spec(tmp_path, detectors)
    return caught.value


def test_a_dict_table_in_evolve_builds_the_spec_of_the_toml_table(tmp_path: Path) -> None:
    spec = attrs.evolve(small_digits(4), detectors=("msp", ODIN))
    from_toml = _toml_spec(tmp_path, f'"msp", {ODIN_TOML}')
    assert spec == from_toml and spec.key == from_toml.key
    assert spec.detectors == (DetectorSpec(name="msp"), DetectorSpec(**ODIN))
    assert spec.detectors[1].label == "odin(temperature=1000.0)"


def test_inline_parameters_labels_names_and_specs_mix() -> None:
    inline = {"name": "energy", "temperature": 2.0, "label": "energy_t2"}
    spec = ExperimentSpec(
        dataset=DatasetSpec(name="digits"),
        detectors=["msp", inline, DetectorSpec(name="knn", params={"k": 10})],
    )
    assert [d.label for d in spec.detectors] == ["msp", "energy_t2", "knn(k=10)"]
    assert spec.detectors[1] == DetectorSpec(
        name="energy", params={"temperature": 2.0}, label="energy_t2"
    )
    assert spec.to_dict()["detectors"][1] == {
        "name": "energy",
        "label": "energy_t2",
        "temperature": 2.0,
    }


@pytest.mark.parametrize(
    ("table", "toml", "error", "words"),
    [
        ({"name": "odni"}, '{ name = "odni" }', UnknownNameError, "Did you mean 'odin'"),
        (
            {"name": "odin", "params": {"temprature": 1.0}},
            '{ name = "odin", params = { temprature = 1.0 } }',
            UnknownNameError,
            "Did you mean 'temperature'",
        ),
        (
            {"name": "odin", "colour": "red"},
            '{ name = "odin", colour = "red" }',
            UnknownNameError,
            "colour",
        ),
        (
            {"name": "odin", "params": 3},
            '{ name = "odin", params = 3 }',
            SpecError,
            "detectors[1].params",
        ),
        ({"temperature": 1.0}, "{ temperature = 1.0 }", SpecError, "detectors[1]"),
        (
            {"name": "energy", "temperature": "hot"},
            '{ name = "energy", temperature = "hot" }',
            SpecError,
            "detectors[1].temperature",
        ),
    ],
)
def test_a_bad_dict_fails_with_the_error_of_the_toml_table(
    tmp_path: Path, table: dict, toml: str, error: type, words: str
) -> None:
    with pytest.raises(error) as caught:
        attrs.evolve(small_digits(4), detectors=("msp", table))
    assert words in str(caught.value)
    from_file = _toml_error(tmp_path, f'"msp", {toml}')
    lines = (tmp_path / "spec.toml").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if toml in text)  # the file names its line
    assert from_file.location == f"{tmp_path / 'spec.toml'}:{line}"
    assert str(caught.value) == str(from_file).removeprefix(f"{from_file.location}: ")


def test_severity_and_imagenet_o_specs_take_dict_tables(tmp_path: Path) -> None:
    energy = {"name": "energy", "params": {"temperature": 2.0}}
    for name, line in (
        ("severity_fashion_mnist.toml", 'detectors = ["msp", "energy", "mahalanobis"]'),
        ("imagenet_o.toml", 'detectors = ["msp"]'),
    ):
        text = (ROOT / "specs" / name).read_text()
        assert line in text
        path = tmp_path / name
        path.write_text(
            text.replace(line, 'detectors = ["msp", { name = "energy", temperature = 2.0 }]', 1)
        )
        spec = attrs.evolve(oodsim.load(ROOT / "specs" / name), detectors=("msp", energy))
        assert spec.detectors == oodsim.load(path).detectors
        assert spec.detectors[1] == DetectorSpec(name="energy", params={"temperature": 2.0})
        with pytest.raises(UnknownNameError, match="Did you mean 'energy'"):
            attrs.evolve(spec, detectors=[{"name": "enrgy"}])


# --------------------------------------------------------------------------- reproducible stats


def _drawing_functions() -> list[tuple[str, Any]]:
    """Every public function of ``oodsim.stats`` that takes an ``rng``."""
    functions = [(name, getattr(stats, name)) for name in stats.__all__]
    return [(n, f) for n, f in functions if callable(f) and "rng" in _parameters(f)]


def _parameters(func: Any) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return {}


def test_every_stats_function_that_draws_defaults_to_seed_0_and_says_so() -> None:
    drawing = _drawing_functions()
    assert {name for name, _ in drawing} >= {
        "estimate",
        "win_probability",
        "win_probability_interval",
        "win_probabilities",
        "win_probability_intervals",
        "variance_components",
        "crossed_components",
    }
    for name, func in drawing:
        assert _parameters(func)["rng"].default == 0, name
        assert "``rng``" in (func.__doc__ or ""), f"{name}'s docstring does not describe rng"


def _same(first: Any, second: Any) -> None:
    if isinstance(first, xr.Dataset | xr.DataArray):
        xr.testing.assert_identical(first, second)
    elif isinstance(first, tuple):
        for a, b in zip(first, second, strict=True):
            np.testing.assert_array_equal(a, b)
    elif attrs.has(type(first)):
        _same(attrs.astuple(first), attrs.astuple(second))
    else:
        np.testing.assert_array_equal(first, second)


def test_stats_that_draw_give_the_same_numbers_twice() -> None:
    results = synthetic_results(n_seeds=12, failed=())
    values = (
        results.score.sel({"metric": "auroc", "severity": "all"}).transpose("seed", "method").values
    )
    calls = {
        "estimate": lambda: stats.estimate(results, method="bootstrap", n_boot=300),
        "win_probability": lambda: stats.win_probability(values, k=3, n_draws=500),
        "win_probability_interval": lambda: stats.win_probability_interval(
            values, k=3, n_draws=200, n_boot=20, boot_draws=100
        ),
        "win_probabilities": lambda: stats.win_probabilities(results, "auroc", k=3, n_draws=500),
        "win_probability_intervals": lambda: stats.win_probability_intervals(
            results, "auroc", k=3, n_draws=200, n_boot=20, boot_draws=100
        ),
        "variance_components": lambda: stats.variance_components(results, n_draws=200, n_boot=10),
        "crossed_components": lambda: stats.crossed_components(
            values[:, 0], {"class_split": results.class_split.values}, n_draws=200, n_boot=10
        ),
    }
    assert set(calls) == {name for name, _ in _drawing_functions()}
    for name, call in calls.items():
        try:
            _same(call(), call())
        except AssertionError as error:
            raise AssertionError(f"{name} drew different numbers twice") from error
    bootstrap = calls["estimate"]()
    assert np.isfinite(bootstrap.lower).all()
    fresh = stats.estimate(results, method="bootstrap", n_boot=300, rng=None)
    assert not np.array_equal(fresh.lower.values, bootstrap.lower.values)


# --------------------------------------------------------------------------- oodsim.select


@pytest.fixture(scope="module")
def results() -> xr.Dataset:
    return synthetic_results(n_seeds=6, oods=("noise_a", "noise_b"))


def test_select_is_sel_with_the_dims_as_keywords(results: xr.Dataset) -> None:
    assert "select" in oodsim.__all__ and oodsim.select.__module__ == "oodsim.results.select"
    picked = oodsim.select(results, method="msp", metric="auroc", ood="noise_b")
    xr.testing.assert_identical(
        picked, results.sel({"method": "msp", "metric": "auroc", "ood": "noise_b"})
    )
    assert "method" not in picked.dims and "seed" in picked.dims
    kept = oodsim.select(results.score, method=["energy", "msp"], severity="all")
    assert list(kept.method.values) == ["energy", "msp"] and "severity" not in kept.dims
    first = int(results.seed.values[0])
    one = oodsim.select(results.score, seed=first, method=None, dataset=None)
    xr.testing.assert_identical(one, results.score.sel({"seed": first}))


def test_select_names_the_dim_and_its_labels(results: xr.Dataset) -> None:
    with pytest.raises(KeyError) as caught:
        oodsim.select(results, method="mps")
    assert isinstance(caught.value, LabelError)
    message = str(caught.value)
    assert message.startswith("method: 'mps' is not a label")
    assert "'msp', 'odin', 'energy'" in message and "Did you mean 'msp'?" in message
    with pytest.raises(KeyError, match=r"ood: 'noise_c'.*'noise_a', 'noise_b'"):
        oodsim.select(results.score, ood=["noise_a", "noise_c"])
    with pytest.raises(KeyError, match="seed: 99999"):
        oodsim.select(results, seed=99999)


def test_select_refuses_a_dim_the_results_lack(results: xr.Dataset) -> None:
    with pytest.raises(ValueError, match=r"no 'model' dimension.*'seed'"):
        oodsim.select(results, model="model_a")
    with pytest.raises(ValueError, match="Did you mean 'metric'"):
        oodsim.select(results.score, metrc="auroc")


# --------------------------------------------------------------------------- package attributes


def test_models_and_data_are_attributes_and_classifier_loads_torch_on_first_use() -> None:
    """``oodsim.models`` and ``oodsim.data`` were an AttributeError while ``oodsim.detectors``
    worked; ``Classifier`` lived only in ``oodsim.models.architectures``."""
    code = (
        "import sys\n"
        "import oodsim\n"
        "assert callable(oodsim.models.register_architecture)\n"
        "assert callable(oodsim.data.register_dataset)\n"
        "assert 'digits' in oodsim.data.available_datasets()\n"
        "print('torch' in sys.modules)\n"
        "from oodsim.models.architectures import Classifier\n"
        "import torch\n"
        "assert oodsim.models.Classifier is Classifier\n"
        "assert issubclass(Classifier, torch.nn.Module)\n"
        "assert oodsim.models.ContractModel.__module__ == 'oodsim.models.classifier'\n"
        "try:\n"
        "    oodsim.models.Nothing\n"
        "except AttributeError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "False",  # the driver stays torch-free until a classifier is asked for
        "module 'oodsim.models' has no attribute 'Nothing'",
    ]
