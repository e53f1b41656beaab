"""Severity runs on the engine, end to end on a real cluster: the shipped Fashion-MNIST spec over
three seeds with a detector registered in this (driver) module, the cache (a rerun, a new κ, a
suite of datasets compute only what is new), a ranking stopping rule, failed seeds, image
folders with a zoo model, and ``oodsim run`` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import numpy as np
import pytest
import xarray as xr
from PIL import Image

import oodsim
from oodsim.cli.main import main as cli_main
from oodsim.data.imagenet_classes import filter_ood_classes, imagenet1k_wnids, imagenet21k_wnids
from oodsim.engine import RunAborted
from oodsim.protocols.severity.analysis import level_trend
from oodsim.protocols.severity.compute import load_model
from oodsim.protocols.severity.plan import OUTPUTS, checkpoint_key, id_units
from oodsim.protocols.severity.spec import PoolSpec, SeveritySpec, SourceSpec
from oodsim.results import open_results, save_results, store_counts
from oodsim.specs import DetectorSpec, SeedsSpec, StoppingSpec
from oodsim.stats import estimate
from oodsim.store import Store
from oodsim.zoo import ModelRef
from tests.conftest import ROOT, small_digits

SPEC = ROOT / "specs" / "severity_fashion_mnist.toml"
SUITE = ROOT / "specs" / "severity_suite_fashion_mnist.toml"


# Registered here, in the driver: the cluster's worker processes never import this module, so
# they know these detectors only if the engine ships them.
@oodsim.detectors.register("test_severity_margin", needs={"logits"}, replace=True)
def margin(outputs, *, fit=None):
    """Top-1 minus top-2 logit."""
    top = np.sort(outputs.logits, axis=1)
    return top[:, -1] - top[:, -2]


@oodsim.detectors.register("test_severity_inverted", needs={"logits"}, replace=True)
def inverted(outputs, *, fit=None):
    """Minus the softmax response: a deliberately bad κ (OOD looks more ID than ID)."""
    shifted = outputs.logits - outputs.logits.max(axis=1, keepdims=True)
    return -1.0 / np.exp(shifted).sum(axis=1)


@oodsim.detectors.register("test_severity_nan", needs={"logits"}, replace=True)
def not_finite(outputs, *, fit=None):
    """NaN for every sample: a broken κ."""
    return np.full(len(outputs.logits), np.nan)


@pytest.fixture(scope="module")
def fmnist(tmp_path_factory, cluster_address):
    """The shipped CPU spec with seeds.n = 3 and a driver-registered κ, run once on a real
    cluster into a module-wide store (the other tests reuse its cached outputs)."""
    cache = tmp_path_factory.mktemp("severity") / "cache"
    spec = oodsim.load(SPEC)
    spec = attrs.evolve(
        spec,
        seeds=attrs.evolve(spec.seeds, n=3),
        detectors=(*spec.detectors, DetectorSpec(name="test_severity_margin")),
    )
    results = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    return spec, cache, results


def test_the_same_registered_detector_runs_in_open_set_too(cluster_address, tmp_path) -> None:
    """The detector the severity run above uses, shipped by the same engine to an open set run."""
    spec = small_digits(2, detectors=("msp", "test_severity_margin"))
    results = oodsim.run(spec, address=cluster_address, cache=tmp_path / "cache", progress=False)
    assert results.attrs["protocol"] == "open_set"
    assert (results["failure"].values == "").all()
    auroc = results["score"].sel({"method": "test_severity_margin", "metric": "auroc"})
    assert np.isfinite(auroc).all() and float(auroc.mean()) > 0.6


def test_acceptance_seeds_levels_and_a_registered_detector(fmnist) -> None:
    _, _, results = fmnist
    assert results["score"].dims == ("seed", "method", "metric", "severity", "model")
    assert dict(results["score"].sizes) == {
        "seed": 3,
        "method": 4,
        "metric": 4,
        "severity": 11,
        "model": 1,
    }
    assert results["method"].values.tolist() == [
        "msp",
        "energy",
        "mahalanobis",
        "test_severity_margin",
    ]
    assert results["severity"].values.tolist() == [str(i) for i in range(11)]
    assert (results["failure"].values == "").all()
    assert np.isfinite(results["score"].values).all()
    auroc = results["score"].sel(metric="auroc")
    assert not np.allclose(auroc.isel(seed=0), auroc.isel(seed=1))  # a seed redraws
    assert not np.allclose(results["id_accuracy"].isel(seed=0), results["id_accuracy"].isel(seed=2))
    assert estimate(results)["mean"].dims == ("method", "metric", "severity", "model")
    # one CNN trained per seed, its split outputs stored once (no second copy), 8 pool sources
    assert store_counts(results)["computed"] == {"checkpoint": 3, "outputs": 3 + 24}
    # detection gets harder with the level, for every κ; levels sorted by mean severity
    assert (level_trend(results).values < -0.8).all(), auroc.mean("seed").values
    assert (np.diff(results["level_severity"].values, axis=2) >= 0).all()
    classes = json.loads(results["level_classes"].values[0, 0, 0, 0])
    assert len(classes) == 5 and all(isinstance(c, str) for c in classes)
    assert (results["n_pool_classes"] == 21).all() and (results["group_size"] == 5).all()
    assert ((results["id_accuracy"] > 0.7) & (results["id_accuracy"] <= 1.0)).all()


def test_class_severity_is_on_the_paper_scale_and_defines_the_levels(fmnist) -> None:
    """msp's class severity is a mean probability; every method's levels are the windows of its
    sorted class severity (Algorithm 1), and level_severity is their mean on the same scale."""
    _, _, results = fmnist
    severity = results["class_severity"]
    assert severity.dims == ("seed", "method", "ood_class", "model")
    assert results["confidence_scale"].values.tolist() == [
        "probability",
        "kappa",
        "kappa",
        "kappa",
    ]
    msp = severity.sel({"method": "msp"}).values
    assert ((msp >= 0) & (msp <= 1)).all()
    names = results["ood_class"].values.tolist()
    assert len(names) == 21 and "fashion_mnist/sandal" in names
    starts = [min(i * 17 // 10, 16) for i in range(11)]  # K = 21, G = 5: M = 17 windows
    for seed in range(results.sizes["seed"]):
        for method in results["method"].values:
            cell = {
                "seed": seed,
                "method": list(results["method"].values).index(method),
                "model": 0,
            }
            values = severity.isel(seed=seed, model=0).sel({"method": method}).values
            order = np.argsort(values, kind="stable")
            listed = [json.loads(s) for s in results["level_classes"].isel(cell).values]
            assert listed == [[names[c] for c in order[s : s + 5]] for s in starts]
            want = [np.mean(np.sort(values)[s : s + 5]) for s in starts]
            np.testing.assert_allclose(results["level_severity"].isel(cell).values, want)


def test_a_rerun_computes_nothing_and_round_trips(fmnist, tmp_path) -> None:
    spec, cache, first = fmnist
    again = oodsim.run(spec, cache=cache, progress=False)  # all cached: no cluster started
    assert store_counts(again)["computed"] == {}
    np.testing.assert_array_equal(again["score"].values, first["score"].values)
    path = save_results(first, tmp_path / "severity.zarr")
    xr.testing.assert_identical(open_results(path), first)


def test_a_new_kappa_computes_only_its_entries(fmnist, cluster_address) -> None:
    spec, cache, first = fmnist
    odin = DetectorSpec(name="odin", params={"temperature": 10.0, "epsilon": 0.001})
    more = attrs.evolve(
        spec,
        seeds=attrs.evolve(spec.seeds, n=1),
        detectors=(*spec.detectors, DetectorSpec(name="entropy"), odin),
    )
    results = oodsim.run(more, address=cluster_address, cache=cache, progress=False)
    counts = store_counts(results)
    assert counts["computed"] == {"severity_kappa": 9}  # ODIN on the ID split + 8 pool sources
    assert counts["loaded"]["outputs"] >= 8
    old = [d.label for d in spec.detectors]
    np.testing.assert_array_equal(
        results["score"].sel({"method": old}).values, first["score"].isel(seed=[0]).values
    )
    assert np.isfinite(results["score"].values).all()


def test_cli_run_of_the_shipped_spec(fmnist, tmp_path, capsys) -> None:
    _, cache, first = fmnist
    out = tmp_path / "sev.zarr"
    code = cli_main(["run", str(SPEC), "--cache", str(cache), "--out", str(out), "--quiet"])
    assert code == 0  # everything cached: no cluster is started
    printed = capsys.readouterr().out
    assert "auroc by severity level" in printed and "mahalanobis" in printed
    assert "; nothing computed. Results in " in printed
    shipped = [m for m in first["method"].values if m != "test_severity_margin"]
    np.testing.assert_array_equal(
        open_results(out)["score"].values, first["score"].sel({"method": shipped}).values
    )


def test_ranking_rule_on_level_5_stops_and_records_its_decision(fmnist, cluster_address) -> None:
    spec, cache, _ = fmnist
    pool = attrs.evolve(spec.datasets[0], ood=spec.datasets[0].ood[:3])  # fashion, digits, noise
    pinned = attrs.evolve(spec.models[0], seed=0)  # seed 0's CNN (cached) for every seed
    quick = attrs.evolve(
        spec,
        models=(pinned,),
        datasets=(pool,),
        detectors=("msp", "test_severity_inverted"),
        metrics=("auroc",),
        seeds=SeedsSpec(n=40),
        stopping=StoppingSpec(
            rule="ranking", metric="auroc", severity="5", min_seeds=2, batch_size=4
        ),
    )
    results = oodsim.run(quick, address=cluster_address, cache=cache, progress=False)
    decision = json.loads(results.attrs["stopping"])
    assert decision["stop"] and "msp is best" in decision["reason"], decision
    assert results.sizes["seed"] == decision["n_seeds"] < 40
    assert "checkpoint" not in store_counts(results)["computed"]  # the pinned model is reused
    level5 = results["score"].sel({"metric": "auroc", "severity": "5"})
    assert (level5.sel({"method": "msp"}) > level5.sel({"method": "test_severity_inverted"})).all()
    assert level5.sel({"method": "msp"}).std("seed") > 0  # the noise and the split are redrawn


def test_a_suite_of_datasets_shares_the_cached_outputs(fmnist, cluster_address) -> None:
    _, cache, first = fmnist
    suite = oodsim.load(SUITE)
    results = oodsim.run(suite, address=cluster_address, cache=cache, progress=False)
    assert store_counts(results)["computed"] == {}  # the same CNNs and sources as the spec above
    assert results["dataset"].values.tolist() == ["fashion_and_digits", "digits_and_noise"]
    assert results["score"].dims == ("seed", "method", "metric", "severity", "model", "dataset")
    assert results.sizes["severity"] == 11 and results.sizes["seed"] == 3
    assert np.isfinite(results["score"].values).all()
    assert (results["n_pool_classes"].sel(dataset="digits_and_noise") == 16).all()
    msp = results["score"].sel({"method": "msp", "metric": "auroc"})
    assert not np.allclose(
        msp.sel(dataset="fashion_and_digits"), msp.sel(dataset="digits_and_noise")
    )
    # the ID test set and the model are shared: the same ID accuracy for both datasets
    np.testing.assert_array_equal(
        results["id_accuracy"].sel(dataset="digits_and_noise").values,
        first["id_accuracy"].values,
    )


def test_a_non_finite_kappa_fails_its_seed(fmnist) -> None:
    spec, cache, _ = fmnist
    broken = attrs.evolve(
        spec, seeds=attrs.evolve(spec.seeds, n=1), detectors=("msp", "test_severity_nan")
    )
    results = oodsim.run(broken, cache=cache, progress=False)
    assert "test_severity_nan gave non-finite κ on seed 0" in str(results["failure"].values[0])
    assert np.isnan(results["score"].values).all()
    with pytest.raises(RunAborted, match="test_severity_nan"):
        oodsim.run(attrs.evolve(broken, on_failure="abort"), cache=cache, progress=False)


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
    folder = SourceSpec(
        kind="image_folder",
        name="pool",
        root=str(tmp_path / "pool"),
        wordnet_filter=True,
        shard_size=4,
    )
    spec = SeveritySpec(
        models=(ModelRef(name="timm:test_resnet", pretrained=False, image_size=32),),
        detectors=("msp", "max_logit"),
        datasets=PoolSpec(
            id=SourceSpec(kind="image_folder", name="val", root=str(tmp_path / "val")),
            ood=(folder, SourceSpec(kind="uniform_noise", n_samples=10)),
        ),
        n_est=6,
        n_test=4,
        n_levels=4,
        seeds=SeedsSpec(n=2),
    )
    cache = tmp_path / "cache"
    results = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    # the pretrained model's folder outputs are shared by both seeds (ID + 2 shards: 6 kept
    # classes, 4 per shard); the noise is drawn per seed
    assert store_counts(results)["computed"] == {"outputs": 3 + 2}
    assert results["score"].shape == (2, 2, 4, 4, 1)
    assert (results["n_pool_classes"] == 7).all() and (results["group_size"] == 3).all()
    assert np.isfinite(results["score"].values).all()
    assert not np.array_equal(results["score"].isel(seed=0), results["score"].isel(seed=1))
    names = {c for s in results["level_classes"].values.ravel() for c in json.loads(s)}
    assert names <= {f"pool/{w}" for w in kept} | {"uniform(0,255)"}
    (id_unit,) = id_units(spec, spec.datasets[0], spec.models[0], 0)
    entry = Store(cache).get(OUTPUTS, id_unit.part.key)
    columns = [imagenet1k_wnids().index(w) for w in id_wnids]
    assert sorted(set(entry.arrays["targets"].tolist())) == columns  # wnid folders → 1k index
    assert entry.arrays["logits"].shape == (12, 1000)


def test_trained_models_load_from_the_open_set_checkpoint(tmp_path) -> None:
    spec = small_digits(n_seeds=1)
    ref = ModelRef(name="trained", experiment=spec)
    store = Store(tmp_path / "cache")
    loaded = load_model(ref, 0, store)  # trained and stored: the open set checkpoint of seed 0
    assert store.has("checkpoint", checkpoint_key(ref, 0))
    assert loaded.preprocessing.kind == "conform"
    assert loaded.preprocessing.input_shape == (8, 8, 1)
    assert loaded.n_classes == spec.split.n_known and loaded.split is not None
    x = loaded.preprocessing.arrays(np.zeros((2, 28, 28, 3), np.uint8))  # conformed to 8x8x1
    logits, features = loaded.model.forward_with_features(x)
    assert logits.shape == (2, spec.split.n_known) and features.shape[0] == 2
