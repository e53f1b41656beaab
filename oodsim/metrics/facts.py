"""One record per metric (:data:`METRIC_INFO`): its function, direction, range, inputs and the
published number it reproduces; the registry and :func:`evaluate`, which computes several
κ metrics from one sort."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from oodsim.errors import UnknownNameError
from oodsim.metrics import kernels
from oodsim.metrics.calibration import brier, ece, nll
from oodsim.metrics.functions import (
    accuracy,
    ap_in,
    ap_out,
    aupr_in,
    aupr_out,
    aurc,
    aurc_thresholds,
    auroc,
    eaurc,
    fpr95,
    fpr95_ood,
    oscr,
    oscr_pytorch_ood,
    selective_risk95,
)
from oodsim.metrics.kernels import Kernel
from oodsim.metrics.thresholds import fpr_at_val95, tpr_at_val95
from oodsim.plugins import Registry, View

#: What a metric is computed from: κ with the OOD labels; κ, labels and the ID samples'
#: prediction correctness; κ and correctness of ID samples alone; κ, labels and κ of the ID
#: validation samples (a threshold fixed on them); class predictions and labels; the
#: classifier's probabilities and labels.
METRIC_INPUTS: tuple[str, ...] = (
    "kappa+is_ood",
    "kappa+is_ood+correct",
    "kappa+correct",
    "kappa+is_ood+val_kappa",
    "predictions+labels",
    "probabilities+labels",
)


def _check_inputs(instance: Any, attribute: Any, value: str) -> None:
    if value not in METRIC_INPUTS:
        raise UnknownNameError("inputs", value, METRIC_INPUTS)


@attrs.frozen(kw_only=True)
class MetricInfo:
    """One named metric: its function, direction, range, inputs and the number it reproduces.

    ``function`` takes the arrays ``inputs`` names, in that order (``correct`` third for
    "kappa+is_ood+correct", second for "kappa+correct"); ``kernel``, where given, computes the
    same number for many rows at once; ``reproduces`` names the published recipe (library
    call or paper) whose number it equals. docs/metrics.md tabulates them.
    """

    name: str
    function: Callable[..., Any] = attrs.field(eq=False)
    higher_is_better: bool
    range: tuple[float, float] = (0.0, 1.0)
    inputs: str = attrs.field(default="kappa+is_ood", validator=_check_inputs)
    reproduces: str = ""
    #: how a paper's table heads the metric ("AUROC", "E-AURC"); the name where empty
    label: str = ""
    #: the vectorised computation behind it (:func:`oodsim.metrics.evaluate` computes every
    #: metric with one from one sort per block of rows); None: ``function`` row by row
    kernel: Kernel | None = None
    #: the metric this one is under another name (a protocol's name for it: ImageNet-O's
    #: ``aupr`` is ``aupr_out``); specs offer the other name, results of that protocol this one
    same_as: str = ""

    @property
    def needs_correct(self) -> bool:
        """Whether the metric also needs the ID samples' prediction correctness."""
        return "correct" in self.inputs.split("+")

    @property
    def needs_val_kappa(self) -> bool:
        """Whether the metric also needs κ of the ID validation samples."""
        return "val_kappa" in self.inputs.split("+")

    @property
    def scores_detector(self) -> bool:
        """Whether the metric judges κ (an OOD or selective metric), not the classifier alone."""
        return self.inputs.startswith("kappa")


def _info(name: str, function: Callable[..., Any], reproduces: str, **kwargs: Any) -> MetricInfo:
    return MetricInfo(name=name, function=function, reproduces=reproduces, **kwargs)


#: oodsim's own metrics: name → record, in the order results list them by default.
_OWN: dict[str, MetricInfo] = {
    info.name: info
    for info in (
        _info(
            "auroc",
            auroc,
            "sklearn roc_auc_score(~is_ood, kappa); OpenOOD's and pytorch-ood's AUROC (AUROC does "
            "not depend on which class is positive)",
            higher_is_better=True,
            kernel=kernels.AUROC,
            label="AUROC",
        ),
        _info(
            "aupr_in",
            aupr_in,
            "sklearn auc(recall, precision) of precision_recall_curve(~is_ood, kappa); OpenOOD's "
            "aupr_in, pytorch-ood OODMetrics 'AUPR-IN'",
            higher_is_better=True,
            kernel=kernels.aupr_in_kernel("trapezoid"),
            label="AUPR-In",
        ),
        _info(
            "aupr_out",
            aupr_out,
            "sklearn auc(recall, precision) of precision_recall_curve(is_ood, -kappa); the "
            "ImageNet-O card's 'aupr', OpenOOD's aupr_out, pytorch-ood OODMetrics 'AUPR-OUT'",
            higher_is_better=True,
            kernel=kernels.aupr_out_kernel("trapezoid"),
            label="AUPR-Out",
        ),
        _info(
            "ap_in",
            ap_in,
            "sklearn average_precision_score(~is_ood, kappa)",
            higher_is_better=True,
            kernel=kernels.aupr_in_kernel("step"),
            label="AP-In",
        ),
        _info(
            "ap_out",
            ap_out,
            "sklearn average_precision_score(is_ood, -kappa); the ImageNet-O authors' code "
            "(natural-adv-examples)",
            higher_is_better=True,
            kernel=kernels.aupr_out_kernel("step"),
            label="AP-Out",
        ),
        _info(
            "fpr95",
            fpr95,
            "fpr[argmax(tpr >= 0.95)] of roc_curve(~is_ood, kappa, drop_intermediate=False): "
            "ID positive",
            higher_is_better=False,
            kernel=kernels.fpr_kernel(0.95),
            label="FPR95",
        ),
        _info(
            "fpr95_ood",
            fpr95_ood,
            "pytorch-ood OODMetrics 'FPR95TPR' of outlier scores -kappa; fpr[argmax(tpr >= 0.95)] "
            "of roc_curve(is_ood, -kappa, drop_intermediate=False): OOD positive",
            higher_is_better=False,
            kernel=kernels.fpr_ood_kernel(0.95),
            label="FPR95 (OOD+)",
        ),
        _info(
            "oscr",
            oscr,
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
            oscr_pytorch_ood,
            "pytorch-ood metrics.oscr_score: both counts with kappa >= t, a tied run as one "
            "ROC-like segment (at least oscr; equal to auroc with every ID sample correct)",
            higher_is_better=True,
            inputs="kappa+is_ood+correct",
            kernel=kernels.OSCR_DIAGONAL,
        ),
        _info(
            "aurc",
            aurc,
            "AURC of Geifman & El-Yaniv's risk-coverage curve over ID samples: mean selective "
            "risk over coverages i/n, ties in expectation over their orders",
            higher_is_better=False,
            inputs="kappa+correct",
            kernel=kernels.AURC,
            label="AURC",
        ),
        _info(
            "aurc_thresholds",
            aurc_thresholds,
            "AURC of threshold-based code: each ID sample takes the selective risk of accepting "
            "kappa >= its own (a tied run takes the risk of all of it); aurc without ties",
            higher_is_better=False,
            inputs="kappa+correct",
            kernel=kernels.AURC_THRESHOLDS,
        ),
        _info(
            "eaurc",
            eaurc,
            "E-AURC of Geifman et al. (ICLR 2019): aurc minus the AURC of the best ranking of "
            "the same predictions, computed exactly",
            higher_is_better=False,
            inputs="kappa+correct",
            kernel=kernels.EAURC,
            label="E-AURC",
        ),
        _info(
            "selective_risk95",
            selective_risk95,
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
            accuracy,
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
_BUILTIN: dict[str, MetricInfo] = {
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


#: every metric by name (:mod:`oodsim.plugins`): oodsim's own, registered here
#: (:func:`register_metric`) and installed (entry points of group ``oodsim.metrics``)
REGISTRY: Registry[MetricInfo] = Registry(
    "metric",
    group="oodsim.metrics",
    order="builtins_first",  # METRIC_INFO lists oodsim's own first, in their order
    record_type=MetricInfo,
    decorator="oodsim.metrics.register_metric",
    source="function",
)
for _info_record in _BUILTIN.values():
    REGISTRY.builtin(_info_record.name, _info_record)


#: Metric name → its record: oodsim's own in the order results list them by default, then
#: those registered here and installed.
METRIC_INFO: Mapping[str, MetricInfo] = View(REGISTRY)


def register_metric(
    name: str,
    *,
    higher_is_better: bool,
    range: tuple[float, float] = (0.0, 1.0),
    reproduces: str = "",
    label: str = "",
    replace: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``function(kappa, is_ood) -> float`` (κ and the OOD flags of one
    row of samples) as metric ``name``. Runs compute it for every detector and OOD set (a
    spec's ``metrics``; shipped to the workers), ``oodsim.stats`` and reports read its
    direction (``higher_is_better``) and its ``range`` (intervals stay inside it), and
    ``reproduces`` says which published number it equals, ``label`` how a paper's table heads
    it (default: its name). A taken name raises
    ``ValueError``; ``replace=True`` re-registers your own, never a built-in."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        low, high = (float(x) for x in range)
        if not low < high:
            raise ValueError(f"metric {name!r}: range {range!r} is not (low, high), low < high")
        info = MetricInfo(
            name=name,
            function=function,
            higher_is_better=bool(higher_is_better),
            range=(low, high),
            reproduces=reproduces,
            label=label,
        )
        REGISTRY.register(name, info, replace=replace)
        function.__oodsim_metric__ = info  # lets an entry point name the function
        return function

    return decorate


def spec_metrics() -> list[str]:
    """Every metric a spec may name, sorted: each record's, less a protocol's names of another
    metric (``same_as``: a spec names the other)."""
    return sorted(name for name, info in METRIC_INFO.items() if not info.same_as)


def metric_info(name: str) -> MetricInfo | None:
    """The record of metric ``name`` (oodsim's, registered or installed), None if none."""
    name = str(name)
    return REGISTRY.get(name) if name in REGISTRY.available() else None


KAPPA_METRICS: tuple[str, ...] = tuple(
    name for name, info in _BUILTIN.items() if info.kernel is not None and not info.same_as
)


"""Names of the metrics a spec may ask for that are computed from the test sets' κ, from one
sort; ``oscr`` and ``aurc`` also need ``correct`` (see ``METRIC_INFO[name].inputs``)."""


VALIDATION_METRICS: tuple[str, ...] = tuple(
    name for name, info in _BUILTIN.items() if info.needs_val_kappa
)


"""Names of the metrics that also need κ of the ID validation samples (a threshold fixed on
them); :func:`evaluate` computes them when given ``val_kappa``."""


DEFAULT_KAPPA_METRICS: tuple[str, ...] = ("auroc", "aupr_in", "aupr_out", "fpr95")


"""What :func:`evaluate` computes when no names are given."""


METRICS: Mapping[str, Callable[..., Any]] = View(REGISTRY, lambda info: info.function)


"""Metric name → function, taking the arrays ``METRIC_INFO[name].inputs`` names: κ metrics
``(kappa, is_ood)``, ``oscr`` ``(kappa, is_ood, correct)``, ``aurc`` ``(kappa, correct)``,
"accuracy" ``(predictions, labels)``."""


#: The range every value of a metric lies in, by name (its record's :attr:`MetricInfo.range`):
#: intervals for a metric's mean stay inside it.
METRIC_RANGES: Mapping[str, tuple[float, float]] = View(REGISTRY, lambda info: info.range)


def metric_range(name: str) -> tuple[float, float] | None:
    """``(low, high)`` bounds of the values of metric ``name`` (its record's); None for a
    name without a record (its intervals are then unbounded)."""
    info = metric_info(name)
    return None if info is None else info.range


#: oodsim's own metrics for which a lower value is better (their records say so).
LOWER_IS_BETTER: frozenset[str] = frozenset(
    name for name, info in _BUILTIN.items() if not info.higher_is_better
)


def higher_is_better(metric: str) -> bool:
    """Whether a larger value of ``metric`` means a better detector, as its record in
    :data:`METRIC_INFO` says (the name as given, else lower-cased: ``AUROC``). A name without
    a record is taken as higher-is-better: register a metric whose lower values are better
    (:func:`register_metric`, ``higher_is_better=False``) before its results are compared."""
    name = str(metric)
    info = metric_info(name) or metric_info(name.lower())
    return True if info is None else info.higher_is_better


def is_ood_metric(metric: str) -> bool:
    """Whether ``metric`` scores the OOD detector (a κ metric such as AUROC or FPR95) rather
    than the classifier (``accuracy``, the same for every detector of a seed).

    Names :mod:`oodsim.metrics` does not know (a protocol's own, e.g. ImageNet-O's ``aupr``)
    count as OOD metrics.
    """
    info = metric_info(str(metric))
    return info is None or info.scores_detector


def available_metrics() -> tuple[str, ...]:
    """Names of every metric (oodsim's, registered here, installed), sorted."""
    return tuple(sorted(REGISTRY.available()))


def get_metric(name: str) -> Callable[..., Any]:
    """The metric function called ``name``; unknown names fail with the closest match."""
    return REGISTRY.get(name).function
