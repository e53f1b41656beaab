"""Variance components of crossed seed designs (oodsim.stats.components) against oracles:
known simulated components, brute-force sums of squares, the one-way ANOVA of
oodsim.stats.variance, and statsmodels' REML."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import xarray as xr

from oodsim.stats import variance as one_way
from oodsim.stats.components import variance_components
from oodsim.stats.crossed import RESIDUAL, crossed_components
from tests.factories import synthetic_results


def grid(levels: tuple[int, ...], r: int = 1) -> np.ndarray:
    """Level codes (n, k) of a complete crossed design with ``r`` replicates per cell."""
    return np.repeat(np.array(list(np.ndindex(*levels))), r, axis=0)


def simulate(
    rng: np.random.Generator,
    codes: np.ndarray,
    levels: tuple[int, ...],
    components: dict[tuple[int, ...], float],
    residual: float,
) -> np.ndarray:
    """y = sum over terms of a normal effect per cell of the term + normal residual."""
    y = math.sqrt(residual) * rng.standard_normal(len(codes))
    for term, var in components.items():
        shape = tuple(levels[i] for i in term)
        ids = np.ravel_multi_index(tuple(codes[:, list(term)].T), shape)
        y += math.sqrt(var) * rng.standard_normal(math.prod(shape))[ids]
    return y


def factors_of(codes: np.ndarray, names: str = "abc") -> dict[str, np.ndarray]:
    return {names[i]: codes[:, i] for i in range(codes.shape[1])}


THREE = (6, 5, 4)
THREE_COMPONENTS = {
    (0,): 4.0,
    (1,): 2.0,
    (2,): 1.0,
    (0, 1): 0.5,
    (0, 2): 0.5,
    (1, 2): 0.5,
    (0, 1, 2): 0.25,
}


# ----------------------------------------------------------------------------- recovery


def test_recovers_known_components_of_a_three_factor_design() -> None:
    """Acceptance: 6 × 5 × 4 levels, two replicates per cell, main-effect variances 4, 2, 1,
    2-way interactions 0.5, 3-way 0.25, residual 1. The mean over replicates of each
    untruncated (raw, unbiased) ANOVA estimate is within 10% of the truth.

    2000 replicates, not 200: with 4 levels the estimate of sigma2_c has a standard
    deviation about equal to sigma2_c itself (df 3), so 200 replicates leave a Monte Carlo
    error of ~7% against a 10% tolerance; with 2000 the largest is ~2.2%."""
    codes = grid(THREE, r=2)
    factors = factors_of(codes)
    rng = np.random.default_rng(2024)
    fits = [
        crossed_components(simulate(rng, codes, THREE, THREE_COMPONENTS, 1.0), factors, n_draws=0)
        for _ in range(2000)
    ]
    assert {fit.method for fit in fits} == {"anova"}
    assert fits[0].sources == ("a", "b", "c", "a:b", "a:c", "b:c", "a:b:c", RESIDUAL)
    np.testing.assert_array_equal(fits[0].df, [5, 4, 3, 20, 15, 12, 60, 120])
    truth = np.array([*THREE_COMPONENTS.values(), 1.0])
    raw = np.array([fit.variance_raw for fit in fits])
    mean = raw.mean(axis=0)
    mc_error = raw.std(axis=0) / math.sqrt(len(raw))
    assert np.all(mc_error < 0.03 * truth)  # the tolerance is > 3 Monte Carlo errors
    np.testing.assert_allclose(mean, truth, rtol=0.10)
    # Truncation only lifts the estimates: the main effects (rarely negative) stay close.
    truncated = np.array([fit.variance for fit in fits]).mean(axis=0)
    assert np.all(truncated >= mean - 1e-12)
    np.testing.assert_allclose(truncated[:3], truth[:3], rtol=0.10)


def test_fiducial_intervals_cover_the_true_components() -> None:
    """Over 200 replicates of a 6 × 5 × 4 design without replication, the 95% generalized
    confidence intervals of every variance and share cover the truth at least 85% of the
    time (measured: 0.94-0.97)."""
    components = {k: v for k, v in THREE_COMPONENTS.items() if len(k) < 3}
    codes = grid(THREE)
    factors = factors_of(codes)
    truth = np.array([*components.values(), 1.0])
    share = truth / truth.sum()
    rng = np.random.default_rng(7)
    hits_var, hits_share = [], []
    for _ in range(200):
        fit = crossed_components(
            simulate(rng, codes, THREE, components, 1.0), factors, n_draws=2000, rng=rng
        )
        hits_var.append((fit.variance_low <= truth) & (truth <= fit.variance_high))
        hits_share.append((fit.share_low <= share) & (share <= fit.share_high))
    assert fit.sources == ("a", "b", "c", "a:b", "a:c", "b:c", RESIDUAL)  # a:b:c is residual
    coverage_var = np.mean(hits_var, axis=0)
    coverage_share = np.mean(hits_share, axis=0)
    assert np.all(coverage_var >= 0.85), coverage_var
    assert np.all(coverage_share >= 0.85), coverage_share
    assert np.all(coverage_var[:3] <= 0.995)  # not trivially wide


# ----------------------------------------------------------------------------- brute force


def test_one_factor_equals_the_one_way_anova() -> None:
    """One factor, balanced groups: the same estimates as oodsim.stats.variance."""
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(5), 6)
    y = rng.normal(0, 1.5, 5)[groups] + rng.normal(0, 1, len(groups))
    fit = crossed_components(y, {"class_split": groups})
    ref = one_way.one_way_anova(y, groups)
    assert fit.method == "anova" and fit.sources == ("class_split", RESIDUAL)
    row, res = fit.row("class_split"), fit.row(RESIDUAL)
    assert row["variance_raw"] == pytest.approx(ref["sigma2_between_raw"], rel=1e-12)
    assert res["variance"] == pytest.approx(ref["sigma2_within"], rel=1e-12)
    assert (row["df"], res["df"]) == (ref["df_between"], ref["df_within"])
    assert row["share"] == pytest.approx(ref["icc"], rel=1e-12)


def test_two_factors_without_replication_brute_force() -> None:
    """sigma2_A = (MS_A - MS_E) / L_B with the textbook two-way sums of squares."""
    rng = np.random.default_rng(1)
    la, lb = 5, 4
    codes = grid((la, lb))
    y = simulate(rng, codes, (la, lb), {(0,): 2.0, (1,): 1.0}, 0.5)
    # Shuffle the rows: the estimator must sort by level itself.
    order = rng.permutation(len(y))
    fit = crossed_components(y[order], {"a": codes[order, 0], "b": codes[order, 1]})
    table = y.reshape(la, lb)
    grand = table.mean()
    ss_a = lb * np.sum((table.mean(1) - grand) ** 2)
    ss_b = la * np.sum((table.mean(0) - grand) ** 2)
    ss_e = np.sum((table - table.mean(1, keepdims=True) - table.mean(0) + grand) ** 2)
    ms_a, ms_b, ms_e = ss_a / (la - 1), ss_b / (lb - 1), ss_e / ((la - 1) * (lb - 1))
    assert fit.sources == ("a", "b", RESIDUAL)
    np.testing.assert_allclose(
        fit.variance_raw, [(ms_a - ms_e) / lb, (ms_b - ms_e) / la, ms_e], rtol=1e-12
    )
    np.testing.assert_array_equal(fit.df, [la - 1, lb - 1, (la - 1) * (lb - 1)])
    assert fit.total == pytest.approx(fit.variance.sum())
    assert fit.share.sum() == pytest.approx(1.0)


def test_two_factors_with_replication_brute_force() -> None:
    """With r replicates: sigma2_AB = (MS_AB - MS_E)/r, sigma2_A = (MS_A - MS_AB)/(L_B r)."""
    rng = np.random.default_rng(2)
    la, lb, r = 4, 3, 3
    codes = grid((la, lb), r)
    y = simulate(rng, codes, (la, lb), {(0,): 1.0, (1,): 2.0, (0, 1): 0.7}, 1.0)
    fit = crossed_components(y, factors_of(codes))
    cube = y.reshape(la, lb, r)
    grand, cell = cube.mean(), cube.mean(2)
    ma, mb = cube.mean((1, 2)), cube.mean((0, 2))
    ms_a = lb * r * np.sum((ma - grand) ** 2) / (la - 1)
    ms_b = la * r * np.sum((mb - grand) ** 2) / (lb - 1)
    inter = cell - ma[:, None] - mb[None, :] + grand
    ms_ab = r * np.sum(inter**2) / ((la - 1) * (lb - 1))
    ms_e = np.sum((cube - cell[..., None]) ** 2) / (la * lb * (r - 1))
    expected = [(ms_a - ms_ab) / (lb * r), (ms_b - ms_ab) / (la * r), (ms_ab - ms_e) / r, ms_e]
    assert fit.sources == ("a", "b", "a:b", RESIDUAL)
    np.testing.assert_allclose(fit.variance_raw, expected, rtol=1e-12)


@pytest.mark.parametrize(
    ("levels", "r", "components"),
    [
        ((5, 4), 3, {(0,): 4.0, (1,): 2.0, (0, 1): 1.0}),
        (THREE, 1, {k: v for k, v in THREE_COMPONENTS.items() if len(k) < 3}),
    ],
)
def test_reml_equals_anova_on_balanced_data(levels, r, components) -> None:
    """Oracle: for a balanced design whose ANOVA estimates are all positive, REML gives the
    same values (to 1e-4 relative; measured ~1e-7)."""
    codes = grid(levels, r)
    factors = factors_of(codes)
    for seed in range(50):
        y = simulate(np.random.default_rng(seed), codes, levels, components, 1.0)
        anova = crossed_components(y, factors, n_draws=0)
        if np.all(anova.variance_raw > 0):
            break
    else:  # pragma: no cover
        pytest.fail("no replicate with all ANOVA estimates positive")
    reml = crossed_components(y, factors, method="reml", n_boot=0)
    assert (anova.method, reml.method) == ("anova", "reml")
    assert reml.sources == anova.sources
    np.testing.assert_allclose(reml.variance, anova.variance_raw, rtol=1e-4)
    np.testing.assert_array_equal(reml.df, anova.df)


def test_reml_matches_statsmodels_mixedlm() -> None:
    """Two crossed factors with replication: the REML variances of statsmodels' MixedLM
    (one group, variance components a, b, a:b) agree within a loose tolerance."""
    pd = pytest.importorskip("pandas")
    smf = pytest.importorskip("statsmodels.formula.api")
    from statsmodels.tools.sm_exceptions import ConvergenceWarning

    rng = np.random.default_rng(3)
    levels, r = (6, 5), 2
    codes = grid(levels, r)
    y = simulate(rng, codes, levels, {(0,): 4.0, (1,): 2.0, (0, 1): 1.0}, 1.0)
    drop = rng.choice(len(y), 5, replace=False)  # unbalanced: our REML, not the ANOVA
    keep = np.setdiff1d(np.arange(len(y)), drop)
    ours = crossed_components(
        np.where(np.isin(np.arange(len(y)), drop), np.nan, y), factors_of(codes), n_boot=0
    )
    assert ours.method == "reml" and ours.sources == ("a", "b", "a:b", RESIDUAL)
    frame = pd.DataFrame({"y": y[keep], "a": codes[keep, 0], "b": codes[keep, 1], "g": 1}).assign(
        ab=lambda d: d["a"] * levels[1] + d["b"]
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = smf.mixedlm(
            "y ~ 1",
            frame,
            groups="g",
            re_formula="0",
            vc_formula={"a": "0 + C(a)", "b": "0 + C(b)", "ab": "0 + C(ab)"},
        ).fit(reml=True)
    if any(issubclass(w.category, ConvergenceWarning) for w in caught):
        pytest.skip("statsmodels' MixedLM did not converge")
    names = list(fit.model.exog_vc.names)
    theirs = [fit.vcomp[names.index(name)] for name in ("a", "b", "ab")] + [fit.scale]
    np.testing.assert_allclose(ours.variance, theirs, rtol=1e-3)  # measured ~2e-5


# ----------------------------------------------------------------------------- unbalanced


def test_unbalanced_design_uses_reml_close_to_truth() -> None:
    """Missing values make the design unbalanced: REML, whose mean over 150 replicates is
    within 25% of every true component (measured: within ~7%)."""
    levels, r = (6, 5), 2
    components = {(0,): 4.0, (1,): 2.0, (0, 1): 0.5}
    codes = grid(levels, r)
    factors = factors_of(codes)
    truth = np.array([*components.values(), 1.0])
    rng = np.random.default_rng(11)
    estimates = []
    for _ in range(150):
        y = simulate(rng, codes, levels, components, 1.0)
        y[rng.choice(len(y), 8, replace=False)] = np.nan
        fit = crossed_components(y, factors, n_boot=0)
        assert fit.method == "reml" and fit.n == len(y) - 8
        estimates.append(fit.variance)
    assert fit.sources == ("a", "b", "a:b", RESIDUAL)
    np.testing.assert_allclose(np.mean(estimates, axis=0), truth, rtol=0.25)


def test_unbalanced_bootstrap_intervals_and_missing_cells() -> None:
    """Whole cells missing, one replicate per cell: a:b folds into the residual; the
    parametric bootstrap gives ordered intervals, reproducible for a seeded rng."""
    levels = (5, 4)
    codes = grid(levels)
    rng = np.random.default_rng(5)
    y = simulate(rng, codes, levels, {(0,): 3.0, (1,): 1.0}, 0.5)
    y[[0, 7, 13]] = np.nan
    first = crossed_components(y, factors_of(codes), n_boot=40, rng=4)
    again = crossed_components(y, factors_of(codes), n_boot=40, rng=4)
    assert first.method == "reml" and first.sources == ("a", "b", RESIDUAL)
    assert "bootstrap" in first.interval
    np.testing.assert_array_equal(first.variance_low, again.variance_low)
    assert np.all(np.isfinite(first.variance_low)) and np.all(np.isfinite(first.share_high))
    assert np.all(first.variance_low <= first.variance_high)
    assert np.all(first.share_low <= first.share_high)
    assert first.share.sum() == pytest.approx(1.0)
    assert first.total_low <= first.total <= first.total_high
    with pytest.raises(ValueError, match="not balanced"):
        crossed_components(y, factors_of(codes), method="anova")


# ----------------------------------------------------------------------------- edge cases


def test_edge_cases() -> None:
    codes = grid((3, 2), 2)
    y = np.arange(len(codes), dtype=float) % 5
    with pytest.raises(ValueError, match="'init' has a single level"):
        crossed_components(y, {"a": codes[:, 0], "init": np.zeros(len(y))})
    with pytest.raises(ValueError, match="12 values but 3 levels"):
        crossed_components(y, {"a": [0, 1, 2]})
    # Fewer than two finite values: NaNs, no crash.
    few = np.full(len(y), np.nan)
    few[0] = 1.0
    fit = crossed_components(few, factors_of(codes))
    assert fit.method == "none" and fit.n == 1 and np.all(np.isnan(fit.variance))
    # One factor, one value per level: no residual degree of freedom.
    fit = crossed_components([1.0, 2.0, 4.0], {"a": [0, 1, 2]})
    assert fit.method == "none" and np.isnan(fit.total)
    # Constant values: every component zero, shares undefined.
    fit = crossed_components(np.ones(len(y)), factors_of(codes))
    assert fit.method == "anova" and np.all(fit.variance == 0) and np.all(np.isnan(fit.share))
    # Aliased factors (b moves with a): b is left out of the REML model.
    a = np.repeat(np.arange(4), 3)
    noisy = np.random.default_rng(0).normal(size=12) + a
    fit = crossed_components(noisy, {"a": a, "b": a * 10}, method="reml", n_boot=0)
    assert fit.sources == ("a", RESIDUAL)
    # Seeded draws are reproducible; another seed moves the interval only.
    one = crossed_components(y, factors_of(codes), rng=1)
    assert np.array_equal(
        one.variance_high, crossed_components(y, factors_of(codes), rng=1).variance_high
    )
    two = crossed_components(y, factors_of(codes), rng=2)
    np.testing.assert_array_equal(one.variance, two.variance)
    assert set(one.as_dict()["sources"]) == set(one.sources)


# ----------------------------------------------------------------------------- xarray


def designed(n_splits: int = 4, n_inits: int = 4, r: int = 1, **options) -> xr.Dataset:
    """Factory results of a full class_split × init design (``r`` replicates of the grid)."""
    n = n_splits * n_inits * r
    return synthetic_results(
        n_seeds=n, design={"class_split": n_splits, "init": n_inits}, **options
    )


def test_wrapper_on_results_with_a_failed_seed() -> None:
    results = designed()  # seed index 3 failed: 15 of 16 cells, unbalanced
    out = variance_components(results, n_boot=30)
    assert out.attrs["factors"] == ["class_split", "init"]  # STREAMS order, not coord order
    assert out.attrs["factor_coords"] == ["stream_class_split", "stream_init"]
    assert list(out["source"].values) == ["class_split", "init", RESIDUAL]
    assert out["variance"].dims == ("method", "source")  # open set: no severity levels
    assert "metric" not in out.dims and "seed" not in out.dims
    assert out.attrs["estimator"] == "reml" and "bootstrap" in out.attrs["interval"]
    assert set(np.unique(out["estimator"].values)) == {"reml"}
    assert np.all(out["n"].values == 15)
    np.testing.assert_allclose(out["share"].sum("source"), 1.0)
    assert out["df"].dims == ("source",)
    assert out.attrs["n_levels"] == '{"class_split": 4, "init": 4}'
    assert "highest-order interaction" in out.attrs["model"]
    # The cell equals the array function on the same values.
    cell = (
        results["score"].sel({"method": "odin", "metric": "auroc", "severity": "all"}).values.copy()
    )
    cell[3] = np.nan
    direct = crossed_components(
        cell,
        {"class_split": results["stream_class_split"], "init": results["stream_init"]},
        n_boot=30,
    )
    got = out.sel({"method": "odin"})
    np.testing.assert_allclose(got["variance"], direct.variance, rtol=1e-10)
    np.testing.assert_allclose(got["share_high"], direct.share_high, rtol=1e-10)


def test_wrapper_balanced_replicated_design_and_metric_list() -> None:
    results = designed(r=2, failed=())
    out = variance_components(results, metric=["auroc", "fpr95"], n_draws=500)
    assert out.attrs["estimator"] == "anova" and "fiducial" in out.attrs["interval"]
    assert list(out["source"].values) == ["class_split", "init", "class_split:init", RESIDUAL]
    assert out["variance"].dims == ("method", "source", "metric")
    assert list(out["metric"].values) == ["auroc", "fpr95"]
    np.testing.assert_array_equal(out["df"].values, [3, 3, 9, 16])
    np.testing.assert_allclose(out["share"].sum("source"), 1.0)
    assert np.all(out["variance_low"] <= out["variance_high"])
    # Named factors resolve stream_<name>; one factor alone is the one-way model.
    one = variance_components(results, factors="init", n_draws=0)
    assert list(one["source"].values) == ["init", RESIDUAL]
    # One missing score in one cell: that cell alone is REML, the estimator "mixed".
    score = results["score"].copy()
    score[0, 0, 0, 0] = np.nan
    mixed = variance_components(results.assign(score=score), n_draws=200, n_boot=10)
    assert mixed.attrs["estimator"] == "mixed"
    assert list(mixed["estimator"].values) == ["reml", "anova", "anova"]
    assert mixed["df"].dims == ("method", "source")


def test_wrapper_falls_back_to_class_split_and_errors_without_factors() -> None:
    results = synthetic_results(n_seeds=12, failed=())
    out = variance_components(results, n_draws=200)
    assert out.attrs["factors"] == ["class_split"] and "fallback" in out.attrs
    assert list(out["source"].values) == ["class_split", RESIDUAL]
    ref = one_way.variance_components_table(results).sel(metric="auroc")
    np.testing.assert_allclose(
        out["variance_raw"].sel(source="class_split"), ref["sigma2_between_raw"], rtol=1e-10
    )
    bare = results.drop_vars("class_split")
    with pytest.raises(KeyError, match="no designed streams"):
        variance_components(bare)
    with pytest.raises(KeyError, match="stream_init"):
        variance_components(results, factors=["init"])
