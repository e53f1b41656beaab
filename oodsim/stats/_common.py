"""Helpers shared by the statistics modules: score extraction, metric direction, cell loops."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import numpy as np
import xarray as xr

from oodsim.metrics import KAPPA_METRICS, METRIC_INFO, METRICS

#: Metrics for which a lower value is better: those :data:`oodsim.metrics.METRIC_INFO` marks so
#: (fpr95, fpr95_ood, aurc) and common aliases of FPR names; every other metric is "higher is
#: better".
LOWER_IS_BETTER: frozenset[str] = frozenset(
    {name for name, info in METRIC_INFO.items() if not info.higher_is_better}
    | {"fpr", "fpr@95tpr", "fpr_at_95tpr", "fpr95tpr"}
)


def higher_is_better(metric: str) -> bool:
    """Whether a larger value of ``metric`` means a better detector: the metric's record in
    :data:`oodsim.metrics.METRIC_INFO` decides, else False only for the names in
    :data:`LOWER_IS_BETTER` (case-insensitive)."""
    name = str(metric)
    info = METRIC_INFO.get(name) or METRIC_INFO.get(name.lower())
    if info is not None:
        return info.higher_is_better
    return name.lower() not in LOWER_IS_BETTER


def is_ood_metric(metric: str) -> bool:
    """Whether ``metric`` scores the OOD detector (a κ metric such as AUROC or FPR95) rather
    than the classifier (``accuracy``, the same for every detector of a seed).

    Names :mod:`oodsim.metrics` does not know (a protocol's own, e.g. ImageNet-O's ``aupr``)
    count as OOD metrics.
    """
    name = str(metric)
    return name in KAPPA_METRICS or name not in METRICS


def ood_metrics(score: xr.DataArray) -> list[str]:
    """The OOD (κ) metrics of ``score``, in its order: the ones a ranking of detectors means
    something for (win probabilities skip ``accuracy``)."""
    return [name for name in metrics_of(score, None) if is_ood_metric(name)]


def as_score(results_or_score: xr.Dataset | xr.DataArray) -> xr.DataArray:
    """The ``score`` DataArray of a results Dataset, with failed seeds set to NaN.

    A DataArray passes through unchanged. The ``failure`` (seed,) variable of
    :func:`oodsim.results.build` masks every seed with a non-empty reason, even if a score of
    it is finite.
    """
    if isinstance(results_or_score, xr.DataArray):
        return results_or_score
    if not isinstance(results_or_score, xr.Dataset):
        raise TypeError(
            f"expected an xarray Dataset with a 'score' variable or a DataArray, "
            f"got {type(results_or_score).__name__}"
        )
    if "score" not in results_or_score.data_vars:
        raise KeyError(
            "results have no 'score' data variable; found "
            + (", ".join(map(str, results_or_score.data_vars)) or "none")
        )
    score = results_or_score["score"]
    if "failure" in results_or_score.data_vars:
        score = score.where(results_or_score["failure"].astype(str) == "")
    return score


def select_metric(score: xr.DataArray, metric: str) -> xr.DataArray:
    """``score`` at one metric, with a clear error naming the known metrics."""
    if "metric" not in score.dims:
        return score
    known = [str(m) for m in score["metric"].values]
    if metric not in known:
        raise KeyError(f"metric {metric!r} not in results; known metrics: {', '.join(known)}")
    return score.sel(metric=metric)


def metrics_of(score: xr.DataArray, metric: str | Sequence[str] | None) -> list[str]:
    """The metric names to work on: all of them when ``metric`` is None."""
    if metric is None:
        return [str(m) for m in score["metric"].values] if "metric" in score.dims else []
    return [metric] if isinstance(metric, str) else list(metric)


def iter_cells(
    da: xr.DataArray, keep: Sequence[str]
) -> Iterator[tuple[dict[str, object], xr.DataArray]]:
    """Yield ``(labels, sub_array)`` for every combination of the dims not in ``keep``."""
    outer = [d for d in da.dims if d not in keep]
    coords = [[v.item() for v in da[d].values] for d in outer]
    for combo in itertools.product(*coords):
        labels = dict(zip(outer, combo, strict=True))
        yield labels, da.sel(labels) if labels else da


def cell_label(labels: dict[str, object]) -> str:
    """A short human label such as ``"ood=svhn, severity=3"`` (empty for no labels)."""
    return ", ".join(f"{k}={v}" for k, v in labels.items())


def complete_rows(values: np.ndarray) -> np.ndarray:
    """Rows of a (n_seeds, n_methods) array where every method has a finite value."""
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    if values.ndim != 2:
        raise ValueError(f"values must have shape (n_seeds, n_methods), got {values.shape}")
    return values[np.isfinite(values).all(axis=1)]


def check_alpha(alpha: float, name: str = "alpha") -> float:
    """Validate a probability in (0, 1)."""
    alpha = float(alpha)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {alpha}")
    return alpha


def score_matrix(
    results: xr.Dataset | xr.DataArray, metric: str = "auroc", dim: str = "seed", **labels: object
) -> tuple[np.ndarray, list[str]]:
    """The (n_seeds, n_methods) array a stopping rule or win probability takes, for one
    metric and one cell (``labels`` pick the other dims, e.g. ``ood="svhn"``), in the seed
    order of the results, failed seeds as NaN; plus the method names."""
    score = select_metric(as_score(results), metric)
    if labels:
        score = score.sel(labels)
    extra = [d for d in score.dims if d not in (dim, "method") and score.sizes[d] > 1]
    if extra:
        raise ValueError(f"pick one label of {', '.join(extra)} (e.g. {extra[0]}=...)")
    score = score.squeeze([d for d in score.dims if d not in (dim, "method")], drop=True)
    methods = [str(m) for m in score["method"].values]
    return np.asarray(score.transpose(dim, "method").values, dtype=float), methods
