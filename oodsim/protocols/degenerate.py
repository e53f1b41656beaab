"""Degenerate simulations: a trained classifier whose predictions are not above chance.

A training run that collapses (the network predicts one class, or learns nothing) still gives
every detector a κ and every metric a number, and those numbers would enter every mean and win
probability unnoticed. The rule, documented in docs/specs.md (``[degenerate]``):

- it is judged on the **validation split** (``in_val``), never on the test samples the OOD
  metrics are computed on, so the verdict is not selected on the numbers it then filters;
- the statistic is the **balanced accuracy** (mean recall over the classes present), whose
  chance level is ``1 / K`` for *any* classifier that ignores its input, however imbalanced the
  classes (plain accuracy would call a classifier that always predicts the majority class
  "70 % accurate", and one with balanced accuracy 0.59 on an imbalanced set "at chance");
- the seed is degenerate when a one-sided permutation test of label–prediction independence
  (the labels' and predictions' counts held fixed) does not reject at level ``alpha``:
  ``p = (1 + #{permuted balanced accuracy ≥ observed}) / (1 + B)``, with B = 9,999
  permutations from a fixed stream (the same predictions always give the same verdict). A
  balanced accuracy so far above chance that a concentration inequality for permutation
  statistics (:func:`permutation_tail_bound`) bounds the exact p-value below ``alpha`` is
  decided without shuffling, at every ``alpha`` and whatever the class or prediction counts;
  so is one with no null spread (p = 1).

A verdict the permutation test decided is stored (:mod:`oodsim.artifacts.verdicts`, keyed by
the outputs judged and the rule's parameters) where the seed is scored, and loaded on every
rerun (:func:`stored_judgement`); the closed-form ones are decided again from the outputs.

Excluding degenerate seeds changes the estimand from E[score] to E[score | the test rejects
on this validation split at this alpha]: a weak but real classifier is excluded at a rate set by
the validation size and ``alpha`` (``benchmarks/degenerate_rates.py``, docs/specs.md).
``[degenerate] keep = true`` keeps the first, and ``oodsim run`` prints both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs
import numpy as np

from oodsim.artifacts.verdicts import stored_verdict, verdict_key
from oodsim.specs.seeded import N_PERMUTATIONS
from oodsim.store import Store

_BLOCK_ELEMENTS = 1 << 22  # permuted predictions per block (~4 M booleans)


def _encoded(predictions: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Labels as positions 0..K-1 of the classes present; predictions of other classes as -1."""
    predictions, labels = np.asarray(predictions).ravel(), np.asarray(labels).ravel()
    if labels.size == 0:
        raise ValueError("balanced accuracy needs at least one label")
    if predictions.shape != labels.shape:
        raise ValueError(
            f"predictions of shape {predictions.shape} and labels of shape {labels.shape} differ"
        )
    classes, codes = np.unique(labels, return_inverse=True)
    position = np.searchsorted(classes, predictions)
    inside = (position < classes.size) & (
        classes[np.minimum(position, classes.size - 1)] == predictions
    )
    return np.where(inside, position, -1), codes.ravel(), classes.size


def _balanced(hits: np.ndarray, codes: np.ndarray, n_classes: int) -> np.ndarray:
    """Balanced accuracy of rows of hit indicators (..., n) against class codes (n,)."""
    one_hot = np.zeros((codes.size, n_classes))
    one_hot[np.arange(codes.size), codes] = 1.0
    per_class = hits @ one_hot / one_hot.sum(axis=0)
    return per_class.mean(axis=-1)


def balanced_accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Mean recall over the classes present in ``labels`` (sklearn's
    ``balanced_accuracy_score``); chance is ``1 / K`` for a classifier that ignores its input."""
    predicted, codes, n_classes = _encoded(predictions, labels)
    return float(_balanced((predicted == codes).astype(float), codes, n_classes))


def independence_p_value(
    predictions: np.ndarray, labels: np.ndarray, n_permutations: int = N_PERMUTATIONS
) -> float:
    """One-sided permutation p-value of the balanced accuracy under label–prediction
    independence: the share of ``n_permutations`` shuffles of the predictions (plus the
    observed one) whose balanced accuracy reaches the observed. Deterministic (seed 0)."""
    predicted, codes, n_classes = _encoded(predictions, labels)
    observed = _balanced((predicted == codes).astype(float), codes, n_classes)
    rng = np.random.default_rng(0)
    block = max(1, _BLOCK_ELEMENTS // codes.size)
    reached = 0
    for start in range(0, n_permutations, block):
        rows = min(block, n_permutations - start)
        shuffled = rng.permuted(np.broadcast_to(predicted, (rows, codes.size)), axis=1)
        permuted = _balanced((shuffled == codes).astype(float), codes, n_classes)
        reached += int(np.count_nonzero(permuted >= observed - 1e-12))
    return (1 + reached) / (1 + n_permutations)


def null_moments(predictions: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Exact mean and standard deviation of the balanced accuracy over all permutations of the
    predictions (label–prediction independence with both margins fixed).

    The balanced accuracy is ``T = Σ_i A(i, π(i))`` with ``A(i, j) = [pred_j = y_i] / (K·n_{y_i})``,
    a linear permutation statistic, whose moments are (Hoeffding 1951) ``E T = Σ_ij A_ij / n``
    and ``Var T = Σ_ij d_ij² / (n − 1)``, ``d_ij = A_ij − Ā_i· − Ā_·j + Ā_··``. ``A`` depends on
    (label class, predicted class) only, so both sums run over K × (K + 1) blocks."""
    predicted, codes, n_classes = _encoded(predictions, labels)
    n = codes.size
    per_label = np.bincount(codes, minlength=n_classes).astype(float)
    # predicted classes 0..K-1, and K for a prediction of a class absent from the labels
    per_pred = np.bincount(np.where(predicted < 0, n_classes, predicted), minlength=n_classes + 1)
    a = np.zeros((n_classes, n_classes + 1))
    a[np.arange(n_classes), np.arange(n_classes)] = 1.0 / (n_classes * per_label)
    row = a @ per_pred / n
    column = per_label @ a / n
    grand = per_label @ a @ per_pred / n**2
    d = a - row[:, None] - column[None, :] + grand
    variance = float(per_label @ (d**2) @ per_pred) / (n - 1) if n > 1 else 0.0
    return float(n * grand), float(np.sqrt(max(variance, 0.0)))


def permutation_tail_bound(score: float, mean: float, largest_entry: float) -> float:
    """An upper bound on the exact permutation p-value ``P(T ≥ score)`` of a linear permutation
    statistic ``T = Σ_i a(i, π(i))`` with entries in ``[0, largest_entry]`` and mean ``mean``:
    Chatterjee's inequality (*Stein's method for concentration inequalities*, Probab. Theory
    Relat. Fields 138, 2007, Proposition 1.1) ``P(|T − E T| ≥ t) ≤ 2 exp(−t² / (4 E T + 2 t))``
    for entries in [0, 1], applied to ``T / largest_entry``. It needs no normal approximation,
    so it holds for a rarely predicted class: one correct prediction of a class of 20 among
    10,000 validation images is 22 null SDs above chance, with an exact p of 0.002 and a bound
    near 1 (the permutation test decides), while a trained classifier's bound is below 1e-20.
    """
    t = (score - mean) / largest_entry
    if t <= 0:
        return 1.0
    return min(1.0, 2.0 * math.exp(-(t * t) / (4.0 * mean / largest_entry + 2.0 * t)))


#: The subset of a simulation's outputs the rule judges.
SUBSET = "in_val"
#: Version of the permutation test (statistic, shuffle stream): stored verdicts are keyed by
#: it (:mod:`oodsim.artifacts.verdicts`); bump it when a stored p-value would change.
RULE_VERSION = "1"


@attrs.frozen
class Verdict:
    """The rule's verdict on one classifier's validation predictions: its balanced accuracy
    on ``n`` samples of ``n_classes`` classes and, where the permutation test decided, its
    p-value (None: clearly above chance without shuffling)."""

    degenerate: bool
    balanced_accuracy: float
    n: int
    n_classes: int
    p_value: float | None
    alpha: float

    @classmethod
    def decided(
        cls, score: float, n: int, n_classes: int, p_value: float | None, alpha: float
    ) -> Verdict:
        """The verdict at level ``alpha``: degenerate unless ``p_value < alpha`` (None: clearly
        above chance)."""
        degenerate = p_value is not None and not p_value < alpha
        return cls(degenerate, score, n, n_classes, p_value, alpha)

    @property
    def reason(self) -> str:
        """Why the classifier is degenerate, or "" when it is not."""
        if not self.degenerate:
            return ""
        return (
            f"validation balanced accuracy {self.balanced_accuracy:.3f} (n = {self.n}) is not "
            f"above chance {1 / self.n_classes:.3f} (permutation test of independence p = "
            f"{self.p_value:.2g} >= alpha = {self.alpha:g})"
        )

    def arrays(self) -> dict[str, np.ndarray]:
        """The verdict as the 0-d arrays of its store entry (alpha is in the entry's key)."""
        return {
            "degenerate": np.asarray(self.degenerate),
            "balanced_accuracy": np.asarray(self.balanced_accuracy, dtype=np.float64),
            "n": np.asarray(self.n, dtype=np.int64),
            "n_classes": np.asarray(self.n_classes, dtype=np.int64),
            "p_value": np.asarray(np.nan if self.p_value is None else self.p_value),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], alpha: float) -> Verdict:
        """The verdict :meth:`arrays` stored, at the ``alpha`` its key was made with."""
        p_value = float(arrays["p_value"])
        return cls(
            degenerate=bool(arrays["degenerate"]),
            balanced_accuracy=float(arrays["balanced_accuracy"]),
            n=int(arrays["n"]),
            n_classes=int(arrays["n_classes"]),
            p_value=None if np.isnan(p_value) else p_value,
            alpha=alpha,
        )


def closed_form_verdict(
    predictions: np.ndarray, labels: np.ndarray, alpha: float
) -> Verdict | None:
    """The verdict where it needs no shuffles, in microseconds: a balanced accuracy whose exact
    p-value :func:`permutation_tail_bound` puts below ``alpha`` (above chance, at any
    ``alpha``), or no null spread at all (every shuffle gives the observed value, e.g. one
    class predicted: p = 1). None otherwise: the permutation test decides."""
    predicted, codes, n_classes = _encoded(predictions, labels)
    score = float(_balanced((predicted == codes).astype(float), codes, n_classes))
    mean, sd = null_moments(predictions, labels)
    # the statistic's entries are [prediction = label] / (K · the label's count)
    largest = 1.0 / (n_classes * int(np.bincount(codes, minlength=n_classes).min()))
    if sd > 0 and permutation_tail_bound(score, mean, largest) < alpha:
        return Verdict.decided(score, codes.size, n_classes, None, alpha)
    if sd == 0:
        return Verdict.decided(score, codes.size, n_classes, 1.0, alpha)
    return None


def permutation_verdict(
    predictions: np.ndarray, labels: np.ndarray, alpha: float, n_permutations: int = N_PERMUTATIONS
) -> Verdict:
    """The verdict of the permutation test (:func:`independence_p_value`; ~30 ms for 9,999
    shuffles of a few hundred predictions)."""
    predicted, codes, n_classes = _encoded(predictions, labels)
    score = float(_balanced((predicted == codes).astype(float), codes, n_classes))
    p_value = independence_p_value(predictions, labels, n_permutations)
    return Verdict.decided(score, codes.size, n_classes, p_value, alpha)


def judge(predictions: np.ndarray, labels: np.ndarray, alpha: float) -> Verdict:
    """The rule's verdict on a classifier with these validation ``predictions``: in closed
    form where it can be, else by the permutation test."""
    found = closed_form_verdict(predictions, labels, alpha)
    return found if found is not None else permutation_verdict(predictions, labels, alpha)


def degenerate_reason(predictions: np.ndarray, labels: np.ndarray, alpha: float) -> str:
    """Why a classifier with these validation ``predictions`` is degenerate, or "" when its
    balanced accuracy is clearly above chance (permutation p-value below ``alpha``)."""
    return judge(predictions, labels, alpha).reason


def stored_judgement(
    store: Store, outputs: str, arrays: Mapping[str, np.ndarray], alpha: float, what: str
) -> Verdict:
    """The rule's verdict on the :data:`SUBSET` of the outputs entry with key ``outputs``,
    whose ``arrays`` the caller read: in closed form where it can be, else the stored
    permutation test's (:mod:`oodsim.artifacts.verdicts`), computed here and stored the
    first time. ``what`` says whose outputs they are, for the entry's description."""
    predictions = arrays[f"{SUBSET}.logits"].argmax(axis=1)
    labels = arrays[f"{SUBSET}.labels"]
    found = closed_form_verdict(predictions, labels, alpha)
    if found is not None:
        return found
    key = verdict_key(outputs, SUBSET, alpha, N_PERMUTATIONS, RULE_VERSION)
    record = stored_verdict(
        store,
        key,
        lambda: permutation_verdict(predictions, labels, alpha).arrays(),
        f"degenerate rule on {SUBSET} of {what} (alpha={alpha:g})",
    )
    return Verdict.from_arrays(record, alpha)
