"""Rates at a threshold fixed on validation data: what a deployed detector gets.

A deployment cannot pick its threshold on the test set (that is what FPR95 does). It fixes the
threshold on held-out in-distribution data, here the ID validation samples, so that a share
``keep`` of them is accepted, and then meets test data: the test TPR (ID test samples accepted)
drifts from ``keep`` with the sampling of both sets, and the test FPR (OOD test samples
accepted) is the number a deployment sees. κ is a confidence: a sample is accepted when
``κ >= threshold``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from oodsim.metrics.inputs import as_is_ood, as_kappa, check_finite, check_rate, class_counts


def validation_threshold(val_kappa: Any, *, keep: float = 0.95, context: str = "") -> Any:
    """The highest threshold ``t`` such that ``κ >= t`` accepts at least ``keep`` of the
    validation scores ``val_kappa`` (shape ``(..., m)``; one threshold per row, float64).

    At least ``ceil(keep · m)`` samples are accepted; ties at ``t`` are accepted together, so
    more may be. ``keep = 1`` gives the smallest score."""
    check_rate(keep, "keep")
    val = as_kappa(val_kappa, context)
    check_finite(val, context)
    m = val.shape[-1]
    # keep · m rounded first: 0.95 · 20 is 19.000000000000004 in floating point, not above 19
    accepted = max(1, math.ceil(round(keep * m, 9)))
    return np.sort(val, axis=-1)[..., m - accepted].astype(np.float64)[()]


def rates_at_validation_threshold(
    kappa: Any, is_ood: Any, val_kappa: Any, *, keep: float = 0.95, context: str = ""
) -> tuple[Any, Any]:
    """``(tpr, fpr)`` on the test scores ``kappa`` (``(..., n)``, ``is_ood`` marking the OOD
    samples) at :func:`validation_threshold` of ``val_kappa``: the shares of ID and of OOD
    test samples with ``κ >= t``. ``val_kappa``'s leading shape broadcasts to ``kappa``'s
    (one validation set per row, or one for all rows)."""
    scores = as_kappa(kappa, context)
    check_finite(scores, context)
    batch = scores.shape[:-1]
    ood = as_is_ood(is_ood, scores.shape, context)
    n_id, n_ood = class_counts(ood, batch, context)
    threshold = validation_threshold(val_kappa, keep=keep, context=context)
    try:
        threshold = np.broadcast_to(threshold, batch).reshape(-1, 1)
    except ValueError:
        raise ValueError(
            f"val_kappa of shape {np.shape(val_kappa)} does not match kappa of shape "
            f"{scores.shape}; expected leading dimensions that broadcast to kappa's"
        ) from None
    accepted = scores.reshape(-1, scores.shape[-1]) >= threshold
    tpr = np.count_nonzero(accepted & ~ood, axis=-1) / n_id
    fpr = np.count_nonzero(accepted & ood, axis=-1) / n_ood
    return tpr.reshape(batch)[()], fpr.reshape(batch)[()]


def tpr_at_val95(kappa: Any, is_ood: Any, val_kappa: Any, *, context: str = "") -> Any:
    """Share of ID test samples accepted at the threshold that keeps 95% of the ID validation
    samples (:func:`rates_at_validation_threshold`); 0.95 up to sampling."""
    return rates_at_validation_threshold(kappa, is_ood, val_kappa, context=context)[0]


def fpr_at_val95(kappa: Any, is_ood: Any, val_kappa: Any, *, context: str = "") -> Any:
    """Share of OOD test samples accepted at the threshold that keeps 95% of the ID
    validation samples (:func:`rates_at_validation_threshold`). Lower is better."""
    return rates_at_validation_threshold(kappa, is_ood, val_kappa, context=context)[1]
