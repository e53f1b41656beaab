"""How many seeds a two-sided t test needs to detect a difference between two methods.

A prospective power calculation: given a difference ``delta`` that matters, chosen before
looking (never the observed difference: power at the observed effect is a function of the
p-value alone, Hoenig & Heisey 2001), and the seed-to-seed SD (the observed one, taken as
the truth), the smallest number of seeds at which the test rejects with probability
``power``. The power is the exact one of the noncentral t distribution,
both rejection tails included, as in statsmodels' ``TTestPower``/``TTestIndPower``; the
sample size is found by an integer search, so it is the smallest n that reaches the power.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import xarray as xr

from oodsim.stats.checks import check_alpha
from oodsim.stats.paired import (
    pair_dataset,
    pair_differences,
    pair_input,
    pair_moments,
    square_matrix,
)

#: The differences :func:`power` asks about by default, in the metric's units (AUROC, FPR95,
#: ...: half a point, one point, two points).
DEFAULT_DELTAS: tuple[float, ...] = (0.005, 0.01, 0.02)

#: Largest sample size searched; an effect too small to reach the power with this many seeds
#: gets ``inf``.
MAX_N = 10**9


def _t_power(nc: np.ndarray, df: np.ndarray, alpha: float) -> np.ndarray:
    """Power of a two-sided t test at level ``alpha`` whose statistic is noncentral t with
    ``df`` degrees of freedom and noncentrality ``nc``: both rejection tails.

    The lower tail P(T ≤ -c | nc) is computed as P(T ≥ c | -nc), the same number by
    symmetry: scipy's ``nct.cdf`` returns NaN there for large noncentralities (where
    statsmodels' ``ttest_power`` then returns NaN too), ``nct.sf`` does not.
    """
    from scipy import stats as sps  # scipy.stats (0.5 s) loads with the first power asked

    crit = sps.t.isf(alpha / 2.0, df)
    with np.errstate(invalid="ignore", over="ignore"):
        return sps.nct.sf(crit, df, nc) + sps.nct.sf(crit, df, -nc)


def paired_power(
    effect_size: float | np.ndarray, n: float | np.ndarray, alpha: float = 0.05
) -> float | np.ndarray:
    """Power of the two-sided paired (one-sample) t test with ``n`` pairs at level ``alpha``
    for the standardized effect ``effect_size`` (mean difference / SD of the differences):
    df = n - 1, noncentrality d·sqrt(n). NaN for n < 2 or a NaN effect; 1 for an infinite one.
    """
    alpha = check_alpha(alpha)
    d, n = np.broadcast_arrays(np.abs(np.asarray(effect_size, float)), np.asarray(n, float))
    return _power_of(d, n, alpha, n - 1.0, n)


def independent_power(
    effect_size: float | np.ndarray, n: float | np.ndarray, alpha: float = 0.05
) -> float | np.ndarray:
    """Power of the two-sided two-sample t test with ``n`` per group (equal groups) at level
    ``alpha`` for the standardized effect ``effect_size`` (mean difference / pooled SD):
    df = 2n - 2, noncentrality d·sqrt(n/2). NaN for n < 2 or a NaN effect; 1 for an infinite
    one."""
    alpha = check_alpha(alpha)
    d, n = np.broadcast_arrays(np.abs(np.asarray(effect_size, float)), np.asarray(n, float))
    return _power_of(d, n, alpha, 2.0 * n - 2.0, n / 2.0)


def _power_of(
    d: np.ndarray, n: np.ndarray, alpha: float, df: np.ndarray, n_eff: np.ndarray
) -> float | np.ndarray:
    with np.errstate(invalid="ignore"):
        out = _t_power(d * np.sqrt(n_eff), np.where(n >= 2, df, np.nan), alpha)
    out = np.where(np.isinf(d) & (n >= 2), 1.0, out)
    out = np.where(np.isnan(d) | ~(n >= 2), np.nan, out)
    return float(out) if out.ndim == 0 else out


def _solve_n(
    power_of: Callable[[np.ndarray, np.ndarray], np.ndarray],
    d: np.ndarray,
    target: float,
) -> np.ndarray:
    """Smallest integer n ≥ 2 with ``power_of(d, n) >= target``, for every d (vectorized):
    bracket by doubling, then bisection on integers (power rises with n). NaN for d = 0 or
    NaN, 2 for an infinite d, inf when even :data:`MAX_N` is not enough."""
    shape = np.shape(d)
    d = np.abs(np.asarray(d, dtype=float)).ravel()
    todo = np.isfinite(d) & (d > 0)
    lo = np.ones(d.shape)  # power(lo) < target, or lo = 1 (never evaluated)
    hi = np.full(d.shape, 2.0)
    grow = np.flatnonzero(todo)
    while grow.size:
        short = power_of(d[grow], hi[grow]) < target
        up = grow[short]
        lo[up] = hi[up]
        capped = up[hi[up] >= MAX_N]
        hi[up] = np.minimum(2.0 * hi[up], MAX_N)
        hi[capped] = np.inf
        grow = up[hi[up] < np.inf]
    search = np.flatnonzero(todo & np.isfinite(hi) & (hi - lo > 1))
    while search.size:
        mid = np.floor((lo[search] + hi[search]) / 2.0)
        reached = power_of(d[search], mid) >= target
        hi[search[reached]] = mid[reached]
        lo[search[~reached]] = mid[~reached]
        search = search[hi[search] - lo[search] > 1]
    out = np.where(todo, hi, np.nan)
    return np.where(np.isinf(d), 2.0, out).reshape(shape)


def _sample_size(
    effect_size: float | np.ndarray, power: float, alpha: float, paired: bool
) -> int | float | np.ndarray:
    target = check_alpha(power, "power")
    alpha = check_alpha(alpha)
    d = np.asarray(effect_size, dtype=float)

    def power_of(dd: np.ndarray, nn: np.ndarray) -> np.ndarray:
        if paired:
            return _t_power(dd * np.sqrt(nn), nn - 1.0, alpha)
        return _t_power(dd * np.sqrt(nn / 2.0), 2.0 * nn - 2.0, alpha)

    n = _solve_n(power_of, d, target)
    if n.ndim:
        return n
    n = float(n)
    return int(n) if math.isfinite(n) else n


def paired_sample_size(
    effect_size: float | np.ndarray, power: float = 0.8, alpha: float = 0.05
) -> int | float | np.ndarray:
    """Smallest number of pairs n ≥ 2 at which a two-sided paired t test (one-sample t on the
    differences, df = n - 1, noncentrality d·sqrt(n)) at level ``alpha`` has at least
    ``power`` against the standardized effect ``effect_size`` (Cohen's d_z; sign ignored).

    Equals ``ceil`` of statsmodels' ``TTestPower().solve_power(...)``. A scalar gives an int,
    or ``nan`` for a zero/NaN effect (no n works: the power stays at ``alpha``) and ``inf``
    when more than :data:`MAX_N` pairs would be needed; an array gives a float array.
    """
    return _sample_size(effect_size, power, alpha, paired=True)


def independent_sample_size(
    effect_size: float | np.ndarray, power: float = 0.8, alpha: float = 0.05
) -> int | float | np.ndarray:
    """Smallest per-group n ≥ 2 (equal groups) at which a two-sided two-sample t test
    (df = 2n - 2, noncentrality d·sqrt(n/2)) at level ``alpha`` has at least ``power``
    against the standardized effect ``effect_size`` (mean difference / pooled SD; sign
    ignored). With equal groups the Welch and Student statistics are the same number; the df
    here are Student's.

    Equals ``ceil`` of statsmodels' ``TTestIndPower().solve_power(..., ratio=1)``. Scalars
    and arrays as in :func:`paired_sample_size`.
    """
    return _sample_size(effect_size, power, alpha, paired=False)


def _one_delta(value: object, given: object) -> float:
    if isinstance(value, bool | str) or np.ndim(value) != 0:
        raise ValueError(f"delta must be positive numbers, got {given!r}")
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"delta must be positive numbers, got {given!r}") from None
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"delta must be positive finite numbers, got {given!r}")
    return number


def _check_deltas(delta: object) -> tuple[float, ...] | float:
    """A positive number, or a non-empty sequence of distinct ones (kept in order)."""
    if delta is None:
        raise ValueError(
            "delta=None would power the test at the observed difference, which says nothing "
            "the p-value does not (Hoenig & Heisey 2001); give the differences that matter, "
            f"in the metric's units (default {DEFAULT_DELTAS})"
        )
    if isinstance(delta, str) or np.ndim(delta) == 0:
        return _one_delta(delta, delta)
    if not isinstance(delta, Iterable) or np.ndim(delta) != 1:
        raise ValueError(f"delta must be a positive number or a list of them, got {delta!r}")
    values = tuple(_one_delta(v, delta) for v in delta)
    if not values or len(set(values)) != len(values):
        raise ValueError(f"delta must be a non-empty list of distinct numbers, got {delta!r}")
    return values


def power(
    results: xr.Dataset | xr.DataArray,
    metric: str | Sequence[str] | None = "auroc",
    delta: float | Sequence[float] = DEFAULT_DELTAS,
    power: float = 0.8,
    alpha: float = 0.05,
    paired: bool = True,
    methods: Sequence[str] | None = None,
    dim: str = "seed",
) -> xr.Dataset:
    """Seeds needed to detect a difference ``delta`` between every two methods, per metric
    and cell.

    ``delta`` is the difference that matters, in the metric's units: a number, or a list of
    them (default :data:`DEFAULT_DELTAS`), which adds a ``delta`` dim (a number: a scalar
    ``delta`` coordinate). It is never the observed difference (``delta=None`` is refused):
    the power at the observed effect is a function of the p-value alone (Hoenig & Heisey
    2001).

    Returns a Dataset over ``(method, other, *rest[, delta])`` as
    :func:`~oodsim.stats.paired.compare` (a string ``metric`` drops the ``metric`` dim),
    symmetric across the diagonal (NaN). Each pair uses the seeds where both methods are
    finite:

    - ``sd``: ``paired=True``: the observed SD (ddof=1) of the paired differences;
      ``paired=False``: the pooled SD sqrt((s_a² + s_b²) / 2) of the two methods' scores.
    - ``effect_size``: ``delta / sd`` (Cohen's d_z paired, d unpaired).
    - ``n_required``: seeds (per method; the same seeds run both) for a two-sided paired t
      test (``paired=False``: a two-sample t test with equal n) at level ``alpha`` to reach
      ``power`` (:func:`paired_sample_size`, :func:`independent_sample_size`). NaN when
      undefined: fewer than 2 seeds, or paired differences that are all equal (an SD of 0
      is no estimate of the noise to power a test against); inf when more than
      :data:`MAX_N` seeds would be needed.
    - ``n_observed``: seeds where both methods are finite (int; 0 on the diagonal).
    - ``achieved_power``: power of that test with ``n_observed`` seeds against ``delta``, a
      design number for the run you have (NaN for fewer than 2 seeds).

    The SD is an estimate, taken as the truth: with few seeds the answer is rough.

    ``power`` and ``alpha`` must lie in (0, 1), ``delta`` be positive finite numbers and
    ``dim`` a dim of the score other than ``method`` and ``metric``; ValueError naming the
    argument otherwise, before any computation.
    """
    target = check_alpha(power, "power")
    alpha = check_alpha(alpha)
    wanted = _check_deltas(delta)
    if not isinstance(paired, bool | np.bool_):
        raise ValueError(f"paired must be True or False, got {paired!r}")
    score, names, _ = pair_input(results, metric, methods, dim)
    d, ok, i, j = pair_differences(score)
    n, mean, var = pair_moments(d, ok)
    if paired:
        sd = np.sqrt(var)
    else:
        x = np.asarray(score.values, dtype=float)
        _, _, var_a = pair_moments(np.where(ok, x[:, i], np.nan), ok)
        _, _, var_b = pair_moments(np.where(ok, x[:, j], np.nan), ok)
        sd = np.sqrt((var_a + var_b) / 2.0)
    m = score.sizes["method"]
    n_full = np.zeros((m, m, *n.shape[1:]), dtype=np.int64)
    n_full[i, j] = n
    n_full[j, i] = n
    sizes = (wanted,) if isinstance(wanted, float) else wanted
    parts = []
    for size in sizes:
        with np.errstate(invalid="ignore", divide="ignore"):
            effect = np.where((sd == 0) | np.isnan(sd), np.nan, size / sd)
        solve = paired_sample_size if paired else independent_sample_size
        achieved_of = paired_power if paired else independent_power
        need = np.asarray(solve(effect, target, alpha), dtype=float)
        achieved = np.asarray(achieved_of(effect, n, alpha), dtype=float)
        parts.append(
            pair_dataset(
                {
                    "n_required": square_matrix(need, i, j, m, need),
                    "effect_size": square_matrix(effect, i, j, m, effect),
                    "sd": square_matrix(sd, i, j, m, sd),
                    "n_observed": n_full,
                    "achieved_power": square_matrix(achieved, i, j, m, achieved),
                },
                score,
                dim,
            ).assign_coords(delta=size)
        )
    if isinstance(wanted, float):
        out = parts[0]
    else:
        varying = ["n_required", "effect_size", "achieved_power"]
        stacked = xr.concat([part[varying] for part in parts], dim="delta")
        out = (
            parts[0]
            .drop_vars([*varying, "delta"])
            .assign({name: stacked[name].transpose(..., "delta") for name in varying})[
                ["n_required", "effect_size", "sd", "n_observed", "achieved_power"]
            ]
        )
    test = "paired t test" if paired else "two-sample t test (equal n per method)"
    sd_words = "SD of paired differences" if paired else "pooled SD of the two methods"
    out.attrs = {
        "power": target,
        "alpha": alpha,
        "paired": bool(paired),
        "delta": list(sizes),
        "metric": metric if isinstance(metric, str) else list(names),
        "max_n": MAX_N,
        "estimand": (
            f"seeds needed for a two-sided {test} at level alpha to detect delta with the "
            f"given power, taking the observed {sd_words} as the truth"
        ),
    }
    return out


__all__ = [
    "DEFAULT_DELTAS",
    "MAX_N",
    "independent_power",
    "independent_sample_size",
    "paired_power",
    "paired_sample_size",
    "power",
]
