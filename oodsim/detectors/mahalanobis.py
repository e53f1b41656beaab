"""Mahalanobis distance to class means with a tied covariance (Lee et al., NeurIPS 2018)."""

from __future__ import annotations

import numpy as np

from oodsim.detectors._checks import (
    DetectorInputError,
    as_float,
    at_least,
    fit_arrays,
    same_width,
)
from oodsim.detectors._registry import builtin
from oodsim.outputs import Outputs


def class_gaussians(features: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Class means (K, D) and the tied covariance (D, D), the MLE: scatter within classes / N."""
    x = as_float(features)
    classes, index = np.unique(labels, return_inverse=True)
    counts = np.bincount(index, minlength=len(classes)).astype(np.float64)
    means = np.zeros((len(classes), x.shape[1]))
    np.add.at(means, index, x)
    means /= counts[:, None]
    centered = x - means[index]
    return means, centered.T @ centered / len(x)


def whitening(covariance: np.ndarray, ridge: float) -> np.ndarray:
    """W with W Wᵀ = (Σ + λ·(tr Σ / D)·I)⁻¹: the ridge is relative, so it is unit-free."""
    eigenvalues, eigenvectors = np.linalg.eigh(covariance)
    eigenvalues = np.clip(eigenvalues, 0.0, None)
    scale = eigenvalues.mean() if eigenvalues.mean() > 0 else 1.0
    return eigenvectors / np.sqrt(eigenvalues + ridge * scale)


def min_mahalanobis(features: np.ndarray, means: np.ndarray, whiten: np.ndarray) -> np.ndarray:
    """min_k sqrt((x − μ_k)ᵀ P (x − μ_k)) with P = W Wᵀ, via one matrix product per call."""
    center = means.mean(axis=0)  # shrinks norms before the expanded square: less cancellation
    z = (as_float(features) - center) @ whiten
    m = (means - center) @ whiten
    squared = (z * z).sum(1)[:, None] - 2.0 * z @ m.T + (m * m).sum(1)[None, :]
    return np.sqrt(np.clip(squared.min(axis=1), 0.0, None))


@builtin(
    "mahalanobis",
    family="feature",
    needs={"features"},
    fit_on="train",
    limits={"ridge": at_least(0)},
)
def mahalanobis(outputs: Outputs, *, fit: Outputs, ridge: float = 1e-6) -> np.ndarray:
    """Negative minimum Mahalanobis distance to the class means, tied covariance from train.

    ``ridge`` λ ≥ 0 adds λ·(mean eigenvalue) to the covariance's diagonal, so a singular
    covariance (D > N − K, dead units) still gives finite, scale-free distances.
    """
    train = fit_arrays("mahalanobis", fit, "train", features=True, labels=True)
    if not (isinstance(ridge, int | float) and np.isfinite(ridge) and ridge >= 0):
        raise DetectorInputError(
            f"detector 'mahalanobis': ridge must be a number >= 0, got {ridge!r}"
        )
    same_width("mahalanobis", "features", outputs.features, train.features)
    means, covariance = class_gaussians(train.features, train.labels)
    return -min_mahalanobis(outputs.features, means, whitening(covariance, float(ridge)))
