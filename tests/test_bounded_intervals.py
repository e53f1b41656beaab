"""Bound-aware intervals (issue 20, part 4): seeds on a metric's bound never give a degenerate
interval, and the ``ci_width`` rule never stops on one."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from scipy import stats as sps

import oodsim.stats
from oodsim.stats import decide, decide_ci_width, estimate, running_interval
from oodsim.stats.intervals import betting_interval, two_part_interval


def _score(values: np.ndarray, metric: str = "auroc") -> xr.DataArray:
    """Scores of one metric: (seed,) from a 1-D array, (seed, rep) from a (rep, seed) one."""
    values = np.asarray(values, dtype=float)
    dims = ("seed",) if values.ndim == 1 else ("seed", "rep")
    return xr.DataArray(values.T, dims=dims, coords={"metric": metric})


@pytest.mark.parametrize("n", [2, 4, 10, 50])
@pytest.mark.parametrize("bound", [0.0, 1.0])
def test_every_seed_on_the_bound_gives_a_positive_width_interval_holding_it(
    n: int, bound: float
) -> None:
    est = estimate(_score(np.full(n, bound), "fpr95" if bound == 0 else "auroc"))
    assert est.attrs["interval"] == "bound-aware"
    lower, upper = float(est["lower"]), float(est["upper"])
    assert lower <= bound <= upper and upper - lower > 0
    # exactly the Clopper-Pearson / "rule of three" limit: (alpha/2) ** (1/n) from the bound
    far = 0.025 ** (1 / n)
    np.testing.assert_allclose(
        [lower, upper], [far, 1.0] if bound == 1 else [0.0, 1 - far], rtol=1e-12
    )
    # the old logit-t interval (still method="t") is the point
    point = estimate(_score(np.full(n, bound)), method="t")
    assert float(point["lower"]) == float(point["upper"]) == bound
    # every other method the docs offer for bounded values also has positive width
    for method in ("betting",):
        other = estimate(_score(np.full(n, bound)), method=method)
        assert float(other["lower"]) <= bound <= float(other["upper"])
        assert float(other["upper"] - other["lower"]) > 0


def test_zero_variance_inside_the_range_is_never_a_point() -> None:
    for value in (0.5, 0.8, 0.1 + 0.2):  # 0.3 is not exact in binary: a mean of equal values
        est = estimate(_score(np.full(10, value)))
        lower, upper = float(est["lower"]), float(est["upper"])
        assert lower < value < upper and upper - lower > 0.1
        # the betting interval (exact): the same cell through method="betting"
        betting = estimate(_score(np.full(10, value)), method="betting")
        assert float(betting["lower"]) == lower and float(betting["upper"]) == upper


def test_ninety_percent_at_one() -> None:
    """9 of 10 seeds score exactly 1.0: the interval keeps 1.0 and reaches well below the
    sample mean (the rest of the seeds could be far lower), unlike the logit-t."""
    x = np.array([1.0] * 9 + [0.97])
    est = estimate(_score(x))
    lower, upper = float(est["lower"]), float(est["upper"])
    assert upper == 1.0 and lower < 0.99 < x.mean()
    # one seed off the bound: nothing is known of its distance distribution, so the lower end
    # is the exact Clopper-Pearson one of "1 of 10 seeds off the bound" (distance <= 1)
    np.testing.assert_allclose(lower, 1 - sps.beta.ppf(0.975, 2, 9), rtol=1e-12)
    logit_t = estimate(_score(x), method="t")
    assert float(logit_t["lower"]) > lower
    # more seeds off the bound: the two-part interval (shares off the bound x their distance)
    rng = np.random.default_rng(3)
    x = np.where(rng.random(50) < 0.9, 1.0, rng.beta(99, 1, 50))
    est = estimate(_score(x))
    assert float(est["lower"]) < x.mean() < float(est["upper"]) <= 1.0


def test_two_part_interval_parts() -> None:
    # k >= 2: MOVER of Clopper-Pearson (share off the bound) and logit-t (their distance)
    n, k, nu, sem = 20, 5, 0.04, 0.01
    lower, upper = two_part_interval(np.array(n), np.array(k), nu, sem, 0.95)
    q_low, q_up = sps.beta.ppf([0.025, 0.975], [k, k + 1], [n - k + 1, n - k])
    assert q_low * 0.01 < lower < k / n * nu < upper < q_up * 0.1
    # k < 2: [0, Clopper-Pearson upper bound of the share]
    lower, upper = two_part_interval(np.array([10, 10]), np.array([0, 1]), np.nan, np.nan, 0.95)
    np.testing.assert_allclose(lower, 0.0)
    np.testing.assert_allclose(upper, [1 - 0.025**0.1, sps.beta.ppf(0.975, 2, 9)], rtol=1e-12)


def test_bound_aware_coverage_with_a_fixed_rng() -> None:
    """Monte Carlo coverage of the 95 % default interval, 600 samples each: the logit-t one
    misses badly with 90 % of the seeds at 1.0; the default covers bound-heavy and interior
    cases (behaviour, not timing: benchmarks/coverage.py measures the full table)."""
    rng = np.random.default_rng(2024)
    reps = 600

    def covered(x: np.ndarray, truth: float, method: str) -> float:
        est = estimate(_score(x), method=method)  # type: ignore[arg-type]
        return float(((est["lower"] <= truth) & (truth <= est["upper"])).mean())

    rest = rng.beta(95 * 0.95 / 0.05 / 19, 95 * 0.05 / 0.05 / 19, (reps, 10))  # mean 0.95
    x = np.where(rng.random((reps, 10)) < 0.9, 1.0, rest)
    truth = 0.9 + 0.1 * 0.95
    assert covered(x, truth, "t") < 0.75  # all ten at 1.0 in 35 % of the samples: a point
    assert covered(x, truth, "auto") >= 0.93
    interior = rng.beta(99, 1, (reps, 10))  # AUROC-like, mean 0.99, no seed on the bound
    assert 0.91 <= covered(interior, 0.99, "auto") <= 0.98
    default = estimate(_score(interior))
    np.testing.assert_array_equal(default["lower"], estimate(_score(interior), method="t")["lower"])
    assert covered(interior[:200], 0.99, "betting") == 1.0  # exact, hence conservative


def test_betting_interval_is_exact_for_bernoulli_scores() -> None:
    """Two-point scores (0 or 1) are the worst case of a bounded mean: the betting interval
    still covers (and contains the mean of any sample it is computed on here)."""
    rng = np.random.default_rng(9)
    x = (rng.random((400, 20)) < 0.8).astype(float)
    lower, upper = betting_interval(x)
    assert np.mean((lower <= 0.8) & (upper >= 0.8)) >= 0.95
    assert (upper - lower > 0).all()
    with pytest.raises(ValueError, match="outside"):
        betting_interval(x + 1)


def test_ci_width_does_not_stop_on_ten_perfect_seeds() -> None:
    """The issue's line: ten seeds of AUROC 1.0 used to stop with a zero-width interval."""
    d = decide("ci_width", np.ones((10, 2)), epsilon=0.01, min_seeds=10)
    assert not d.stop and d.statistic > 0.1
    # all-ones is known to +- 0.01 only once (1 - 0.025 ** (1/n)) / 2 < 0.01: n = 183
    first = next(n for n in range(10, 400) if decide_ci_width(np.ones((n, 2)), 0.01).stop)
    assert first == 183
    assert decide("ci_width", np.zeros((183, 1)), epsilon=0.01).stop
    assert not decide("ci_width", np.zeros((182, 1)), epsilon=0.01).stop


def test_ci_width_guard_refuses_zero_width_intervals() -> None:
    # the logit-t (method="t") and the unbounded t interval of a constant sample are points
    for params in ({"method": "t"}, {"value_range": None}):
        d = decide_ci_width(np.full((30, 2), 0.7), 0.01, **params)
        assert not d.stop and "zero-width" in d.reason
        forced = decide_ci_width(np.full((30, 2), 0.7), 0.01, max_seeds=30, **params)
        assert forced.stop and "max_seeds" in forced.reason
    # the half-width the rule compares is the one estimate() reports
    rng = np.random.default_rng(4)
    values = np.where(rng.random((40, 3)) < 0.5, 1.0, rng.beta(99, 1, (40, 3)))
    d = decide_ci_width(values, 0.05)
    est = estimate(xr.DataArray(values, dims=("seed", "method"), coords={"metric": "auroc"}))
    assert d.statistic == pytest.approx(float(((est["upper"] - est["lower"]) / 2).max()))


def test_running_interval_matches_estimate_on_every_prefix() -> None:
    rng = np.random.default_rng(6)
    v = np.where(rng.random(25) < 0.3, 1.0, rng.beta(40, 2, 25))
    v[:3] = [0.8, 0.8, 0.8]  # constant first: betting, then interior, then on the bound
    v[5] = np.nan
    n, mean, lower, upper = running_interval(v, value_range=(0.0, 1.0))
    finite = v[np.isfinite(v)]
    for i in (1, 2, 3, 4, 6, 10, len(finite) - 1):
        est = estimate(_score(finite[: i + 1]))
        np.testing.assert_allclose(
            [lower[i], upper[i]], [float(est["lower"]), float(est["upper"])], rtol=1e-12
        )
    assert np.isnan(lower[0]) and (upper[1:] - lower[1:] > 0).all()


def test_method_names_and_labels() -> None:
    x = _score(np.random.default_rng(1).beta(90, 10, (3, 12)))
    labels = {
        m: estimate(x, method=m, n_boot=50, rng=0).attrs["interval"]
        for m in oodsim.stats.intervals.INTERVAL_METHODS
    }
    assert labels == {
        "auto": "bound-aware",
        "t": "t (logit scale)",
        "betting": "betting",
        "bootstrap": "bootstrap",
    }
    assert estimate(x, value_range=None).attrs["interval"] == "t"
    with pytest.raises(ValueError, match="method must be one of"):
        estimate(x, method="wald")  # type: ignore[arg-type]


def test_logit_t_standard_error_is_the_geometric_mean_of_delta_and_logit_spread() -> None:
    # scores piled just below 1.0 with a tail towards the interior (a good detector's AUROC)
    values = np.random.default_rng(9).beta(20.4, 0.42, (10, 4)).T
    est = estimate(_score(values))
    assert est.attrs["interval"] == "bound-aware"
    for row, lower, upper in zip(values, est["lower"].values, est["upper"].values, strict=True):
        n, mean = len(row), row.mean()
        delta = sps.sem(row) / (mean * (1 - mean))
        own = sps.sem(np.log(row / (1 - row)))
        lo, hi = sps.t.interval(
            0.95, n - 1, loc=np.log(mean / (1 - mean)), scale=np.sqrt(delta * own)
        )
        np.testing.assert_allclose([lower, upper], sps.logistic.cdf([lo, hi]), rtol=1e-10)
        # the logits spread more than the linearisation at the mean says: a wider interval
        assert own > delta
    # far from the bounds the two nearly agree: the interval is the delta method's within 1 %
    centred = np.random.default_rng(9).normal(0.6, 0.01, 30)
    est = estimate(_score(centred), method="t")
    centre = np.log(centred.mean() / (1 - centred.mean()))
    delta = sps.sem(centred) / (centred.mean() * (1 - centred.mean()))
    lo, hi = sps.logistic.cdf(sps.t.interval(0.95, 29, loc=centre, scale=delta))
    width = float(est["upper"] - est["lower"])
    assert width == pytest.approx(hi - lo, rel=0.01) and width != pytest.approx(hi - lo, rel=1e-9)
