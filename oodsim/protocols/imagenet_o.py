"""The ImageNet-O evaluation (Hendrycks et al., "Natural Adversarial Examples").

Restrict a 1000-way ImageNet classifier to the 200 ImageNet-O classes, take the softmax over
those 200 logits, score each image by −max softmax (the anomaly score) and report the area
under the precision-recall curve with ImageNet-O images as positives (trapezoidal
``auc(recall, precision)`` over ``precision_recall_curve``). The ID set is the ImageNet
validation images of the 200 classes (10,000), the OOD set ImageNet-O's 2,000 images; chance
AUPR is the OOD share, 2,000 / 12,000 ≈ 16.7 %.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from oodsim import metrics as _metrics
from oodsim.data.imagenet_classes import imagenet1k_wnids, imagenet_o_wnids
from oodsim.errors import SpecError


def subset_columns(class_wnids: Sequence[str], subset_wnids: Sequence[str]) -> np.ndarray:
    """Column of each subset class in a classifier's output, in sorted-wnid order."""
    class_wnids = list(class_wnids)
    position = {wnid: i for i, wnid in enumerate(class_wnids)}
    if len(position) != len(class_wnids):
        raise SpecError("class_wnids", "duplicates", "one wnid per output column")
    subset = sorted(set(subset_wnids))
    missing = [w for w in subset if w not in position]
    if missing:
        raise SpecError(
            "subset_wnids",
            missing[:5] + (["..."] if len(missing) > 5 else []),
            f"classes of the classifier ({len(missing)} not among its {len(class_wnids)})",
        )
    return np.array([position[w] for w in subset], dtype=np.intp)


def restrict_logits(
    logits: np.ndarray, class_wnids: Sequence[str], subset_wnids: Sequence[str]
) -> np.ndarray:
    """Keep the logit columns of ``subset_wnids`` (sorted-wnid order) from ``(..., C)`` logits."""
    logits = np.asarray(logits)
    if logits.ndim == 0 or logits.shape[-1] != len(class_wnids):
        raise SpecError(
            "logits", logits.shape, f"(..., {len(class_wnids)}): one column per class wnid"
        )
    return logits[..., subset_columns(class_wnids, subset_wnids)]


def max_softmax(logits: np.ndarray) -> np.ndarray:
    """Maximum softmax probability per row, computed stably in float64."""
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return 1.0 / np.exp(shifted).sum(axis=-1)


def _as_subset_logits(
    logits: np.ndarray, id_classes: Sequence[str], class_wnids: Sequence[str] | None, name: str
) -> np.ndarray:
    """Logits over the ImageNet-O classes: full-classifier logits get restricted first."""
    logits = np.asarray(logits)
    if logits.ndim != 2:
        raise SpecError(name, logits.shape, "(n_images, n_classes)")
    n = logits.shape[1]
    if n == len(id_classes) and class_wnids is None:
        return logits
    wnids = imagenet1k_wnids() if class_wnids is None else tuple(class_wnids)
    if n != len(wnids):
        raise SpecError(
            name,
            logits.shape,
            f"(n, {len(wnids)}) classifier logits or (n, {len(id_classes)}) logits already "
            "restricted to the ImageNet-O classes",
        )
    return restrict_logits(logits, wnids, id_classes)


def evaluate_logits(
    id_logits: np.ndarray,
    ood_logits: np.ndarray,
    *,
    id_classes: Sequence[str] | None = None,
    class_wnids: Sequence[str] | None = None,
) -> dict[str, float]:
    """ImageNet-O metrics from ID and OOD logits.

    Logits are ``(n, 1000)`` ImageNet-1k outputs in the sorted-wnid order of timm's list
    (pass ``class_wnids`` for another order or label space), or ``(n, 200)`` already
    restricted. ``id_classes`` defaults to the bundled 200 ImageNet-O classes. Returns
    ``aupr`` (OOD positive, score −max softmax, trapezoid; the paper's metric), ``auroc``
    (ID positive), ``fpr95``, ``chance`` (the OOD share: the AUPR of a random detector),
    ``n_id`` and ``n_ood``.
    """
    classes = imagenet_o_wnids() if id_classes is None else tuple(sorted(set(id_classes)))
    id_kappa = max_softmax(_as_subset_logits(id_logits, classes, class_wnids, "id_logits"))
    ood_kappa = max_softmax(_as_subset_logits(ood_logits, classes, class_wnids, "ood_logits"))
    kappa = np.concatenate([id_kappa, ood_kappa])
    is_ood = np.r_[np.zeros(id_kappa.size, bool), np.ones(ood_kappa.size, bool)]
    values = _metrics.evaluate(kappa, is_ood, ("aupr_out", "auroc", "fpr95"), context="ImageNet-O")
    return {
        "aupr": float(values["aupr_out"]),
        "auroc": float(values["auroc"]),
        "fpr95": float(values["fpr95"]),
        "chance": ood_kappa.size / kappa.size,
        "n_id": int(id_kappa.size),
        "n_ood": int(ood_kappa.size),
    }
