"""Several metrics of κ at once (:func:`evaluate`): oodsim's own from one sort per block of
rows (:mod:`oodsim.metrics.kernels`), registered ones row by row."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from oodsim.errors import UnknownNameError
from oodsim.metrics.facts import (
    DEFAULT_KAPPA_METRICS,
    METRIC_INFO,
    VALIDATION_METRICS,
)
from oodsim.metrics.inputs import as_is_ood, as_kappa, check_finite, require_correct
from oodsim.metrics.kernels import compute_metrics
from oodsim.metrics.thresholds import rates_at_validation_threshold


def evaluate(
    kappa: Any,
    is_ood: Any,
    names: Iterable[str] = DEFAULT_KAPPA_METRICS,
    *,
    correct: Any = None,
    val_kappa: Any = None,
    context: str = "",
) -> dict[str, Any]:
    """Several κ metrics at once, sharing one validation and one sort per block of rows.

    ``names`` are any metrics of κ in :data:`METRIC_INFO` (oodsim's :data:`KAPPA_METRICS` and
    :data:`VALIDATION_METRICS`, ImageNet-O's names, registered ones; default:
    :data:`DEFAULT_KAPPA_METRICS`). ``oscr`` and ``aurc`` need ``correct``, each sample's
    prediction correctness (bool, ``(n,)`` or broadcastable to ``kappa``; read at ID samples
    only); ``aurc`` is taken over the ID samples (``is_ood`` False) of each row. The
    validation metrics need ``val_kappa``, κ of the ID validation samples (``(..., m)``,
    leading dimensions broadcasting to ``kappa``'s). Returns ``{name: float64 of shape
    (...)}``; equal to calling each metric separately (``aurc`` on the ID samples alone).
    """
    names = tuple(names)
    known = tuple(name for name, info in METRIC_INFO.items() if info.scores_detector)
    for name in names:
        if name not in known:
            raise UnknownNameError("metric", name, known)
        info = METRIC_INFO[name]
        if correct is None and info.needs_correct:
            require_correct(name, correct, context)
        if val_kappa is None and info.needs_val_kappa:
            raise ValueError(
                f"metric {name!r} needs val_kappa=: κ of the ID validation samples"
                + (f" [{context}]" if context else "")
            )
    on_test = tuple(name for name in names if METRIC_INFO[name].kernel is not None)
    kernels = tuple(METRIC_INFO[name].kernel for name in on_test)
    values = (
        dict(zip(on_test, compute_metrics(kappa, is_ood, kernels, context, correct)))
        if on_test
        else {}
    )
    if any(name in VALIDATION_METRICS for name in names):
        tpr, fpr = rates_at_validation_threshold(kappa, is_ood, val_kappa, context=context)
        values |= {"tpr_at_val95": tpr, "fpr_at_val95": fpr}
    mine = [name for name in names if name not in values]
    if mine:
        values |= _row_by_row(kappa, is_ood, mine, context)
    return {name: values[name] for name in names}


def _row_by_row(kappa: Any, is_ood: Any, names: list[str], context: str) -> dict[str, Any]:
    """Registered metrics (``function(kappa, is_ood)`` of one row) on every row, checked as
    the built-ins' inputs are; each value a float64 of κ's leading shape."""
    scores = as_kappa(kappa, context)
    labels = as_is_ood(is_ood, scores.shape, context)
    check_finite(scores, context)
    batch_shape, n = scores.shape[:-1], scores.shape[-1]
    rows = scores.reshape(-1, n)
    flags = np.broadcast_to(labels, scores.shape).reshape(-1, n)
    out = {}
    for name in names:
        function = METRIC_INFO[name].function
        value = [float(function(row, flag)) for row, flag in zip(rows, flags)]
        out[name] = np.asarray(value, dtype=np.float64).reshape(batch_shape)[()]
    return out
