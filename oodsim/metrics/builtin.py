"""oodsim's own metrics, one :class:`~oodsim.metrics.record.MetricInfo` each
(:data:`BUILTIN`): adding one is a record here (and, for a vectorised one, its kernel in
:mod:`oodsim.metrics.kernels`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from oodsim.metrics import functions, kernels
from oodsim.metrics.calibration import brier, ece, nll
from oodsim.metrics.record import MetricInfo
from oodsim.metrics.thresholds import fpr_at_val95, tpr_at_val95


def _info(name: str, function: Callable[..., Any], reproduces: str, **kwargs: Any) -> MetricInfo:
    return MetricInfo(name=name, function=function, reproduces=reproduces, **kwargs)


#: oodsim's own metrics: name → record, in the order results list them by default.
_OWN: dict[str, MetricInfo] = {
    info.name: info
    for info in (
        _info(
            "auroc",
            functions.auroc,
            "sklearn roc_auc_score(~is_ood, kappa); OpenOOD's and pytorch-ood's AUROC (AUROC does "
            "not depend on which class is positive)",
            higher_is_better=True,
            kernel=kernels.AUROC,
            label="AUROC",
        ),
        _info(
            "aupr_in",
            functions.aupr_in,
            "sklearn auc(recall, precision) of precision_recall_curve(~is_ood, kappa); OpenOOD's "
            "aupr_in, pytorch-ood OODMetrics 'AUPR-IN'",
            higher_is_better=True,
            kernel=kernels.aupr_in_kernel("trapezoid"),
            label="AUPR-In",
        ),
        _info(
            "aupr_out",
            functions.aupr_out,
            "sklearn auc(recall, precision) of precision_recall_curve(is_ood, -kappa); the "
            "ImageNet-O card's 'aupr', OpenOOD's aupr_out, pytorch-ood OODMetrics 'AUPR-OUT'",
            higher_is_better=True,
            kernel=kernels.aupr_out_kernel("trapezoid"),
            label="AUPR-Out",
        ),
        _info(
            "ap_in",
            functions.ap_in,
            "sklearn average_precision_score(~is_ood, kappa)",
            higher_is_better=True,
            kernel=kernels.aupr_in_kernel("step"),
            label="AP-In",
        ),
        _info(
            "ap_out",
            functions.ap_out,
            "sklearn average_precision_score(is_ood, -kappa); the ImageNet-O authors' code "
            "(natural-adv-examples)",
            higher_is_better=True,
            kernel=kernels.aupr_out_kernel("step"),
            label="AP-Out",
        ),
        _info(
            "fpr95",
            functions.fpr95,
            "fpr[argmax(tpr >= 0.95)] of roc_curve(~is_ood, kappa, drop_intermediate=False): "
            "ID positive",
            higher_is_better=False,
            kernel=kernels.fpr_kernel(0.95),
            label="FPR95",
        ),
        _info(
            "fpr95_ood",
            functions.fpr95_ood,
            "pytorch-ood OODMetrics 'FPR95TPR' of outlier scores -kappa; fpr[argmax(tpr >= 0.95)] "
            "of roc_curve(is_ood, -kappa, drop_intermediate=False): OOD positive",
            higher_is_better=False,
            kernel=kernels.fpr_ood_kernel(0.95),
            label="FPR95 (OOD+)",
        ),
        _info(
            "oscr",
            functions.oscr,
            "OSCR of Dhamija, Günther & Boult (NeurIPS 2018) as the ARPL / Vaze et al. "
            "compute_oscr computes it: correct and accepted with kappa > t, OOD accepted with "
            "kappa >= t, over the distinct thresholds t",
            higher_is_better=True,
            inputs="kappa+is_ood+correct",
            kernel=kernels.OSCR,
            label="OSCR",
        ),
        _info(
            "oscr_pytorch_ood",
            functions.oscr_pytorch_ood,
            "pytorch-ood metrics.oscr_score: both counts with kappa >= t, a tied run as one "
            "ROC-like segment (at least oscr; equal to auroc with every ID sample correct)",
            higher_is_better=True,
            inputs="kappa+is_ood+correct",
            kernel=kernels.OSCR_DIAGONAL,
        ),
        _info(
            "aurc",
            functions.aurc,
            "AURC of Geifman & El-Yaniv's risk-coverage curve over ID samples: mean selective "
            "risk over coverages i/n, ties in expectation over their orders",
            higher_is_better=False,
            inputs="kappa+correct",
            kernel=kernels.AURC,
            label="AURC",
        ),
        _info(
            "aurc_thresholds",
            functions.aurc_thresholds,
            "AURC of threshold-based code: each ID sample takes the selective risk of accepting "
            "kappa >= its own (a tied run takes the risk of all of it); aurc without ties",
            higher_is_better=False,
            inputs="kappa+correct",
            kernel=kernels.AURC_THRESHOLDS,
        ),
        _info(
            "eaurc",
            functions.eaurc,
            "E-AURC of Geifman et al. (ICLR 2019): aurc minus the AURC of the best ranking of "
            "the same predictions, computed exactly",
            higher_is_better=False,
            inputs="kappa+correct",
            kernel=kernels.EAURC,
            label="E-AURC",
        ),
        _info(
            "selective_risk95",
            functions.selective_risk95,
            "selective risk (wrong share of the accepted ID samples) at the highest threshold "
            "that accepts at least 95% of them",
            higher_is_better=False,
            inputs="kappa+correct",
            kernel=kernels.selective_risk_kernel(0.95),
        ),
        _info(
            "tpr_at_val95",
            tpr_at_val95,
            "share of ID test samples with kappa >= t, t the highest threshold that keeps 95% "
            "of the ID validation samples (in_val); 0.95 up to sampling",
            higher_is_better=True,
            inputs="kappa+is_ood+val_kappa",
            label="TPR@val95",
        ),
        _info(
            "fpr_at_val95",
            fpr_at_val95,
            "share of OOD test samples with kappa >= t, t the highest threshold that keeps 95% "
            "of the ID validation samples (in_val): the FPR a deployed detector gets",
            higher_is_better=False,
            inputs="kappa+is_ood+val_kappa",
            label="FPR@val95",
        ),
        _info(
            "accuracy",
            functions.accuracy,
            "sklearn accuracy_score per row",
            higher_is_better=True,
            inputs="predictions+labels",
        ),
        _info(
            "ece",
            ece,
            "expected calibration error of the top label, 15 equal-width bins (Guo et al. "
            "2017); torchmetrics MulticlassCalibrationError(n_bins=15, norm='l1')",
            higher_is_better=False,
            inputs="probabilities+labels",
        ),
        _info(
            "brier",
            brier,
            "multiclass Brier score, sum over classes; sklearn brier_score_loss (3+ classes)",
            higher_is_better=False,
            range=(0.0, 2.0),
            inputs="probabilities+labels",
        ),
        _info(
            "nll",
            nll,
            "negative log-likelihood of the true labels; sklearn log_loss",
            higher_is_better=False,
            range=(0.0, float("inf")),
            inputs="probabilities+labels",
        ),
    )
}


def _same_as(name: str, of: str, reproduces: str, label: str) -> MetricInfo:
    """Record ``name``: a protocol's name of the metric ``of``, its numbers and facts."""
    return attrs.evolve(_OWN[of], name=name, reproduces=reproduces, label=label, same_as=of)


#: oodsim's metrics by every name it gives them: its own, then ImageNet-O's names of two
BUILTIN: dict[str, MetricInfo] = {
    **_OWN,
    "aupr": _same_as(
        "aupr",
        "aupr_out",
        "the ImageNet-O card's AUPR (Hendrycks et al., CVPR 2021): aupr_out, OOD positive, "
        "ranked by -kappa, trapezoid auc(recall, precision)",
        "AUPR",
    ),
    "ap": _same_as(
        "ap",
        "ap_out",
        "the ImageNet-O authors' code (natural-adv-examples calibration_tools.get_measures): "
        "ap_out, sklearn average_precision_score(is_ood, -kappa)",
        "AP",
    ),
}
