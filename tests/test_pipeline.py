"""End to end: spec → real Dask cluster → zarr store → xarray results, and reuse of the cache."""

from __future__ import annotations

import io
import re
import subprocess
from pathlib import Path

import attrs
import numpy as np
import pytest
import xarray as xr

import oodsim
from oodsim.results import store_counts
from oodsim.specs import DatasetSpec, SeedsSpec, SplitSpec
from tests.conftest import ROOT, dask_cli_cluster, small_digits


def test_digits_run_then_rerun_computes_nothing(
    cluster_address: str, cache: Path, tmp_path: Path
) -> None:
    spec = small_digits(4)
    first = oodsim.run(
        spec, address=cluster_address, cache=cache, out=tmp_path / "r.zarr", progress=False
    )
    assert dict(first.sizes) == {
        "seed": 4,
        "method": 1,
        "metric": 2,
        "severity": 1,
        "ood_class": 10,
    }
    assert list(first.severity.values) == ["all"]
    auroc = first.score.sel({"method": "msp", "metric": "auroc", "severity": "all"})
    assert float(auroc.mean()) > 0.75  # chance is 0.5
    accuracy = first.score.sel({"method": "msp", "metric": "accuracy", "severity": "all"})
    assert float(accuracy.min()) > 0.6  # chance is 1/6
    assert store_counts(first)["computed"] == {"checkpoint": 4, "outputs": 4}
    assert len(set(first.class_split.values)) > 1

    second = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    counts = store_counts(second)
    assert counts["computed"] == {}  # no training, no inference
    assert counts["loaded"] == {"outputs": 4}
    xr.testing.assert_identical(first.score, second.score)
    assert second.attrs["wall_seconds"] < first.attrs["wall_seconds"] / 3

    reopened = oodsim.open_results(tmp_path / "r.zarr")
    xr.testing.assert_identical(reopened, first)


def test_more_seeds_reuse_finished_ones(cluster_address: str, cache: Path) -> None:
    oodsim.run(small_digits(2), address=cluster_address, cache=cache, progress=False)
    grown = oodsim.run(small_digits(3), address=cluster_address, cache=cache, progress=False)
    assert store_counts(grown)["computed"] == {"checkpoint": 1, "outputs": 1}


def test_extra_ood_sets_add_an_ood_dimension(cluster_address: str, cache: Path) -> None:
    spec = small_digits(
        2,
        ood=(
            "held_out",
            "uniform_noise",
            "gaussian_noise",
            oodsim.specs.OODSetSpec(
                kind="dataset", dataset=DatasetSpec(name="fashion_mnist"), n_samples=300
            ),
        ),
    )
    results = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    assert list(results.ood.values) == [
        "held_out",
        "uniform_noise",
        "gaussian_noise",
        "fashion_mnist",
    ]
    assert np.isfinite(results.score.values).all()
    assert store_counts(results)["computed"] == {"checkpoint": 2, "outputs": 2, "ood_outputs": 6}
    # the same spec without the extra sets reuses checkpoints and split outputs
    base = oodsim.run(small_digits(2), address=cluster_address, cache=cache, progress=False)
    assert store_counts(base)["computed"] == {}


def test_pinned_and_fixed_class_splits(cluster_address: str, cache: Path) -> None:
    pinned = small_digits(3, seeds=SeedsSpec(n=3, pinned={"class_split": 7}))
    results = oodsim.run(pinned, address=cluster_address, cache=cache, progress=False)
    assert len(set(results.class_split.values)) == 1
    assert len(set(results.score.sel(metric="auroc").values.ravel())) == 3  # other streams vary

    lists = ((0, 1, 2, 3, 4, 5), (4, 5, 6, 7, 8, 9))
    fixed = small_digits(4, split=SplitSpec(n_known=6, known_classes=lists))
    results = oodsim.run(fixed, address=cluster_address, cache=cache, progress=False)
    assert list(results.class_split.values) == ["0-1-2-3-4-5", "4-5-6-7-8-9"] * 2


def test_same_seed_same_scores_across_worker_counts(tmp_path: Path) -> None:
    spec = small_digits(2)
    one = oodsim.run(spec, n_workers=1, cache=tmp_path / "a", progress=False)
    two = oodsim.run(spec, n_workers=2, cache=tmp_path / "b", progress=False)
    np.testing.assert_array_equal(one.score.values, two.score.values)


def test_fashion_mnist_simulation_accuracy_far_above_chance(
    cluster_address: str, cache: Path
) -> None:
    spec = oodsim.load_spec(ROOT / "specs" / "fashion_mnist.toml")
    spec = attrs.evolve(
        spec,
        dataset=attrs.evolve(spec.dataset, max_per_class=200),
        training=attrs.evolve(spec.training, max_epochs=5),
        seeds=SeedsSpec(n=2),
    )
    results = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    accuracy = results.score.sel({"method": "msp", "metric": "accuracy"}).values
    assert accuracy.min() > 0.5  # 6 known classes: chance is 1/6
    auroc = results.score.sel(metric="auroc").values
    assert np.all((auroc >= 0) & (auroc <= 1))  # MSP can fall below 0.5 on some class splits


def test_progress_reports_to_a_stream(cluster_address: str, cache: Path) -> None:
    stream = io.StringIO()
    oodsim.run(small_digits(2), address=cluster_address, cache=cache, progress=stream)
    assert "oodsim: 2/2 simulations (0 cached)" in stream.getvalue()
    # before any seed landed, a worker's progress note (a Dask event) said what it was doing
    opening, first = stream.getvalue().splitlines()[:2]
    assert opening.startswith("oodsim: digits (open_set; 2 simulations: 0 in the cache, 2 to")
    assert re.fullmatch(r"oodsim: 0/2 .* simulation [01]: training, epoch 1/6", first), first


def test_scheduler_and_worker_started_with_the_dask_cli(tmp_path: Path) -> None:
    with dask_cli_cluster(tmp_path, "--nworkers", "1") as (address, _):
        results = oodsim.run(
            small_digits(2), address=address, cache=tmp_path / "cache", progress=False
        )
    assert store_counts(results)["computed"]["checkpoint"] == 2


def test_unreachable_scheduler_fails_clearly(tmp_path: Path) -> None:
    from oodsim.engine import ClusterError

    with pytest.raises(ClusterError, match="no Dask scheduler answered at .*connection refused"):
        oodsim.run(
            small_digits(1), address="tcp://127.0.0.1:9", cache=tmp_path / "c", progress=False
        )


def test_cli_run_prints_table_and_writes_results(tmp_path: Path) -> None:
    spec_path = tmp_path / "tiny.toml"
    spec_path.write_text(
        (ROOT / "specs" / "digits.toml")
        .read_text()
        .replace("n = 50", "n = 2")
        .replace("max_epochs = 30", "max_epochs = 3")
    )
    out = tmp_path / "res.zarr"
    done = subprocess.run(
        [
            "oodsim",
            "run",
            str(spec_path),
            "--workers",
            "1",
            "--cache",
            str(tmp_path / "c"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "auroc" in done.stdout and "msp" in done.stdout
    assert str(out) in done.stdout
    assert oodsim.open_results(out).sizes["seed"] == 2
    listing = subprocess.run(
        ["oodsim", "cache", "ls", "--cache", str(tmp_path / "c")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "checkpoint" in listing and "outputs" in listing
