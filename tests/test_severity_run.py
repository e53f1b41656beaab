"""Severity runs end to end: a Fashion-MNIST CNN with digits and noise as OOD pool, the cache
(adding a κ or a model computes only what is new), image folders with a zoo model, specs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import attrs
import numpy as np
import pytest
import xarray as xr
from PIL import Image
from scipy import stats as sps

from oodsim.data.imagenet_classes import filter_ood_classes, imagenet1k_wnids, imagenet21k_wnids
from oodsim.errors import DataNotFoundError, SpecError, UnknownNameError
from oodsim.models.zoo import ModelRef
from oodsim.protocols import severity_run as sr
from oodsim.protocols.severity_analysis import level_trend
from oodsim.results import open_results, save_results, store_counts
from oodsim.specs import DetectorSpec
from oodsim.store import Store

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "specs" / "severity_fashion_mnist.toml"


@pytest.fixture(scope="module")
def fmnist(tmp_path_factory, cluster_address):
    """The shipped CPU spec, run once on a real cluster into a module-wide store."""
    cache = tmp_path_factory.mktemp("severity") / "cache"
    spec = sr.load_severity_spec(SPEC)
    started = time.perf_counter()
    results = sr.run_severity(spec, address=cluster_address, cache=cache, progress=False)
    return spec, cache, results, time.perf_counter() - started


def test_fashion_mnist_levels_get_harder(fmnist) -> None:
    _, _, results, _ = fmnist
    assert results["score"].dims == ("model", "method", "metric", "severity")
    assert results["score"].shape == (1, 3, 4, 11)
    assert results["severity"].values.tolist() == [str(i) for i in range(11)]
    assert np.isfinite(results["score"].values).all()
    assert results["n_pool_classes"].item() == 21 and results["group_size"].item() == 5
    # levels are sorted by their mean severity, for every κ
    assert (np.diff(results["level_severity"].values, axis=-1) >= 0).all()
    classes = json.loads(results["level_classes"].values[0, 0, 0])
    assert len(classes) == 5 and all(isinstance(c, str) for c in classes)
    # detection gets harder with the level: Spearman(level, AUROC) < 0 for every κ
    auroc = results["score"].sel(metric="auroc")
    assert (level_trend(results).values < -0.8).all(), auroc.values
    assert (auroc.isel(severity=0) > auroc.isel(severity=-1) + 0.2).all()
    assert 0.7 < results["id_accuracy"].item() <= 1.0
    assert np.isfinite(results["id_auroc"].values).all()
    assert store_counts(results)["computed"] == {"checkpoint": 1, "severity_outputs": 11}


def test_results_round_trip_through_zarr(fmnist, tmp_path) -> None:
    _, _, results, _ = fmnist
    path = save_results(results, tmp_path / "severity.zarr")
    xr.testing.assert_identical(open_results(path), results)


def test_only_new_kappas_and_models_are_computed(fmnist, cluster_address) -> None:
    spec, cache, first, _ = fmnist
    again = sr.run_severity(spec, address=cluster_address, cache=cache, progress=False)
    assert store_counts(again)["computed"] == {}
    np.testing.assert_array_equal(again["score"].values, first["score"].values)

    odin = DetectorSpec(name="odin", params={"temperature": 10.0, "epsilon": 0.001})
    more = attrs.evolve(spec, detectors=(*spec.detectors, DetectorSpec(name="entropy"), odin))
    with_kappas = sr.run_severity(more, address=cluster_address, cache=cache, progress=False)
    counts = store_counts(with_kappas)
    assert counts["computed"] == {"severity_kappa": 9}  # ODIN on the ID set + 8 pool sources
    assert counts["loaded"]["severity_outputs"] >= 11
    old = [d.label for d in spec.detectors]
    np.testing.assert_array_equal(
        with_kappas["score"].sel({"method": old}).values, first["score"].values
    )
    assert np.isfinite(with_kappas["score"].values).all()

    ref = spec.models[0]
    quick = attrs.evolve(ref.experiment.training, max_epochs=2)
    experiment = attrs.evolve(ref.experiment, training=quick)
    second = attrs.evolve(ref, seed=1, experiment=experiment, label="cnn seed 1, 2 epochs")
    two = attrs.evolve(more, models=(ref, second))
    both = sr.run_severity(two, address=cluster_address, cache=cache, progress=False)
    assert store_counts(both)["computed"] == {
        "checkpoint": 1,
        "severity_outputs": 11,
        "severity_kappa": 9,
    }
    assert both.sizes["model"] == 2
    np.testing.assert_array_equal(
        both["score"].isel(model=0).values, with_kappas["score"].isel(model=0).values
    )


# --------------------------------------------------------------------------- image folders


def _images(folder: Path, n: int, rng: np.random.Generator, size: int = 24) -> None:
    folder.mkdir(parents=True)
    for i in range(n):
        pixels = rng.integers(0, 256, (size, size + 4, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i}.png")


def test_image_folders_with_a_random_zoo_model(tmp_path, cluster_address) -> None:
    rng = np.random.default_rng(0)
    id_wnids = imagenet1k_wnids()[:3]
    kept = filter_ood_classes(None, imagenet21k_wnids()[2000:2100]).kept[:6]
    dropped = [imagenet1k_wnids()[3], "n02131653"]  # an ID class and "bear" (a hypernym)
    for wnid in id_wnids:
        _images(tmp_path / "val" / wnid, 4, rng)
    for wnid in [*kept, *dropped]:
        _images(tmp_path / "pool" / wnid, 10, rng)
    model = ModelRef(name="timm:test_resnet", pretrained=False, image_size=32)
    pool = sr.SourceSpec(
        kind="image_folder",
        name="pool",
        root=str(tmp_path / "pool"),
        wordnet_filter=True,
        shard_size=4,
    )
    spec = sr.SeveritySpec(
        models=(model,),
        detectors=("msp", "max_logit"),
        id=sr.SourceSpec(kind="image_folder", name="val", root=str(tmp_path / "val")),
        ood=(pool, sr.SourceSpec(kind="uniform_noise", n_samples=10)),
        n_est=6,
        n_test=4,
        n_levels=4,
    )
    tasks = sr.plan(spec)
    assert [t.shard for t in tasks if t.source is pool] == [0, 1]  # 6 kept classes, 4 per shard
    cache = tmp_path / "cache"
    results = sr.run_severity(spec, address=cluster_address, cache=cache, progress=False)
    assert results["score"].shape == (1, 2, 4, 4)
    assert results["n_pool_classes"].item() == 7 and results["group_size"].item() == 3
    assert np.isfinite(results["score"].values).all()
    names = {c for s in results["level_classes"].values.ravel() for c in json.loads(s)}
    assert names <= {f"pool/{w}" for w in kept} | {"uniform(0,255)"}
    id_task = next(t for t in tasks if t.role == "id")
    entry = Store(cache).get(sr.OUTPUTS, id_task.outputs_key)
    columns = [imagenet1k_wnids().index(w) for w in id_wnids]
    assert sorted(set(entry.arrays["targets"].tolist())) == columns  # wnid folders → 1k index
    assert entry.arrays["logits"].shape == (12, 1000)


# --------------------------------------------------------------------------- specs


def test_real_use_spec_loads_and_validates_without_data() -> None:
    spec = sr.load_severity_spec(ROOT / "specs" / "cood_severity.toml", check_roots=False)
    assert spec.id.kind == "image_folder" and spec.ood[0].wordnet_filter
    assert len(spec.models) >= 5 and {m.prefix for m in spec.models} == {"timm", "torchvision"}
    assert spec.group_size is None and spec.n_est == 150 and spec.n_test == 50
    with pytest.raises(DataNotFoundError, match="imagenet_val"):
        sr.load_severity_spec(ROOT / "specs" / "cood_severity.toml")


def test_spec_round_trips_and_keys_ignore_roots(tmp_path) -> None:
    spec = sr.load_severity_spec(SPEC)
    again = sr.severity_spec_from_dict(spec.to_dict())
    assert again.key == spec.key
    moved = attrs.evolve(spec, id=attrs.evolve(spec.id, root="/elsewhere"))
    assert moved.key == spec.key
    assert attrs.evolve(spec, n_test=30).key != spec.key


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"n_levels": 1}, SpecError, "n_levels"),
        ({"metrics": ["aurocc"]}, UnknownNameError, "auroc"),
        ({"detectors": ["msp", "msp"]}, SpecError, "detectors"),
        ({"ood": [{"kind": "noise"}]}, UnknownNameError, "uniform_noise"),
        ({"ood": [{"kind": "dataset", "name": "digitz"}]}, UnknownNameError, "digits"),
        ({"ood": [{"kind": "uniform_noise", "root_dir": "x"}]}, UnknownNameError, "root"),
        ({"ood": [{"kind": "uniform_noise", "low": 9, "high": 3}]}, SpecError, "low"),
        ({"models": ["timm:resnt18"]}, SpecError, "resnet18"),
        ({"models": ["torchvision:resnet18"]}, SpecError, "split"),
        ({"n_est": "many"}, SpecError, "n_est"),
        ({"extra_field": 1}, SpecError, "extra_field"),
    ],
)
def test_bad_specs_fail_before_compute(change, error, match) -> None:
    import tomllib

    data = tomllib.loads(SPEC.read_text())
    data.update(change)
    with pytest.raises(error, match=match):
        sr.severity_spec_from_dict(data)


def test_pool_classes_must_not_be_id_classes(tmp_path) -> None:
    spec = sr.load_severity_spec(SPEC)
    bad = attrs.evolve(spec.ood[0], classes=("sandal", "coat"))
    spec = attrs.evolve(spec, ood=(bad, *spec.ood[1:]))
    with pytest.raises(SpecError, match="coat"):
        sr.preflight(spec, Store(tmp_path / "cache"))


def test_missing_pretrained_weights_fail_before_compute(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    spec = sr.SeveritySpec(
        models=("timm:test_resnet",),
        id=sr.SourceSpec(kind="dataset", name="digits"),
        ood=(sr.SourceSpec(kind="uniform_noise"),),
    )
    with pytest.raises(DataNotFoundError, match=str(tmp_path / "hf")):
        sr.run_severity(spec, cache=tmp_path / "cache", progress=False)
    assert not (tmp_path / "cache" / sr.OUTPUTS).exists()


def test_subsample_is_per_class_and_reproducible() -> None:
    labels = np.repeat(np.arange(4), [5, 12, 30, 2])
    a = sr.subsample(labels, 10, np.random.default_rng(1))
    b = sr.subsample(labels, 10, np.random.default_rng(1))
    assert np.array_equal(a, b) and np.all(np.diff(a) > 0)
    assert np.bincount(labels[a]).tolist() == [5, 10, 10, 2]
    assert sps.spearmanr(np.arange(3), [1, 2, 3]).statistic == 1.0  # scipy is importable


def test_cli_severity_prints_levels_and_writes_results(fmnist, tmp_path, capsys) -> None:
    import argparse

    from oodsim.cli_severity import add_commands

    _, cache, first, _ = fmnist
    main = argparse.ArgumentParser(prog="oodsim")
    add_commands(main.add_subparsers(dest="command", required=True))
    out = tmp_path / "sev.zarr"
    args = main.parse_args(
        [
            "severity",
            str(SPEC),
            "--cache",
            str(cache),
            "--out",
            str(out),
            "--quiet",
            "--report",
            str(tmp_path / "report"),
        ]
    )
    assert args.func(args) == 0  # everything cached: no cluster is started
    printed = capsys.readouterr().out
    assert "auroc by severity level" in printed and "mahalanobis" in printed
    assert '"computed": {}' in printed
    np.testing.assert_array_equal(open_results(out)["score"].values, first["score"].values)
    assert (tmp_path / "report" / "auroc_by_level.png").is_file()


def test_suite_of_datasets_adds_a_dataset_dimension(cluster_address: str, tmp_path: Path) -> None:
    from oodsim.protocols.severity_suite import (
        load_severity_suite,
        per_dataset,
        run_severity_suite,
    )

    suite = load_severity_suite(ROOT / "specs" / "severity_suite_fashion_mnist.toml")
    labels = [label for label, _ in suite.datasets]
    assert labels == ["fashion_and_digits", "digits_and_noise"]
    cache = tmp_path / "cache"
    results = run_severity_suite(
        suite, address=cluster_address, cache=cache, progress=False, out=tmp_path / "r.zarr"
    )
    assert list(results["dataset"].values) == labels
    assert results["score"].dims[0] == "dataset" and results.sizes["severity"] == 11
    assert np.isfinite(results["score"].values).all()
    # the same model and shared sources: the second dataset reuses the first one's outputs
    first = json.loads(results.attrs["store"])["computed"]
    assert first.get("checkpoint", 0) <= 1
    again = run_severity_suite(suite, address=cluster_address, cache=cache, progress=False)
    assert json.loads(again.attrs["store"])["computed"] == {}
    assert [label for label, _ in per_dataset(again)] == labels
    reopened = open_results(tmp_path / "r.zarr")
    np.testing.assert_array_equal(reopened["score"].values, results["score"].values)
