"""Monte Carlo estimates of the expected score and their confidence intervals (the intervals
themselves are :mod:`oodsim.stats.intervals`)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import xarray as xr

from oodsim.metrics import metric_range
from oodsim.results.select import score_view
from oodsim.stats.checks import check_alpha, check_count, check_dim
from oodsim.stats.intervals import (
    INTERVAL_METHODS,
    ROW_BLOCK,
    IntervalMethod,
    bootstrap_rows_interval,
    bound_stats,
    bounded_interval,
    check_in_range,
    interval_kind,
    logit_sem,
    running_bound_stats,
    running_logit_sem,
    t_interval,
)

#: ``(low, high)`` bounds of the values; ``"metric"``: each metric's own (:func:`metric_range`).
ValueRange = tuple[float, float] | Literal["metric"] | None


def estimate(
    results_or_score: xr.Dataset | xr.DataArray,
    *,
    dim: str = "seed",
    confidence: float = 0.95,
    method: IntervalMethod = "auto",
    n_boot: int = 2000,
    rng: np.random.Generator | int | None = 0,
    value_range: ValueRange = "metric",
) -> xr.Dataset:
    """Mean over ``dim`` with a confidence interval for the expected score, per remaining cell.

    Returns a Dataset with the dims of the score less ``dim`` (and less a ``severity`` of
    results without levels: :func:`~oodsim.results.score_view`) and the variables ``mean``,
    ``std`` (ddof=1), ``sem``, ``lower``, ``upper``, ``n`` (finite values used) and
    ``n_excluded`` (NaN values skipped: failed seeds). Cells with fewer than two finite values
    get NaN intervals. ``attrs["interval"]`` names the interval: ``"bound-aware"``,
    ``"t (logit scale)"``, ``"betting"``, ``"bootstrap"`` or ``"t"`` (no cell has a range).

    ``value_range`` bounds the values: ``"metric"`` (default) takes each metric's range from
    the ``metric`` coordinate (every oodsim metric lies in [0, 1], see
    :func:`oodsim.metrics.metric_range`), a tuple applies to every cell, None declares the
    values unbounded. Cells without a range get the plain Student-t interval
    ``mean ± t · sem`` under every method but ``"bootstrap"``. For bounded cells:

    - ``"auto"`` (default, ``"bound-aware"``): per cell, the logit-scale t interval of
      :func:`t_interval` when every value lies strictly inside the range and they are not all
      equal; the two-part interval of :func:`two_part_interval` when some values sit on one
      bound (e.g. seeds with AUROC exactly 1.0, or FPR exactly 0.0, all of them included);
      the betting interval (below) when values sit on both bounds or are all equal inside the
      range. It never has zero width for n >= 2 and, for values on a bound, always contains
      that bound.
    - ``"t"``: the logit-scale t interval everywhere, ``expit(logit(p̂) ± t · s)`` with ``s``
      the standard error of :func:`t_interval`; a cell whose values all sit on a bound gets
      the point interval, and values on the bound make it far too narrow (see
      docs/statistics.md).
    - ``"betting"``: the hedged-capital betting interval of Waudby-Smith & Ramdas (2023,
      *Estimating means of bounded random variables by betting*, JRSS-B, Theorem 3, with
      their fixed-n predictable plug-in bets capped at ``c = 3/4``): exact at every n for any
      distribution on the range, hence wide (seeds in the given order; see
      :func:`betting_interval`).
    - ``"bootstrap"``: the percentile interval of ``n_boot`` resampled means (the same
      resampled seed sets for every cell), which stays inside the range of the data (a point
      for a constant cell).

    ``rng`` draws the bootstrap resamples (no other method draws): a seed (default 0, so the
    same results give the same interval), a ``numpy.random.Generator``, or None for fresh
    entropy.

    ``confidence`` must lie in (0, 1), ``n_boot`` be an integer >= 1 (checked whatever the
    method) and ``dim`` a dim of the score; ValueError naming the argument otherwise.
    """
    check_alpha(confidence, "confidence")
    n_boot = check_count(n_boot, "n_boot")
    if method not in INTERVAL_METHODS:
        raise ValueError(f"method must be one of {', '.join(INTERVAL_METHODS)}; got {method!r}")
    score = score_view(results_or_score)
    dim = check_dim(score, dim, exclude=())
    ordered = score.transpose(..., dim)
    x = np.asarray(ordered.values, dtype=float)
    low, high = _range_arrays(ordered, dim, value_range)
    check_in_range(x, low, high)
    out = estimate_array(x, confidence, method, n_boot, np.random.default_rng(rng), low, high)
    template = ordered.isel({dim: 0}, drop=True)
    data_vars = {name: template.copy(data=value) for name, value in out.items()}
    for name in ("n", "n_excluded"):
        data_vars[name].attrs["description"] = f"{name} of values along {dim!r}"
    attrs = {
        "confidence": confidence,
        "interval": interval_label(method, bool(np.isfinite(low).any())),
    }
    attrs["dim"] = dim
    if method == "bootstrap":
        attrs["n_boot"] = int(n_boot)
    return xr.Dataset(data_vars, attrs=attrs)


def interval_label(method: str, bounded: bool = True) -> str:
    """``attrs["interval"]`` of :func:`estimate` for ``method`` (with some cell bounded or not)."""
    if method == "bootstrap":
        return "bootstrap"
    if not bounded:
        return "t"
    return {"auto": "bound-aware", "t": "t (logit scale)", "betting": "betting"}[method]


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


def estimate_array(
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
        # equal values have no spread, whatever rounding their mean had
        same = np.where(finite, x, -np.inf).max(axis=-1) == np.where(finite, x, np.inf).min(axis=-1)
        var = np.where(same & (n > 1), 0.0, var)
        std = np.sqrt(var)
        sem = std / np.sqrt(n)
    if method == "bootstrap":
        lower, upper = bootstrap_rows_interval(x, finite, n, confidence, n_boot, rng)
    else:
        low = np.broadcast_to(np.asarray(low, float), n.shape)
        high = np.broadcast_to(np.asarray(high, float), n.shape)
        bounded = np.isfinite(low) & np.isfinite(high) & (n > 1)
        width = np.where(bounded, high - low, 1.0)
        p = np.clip((x - np.where(bounded, low, 0.0)[..., None]) / width[..., None], 0, 1)
        spread = np.where(bounded, logit_sem(p, finite), np.nan)
        lower, upper = t_interval(mean, sem, n, confidence, low, high, spread)
        if method != "t" and bounded.any():
            stats = bound_stats(p, finite)
            kind = interval_kind(method, bounded, stats)
            lo_p, hi_p = bounded_interval(kind, n, stats, confidence, p, finite)
            lower = np.where(kind > 0, low + width * lo_p, lower)
            upper = np.where(kind > 0, low + width * hi_p, upper)
    return {
        "mean": mean,
        "std": std,
        "sem": sem,
        "lower": lower,
        "upper": upper,
        "n": n.astype(np.int64),
        "n_excluded": (x.shape[-1] - n).astype(np.int64),
    }


def running_interval(
    values: np.ndarray,
    confidence: float = 0.95,
    value_range: tuple[float, float] | None = None,
    method: Literal["auto", "t", "betting"] = "auto",
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Running mean and interval after each finite value of a 1-D sequence.

    Returns ``(n, mean, lower, upper)``, one entry per finite value in order (NaNs skipped),
    with NaN bounds while fewer than two values are in. This is the curve a stopping rule
    watches as seeds land. Without ``value_range`` it is the plain Student-t interval; with
    one (e.g. :func:`oodsim.metrics.metric_range`) each point is the interval
    :func:`estimate` gives for the values so far with the same ``method`` (default the
    bound-aware one).
    """
    check_alpha(confidence, "confidence")
    if method not in ("auto", "t", "betting"):
        raise ValueError(f"method must be 'auto', 't' or 'betting', got {method!r}")
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
        check_in_range(v[None, :], np.array([low]), np.array([high]))
    if value_range is None:
        return n, mean, *t_interval(mean, np.sqrt(var / n), n, confidence)
    width = float(high) - float(low)
    p = np.clip((v - float(low)) / width, 0.0, 1.0)
    lower, upper = t_interval(
        mean, np.sqrt(var / n), n, confidence, low, high, running_logit_sem(p)
    )
    if method == "t":
        return n, mean, lower, upper
    stats = running_bound_stats(p)
    kind = interval_kind(method, n > 1, stats)
    need = np.flatnonzero(kind > 0)
    if need.size:
        # Each prefix as one row (values beyond it missing), in blocks of bounded memory.
        lo_p, hi_p = np.full(len(v), np.nan), np.full(len(v), np.nan)
        step = max(1, ROW_BLOCK // (8 * len(v)))
        for start in range(0, need.size, step):
            rows = need[start : start + step]
            inside = np.arange(len(v)) < n[rows, None]
            sub = {key: value[rows] for key, value in stats.items()}
            lo_r, hi_r = bounded_interval(
                kind[rows], n[rows], sub, confidence, np.where(inside, p, np.nan), inside
            )
            lo_p[rows], hi_p[rows] = lo_r, hi_r
        lower = np.where(kind > 0, float(low) + width * lo_p, lower)
        upper = np.where(kind > 0, float(low) + width * hi_p, upper)
    return n, mean, lower, upper
