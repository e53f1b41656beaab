"""Weibull fits to the upper tail of a distance sample, the way libMR's ``FitHigh`` does them.

libMR shifts the tail so that its smallest value becomes 10000 and fits a two-parameter Weibull
(location 0) by maximum likelihood; the CDF of a shifted distance is the probability that the
sample lies beyond the class's extreme training distances. Here the MLE shape solves the profile
likelihood equation exactly (Brent's method on log shape) instead of a generic optimizer.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from oodsim.detectors._scipy import brentq, logsumexp, softmax

#: libMR's translation: the smallest tail value is moved to this point before fitting.
TRANSLATION = 10000.0


class WeibullTail(NamedTuple):
    """A fitted tail: CDF(d) = 1 − exp(−((d + shift) / scale)^shape); ``shape`` may be ∞."""

    shape: float
    scale: float
    shift: float


def fit_weibull(samples: np.ndarray) -> tuple[float, float]:
    """MLE (shape, scale) of a Weibull with location 0 for positive ``samples``.

    The shape c solves Σ wᵢ dᵢ = 1/c with dᵢ = ln xᵢ − mean ln x and w = softmax(c·d); the left
    side minus 1/c increases in c, so the root is unique. A sample without spread has no finite
    MLE: shape ∞ (a step at the common value).
    """
    x = np.asarray(samples, dtype=np.float64)
    log_x = np.log(x)
    mean_log = log_x.mean()
    d = log_x - mean_log
    if len(d) < 2 or np.ptp(d) <= 1e-14 * max(abs(mean_log), 1.0):
        return math.inf, float(x.max())

    def profile(log_c: float) -> float:
        c = math.exp(log_c)
        return float(softmax(c * d) @ d) - 1.0 / c

    low, high = -10.0, 0.0
    while profile(high) < 0:
        high += 5.0
        if high > 60.0:
            return math.inf, float(x.max())
    shape = math.exp(brentq(profile, low, high, xtol=1e-14, rtol=1e-14, maxiter=500))
    log_scale = mean_log + (logsumexp(shape * d) - math.log(len(d))) / shape
    return shape, math.exp(log_scale)


def fit_tail(distances: np.ndarray, tail_size: int) -> WeibullTail:
    """Fit the largest ``tail_size`` distances (all of them if fewer), shifted as libMR does."""
    tail = np.sort(np.asarray(distances, dtype=np.float64))[-tail_size:]
    shift = TRANSLATION - tail[0]
    shape, scale = fit_weibull(tail + shift)
    return WeibullTail(shape, scale, shift)


def tail_cdf(distances: np.ndarray, shape, scale, shift) -> np.ndarray:
    """CDF of the fitted tails at ``distances``; the parameters broadcast against them."""
    x = np.asarray(distances, dtype=np.float64) + shift
    shape, scale = np.broadcast_to(shape, x.shape), np.broadcast_to(scale, x.shape)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        finite = np.isfinite(shape)
        exponent = np.where(finite, shape, 1.0) * (np.log(np.maximum(x, 1e-300)) - np.log(scale))
        smooth = -np.expm1(-np.exp(exponent))
    step = np.where(x < scale, 0.0, np.where(x > scale, 1.0, -math.expm1(-1.0)))
    return np.where(x <= 0, 0.0, np.where(finite, smooth, step))
