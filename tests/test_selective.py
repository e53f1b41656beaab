"""Selective classification metrics against written-out loops: AURC at the thresholds (the
risk of threshold-based AURC code), E-AURC and the selective risk at a fixed coverage."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oodsim import metrics

TOL = 1e-12


def threshold_aurc_loop(kappa: np.ndarray, correct: np.ndarray) -> float:
    """Each sample takes the risk of accepting every sample with κ >= its own κ."""
    risks = [np.mean(~correct[kappa >= t]) for t in kappa]
    return float(np.mean(risks))


def risk_at_coverage_loop(kappa: np.ndarray, correct: np.ndarray, coverage: float) -> float:
    """The risk at the highest distinct threshold whose coverage reaches ``coverage``."""
    for t in np.unique(kappa)[::-1]:
        accepted = kappa >= t
        if accepted.mean() >= coverage:
            return float(np.mean(~correct[accepted]))
    raise AssertionError("coverage 1 is always reached")


def oracle_aurc_loop(correct: np.ndarray) -> float:
    """AURC of every correct prediction first: mean over i of max(i - C, 0) / i."""
    n, c = correct.size, int(correct.sum())
    return float(np.mean([max(i - c, 0) / i for i in range(1, n + 1)]))


@st.composite
def judged(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    """(κ, correct) of one set of ID samples: continuous or with few values (ties)."""
    n = draw(st.integers(1, 60))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    distinct = draw(st.sampled_from([0, 1, 2, 3, 5]))
    kappa = rng.normal(size=n) if distinct == 0 else rng.integers(0, distinct, n).astype(float)
    return kappa, rng.random(n) < draw(st.floats(0.0, 1.0))


@settings(max_examples=200, deadline=None)
@given(judged())
def test_aurc_thresholds_is_the_threshold_loop_and_aurc_without_ties(data: tuple) -> None:
    kappa, correct = data
    got = metrics.aurc_thresholds(kappa, correct)
    assert abs(got - threshold_aurc_loop(kappa, correct)) <= TOL
    if np.unique(kappa).size == kappa.size:
        assert abs(got - metrics.aurc(kappa, correct)) <= TOL


def test_the_two_aurc_tie_rules_differ_either_way() -> None:
    """A tied top pair with one wrong: in expectation the first coverage is half wrong, at the
    threshold too; the runs below differ by how much of the pair's risk they carry."""
    kappa, correct = np.array([1.0, 1.0, 0.0, 0.0]), np.array([True, False, True, True])
    assert metrics.aurc_thresholds(kappa, correct) == pytest.approx(0.375)
    assert metrics.aurc(kappa, correct) == pytest.approx((0.5 + 0.5 + 1 / 3 + 0.25) / 4)
    kappa, correct = np.array([1.0, 0.0, 0.0]), np.array([True, True, False])
    assert metrics.aurc_thresholds(kappa, correct) == pytest.approx((0 + 2 * (1 / 3)) / 3)
    assert metrics.aurc(kappa, correct) == pytest.approx((0 + 0.25 + 1 / 3) / 3)


@settings(max_examples=200, deadline=None)
@given(judged())
def test_eaurc_is_aurc_minus_the_best_rankings(data: tuple) -> None:
    kappa, correct = data
    got = metrics.eaurc(kappa, correct)
    assert abs(got - (metrics.aurc(kappa, correct) - oracle_aurc_loop(correct))) <= TOL
    best = metrics.aurc(correct.astype(float), correct)  # κ = correctness ranks them best
    assert abs(got - (metrics.aurc(kappa, correct) - best)) <= TOL
    assert got >= -TOL


@settings(max_examples=200, deadline=None)
@given(judged(), st.sampled_from([0.5, 0.8, 0.95, 1.0]))
def test_selective_risk_at_a_coverage_is_the_loops(data: tuple, coverage: float) -> None:
    kappa, correct = data
    got = metrics.selective_risk(kappa, correct, coverage=coverage)
    assert abs(got - risk_at_coverage_loop(kappa, correct, coverage)) <= TOL
    if coverage == 0.95:
        assert got == metrics.selective_risk95(kappa, correct)


@pytest.mark.parametrize("coverage", [0.0, -0.1, 1.5, float("nan")])
def test_a_coverage_outside_0_1_is_refused(coverage: float) -> None:
    with pytest.raises(ValueError, match="coverage must be in"):
        metrics.selective_risk(np.arange(3.0), np.ones(3, bool), coverage=coverage)


def test_evaluate_takes_them_over_the_id_samples_of_each_row() -> None:
    rng = np.random.default_rng(3)
    kappa = np.round(rng.normal(size=(4, 50)), 1)
    is_ood = rng.random(50) < 0.3
    correct = rng.random((4, 50)) < 0.8
    names = ("aurc", "aurc_thresholds", "eaurc", "selective_risk95")
    together = metrics.evaluate(kappa, is_ood, names, correct=correct)
    for row in range(4):
        ids = ~is_ood
        for name in names:
            alone = metrics.METRICS[name](kappa[row][ids], correct[row][ids])
            assert abs(together[name][row] - alone) <= TOL, name


@settings(max_examples=80, deadline=None)
@given(judged())
def test_the_risk_coverage_curve_is_the_loop_at_each_coverage(data: tuple) -> None:
    kappa, correct = data
    curve = metrics.risk_coverage_curve(kappa, correct)
    assert curve.shape == (len(metrics.COVERAGES),)
    want = [risk_at_coverage_loop(kappa, correct, c) for c in metrics.COVERAGES]
    np.testing.assert_allclose(curve, want, rtol=0, atol=1e-12)
    assert curve[-1] == pytest.approx(1 - correct.mean())  # everything accepted
    rows = metrics.risk_coverage_curve(np.stack([kappa, -kappa]), correct, (0.5, 1.0))
    assert rows.shape == (2, 2) and rows[0, 0] == risk_at_coverage_loop(kappa, correct, 0.5)


def test_eaurc_of_the_best_ranking_is_zero_not_a_rounding_below_it() -> None:
    """A κ that ranks every correct sample first is the best ranking: E-AURC 0 exactly (the
    two AURCs, summed in different orders, differ by rounding), inside its [0, 1] range."""
    rng = np.random.default_rng(3)
    for n in (7, 50, 333, 1000):
        correct = rng.random(n) < 0.9
        kappa = correct + rng.random(n) * 0.5  # every correct one above every wrong one
        assert metrics.eaurc(kappa, correct) == 0.0
