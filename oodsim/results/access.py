"""Reading results the way every analysis does: the ``score`` array with failed seeds masked,
one metric or the OOD metrics of it, the cells of the other dims, the method names, the seeds
that were scored. The statistics and the reports read results through these and nothing else.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import TypeVar

import numpy as np
import xarray as xr

from oodsim.metrics import is_ood_metric

_Scores = TypeVar("_Scores", xr.Dataset, xr.DataArray)


def as_score(results_or_score: xr.Dataset | xr.DataArray) -> xr.DataArray:
    """The ``score`` DataArray of a results Dataset, with failed seeds set to NaN.

    A DataArray passes through unchanged. The ``failure`` (seed,) variable of
    :func:`oodsim.results.build` masks every seed with a non-empty reason, even if a score of
    it is finite.
    """
    if isinstance(results_or_score, xr.DataArray):
        return _distinct_seeds(_in_memory(results_or_score))
    if not isinstance(results_or_score, xr.Dataset):
        raise TypeError(
            f"expected an xarray Dataset with a 'score' variable or a DataArray, "
            f"got {type(results_or_score).__name__}"
        )
    return scored(results_or_score, "score")


def scored(results: xr.Dataset, name: str) -> xr.DataArray:
    """``results[name]`` (a per-seed variable: ``score``, a severity run's ``id_accuracy``)
    with the seeds whose ``failure`` is not empty set to NaN: failed seeds, and seeds excluded
    as degenerate, which keep their values in the results but enter no estimate."""
    if name not in results.data_vars:
        raise KeyError(
            f"results have no {name!r} data variable; found "
            + (", ".join(map(str, results.data_vars)) or "none")
        )
    values = _distinct_seeds(_in_memory(results[name]))
    if "failure" in results.data_vars and "seed" in values.dims:
        values = values.where(scored_seeds(results))
    return values


def scored_seeds(results: xr.Dataset) -> xr.DataArray:
    """True for each seed whose ``failure`` is empty: neither failed nor excluded as
    degenerate, so it enters the estimates."""
    return as_text(results["failure"]) == ""


def as_text(values: xr.DataArray) -> xr.DataArray:
    """A text variable of results (``failure``, a severity run's ``degenerate``) as an
    in-memory array of ``str``: results opened lazily (``xr.open_zarr``) hold numpy's
    variable-width ``StringDType`` there, which dask cannot cast (``TypeError``). The
    variable is a short string a seed: reading it costs nothing."""
    text = np.asarray(values.values)
    if text.dtype.kind == "T":  # StringDType casts to object only, not to a fixed width
        text = text.astype(object)
    return values.copy(data=text.astype(str))


def _in_memory(values: xr.DataArray) -> xr.DataArray:
    """``values`` loaded, where results were opened lazily (``xr.open_zarr``: dask arrays,
    which the analyses' scalar reads do not take); results are small."""
    return values.compute() if values.chunks is not None else values


def _distinct_seeds(values: xr.DataArray) -> xr.DataArray:
    """``values``, or a ValueError where a seed label repeats: results concatenated from runs
    that share seeds (``xr.concat([a, b], "seed")``) count those seeds twice, and every
    interval and test then claims a precision the seeds do not have."""
    index = values.indexes.get("seed")
    if index is not None and not index.is_unique:
        repeated = [str(s) for s in index[index.duplicated()].unique()]
        shown = ", ".join(repeated[:5]) + (", ..." if len(repeated) > 5 else "")
        raise ValueError(
            f"seed labels repeat ({len(repeated)} of them: {shown}): results joined from runs "
            "that share seeds would count each of those seeds twice. Keep one of each "
            "(results.drop_duplicates('seed')), or run the spec with more seeds: a run resumes "
            "from the cache"
        )
    return values


def held_metric(score: xr.Dataset | xr.DataArray) -> str | None:
    """The one metric of ``score`` when its ``metric`` dim was selected away
    (``sel(metric="fpr95")`` and :func:`oodsim.select` keep it as a scalar coordinate), else
    None. Analyses take a metric's direction from it, not from their ``metric`` argument: an
    fpr95 score analysed under the default "auroc" was ranked higher-is-better."""
    if "metric" in score.dims or "metric" not in score.coords or score["metric"].ndim:
        return None
    return str(score["metric"].item())


def select_metric(score: _Scores, metric: str) -> _Scores:
    """``score`` at one metric, with a clear error naming the known metrics (the one it holds,
    when its metric dim was selected: :func:`held_metric`)."""
    if "metric" not in score.dims:
        held = held_metric(score)
        if held is not None and metric != held:
            raise KeyError(f"metric {metric!r} not in results; known metrics: {held}")
        return score
    known = [str(m) for m in score["metric"].values]
    if metric not in known:
        raise KeyError(f"metric {metric!r} not in results; known metrics: {', '.join(known)}")
    return score.sel(metric=metric)


def at_metrics(score: _Scores, names: Sequence[str]) -> _Scores:
    """``score`` at the metrics ``names`` (a list of :func:`metrics_of`) along a ``metric``
    dim, for tables and figures laid out by metric: a score of one selected metric gets its
    dim back, of that one label."""
    if "metric" in score.dims:
        return score.sel(metric=list(names))
    for name in names:
        select_metric(score, name)  # KeyError for any other
    dims = list(score.dims)  # where build() puts it: after method
    return score.expand_dims("metric", axis=dims.index("method") + 1 if "method" in dims else 0)


def metrics_of(score: xr.DataArray, metric: str | Sequence[str] | None) -> list[str]:
    """The metric names to work on: all of them when ``metric`` is None (the one it holds,
    for a score whose metric dim was selected)."""
    if metric is None:
        if "metric" in score.dims:
            return [str(m) for m in score["metric"].values]
        held = held_metric(score)
        return [] if held is None else [held]
    return [metric] if isinstance(metric, str) else list(metric)


def ood_metrics(score: xr.DataArray) -> list[str]:
    """The OOD (κ) metrics of ``score``, in its order: the ones a ranking of detectors means
    something for (win probabilities skip ``accuracy``)."""
    return [name for name in metrics_of(score, None) if is_ood_metric(name)]


#: Dims that are never the replicate dim of a statistic: the methods compared and the metrics.
NOT_REPLICATES: tuple[str, ...] = ("method", "metric")


def check_dim(score: xr.DataArray, dim: object, exclude: Sequence[str] = NOT_REPLICATES) -> str:
    """``dim`` as the name of a dim of ``score`` that is not in ``exclude``: the dim the
    statistic runs over (its replicates, ``"seed"`` for results). ValueError naming ``dim``
    and the dims allowed otherwise."""
    allowed = [str(d) for d in score.dims if str(d) not in exclude]
    if not isinstance(dim, str) or dim not in allowed:
        left_out = [d for d in exclude if d in score.dims]
        why = f" ({', '.join(left_out)} cannot be)" if left_out else ""
        raise ValueError(
            f"dim must be one of the score's dims {', '.join(map(repr, allowed)) or 'none'}"
            f"{why}, got {dim!r}"
        )
    return dim


def score_matrix(
    results: xr.Dataset | xr.DataArray, metric: str = "auroc", dim: str = "seed", **labels: object
) -> tuple[np.ndarray, list[str]]:
    """The (n_seeds, n_methods) array a stopping rule or win probability takes, for one
    metric and one cell (``labels`` pick the other dims, e.g. ``ood="svhn"``), in the seed
    order of the results, failed seeds as NaN; plus the method names."""
    score = select_metric(as_score(results), metric)
    dim = check_dim(score, dim)
    if labels:
        score = score.sel(labels)
    extra = [d for d in score.dims if d not in (dim, "method") and score.sizes[d] > 1]
    if extra:
        raise ValueError(f"pick one label of {', '.join(extra)} (e.g. {extra[0]}=...)")
    score = score.squeeze([d for d in score.dims if d not in (dim, "method")], drop=True)
    methods = [str(m) for m in score["method"].values]
    return np.asarray(score.transpose(dim, "method").values, dtype=float), methods


def iter_cells(
    da: xr.DataArray, keep: Sequence[str]
) -> Iterator[tuple[dict[str, object], xr.DataArray]]:
    """Yield ``(labels, sub_array)`` for every combination of the dims not in ``keep``."""
    outer = [d for d in da.dims if d not in keep]
    coords = [da[d].values.tolist() for d in outer]  # Python scalars, whatever the dtype
    for combo in itertools.product(*coords):
        labels = dict(zip(outer, combo, strict=True))
        yield labels, da.sel(labels) if labels else da


def cell_label(labels: dict[str, object]) -> str:
    """A short human label such as ``"ood=svhn, severity=3"`` (empty for no labels)."""
    return ", ".join(f"{k}={v}" for k, v in labels.items())


def default_metric(score: xr.DataArray) -> str:
    """``auroc`` when present, else the first OOD metric (else the first metric)."""
    names = metrics_of(score, None)
    if not names:
        raise ValueError("results have no metric dimension")
    ood = ood_metrics(score)
    return "auroc" if "auroc" in names else (ood or names)[0]


def n_scored(score: xr.DataArray) -> int:
    """Seeds with at least one finite score (failed and excluded seeds are NaN)."""
    others = [d for d in score.dims if d != "seed"]
    return int(score.notnull().any(others).sum())


def method_names(da: xr.Dataset | xr.DataArray) -> list[str]:
    """The labels of the ``method`` dim, in the results' order."""
    return [str(m) for m in da["method"].values]
