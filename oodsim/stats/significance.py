"""How many seeds a two-sided test needs to tell two methods apart (paper, section 5.2)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np
import xarray as xr
from scipy.special import stdtr

from oodsim.results.access import iter_cells, metrics_of, select_metric
from oodsim.results.select import score_view
from oodsim.stats.checks import check_alpha, check_dim

TestName = Literal["welch", "paired", "wilcoxon"]
TESTS: tuple[str, ...] = ("welch", "paired", "wilcoxon")


def _prepare(a: np.ndarray, b: np.ndarray, test: str) -> tuple[np.ndarray, np.ndarray]:
    """The seeds where both methods have a finite score, in seed order, for every test.

    ``a`` and ``b`` are one score per seed, the same seeds in the same order, so dropping a
    seed where either method failed (NaN) keeps "the first n seeds" the same seeds for both;
    Welch's statistic still treats the two samples as independent.
    """
    if test not in TESTS:
        raise ValueError(f"test must be one of {', '.join(TESTS)}, got {test!r}")
    a = np.asarray(a, dtype=float).ravel()
    b = np.asarray(b, dtype=float).ravel()
    if len(a) != len(b):
        raise ValueError(
            f"a {test} test compares two methods on the same seeds: got {len(a)} and "
            f"{len(b)} scores"
        )
    keep = np.isfinite(a) & np.isfinite(b)
    return a[keep], b[keep]


def _running_moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(n, mean, var)`` of the first n values for every n (var ddof=1, NaN at n=1).

    Values are shifted by the first one before the cumulative sums, which keeps the sums
    small and makes a constant sequence have a variance of exactly zero.
    """
    n = np.arange(1, len(x) + 1, dtype=float)
    if len(x) == 0:
        return n, n.copy(), n.copy()
    shifted = x - x[0]
    mean0 = np.cumsum(shifted) / n
    with np.errstate(invalid="ignore", divide="ignore"):
        var = np.maximum(np.cumsum(shifted**2) - n * mean0**2, 0.0) / (n - 1)
    var[0] = np.nan
    return n, mean0 + x[0], var


def p_from_t(diff: np.ndarray, se2: np.ndarray, df: np.ndarray) -> np.ndarray:
    """Two-sided p-value of ``diff / sqrt(se2)`` with ``df`` degrees of freedom.

    A zero standard error is the limit of the t statistic: p = 0 when the means differ (a
    difference with no noise at all), NaN (never significant) when they are equal.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        t = diff / np.sqrt(se2)
        p = 2.0 * stdtr(df, -np.abs(t))  # Student's t survival function
    degenerate = se2 == 0
    p = np.where(degenerate & (diff != 0), 0.0, p)
    return np.where(degenerate & (diff == 0), np.nan, p)


def sequential_p_values(a: np.ndarray, b: np.ndarray, test: TestName = "welch") -> np.ndarray:
    """Two-sided p-value of ``test`` on the first n seeds of each method, for n = 1..N.

    Entry ``n - 1`` holds the p-value with n seeds; NaN where the test is undefined (n = 1,
    or both samples constant and equal). ``"welch"`` (unequal-variance t-test, as in the
    paper) and ``"paired"`` (t-test of the per-seed differences) are vectorized over n with
    cumulative sums; ``"wilcoxon"`` (signed-rank test of the differences, zero differences
    dropped) loops over scipy. ``a`` and ``b`` hold the same seeds in the same order; a seed
    where either method is NaN (failed) is dropped for both, for every test, so n counts
    the same seeds of both methods.
    """
    a, b = _prepare(a, b, test)
    if test == "wilcoxon":
        p = np.full(len(a), np.nan)
        for n, p_n in _iter_wilcoxon(a, b):
            p[n - 1] = p_n
        return p
    if test == "welch":
        n, ma, va = _running_moments(a)
        _, mb, vb = _running_moments(b)
        qa, qb = va / n, vb / n
        se2 = qa + qb
        with np.errstate(invalid="ignore", divide="ignore"):
            df = se2**2 / ((qa**2 + qb**2) / (n - 1))
        return p_from_t(ma - mb, se2, df)
    n, md, vd = _running_moments(a - b)
    return p_from_t(md, vd / n, n - 1)


def _wilcoxon_p(d: np.ndarray) -> float:
    """scipy's two-sided Wilcoxon signed-rank p-value; NaN when all differences are zero."""
    if not np.any(d != 0):
        return np.nan
    from scipy import stats as sps  # scipy.stats (0.5 s) loads with the first Wilcoxon test

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return float(sps.wilcoxon(d).pvalue)
        except ValueError:
            return np.nan


def _iter_wilcoxon(a: np.ndarray, b: np.ndarray) -> Iterator[tuple[int, float]]:
    a, b = _prepare(a, b, "wilcoxon")
    for n in range(2, len(a) + 1):
        yield n, _wilcoxon_p(a[:n] - b[:n])


def required_simulations(
    a: np.ndarray, b: np.ndarray, alpha: float = 0.05, test: TestName = "welch"
) -> int | None:
    """Smallest number of seeds n ≥ 2 at which the two-sided test on the first n seeds of
    each method rejects equal means at level ``alpha`` (p < alpha); None if it never does.

    This is the paper's Figure 5 quantity. Seeds are taken in the given order after dropping
    every seed where either method failed (NaN), so both methods use the same n seeds (for
    Welch too); ``a`` and ``b`` must have the same length. Two constant samples with equal
    values are never significantly different; two constant samples with different values
    are (p = 0, the limit of the t statistic, as scipy reports it). The answer is a
    property of one seed ordering (the first crossing of a test checked after every seed,
    optimistic), not a sample size: plan with :func:`oodsim.stats.power`, stop with the
    ``ranking`` rule.
    """
    check_alpha(alpha)
    if test == "wilcoxon":
        return next((n for n, p in _iter_wilcoxon(a, b) if p < alpha), None)
    p = sequential_p_values(a, b, test)
    hits = np.flatnonzero(p < alpha)
    return int(hits[0]) + 1 if len(hits) else None


def required_simulations_table(
    results: xr.Dataset | xr.DataArray,
    metric: str | Sequence[str] | None = "auroc",
    alpha: float = 0.05,
    test: TestName = "welch",
    dim: str = "seed",
) -> xr.DataArray:
    """:func:`required_simulations` for every pair of methods: dims (..., method, versus).

    Symmetric; NaN on the diagonal and where the test never rejects. Each pair uses the seeds
    where both methods have a score (see :func:`required_simulations`). Other dims
    (severity, ood, ...) are kept, but a severity of results without levels
    (:func:`~oodsim.results.score_view`); one metric (a string) drops the ``metric`` dim.
    ``alpha`` must lie in (0, 1) and ``dim`` be a dim of the score other than ``method`` and
    ``metric``: ValueError naming the argument otherwise.
    """
    check_alpha(alpha)
    score = score_view(results)
    dim = check_dim(score, dim)
    names = metrics_of(score, metric)
    methods = [str(m) for m in score["method"].values]
    template = score.isel({dim: 0, "method": 0}, drop=True)
    if isinstance(metric, str):
        template = select_metric(template, metric)
    elif "metric" in template.dims:
        template = template.sel(metric=names)
    out = xr.full_like(template, np.nan, dtype=float).expand_dims(method=methods, versus=methods)
    out = out.transpose(..., "method", "versus").copy()
    m = len(methods)
    for name in names or [None]:
        sub = score if name is None else select_metric(score, name)
        for labels, cell in iter_cells(sub, (dim, "method")):
            v = cell.transpose(dim, "method").values
            table = np.full((m, m), np.nan)
            for i in range(m):
                for j in range(i + 1, m):
                    n = required_simulations(v[:, i], v[:, j], alpha, test)
                    table[i, j] = table[j, i] = np.nan if n is None else n
            where = dict(labels)
            if name is not None and "metric" in out.dims:
                where["metric"] = name
            out.loc[where] = table
    out.name = "required_simulations"
    out.attrs = {"alpha": alpha, "test": test, "n_seeds": int(score.sizes[dim])}
    return out
