"""Win probabilities under both pairings, side by side, with bootstrap intervals over the seeds
(issue 20 part 3): the study's text reads either way, so oodsim reports both."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from oodsim.report.tables import fmt_probability, win_table
from oodsim.stats.win import (
    PAIRING_LABELS,
    PAIRINGS,
    win_probabilities,
    win_probability,
    win_probability_interval,
    win_probability_intervals,
)
from oodsim.stats.win_draws import bootstrap_wins
from tests.factories import synthetic_results

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- exact answers


def _shares(sums: np.ndarray) -> np.ndarray:
    """Win shares of rows of k-seed sums (draws × methods), ties split."""
    best = np.isclose(sums, sums.max(axis=1, keepdims=True), rtol=0, atol=1e-12)
    return (best / best.sum(axis=1, keepdims=True)).mean(axis=0)


def exact_paired(values: np.ndarray, k: int) -> np.ndarray:
    """Every k-subset of the seeds, the same one for every method."""
    subsets = np.array(list(itertools.combinations(range(len(values)), k)))
    return _shares(values[subsets].sum(axis=1))


def exact_independent(values: np.ndarray, k: int) -> np.ndarray:
    """Every combination of one k-subset per method (methods drawn apart)."""
    subsets = np.array(list(itertools.combinations(range(len(values)), k)))
    per_method = [values[subsets, j].sum(axis=1) for j in range(values.shape[1])]
    grids = np.meshgrid(*per_method, indexing="ij")
    return _shares(np.stack([g.ravel() for g in grids], axis=1))


def shared_seed_effect(n: int = 8, seed: int = 1) -> np.ndarray:
    """Three methods 0.004 apart, with noise of 0.005 per seed and method, under a seed effect
    ten times larger that lifts all methods alike (an easy or hard class split)."""
    rng = np.random.default_rng(seed)
    effect = rng.normal(0, 0.05, (n, 1))
    return 0.8 + effect + np.array([0.0, 0.004, 0.008]) + rng.normal(0, 0.005, (n, 3))


# ----------------------------------------------------------------------------- pairings


def test_both_pairings_equal_separate_single_pairing_calls() -> None:
    results = synthetic_results(12)
    wins = win_probability_intervals(results, "auroc", n_draws=2000, n_boot=50, boot_draws=200)
    assert wins["pairing"].values.tolist() == list(PAIRINGS)
    assert set(wins.data_vars) == {"win_probability", "lower", "upper"}
    assert wins["win_probability"].dims[0] == "pairing"
    for p in PAIRINGS:
        # a seed: every pairing starts from it, exactly as a separate call does
        alone = win_probabilities(results, "auroc", n_draws=2000, rng=0, pairing=p)
        xr.testing.assert_equal(wins["win_probability"].sel(pairing=p, drop=True), alone)
    # a Generator is shared by the pairings in turn, as two calls on it would be
    wins = win_probability_intervals(
        results, "auroc", n_draws=2000, rng=np.random.default_rng(3), n_boot=20, boot_draws=100
    )
    gen = np.random.default_rng(3)
    for p in PAIRINGS:
        alone = win_probabilities(results, "auroc", n_draws=2000, rng=gen, pairing=p)
        xr.testing.assert_equal(wins["win_probability"].sel(pairing=p, drop=True), alone)
    # one pairing on its own
    paired = win_probability_intervals(results, "auroc", pairings=("paired",), n_boot=20)
    assert paired["pairing"].values.tolist() == ["paired"]
    xr.testing.assert_equal(
        paired["win_probability"].sel(pairing="paired", drop=True),
        win_probabilities(results, "auroc", pairing="paired"),
    )


def test_a_shared_seed_effect_separates_the_pairings_and_paired_matches_enumeration() -> None:
    values = shared_seed_effect()
    k = 3
    exact = {"paired": exact_paired(values, k), "independent": exact_independent(values, k)}
    # The readings differ clearly: paired cancels the seed effect, so the best method wins
    # most draws (0.82) and the worst almost none (0.02); independent adds it to each mean and
    # spreads the wins (0.42, 0.27).
    assert exact["paired"][2] > 0.75 and exact["paired"][0] < 0.05
    assert exact["independent"][2] < 0.5 and exact["independent"][0] > 0.2
    for p in PAIRINGS:
        got = win_probability(values, k, 100_000, rng=0, pairing=p)
        se = np.sqrt(exact[p] * (1 - exact[p]) / 100_000)
        assert np.all(np.abs(got - exact[p]) <= 4.5 * se + 1e-12), (p, got, exact[p])
    # both at once, through the results layout
    results = synthetic_results(8, failed=())
    results["score"].loc[{"metric": "auroc", "severity": "all"}] = values
    wins = win_probability_intervals(results, "auroc", k=k, n_draws=100_000, n_boot=50)
    for p in PAIRINGS:
        got = wins["win_probability"].sel(pairing=p).values
        np.testing.assert_allclose(got, exact[p], atol=0.01)


def test_the_batched_bootstrap_kernel_draws_the_right_pools() -> None:
    # Resamples that are permutations of the pool hold the same seeds: every replicate's win
    # probability is the exact one, whichever pairing (checks the (pool, method) indexing).
    values = shared_seed_effect(n=7, seed=1)
    k, n_boot, draws = 3, 200, 1000
    rng = np.random.default_rng(5)
    rows = np.argsort(rng.random((n_boot, len(values))), axis=1)
    for p, exact in (("paired", exact_paired), ("independent", exact_independent)):
        reps = bootstrap_wins(values, rows, k, draws, False, rng, True, p)
        assert reps.shape == (n_boot, 3)
        np.testing.assert_allclose(reps.sum(axis=1), 1.0)
        np.testing.assert_allclose(reps.mean(axis=0), exact(values, k), atol=0.01)
    # lower is better: the same as higher on the negated values
    reps = bootstrap_wins(-values, rows, k, draws, False, np.random.default_rng(5), False, "paired")
    np.testing.assert_allclose(reps.mean(axis=0), exact_paired(values, k), atol=0.01)


# ----------------------------------------------------------------------------- intervals


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_bootstrap_interval_holds_the_estimate_and_narrows_with_more_seeds(pairing: str) -> None:
    rng = np.random.default_rng(11)

    def pool(n: int) -> np.ndarray:
        effect = rng.normal(0, 0.02, (n, 1))
        return 0.8 + effect + np.array([0.0, 0.005, 0.01]) + rng.normal(0, 0.01, (n, 3))

    widths = []
    for n in (12, 120):
        values = pool(n)
        p, lower, upper = win_probability_interval(
            values, n_draws=4000, n_boot=300, boot_draws=1000, pairing=pairing
        )
        np.testing.assert_array_equal(p, win_probability(values, n_draws=4000, pairing=pairing))
        assert np.all((lower >= 0) & (lower <= p) & (p <= upper) & (upper <= 1)), (p, lower, upper)
        widths.append(float((upper - lower).mean()))
    assert widths[1] < 0.7 * widths[0], widths


def test_interval_estimate_is_win_probability_and_failed_seeds_are_skipped() -> None:
    values = shared_seed_effect(n=20, seed=2)
    p, lower, upper = win_probability_interval(values, n_boot=100, boot_draws=500)
    np.testing.assert_array_equal(p, win_probability(values))
    with_nan = values.copy()
    with_nan[[0, 5], 1] = np.nan  # two failed seeds of method 1
    for pairing in PAIRINGS:
        p, lower, upper = win_probability_interval(
            with_nan, n_boot=100, boot_draws=500, pairing=pairing
        )
        np.testing.assert_array_equal(p, win_probability(with_nan, pairing=pairing))
        assert np.all(np.isfinite(lower) & np.isfinite(upper) & (lower <= upper))
    with pytest.raises(ValueError, match="n_boot"):
        win_probability_interval(values, n_boot=0)
    with pytest.raises(ValueError, match="confidence"):
        win_probability_interval(values, confidence=1.5)


def test_seeded_default_is_reproducible() -> None:
    results = synthetic_results(10)
    first = win_probability_intervals(results, None, n_draws=1000, n_boot=40, boot_draws=200)
    again = win_probability_intervals(results, None, n_draws=1000, n_boot=40, boot_draws=200)
    xr.testing.assert_identical(first, again)
    other = win_probability_intervals(results, None, n_draws=1000, rng=1, n_boot=40, boot_draws=200)
    assert not first["lower"].equals(other["lower"])
    values = shared_seed_effect(n=10)
    np.testing.assert_array_equal(win_probability(values), win_probability(values))
    xr.testing.assert_identical(win_probabilities(results), win_probabilities(results))
    assert first.attrs == {
        "k": 5,
        "n_draws": 1000,
        "replace": False,
        "n_boot": 40,
        "boot_draws": 200,
        "confidence": 0.95,
        "interval": "bootstrap percentile over the seed pool",
    }


def test_layout_over_cells_and_metrics_and_impossible_cells() -> None:
    results = synthetic_results(9, levels=("0", "1"), models=("a", "b"))
    wins = win_probability_intervals(results, None, n_draws=500, n_boot=30, boot_draws=100)
    assert wins["win_probability"].dims == ("pairing", "method", "metric", "severity", "model")
    for name in ("win_probability", "lower", "upper"):
        assert wins[name].dims == wins["win_probability"].dims
    np.testing.assert_allclose(wins["win_probability"].sum("method"), 1.0)
    assert bool((wins["lower"] <= wins["upper"]).all())
    few = synthetic_results(4, failed=())  # fewer than k = 5 seeds: no draw possible
    empty = win_probability_intervals(few, "auroc", n_draws=100, n_boot=10)
    assert bool(empty["win_probability"].isnull().all() & empty["lower"].isnull().all())
    with pytest.raises(ValueError, match="pairing must be"):
        win_probability_intervals(results, "auroc", pairings=("both",))
    with pytest.raises(ValueError, match="distinct"):
        win_probability_intervals(results, "auroc", pairings=("paired", "paired"))


def test_every_cell_at_the_findings_scale() -> None:
    """50 seeds x 12 methods x 4 OOD metrics, both pairings with intervals: every cell filled,
    each estimate a probability inside its interval (speed: benchmarks/win.py, not a test)."""
    from tests.test_report_plots import TWELVE

    results = synthetic_results(50, methods=TWELVE)
    wins = win_probability_intervals(results, ["auroc", "aupr_in", "aupr_out", "fpr95"])
    assert wins["win_probability"].sizes == {"pairing": 2, "method": 12, "metric": 4}
    p = wins["win_probability"]
    assert np.isfinite(p).all() and ((p >= 0) & (p <= 1)).all()
    np.testing.assert_allclose(p.sum("method"), 1.0, atol=1e-9)
    assert (wins["lower"] <= wins["upper"]).all()


# ----------------------------------------------------------------------------- words


def test_labels_say_what_is_drawn_not_whose_reading_it_is() -> None:
    assert set(PAIRING_LABELS) == set(PAIRINGS)
    for name, label in PAIRING_LABELS.items():
        assert label.startswith(name) and "study" not in label
    win_source = (ROOT / "oodsim" / "stats" / "win.py").read_text()
    assert "the study's reading" not in win_source


def test_tables_never_drop_a_small_probability() -> None:
    assert fmt_probability(0.0004) == "<0.001"
    assert fmt_probability(0.0) == "0.000" and fmt_probability(0.2164) == "0.216"
    assert fmt_probability(float("nan")) == "–"
    results = synthetic_results(12)
    table = win_table(results, 5, 500, 0, markdown=False, metric="auroc")
    lines = table.splitlines()
    assert lines[0].split() == ["method", "independent", "paired"]
    assert [line.split()[0] for line in lines[2:]] == ["msp", "odin", "energy"]
