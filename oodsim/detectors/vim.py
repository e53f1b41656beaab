"""ViM, virtual-logit matching (Wang et al., CVPR 2022).

The features are centered at the origin u = −W⁺b of the final layer (W, b), split into the
``dim``-dimensional principal subspace of the train features and its orthogonal residual; the
residual norm scaled by α = mean max-logit / mean residual norm (both on train) is the virtual
logit. κ = logsumexp(z) − α‖x^{P⊥}‖, the negated ViM score.

(W, b) come from ``head_weight``/``head_bias`` when given; otherwise they are recovered from the
fit split by least squares of logits on [features, 1], which is exact for the linear head of the
model contract (``forward == head(embed(x))``, dropout off at inference) whenever the train
features span their space.
"""

from __future__ import annotations

import warnings

import numpy as np

from oodsim.detectors._checks import (
    DetectorInputError,
    as_float,
    at_least,
    fit_arrays,
    integer,
    same_width,
)
from oodsim.detectors._registry import builtin
from oodsim.detectors._scipy import logsumexp
from oodsim.outputs import Outputs

#: Largest relative residual ‖Z − [X, 1]θ‖ / ‖Z − mean Z‖ accepted for a recovered linear head.
HEAD_TOLERANCE = 1e-3


def recover_linear_head(features: np.ndarray, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(W (C, D), b (C,)) with logits ≈ features Wᵀ + b, by least squares; error if not linear."""
    x, z = as_float(features), as_float(logits)
    design = np.hstack([x, np.ones((len(x), 1))])
    theta, _, rank, _ = np.linalg.lstsq(design, z, rcond=None)
    spread = np.linalg.norm(z - z.mean(axis=0))
    residual = np.linalg.norm(z - design @ theta) / (spread if spread > 0 else 1.0)
    if residual > HEAD_TOLERANCE:
        raise DetectorInputError(
            f"detector 'vim': the fit logits are not a linear function of the fit features "
            f"(relative residual {residual:.2g}); pass head_weight= and head_bias="
        )
    if rank < design.shape[1]:
        warnings.warn(
            f"vim: the fit features span only {rank - 1} of {x.shape[1]} dimensions, so the final "
            "layer is not identifiable and the minimum-norm one is used; pass head_weight= and "
            "head_bias= to use the model's own",
            stacklevel=3,
        )
    return theta[:-1].T, theta[-1]


def origin(weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """u = −W⁺ b, the feature-space point the paper centers on."""
    return -np.linalg.pinv(as_float(weight)) @ as_float(bias)


def residual_basis(features: np.ndarray, center: np.ndarray, dim: int) -> np.ndarray:
    """(D, D − dim) orthonormal basis of the complement of the top-``dim`` principal subspace.

    Principal axes are the eigenvectors of (X − u)ᵀ(X − u) / N (centered at u, not at the mean).
    """
    x = as_float(features) - center
    _, eigenvectors = np.linalg.eigh(x.T @ x / len(x))  # ascending eigenvalues
    return eigenvectors[:, : x.shape[1] - dim]


def residual_norm(features: np.ndarray, center: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """‖x^{P⊥}‖: the norm of the centered features in the residual subspace."""
    return np.linalg.norm((as_float(features) - center) @ basis, axis=1)


def _head(train, head_weight, head_bias) -> tuple[np.ndarray, np.ndarray]:
    if head_weight is None:
        if head_bias is not None:
            raise DetectorInputError("detector 'vim': head_bias= needs head_weight=")
        return recover_linear_head(train.features, train.logits)
    weight = as_float(head_weight)
    n_classes, n_features = train.logits.shape[1], train.features.shape[1]
    bias = np.zeros(n_classes) if head_bias is None else as_float(head_bias)
    if weight.shape != (n_classes, n_features) or bias.shape != (n_classes,):
        raise DetectorInputError(
            f"detector 'vim': head_weight must have shape ({n_classes}, {n_features}) and "
            f"head_bias ({n_classes},), got {weight.shape} and {bias.shape}"
        )
    return weight, bias


@builtin(
    "vim",
    family="feature",
    needs={"logits", "features"},
    fit_on="train",
    limits={"dim": at_least(1)},
)
def vim(
    outputs: Outputs,
    *,
    fit: Outputs,
    dim: int | None = None,
    head_weight: np.ndarray | None = None,
    head_bias: np.ndarray | None = None,
) -> np.ndarray:
    """Energy minus the scaled residual norm outside the principal subspace (negated ViM score).

    ``dim`` (default D // 2, as the paper's choices for D = 1024, 2048) is the principal-subspace
    dimension, 1 ≤ dim ≤ D − 1.
    """
    train = fit_arrays("vim", fit, "train", features=True)
    same_width("vim", "features", outputs.features, train.features)
    n_features = train.features.shape[1]
    if n_features < 2:
        raise DetectorInputError("detector 'vim' needs features with at least 2 columns")
    dim = max(1, n_features // 2) if dim is None else integer("vim", "dim", dim, 1, n_features - 1)
    center = origin(*_head(train, head_weight, head_bias))
    basis = residual_basis(train.features, center, dim)
    train_residual = residual_norm(train.features, center, basis).mean()
    if not train_residual > 0:
        raise DetectorInputError(
            f"detector 'vim': the train features have no residual outside "
            f"the {dim}-dimensional principal subspace; lower dim"
        )
    alpha = train.logits.max(axis=1).mean() / train_residual
    virtual_logit = alpha * residual_norm(outputs.features, center, basis)
    return logsumexp(as_float(outputs.logits), axis=1) - virtual_logit
