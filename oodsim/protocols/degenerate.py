"""Degenerate simulations: a trained classifier whose closed-set accuracy is not above chance.

A training run that collapses (the network predicts one class, or learns nothing) still gives
every detector a κ and every metric a number, and those numbers would enter every mean and win
probability unnoticed. The rule, documented in docs/specs.md (``[degenerate]``):

- *chance* is the accuracy of always predicting the most frequent class of the ID test set
  (``1 / n_known`` for balanced classes), the best a classifier that learned nothing can do;
- the seed is degenerate when a one-sided binomial test of its ``hits`` correct predictions out
  of ``n`` against chance does not reject at level ``alpha``: ``P(X ≥ hits) ≥ alpha`` for
  ``X ~ Binomial(n, chance)``.

With ``alpha = 0.001`` and a few hundred test images that flags a model within a few points of
chance, and never a model that merely trained badly (42 % on six classes is kept).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from oodsim.results import DEGENERATE

#: The prefix of a ``failure`` that excludes a degenerate seed (not a crash: a run with
#: ``on_failure = "abort"`` goes on).
PREFIX = DEGENERATE


def chance_accuracy(labels: np.ndarray) -> float:
    """Accuracy of always predicting the most frequent label."""
    labels = np.asarray(labels)
    if labels.size == 0:
        raise ValueError("chance accuracy needs at least one label")
    return float(np.unique(labels, return_counts=True)[1].max() / labels.size)


def degenerate_reason(predictions: np.ndarray, labels: np.ndarray, alpha: float) -> str:
    """Why a classifier with these test ``predictions`` is degenerate, or "" when it is
    clearly above chance (binomial p-value below ``alpha``)."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    n = labels.size
    hits = int(np.count_nonzero(predictions == labels))
    chance = chance_accuracy(labels)
    p_value = float(stats.binom.sf(hits - 1, n, chance))  # P(X >= hits) by chance
    if p_value < alpha:
        return ""
    return (
        f"test accuracy {hits / n:.3f} ({hits}/{n}) is not above chance {chance:.3f} "
        f"(one-sided binomial p = {p_value:.2g} >= alpha = {alpha:g})"
    )


def is_degenerate_failure(failure: str) -> bool:
    """Whether a seed's ``failure`` is a degenerate-training exclusion (not a crash)."""
    return str(failure).startswith(PREFIX)
