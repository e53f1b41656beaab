"""The metrics as functions of κ (and, for ``oscr`` and ``aurc``, the correctness of ID
predictions), one per convention of the field; ``accuracy`` of predicted labels."""

from __future__ import annotations

from typing import Any

import numpy as np

from oodsim.metrics.inputs import as_kappa, check_aupr_method, check_rate, require_correct
from oodsim.metrics.kernels import (
    AURC,
    AURC_THRESHOLDS,
    AUROC,
    EAURC,
    OSCR,
    OSCR_DIAGONAL,
    Kernel,
    aupr_in_kernel,
    aupr_out_kernel,
    compute_metrics,
    fpr_kernel,
    fpr_ood_kernel,
    selective_risk_kernel,
)


def auroc(kappa: Any, is_ood: Any, *, context: str = "") -> Any:
    """Area under the ROC curve with ID as positive: P(κ_ID > κ_OOD) + ½·P(tie).

    Equals sklearn ``roc_auc_score(~is_ood, kappa)`` for each row.
    """
    return compute_metrics(kappa, is_ood, (AUROC,), context)[0]


def aupr_in(kappa: Any, is_ood: Any, *, method: str = "trapezoid", context: str = "") -> Any:
    """Area under the precision-recall curve with ID as positive, ranked by κ.

    ``method="trapezoid"``: ``auc(recall, precision)`` over ``precision_recall_curve`` points
    (the ImageNet-O recipe, pytorch-ood's "AUPR-IN"); ``method="step"``:
    ``average_precision_score``, also available by name as :func:`ap_in`.
    """
    check_aupr_method(method)
    return compute_metrics(kappa, is_ood, (aupr_in_kernel(method),), context)[0]


def aupr_out(kappa: Any, is_ood: Any, *, method: str = "trapezoid", context: str = "") -> Any:
    """Area under the precision-recall curve with OOD as positive, ranked by -κ.

    ``method`` as in :func:`aupr_in`; ``method="step"`` is also available as :func:`ap_out`.
    """
    check_aupr_method(method)
    return compute_metrics(kappa, is_ood, (aupr_out_kernel(method),), context)[0]


def fpr_at_tpr(kappa: Any, is_ood: Any, *, tpr: float = 0.95, context: str = "") -> Any:
    """Share of OOD samples accepted (κ >= t) at the highest t that keeps >= ``tpr`` of ID.

    Equals ``fpr[argmax(tpr_curve >= tpr)]`` on ``roc_curve(~is_ood, kappa,
    drop_intermediate=False)``; no interpolation between thresholds.
    """
    check_rate(tpr, "tpr")
    return compute_metrics(kappa, is_ood, (fpr_kernel(tpr),), context)[0]


def fpr95(kappa: Any, is_ood: Any, *, context: str = "") -> Any:
    """FPR at 95% TPR, ID positive: :func:`fpr_at_tpr` with ``tpr=0.95``."""
    return fpr_at_tpr(kappa, is_ood, tpr=0.95, context=context)


def ap_in(kappa: Any, is_ood: Any, *, context: str = "") -> Any:
    """Average precision (step rule) with ID as positive, ranked by κ.

    Equals sklearn ``average_precision_score(~is_ood, kappa)``; :func:`aupr_in` with
    ``method="step"``.
    """
    return compute_metrics(kappa, is_ood, (aupr_in_kernel("step"),), context)[0]


def ap_out(kappa: Any, is_ood: Any, *, context: str = "") -> Any:
    """Average precision (step rule) with OOD as positive, ranked by -κ.

    Equals sklearn ``average_precision_score(is_ood, -kappa)``; :func:`aupr_out` with
    ``method="step"``.
    """
    return compute_metrics(kappa, is_ood, (aupr_out_kernel("step"),), context)[0]


def fpr_at_tpr_ood(kappa: Any, is_ood: Any, *, tpr: float = 0.95, context: str = "") -> Any:
    """OOD as positive: share of ID samples flagged as OOD (-κ >= s) at the highest s that
    catches >= ``tpr`` of the OOD samples.

    Equals ``fpr[argmax(tpr_curve >= tpr)]`` on ``roc_curve(is_ood, -kappa,
    drop_intermediate=False)`` and pytorch-ood's ``FPRAtTPR(tpr)`` on outlier scores ``-kappa``;
    no interpolation between thresholds.
    """
    check_rate(tpr, "tpr")
    return compute_metrics(kappa, is_ood, (fpr_ood_kernel(tpr),), context)[0]


def fpr95_ood(kappa: Any, is_ood: Any, *, context: str = "") -> Any:
    """FPR at 95% TPR with OOD as positive: :func:`fpr_at_tpr_ood` with ``tpr=0.95``.

    pytorch-ood's ``OODMetrics()["FPR95TPR"]`` of outlier scores ``-kappa``.
    """
    return fpr_at_tpr_ood(kappa, is_ood, tpr=0.95, context=context)


def oscr(kappa: Any, is_ood: Any, correct: Any, *, context: str = "") -> Any:
    """Open Set Classification Rate (Dhamija, Günther, Boult, NeurIPS 2018), as the ARPL and
    Vaze et al. ``compute_oscr`` that open-set papers use computes it.

    At each distinct threshold t of κ: CCR(t) = share of ID samples that are correctly
    classified and have κ > t (strict), FPR(t) = share of OOD samples with κ >= t. The area is
    the trapezoids between the points of consecutive thresholds, and from the highest one to
    (0, 0). Ties: the thresholds are the distinct values of κ, so the result does not depend
    on the order of tied samples (the ARPL loop, one point per sample, does on tied scores);
    constant κ gives 0. ``correct`` (bool, ``(n,)`` or broadcastable to ``kappa``) is each ID
    sample's prediction correctness; its values at OOD samples are ignored. Always at most
    :func:`oscr_pytorch_ood`: the strict count joins each threshold to the next by a diagonal.
    """
    require_correct("oscr", correct, context)
    return compute_metrics(kappa, is_ood, (OSCR,), context, correct)[0]


def oscr_pytorch_ood(kappa: Any, is_ood: Any, correct: Any, *, context: str = "") -> Any:
    """OSCR as pytorch-ood's ``metrics.oscr_score`` computes it: CCR(t) and FPR(t) both count
    κ >= t, and a run of tied κ is one straight segment (as in a ROC curve), from (0, 0) to
    (1, accuracy); constant κ gives accuracy / 2. With every ID sample correct it equals
    :func:`auroc`. ``correct`` as in :func:`oscr`.
    """
    require_correct("oscr_pytorch_ood", correct, context)
    return compute_metrics(kappa, is_ood, (OSCR_DIAGONAL,), context, correct)[0]


def _id_only(name: str, kernel: Kernel, kappa: Any, correct: Any, context: str) -> Any:
    """Metric ``name`` of the ID samples alone (``kappa`` and ``correct`` are all ID)."""
    require_correct(name, correct, context)
    scores = as_kappa(kappa, context)
    all_id = np.zeros(scores.shape[-1], dtype=bool)
    return compute_metrics(scores, all_id, (kernel,), context, correct)[0]


def aurc(kappa: Any, correct: Any, *, context: str = "") -> Any:
    """Area under the risk-coverage curve of ID samples; lower is better.

    Ranked by κ descending, the selective risk at coverage i/n is the share of wrong
    predictions among the i most confident samples; AURC is its mean over i = 1..n. Ties are
    taken in expectation: within a run of tied κ, the risk at each of its coverages is the
    average over all orders of the run (equivalently, the run's wrong predictions are spread
    evenly over it), so the value does not depend on how ties are ordered; without ties this
    is the plain sorted loop. ``correct``: bool, ``(n,)`` or broadcastable to ``kappa``.
    """
    return _id_only("aurc", AURC, kappa, correct, context)


def aurc_thresholds(kappa: Any, correct: Any, *, context: str = "") -> Any:
    """AURC with the risk read at the thresholds only, as threshold-based AURC code computes
    it: each sample takes the selective risk of accepting every sample with κ >= its own, so
    the samples of a tied run all take the risk of the whole run. Without ties it equals
    :func:`aurc`; with ties the two differ, either way (``docs/metrics.md``). Lower is better."""
    return _id_only("aurc_thresholds", AURC_THRESHOLDS, kappa, correct, context)


def eaurc(kappa: Any, correct: Any, *, context: str = "") -> Any:
    """Excess AURC (Geifman et al., ICLR 2019): :func:`aurc` minus the AURC of the best
    ranking of the same predictions (every correct one first), computed exactly,
    ((n - C) - C (H_n - H_C)) / n for C correct of n, not with the ``r + (1 - r) ln(1 - r)``
    approximation. 0 for a κ that ranks every correct prediction first; lower is better."""
    return _id_only("eaurc", EAURC, kappa, correct, context)


def selective_risk(kappa: Any, correct: Any, *, coverage: float, context: str = "") -> Any:
    """Share of wrong predictions among the accepted samples at the highest threshold of κ
    that accepts at least ``coverage`` of them (coverage k / n in float64; ties are accepted
    together, so the coverage reached may be higher). Lower is better."""
    check_rate(coverage, "coverage")
    kernel = selective_risk_kernel(float(coverage))
    return _id_only("selective_risk", kernel, kappa, correct, context)


#: The coverages of :func:`risk_coverage_curve` by default: 0.05, 0.10, ..., 1.00.
COVERAGES: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(1, 21))


def risk_coverage_curve(
    kappa: Any, correct: Any, coverages: Any = COVERAGES, *, context: str = ""
) -> Any:
    """The risk–coverage curve of :func:`selective_risk` at each of ``coverages``: shape
    ``(..., len(coverages))``, the selective risk of accepting the top share of the samples
    by κ (at least that share; a tied run is accepted whole)."""
    values = [selective_risk(kappa, correct, coverage=c, context=context) for c in coverages]
    return np.stack(np.broadcast_arrays(*values), axis=-1)


def selective_risk95(kappa: Any, correct: Any, *, context: str = "") -> Any:
    """:func:`selective_risk` at 95% coverage."""
    return selective_risk(kappa, correct, coverage=0.95, context=context)


def accuracy(predictions: Any, labels: Any) -> Any:
    """Closed-set accuracy: share of ``predictions == labels`` along the last axis, float64.

    Shapes ``(..., n)`` broadcast against each other; the result has the broadcast shape
    without the last axis.
    """
    pred, true = np.asarray(predictions), np.asarray(labels)
    try:
        shape = np.broadcast_shapes(pred.shape, true.shape)
    except ValueError:
        shape = None
    if shape is None or pred.ndim == 0 or true.ndim == 0 or pred.shape[-1] != true.shape[-1]:
        raise ValueError(
            f"predictions of shape {pred.shape} and labels of shape {true.shape} do not match; "
            "expected (..., n) shapes that broadcast"
        )
    if shape[-1] == 0:
        raise ValueError("accuracy needs at least one sample, got n=0")
    hits = np.count_nonzero(pred == true, axis=-1)
    return (np.asarray(hits, dtype=np.float64) / shape[-1])[()]
