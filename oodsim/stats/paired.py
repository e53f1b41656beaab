"""Paired comparison of every two methods: mean difference over seeds with a t interval,
probability of superiority, paired t test and multiplicity-adjusted p-values.

Each seed runs every method, so two methods are compared on the seeds where both have a
finite score (a failed seed of either is dropped for that pair only): the paired t test on
the per-seed differences removes the seed's shared effect (class split, initialisation)
that a two-sample test would count as noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import xarray as xr
from scipy.special import stdtrit

from oodsim.metrics import higher_is_better
from oodsim.results.access import metrics_of, select_metric
from oodsim.results.select import score_view
from oodsim.stats.checks import check_alpha, check_dim
from oodsim.stats.significance import p_from_t

Adjust = Literal["holm", "bh", "fdr_bh"] | None
#: Accepted ``adjust`` names and the method each means; None (no adjustment) is also accepted.
ADJUSTMENTS: dict[str, str] = {"holm": "holm", "bh": "bh", "fdr_bh": "bh"}


def _check_adjust(adjust: str | None, name: str = "adjust") -> str | None:
    """The canonical adjustment name ("holm", "bh") or None; ValueError naming ``name`` for
    anything else."""
    if adjust is None:
        return None
    if not isinstance(adjust, str) or adjust.lower() not in ADJUSTMENTS:
        raise ValueError(f"{name} must be one of {', '.join(ADJUSTMENTS)} or None, got {adjust!r}")
    return ADJUSTMENTS[adjust.lower()]


def adjust_p(p: np.ndarray, method: str | None = "holm") -> np.ndarray:
    """Family-wise adjusted p-values of ``p`` (any shape): Holm's step-down (``"holm"``,
    controls the family-wise error rate) or Benjamini–Hochberg (``"bh"``/``"fdr_bh"``,
    controls the false discovery rate); None returns a copy.

    The family is every finite entry; NaN entries (undefined tests) stay NaN and do not
    count. Both are monotone in ``p`` and capped at 1, as in statsmodels' ``multipletests``.
    """
    name = _check_adjust(method, "method")
    p = np.asarray(p, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    q = p[ok]
    m = q.size
    if name is None or m == 0:
        out[ok] = q
        return out
    order = np.argsort(q, kind="stable")
    s = q[order]
    if name == "holm":
        adj = np.maximum.accumulate(s * np.arange(m, 0, -1))
    else:
        adj = np.minimum.accumulate((s / (np.arange(1, m + 1) / m))[::-1])[::-1]
    ranked = np.empty(m)
    ranked[order] = np.minimum(adj, 1.0)
    out[ok] = ranked
    return out


def pair_input(
    results: xr.Dataset | xr.DataArray,
    metric: str | Sequence[str] | None,
    methods: Sequence[str] | None,
    dim: str,
) -> tuple[xr.DataArray, list[str], np.ndarray]:
    """The score laid out as (dim, method, *rest) for the chosen metric(s) and methods, the
    metric names, and whether higher is better, broadcastable against (*rest).

    A string ``metric`` drops the ``metric`` dim; a list or None keeps it. Raises before any
    computation: KeyError for an unknown metric or no ``method`` dim, ValueError for a
    ``dim`` that is not a dim of the score other than ``method`` and ``metric``, unknown
    methods or fewer than two.
    """
    score = score_view(results)
    if "method" not in score.dims:
        raise KeyError(f"score has no 'method' dim; dims are {', '.join(map(str, score.dims))}")
    dim = check_dim(score, dim)
    names = metrics_of(score, metric)
    if metric is not None and not isinstance(metric, str) and not names:
        raise ValueError("metric must name at least one metric")
    for name in names:
        select_metric(score, name)  # KeyError naming the known metrics
    known = [str(m) for m in score["method"].values]
    chosen = known if methods is None else [str(m) for m in methods]
    unknown = [m for m in chosen if m not in known]
    if unknown:
        raise ValueError(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(known)}")
    if len(set(chosen)) < len(chosen):
        raise ValueError(f"methods must be distinct, got {chosen}")
    if len(chosen) < 2:
        raise ValueError(f"a comparison needs at least 2 methods, got {chosen}")
    score = score.sel({"method": chosen})  # not sel(method=): that is the fill method
    if "metric" in score.dims:
        score = select_metric(score, metric) if isinstance(metric, str) else score.sel(metric=names)
    rest = [d for d in score.dims if d not in (dim, "method")]
    score = score.transpose(dim, "method", *rest)
    if "metric" in rest:
        shape = [1] * len(rest)
        shape[rest.index("metric")] = len(names)
        hib = np.array([higher_is_better(n) for n in names]).reshape(shape)
    else:
        direction = metric if isinstance(metric, str) else (names[0] if names else "")
        hib = np.array(higher_is_better(direction) if direction else True)
    return score, names, hib


def pair_differences(score: xr.DataArray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-seed differences ``score[i] - score[j]`` of each unordered pair i < j, with NaN
    where either is not finite: ``(diffs (S, P, *rest), finite mask, i, j)``."""
    x = np.asarray(score.values, dtype=float)
    i, j = np.triu_indices(x.shape[1], 1)
    a, b = x[:, i], x[:, j]
    ok = np.isfinite(a) & np.isfinite(b)
    return np.where(ok, a - b, np.nan), ok, i, j


def pair_moments(d: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(n, mean, var)`` over axis 0 of the finite entries (var ddof=1, NaN for n < 2).

    Values are shifted by the first finite one, so a constant sequence has a variance of
    exactly zero (the degenerate case :func:`p_from_t` treats as a limit).
    """
    n = ok.sum(axis=0)
    first = np.take_along_axis(d, np.argmax(ok, axis=0)[None], axis=0)[0]
    shifted = np.where(ok, d - first, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean0 = shifted.sum(axis=0) / n
        dev = np.where(ok, shifted - mean0, 0.0)
        var = (dev**2).sum(axis=0) / (n - 1)
    var = np.where(n >= 2, var, np.nan)
    return n, np.where(n >= 1, mean0 + first, np.nan), var


def square_matrix(
    upper: np.ndarray, i: np.ndarray, j: np.ndarray, m: int, lower: np.ndarray
) -> np.ndarray:
    """(m, m, *rest) array with ``upper`` at (i, j), ``lower`` at (j, i), NaN on the diagonal."""
    out = np.full((m, m, *upper.shape[1:]), np.nan)
    out[i, j] = upper
    out[j, i] = lower
    return out


def pair_dataset(variables: dict[str, np.ndarray], score: xr.DataArray, dim: str) -> xr.Dataset:
    """Variables over (method, other, *rest) with the score's coords of those dims."""
    rest = [d for d in score.dims if d not in (dim, "method")]
    methods = [str(m) for m in score["method"].values]
    coords: dict[str, object] = {"method": methods, "other": methods}
    for name, coord in score.coords.items():
        if name not in ("method", "other") and set(coord.dims) <= set(rest):
            coords[str(name)] = coord
    dims = ("method", "other", *rest)
    return xr.Dataset({k: (dims, v) for k, v in variables.items()}, coords=coords)


def _family_sentence(rest: Sequence[str]) -> str:
    cells = [d for d in rest if d != "metric"]
    where = "in every metric" if "metric" in rest else "in the chosen metric"
    if cells:
        where += f" and cell ({', '.join(cells)})"
    return f"each unordered pair of methods once, {where}; (b, a) mirrors (a, b)"


def compare(
    results: xr.Dataset | xr.DataArray,
    metric: str | Sequence[str] | None = "auroc",
    methods: Sequence[str] | None = None,
    alpha: float = 0.05,
    adjust: Adjust = "holm",
    dim: str = "seed",
) -> xr.Dataset:
    """Paired comparison of every two methods over the seeds, with adjusted p-values.

    Returns a Dataset over ``(method, other, *rest)``, ``rest`` being every dim of the score
    other than ``dim`` and ``method`` (``metric`` when ``metric`` is a list or None, and
    ``severity``, ``ood``, ``model``, ``dataset`` as present; no ``severity`` for results
    without levels: :func:`~oodsim.results.score_view`). Each entry compares
    ``method`` with ``other`` on the seeds where both have a finite score (failed seeds are
    NaN; the ``n`` of each pair may differ):

    - ``diff``: mean of ``score[method] - score[other]``, the raw difference in the metric's
      units and sign; for a lower-is-better metric (fpr95) a negative ``diff`` means
      ``method`` is better.
    - ``diff_low``/``diff_high``: two-sided paired t interval of level ``1 - alpha`` for the
      mean difference (``scipy.stats.t.interval`` with ``n - 1`` df and scale the standard
      error); NaN for n < 2, a point when every difference is the same.
    - ``prob_superiority``: share of those seeds where ``method`` beats ``other`` (direction
      from :func:`~oodsim.stats.higher_is_better`), ties counting half.
    - ``p``: two-sided paired t test (``scipy.stats.ttest_rel`` on those seeds). When every
      difference is the same, p = 0 if it is nonzero and NaN if it is zero; NaN for n < 2.
    - ``effect_size``: Cohen's d_z, mean difference over the SD (ddof=1) of the differences
      (±inf when the SD is 0 and the mean is not).
    - ``n``: number of seeds where both are finite (int; 0 on the diagonal).
    - ``p_adjusted``: ``p`` adjusted by ``adjust`` (``"holm"``, ``"bh"``/``"fdr_bh"``, or None
      for none) over one family: each unordered pair once, in every metric and cell at once.
      NaN p-values are left out of the family and stay NaN.
    - ``significant``: ``p_adjusted < alpha`` (False where NaN).

    ``(other, method)`` mirrors ``(method, other)``: the same ``n``, ``p``, ``p_adjusted``;
    negated ``diff``, interval and ``effect_size``; ``1 - prob_superiority``. The diagonal
    is NaN. ``methods`` picks (and orders) a subset of at least two methods.

    ``alpha`` must lie in (0, 1) and ``dim`` be a dim of the score other than ``method`` and
    ``metric`` (the seeds); ValueError naming the argument otherwise, before any computation.
    """
    alpha = check_alpha(alpha)
    how = _check_adjust(adjust)
    score, names, hib = pair_input(results, metric, methods, dim)
    d, ok, i, j = pair_differences(score)
    n, mean, var = pair_moments(d, ok)
    se2 = var / np.where(n > 0, n, np.nan)
    p = np.where(n >= 2, p_from_t(mean, se2, n - 1.0), np.nan)
    confidence = 1.0 - alpha
    with np.errstate(invalid="ignore", divide="ignore"):
        df = np.where(n >= 2, n - 1.0, np.nan)
        sem = np.sqrt(se2)
        low = mean + sem * stdtrit(df, (1.0 - confidence) / 2.0)
        high = mean + sem * stdtrit(df, (1.0 + confidence) / 2.0)
        low = np.where(sem == 0, mean, low)
        high = np.where(sem == 0, mean, high)
        effect = mean / np.sqrt(var)
        effect = np.where((var == 0) & (mean == 0), np.nan, effect)
        better = np.where(hib, d > 0, d < 0) & ok
        ties = (d == 0) & ok
        prob = (better.sum(axis=0) + 0.5 * ties.sum(axis=0)) / np.where(n > 0, n, np.nan)
    p_adj = adjust_p(p, how)
    m = score.sizes["method"]
    n_full = np.zeros((m, m, *n.shape[1:]), dtype=np.int64)
    n_full[i, j] = n
    n_full[j, i] = n
    p_adj_full = square_matrix(p_adj, i, j, m, p_adj)
    out = pair_dataset(
        {
            "diff": square_matrix(mean, i, j, m, -mean),
            "diff_low": square_matrix(low, i, j, m, -high),
            "diff_high": square_matrix(high, i, j, m, -low),
            "prob_superiority": square_matrix(prob, i, j, m, 1.0 - prob),
            "p": square_matrix(p, i, j, m, p),
            "effect_size": square_matrix(effect, i, j, m, -effect),
            "n": n_full,
            "p_adjusted": p_adj_full,
            "significant": np.nan_to_num(p_adj_full, nan=1.0) < alpha,
        },
        score,
        dim,
    )
    rest = [str(x) for x in score.dims if x not in (dim, "method")]
    out.attrs = {
        "alpha": alpha,
        "confidence": confidence,
        "adjust": how or "none",
        "n_tests": int(np.isfinite(p).sum()),
        "family": _family_sentence(rest),
        "metric": metric if isinstance(metric, str) else list(names),
        "test": "two-sided paired t test on the seeds where both methods are finite",
    }
    return out


__all__ = ["ADJUSTMENTS", "adjust_p", "compare"]
