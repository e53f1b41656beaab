"""Detectors that read only the logits: MSP, entropy, max logit, energy.

Softmax scores saturate in floating point: max softmax rounds to exactly 1.0 once the other
classes hold less than ~1.1e-16 of the mass, and the entropy to exactly 0 soon after. The κ of
every softmax-based detector is therefore a strictly monotone transform of its probability-scale
score that stays representable over the whole range (see docs/detectors.md, "Floating point"):

- max softmax p → its log-odds ``log p − log(1 − p)``, computed as ``−logsumexp_{j≠top}(d_j)``
  from the gaps ``d_j = z_j − z_top`` without forming p; ``p = expit(κ)``;
- entropy H → ``−log H``, computed from log-probabilities; ``H = exp(−κ)``.

The helpers that take log-probabilities serve MC dropout too (its mean softmax is formed in
log space).
"""

from __future__ import annotations

import numpy as np

from oodsim.detectors._checks import DetectorInputError, as_float, greater_than, positive
from oodsim.detectors._registry import builtin
from oodsim.detectors._scipy import logsumexp
from oodsim.outputs import Outputs

_LOG_HALF = float(np.log(0.5))


def _two_classes(name: str, array: np.ndarray) -> None:
    if array.ndim != 2 or (len(array) and array.shape[1] < 2):
        raise DetectorInputError(
            f"{name} needs (n, C) scores with C >= 2 classes, got shape {array.shape}"
        )


def _top_and_rest(log_p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(top index, log p_top, log Σ_{j≠top} p_j) per row of log-probabilities (or logit gaps).

    The rest is summed in log space over the other classes only, so it never loses the small
    terms to the top one: it is exact to relative rounding however confident the row is.
    """
    top = np.argmax(log_p, axis=1)
    rows = np.arange(len(log_p))
    others = log_p.copy()
    others[rows, top] = -np.inf
    return top, log_p[rows, top], logsumexp(others, axis=1)


def max_softmax_log_odds(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Log-odds ``log p − log(1 − p)`` of p = max_c softmax(z / T)_c; ``p = expit(κ)``.

    With d_j = (z_j − z_top)/T ≤ 0, 1 − p = p·Σ_{j≠top} e^{d_j}, so κ = −logsumexp_{j≠top} d_j:
    one formula, strictly increasing in the exact p over its whole range [1/C, 1), and it never
    rounds to a constant (p itself is exactly 1.0 in float64 once κ > ~37).
    """
    z = as_float(logits)
    _two_classes("max softmax", z)
    gaps = (z - z.max(axis=1, keepdims=True)) / temperature
    return 0.0 - _top_and_rest(gaps)[2]  # 0 − x: a tie row gives +0.0, not −0.0


def log_odds_of_top(log_p: np.ndarray) -> np.ndarray:
    """Log-odds ``log p_top − log Σ_{j≠top} p_j`` of the largest probability, from log p.

    ``log p_top`` may round to 0 for a confident row; the rest term is exact to relative
    rounding, so κ keeps ranking such rows (the lost part of log p_top is below κ's last bit).
    """
    log_p = as_float(log_p)
    _two_classes("log-odds", log_p)
    _, log_top, log_rest = _top_and_rest(log_p)
    return log_top - log_rest


def _log_entropy(log_p: np.ndarray, neg_log_top: np.ndarray) -> np.ndarray:
    """log H with H = Σ_c p_c (−log p_c), summed in log space (every term is ≥ 0).

    ``neg_log_top`` is −log p_top computed accurately by the caller (it is tiny and would round
    to 0 as −log_p[top]); the other classes have p_j ≤ ½, hence −log p_j ≥ log 2 > 0.
    """
    rows = np.arange(len(log_p))
    top = np.argmax(log_p, axis=1)
    minus = -log_p
    minus[rows, top] = neg_log_top
    with np.errstate(divide="ignore", invalid="ignore"):  # p = 0 or −log p = 0 adds nothing
        terms = np.where(np.isneginf(log_p), -np.inf, log_p + np.log(minus))
    return logsumexp(terms, axis=1)


def negative_log_entropy_of_log_probs(log_p: np.ndarray) -> np.ndarray:
    """−log H(p) from log-probabilities (rows of log p that sum to 1 in probability).

    −log p_top is taken as −log1p(−(1 − p_top)) from the log-sum of the other classes when
    p_top > ½ (accurate however small 1 − p_top is), and as −log p_top otherwise.
    """
    log_p = as_float(log_p)
    _two_classes("entropy", log_p)
    _, log_top, log_rest = _top_and_rest(log_p)
    neg_log_top = np.where(log_rest < _LOG_HALF, -np.log1p(-np.exp(log_rest)), -log_top)
    return -_log_entropy(log_p, neg_log_top)


def negative_log_entropy(logits: np.ndarray) -> np.ndarray:
    """−log H(softmax(z)), H the entropy in nats; ``H = exp(−κ)``.

    With d = z − z_top and a = logsumexp_{j≠top} d_j: −log p_top = L = log1p(e^a) (np.logaddexp,
    exact even when e^a ≪ 1e-16) and log p_j = d_j − L; then H = Σ_c p_c(−log p_c) is summed in
    log space, term by term ≥ 0, so no cancellation and no underflow of H (κ ≈ margin − log(1 +
    margin) for a near-one-hot row instead of −H = −0.0).
    """
    z = as_float(logits)
    _two_classes("entropy", z)
    gaps = z - z.max(axis=1, keepdims=True)
    _, _, rest = _top_and_rest(gaps)
    neg_log_top = np.logaddexp(0.0, rest)
    return -_log_entropy(gaps - neg_log_top[:, None], neg_log_top)


def max_logit(logits: np.ndarray) -> np.ndarray:
    """max_c z_c."""
    return as_float(logits).max(axis=1)


def negative_energy(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """T · logsumexp(z / T), the negative free energy."""
    return temperature * logsumexp(as_float(logits) / temperature, axis=1)


@builtin(
    "msp", family="softmax / logit", needs={"logits"}, version="2", confidence_scale="probability"
)
def msp(outputs: Outputs, *, fit: Outputs | None = None) -> np.ndarray:
    """Maximum softmax probability (Hendrycks & Gimpel, ICLR 2017), as its log-odds.

    κ = log p − log(1 − p) with p = max_c softmax(z)_c (``scipy.special.expit(κ)`` gives p back):
    the same ranking as p, without p's rounding to exactly 1.0 for confident rows.
    """
    return max_softmax_log_odds(outputs.logits)


@builtin(
    "entropy",
    family="softmax / logit",
    needs={"logits"},
    version="2",
    confidence_scale="negative_entropy",
)
def entropy(outputs: Outputs, *, fit: Outputs | None = None) -> np.ndarray:
    """Softmax entropy H (in nats), as κ = −log H: the ranking of −H, never rounded to 0.

    ``exp(−κ)`` gives H back.
    """
    return negative_log_entropy(outputs.logits)


@builtin("max_logit", family="softmax / logit", needs={"logits"})
def max_logit_detector(outputs: Outputs, *, fit: Outputs | None = None) -> np.ndarray:
    """Maximum logit (Hendrycks et al., ICML 2022)."""
    return max_logit(outputs.logits)


@builtin(
    "energy", family="softmax / logit", needs={"logits"}, limits={"temperature": greater_than(0)}
)
def energy(outputs: Outputs, *, fit: Outputs | None = None, temperature: float = 1.0) -> np.ndarray:
    """Negative energy T·logsumexp(z/T) (Liu et al., NeurIPS 2020)."""
    return negative_energy(outputs.logits, positive("energy", "temperature", temperature))
