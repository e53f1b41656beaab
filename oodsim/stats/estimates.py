"""Monte Carlo estimates of the expected score and their confidence intervals."""

from __future__ import annotations

from typing import Literal

import numpy as np
import xarray as xr
from scipy import stats as sps

from oodsim.stats._common import as_score, check_alpha

IntervalMethod = Literal["t", "bootstrap"]

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
) -> xr.Dataset:
    """Mean over ``dim`` with a confidence interval for the expected score, per remaining cell.

    Returns a Dataset with the dims of the score less ``dim`` and the variables ``mean``,
    ``std`` (ddof=1), ``sem``, ``lower``, ``upper``, ``n`` (finite values used) and
    ``n_excluded`` (NaN values skipped: failed seeds). ``method="t"`` gives the Student-t
    interval ``mean ± t_{(1+c)/2, n-1} · sem``; ``"bootstrap"`` the percentile interval of
    ``n_boot`` resampled means (the same resampled seed sets for every cell). Cells with
    fewer than two finite values get NaN intervals.
    """
    check_alpha(confidence, "confidence")
    if method not in ("t", "bootstrap"):
        raise ValueError(f"method must be 't' or 'bootstrap', got {method!r}")
    score = as_score(results_or_score)
    if dim not in score.dims:
        raise ValueError(f"dimension {dim!r} not in score dims {score.dims}")
    ordered = score.transpose(..., dim)
    x = np.asarray(ordered.values, dtype=float)
    out = _estimate_array(x, confidence, method, n_boot, np.random.default_rng(rng))
    template = ordered.isel({dim: 0}, drop=True)
    data_vars = {name: template.copy(data=value) for name, value in out.items()}
    for name in ("n", "n_excluded"):
        data_vars[name].attrs["description"] = f"{name} of values along {dim!r}"
    attrs = {"confidence": confidence, "interval": method, "dim": dim}
    if method == "bootstrap":
        attrs["n_boot"] = int(n_boot)
    return xr.Dataset(data_vars, attrs=attrs)


def _estimate_array(
    x: np.ndarray,
    confidence: float,
    method: IntervalMethod,
    n_boot: int,
    rng: np.random.Generator,
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
        q = sps.t.ppf(0.5 + confidence / 2, np.maximum(n - 1, 1))
        half = np.where(n > 1, q * sem, np.nan)
        lower, upper = mean - half, mean + half
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
    values: np.ndarray, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Running mean and Student-t interval after each finite value of a 1-D sequence.

    Returns ``(n, mean, lower, upper)``, one entry per finite value in order (NaNs skipped),
    with NaN bounds while fewer than two values are in. This is the curve a stopping rule
    watches as seeds land.
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
        half = sps.t.ppf(0.5 + confidence / 2, np.maximum(n - 1, 1)) * np.sqrt(var / n)
    mean = mean + v[0]
    return n, mean, mean - half, mean + half
