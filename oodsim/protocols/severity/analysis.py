"""Analyses of severity results across models: what predicts C-OOD detection, and what κ adds.

Inputs are the Datasets of :func:`oodsim.protocols.severity_run.run_severity` (``score`` over
model × method × metric × severity, ``id_accuracy`` per model, ``id_auroc`` per model × method).

- :func:`correlation` — Spearman ρ across models between ID accuracy (or ID AUROC) and a
  metric at each severity level (the paper's observations 4 and 5).
- :func:`improvement` — per model and level, a κ's metric minus the softmax (``msp``) one
  (the paper's Figures 7, 16–19); :func:`improvement_summary` condenses it across models.
- :func:`level_trend` — Spearman ρ between the level index and the metric, per model and κ
  (negative when detection gets harder with severity, as it should).

Note: select methods with ``.sel({"method": ...})``; ``.sel(method=...)`` is xarray's own
``method`` argument (nearest-neighbour lookup) and silently selects nothing.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from scipy import stats as sps

from oodsim.errors import SpecError, UnknownNameError

PREDICTORS = ("id_accuracy", "id_auroc")


def _metric(results: xr.Dataset, metric: str) -> xr.DataArray:
    metrics = [str(m) for m in results["metric"].values]
    if metric not in metrics:
        raise UnknownNameError("metric", metric, metrics)
    return results["score"].sel(metric=metric, drop=True)


def _spearman(x: np.ndarray, y: np.ndarray) -> tuple[float, float, int]:
    """ρ, p-value and the number of finite pairs; NaN with fewer than 3 or a constant side."""
    keep = np.isfinite(x) & np.isfinite(y)
    n = int(keep.sum())
    if n < 3 or np.ptp(x[keep]) == 0 or np.ptp(y[keep]) == 0:
        return float("nan"), float("nan"), n
    result = sps.spearmanr(x[keep], y[keep])
    return float(result.statistic), float(result.pvalue), n


def correlation(
    results: xr.Dataset, predictor: str = "id_accuracy", metric: str = "auroc"
) -> xr.Dataset:
    """Spearman ρ across models between ``predictor`` and ``metric`` at every level.

    ``predictor``: ``id_accuracy`` (one value per model) or ``id_auroc`` (per model and κ,
    paired with the same κ's metric). Returns ``rho``, ``pvalue`` and ``n_models`` over
    ``(method, severity)``; NaN where fewer than three models have finite values.
    """
    if predictor not in PREDICTORS:
        raise UnknownNameError("predictor", predictor, PREDICTORS)
    score = _metric(results, metric).transpose("model", "method", "severity")
    x_all = results[predictor]
    if "method" not in x_all.dims:
        x_all = x_all.expand_dims(method=results["method"].values)
    x_all = x_all.transpose("model", "method")
    shape = (score.sizes["method"], score.sizes["severity"])
    rho, pvalue, count = np.full(shape, np.nan), np.full(shape, np.nan), np.zeros(shape, int)
    for j in range(shape[0]):
        for level in range(shape[1]):
            rho[j, level], pvalue[j, level], count[j, level] = _spearman(
                x_all.values[:, j], score.values[:, j, level]
            )
    dims = ("method", "severity")
    return xr.Dataset(
        {"rho": (dims, rho), "pvalue": (dims, pvalue), "n_models": (dims, count)},
        coords={"method": score["method"].values, "severity": score["severity"].values},
        attrs={"predictor": predictor, "metric": metric},
    )


def improvement(results: xr.Dataset, baseline: str = "msp", metric: str = "auroc") -> xr.DataArray:
    """``metric(κ) − metric(baseline)`` per (model, method, severity), baseline excluded.

    For ``fpr95`` lower is better, so the sign is flipped: positive always means "κ helps".
    """
    score = _metric(results, metric)
    methods = [str(m) for m in score["method"].values]
    if baseline not in methods:
        raise UnknownNameError("baseline", baseline, methods)
    others = [m for m in methods if m != baseline]
    if not others:
        raise SpecError("methods", methods, f"at least one κ besides the baseline {baseline!r}")
    sign = -1.0 if metric == "fpr95" else 1.0
    delta = sign * (score.sel({"method": others}) - score.sel({"method": baseline}, drop=True))
    delta.attrs = {"baseline": baseline, "metric": metric}
    return delta.rename(f"{metric}_improvement")


def improvement_summary(
    results: xr.Dataset, baseline: str = "msp", metric: str = "auroc"
) -> xr.Dataset:
    """Across models, per (method, severity): median and mean improvement, share improved."""
    delta = improvement(results, baseline, metric)
    finite = delta.notnull()
    return xr.Dataset(
        {
            "median": delta.median("model"),
            "mean": delta.mean("model"),
            "share_improved": (delta > 0).where(finite).mean("model"),
            "n_models": finite.sum("model"),
        },
        attrs={"baseline": baseline, "metric": metric},
    )


def level_trend(results: xr.Dataset, metric: str = "auroc") -> xr.DataArray:
    """Spearman ρ between level index and ``metric`` per (model, method)."""
    score = _metric(results, metric).transpose("model", "method", "severity")
    levels = np.arange(score.sizes["severity"], dtype=float)
    rho = np.array([[_spearman(levels, row)[0] for row in per_model] for per_model in score.values])
    return xr.DataArray(
        rho,
        dims=("model", "method"),
        coords={"model": score["model"].values, "method": score["method"].values},
        name=f"{metric}_level_trend",
    )
