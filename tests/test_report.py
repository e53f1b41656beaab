"""Tests of oodsim.report: PNG plots and the Markdown / plain-text summaries."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
import xarray as xr

from oodsim.report import (
    format_summary_table,
    plot_distributions,
    plot_required_simulations,
    plot_running_mean,
    plot_win_probability,
    write_report,
)
from oodsim.stats import StopDecision, estimate

METRICS = ("auroc", "aupr_in", "aupr_out", "fpr95", "accuracy")


def make_results(
    n_seeds: int = 24,
    methods: tuple[str, ...] = ("msp", "odin", "energy"),
    severities: tuple[str, ...] = ("all",),
    oods: tuple[str, ...] | None = None,
    seed: int = 0,
) -> xr.Dataset:
    """A small results Dataset of the pipeline's shape, with one failed seed."""
    rng = np.random.default_rng(seed)
    shape = (n_seeds, len(methods), len(METRICS), len(severities)) + ((len(oods),) if oods else ())
    base = np.linspace(0.80, 0.83, len(methods)).reshape(1, -1, *([1] * (len(shape) - 2)))
    score = np.clip(base + rng.normal(0, 0.015, shape), 0, 1)
    score[:, :, METRICS.index("fpr95")] = 1 - score[:, :, METRICS.index("fpr95")]
    score[2] = np.nan
    dims = ("seed", "method", "metric", "severity") + (("ood",) if oods else ())
    coords = {
        "seed": np.arange(n_seeds),
        "method": list(methods),
        "metric": list(METRICS),
        "severity": list(severities),
        "class_split": ("seed", [f"split{i % 3}" for i in range(n_seeds)]),
    }
    if oods:
        coords["ood"] = list(oods)
    failed = np.zeros(n_seeds, bool)
    failed[2] = True
    return xr.Dataset({"score": (dims, score), "failed": ("seed", failed)}, coords=coords)


def assert_png(path: Path) -> None:
    assert path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = mpimg.imread(path)
    assert image.ndim == 3 and image.shape[0] > 50 and image.shape[1] > 50


@pytest.mark.parametrize("sweep", [False, True])
def test_plots_write_valid_pngs(tmp_path: Path, sweep: bool) -> None:
    if sweep:
        results = make_results(severities=("0", "5"), oods=("svhn", "noise"))
    else:
        results = make_results()
    results.attrs["stopping"] = StopDecision(True, "ci_width", "narrow", 0.004, 20).to_json()
    paths = [
        plot_distributions(results, tmp_path / "d.png", metric="fpr95" if sweep else None),
        plot_win_probability(results, tmp_path / "w.png", "auroc", k=5, n_draws=500),
        plot_required_simulations(results, tmp_path / "r.png", "auroc"),
        plot_running_mean(results, tmp_path / "sub" / "m.png", "auroc"),
    ]
    for path in paths:
        assert_png(path)


def test_distributions_survive_constant_and_single_seed_methods(tmp_path: Path) -> None:
    results = make_results(n_seeds=6)
    results["score"].loc[{"method": "msp"}] = 0.5  # zero variance: no KDE possible
    results["score"][1:, 1] = np.nan  # odin: a single finite seed
    assert_png(plot_distributions(results, tmp_path / "d.png", metric="auroc"))
    assert_png(plot_required_simulations(results, tmp_path / "r.png"))


def test_write_report_writes_plots_and_tables(tmp_path: Path) -> None:
    results = make_results(n_seeds=30)
    decision = StopDecision(True, "ranking", "energy is best", 0.002, 30)
    results.attrs["stopping"] = decision.to_json()
    summary = write_report(results, tmp_path / "report", n_draws=1000)
    assert summary == tmp_path / "report" / "summary.md"
    text = summary.read_text()
    for heading in (
        "## Estimates",
        "## Win probability",
        "## Required simulations",
        "## Sources of variance",
        "## Stopping decision",
    ):
        assert heading in text
    for name in ("distributions", "win_probability", "required_simulations", "running_mean"):
        assert_png(tmp_path / "report" / f"{name}.png")
        assert f"({name}.png)" in text
    assert "| method | auroc | aupr_in | aupr_out | fpr95 | accuracy | n |" in text
    assert "energy is best" in text and "| ranking | True | 30 |" in text
    assert "seeds: 30 (1 failed)" in text
    mean = estimate(results)["mean"].sel({"method": "odin", "metric": "auroc", "severity": "all"})
    assert f"| odin | {mean.item():.4f} [" in text


def test_write_report_with_sweep_dims_and_no_stopping(tmp_path: Path) -> None:
    results = make_results(severities=("0", "1", "2"), oods=("svhn", "noise"))
    summary = write_report(results, tmp_path, metric="aupr_out", n_draws=500)
    text = summary.read_text()
    assert "| severity | ood | method |" in text
    assert "*severity=2, ood=noise*" in text
    assert "No stopping rule recorded" in text
    assert_png(tmp_path / "distributions.png")


def test_format_summary_table() -> None:
    results = make_results()
    table = format_summary_table(results)
    lines = table.splitlines()
    assert "24 seeds" in lines[0] and "severity=all" in lines[0]
    assert lines[1].split() == ["method", *METRICS, "n"]
    est = estimate(results).sel({"severity": "all"})
    row = next(line for line in lines if line.startswith("energy"))
    e = est.sel({"method": "energy", "metric": "fpr95"})
    cell = f"{e['mean'].item():.3f} [{e['lower'].item():.3f}, {e['upper'].item():.3f}]"
    assert cell in row and row.rstrip().endswith("23")
    sweep = format_summary_table(make_results(severities=("0", "1"), oods=("svhn",)))
    assert sweep.splitlines()[1].split()[:3] == ["severity", "method", "auroc"]
    assert "ood=svhn" in sweep.splitlines()[0]
