"""Calibration metrics against their oracles (torchmetrics' ECE, scikit-learn's Brier score
and log loss), and per seed in an open set run, where every method shares the classifier's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from sklearn.metrics import brier_score_loss, log_loss

import oodsim
from oodsim import metrics
from tests.conftest import small_digits


@st.composite
def predictions(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities (n, k), labels (n,)): softmax of random logits, sharp or flat."""
    n, k = draw(st.integers(1, 300)), draw(st.integers(2, 8))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    logits = rng.normal(size=(n, k)) * draw(st.floats(0.05, 8.0))
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True), rng.integers(0, k, n)


def calibration_error_oracle(n_classes: int):  # noqa: ANN201
    """torchmetrics' ECE (imported here: torchmetrics takes about 3 s to import, which every
    collection of the suite would pay)."""
    from torchmetrics.classification import MulticlassCalibrationError

    return MulticlassCalibrationError(num_classes=n_classes, n_bins=15, norm="l1")


def _on_an_edge_in_float32(p: np.ndarray) -> bool:
    """Whether a top probability lies on a bin edge in torchmetrics' float32, where its bins
    ([lo, hi), and 1.0 alone) and Guo et al.'s ((lo, hi]) part."""
    confidence = p.max(axis=1).astype(np.float32)
    edges = np.linspace(0.0, 1.0, 16).astype(np.float32)
    return bool(np.isin(confidence, edges).any())


@settings(max_examples=100, deadline=None)
@given(predictions())
def test_ece_is_torchmetrics_multiclass_calibration_error(data: tuple) -> None:
    p, y = data
    assume(not _on_an_edge_in_float32(p))
    oracle = calibration_error_oracle(p.shape[1])
    want = float(oracle(torch.as_tensor(p), torch.as_tensor(y)))
    assert metrics.ece(p, y) == pytest.approx(want, abs=1e-6)  # torchmetrics sums in float32


@settings(max_examples=100, deadline=None)
@given(predictions())
def test_brier_and_nll_are_sklearns(data: tuple) -> None:
    p, y = data
    k = p.shape[1]
    sklearn_brier = brier_score_loss(y, p, labels=list(range(k)))
    # for two classes scikit-learn scores one column: half of the sum over both
    assert metrics.brier(p, y) == pytest.approx(sklearn_brier * (2 if k == 2 else 1), abs=1e-12)
    assert metrics.nll(p, y) == pytest.approx(log_loss(y, p, labels=list(range(k))), abs=1e-12)


def test_a_saturated_confidence_is_in_the_last_bin_not_one_of_its_own() -> None:
    """Guo et al.'s bins are right-closed: confidence 1.0 shares the last bin with 0.981
    (torchmetrics gives it a sixteenth bin, and so a larger ECE)."""
    p = np.array([[1.0, 0.0], [0.981, 0.019], [0.3, 0.7]])
    y = np.array([1, 0, 0])
    last = abs(0.5 - (1.0 + 0.981) / 2) * 2 / 3  # the two top bin samples, one right
    assert metrics.ece(p, y) == pytest.approx(last + 0.7 / 3)
    oracle = calibration_error_oracle(2)
    alone = (1.0 + (1 - 0.981)) / 3 + 0.7 / 3
    assert float(oracle(torch.as_tensor(p), torch.as_tensor(y))) == pytest.approx(alone, abs=1e-6)


def test_known_values_and_bad_input() -> None:
    p = np.array([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7]])
    y = np.array([0, 1, 1])
    # 15 bins of width 1/15: each sample alone in its bin, |right - confidence| each
    assert metrics.ece(p, y) == pytest.approx((0.1 + 0.6 + 0.3) / 3)
    assert metrics.brier(p, y) == pytest.approx((0.02 + 0.72 + 0.18) / 3)
    assert metrics.nll(p, y) == pytest.approx(-np.mean(np.log([0.9, 0.4, 0.7])))
    with pytest.raises(ValueError, match="labels must be integers"):
        metrics.ece(p, np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="shape"):
        metrics.brier(p, np.array([0, 1]))


@pytest.mark.slow  # trains a model
def test_an_open_set_run_scores_the_classifiers_calibration_per_seed(tmp_path: Path) -> None:
    names = ("auroc", "ece", "brier", "nll", "accuracy")
    spec = small_digits(1, detectors=("msp", "energy"), metrics=names)
    results = oodsim.run(spec, cache=tmp_path / "cache", progress=False)  # one seed: in-process
    for name in ("ece", "brier", "nll", "accuracy"):
        values = results["score"].oodsim.sel(seed=0, metric=name).values
        assert np.isfinite(values).all() and (values == values.flat[0]).all(), name
    assert 0 < float(results["score"].oodsim.sel(seed=0, metric="ece", method="msp")) < 0.5
