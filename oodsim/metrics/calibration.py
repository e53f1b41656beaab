"""Calibration of the classifier on its ID test samples: pure functions of the predicted class
probabilities (``(..., n, k)``, rows summing to 1) and the true labels (``(n,)`` integers).

They judge the classifier, not a detector: a run gives every method the same value, as it does
for ``accuracy``."""

from __future__ import annotations

from typing import Any

import numpy as np

#: Equal-width confidence bins of :func:`ece` (Guo et al. 2017).
ECE_BINS = 15


def _inputs(probabilities: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(labels)
    if p.ndim < 2 or y.ndim != 1 or p.shape[-2] != y.size or y.size == 0:
        raise ValueError(
            "probabilities must have shape (..., n, k) and labels (n,) with n > 0, got "
            f"{p.shape} and {y.shape}"
        )
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= p.shape[-1]:
        raise ValueError(f"labels must be integers in [0, {p.shape[-1]}), got {y.dtype}")
    if not np.isfinite(p).all():
        raise ValueError("probabilities must be finite")
    return p, y


def ece(probabilities: Any, labels: Any, *, n_bins: int = ECE_BINS) -> Any:
    """Expected calibration error of the top label (Guo et al., ICML 2017): the samples binned
    by their top probability into ``n_bins`` equal-width bins ((i - 1)/M, i/M], and the bins'
    |accuracy - confidence| averaged with their sample shares. Lower is better; in [0, 1].

    torchmetrics' ``MulticlassCalibrationError`` equals it except at the bin edges: it bins
    [(i - 1)/M, i/M) in float32 and gives a confidence of exactly 1.0 (a saturated softmax,
    or one within float32 rounding of it) a bin of its own."""
    p, y = _inputs(probabilities, labels)
    confidence = p.max(axis=-1)
    right = (p.argmax(axis=-1) == y).astype(np.float64)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    bins = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, n_bins - 1)
    n = y.size
    flat_conf = confidence.reshape(-1, n)
    flat_right = right.reshape(-1, n)
    flat_bins = bins.reshape(-1, n)
    out = np.empty(flat_conf.shape[0])
    for row in range(out.size):
        gap = np.bincount(
            flat_bins[row], weights=flat_right[row] - flat_conf[row], minlength=n_bins
        )
        out[row] = np.abs(gap).sum() / n
    return out.reshape(confidence.shape[:-1])[()]


def brier(probabilities: Any, labels: Any) -> Any:
    """Multiclass Brier score: the mean over samples of Σ_k (p_k - [y = k])², as
    ``sklearn.metrics.brier_score_loss`` computes it for more than two classes (for two it
    scores one column: half of this). Lower is better; in [0, 2]."""
    p, y = _inputs(probabilities, labels)
    onehot = np.eye(p.shape[-1])[y]
    return ((p - onehot) ** 2).sum(axis=-1).mean(axis=-1)[()]


def nll(probabilities: Any, labels: Any) -> Any:
    """Negative log-likelihood of the true labels (``sklearn.metrics.log_loss``, which clips
    probabilities to [eps, 1 - eps] with eps the float64 machine epsilon). Lower is better."""
    p, y = _inputs(probabilities, labels)
    eps = np.finfo(np.float64).eps
    picked = np.take_along_axis(p, np.broadcast_to(y[:, None], p.shape[:-1] + (1,)), axis=-1)
    return -np.log(np.clip(picked[..., 0], eps, 1.0 - eps)).mean(axis=-1)[()]
