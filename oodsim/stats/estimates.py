"""Monte Carlo estimates of the expected score and their confidence intervals."""

from __future__ import annotations

from typing import Literal

import numpy as np
import xarray as xr
from scipy import stats as sps
from scipy.special import expit, logit

from oodsim.metrics import metric_range
from oodsim.stats._common import as_score, check_alpha

IntervalMethod = Literal["t", "bootstrap"]
#: ``(low, high)`` bounds of the values; ``"metric"``: each metric's own (:func:`metric_range`).
ValueRange = tuple[float, float] | Literal["metric"] | None

#: Largest number of float64 elements a vectorized bootstrap block may hold (~128 MiB).
_BLOCK = 2**24


def estimate(
    results_or_score: xr.Dataset | xr.DataArray,
    *,
    dim: str = "seed",
    confidence: float = 0.95,
    method: IntervalMethod = "t",
    n_boot: int = 2000,
    rng: np.random.Generator | int | None = None,
    value_range: ValueRange = "metric",
) -> xr.Dataset:
    """Mean over ``dim`` with a confidence interval for the expected score, per remaining cell.

    Returns a Dataset with the dims of the score less ``dim`` and the variables ``mean``,
    ``std`` (ddof=1), ``sem``, ``lower``, ``upper``, ``n`` (finite values used) and
    ``n_excluded`` (NaN values skipped: failed seeds). Cells with fewer than two finite values
    get NaN intervals.

    ``method="t"`` gives the Student-t interval of the mean; for a bounded metric (every metric
    of oodsim lies in [0, 1], see :func:`oodsim.metrics.metric_range`) it is built on the logit
    scale, ``expit(logit(p̂) ± t · sem / (p̂(1 − p̂)))``, so it never leaves the range and is
    skewed away from the bound as the mean of a bounded score is. ``"bootstrap"`` gives the
    percentile interval of ``n_boot`` resampled means (the same resampled seed sets for every
    cell), which stays inside the range of the data. ``value_range`` bounds the values:
    ``"metric"`` (default) takes each metric's range from the ``metric`` coordinate, a tuple
    applies to every cell, None gives the plain symmetric t interval.
    """
    check_alpha(confidence, "confidence")
    if method not in ("t", "bootstrap"):
        raise ValueError(f"method must be 't' or 'bootstrap', got {method!r}")
    score = as_score(results_or_score)
    if dim not in score.dims:
        raise ValueError(f"dimension {dim!r} not in score dims {score.dims}")
    ordered = score.transpose(..., dim)
    x = np.asarray(ordered.values, dtype=float)
    low, high = _range_arrays(ordered, dim, value_range)
    _check_in_range(x, low, high)
    out = _estimate_array(x, confidence, method, n_boot, np.random.default_rng(rng), low, high)
    template = ordered.isel({dim: 0}, drop=True)
    data_vars = {name: template.copy(data=value) for name, value in out.items()}
    for name in ("n", "n_excluded"):
        data_vars[name].attrs["description"] = f"{name} of values along {dim!r}"
    bounded = method == "t" and bool(np.isfinite(low).any())
    attrs = {"confidence": confidence, "interval": "t (logit scale)" if bounded else method}
    attrs["dim"] = dim
    if method == "bootstrap":
        attrs["n_boot"] = int(n_boot)
    return xr.Dataset(data_vars, attrs=attrs)


def _range_arrays(
    ordered: xr.DataArray, dim: str, value_range: ValueRange
) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper value bounds broadcastable against ``ordered`` less its last dim
    (``dim``); NaN where a cell is unbounded."""
    shape = ordered.shape[:-1]
    if value_range is None:
        return np.full(shape, np.nan), np.full(shape, np.nan)
    if value_range != "metric":
        lo, hi = map(float, value_range)  # type: ignore[arg-type]
        if not (np.isfinite(lo) and np.isfinite(hi) and hi > lo):
            raise ValueError(
                f"value_range must be finite (low, high) with high > low, got {value_range}"
            )
        return np.full(shape, lo), np.full(shape, hi)
    if "metric" not in ordered.coords:
        return np.full(shape, np.nan), np.full(shape, np.nan)
    names = np.atleast_1d(ordered["metric"].values)
    ranges = np.array([metric_range(str(m)) or (np.nan, np.nan) for m in names], dtype=float)
    if "metric" not in ordered.dims:  # one metric selected: a scalar coordinate
        return np.full(shape, ranges[0, 0]), np.full(shape, ranges[0, 1])
    axis = ordered.dims.index("metric")
    along = [1] * len(shape)
    along[axis] = len(names)
    lo = np.broadcast_to(ranges[:, 0].reshape(along), shape)
    hi = np.broadcast_to(ranges[:, 1].reshape(along), shape)
    return lo, hi


def _check_in_range(x: np.ndarray, low: np.ndarray, high: np.ndarray) -> None:
    """Values outside their declared range would make a bounded interval meaningless."""
    with np.errstate(invalid="ignore"):
        outside = (x < low[..., None]) | (x > high[..., None])
    if outside.any():
        bad = x[outside][0]
        raise ValueError(
            f"value {bad!r} lies outside the metric's range; pass value_range=None for an "
            "unbounded interval or the right (low, high)"
        )


def t_interval(
    mean: np.ndarray,
    sem: np.ndarray,
    n: np.ndarray,
    confidence: float,
    low: np.ndarray | float = np.nan,
    high: np.ndarray | float = np.nan,
) -> tuple[np.ndarray, np.ndarray]:
    """Student-t interval of a mean, on the logit scale where ``low``/``high`` bound the values.

    Unbounded cells (NaN bounds) get ``mean ± t_{(1+c)/2, n-1} · sem``. Bounded cells map the
    mean to ``p̂ = (mean − low) / (high − low)`` and take ``p̂``'s interval as
    ``expit(logit(p̂) ± t · se_p / (p̂(1 − p̂)))`` (delta method), then map back: the interval
    lies inside ``[low, high]``, and a mean on a bound (every value on it) gives a point. NaN
    where ``n < 2``.
    """
    mean, sem, n = np.asarray(mean, float), np.asarray(sem, float), np.asarray(n)
    q = sps.t.ppf(0.5 + confidence / 2, np.maximum(n - 1, 1))
    half = np.where(n > 1, q * sem, np.nan)
    lower, upper = mean - half, mean + half
    low, high = np.broadcast_to(low, mean.shape), np.broadcast_to(high, mean.shape)
    bounded = np.isfinite(low) & np.isfinite(high)
    if not bounded.any():
        return lower, upper
    width = np.where(bounded, high - low, 1.0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        p = np.clip((mean - low) / width, 0.0, 1.0)
        inside = (p > 0.0) & (p < 1.0)
        centre = logit(np.where(inside, p, 0.5))
        spread = np.where(inside, q * sem / width / (p * (1.0 - p)), 0.0)
        b_lower = np.where(inside, low + width * expit(centre - spread), mean)
        b_upper = np.where(inside, low + width * expit(centre + spread), mean)
    keep = bounded & (n > 1)
    return np.where(keep, b_lower, lower), np.where(keep, b_upper, upper)


def _estimate_array(
    x: np.ndarray,
    confidence: float,
    method: IntervalMethod,
    n_boot: int,
    rng: np.random.Generator,
    low: np.ndarray | float = np.nan,
    high: np.ndarray | float = np.nan,
) -> dict[str, np.ndarray]:
    """Estimates along the last axis of ``x`` (NaN = missing)."""
    finite = np.isfinite(x)
    n = finite.sum(axis=-1)
    filled = np.where(finite, x, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, filled.sum(axis=-1) / n, np.nan)
        centered = np.where(finite, x - mean[..., None], 0.0)
        var = np.where(n > 1, (centered**2).sum(axis=-1) / (n - 1), np.nan)
        std = np.sqrt(var)
        sem = std / np.sqrt(n)
    if method == "t":
        lower, upper = t_interval(mean, sem, n, confidence, low, high)
    else:
        lower, upper = _bootstrap_interval(x, finite, n, confidence, n_boot, rng)
    return {
        "mean": mean,
        "std": std,
        "sem": sem,
        "lower": lower,
        "upper": upper,
        "n": n.astype(np.int64),
        "n_excluded": (x.shape[-1] - n).astype(np.int64),
    }


def _bootstrap_interval(
    x: np.ndarray,
    finite: np.ndarray,
    n: np.ndarray,
    confidence: float,
    n_boot: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the mean, vectorized as (cells, n) @ counts.T.

    Each resample is a multinomial count vector over the finite values of a cell, so the mean
    of a resample is one matrix product; cells are grouped by their number of finite values.
    """
    if n_boot < 1:
        raise ValueError(f"n_boot must be positive, got {n_boot}")
    flat = x.reshape(-1, x.shape[-1])
    flat_n = n.reshape(-1)
    # Finite values first, original order kept, so complete cells share the same seed draws.
    order = np.argsort(~finite.reshape(flat.shape), axis=-1, kind="stable")
    compact = np.take_along_axis(flat, order, axis=-1)
    lower = np.full(flat_n.shape, np.nan)
    upper = np.full(flat_n.shape, np.nan)
    probs = [0.5 - confidence / 2, 0.5 + confidence / 2]
    for size in np.unique(flat_n[flat_n > 1]):
        rows = np.flatnonzero(flat_n == size)
        counts = rng.multinomial(size, np.full(size, 1.0 / size), size=n_boot).astype(float)
        step = max(1, _BLOCK // max(n_boot, size))
        for start in range(0, len(rows), step):
            block = rows[start : start + step]
            means = compact[block, :size] @ counts.T / size
            lo, hi = np.quantile(means, probs, axis=-1)
            lower[block], upper[block] = lo, hi
    return lower.reshape(n.shape), upper.reshape(n.shape)


def running_interval(
    values: np.ndarray,
    confidence: float = 0.95,
    value_range: tuple[float, float] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Running mean and t interval after each finite value of a 1-D sequence.

    Returns ``(n, mean, lower, upper)``, one entry per finite value in order (NaNs skipped),
    with NaN bounds while fewer than two values are in. This is the curve a stopping rule
    watches as seeds land. With ``value_range`` (e.g. :func:`oodsim.metrics.metric_range`) the
    interval is the bounded one of :func:`t_interval`, as in :func:`estimate`.
    """
    check_alpha(confidence, "confidence")
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    n = np.arange(1, len(v) + 1)
    if len(v) == 0:
        empty = np.empty(0)
        return n, empty, empty, empty
    shifted = v - v[0]  # shift for numerically stable cumulative sums
    s1, s2 = np.cumsum(shifted), np.cumsum(shifted**2)
    mean = s1 / n
    with np.errstate(invalid="ignore", divide="ignore"):
        var = np.where(n > 1, np.maximum(s2 - n * mean**2, 0.0) / (n - 1), np.nan)
    mean = mean + v[0]
    low, high = value_range if value_range is not None else (np.nan, np.nan)
    if value_range is not None:
        _check_in_range(v[None, :], np.array([low]), np.array([high]))
    lower, upper = t_interval(mean, np.sqrt(var / n), n, confidence, low, high)
    return n, mean, lower, upper
