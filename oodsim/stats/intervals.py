"""Confidence intervals of a mean: Student's t, and for bounded metrics the two-part interval
(logit-t inside, two-part where seeds sit on a bound) and the betting interval; bootstrap
percentile intervals. Pure functions of arrays, rows at once."""

from __future__ import annotations

import warnings
from typing import Literal

import numpy as np
from scipy.special import betaincinv, expit, logit, stdtrit

from oodsim.stats.checks import check_alpha, check_count

IntervalMethod = Literal["auto", "t", "betting", "bootstrap"]


#: The interval methods of :func:`estimate`; ``"auto"`` (the bound-aware interval) is the default.
INTERVAL_METHODS: tuple[str, ...] = ("auto", "t", "betting", "bootstrap")


#: Largest number of float64 elements a vectorized bootstrap or betting block may hold (~128 MiB).
ROW_BLOCK = 2**24


#: Cap c on the bets of the betting interval: a bet on "mean > m" is at most c / m (and on
#: "mean < m" at most c / (1 - m)), so no seed can take more than a share c of the capital
#: (Waudby-Smith & Ramdas 2023 suggest 1/2 or 3/4).
_BET_CAP = 0.75


#: Bisection steps for each end of the betting interval (2**-50 of the range).
_BISECTIONS = 50


def check_in_range(x: np.ndarray, low: np.ndarray, high: np.ndarray) -> None:
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
    logit_sem: np.ndarray | float = np.nan,
) -> tuple[np.ndarray, np.ndarray]:
    """Student-t interval of a mean, on the logit scale where ``low``/``high`` bound the values.

    Unbounded cells (NaN bounds) get ``mean ± t_{(1+c)/2, n-1} · sem``. Bounded cells map the
    mean to ``p̂ = (mean − low) / (high − low)`` and take ``p̂``'s interval as
    ``expit(logit(p̂) ± t · s)``, then map back: the interval lies inside ``[low, high]``, and a
    mean on a bound (every value on it) gives a point. ``s`` estimates the standard error of
    ``logit(p̂)`` as the geometric mean of two estimates: the delta method's
    ``d = se_p / (p̂(1 − p̂))`` and ``logit_sem``, the standard error of the mean of the values'
    own logits (:func:`logit_sem`); with ``logit_sem`` NaN (the default, or a value on a
    bound) ``s = d``. Where values pile up just inside a bound with a tail towards the
    interior, ``d`` is too small (the linearisation at ``p̂`` misses the skew) and
    ``logit_sem`` too large (the logits of values near the bound dominate it); elsewhere the
    two nearly agree. The choice is calibrated, not derived: it is the one of ``d``, the
    larger, the root mean square and the geometric mean of the two that kept every interior
    row of benchmarks/coverage.py at or above 0.93 from n = 5 with the narrowest intervals
    (docs/statistics.md). NaN where ``n < 2``. This is the ``method="t"`` interval of
    :func:`estimate`; the default (``"auto"``) replaces it where values sit on a bound or are
    all equal.
    """
    check_alpha(confidence, "confidence")
    mean, sem, n = np.asarray(mean, float), np.asarray(sem, float), np.asarray(n)
    q = stdtrit(np.maximum(n - 1, 1), 0.5 + confidence / 2)
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
        delta = sem / width / (p * (1.0 - p))
        logit_se = np.where(np.isfinite(logit_sem), np.sqrt(delta * logit_sem), delta)
        spread = np.where(inside, q * logit_se, 0.0)
        b_lower = np.where(inside, low + width * expit(centre - spread), mean)
        b_upper = np.where(inside, low + width * expit(centre + spread), mean)
    keep = bounded & (n > 1)
    return np.where(keep, b_lower, lower), np.where(keep, b_upper, upper)


def logit_sem(p: np.ndarray, finite: np.ndarray) -> np.ndarray:
    """Standard error of the mean of ``logit(p)`` along the last axis, over the ``finite``
    values (``SD / sqrt(n)``, ddof 1); NaN where a value sits on 0 or 1 or fewer than two
    values are finite."""
    n = finite.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(finite, logit(np.where(finite, p, 0.5)), 0.0)
        centre = z.sum(axis=-1) / n
        ss = (np.where(finite, z - centre[..., None], 0.0) ** 2).sum(axis=-1)
        sem = np.sqrt(ss / (n - 1) / n)
    return np.where((n > 1) & np.isfinite(centre), sem, np.nan)


# Interval kinds of bounded cells (0: keep the t interval computed already).
_T, _TWO_PART, _BETTING = 0, 1, 2


def bound_stats(p: np.ndarray, finite: np.ndarray) -> dict[str, np.ndarray]:
    """What the bound-aware choice needs of values ``p`` in [0, 1] along the last axis: whether
    some sit on 0 / on 1, whether all are equal, and for each side the number of values off
    that bound with the mean and standard error of their distance from it."""
    out = {
        "at_low": (finite & (p == 0.0)).any(axis=-1),
        "at_high": (finite & (p == 1.0)).any(axis=-1),
        "constant": np.where(finite, p, -np.inf).max(axis=-1)
        == np.where(finite, p, np.inf).min(axis=-1),
    }
    for side, d in (("low", p), ("high", 1.0 - p)):
        off = finite & (d > 0.0)
        k = off.sum(axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            nu = np.where(off, d, 0.0).sum(axis=-1) / k
            var = (np.where(off, d - nu[..., None], 0.0) ** 2).sum(axis=-1) / (k - 1)
            out[f"k_{side}"], out[f"nu_{side}"] = k, nu
            out[f"nu_sem_{side}"] = np.sqrt(np.where(k > 1, var, np.nan) / k)
    return out


def interval_kind(
    method: IntervalMethod, bounded: np.ndarray, stats: dict[str, np.ndarray]
) -> np.ndarray:
    """Per cell: ``_T``, ``_TWO_PART`` or ``_BETTING`` (see :func:`estimate`)."""
    if method == "betting":
        return np.where(bounded, _BETTING, _T)
    at_low, at_high = stats["at_low"], stats["at_high"]
    one_bound = at_low ^ at_high
    betting = (at_low & at_high) | (stats["constant"] & ~at_low & ~at_high)
    return np.where(bounded & one_bound, _TWO_PART, np.where(bounded & betting, _BETTING, _T))


def bounded_interval(
    kind: np.ndarray,
    n: np.ndarray,
    stats: dict[str, np.ndarray],
    confidence: float,
    p: np.ndarray,
    finite: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Interval on the [0, 1] scale of the cells of ``kind`` two-part or betting (NaN elsewhere)."""
    lower, upper = np.full(n.shape, np.nan), np.full(n.shape, np.nan)
    two = kind == _TWO_PART
    if two.any():
        high = stats["at_high"]
        side = {
            key: np.where(high, stats[f"{key}_high"], stats[f"{key}_low"])
            for key in ("k", "nu", "nu_sem")
        }
        lo_d, hi_d = two_part_interval(n, side["k"], side["nu"], side["nu_sem"], confidence)
        lower = np.where(two, np.where(high, 1.0 - hi_d, lo_d), lower)
        upper = np.where(two, np.where(high, 1.0 - lo_d, hi_d), upper)
    bet = kind == _BETTING
    if bet.any():
        lo_b, hi_b = _betting_rows(p[bet], finite[bet], confidence)
        lower[bet], upper[bet] = lo_b, hi_b
    return lower, upper


def two_part_interval(
    n: np.ndarray,
    k: np.ndarray,
    nu: np.ndarray,
    nu_sem: np.ndarray,
    confidence: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Interval for the mean distance ``μ_d = q · ν`` of [0, 1] values from the bound some of
    them sit on (the two-part or "delta" model of zero-inflated data, Aitchison 1955).

    Of ``n`` values, ``k`` lie off the bound: ``q`` is the chance that a value does, ``ν`` the
    mean distance of those that do (estimated by ``nu`` with standard error ``nu_sem``), and
    the mean of the values is ``bound ∓ q · ν``. For ``k >= 2`` the interval combines the
    Clopper-Pearson interval of ``q`` (exact) with the logit-scale t interval of ``ν``
    (:func:`t_interval` on the ``k`` distances) by MOVER on the log scale (Zou & Donner 2008;
    Zou, Huang & Zhang 2009): ``log μ̂_d ∓ sqrt(Σ (log θ̂ − log θ_bound)²)``. For ``k < 2``
    nothing is known of ``ν`` but ``ν <= 1``, so the interval is ``[0, q_up]`` with
    ``q_up`` the exact Clopper-Pearson upper bound of ``q`` (a bound on ``μ_d`` because the
    values lie within 1 of the bound); for ``k = 0`` (every value on the bound) that is
    ``1 − ((1 − c)/2) ** (1/n)``, the "rule of three" limit. Every interval has positive
    width and contains 0 (the bound) when ``k < 2``.

    ``confidence`` must lie in (0, 1) and every ``k`` be a whole number in [0, n] (ValueError
    naming the argument otherwise).
    """
    check_alpha(confidence, "confidence")
    n, k = np.asarray(n), np.asarray(k)
    with np.errstate(invalid="ignore"):
        numeric = k.dtype.kind in "iuf"
        bad_k = not numeric or np.any(~((k >= 0) & (k <= n) & (k == np.round(k))) & np.isfinite(n))
    if bad_k:
        raise ValueError(
            f"k must be whole numbers in [0, n] (values off the bound of n), got k={k!r}, n={n!r}"
        )
    nu, nu_sem = np.asarray(nu, float), np.asarray(nu_sem, float)
    a = 1.0 - confidence
    with np.errstate(invalid="ignore", divide="ignore"):
        q = k / n
        q_low = np.where(k > 0, betaincinv(np.maximum(k, 1), n - k + 1, a / 2), 0.0)
        q_up = np.where(k < n, betaincinv(k + 1, np.maximum(n - k, 1), 1 - a / 2), 1.0)
        nu_low, nu_up = t_interval(nu, nu_sem, k, confidence, 0.0, 1.0)
        log_mu = np.log(q) + np.log(nu)
        lower = np.exp(log_mu - np.hypot(np.log(q) - np.log(q_low), np.log(nu) - np.log(nu_low)))
        upper = np.exp(log_mu + np.hypot(np.log(q_up) - np.log(q), np.log(nu_up) - np.log(nu)))
    many = k >= 2
    lower = np.where(many, np.nan_to_num(lower, nan=0.0), 0.0)
    upper = np.where(many, np.minimum(np.nan_to_num(upper, nan=1.0), 1.0), q_up)
    bad = n < 2
    return np.where(bad, np.nan, lower), np.where(bad, np.nan, upper)


def betting_interval(
    values: np.ndarray, confidence: float = 0.95, value_range: tuple[float, float] = (0.0, 1.0)
) -> tuple[np.ndarray, np.ndarray]:
    """Betting confidence interval for the mean of bounded values, along the last axis
    (NaN = missing; the order of the values is the betting order).

    Waudby-Smith & Ramdas (2023), Theorem 3: for a candidate mean ``m`` a gambler bets on
    "mean > m" with capital ``K⁺(m) = Π (1 + λᵢ (xᵢ − m))`` and on "mean < m" with
    ``K⁻(m) = Π (1 − λᵢ (xᵢ − m))``; ``m`` is rejected once either capital reaches
    ``2 / (1 − c)`` at any time (Ville's inequality: under mean ``m`` each capital is a
    nonnegative martingale). The bets are their predictable plug-in ones for a known sample
    size ``n``, ``λᵢ = sqrt(2 log(2/α) / (n σ̂²ᵢ₋₁))``, capped at ``3/4 / m`` (resp.
    ``3/4 / (1 − m)``). Both capitals are monotone in ``m``, so each end is found by
    bisection. Exact at every ``n`` for any distribution on ``value_range``, hence wide near a
    bound (with 10 values near 1 the data cannot rule out a rare value near 0). NaN where
    fewer than two values are finite.
    """
    check_alpha(confidence, "confidence")
    lo, hi = map(float, value_range)
    if not (np.isfinite(lo) and np.isfinite(hi) and hi > lo):
        raise ValueError(
            f"value_range must be finite (low, high) with high > low, got {value_range}"
        )
    x = np.asarray(values, dtype=float)
    shape = x.shape[:-1]
    finite = np.isfinite(x)
    check_in_range(x, np.full(shape, lo), np.full(shape, hi))
    p = (x - lo) / (hi - lo)
    lower, upper = _betting_rows(
        p.reshape(-1, x.shape[-1]), finite.reshape(-1, x.shape[-1]), confidence
    )
    return (lo + (hi - lo) * lower).reshape(shape), (lo + (hi - lo) * upper).reshape(shape)


def _betting_rows(
    p: np.ndarray, finite: np.ndarray, confidence: float
) -> tuple[np.ndarray, np.ndarray]:
    """The betting interval of each row of ``p`` (values in [0, 1], NaN where not finite)."""
    rows, size = p.shape
    lower, upper = np.full(rows, np.nan), np.full(rows, np.nan)
    step = max(1, ROW_BLOCK // (8 * max(size, 1)))
    for start in range(0, rows, step):
        block = slice(start, start + step)
        lower[block], upper[block] = _betting_block(p[block], finite[block], confidence)
    return lower, upper


def _betting_block(
    p: np.ndarray, finite: np.ndarray, confidence: float
) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(~finite, axis=-1, kind="stable")  # finite values first, order kept
    y = np.take_along_axis(np.where(finite, p, 0.5), order, axis=-1)
    n = finite.sum(axis=-1)
    valid = np.arange(y.shape[-1]) < n[:, None]
    alpha = 1.0 - confidence
    threshold = np.log(2.0 / alpha)
    t = np.arange(1, y.shape[-1] + 1, dtype=float)
    mu = (0.5 + np.cumsum(np.where(valid, y, 0.0), axis=-1)) / (t + 1)
    sigma2 = (0.25 + np.cumsum(np.where(valid, (y - mu) ** 2, 0.0), axis=-1)) / (t + 1)
    sigma2_prev = np.concatenate([np.full((len(y), 1), 0.25), sigma2[:, :-1]], axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.where(
            valid, np.sqrt(2.0 * threshold / (np.maximum(n, 1)[:, None] * sigma2_prev)), 0.0
        )

    def rejected(m: np.ndarray, sign: float) -> np.ndarray:
        reach = m if sign > 0 else 1.0 - m
        with np.errstate(divide="ignore"):
            bet = np.minimum(lam, _BET_CAP / reach[:, None])
        log_capital = np.cumsum(np.log1p(sign * bet * (y - m[:, None])), axis=-1)
        return log_capital.max(axis=-1) >= threshold

    # K+ falls as m rises: the lower end is the smallest m not rejected; K- rises with m.
    a, b = np.zeros(len(y)), np.ones(len(y))
    for _ in range(_BISECTIONS):
        mid = (a + b) / 2
        hit = rejected(mid, 1.0)
        a, b = np.where(hit, mid, a), np.where(hit, b, mid)
    lower = a
    a, b = np.zeros(len(y)), np.ones(len(y))
    for _ in range(_BISECTIONS):
        mid = (a + b) / 2
        hit = rejected(mid, -1.0)
        a, b = np.where(hit, a, mid), np.where(hit, mid, b)
    upper = b
    few = n < 2
    return np.where(few, np.nan, lower), np.where(few, np.nan, upper)


def bootstrap_rows_interval(
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
    n_boot = check_count(n_boot, "n_boot")
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
        step = max(1, ROW_BLOCK // max(n_boot, size))
        for start in range(0, len(rows), step):
            block = rows[start : start + step]
            means = compact[block, :size] @ counts.T / size
            lo, hi = np.quantile(means, probs, axis=-1)
            lower[block], upper[block] = lo, hi
    return lower.reshape(n.shape), upper.reshape(n.shape)


def percentile_interval(
    values: np.ndarray, confidence: float = 0.95, axis: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of replicates: the (1 − c)/2 and (1 + c)/2 quantiles of ``values``
    along ``axis``, NaN replicates skipped (NaN where a slice has none)."""
    check_alpha(confidence, "confidence")
    tail = (1 - confidence) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a slice with no valid replicate
        lower, upper = np.nanquantile(np.asarray(values, float), [tail, 1 - tail], axis=axis)
    return lower, upper


def running_bound_stats(p: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`bound_stats` of every prefix of the 1-D values ``p`` in [0, 1], by running sums."""
    out = {
        "at_low": np.maximum.accumulate(p == 0.0),
        "at_high": np.maximum.accumulate(p == 1.0),
        "constant": np.maximum.accumulate(p) == np.minimum.accumulate(p),
    }
    for side, d in (("low", p), ("high", 1.0 - p)):
        off = d > 0.0
        k = np.cumsum(off)
        with np.errstate(invalid="ignore", divide="ignore"):
            nu = np.cumsum(np.where(off, d, 0.0)) / k
            ss = np.cumsum(np.where(off, d**2, 0.0)) - k * nu**2
            var = np.where(k > 1, np.maximum(ss, 0.0) / (k - 1), np.nan)
        out[f"k_{side}"], out[f"nu_{side}"], out[f"nu_sem_{side}"] = k, nu, np.sqrt(var / k)
    return out


def running_logit_sem(p: np.ndarray) -> np.ndarray:
    """:func:`logit_sem` of every prefix of the 1-D values ``p``."""
    n = np.arange(1, len(p) + 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = logit(p)
        on_bound = np.maximum.accumulate(~np.isfinite(z))
        z = np.where(np.isfinite(z), z, 0.0)
        shifted = z - z[0]  # shift for numerically stable cumulative sums
        s1, s2 = np.cumsum(shifted), np.cumsum(shifted**2)
        var = np.maximum(s2 - s1**2 / n, 0.0) / (n - 1)
        return np.where((n > 1) & ~on_bound, np.sqrt(var / n), np.nan)
