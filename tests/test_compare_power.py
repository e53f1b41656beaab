"""Paired comparisons (:func:`oodsim.stats.paired.compare`) and seed power calculations
(:mod:`oodsim.stats.power`) against scipy and statsmodels as oracles."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
import xarray as xr
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestIndPower, TTestPower, ttest_power

from oodsim.report import write_report
from oodsim.stats.paired import adjust_p, compare
from oodsim.stats.power import (
    DEFAULT_DELTAS,
    MAX_N,
    independent_power,
    independent_sample_size,
    paired_power,
    paired_sample_size,
    power,
)
from tests.factories import synthetic_results

NAN_SEED, NAN_METHOD = 105, "odin"


@pytest.fixture(scope="module")
def results() -> xr.Dataset:
    """Open set results: seed 103 failed (factory default), and odin's auroc NaN at seed 105."""
    res = synthetic_results(n_seeds=12)
    res["score"].loc[{"seed": NAN_SEED, "method": NAN_METHOD, "metric": "auroc"}] = np.nan
    return res


@pytest.fixture(scope="module")
def severity_results() -> xr.Dataset:
    return synthetic_results(n_seeds=8, levels=("0", "1", "2"), models=("a", "b"))


def _cell(res: xr.Dataset, metric: str) -> tuple[np.ndarray, list[str]]:
    """(seeds, methods) scores of one metric, failed seeds NaN, single severity."""
    score = res["score"].where(res["failure"] == "").sel(metric=metric).isel(severity=0)
    return score.transpose("seed", "method").values, [str(m) for m in score["method"].values]


def _upper(ds: xr.Dataset, name: str) -> np.ndarray:
    """``ds[name]`` at every unordered pair (i < j) of every cell, as one flat vector."""
    rest = [d for d in ds[name].dims if d not in ("method", "other")]
    v = ds[name].transpose("method", "other", *rest).values
    i, j = np.triu_indices(ds.sizes["method"], 1)
    return v[i, j].ravel()


# --- compare ------------------------------------------------------------------------------


@pytest.mark.parametrize("metric", ["auroc", "fpr95"])
def test_compare_matches_scipy_on_pairwise_complete_seeds(results, metric):
    alpha = 0.1
    out = compare(results, metric=metric, alpha=alpha)
    values, methods = _cell(results, metric)
    for a, b in itertools.permutations(range(len(methods)), 2):
        at = {"method": methods[a], "other": methods[b]}
        keep = np.isfinite(values[:, a]) & np.isfinite(values[:, b])
        x, y = values[keep, a], values[keep, b]
        d = x - y
        expect_n = 12 - 1 - (metric == "auroc" and NAN_METHOD in (methods[a], methods[b]))
        assert int(out["n"].sel(at)) == keep.sum() == expect_n
        assert float(out["diff"].sel(at)) == pytest.approx(d.mean(), rel=1e-12, abs=1e-15)
        assert float(out["p"].sel(at)) == pytest.approx(sps.ttest_rel(x, y).pvalue, rel=1e-9)
        sem = d.std(ddof=1) / np.sqrt(len(d))
        low, high = sps.t.interval(1 - alpha, len(d) - 1, loc=d.mean(), scale=sem)
        assert float(out["diff_low"].sel(at)) == pytest.approx(low, rel=1e-9)
        assert float(out["diff_high"].sel(at)) == pytest.approx(high, rel=1e-9)
        assert float(out["effect_size"].sel(at)) == pytest.approx(d.mean() / d.std(ddof=1))
        wins = (d > 0) if metric == "auroc" else (d < 0)
        share = (wins.sum() + 0.5 * (d == 0).sum()) / len(d)
        assert float(out["prob_superiority"].sel(at)) == pytest.approx(share)


def test_compare_mirrors_and_diagonal(severity_results):
    out = compare(severity_results, metric=None)
    swapped = out.rename({"method": "other", "other": "method"}).transpose(*out["p"].dims)
    for name in ("p", "p_adjusted", "n", "significant"):
        np.testing.assert_array_equal(out[name].values, swapped[name].values)
    np.testing.assert_array_equal(out["diff"].values, -swapped["diff"].values)
    np.testing.assert_array_equal(out["effect_size"].values, -swapped["effect_size"].values)
    np.testing.assert_array_equal(out["diff_low"].values, -swapped["diff_high"].values)
    np.testing.assert_allclose(
        out["prob_superiority"].values, 1 - swapped["prob_superiority"].values, rtol=1e-15
    )
    for i in range(out.sizes["method"]):
        diag = out.isel(method=i, other=i)
        for name in ("diff", "diff_low", "diff_high", "p", "p_adjusted", "prob_superiority"):
            assert np.isnan(diag[name].values).all()
        assert not diag["significant"].values.any()
        assert (diag["n"].values == 0).all()


@pytest.mark.parametrize(
    ("adjust", "oracle"), [("holm", "holm"), ("bh", "fdr_bh"), ("fdr_bh", "fdr_bh")]
)
def test_adjusted_p_equals_multipletests_over_the_whole_family(severity_results, adjust, oracle):
    out = compare(severity_results, metric=None, adjust=adjust)
    p = _upper(out, "p")
    assert np.isfinite(p).all()
    expected = multipletests(p, method=oracle)[1]
    np.testing.assert_allclose(_upper(out, "p_adjusted"), expected, rtol=1e-12)
    assert out.attrs["n_tests"] == len(p) == 3 * 4 * 3 * 2  # pairs × metrics × levels × models
    assert out.attrs["adjust"] == ("holm" if adjust == "holm" else "bh")
    np.testing.assert_array_equal(
        out["significant"].values, np.nan_to_num(out["p_adjusted"].values, nan=1) < 0.05
    )
    assert "each unordered pair of methods once" in out.attrs["family"]
    assert "severity" in out.attrs["family"] and "model" in out.attrs["family"]


def test_no_adjustment_keeps_p(results):
    out = compare(results, adjust=None)
    np.testing.assert_array_equal(out["p_adjusted"].values, out["p"].values)
    assert out.attrs["adjust"] == "none"


def test_adjust_p_leaves_nan_out_of_the_family():
    p = np.array([0.01, np.nan, 0.04, 0.03, 0.2, 0.04, np.nan])
    ok = np.isfinite(p)
    for method, oracle in (("holm", "holm"), ("bh", "fdr_bh")):
        got = adjust_p(p, method)
        assert np.isnan(got[~ok]).all()
        np.testing.assert_allclose(got[ok], multipletests(p[ok], method=oracle)[1], rtol=1e-12)


def _toy(values: np.ndarray, methods=("a", "b", "c")) -> xr.DataArray:
    return xr.DataArray(
        np.asarray(values, float), dims=("seed", "method"), coords={"method": list(methods)}
    )


def test_degenerate_pairs_follow_the_p_from_t_convention():
    base = np.array([0.125, 0.5, 0.25, 0.75])  # dyadic: every difference is exactly 0.25
    score = _toy(np.stack([base, base + 0.25, base], axis=1))
    out = compare(score, metric="auroc")
    assert float(out["p"].sel({"method": "a", "other": "b"})) == 0.0  # constant nonzero difference
    assert np.isnan(float(out["p"].sel({"method": "a", "other": "c"})))  # identical: undefined
    assert float(out["prob_superiority"].sel({"method": "a", "other": "c"})) == 0.5  # all ties
    assert out.attrs["n_tests"] == 2  # the undefined test is not in the family
    assert float(out["diff_low"].sel({"method": "b", "other": "a"})) == pytest.approx(0.25)
    assert float(out["diff_high"].sel({"method": "b", "other": "a"})) == pytest.approx(0.25)


def test_fewer_than_two_complete_seeds_is_nan():
    score = _toy([[0.1, np.nan, 0.3], [0.2, 0.4, np.nan], [0.5, np.nan, np.nan]])
    out = compare(score)
    ab = out.sel({"method": "a", "other": "b"})
    assert int(ab["n"]) == 1 and float(ab["diff"]) == pytest.approx(-0.2)
    assert np.isnan([float(ab[v]) for v in ("p", "p_adjusted", "diff_low", "effect_size")]).all()
    assert int(out["n"].sel({"method": "b", "other": "c"})) == 0
    assert np.isnan(float(out["diff"].sel({"method": "b", "other": "c"})))
    assert out.attrs["n_tests"] == 0


def test_dims_metric_and_methods(results):
    ood = synthetic_results(n_seeds=6, oods=("x", "y"))
    one = compare(ood, metric="auroc")
    assert set(one["p"].dims) == {"method", "other", "ood"}  # open set: no severity levels
    many = compare(ood, metric=["auroc", "fpr95"])
    assert list(many["metric"].values) == ["auroc", "fpr95"]
    every = compare(ood, metric=None)
    assert every.sizes["metric"] == ood.sizes["metric"]
    xr.testing.assert_allclose(
        every["p"].sel(metric="fpr95", drop=True),
        compare(ood, metric="fpr95", adjust=None)["p"].drop_vars("metric"),
    )
    sub = compare(results, methods=["energy", "msp"])
    assert list(sub["method"].values) == ["energy", "msp"] == list(sub["other"].values)
    full = compare(results)
    pair = {"method": "energy", "other": "msp"}
    np.testing.assert_array_equal(sub["diff"].sel(pair).values, full["diff"].sel(pair).values)
    np.testing.assert_array_equal(sub["p"].sel(pair).values, full["p"].sel(pair).values)


def test_compare_bad_input(results):
    with pytest.raises(ValueError, match="alpha"):
        compare(results, alpha=1.5)
    with pytest.raises(ValueError, match="adjust"):
        compare(results, adjust="bonferroni")
    with pytest.raises(KeyError, match="known metrics"):
        compare(results, metric="nope")
    with pytest.raises(KeyError, match="known metrics"):
        compare(results, metric=["auroc", "nope"])
    with pytest.raises(ValueError, match="known: msp, odin, energy"):
        compare(results, methods=["msp", "mahalanobis"])
    with pytest.raises(ValueError, match="at least 2"):
        compare(results, methods=["msp"])
    with pytest.raises(ValueError, match="at least one metric"):
        compare(results, metric=[])


def test_results_of_one_selected_metric_keep_its_direction(results, tmp_path):
    """``oodsim.select(results, metric="fpr95")`` (the documented way to pick a metric) drops
    the dim and keeps the name as a scalar coordinate. The analyses took the direction from
    their ``metric`` argument: the default "auroc" ranked fpr95 higher-is-better (the worse
    method "won"), and power and variance components labelled fpr95 as auroc."""
    import oodsim
    from oodsim.stats import win_probabilities

    one = oodsim.select(results, metric="fpr95")
    assert "metric" not in one["score"].dims
    full = compare(results, metric="fpr95")
    xr.testing.assert_identical(compare(one, metric="fpr95"), full)
    xr.testing.assert_equal(compare(one, metric=None), full)  # attrs: metric ["fpr95"]
    # energy's fpr95 is the lowest on every seed (the factory's best method)
    assert (full["prob_superiority"].sel({"method": "energy", "other": "msp"}) == 1).all()
    wins = win_probabilities(results, "fpr95", k=5, pairing="paired", rng=0)
    xr.testing.assert_identical(win_probabilities(one, "fpr95", k=5, pairing="paired", rng=0), wins)
    xr.testing.assert_equal(win_probabilities(one, k=5, pairing="paired", rng=0), wins)
    assert wins.sel({"method": "energy"}).item() > wins.sel({"method": "msp"}).item()
    for analysis in (compare, power):  # their default "auroc" is not in these
        with pytest.raises(KeyError, match="not in results; known metrics: fpr95"):
            analysis(one)
    write_report(one, tmp_path / "report", figures=False)  # refused before: "no metric dim"
    assert "fpr95" in (tmp_path / "report" / "summary.md").read_text()


# --- power helpers ------------------------------------------------------------------------

EFFECTS = (0.1, 0.2, 0.5, 0.8, 1.0, 2.0)


@pytest.mark.parametrize(("alpha", "target"), [(0.05, 0.8), (0.01, 0.9), (0.1, 0.5)])
def test_sample_sizes_equal_statsmodels(alpha, target):
    for d in EFFECTS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            one = TTestPower().solve_power(
                effect_size=d, alpha=alpha, power=target, alternative="two-sided"
            )
            two = TTestIndPower().solve_power(
                effect_size=d, alpha=alpha, power=target, ratio=1, alternative="two-sided"
            )
        n1, n2 = paired_sample_size(d, target, alpha), independent_sample_size(d, target, alpha)
        assert isinstance(n1, int) and isinstance(n2, int)
        assert n1 == math.ceil(one), (d, one)
        assert n2 == math.ceil(two), (d, two)
        # the smallest integer that reaches the power (power rises with n)
        assert paired_power(d, n1, alpha) >= target
        assert n1 == 2 or paired_power(d, n1 - 1, alpha) < target
        assert independent_power(d, n2, alpha) >= target
        assert n2 == 2 or independent_power(d, n2 - 1, alpha) < target


def test_power_functions_equal_statsmodels():
    n = np.arange(2, 40)
    for d in EFFECTS:
        ours = paired_power(d, n, 0.05), independent_power(d, n, 0.05)
        theirs = (
            ttest_power(d, n, 0.05),
            TTestIndPower().power(effect_size=d, nobs1=n, alpha=0.05, ratio=1),
        )
        for got, want in zip(ours, theirs, strict=True):
            # statsmodels is NaN where scipy's nct.cdf fails (large noncentrality, power ~1)
            assert np.isfinite(got).all()
            ok = np.isfinite(want)
            assert ok[:10].all()
            np.testing.assert_allclose(got[ok], want[ok], rtol=1e-12)
    assert paired_power(-0.5, 10) == paired_power(0.5, 10)
    assert paired_power(0.0, 10, 0.05) == pytest.approx(0.05)


def test_sample_size_edges_and_arrays():
    assert math.isnan(paired_sample_size(0.0))
    assert math.isnan(independent_sample_size(float("nan")))
    assert paired_sample_size(math.inf) == 2
    assert paired_sample_size(1e-6) == math.inf  # more than MAX_N pairs
    assert paired_sample_size(1e-6) > MAX_N
    assert paired_sample_size(-0.5) == paired_sample_size(0.5)
    sizes = paired_sample_size(np.array([[0.5, 0.0], [2.0, 1e-7]]))
    assert sizes.shape == (2, 2)
    np.testing.assert_array_equal(
        sizes, [[paired_sample_size(0.5), np.nan], [paired_sample_size(2.0), np.inf]]
    )
    with pytest.raises(ValueError, match="power"):
        paired_sample_size(0.5, power=1.0)
    with pytest.raises(ValueError, match="alpha"):
        independent_sample_size(0.5, alpha=0.0)


# --- power on results ---------------------------------------------------------------------


def test_power_paired_is_sample_size_of_each_given_delta(results):
    """Each fixed difference's d_z is delta / SD of the paired differences; n_required is
    statsmodels' TTestPower solve_power, rounded up."""
    target, alpha = 0.9, 0.05
    out = power(results, power=target, alpha=alpha, delta=[0.005, 0.02])
    assert out["n_required"].dims == ("method", "other", "delta")
    assert out["delta"].values.tolist() == [0.005, 0.02] and out["sd"].dims == ("method", "other")
    cmp = compare(results, alpha=alpha)
    values, methods = _cell(results, "auroc")
    for a, b in itertools.combinations(range(len(methods)), 2):
        at = {"method": methods[a], "other": methods[b]}
        keep = np.isfinite(values[:, a]) & np.isfinite(values[:, b])
        d = values[keep, a] - values[keep, b]
        assert int(out["n_observed"].sel(at)) == keep.sum() == int(cmp["n"].sel(at))
        assert float(out["sd"].sel(at)) == pytest.approx(d.std(ddof=1))
        for delta in (0.005, 0.02):
            cell = out.sel(at).sel(delta=delta)
            dz = delta / d.std(ddof=1)
            assert float(cell["effect_size"]) == pytest.approx(dz)
            need = float(cell["n_required"])
            oracle = TTestPower().solve_power(effect_size=dz, power=target, alpha=alpha)
            assert need == max(2, math.ceil(oracle - 1e-9))
            assert paired_power(dz, need, alpha) >= target
            assert need == 2 or paired_power(dz, need - 1, alpha) < target
            assert float(cell["achieved_power"]) == pytest.approx(
                paired_power(dz, keep.sum(), alpha)
            )
        swapped = {"method": methods[b], "other": methods[a]}
        for name in out.data_vars:
            np.testing.assert_array_equal(out[name].sel(at).values, out[name].sel(swapped).values)
    assert np.isnan(out["n_required"].sel({"method": "msp", "other": "msp"})).all()
    assert out.attrs["power"] == target and out.attrs["paired"] is True
    assert "paired t test" in out.attrs["estimand"] and out.attrs["delta"] == [0.005, 0.02]


def test_power_asks_about_fixed_differences_by_default_never_the_observed_one(results):
    out = power(results)
    assert out["delta"].values.tolist() == list(DEFAULT_DELTAS) == [0.005, 0.01, 0.02]
    one = power(results, delta=0.01)
    assert "delta" not in one.dims and float(one["delta"]) == 0.01
    np.testing.assert_array_equal(
        one["n_required"].values, out["n_required"].sel(delta=0.01).values
    )
    with pytest.raises(ValueError, match="Hoenig & Heisey 2001"):
        power(results, delta=None)


def test_power_unpaired_uses_pooled_sd_and_given_delta(results):
    out = power(results, metric="fpr95", delta=0.01, paired=False)
    values, methods = _cell(results, "fpr95")
    a, b = 0, 2
    at = {"method": methods[a], "other": methods[b]}
    keep = np.isfinite(values[:, a]) & np.isfinite(values[:, b])
    sd = np.sqrt((values[keep, a].var(ddof=1) + values[keep, b].var(ddof=1)) / 2)
    assert float(out["sd"].sel(at)) == pytest.approx(sd)
    assert float(out["delta"]) == 0.01
    assert float(out["n_required"].sel(at)) == independent_sample_size(0.01 / sd)
    assert float(out["achieved_power"].sel(at)) == pytest.approx(
        independent_power(0.01 / sd, keep.sum())
    )
    assert out.attrs["paired"] is False


def test_power_keeps_cells_and_metrics(severity_results):
    out = power(severity_results, metric=None, delta=0.01)
    assert set(out["n_required"].dims) == {"method", "other", "metric", "severity", "model"}
    cell = {"metric": "aupr_in", "severity": "2", "model": "b"}
    single = power(severity_results, metric="aupr_in", delta=0.01).sel(severity="2", model="b")
    np.testing.assert_array_equal(
        out["n_required"].sel(cell, drop=True).values, single["n_required"].values
    )


def test_power_degenerate_sd():
    base = np.array([0.125, 0.5, 0.25, 0.75])
    out = power(_toy(np.stack([base, base + 0.25, base], axis=1)), delta=0.01)
    # every paired difference equal (0.25, or 0): an SD of 0 estimates no noise
    assert np.isnan(out["n_required"].values).all()
    assert float(out["sd"].sel({"method": "a", "other": "b"})) == 0
    one_seed = power(_toy(np.stack([base, base + 0.25, base], axis=1)[:1]), delta=0.01)
    assert np.isnan(one_seed["n_required"].values).all()  # no SD from one seed


def test_power_bad_input(results):
    with pytest.raises(ValueError, match="power"):
        power(results, power=0.0)
    with pytest.raises(ValueError, match="alpha"):
        power(results, alpha=1.0)
    for bad in (0.0, -0.01, float("nan"), "big", [], [0.01, 0.01], [0.01, -1.0], [[0.01]]):
        with pytest.raises(ValueError, match="delta"):
            power(results, delta=bad)
    with pytest.raises(KeyError, match="known metrics"):
        power(results, metric="nope")
    with pytest.raises(ValueError, match="at least 2"):
        power(results, methods=["energy"])
