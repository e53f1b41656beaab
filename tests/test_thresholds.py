"""Rates at a threshold fixed on the ID validation samples (``tpr_at_val95``, ``fpr_at_val95``):
a loop over every candidate threshold as the oracle, and an open set run scored by hand from
the outputs it stored."""

from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import softmax

import oodsim
from oodsim import metrics
from oodsim.artifacts.keys import KAPPA, OUTPUTS, simulation_keys
from oodsim.errors import UnknownNameError
from oodsim.results import store_counts
from oodsim.store import Store
from tests.conftest import small_digits


def oracle_threshold(val: np.ndarray, keep: float) -> float:
    """The largest value t among the scores such that ``val >= t`` keeps at least ``keep``."""
    return max(t for t in np.unique(val) if np.mean(val >= t) >= keep - 1e-12)


def oracle_rates(kappa, is_ood, val, keep=0.95) -> tuple[float, float]:
    t = oracle_threshold(val, keep)
    return float(np.mean(kappa[~is_ood] >= t)), float(np.mean(kappa[is_ood] >= t))


#: scores with many ties (a few distinct values) or none
values = st.one_of(st.integers(0, 4).map(float), st.floats(-3, 3, allow_nan=False))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(values, min_size=1, max_size=60),
    st.floats(0.01, 1.0),
)
def test_the_threshold_is_the_highest_that_keeps_the_share(val: list, keep: float) -> None:
    val = np.array(val)
    t = metrics.validation_threshold(val, keep=keep)
    assert t == oracle_threshold(val, keep)
    assert np.mean(val >= t) >= keep - 1e-12


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(values, st.booleans()), min_size=2, max_size=60),
    st.lists(values, min_size=1, max_size=40),
)
def test_rates_match_the_loop(samples: list, val: list) -> None:
    kappa = np.array([k for k, _ in samples])
    is_ood = np.array([o for _, o in samples])
    is_ood[:2] = False, True
    val = np.array(val)
    got = metrics.evaluate(kappa, is_ood, ["tpr_at_val95", "fpr_at_val95"], val_kappa=val)
    assert (got["tpr_at_val95"], got["fpr_at_val95"]) == oracle_rates(kappa, is_ood, val)
    assert metrics.tpr_at_val95(kappa, is_ood, val) == got["tpr_at_val95"]
    assert metrics.fpr_at_val95(kappa, is_ood, val) == got["fpr_at_val95"]


def test_rows_each_take_their_own_validation_threshold() -> None:
    rng = np.random.default_rng(0)
    kappa, val = rng.normal(size=(3, 2, 50)), rng.normal(size=(3, 2, 20))
    is_ood = rng.random(50) < 0.4
    tpr, fpr = metrics.rates_at_validation_threshold(kappa, is_ood, val)
    assert tpr.shape == fpr.shape == (3, 2)
    for index in np.ndindex(3, 2):
        assert (tpr[index], fpr[index]) == oracle_rates(kappa[index], is_ood, val[index])
    shared_tpr, _ = metrics.rates_at_validation_threshold(kappa, is_ood, val[0, 0])
    assert shared_tpr[2, 1] == oracle_rates(kappa[2, 1], is_ood, val[0, 0])[0]


def test_twenty_validation_samples_keep_nineteen() -> None:
    """0.95 · 20 is 19.000000000000004 in floating point: the threshold still keeps 19."""
    val = np.arange(20.0)
    assert metrics.validation_threshold(val) == 1.0
    assert metrics.validation_threshold(val, keep=1.0) == 0.0
    assert metrics.validation_threshold(val, keep=0.5) == 10.0


def test_bad_input_is_refused_clearly() -> None:
    kappa, is_ood = np.array([0.1, 0.9, 0.5]), np.array([True, False, False])
    with pytest.raises(ValueError, match="needs val_kappa="):
        metrics.evaluate(kappa, is_ood, ["auroc", "fpr_at_val95"])
    with pytest.raises(ValueError, match=r"keep must be in \(0, 1\]"):
        metrics.validation_threshold([1.0, 2.0], keep=0.0)
    with pytest.raises(ValueError, match="val_kappa of shape"):
        metrics.rates_at_validation_threshold(np.ones((2, 3)), is_ood, np.ones((3, 4)))
    with pytest.raises(metrics.NonFiniteScoreError):
        metrics.fpr_at_val95(kappa, is_ood, [np.nan, 1.0])
    with pytest.raises(UnknownNameError, match="fpr_at_val95"):
        metrics.evaluate(kappa, is_ood, ["fpr_at_val"], val_kappa=kappa)


def test_the_records_say_what_they_need_and_their_direction() -> None:
    assert metrics.VALIDATION_METRICS == ("tpr_at_val95", "fpr_at_val95")
    for name in metrics.VALIDATION_METRICS:
        assert metrics.METRIC_INFO[name].needs_val_kappa and metrics.is_ood_metric(name)
    assert not metrics.higher_is_better("fpr_at_val95") and metrics.higher_is_better("tpr_at_val95")
    assert not metrics.is_ood_metric("ece") and metrics.is_ood_metric("aurc")


def test_severity_specs_refuse_the_validation_metrics() -> None:
    spec = oodsim.load("severity_fashion_mnist")
    with pytest.raises(UnknownNameError, match="metrics: 'fpr_at_val95' is not allowed"):
        attrs.evolve(spec, metrics=("auroc", "fpr_at_val95"))


@pytest.mark.slow  # trains a model
def test_an_open_set_run_fixes_each_detectors_threshold_on_its_validation_samples(
    tmp_path: Path,
) -> None:
    """msp's rates equal a hand computation from the stored logits; a model-based detector
    (ODIN) gets κ on the validation samples as a store entry of its own, computed only when a
    validation metric is asked: adding one to a finished run trains and infers nothing."""
    cache = tmp_path / "cache"
    first = small_digits(1, detectors=("msp", "odin"), metrics=("auroc", "accuracy"))
    oodsim.run(first, cache=cache, progress=False)  # one seed: in-process
    names = ("auroc", "fpr_at_val95", "tpr_at_val95", "aurc", "accuracy")
    spec = attrs.evolve(first, metrics=names)
    results = oodsim.run(spec, cache=cache, progress=False)
    assert store_counts(results)["computed"] == {"kappa": 1}  # ODIN on in_val, nothing else
    # a selective metric stores the risk-coverage curve: all accepted, the risk is the error
    curve = results["risk_coverage"].oodsim.sel(seed=0, method="msp")
    accuracy = float(results["score"].oodsim.sel(seed=0, method="msp", metric="accuracy"))
    assert float(curve.sel(coverage=1.0)) == pytest.approx(1 - accuracy)

    keys = simulation_keys(spec, 0)
    arrays = Store(cache).get(OUTPUTS, keys.outputs).arrays
    msp_of = {
        part: softmax(arrays[f"{part}.logits"], axis=1).max(axis=1)
        for part in ("in_val", "in_test", "out_test")
    }
    kappa = np.r_[msp_of["in_test"], msp_of["out_test"]]
    is_ood = np.arange(kappa.size) >= msp_of["in_test"].size
    want_tpr, want_fpr = oracle_rates(kappa, is_ood, msp_of["in_val"])
    msp = results["score"].oodsim.sel(seed=0, method="msp")
    np.testing.assert_allclose(float(msp.sel(metric="tpr_at_val95")), want_tpr, rtol=1e-12)
    np.testing.assert_allclose(float(msp.sel(metric="fpr_at_val95")), want_fpr, rtol=1e-12)
    assert 0.8 <= want_tpr <= 1.0

    assert keys.validation is not None and keys.validation.prefix == "in_val"
    assert len([kind for kind, _ in keys.kappa if kind == KAPPA]) == 3  # in_test, out_test, in_val
    assert simulation_keys(first, 0).validation is None
    odin = results["score"].oodsim.sel(seed=0, method="odin", metric="tpr_at_val95")
    assert 0.8 <= float(odin) <= 1.0
