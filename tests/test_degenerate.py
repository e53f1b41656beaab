"""Degenerate simulations (a classifier not above chance) are named and excluded; the
parameters every detector was scored with (temperature scaling's fitted T) are recorded."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import numpy as np
import pytest
from scipy import stats as sps

import oodsim
from oodsim.detectors import confidence, get_detector
from oodsim.detectors.temperature import T_BOUNDS, fit_temperature
from oodsim.outputs import Outputs
from oodsim.protocols.degenerate import chance_accuracy, degenerate_reason, is_degenerate_failure
from oodsim.specs import DegenerateSpec
from oodsim.stats import estimate
from tests.conftest import cli_run_on, digits_toml, small_digits


@pytest.mark.parametrize("n_hits", [0, 40, 55, 60, 90, 240])
def test_binomial_rule_matches_scipy(n_hits: int) -> None:
    """The rule is scipy's one-sided binomial test against the majority-class accuracy."""
    labels = np.repeat(np.arange(6), 40)  # 240 balanced test labels: chance 1/6
    predictions = np.where(np.arange(240) < n_hits, labels, (labels + 1) % 6)
    reason = degenerate_reason(predictions, labels, alpha=1e-3)
    oracle = sps.binomtest(n_hits, 240, 1 / 6, alternative="greater").pvalue
    assert (reason == "") == (oracle < 1e-3)
    if reason:
        assert f"{n_hits / 240:.3f}" in reason and "0.167" in reason and f"{oracle:.2g}" in reason


def test_chance_is_the_majority_class_share() -> None:
    labels = np.array([0] * 70 + [1] * 20 + [2] * 10)
    assert chance_accuracy(labels) == 0.7
    always_zero = np.zeros(100, int)  # a collapsed model predicting the majority class
    assert degenerate_reason(always_zero, labels, alpha=1e-3).startswith("test accuracy 0.700")
    with pytest.raises(ValueError):
        chance_accuracy(np.array([]))


def test_fitted_temperature_is_reported_and_scores_the_same() -> None:
    rng = np.random.default_rng(0)
    val = Outputs(logits=rng.normal(0, 3, (200, 6)), labels=rng.integers(0, 6, 200))
    test = Outputs(logits=rng.normal(0, 3, (300, 6)))
    detector = get_detector("temperature")
    params = detector.fitted(val, {})
    assert params == {"temperature": fit_temperature(val.logits, val.labels)}
    np.testing.assert_array_equal(
        confidence("temperature", test, fit=val), confidence("temperature", test, **params)
    )
    assert detector.fitted(val, {"temperature": 2.0}) == {"temperature": 2.0}  # fixed: no fit
    assert get_detector("msp").fitted(val, {}) == {}


def test_untrained_classifiers_are_excluded_unless_kept(
    cluster_address: str, cache: Path, tmp_path: Path
) -> None:
    """A learning rate of 1e-7 leaves the network at its random initialisation: chance-level
    accuracy. Its seeds are named and excluded by default; ``keep`` re-scores them into the
    estimates from the same cache (the rule changes scoring, not training)."""
    spec = small_digits(
        3,
        detectors=("msp", "temperature"),
        training=attrs.evolve(small_digits().training, lr=1e-7, max_epochs=1, patience=1),
    )
    excluded = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    failures = [str(f) for f in excluded["failure"].values]
    assert all(is_degenerate_failure(f) for f in failures), failures
    assert excluded.attrs["n_failed"] == 3
    assert all("not above chance" in str(r) for r in excluded["degenerate"].values)
    assert np.isfinite(excluded["score"]).all()  # scored, kept in the file, masked in estimates
    assert (estimate(excluded)["n"] == 0).all()

    kept_spec = attrs.evolve(spec, degenerate=DegenerateSpec(keep=True))
    kept = oodsim.run(kept_spec, address=cluster_address, cache=cache, progress=False)
    assert oodsim.results.store_counts(kept)["computed"] == {}
    assert (kept["failure"] == "").all() and kept.attrs["n_failed"] == 0
    assert (kept["degenerate"] == excluded["degenerate"]).all()
    assert (estimate(kept)["n"] == 3).all()

    for seed in kept.seed.values:
        params = kept["detector_params"].sel(seed=seed)
        assert json.loads(str(params.sel({"method": "msp"}).item())) == {}
        t = json.loads(str(params.sel({"method": "temperature"}).item()))["temperature"]
        assert T_BOUNDS[0] <= t <= T_BOUNDS[1]


def test_trained_classifiers_are_not_degenerate(cluster_address: str, cache: Path) -> None:
    results = oodsim.run(small_digits(2), address=cluster_address, cache=cache, progress=False)
    assert (results["failure"] == "").all() and (results["degenerate"] == "").all()


def test_run_summary_names_degenerate_seeds(
    cluster_address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_path = digits_toml(tmp_path / "s.toml", 2, lr="1e-7", max_epochs="1")
    assert cli_run_on(cluster_address, spec_path, tmp_path) == 0
    out = capsys.readouterr().out
    assert "2 of 2 simulations excluded from the estimates above:" in out
    assert "2 x degenerate: classifier not above chance" in out
    for seed in (0, 1):
        assert f"    seed {seed}: test accuracy 0." in out
    assert "2 simulations (2 excluded)" in out
