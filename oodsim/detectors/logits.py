"""Detectors that read only the logits: MSP, entropy, max logit, energy."""

from __future__ import annotations

import numpy as np
from scipy.special import log_softmax, logsumexp

from oodsim.detectors._checks import as_float, positive
from oodsim.detectors._registry import builtin
from oodsim.outputs import Outputs


def max_softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """max_c softmax(z / T)_c, computed as exp(max − logsumexp) so no class overflows."""
    z = as_float(logits) / temperature
    return np.exp(z.max(axis=1) - logsumexp(z, axis=1))


def negative_entropy(logits: np.ndarray) -> np.ndarray:
    """Σ_c p_c log p_c of p = softmax(z): exact, with 0·log 0 = 0 (no probability clipping)."""
    log_p = log_softmax(as_float(logits), axis=1)
    return np.sum(np.exp(log_p) * log_p, axis=1)


def max_logit(logits: np.ndarray) -> np.ndarray:
    """max_c z_c."""
    return as_float(logits).max(axis=1)


def negative_energy(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """T · logsumexp(z / T), the negative free energy."""
    return temperature * logsumexp(as_float(logits) / temperature, axis=1)


@builtin("msp", needs={"logits"})
def msp(outputs: Outputs, *, fit: Outputs | None = None) -> np.ndarray:
    """Maximum softmax probability (Hendrycks & Gimpel, ICLR 2017)."""
    return max_softmax(outputs.logits)


@builtin("entropy", needs={"logits"})
def entropy(outputs: Outputs, *, fit: Outputs | None = None) -> np.ndarray:
    """Negative entropy of the softmax distribution."""
    return negative_entropy(outputs.logits)


@builtin("max_logit", needs={"logits"})
def max_logit_detector(outputs: Outputs, *, fit: Outputs | None = None) -> np.ndarray:
    """Maximum logit (Hendrycks et al., ICML 2022)."""
    return max_logit(outputs.logits)


@builtin("energy", needs={"logits"})
def energy(outputs: Outputs, *, fit: Outputs | None = None, temperature: float = 1.0) -> np.ndarray:
    """Negative energy T·logsumexp(z/T) (Liu et al., NeurIPS 2020)."""
    return negative_energy(outputs.logits, positive("energy", "temperature", temperature))
