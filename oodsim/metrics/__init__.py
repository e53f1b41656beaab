"""Vectorized OOD metrics over a leading batch of score vectors, one record per metric.

Every κ metric takes ``kappa`` of shape ``(..., n)`` (a confidence: higher means "more
in-distribution") and ``is_ood`` of shape ``(n,)`` or ``(..., n)``, and returns float64 of shape
``(...)``. All rows are sorted at once along the last axis; per-row curves are then built with
cumulative counts, keeping only the last index of each run of tied scores exactly as
scikit-learn does, so values match ``roc_auc_score``, ``precision_recall_curve`` + ``auc``,
``average_precision_score`` and ``roc_curve`` to rounding error. The metrics that also judge the
classifier (:func:`oscr`, :func:`aurc`) take ``correct``, the ID samples' prediction correctness,
of the same trailing length.

Each convention of the field has its own name (``fpr95`` vs ``fpr95_ood``, ``aupr_in`` vs
``ap_in``); :data:`METRIC_INFO` holds one :class:`MetricInfo` per name saying its direction,
range, inputs and the published number it reproduces (docs/metrics.md has the table).

Large batches are processed in blocks of rows (one sort per block, no loop over rows) so that
temporaries stay cache-sized; κ is sorted in its own dtype, never converted to float64.

The modules: :mod:`.inputs` (checks), :mod:`.kernels` (the vectorised sort and counts),
:mod:`.functions` (one function per metric), :mod:`.record` (what a metric is),
:mod:`.builtin` (oodsim's own records), :mod:`.facts` (the registry and what is asked of a
metric) and :mod:`.evaluate` (several metrics from one sort)."""

from oodsim.metrics.calibration import brier, ece, nll
from oodsim.metrics.evaluate import evaluate
from oodsim.metrics.facts import (
    DEFAULT_KAPPA_METRICS,
    KAPPA_METRICS,
    LOWER_IS_BETTER,
    METRIC_INFO,
    METRIC_RANGES,
    METRICS,
    VALIDATION_METRICS,
    available_metrics,
    get_metric,
    higher_is_better,
    is_ood_metric,
    kappa_metric_names,
    metric_info,
    metric_range,
    register_metric,
    spec_metrics,
)
from oodsim.metrics.functions import (
    COVERAGES,
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
    fpr_at_tpr,
    fpr_at_tpr_ood,
    oscr,
    oscr_pytorch_ood,
    risk_coverage_curve,
    selective_risk,
    selective_risk95,
)
from oodsim.metrics.inputs import NonFiniteScoreError
from oodsim.metrics.record import METRIC_INPUTS, MetricInfo
from oodsim.metrics.thresholds import (
    fpr_at_val95,
    rates_at_validation_threshold,
    tpr_at_val95,
    validation_threshold,
)

__all__ = [
    "COVERAGES",
    "DEFAULT_KAPPA_METRICS",
    "KAPPA_METRICS",
    "LOWER_IS_BETTER",
    "METRICS",
    "METRIC_INFO",
    "METRIC_INPUTS",
    "METRIC_RANGES",
    "VALIDATION_METRICS",
    "MetricInfo",
    "NonFiniteScoreError",
    "accuracy",
    "ap_in",
    "ap_out",
    "aupr_in",
    "aupr_out",
    "aurc",
    "aurc_thresholds",
    "auroc",
    "available_metrics",
    "brier",
    "ece",
    "eaurc",
    "evaluate",
    "fpr95",
    "fpr95_ood",
    "fpr_at_tpr",
    "fpr_at_tpr_ood",
    "fpr_at_val95",
    "get_metric",
    "higher_is_better",
    "is_ood_metric",
    "kappa_metric_names",
    "metric_info",
    "register_metric",
    "metric_range",
    "spec_metrics",
    "nll",
    "oscr",
    "oscr_pytorch_ood",
    "rates_at_validation_threshold",
    "risk_coverage_curve",
    "selective_risk",
    "selective_risk95",
    "tpr_at_val95",
    "validation_threshold",
]
