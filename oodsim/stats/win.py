"""Win probability: how often each method "wins" a k-seed comparison (paper, section 4.2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

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

Pairing = Literal["independent", "paired"]
#: How the k seeds of one simulated experiment are drawn; the first is the default.
PAIRINGS: tuple[str, ...] = ("independent", "paired")
#: The words reports and the CLI use for each pairing.
PAIRING_LABELS: dict[str, str] = {
    "independent": "independent draws per method",
    "paired": "paired draws, the same seeds for every method",
}

#: Largest number of elements one block of draws may hold (~32 MiB of float64).
_BLOCK = 2**22


def win_probability(
    values: np.ndarray,
    k: int = 5,
    n_draws: int = 10_000,
    replace: bool = False,
    rng: np.random.Generator | int | None = None,
    higher_is_better: bool = True,
    *,
    pairing: Pairing = "independent",
) -> np.ndarray:
    """Probability that each method has the best mean over k randomly drawn seeds.

    ``values`` is (n_seeds, n_methods); NaN marks a failed seed of a method. Each of the
    ``n_draws`` simulated experiments gives every method the mean of k seeds, and the method
    with the best mean wins; a tie (equal within floating-point rounding) splits the win
    equally, so the returned win shares sum to 1.

    ``pairing`` says which k seeds each method gets:

    - ``"independent"`` (default, the study's reading: "for each method, we can then sample
      five trials from this pool"): every method draws its own k seeds from its own finite
      values, independently of the other methods. Each method needs k finite seeds (one
      with replacement).
    - ``"paired"``: one draw of k seeds is shared by all methods, as one k-seed experiment
      that runs every method on the same seeds would be. Seeds where any method is NaN are
      dropped first.

    The two differ when the seeds share an effect across methods (an easy class split lifts
    every detector): paired draws cancel it, so a method that is slightly worse on every seed
    rarely wins; independent draws add it to each method's mean as noise, which spreads the
    wins out. Without replacement (default; the study does not say) draws are uniform
    k-subsets (Floyd's algorithm, vectorized over draws and methods); with replacement, k
    i.i.d. seeds.
    """
    k, n_draws = int(k), int(n_draws)
    _check(k, n_draws, pairing)
    if pairing == "paired":
        pool = complete_rows(values)
        sizes = np.array([len(pool)])
        if len(pool) == 0 or (not replace and k > len(pool)):
            raise ValueError(
                f"need at least {k} complete seeds to draw {k} without replacement, "
                f"have {len(pool)}"
            )
    else:
        pool, sizes = _compact(values)
        need = 1 if replace else k
        if sizes.min() < need:
            j = int(sizes.argmin())
            raise ValueError(
                f"need at least {need} finite seeds of every method to draw {k} "
                f"{'with' if replace else 'without'} replacement; method {j} has {sizes[j]}"
            )
    if not higher_is_better:
        pool = -pool
    n_max, m = pool.shape
    rng = np.random.default_rng(rng)
    # Rounding of a k-term sum is below k * eps * sum|terms|; anything closer is a tie.
    scale = max(float(np.nanmax(np.abs(pool), initial=0.0)), np.finfo(float).tiny)
    tol = 4.0 * k * k * np.finfo(float).eps * scale
    use_floyd = replace or k <= 8 or k * k <= 16 * n_max
    groups = len(sizes)  # 1: one draw shared by all methods; m: one draw per method
    per_draw = k * max(m, groups) + (0 if use_floyd else n_max * groups)
    chunk = max(1, _BLOCK // per_draw)
    wins = np.zeros(m)
    flat = np.ascontiguousarray(pool.T).ravel()  # method j's pool at j*n_max ...
    offset = np.arange(m) * n_max
    for start in range(0, n_draws, chunk):
        size = min(chunk, n_draws - start)
        if replace:
            idx = rng.integers(0, _high(sizes), size=(k, size, groups))
        elif use_floyd:
            idx = _floyd_subsets(rng, sizes, k, size)
        else:
            keys = rng.random((size, groups, n_max))
            keys[:, np.arange(n_max)[None, :] >= sizes[:, None]] = np.inf  # outside a pool
            idx = np.moveaxis(np.argpartition(keys, k - 1, axis=2)[:, :, :k], 2, 0)
        # Sum of the k drawn values per (draw, method), term by term in draw order.
        if groups == 1:
            sums = pool[idx[0, :, 0]]
            for p in range(1, k):
                sums += pool[idx[p, :, 0]]
        else:
            sums = np.take(flat, idx[0] + offset)
            for p in range(1, k):
                sums += np.take(flat, idx[p] + offset)
        is_best = sums >= sums.max(axis=1, keepdims=True) - tol
        wins += (is_best / is_best.sum(axis=1, keepdims=True)).sum(axis=0)
    return wins / n_draws


def _check(k: int, n_draws: int, pairing: str) -> None:
    if k < 1 or n_draws < 1:
        raise ValueError(f"k and n_draws must be positive, got k={k}, n_draws={n_draws}")
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {', '.join(PAIRINGS)}, got {pairing!r}")


def _compact(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each method's finite values moved to the top of its column (seed order kept), and
    how many each has; the rest of a column is NaN and never drawn."""
    v = np.asarray(values, dtype=float)
    if v.ndim == 1:
        v = v[:, None]
    if v.ndim != 2:
        raise ValueError(f"values must have shape (n_seeds, n_methods), got {v.shape}")
    finite = np.isfinite(v)
    order = np.argsort(~finite, axis=0, kind="stable")
    pool = np.where(finite, v, np.nan)[order, np.arange(v.shape[1])]
    return pool, finite.sum(axis=0)


def _high(sizes: np.ndarray) -> int | np.ndarray:
    """``sizes`` as the upper bound of ``rng.integers``: a scalar when all are equal, which
    numpy draws several times faster than an array of bounds."""
    return int(sizes[0]) if (sizes == sizes[0]).all() else sizes


def _floyd_subsets(rng: np.random.Generator, sizes: np.ndarray, k: int, size: int) -> np.ndarray:
    """(k, size, len(sizes)) indices: for every draw r and group g, ``out[:, r, g]`` is a
    uniform k-subset of range(sizes[g]) (Floyd's algorithm, O(size·groups·k²))."""
    out = np.empty((k, size, len(sizes)), dtype=np.intp)
    taken = np.empty((size, len(sizes)), dtype=bool)
    for i in range(k):
        j = sizes - k + i  # (groups,): Floyd's step draws from range(j + 1)
        t = rng.integers(0, _high(j + 1), size=(size, len(sizes)))
        taken[:] = False
        for p in range(i):
            taken |= out[p] == t
        out[i] = np.where(taken, j, t)
    return out


def win_probabilities(
    results: xr.Dataset | xr.DataArray,
    metric: str | Sequence[str] | None = None,
    k: int = 5,
    n_draws: int = 10_000,
    replace: bool = False,
    rng: np.random.Generator | int | None = None,
    dim: str = "seed",
    *,
    pairing: Pairing = "independent",
) -> xr.DataArray:
    """:func:`win_probability` per cell of the results: a DataArray over ``method``.

    One metric (a string) drops the ``metric`` dim; ``None`` or a list keeps it. The other
    dims (``severity``, ``ood``, ``model``, ``dataset``) are kept; each cell is computed on its
    own (the direction follows the metric: lower is better for FPR). ``pairing`` is
    ``"independent"`` (default, each method draws its own k seeds, as in the study) or
    ``"paired"`` (one draw shared by all methods); see :func:`win_probability`. Cells where a
    draw is impossible (without replacement: a method with fewer than ``k`` finite seeds, or
    fewer than ``k`` complete seeds when paired) are NaN. ``attrs`` record ``k``, ``n_draws``,
    ``replace`` and ``pairing``.
    """
    _check(int(k), int(n_draws), pairing)
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
                p = win_probability(v, k, n_draws, replace, rng, direction, pairing=pairing)
            except ValueError:
                continue
            where = dict(labels)
            if name is not None and "metric" in out.dims:
                where["metric"] = name
            out.loc[where] = p
    out.name = "win_probability"
    out.attrs = {
        "k": int(k),
        "n_draws": int(n_draws),
        "replace": bool(replace),
        "pairing": str(pairing),
    }
    return out
