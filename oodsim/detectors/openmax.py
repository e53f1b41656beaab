"""OpenMax (Bendale & Boult, CVPR 2016): extreme-value recalibration of the logits.

Per class, the mean activation vector (MAV) of the logits of correctly classified train samples
and a Weibull fit to the ``tail_size`` largest distances to it. A test sample's ``alpha`` top
classes lose the share ((alpha − rank + 1) / alpha)·CDF(distance) of their logit to an extra
*unknown* logit v₀; κ = 1 − P(unknown) of the softmax over [v₀, revised logits].
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from oodsim.detectors._checks import (
    DetectorInputError,
    as_float,
    at_least,
    fit_arrays,
    integer,
    one_of,
)
from oodsim.detectors._registry import builtin
from oodsim.detectors._scipy import cdist, logsumexp
from oodsim.detectors.weibull import fit_tail, tail_cdf
from oodsim.outputs import Outputs

DISTANCES = ("euclidean", "eucos")
#: Elements of one (rows × classes) distance block: bounds memory for many classes.
BLOCK_ELEMENTS = 2**21


class OpenMaxFit(NamedTuple):
    """Per-class MAVs (C, C) and Weibull tails (C,); NaN rows for classes never fitted."""

    mavs: np.ndarray
    weibull_shape: np.ndarray
    scale: np.ndarray
    shift: np.ndarray


def distances_to(x: np.ndarray, mavs: np.ndarray, distance: str) -> np.ndarray:
    """(n, C) distances of rows of ``x`` to each MAV.

    ``eucos`` is OSDN's euclidean / 200 + cosine distance; a zero vector has cosine distance 1.
    """
    x = as_float(x)
    euclidean = cdist(x, mavs)
    if distance == "euclidean":
        return euclidean
    norms = np.maximum(np.linalg.norm(x, axis=1), 1e-12)[:, None]
    mav_norms = np.maximum(np.linalg.norm(mavs, axis=1), 1e-12)[None, :]
    cosine = 1.0 - (x @ mavs.T) / (norms * mav_norms)
    return euclidean / 200.0 + cosine


def fit_openmax(
    logits: np.ndarray, labels: np.ndarray, tail_size: int, distance: str
) -> OpenMaxFit:
    """MAVs and tails from the correctly classified rows of each class."""
    z = as_float(logits)
    n_classes = z.shape[1]
    correct = z.argmax(axis=1) == labels
    mavs = np.full((n_classes, n_classes), np.nan)
    params = np.full((3, n_classes), np.nan)
    for c in range(n_classes):
        rows = z[correct & (labels == c)]
        if len(rows) == 0:
            continue
        mavs[c] = rows.mean(axis=0)
        params[:, c] = fit_tail(distances_to(rows, mavs[c : c + 1], distance)[:, 0], tail_size)
    return OpenMaxFit(mavs, *params)


def known_probability(logits: np.ndarray, fit: OpenMaxFit, alpha: int, distance: str) -> np.ndarray:
    """1 − P(unknown) after recalibrating the ``alpha`` top classes of each row.

    A class without a fit (no correctly classified train sample) gets CDF 1: nothing vouches
    for it, so its full rank weight moves to the unknown logit.
    """
    z = as_float(logits)
    rows = max(1, BLOCK_ELEMENTS // max(z.shape[1], 1))
    parts = [_known_block(z[i : i + rows], fit, alpha, distance) for i in range(0, len(z), rows)]
    return np.concatenate(parts) if parts else np.zeros(0)


def _known_block(z: np.ndarray, fit: OpenMaxFit, alpha: int, distance: str) -> np.ndarray:
    rows = np.arange(len(z))[:, None]
    top = np.argsort(-z, axis=1, kind="stable")[:, :alpha]  # (n, alpha), best first
    rank_weight = (alpha - np.arange(alpha)) / alpha
    fitted = ~np.isnan(fit.weibull_shape)
    mavs = np.where(fitted[:, None], fit.mavs, 0.0)
    d = distances_to(z, mavs, distance)[rows, top]
    cdf = tail_cdf(d, fit.weibull_shape[top], fit.scale[top], fit.shift[top])
    share = rank_weight * np.where(fitted[top], cdf, 1.0)
    revised = z.copy()
    revised[rows, top] = z[rows, top] * (1.0 - share)
    unknown = (z[rows, top] * share).sum(axis=1)
    known = logsumexp(revised, axis=1)
    return np.exp(known - np.logaddexp(known, unknown))


@builtin(
    "openmax",
    family="softmax / logit",
    needs={"logits"},
    fit_on="train",
    limits={"tail_size": at_least(1), "alpha": at_least(1), "distance": one_of(*DISTANCES)},
)
def openmax(
    outputs: Outputs,
    *,
    fit: Outputs,
    tail_size: int = 20,
    alpha: int | None = None,
    distance: str = "euclidean",
) -> np.ndarray:
    """1 − P(unknown) of OpenMax; Weibull tails fitted on the train split.

    ``alpha`` (default min(10, C)) top classes are recalibrated; ``distance`` is ``euclidean``
    or ``eucos`` (the paper's euclidean / 200 + cosine).
    """
    train = fit_arrays("openmax", fit, "train", labels=True)
    n_classes = train.logits.shape[1]
    if outputs.logits.shape[1] != n_classes:
        raise DetectorInputError(
            f"detector 'openmax': logits have {outputs.logits.shape[1]} "
            f"columns but fit.logits have {n_classes}"
        )
    if distance not in DISTANCES:
        raise DetectorInputError(
            f"detector 'openmax': distance must be one of {DISTANCES}, got {distance!r}"
        )
    tail_size = integer("openmax", "tail_size", tail_size, 1)
    alpha = (
        min(10, n_classes) if alpha is None else integer("openmax", "alpha", alpha, 1, n_classes)
    )
    model = fit_openmax(train.logits, train.labels, tail_size, distance)
    return known_probability(outputs.logits, model, alpha, distance)
