"""Win probability: how often each method "wins" a k-seed comparison (paper, section 4.2)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xarray as xr

from oodsim.stats._common import (
    as_score,
    complete_rows,
    higher_is_better,
    iter_cells,
    metrics_of,
    select_metric,
)

#: Largest number of float64 elements one block of draws may hold (~32 MiB).
_BLOCK = 2**22


def win_probability(
    values: np.ndarray,
    k: int = 5,
    n_draws: int = 10_000,
    replace: bool = False,
    rng: np.random.Generator | int | None = None,
    higher_is_better: bool = True,
) -> np.ndarray:
    """Probability that each method has the best mean over k randomly drawn seeds.

    ``values`` is (n_seeds, n_methods) with the same seeds in every column; seeds where any
    method is NaN (failed) are dropped. Each draw picks k seeds (one draw shared by all
    methods, as a k-seed experiment would), and the method with the best mean wins; a tie
    (equal within floating-point rounding) splits the win equally. Returns the win share per
    method over ``n_draws`` draws, which sums to 1. Without replacement, draws are uniform
    k-subsets (Floyd's algorithm, vectorized over draws); with replacement, k i.i.d. seeds.
    """
    v = complete_rows(values)
    n, m = v.shape
    k, n_draws = int(k), int(n_draws)
    if k < 1 or n_draws < 1:
        raise ValueError(f"k and n_draws must be positive, got k={k}, n_draws={n_draws}")
    if n == 0 or (not replace and k > n):
        raise ValueError(
            f"need at least {k} complete seeds to draw {k} without replacement, have {n}"
        )
    if not higher_is_better:
        v = -v
    rng = np.random.default_rng(rng)
    # Rounding of a k-term sum is below k * eps * sum|terms|; anything closer is a tie.
    tol = 4.0 * k * k * np.finfo(float).eps * max(float(np.abs(v).max()), np.finfo(float).tiny)
    use_floyd = replace or k <= 8 or k * k <= 16 * n
    per_draw = k * m + (0 if use_floyd else n)
    chunk = max(1, _BLOCK // per_draw)
    wins = np.zeros(m)
    for start in range(0, n_draws, chunk):
        size = min(chunk, n_draws - start)
        if replace:
            idx = rng.integers(0, n, size=(size, k))
        elif use_floyd:
            idx = _floyd_subsets(rng, n, k, size)
        else:
            idx = np.argpartition(rng.random((size, n)), k - 1, axis=1)[:, :k]
        sums = v[idx].sum(axis=1)  # (size, m); same summation order for every method
        is_best = sums >= sums.max(axis=1, keepdims=True) - tol
        wins += (is_best / is_best.sum(axis=1, keepdims=True)).sum(axis=0)
    return wins / n_draws


def _floyd_subsets(rng: np.random.Generator, n: int, k: int, size: int) -> np.ndarray:
    """``size`` uniform k-subsets of range(n), one per row (Floyd's algorithm, O(size·k²))."""
    out = np.empty((size, k), dtype=np.intp)
    for i, j in enumerate(range(n - k, n)):
        t = rng.integers(0, j + 1, size=size)
        taken = (out[:, :i] == t[:, None]).any(axis=1)
        out[:, i] = np.where(taken, j, t)
    return out


def win_probabilities(
    results: xr.Dataset | xr.DataArray,
    metric: str | Sequence[str] | None = None,
    k: int = 5,
    n_draws: int = 10_000,
    replace: bool = False,
    rng: np.random.Generator | int | None = None,
    dim: str = "seed",
) -> xr.DataArray:
    """:func:`win_probability` per cell of the results: a DataArray over ``method``.

    One metric (a string) drops the ``metric`` dim; ``None`` or a list keeps it. The other
    dims (``severity``, ``ood``, ``model``, ``dataset``) are kept; each cell is computed on its
    own (the direction follows the metric: lower is better for FPR). Cells with fewer than
    ``k`` complete seeds (without replacement) are NaN.
    """
    score = as_score(results)
    names = metrics_of(score, metric)
    rng = np.random.default_rng(rng)
    template = score.isel({dim: 0}, drop=True)
    if isinstance(metric, str):
        template = select_metric(template, metric)
    elif "metric" in template.dims:
        template = template.sel(metric=names)
    out = xr.full_like(template, np.nan, dtype=float)
    for name in names or [None]:
        sub = score if name is None else select_metric(score, name)
        direction = True if name is None else higher_is_better(name)
        for labels, cell in iter_cells(sub, (dim, "method")):
            v = cell.transpose(dim, "method").values
            try:
                p = win_probability(v, k, n_draws, replace, rng, direction)
            except ValueError:
                continue
            where = dict(labels)
            if name is not None and "metric" in out.dims:
                where["metric"] = name
            out.loc[where] = p
    out.name = "win_probability"
    out.attrs = {"k": int(k), "n_draws": int(n_draws), "replace": bool(replace)}
    return out
