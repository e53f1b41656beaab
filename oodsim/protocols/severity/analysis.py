"""Analyses of severity results across models: what predicts C-OOD detection, and what κ adds.

Inputs are severity results (``oodsim.run`` of a severity spec): ``score`` over seed × method ×
metric × severity × model [× dataset], ``id_accuracy`` per (seed, model[, dataset]),
``id_auroc`` per (seed, method, model[, dataset]). Statistics across models use each model's
mean over seeds (failed seeds and seeds excluded as degenerate skipped, as everywhere:
:func:`oodsim.results.access.scored`); a ``dataset`` dimension is kept.

- :func:`correlation` — Spearman ρ across models between ID accuracy (or ID AUROC) and a
  metric at each severity level (the paper's observations 4 and 5).
- :func:`improvement` — per seed, model and level, a κ's metric minus the softmax (``msp``)
  one (the paper's Figures 7, 16–19); :func:`improvement_summary` condenses it across models.
- :func:`level_trend` — Spearman ρ between the level index and the metric, per model and κ
  (negative when detection gets harder with severity, as it should).
- :func:`per_dataset` — (label, results) pairs, one per dataset.

Note: select methods with ``.sel({"method": ...})``; ``.sel(method=...)`` is xarray's own
``method`` argument (nearest-neighbour lookup) and silently selects nothing.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from scipy import stats as sps

from oodsim.errors import SpecError, UnknownNameError
from oodsim.metrics import higher_is_better
from oodsim.results.access import as_score, scored

PREDICTORS = ("id_accuracy", "id_auroc")


def seed_mean(values: xr.DataArray) -> xr.DataArray:
    """The mean over seeds (failed seeds are NaN and skipped); unchanged without seeds."""
    return values.mean("seed", skipna=True) if "seed" in values.dims else values


def _metric(results: xr.Dataset, metric: str) -> xr.DataArray:
    metrics = [str(m) for m in results["metric"].values]
    if metric not in metrics:
        raise UnknownNameError("metric", metric, metrics)
    return as_score(results).sel(metric=metric, drop=True)


def _spearman(x: np.ndarray, y: np.ndarray) -> tuple[float, float, int]:
    """ρ, p-value and the number of finite pairs; NaN with fewer than 3 or a constant side."""
    keep = np.isfinite(x) & np.isfinite(y)
    n = int(keep.sum())
    if n < 3 or np.ptp(x[keep]) == 0 or np.ptp(y[keep]) == 0:
        return float("nan"), float("nan"), n
    result = sps.spearmanr(x[keep], y[keep])
    return float(result.statistic), float(result.pvalue), n


def _spearman_along(x: xr.DataArray, y: xr.DataArray, dim: str) -> xr.Dataset:
    """:func:`_spearman` along ``dim`` for every other cell (x and y broadcast)."""
    rho, pvalue, count = xr.apply_ufunc(
        lambda a, b: np.vectorize(_spearman, signature="(n),(n)->(),(),()")(a, b),
        x,
        y,
        input_core_dims=[[dim], [dim]],
        output_core_dims=[[], [], []],
    )
    return xr.Dataset({"rho": rho, "pvalue": pvalue, "n": count.astype(int)})


def correlation(
    results: xr.Dataset, predictor: str = "id_accuracy", metric: str = "auroc"
) -> xr.Dataset:
    """Spearman ρ across models between ``predictor`` and ``metric`` at every level.

    ``predictor``: ``id_accuracy`` (one value per model) or ``id_auroc`` (per model and κ,
    paired with the same κ's metric); both sides are means over seeds. Returns ``rho``,
    ``pvalue`` and ``n_models`` over ``(method, severity[, dataset])``; NaN where fewer than
    three models have finite values.
    """
    if predictor not in PREDICTORS:
        raise UnknownNameError("predictor", predictor, PREDICTORS)
    score = seed_mean(_metric(results, metric))
    x = seed_mean(scored(results, predictor))
    out = _spearman_along(x, score, "model").rename({"n": "n_models"})
    out = out.transpose("method", "severity", ...)
    out.attrs = {"predictor": predictor, "metric": metric}
    return out


def improvement(results: xr.Dataset, baseline: str = "msp", metric: str = "auroc") -> xr.DataArray:
    """``metric(κ) − metric(baseline)`` per (seed, model, method, severity[, dataset]),
    baseline excluded.

    For a lower-is-better metric (``fpr95``, ``fpr95_ood``, ``aurc``) the sign is flipped:
    positive always means "κ helps".
    """
    score = _metric(results, metric)
    methods = [str(m) for m in score["method"].values]
    if baseline not in methods:
        raise UnknownNameError("baseline", baseline, methods)
    others = [m for m in methods if m != baseline]
    if not others:
        raise SpecError("methods", methods, f"at least one κ besides the baseline {baseline!r}")
    sign = 1.0 if higher_is_better(metric) else -1.0
    delta = sign * (score.sel({"method": others}) - score.sel({"method": baseline}, drop=True))
    delta.attrs = {"baseline": baseline, "metric": metric}
    return delta.rename(f"{metric}_improvement")


def improvement_summary(
    results: xr.Dataset, baseline: str = "msp", metric: str = "auroc"
) -> xr.Dataset:
    """Across models, per (method, severity[, dataset]), of each model's mean improvement over
    seeds: median and mean improvement, share of models improved, number of models."""
    delta = seed_mean(improvement(results, baseline, metric))
    finite = delta.notnull()
    return xr.Dataset(
        {
            "median": delta.median("model"),
            "mean": delta.mean("model"),
            "share_improved": (delta > 0).where(finite).mean("model"),
            "n_models": finite.sum("model"),
        },
        attrs={"baseline": baseline, "metric": metric},
    ).transpose("method", "severity", ...)


def level_trend(results: xr.Dataset, metric: str = "auroc") -> xr.DataArray:
    """Spearman ρ between level index and ``metric`` (mean over seeds) per (model, method
    [, dataset])."""
    score = seed_mean(_metric(results, metric))
    levels = xr.DataArray(np.arange(score.sizes["severity"], dtype=float), dims="severity")
    rho = _spearman_along(levels, score, "severity")["rho"]
    return rho.transpose("model", "method", ...).rename(f"{metric}_level_trend")


def per_dataset(results: xr.Dataset) -> list[tuple[str, xr.Dataset]]:
    """(label, results of one dataset) pairs; one pair labelled "" without a dataset dim."""
    if "dataset" not in results.dims:
        return [("", results)]
    return [(str(label), results.sel(dataset=label)) for label in results["dataset"].values]
