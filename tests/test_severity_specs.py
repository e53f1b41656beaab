"""Severity specs and plans without compute: loading through the front door, seeds and the old
``seed`` field, validation before any compute, content keys that say what a seed shares, and
the one noise generator."""

from __future__ import annotations

import tomllib
import warnings
from pathlib import Path

import attrs
import numpy as np
import pytest
from scipy import stats as sps

import oodsim
from oodsim.artifacts.outputs import OUTPUTS, LegacyOutputsWarning, migrate_outputs
from oodsim.errors import DataNotFoundError, SpecError, UnknownNameError
from oodsim.protocols.severity import PROTOCOL
from oodsim.protocols.severity.compute import tasks
from oodsim.protocols.severity.plan import units
from oodsim.protocols.severity.reading import severity_spec_from_dict
from oodsim.protocols.severity.sources import subsample
from oodsim.protocols.severity.spec import PoolSpec, SeveritySpec, SourceSpec
from oodsim.seeds import SeedStreams
from oodsim.simulation.ood_sets import noise_images, ood_images
from oodsim.specs import OODSetSpec, SeedsSpec, StoppingSpec
from oodsim.store import Store
from oodsim.zoo import ModelRef, load_model
from tests.conftest import ROOT

SPEC = ROOT / "specs" / "severity_fashion_mnist.toml"
SUITE = ROOT / "specs" / "severity_suite_fashion_mnist.toml"
COOD = ROOT / "specs" / "cood_severity.toml"


def _data(path: Path = SPEC) -> dict:
    data = tomllib.loads(path.read_text())
    data.pop("protocol")
    return data


def test_load_gives_a_seeded_spec_that_evolves() -> None:
    spec = oodsim.load(SPEC)
    assert isinstance(spec, SeveritySpec)
    assert spec.seeds.n == 3 and spec.max_seeds == 3 and spec.on_failure == "record"
    assert spec.name == "severity_fashion_mnist" and spec.stopping.rule == "fixed"
    assert spec.models[0].seed is None  # the trained CNN follows the run's seed
    assert [d.label for d in spec.detectors] == ["msp", "energy", "mahalanobis"]
    assert spec.metrics == ("auroc", "aupr_in", "aupr_out", "fpr95")
    more = attrs.evolve(spec, seeds=attrs.evolve(spec.seeds, n=5))
    assert more.max_seeds == 5 and more.key != spec.key
    assert '"seeds"' in spec.to_json()
    assert severity_spec_from_dict(spec.to_dict()).key == spec.key
    suite = oodsim.load(SUITE)
    assert [d.label for d in suite.datasets] == ["fashion_and_digits", "digits_and_noise"]
    assert suite.varies_dataset and severity_spec_from_dict(suite.to_dict()).key == suite.key


def test_keys_ignore_roots_and_labels() -> None:
    spec = oodsim.load(SPEC)
    pool = spec.datasets[0]
    moved = attrs.evolve(spec, datasets=attrs.evolve(pool, id=attrs.evolve(pool.id, root="/x")))
    assert moved.key == spec.key
    assert attrs.evolve(spec, name="other").key == spec.key
    assert attrs.evolve(spec, n_test=30).key != spec.key


def test_the_old_seed_field_points_to_seeds() -> None:
    data = _data()
    data["seed"] = 0
    with pytest.raises(SpecError, match=r"seed.*\[seeds\]"):
        severity_spec_from_dict(data)
    suite = _data(SUITE)
    suite["datasets"][0]["seed"] = 1
    with pytest.raises(SpecError, match=r"datasets\[0\]\.seed.*\[seeds\]"):
        severity_spec_from_dict(suite)


def test_cood_spec_loads_without_data_and_fails_before_compute(tmp_path) -> None:
    spec = oodsim.load(COOD)
    pool = spec.datasets[0]
    assert pool.id.kind == "image_folder" and pool.ood[0].wordnet_filter
    assert len(spec.models) >= 5 and {m.prefix for m in spec.models} == {"timm", "torchvision"}
    assert spec.group_size is None and spec.n_est == 150 and spec.n_test == 50
    assert spec.seeds.n == 10
    with pytest.raises(DataNotFoundError, match="imagenet_val"):
        oodsim.run(spec, cache=tmp_path / "cache", progress=False)
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"n_levels": 1}, SpecError, "n_levels"),
        ({"metrics": ["aurocc"]}, UnknownNameError, "auroc"),
        ({"detectors": ["msp", "msp"]}, SpecError, "detectors"),
        ({"detectors": [{"name": "odin", "temperature": [1.0, 10.0]}]}, SpecError, "one value"),
        ({"ood": [{"kind": "noise"}]}, UnknownNameError, "uniform_noise"),
        ({"ood": [{"kind": "dataset", "name": "digitz"}]}, UnknownNameError, "digits"),
        ({"ood": [{"kind": "uniform_noise", "root_dir": "x"}]}, UnknownNameError, "root"),
        ({"ood": [{"kind": "uniform_noise", "low": 9, "high": 3}]}, SpecError, "low"),
        ({"ood": [{"kind": "uniform_noise", "low": 0.5}]}, SpecError, r"ood\[0\]\.low.*integer"),
        ({"ood": [{"kind": "uniform_noise", "high": 300}]}, SpecError, "integer pixel"),
        ({"ood": [{"kind": "uniform_noise", "n_samples": 20}]}, SpecError, "n_est"),
        ({"ood": []}, SpecError, "ood"),
        ({"models": ["timm:resnt18"]}, SpecError, "resnet18"),
        ({"models": ["torchvision:resnet18"]}, SpecError, "split"),
        ({"models": [{"name": "timm:test_resnet", "seed": 1}]}, SpecError, "seed"),
        ({"n_est": "many"}, SpecError, "n_est"),
        ({"extra_field": 1}, SpecError, "extra_field"),
        ({"seeds": {"n": 0}}, SpecError, "seeds.n"),
        ({"seeds": {"count": 3}}, UnknownNameError, "seeds"),
        ({"stopping": {"rule": "ranking", "severity": "11"}}, SpecError, "stopping.severity"),
        ({"on_failure": "ignore"}, UnknownNameError, "abort"),
        ({"datasets": [{"label": "x", "id": {"kind": "split"}, "ood": []}]}, SpecError, "id/ood"),
    ],
)
def test_bad_specs_fail_before_compute(change, error, match) -> None:
    data = _data()
    data.update(change)
    with pytest.raises(error, match=match):
        severity_spec_from_dict(data)


def test_pool_classes_must_not_be_id_classes_in_any_seed(tmp_path) -> None:
    spec = oodsim.load(SPEC)
    pool = spec.datasets[0]
    bad = attrs.evolve(pool.ood[0], classes=("sandal", "coat"))
    spec = attrs.evolve(spec, datasets=attrs.evolve(pool, ood=(bad, *pool.ood[1:])))
    with pytest.raises(SpecError, match="coat"):
        PROTOCOL(spec).preflight(Store(tmp_path / "cache"))
    # a CNN trained on 5 random classes per seed: some seed has an ID class among the OOD ones
    experiment = spec.models[0].experiment
    random_split = attrs.evolve(experiment.split, known_classes=())
    model = attrs.evolve(spec.models[0], experiment=attrs.evolve(experiment, split=random_split))
    fashion = attrs.evolve(pool, ood=(pool.ood[0], *pool.ood[1:]))
    spec = attrs.evolve(spec, models=(model,), datasets=fashion, seeds=SeedsSpec(n=5))
    with pytest.raises(SpecError, match="in seed"):
        PROTOCOL(spec).preflight(Store(tmp_path / "cache"))


def test_missing_pretrained_weights_fail_before_compute(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    spec = SeveritySpec(
        models=("timm:test_resnet",),
        datasets=PoolSpec(
            id=SourceSpec(kind="dataset", name="digits"), ood=SourceSpec(kind="uniform_noise")
        ),
    )
    with pytest.raises(DataNotFoundError, match=str(tmp_path / "hf")):
        oodsim.run(spec, cache=tmp_path / "cache", progress=False)
    assert not (tmp_path / "cache").exists()


def test_a_trained_model_that_breaks_the_contract_fails_before_any_compute(tmp_path) -> None:
    """A ``trained`` model's open set simulation is checked in the driver as open set checks
    its own (data, split, architecture), before a worker trains it for every seed."""
    import torch

    from oodsim.models import ArchitectureError, register_architecture

    @register_architecture("test_severity_no_embed", replace=True)
    def no_embed(*, n_classes: int) -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, n_classes))

    spec = oodsim.load(SPEC)
    experiment = spec.models[0].experiment
    model = attrs.evolve(experiment.model, arch="test_severity_no_embed")
    ref = attrs.evolve(spec.models[0], experiment=attrs.evolve(experiment, model=model))
    spec = attrs.evolve(spec, models=(ref,))
    with pytest.raises(ArchitectureError, match=r"has no embed\(x\) and no head"):
        oodsim.run(spec, n_workers=1, cache=tmp_path / "cache", progress=False)
    assert not (tmp_path / "cache").exists()  # refused in the driver, before the cache


def test_trained_models_follow_the_seed_unless_pinned() -> None:
    spec = oodsim.load(SPEC)
    follow = spec.models[0]
    assert follow.label == "trained:fashion_mnist_5"
    pinned = attrs.evolve(follow, seed=0, label="pinned")
    assert ModelRef(name="trained", experiment=follow.experiment, seed=2).label.endswith("@2")
    spec = attrs.evolve(spec, models=(follow, pinned))
    first, second = tasks(spec, 1), tasks(spec, 2)
    keys = {t.key for t in first} & {t.key for t in second}
    shared = sorted(t.label for t in first if t.key in keys)
    # the pinned model's training and its outputs on the datasets; noise is drawn per seed
    assert shared == ["pinned on digits", "pinned on fashion_mnist", "train pinned (seed 0)"]
    trainings = [t for t in tasks(spec, 0) if t.label.startswith("train ")]
    assert len(trainings) == 1  # in seed 0 both models are seed 0's CNN: trained once
    inference = [t for t in tasks(spec, 0) if not t.label.startswith("train ")]
    assert all(t.after == (trainings[0].key,) for t in inference)
    with pytest.raises(SpecError, match="timm: or torchvision:"):
        load_model(follow)  # a trained CNN belongs to a seed: the severity protocol loads it


def test_pretrained_outputs_on_fixed_sources_are_shared_by_seeds() -> None:
    spec = SeveritySpec(
        models=(ModelRef(name="timm:test_resnet", pretrained=False),),
        detectors=("msp", "mc_dropout", "odin"),
        datasets=PoolSpec(
            id=SourceSpec(kind="dataset", name="digits"),
            ood=(
                SourceSpec(kind="dataset", name="fashion_mnist", max_per_class=200),
                SourceSpec(kind="gaussian_noise"),
            ),
        ),
    )
    zero, one = units(spec, 0), units(spec, 1)
    by_source = {u.source.label: u for u in zero}
    again = {u.source.label: u for u in one}
    for label in ("digits", "fashion_mnist"):
        assert by_source[label].part == again[label].part  # outputs computed once
        odin = [k for k in by_source[label].kappas if k.detector.name == "odin"]
        assert odin[0].key in {k.key for k in again[label].kappas}  # deterministic κ shared
        dropout = [k for k in by_source[label].kappas if k.detector.name == "mc_dropout"]
        assert dropout[0].key not in {k.key for k in again[label].kappas}  # stochastic: per seed
        assert dict(dropout[0].params)["seed"] == SeedStreams(0).torch_seed("inference")
    assert by_source["gaussian(128,128)"].part != again["gaussian(128,128)"].part
    # without a stochastic κ the tasks themselves are shared (the engine runs them once)
    fixed = attrs.evolve(spec, detectors=("msp", "odin"))
    shared = {t.key for t in tasks(fixed, 0)} & {t.key for t in tasks(fixed, 1)}
    assert len(shared) == 2  # digits, fashion_mnist; the noise is drawn per seed


def test_stopping_watches_a_level() -> None:
    spec = oodsim.load(SPEC)
    rule = StoppingSpec(rule="ranking", metric="auroc", severity="5", min_seeds=2)
    assert attrs.evolve(spec, stopping=rule).stopping.severity == "5"
    with pytest.raises(SpecError, match=r"stopping\.severity: 5 .*a string"):
        StoppingSpec(severity=5)  # a level is a label: no silent int → str
    with pytest.raises(SpecError, match="stopping.metric"):
        attrs.evolve(spec, stopping=attrs.evolve(rule, metric="accuracy"))


def test_one_noise_generator_for_open_set_and_severity() -> None:
    streams = SeedStreams(3)
    shape = (8, 8, 1)
    uniform = ood_images(OODSetSpec(kind="uniform_noise", n_samples=5), shape, streams)
    rng = streams.rng("ood_sampling")
    np.testing.assert_array_equal(uniform, rng.integers(0, 256, (5, *shape), dtype=np.uint8))
    gaussian = ood_images(OODSetSpec(kind="gaussian_noise", n_samples=5), shape, streams)
    np.testing.assert_array_equal(
        gaussian, noise_images("gaussian_noise", 5, shape, streams.rng("ood_sampling"))
    )
    dark = noise_images("uniform_noise", 200, shape, np.random.default_rng(0), low=0, high=64)
    assert dark.min() == 0 and dark.max() == 64


def test_subsample_is_per_class_and_reproducible() -> None:
    labels = np.repeat(np.arange(4), [5, 12, 30, 2])
    a = subsample(labels, 10, np.random.default_rng(1))
    b = subsample(labels, 10, np.random.default_rng(1))
    assert np.array_equal(a, b) and np.all(np.diff(a) > 0)
    assert np.bincount(labels[a]).tolist() == [5, 10, 10, 2]
    assert sps.spearmanr(np.arange(3), [1, 2, 3]).statistic == 1.0  # scipy is importable


def test_outputs_of_the_old_layout_are_named_then_migrated_to_the_keys_seeds_plan(
    tmp_path,
) -> None:
    """An older oodsim stored severity outputs under their own kind, ``severity_outputs``, with
    the same keys: preflight names them and the command that moves them; once migrated they
    sit where a seed's tasks look for them (kind ``outputs``), and preflight is quiet."""
    spec = oodsim.load(SPEC)
    store = Store(tmp_path / "cache")
    key = next(u.part.key for u in units(spec, 0) if u.part.inferred)
    store.put("severity_outputs", key, {"logits": np.zeros((4, 3))}, {"describe": "old layout"})
    with pytest.warns(LegacyOutputsWarning, match="oodsim cache migrate"):
        PROTOCOL(spec).preflight(store)
    assert migrate_outputs(store)["severity_outputs"].moved == 1
    assert (OUTPUTS, key) in [entry for task in tasks(spec, 0) for entry in task.entries]
    assert store.has(OUTPUTS, key) and not store.holds_kind("severity_outputs")
    with warnings.catch_warnings():
        warnings.simplefilter("error", LegacyOutputsWarning)
        PROTOCOL(spec).preflight(store)
