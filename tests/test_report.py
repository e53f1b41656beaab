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
from tests.factories import METRICS, synthetic_results


def make_results(n_seeds: int = 24, **options) -> xr.Dataset:
    """Results of the protocols' own shape (see :func:`tests.factories.synthetic_results`)."""
    return synthetic_results(n_seeds, **options)


def assert_png(path: Path) -> None:
    assert path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = mpimg.imread(path)
    assert image.ndim == 3 and image.shape[0] > 50 and image.shape[1] > 50


@pytest.mark.parametrize("sweep", [False, True])
def test_plots_write_valid_pngs(tmp_path: Path, sweep: bool) -> None:
    results = make_results(levels=("0", "1"), models=("svhn", "noise")) if sweep else make_results()
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
    # Win probabilities: OOD metrics only, and the sampling is stated.
    assert "independent draws per method" in text
    assert "| method | auroc | aupr_in | aupr_out | fpr95 |\n" in text
    assert "accuracy: left out, the same for every detector" in text
    mean = estimate(results)["mean"].sel({"method": "odin", "metric": "auroc", "severity": "all"})
    assert f"| odin | {mean.item():.4f} [" in text


def test_write_report_with_sweep_dims_and_no_stopping(tmp_path: Path) -> None:
    results = make_results(levels=("0", "1", "2"), models=("svhn", "noise"))
    summary = write_report(results, tmp_path, metric="aupr_out", n_draws=500)
    text = summary.read_text()
    assert "| severity | model | method |" in text
    assert "*severity=2, model=noise*" in text
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
    sweep = format_summary_table(make_results(levels=("0", "1"), models=("svhn",)))
    assert sweep.splitlines()[1].split()[:3] == ["severity", "method", "auroc"]
    assert "model=svhn" in sweep.splitlines()[0]


def test_report_of_fewer_seeds_than_k_says_why_it_has_no_win_probability(tmp_path: Path) -> None:
    summary = write_report(make_results(n_seeds=3, failed=()), tmp_path, k=5)
    text = summary.read_text()
    assert "Not computed: the results have 3 seeds, fewer than k = 5." in text
    assert not (tmp_path / "win_probability.png").exists()
    assert_png(tmp_path / "distributions.png")


def test_win_probability_pairing_in_report_plot_and_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from oodsim.cli.main import _print_win_probabilities

    results = make_results(n_seeds=12)
    text = write_report(results, tmp_path, n_draws=500, pairing="paired").read_text()
    assert "paired draws, the same seeds for every method" in text
    assert_png(tmp_path / "win_probability.png")
    with pytest.raises(ValueError, match="not an OOD metric"):
        plot_win_probability(results, tmp_path / "w.png", "accuracy", n_draws=100)
    # accuracy asked for: the report still plots an OOD metric's win probability.
    write_report(results, tmp_path / "acc", metric="accuracy", n_draws=200)
    assert_png(tmp_path / "acc" / "win_probability.png")
    _print_win_probabilities(results, "accuracy")
    printed = capsys.readouterr().out
    assert "P(best mean auroc in a 5-seed comparison; independent draws per method):" in printed
