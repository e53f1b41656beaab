"""Tests of oodsim.stats against real oracles: scipy.stats and exact enumeration."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
import xarray as xr
from scipy import stats as sps

from oodsim.errors import UnknownNameError
from oodsim.report import write_report
from oodsim.stats import (
    StopDecision,
    confidence_sequence,
    decide,
    decide_ci_width,
    decide_fixed,
    decide_ranking,
    estimate,
    higher_is_better,
    one_way_anova,
    required_simulations,
    required_simulations_table,
    running_interval,
    score_matrix,
    sequential_p_values,
    variance_components_table,
    win_probabilities,
    win_probability,
)
from tests.factories import synthetic_results


def make_results(n_seeds: int = 40, **options) -> xr.Dataset:
    """Results of the protocols' own shape (see :func:`tests.factories.synthetic_results`)."""
    return synthetic_results(n_seeds, **options)


# ----------------------------------------------------------------------------- estimates


def test_estimate_t_interval_matches_scipy() -> None:
    """Unbounded (value_range=None), the interval is scipy's symmetric Student-t interval."""
    results = make_results(levels=("0", "1"), models=("svhn", "noise"))
    est = estimate(results, value_range=None)
    assert set(est.data_vars) >= {"mean", "std", "sem", "lower", "upper", "n", "n_excluded"}
    assert "seed" not in est.dims and "class_split" not in est.coords
    assert set(est["mean"].dims) == {"method", "metric", "severity", "model"}
    cell = {"method": "odin", "metric": "auroc", "severity": "1", "model": "noise"}
    values = results["score"].sel(cell).values
    finite = values[np.isfinite(values)]
    lo, hi = sps.t.interval(0.95, len(finite) - 1, loc=finite.mean(), scale=sps.sem(finite))
    got = est.sel(cell)
    assert got["n"].item() == len(finite) == 39
    assert got["n_excluded"].item() == 1
    np.testing.assert_allclose(got["mean"].item(), finite.mean(), rtol=1e-12)
    np.testing.assert_allclose(got["std"].item(), finite.std(ddof=1), rtol=1e-12)
    np.testing.assert_allclose([got["lower"].item(), got["upper"].item()], [lo, hi], rtol=1e-12)
    est90 = estimate(results["score"], confidence=0.9, value_range=None).sel(cell)
    lo90, _ = sps.t.interval(0.9, len(finite) - 1, loc=finite.mean(), scale=sps.sem(finite))
    np.testing.assert_allclose(est90["lower"].item(), lo90, rtol=1e-12)


def _logit_t(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """The delta-method t interval of a [0, 1] mean on the logit scale, from scipy parts."""
    m, se = values.mean(), sps.sem(values)
    y, se_y = np.log(m / (1 - m)), se / (m * (1 - m))
    lo, hi = sps.t.interval(confidence, len(values) - 1, loc=y, scale=se_y)
    return 1 / (1 + np.exp(-lo)), 1 / (1 + np.exp(-hi))


def test_estimate_bounded_metrics_stay_in_unit_interval_with_four_seeds() -> None:
    """Scores near 1 (AUROC, AUPR) and near 0 (FPR95): the plain t interval leaves [0, 1] with
    4 seeds, the default one is the logit-scale interval and stays inside."""
    results = make_results(n_seeds=4, failed=())
    rng = np.random.default_rng(5)
    score = results["score"]
    near_one = 1 - rng.uniform(0.0, 0.02, score.shape)
    near_one[0] = 1.0  # one seed with a perfect score
    results["score"] = score.copy(data=near_one)
    results["score"].loc[{"metric": "fpr95"}] = 1 - results["score"].sel(metric="fpr95")
    plain = estimate(results, value_range=None)
    assert (plain["upper"] > 1).any() and (plain["lower"] < 0).any()
    est = estimate(results, method="t")
    assert est.attrs["interval"] == "t (logit scale)"
    default = estimate(results)  # a seed on the bound: the two-part interval, also inside
    assert default.attrs["interval"] == "bound-aware"
    for metric in ("auroc", "aupr_in", "aupr_out", "fpr95", "accuracy"):
        for bound in ("lower", "upper"):
            for e in (est, default):
                values = e[bound].sel(metric=metric).values
                assert np.isfinite(values).all() and ((values >= 0) & (values <= 1)).all(), metric
    cell = {"method": "odin", "metric": "auroc"}
    got = est.sel(cell)
    expected = _logit_t(results["score"].sel({**cell, "severity": "all"}).values)
    np.testing.assert_allclose([got["lower"].item(), got["upper"].item()], expected, rtol=1e-10)
    boot = estimate(results, method="bootstrap", n_boot=500, rng=0)
    assert float(boot["lower"].min()) >= 0 and float(boot["upper"].max()) <= 1


def test_bounded_interval_edge_cases() -> None:
    score = xr.DataArray(
        [[1.0, 0.0, 0.5], [1.0, 0.0, 0.7], [1.0, 0.0, 0.6]],
        dims=("seed", "method"),
        coords={"method": ["perfect", "zero", "mid"], "metric": "auroc"},
    )
    est = estimate(score)  # one metric selected: its range comes from the scalar coordinate
    # every value on a bound: an interval of positive width that holds the bound (the logit-t
    # interval of method="t" is the point [1, 1] / [0, 0]; tests/test_bounded_intervals.py)
    assert est["upper"].values.tolist()[:2] == [1.0, est["upper"].values[1]]
    assert est["lower"].values.tolist()[:2] == [est["lower"].values[0], 0.0]
    assert est["lower"].values[0] < 1.0 and est["upper"].values[1] > 0.0
    point = estimate(score, method="t")
    assert point["lower"].values.tolist()[:2] == point["upper"].values.tolist()[:2] == [1.0, 0.0]
    assert 0 < est["lower"].values[2] < 0.6 < est["upper"].values[2] < 1
    np.testing.assert_allclose(
        estimate(score, value_range=(0.0, 1.0))["upper"], est["upper"], rtol=1e-12
    )
    with pytest.raises(ValueError, match="outside the metric's range"):
        estimate(score + 0.5)
    unbounded = estimate(score.drop_vars("metric"))  # no metric known: symmetric t
    assert unbounded.attrs["interval"] == "t"


def test_bounded_interval_coverage_near_the_bound() -> None:
    """Monte Carlo coverage of the 95 % interval for Beta scores with mean 0.99 and 4 seeds:
    the plain t interval undercovers (skewed means), the logit-scale one is close to 95 %."""
    rng = np.random.default_rng(11)
    truth, reps = 0.99, 4000
    values = rng.beta(truth * 100, (1 - truth) * 100, size=(reps, 4))
    score = xr.DataArray(values.T, dims=("seed", "rep"), coords={"metric": "auroc"})
    covered = {}
    for name, value_range in (("plain", None), ("bounded", "metric")):
        est = estimate(score, value_range=value_range)
        covered[name] = float(((est["lower"] <= truth) & (truth <= est["upper"])).mean())
    assert covered["plain"] < 0.90
    assert 0.92 <= covered["bounded"] <= 0.97


def test_estimate_masks_failed_flag_and_handles_tiny_cells() -> None:
    results = make_results(n_seeds=6, failed=())
    results["failure"][:] = ["", "diverged", "diverged", "diverged", "diverged", "diverged"]
    est = estimate(results)
    assert (est["n"] == 1).all() and (est["n_excluded"] == 5).all()
    assert np.isfinite(est["mean"]).all() and np.isnan(est["lower"]).all()


def test_estimate_bootstrap_close_to_t_and_reproducible() -> None:
    rng = np.random.default_rng(1)
    score = xr.DataArray(
        rng.normal(0.8, 0.02, (400, 4)), dims=("seed", "method"), coords={"method": list("abcd")}
    )
    score[5, 2] = np.nan
    boot = estimate(score, method="bootstrap", n_boot=4000, rng=7)
    t = estimate(score)
    width = (t["upper"] - t["lower"]).values
    np.testing.assert_allclose(boot["lower"], t["lower"], atol=0.1 * width.max())
    np.testing.assert_allclose(boot["upper"], t["upper"], atol=0.1 * width.max())
    again = estimate(score, method="bootstrap", n_boot=4000, rng=7)
    xr.testing.assert_identical(boot, again)
    assert boot["n"].values.tolist() == [400, 400, 399, 400]
    with pytest.raises(ValueError, match="method"):
        estimate(score, method="jackknife")  # type: ignore[arg-type]


def test_running_interval_last_point_matches_estimate() -> None:
    v = np.random.default_rng(2).normal(0.8, 0.05, 30)
    v[4] = np.nan
    n, mean, lower, upper = running_interval(v)
    assert n[-1] == 29 and np.isnan(lower[0])
    finite = v[np.isfinite(v)]
    lo, hi = sps.t.interval(0.95, 28, loc=finite.mean(), scale=sps.sem(finite))
    np.testing.assert_allclose([mean[-1], lower[-1], upper[-1]], [finite.mean(), lo, hi])
    score = xr.DataArray(v, dims="seed", coords={"metric": "auroc"})
    bounded = estimate(score)
    _, _, blo, bhi = running_interval(v, value_range=(0.0, 1.0))
    np.testing.assert_allclose([blo[-1], bhi[-1]], [bounded["lower"], bounded["upper"]])


# ----------------------------------------------------------------------------- win probability


def _exact_win(values: np.ndarray, subsets: list[tuple[int, ...]]) -> np.ndarray:
    """Paired win shares by enumeration: every subset equally likely, ties split."""
    wins = np.zeros(values.shape[1])
    for subset in subsets:
        means = values[list(subset)].mean(axis=0)
        best = np.isclose(means, means.max(), rtol=0, atol=1e-12)
        wins += best / best.sum()
    return wins / len(subsets)


def _exact_independent(values: np.ndarray, k: int, replace: bool = False) -> np.ndarray:
    """Independent win shares by enumeration: every combination of one k-draw per method
    (k-subsets of its own finite seeds, or k-tuples with replacement) equally likely, ties
    split."""
    per_method = []
    for column in values.T:
        pool = column[np.isfinite(column)]
        draws = (
            itertools.product(range(len(pool)), repeat=k)
            if replace
            else itertools.combinations(range(len(pool)), k)
        )
        per_method.append(np.array([pool[list(d)].mean() for d in draws]))
    grids = np.meshgrid(*per_method, indexing="ij")
    means = np.stack([g.ravel() for g in grids], axis=1)  # every combination of draws
    best = np.isclose(means, means.max(axis=1, keepdims=True), rtol=0, atol=1e-12)
    return (best / best.sum(axis=1, keepdims=True)).mean(axis=0)


def _exact(values: np.ndarray, k: int, pairing: str, replace: bool = False) -> np.ndarray:
    if pairing == "independent":
        return _exact_independent(values, k, replace)
    pool = values[np.isfinite(values).all(axis=1)]
    n = len(pool)
    draws = (
        itertools.product(range(n), repeat=k) if replace else itertools.combinations(range(n), k)
    )
    return _exact_win(pool, list(draws))


def _pool(n_seeds: int = 8) -> np.ndarray:
    """(n_seeds, 3) AUROCs of the result fixture (one failed seed, a shared class-split
    effect), plus one failure of odin alone, so the methods' pools differ."""
    values, _ = score_matrix(make_results(n_seeds, failed=(2,), seed=3), "auroc")
    values[5, 1] = np.nan
    return values


@pytest.mark.parametrize(
    ("pairing", "replace", "k"),
    [
        ("independent", False, 3),
        ("paired", False, 3),
        ("independent", True, 2),
        ("paired", True, 3),
    ],
)
def test_win_probability_matches_exact_enumeration(pairing: str, replace: bool, k: int) -> None:
    values = _pool()  # 7 finite seeds per method (6 for odin, 6 complete)
    exact = _exact(values, k, pairing, replace)
    n_draws = 200_000
    got = win_probability(values, k, n_draws, replace, rng=0, pairing=pairing)
    # Each share is a mean of n_draws i.i.d. draws in [0, 1]: its standard error is at most
    # sqrt(p(1-p)/n_draws) (ties make it smaller), so 4.5 SE is a < 1e-5 false-alarm bound.
    se = np.sqrt(exact * (1 - exact) / n_draws)
    assert np.all(np.abs(got - exact) <= 4.5 * se + 1e-12), (got, exact)
    np.testing.assert_allclose(got, exact, atol=0.01)
    assert got.sum() == pytest.approx(1.0)
    assert exact.min() > 0.01 or pairing == "paired"  # a non-trivial comparison


def test_independent_and_paired_draws_differ_with_a_shared_seed_effect() -> None:
    # The fixture shifts whole seeds (class split): paired draws cancel the shift, so the
    # baseline msp (0.015 below odin on every seed) rarely wins; independent draws do not.
    values = _pool()
    paired, independent = _exact(values, 3, "paired"), _exact(values, 3, "independent")
    assert independent[0] > paired[0] + 0.02, (paired, independent)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the failed seed's all-NaN row
        no_shift = values - np.nanmean(values[:, [0, 2]], axis=1, keepdims=True)  # no seed effect
    wins = [_exact(no_shift, 3, p)[0] for p in ("paired", "independent")]
    assert abs(wins[0] - wins[1]) < abs(paired[0] - independent[0])


@pytest.mark.parametrize("pairing", ["independent", "paired"])
def test_win_probability_splits_ties_exactly(pairing: str) -> None:
    rng = np.random.default_rng(4)
    a = rng.normal(0.8, 0.03, 8)
    values = np.column_stack([a, a, a - 0.5])  # two identical methods, one always worse
    got = win_probability(values, k=3, n_draws=20_000, rng=0, pairing=pairing)
    if pairing == "paired":
        np.testing.assert_allclose(got, [0.5, 0.5, 0])
    else:
        np.testing.assert_allclose(got, [0.5, 0.5, 0], atol=0.02)
    constant = np.full((10, 4), 0.7)
    got = win_probability(constant, k=5, n_draws=500, rng=0, pairing=pairing)
    np.testing.assert_allclose(got, 0.25)  # every draw is a four-way tie
    # Enumeration with a partial tie: method 1 equals method 0 on half of the seeds.
    values = rng.normal(0.8, 0.03, (7, 3))
    values[:4, 1] = values[:4, 0]
    got = win_probability(values, k=2, n_draws=200_000, rng=1, pairing=pairing)
    np.testing.assert_allclose(got, _exact(values, 2, pairing), atol=0.01)


def test_win_probability_monte_carlo_error_shrinks_like_sqrt_draws() -> None:
    values = np.random.default_rng(5).normal(0.8, 0.03, (8, 3))
    exact = _exact(values, 3, "independent")
    rng = np.random.default_rng(6)

    def rms_error(n_draws: int) -> float:
        runs = np.array([win_probability(values, 3, n_draws, rng=rng) for _ in range(60)])
        return float(np.sqrt(((runs - exact) ** 2).mean()))

    ratio = rms_error(16 * 400) / rms_error(400)
    assert 0.17 < ratio < 0.36, ratio  # 1/sqrt(16) = 0.25


def test_win_probability_direction_nan_seeds_and_errors() -> None:
    values = np.random.default_rng(7).normal(0.5, 0.1, (30, 4))
    for pairing in ("independent", "paired"):
        low = win_probability(values, higher_is_better=False, rng=1, pairing=pairing)
        np.testing.assert_allclose(low, win_probability(-values, rng=1, pairing=pairing))
    with_nan = np.vstack([values, np.full((1, 4), np.nan)])  # a failed seed: no-op
    np.testing.assert_allclose(win_probability(with_nan, rng=2), win_probability(values, rng=2))
    with_nan[0, 2] = np.nan  # paired drops the seed for every method ...
    np.testing.assert_allclose(
        win_probability(with_nan, rng=2, pairing="paired"),
        win_probability(values[1:], rng=2, pairing="paired"),
    )
    # ... independent only for method 2: the others keep drawing from all 30 seeds.
    got = win_probability(with_nan, n_draws=200_000, rng=2, pairing="independent")
    np.testing.assert_allclose(got, win_probability(values, n_draws=200_000, rng=3), atol=0.01)
    for pairing in ("independent", "paired"):
        with pytest.raises(ValueError, match="seeds"):
            win_probability(values[:4], k=5, pairing=pairing)
        got = win_probability(values[:4], k=5, replace=True, n_draws=50, rng=0, pairing=pairing)
        assert got.sum() == pytest.approx(1)
    with pytest.raises(ValueError, match="pairing must be"):
        win_probability(values, pairing="bootstrap")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pairing must be"):
        win_probabilities(make_results(), "auroc", pairing="bootstrap")  # type: ignore[arg-type]
    both = win_probabilities(make_results(), "auroc", n_draws=500, rng=3, pairing="both")
    assert both.dims[0] == "pairing" and both.attrs["pairing"] == "both"
    for pairing in ("independent", "paired"):
        alone = win_probabilities(make_results(), "auroc", n_draws=500, rng=3, pairing=pairing)
        xr.testing.assert_equal(both.sel(pairing=pairing, drop=True), alone)


def test_win_probability_argpartition_path_for_large_k() -> None:
    # k = 18 of 20 seeds (k² > 16 n) draws by partial sorting instead of Floyd's algorithm;
    # an 18-subset is the complement of a 2-subset, which keeps the enumeration small.
    values = np.random.default_rng(12).normal(0.8, 0.03, (20, 3))
    n, k = 20, 18
    pairs = itertools.combinations(range(n), n - k)
    exact = _exact_win(values, [tuple(sorted(set(range(n)) - set(c))) for c in pairs])
    got = win_probability(values, k, 100_000, rng=0, pairing="paired")
    np.testing.assert_allclose(got, exact, atol=0.01)
    values[0, 1] = np.nan  # independent: method 1 draws 18 of its 19 seeds
    exact = _exact_independent(values, k)
    got = win_probability(values, k, 100_000, rng=0, pairing="independent")
    np.testing.assert_allclose(got, exact, atol=0.01)


def test_win_probability_at_the_study_scale() -> None:
    """10 methods x 1,000 seeds x 10,000 draws (its speed is measured in benchmarks/, not here)."""
    values = np.random.default_rng(8).normal(0.8, 0.03, (1000, 10))
    for pairing in ("independent", "paired"):
        p = win_probability(values, k=5, n_draws=10_000, rng=0, pairing=pairing)
        assert p.shape == (10,) and p.sum() == pytest.approx(1.0)


def test_win_probabilities_over_results() -> None:
    results = make_results(levels=("0", "1"), models=("svhn", "noise"))
    wp = win_probabilities(results, "auroc", k=5, n_draws=2000, rng=0)
    assert set(wp.dims) == {"method", "severity", "model"}
    assert wp.attrs == {"k": 5, "n_draws": 2000, "replace": False, "pairing": "independent"}
    paired = win_probabilities(results, "auroc", k=5, n_draws=2000, rng=0, pairing="paired")
    assert paired.attrs["pairing"] == "paired"
    cell = {"severity": "0", "model": "svhn"}
    v = results["score"].sel(metric="auroc", **cell).transpose("seed", "method").values
    np.testing.assert_allclose(
        paired.sel(cell), win_probability(v, 5, 2000, rng=1, pairing="paired"), atol=0.05
    )
    np.testing.assert_allclose(wp.sum("method"), 1.0)
    cell = {"severity": "1", "model": "svhn"}
    v = results["score"].sel(metric="auroc", **cell).transpose("seed", "method").values
    assert wp.sel(cell)["method"].values.tolist() == ["msp", "odin", "energy"]
    assert wp.sel(cell).values.argmax() == np.nanmean(v, axis=0).argmax()
    every = win_probabilities(results, None, n_draws=2000, rng=0)
    assert "metric" in every.dims
    fpr = every.sel(metric="fpr95", severity="0", model="svhn")
    mean_fpr = results["score"].sel(metric="fpr95", severity="0", model="svhn").mean("seed")
    assert fpr.values.argmax() == mean_fpr.values.argmin()  # lower FPR wins
    assert not higher_is_better("fpr95") and higher_is_better("auroc")


# ----------------------------------------------------------------------------- required sims


def _scipy_first(a: np.ndarray, b: np.ndarray, test, alpha: float = 0.05) -> int | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in range(2, len(a) + 1):
            if test(a[:n], b[:n]).pvalue < alpha:
                return n
    return None


def test_required_simulations_welch_and_paired_match_scipy() -> None:
    rng = np.random.default_rng(9)
    welch = lambda a, b: sps.ttest_ind(a, b, equal_var=False)  # noqa: E731
    for trial in range(20):
        n = 60
        shared = rng.normal(0, 0.02, n)
        a = 0.8 + shared + rng.normal(0, rng.uniform(0.005, 0.02), n)
        b = 0.8 + rng.uniform(0, 0.01) + shared + rng.normal(0, rng.uniform(0.005, 0.02), n)
        if trial % 5 == 0:
            b[:3] = b[0]
        for name, oracle in (("welch", welch), ("paired", sps.ttest_rel)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = np.array([oracle(a[:k], b[:k]).pvalue for k in range(2, n + 1)])
            np.testing.assert_allclose(sequential_p_values(a, b, name)[1:], ref, rtol=1e-7)
            for alpha in (0.05, 0.01):
                hits = np.flatnonzero(ref < alpha)
                expected = int(hits[0]) + 2 if len(hits) else None
                assert required_simulations(a, b, alpha, name) == expected


@pytest.mark.parametrize("test", ["welch", "paired", "wilcoxon"])
def test_failed_seeds_are_dropped_for_both_methods(test: str) -> None:
    # A seed where either method failed is dropped for both, for Welch too: "the first n
    # seeds" are the same n seeds of both methods.
    values, _ = score_matrix(make_results(40, failed=(3,)), "auroc")
    a, b = values[:, 0].copy(), values[:, 2].copy()
    a[7], b[12] = np.nan, np.nan  # one method fails alone, once each
    keep = np.isfinite(a) & np.isfinite(b)
    assert keep.sum() == 37
    np.testing.assert_array_equal(
        sequential_p_values(a, b, test), sequential_p_values(a[keep], b[keep], test)
    )
    assert required_simulations(a, b, test=test) == required_simulations(
        a[keep], b[keep], test=test
    )
    if test == "welch":  # scipy's Welch test on the same first n complete seeds
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = [
                sps.ttest_ind(a[keep][:n], b[keep][:n], equal_var=False).pvalue
                for n in range(2, 38)
            ]
        np.testing.assert_allclose(sequential_p_values(a, b, test)[1:], ref, rtol=1e-7)
    with pytest.raises(ValueError, match="same seeds"):
        required_simulations(a, b[:-1], test=test)


def test_required_simulations_table_uses_the_seeds_both_methods_have() -> None:
    results = make_results(30)
    results["score"].loc[{"seed": 105, "method": "odin"}] = np.nan  # odin alone fails
    table = required_simulations_table(results, "auroc", alpha=0.2)
    values, names = score_matrix(results, "auroc")
    for i, j in itertools.combinations(range(3), 2):
        keep = np.isfinite(values[:, i]) & np.isfinite(values[:, j])
        n = required_simulations(values[keep, i], values[keep, j], alpha=0.2)
        got = table.sel({"method": names[i], "versus": names[j]}).item()
        assert (np.isnan(got) and n is None) or got == n


def test_required_simulations_wilcoxon_matches_scipy() -> None:
    rng = np.random.default_rng(10)
    for _ in range(5):
        a = rng.normal(0.8, 0.02, 40)
        b = a + rng.normal(0.006, 0.01, 40)
        assert required_simulations(a, b, test="wilcoxon") == _scipy_first(a, b, sps.wilcoxon)


def test_required_simulations_degenerate_and_never() -> None:
    same = np.full(10, 0.9)
    assert required_simulations(same, same.copy()) is None  # constant and equal
    assert required_simulations(same, same.copy(), test="paired") is None
    assert required_simulations(same, same.copy(), test="wilcoxon") is None
    other = np.full(10, 0.8)
    assert required_simulations(same, other) == 2  # constant and different: p = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert sps.ttest_ind(same[:2], other[:2], equal_var=False).pvalue == 0.0  # as scipy
    assert required_simulations(same, same + 0.1, test="paired") == 2
    a = np.random.default_rng(11).normal(0.8, 0.02, 50)
    assert required_simulations(a, a.copy(), test="welch") is None
    assert np.isnan(sequential_p_values(a, a.copy(), "paired")).all()
    with pytest.raises(ValueError, match="test must be"):
        required_simulations(a, a + 0.05, test="mann-whitney")  # type: ignore[arg-type]


def test_required_simulations_table_is_symmetric_and_matches() -> None:
    results = make_results(levels=("0", "1"))
    table = required_simulations_table(results, "auroc")
    assert table.dims == ("severity", "model", "method", "versus")
    values = table.sel(severity="0").squeeze("model").values
    assert np.isnan(np.diag(values)).all()
    np.testing.assert_array_equal(values, values.T)
    s = results["score"].sel(metric="auroc", severity="0").squeeze("model")
    direct = required_simulations(s.sel({"method": "msp"}), s.sel({"method": "energy"}))
    assert direct is not None
    cell = {"severity": "0", "method": "msp", "versus": "energy"}
    assert table.sel(cell).squeeze("model").item() == direct


# ----------------------------------------------------------------------------- stopping rules


def test_stop_decision_json_round_trip() -> None:
    d = StopDecision(True, "ranking", "odin best", float("nan"), 30)
    text = d.to_json()
    assert "NaN" not in text
    back = StopDecision.from_json(text)
    assert back.stop and back.n_seeds == 30 and math.isnan(back.statistic)
    assert StopDecision.from_json(StopDecision(False, "fixed", "x", 3, 3).to_dict()).statistic == 3


def test_decide_fixed() -> None:
    assert not decide_fixed(4, 5).stop
    assert decide_fixed(5, 5).stop
    assert decide("fixed", np.zeros((5, 3)), n=5).stop
    assert decide("fixed", 4, n=5, max_seeds=4).stop


def test_ci_width_stops_when_half_width_drops_below_epsilon() -> None:
    rng = np.random.default_rng(12)
    values = rng.normal(0.8, [0.01, 0.03], (300, 2))
    eps = 0.005
    halves = []
    for n in range(2, 301):
        lo, hi = sps.t.interval(0.95, n - 1, loc=0, scale=sps.sem(values[:n, 1]))
        halves.append((hi - lo) / 2)
    expected = 2 + int(np.argmax(np.array(halves) < eps))
    assert 30 < expected < 300
    symmetric = {"value_range": None}  # scipy's interval is the unbounded one
    first = next(n for n in range(2, 301) if decide_ci_width(values[:n], eps, **symmetric).stop)
    assert first == expected
    d = decide_ci_width(values[:expected], eps, **symmetric)
    assert d.rule == "ci_width" and d.statistic == pytest.approx(halves[expected - 2])
    # by default the half-width is that of the bounded interval estimate() reports
    bounded = decide_ci_width(values[:expected], eps)
    score = xr.DataArray(values[:expected], dims=("seed", "method"), coords={"metric": "auroc"})
    est = estimate(score)
    assert bounded.statistic == pytest.approx(float(((est.upper - est.lower) / 2).max()))
    # min_seeds wins over a met criterion; max_seeds forces a stop.
    assert not decide_ci_width(values[:expected], eps, min_seeds=expected + 1).stop
    forced = decide_ci_width(values[:10], eps, max_seeds=10)
    assert forced.stop and "max_seeds" in forced.reason
    assert decide("ci_width", values[:expected], epsilon=eps, **symmetric).stop
    assert decide("ci_width", values[:expected], epsilon=eps) == bounded


def _naive_ttest_stop(v: np.ndarray, alpha: float) -> bool:
    """Naive rule: paired t-test between two methods, stop at the first look with p < alpha."""
    return bool(sps.ttest_rel(v[:, 0], v[:, 1]).pvalue < alpha)


def _false_stop_rate(rule, n_methods: int, reps: int, rng: np.random.Generator) -> float:
    """Share of repetitions with equal means where ``rule`` ever declares a winner."""
    max_seeds, batch = 200, 10
    stops = 0
    for _ in range(reps):
        shared = rng.normal(0, 0.02, (max_seeds, 1))  # e.g. the class split, common to methods
        v = np.clip(0.85 + shared + rng.normal(0, 0.02, (max_seeds, n_methods)), 0, 1)
        stops += any(rule(v[:n]) for n in range(batch, max_seeds + 1, batch))
    return stops / reps


@pytest.mark.slow  # a Monte Carlo of stopping decisions
def test_ranking_false_stop_rate_under_equal_means() -> None:
    alpha, reps = 0.05, 300
    rng = np.random.default_rng(13)

    def ranking(v: np.ndarray) -> bool:
        return decide_ranking(v, alpha, min_seeds=10, batch_size=10).stop

    def ranking_normal(v: np.ndarray) -> bool:
        return decide_ranking(v, alpha, min_seeds=20, boundary="normal_mixture").stop

    def naive(v: np.ndarray) -> bool:
        return len(v) >= 10 and _naive_ttest_stop(v, alpha)

    rates = {
        "ranking_3": _false_stop_rate(ranking, 3, reps, rng),
        "ranking_2": _false_stop_rate(ranking, 2, reps, rng),
        "normal_mixture_2": _false_stop_rate(ranking_normal, 2, reps, rng),
        "naive_2": _false_stop_rate(naive, 2, reps, rng),
    }
    print("false-stop rates:", rates)
    assert rates["ranking_3"] <= alpha
    assert rates["ranking_2"] <= alpha
    # Asymptotic boundary: valid in the limit; allow two binomial standard errors.
    assert rates["normal_mixture_2"] <= alpha + 2 * math.sqrt(alpha * (1 - alpha) / reps)
    # The naive repeated t-test does not control the error under repeated looks.
    assert rates["naive_2"] > alpha


def test_ranking_stops_on_a_clear_winner_and_honours_bounds() -> None:
    rng = np.random.default_rng(14)
    v = np.clip(rng.normal([0.80, 0.90, 0.82], 0.01, (400, 3)), 0, 1)
    names = ["msp", "odin", "energy"]
    first = next(n for n in range(5, 401, 5) if decide_ranking(v[:n], method_names=names).stop)
    d = decide_ranking(v[:first], method_names=names)
    assert d.stop and d.rule == "ranking" and d.statistic > 0 and d.reason.startswith("odin")
    assert first < 200
    assert not decide_ranking(v[:first], min_seeds=first + 1).stop
    # Lower is better (fpr95): the smallest mean wins.
    low = decide_ranking(1 - v[:first], higher_is_better=False, method_names=names)
    assert low.stop and low.reason.startswith("odin")
    fast = decide_ranking(v[:first], boundary="normal_mixture", min_seeds=20)
    assert fast.stop and fast.statistic >= d.statistic
    # Equal methods never separate, but max_seeds stops the run.
    tie = np.repeat(v[:, :1], 2, axis=1)
    assert not decide_ranking(tie[:50]).stop
    capped = decide_ranking(tie[:50], max_seeds=50)
    assert capped.stop and "max_seeds" in capped.reason
    assert decide("ranking", v[:first], alpha=0.05).stop
    with pytest.raises(ValueError, match="value_range"):
        decide_ranking(v[:20] + 1.0)
    with pytest.raises(UnknownNameError, match="ranking"):
        decide("rankin", v)


def test_bernstein_confidence_sequence_is_time_uniform() -> None:
    """Miscoverage at any time of a run of 500 seeds stays below alpha (skewed, bounded data)."""
    rng = np.random.default_rng(15)
    alpha = 0.1
    for p in (0.05, 0.5):
        x = (rng.random((500, 2000)) < p).astype(float)
        lower, upper = confidence_sequence(x, alpha)
        miss = ((lower > p) | (upper < p)).any(axis=0).mean()
        assert miss <= alpha, (p, miss)
    lower, upper = confidence_sequence(rng.normal(0.5, 0.01, 300).clip(0, 1), 0.05)
    assert upper[-1] - lower[-1] < 0.1 and lower[-1] < 0.5 < upper[-1]


# ----------------------------------------------------------------------------- variance


def test_variance_components_f_test_matches_scipy() -> None:
    rng = np.random.default_rng(16)
    sizes = [5, 12, 7, 20, 9]
    groups = np.repeat([f"s{i}" for i in range(5)], sizes)
    values = rng.normal(0, 0.02, 5)[np.repeat(np.arange(5), sizes)] + rng.normal(
        0, 0.03, sum(sizes)
    )
    values[3] = np.nan
    out = one_way_anova(values, groups)
    keep = np.isfinite(values)
    ref = sps.f_oneway(*[values[keep & (groups == g)] for g in np.unique(groups)])
    assert out["f"] == pytest.approx(ref.statistic, rel=1e-10)
    assert out["p_value"] == pytest.approx(ref.pvalue, rel=1e-8)
    assert out["n"] == 52 and out["n_groups"] == 5 and out["df_within"] == 47
    for key in ("sigma2_between", "sigma2_within", "icc"):
        assert out[f"{key}_lower"] <= out[key] <= out[f"{key}_upper"]


def test_variance_components_recovers_known_components() -> None:
    rng = np.random.default_rng(17)
    sb2, sw2 = 0.02**2, 0.01**2
    sizes = rng.integers(20, 41, 80)
    g = np.repeat(np.arange(80), sizes)
    y = 0.8 + rng.normal(0, math.sqrt(sb2), 80)[g] + rng.normal(0, math.sqrt(sw2), len(g))
    out = one_way_anova(y, g)
    assert out["sigma2_between"] == pytest.approx(sb2, rel=0.3)
    assert out["sigma2_within"] == pytest.approx(sw2, rel=0.05)
    assert out["icc"] == pytest.approx(sb2 / (sb2 + sw2), abs=0.06)
    assert out["sigma2_between_lower"] <= sb2 <= out["sigma2_between_upper"]
    assert out["sigma2_within_lower"] <= sw2 <= out["sigma2_within_upper"]
    # Coverage of the ICC interval over repeated small, unbalanced experiments.
    icc, hits, reps = (sb2 / 4) / (sb2 / 4 + sw2), 0, 300
    for _ in range(reps):
        sizes = rng.integers(5, 30, 6)
        g = np.repeat(np.arange(6), sizes)
        y = rng.normal(0, math.sqrt(sb2 / 4), 6)[g] + rng.normal(0, math.sqrt(sw2), len(g))
        out = one_way_anova(y, g)
        hits += out["icc_lower"] <= icc <= out["icc_upper"]
    assert 0.91 <= hits / reps <= 0.99
    # No group effect: estimate truncated at 0, raw estimate kept.
    out = one_way_anova(rng.normal(0, 1, 60), np.arange(60) % 3)
    assert out["sigma2_between"] >= 0 and out["sigma2_between_lower"] >= 0


def test_a_metric_saturated_within_every_class_split_has_scipys_infinite_f(
    tmp_path,
) -> None:
    """Seeds that agree within every split (MSW = 0: AUROC 1.0 on an easy OOD set) raised
    ZeroDivisionError, and with it every report of a run whose class splits repeat."""
    y = np.r_[1.0, 1.0, 0.9, 0.9, 0.95, 0.95, 1.0, 1.0]
    g = np.arange(8) // 2
    out = one_way_anova(y, g)
    ref = sps.f_oneway(*(y[g == i] for i in range(4)))
    assert out["f"] == ref.statistic == np.inf and out["p_value"] == ref.pvalue == 0.0
    assert out["sigma2_within"] == 0.0
    assert out["icc"] == out["icc_lower"] == out["icc_upper"] == 1.0
    # the bounds' limit as MSW -> 0 (not inf * 0)
    assert 0 < out["sigma2_between_lower"] <= out["sigma2_between"]
    assert out["sigma2_between"] <= out["sigma2_between_upper"] < np.inf
    same = one_way_anova(np.ones(8), g)  # one value everywhere: nothing to apportion
    assert np.isnan([same["f"], same["p_value"], same["icc"], same["icc_lower"]]).all()
    results = make_results(n_seeds=12, failed=())
    cell = {"method": "energy", "metric": "auroc"}
    results["score"].loc[{**cell, "severity": "all"}] = 1.0  # on every seed (the probe's case)
    assert variance_components_table(results).sel(cell)["icc"].isnull().item()
    write_report(results, tmp_path / "report", figures=False)
    assert (tmp_path / "report" / "summary.md").is_file()


def test_results_that_repeat_a_seed_are_refused(tmp_path) -> None:
    """``xr.concat([run, run], "seed")`` (a rerun "merged" for more seeds) doubled n: the
    interval narrowed from 0.051 to 0.033 wide and 0 significant pairs became 6."""
    results = make_results(n_seeds=10)
    doubled = xr.concat([results, results], "seed")
    for analysis in (estimate, lambda r: win_probabilities(r, "auroc"), score_matrix):
        with pytest.raises(ValueError, match=r"seed labels repeat \(10 of them: 100, 101"):
            analysis(doubled)
        with pytest.raises(ValueError, match="seed labels repeat"):
            analysis(doubled["score"])
    with pytest.raises(ValueError, match="drop_duplicates"):
        write_report(doubled, tmp_path / "report", figures=False)
    once = doubled.drop_duplicates("seed")
    xr.testing.assert_identical(estimate(once), estimate(results))


def test_variance_components_table_uses_class_split() -> None:
    results = make_results(n_seeds=60)
    table = variance_components_table(results)
    assert set(table["icc"].dims) == {"method", "metric"}  # no severity: open set has no levels
    cell = {"method": "msp", "metric": "auroc"}
    score = results["score"].sel({**cell, "severity": "all"})
    direct = one_way_anova(score.values, results["class_split"].values)
    assert table["f"].sel(cell).item() == pytest.approx(direct["f"])
    assert table["n"].sel(cell).item() == 59
    with pytest.raises(KeyError, match="class_split"):
        variance_components_table(results.drop_vars("class_split"))


def test_score_matrix_feeds_the_stopping_rules() -> None:
    results = make_results(levels=("0", "1"), models=("svhn", "noise"))
    values, methods = score_matrix(results, "auroc", severity="1", model="noise")
    assert values.shape == (40, 3) and methods == ["msp", "odin", "energy"]
    assert np.isnan(values[3]).all()  # the failed seed
    decision = decide("ranking", values, method_names=methods, max_seeds=40)
    assert decision.stop and decision.n_seeds == 40
    with pytest.raises(ValueError, match="pick one label"):
        score_matrix(results, "auroc")
