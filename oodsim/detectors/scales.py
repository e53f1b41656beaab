"""The scale a detector's *confidence* lives on in the papers, as a map from its stored κ.

κ is stored on a scale that keeps every ranking (log-odds for softmax, −log H for entropy: see
:mod:`oodsim.detectors.logits`). Rankings — and so AUROC, AUPR, FPR — do not care about a
monotone transform, but averages do: the C-OOD benchmark (Galil, Dabbah, El-Yaniv, Algorithm 1)
defines a class's severity as the mean *confidence* of its samples, the softmax probability for
softmax response and −H for entropy. Averaged as log-odds, a few saturated samples (κ ≈ 40 where
p ≈ 1) dominate a class's mean and reorder the classes.

Each detector therefore declares its ``confidence_scale``:

- ``"kappa"`` (default, and for user detectors unless declared): κ itself is the paper's
  confidence (max logit, energy, Mahalanobis, KNN, ...);
- ``"probability"``: κ is the log-odds of a probability p, the confidence is ``p = expit(κ)``
  (softmax response, temperature scaling, ODIN, MC dropout);
- ``"negative_entropy"``: κ = −log H, the confidence is ``−H = −exp(−κ)`` (entropy).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from oodsim.detectors._scipy import expit
from oodsim.errors import UnknownNameError


def _negative_entropy(kappa: np.ndarray) -> np.ndarray:
    """−H from κ = −log H."""
    return -np.exp(-kappa)


#: name → the map from stored κ to the paper's confidence (strictly increasing in κ)
CONFIDENCE_SCALES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "kappa": np.asarray,
    "probability": expit,
    "negative_entropy": _negative_entropy,
}

#: What each scale's values are, for tables and plot axes.
SCALE_UNITS: dict[str, str] = {
    "kappa": "κ",
    "probability": "probability",
    "negative_entropy": "−entropy (nats)",
}


def check_scale(name: str) -> str:
    """``name`` if it is a known confidence scale; else an error naming the known ones."""
    if name not in CONFIDENCE_SCALES:
        raise UnknownNameError("confidence_scale", name, CONFIDENCE_SCALES)
    return name


def to_confidence(kappa: np.ndarray, scale: str) -> np.ndarray:
    """κ mapped to the paper's confidence scale ``scale``, float64 (same ranking)."""
    return np.asarray(CONFIDENCE_SCALES[check_scale(scale)](np.asarray(kappa, np.float64)))
