"""The draws behind win probabilities: k-seed subsets of every method's finite values (Floyd's
algorithm, in blocks), the mean of each, who wins (ties split), and the same on bootstrap
resamples of the seeds."""

from __future__ import annotations

import numpy as np

#: Largest number of elements one block of draws may hold (~32 MiB of float64).
_BLOCK = 2**22


def bootstrap_stream(rng: np.random.Generator | int | None) -> np.random.Generator:
    """The bootstrap's own stream: a child of ``rng`` (for a seed, a child of that seed; for a
    Generator, spawned from it after its draws so far), never the point estimates' stream."""
    return np.random.default_rng(rng).spawn(1)[0]


def tie_tolerance(pool: np.ndarray, k: int) -> float:
    """Rounding of a k-term sum is below k * eps * sum|terms|; anything closer is a tie."""
    scale = max(float(np.nanmax(np.abs(pool), initial=0.0)), np.finfo(float).tiny)
    return 4.0 * k * k * np.finfo(float).eps * scale


def draw_wins(
    pools: np.ndarray,
    sizes: np.ndarray,
    k: int,
    n_draws: int,
    replace: bool,
    rng: np.random.Generator,
    tol: float,
    floats: bool = False,
) -> np.ndarray:
    """(B, m) win shares of B pools at once.

    ``pools`` is (B, n_max, m), higher is better; ``sizes`` is (B, 1) when one draw of rows is
    shared by all methods (paired: rows ``< sizes[b, 0]`` are the complete ones) or (B, m) when
    each method draws on its own (independent: method j's finite values at the top of its
    column). A pool whose size is too small to draw from gets NaN shares. ``floats``: draw
    indices from uniform doubles (the bootstrap; see :func:`_floyd_subsets`); the default keeps
    the integer stream of :func:`win_probability`.
    """
    n_pools, n_max, m = pools.shape
    g = sizes.shape[1]  # 1: one draw shared by all methods; m: one draw per method
    need = 1 if replace else k
    valid = (sizes >= need).all(axis=1)
    draw_sizes = np.maximum(sizes, need).ravel()  # an invalid pool draws NaN padding
    if n_max < need:
        pools = np.concatenate([pools, np.full((n_pools, need - n_max, m), np.nan)], axis=1)
        n_max = need
    groups = n_pools * g
    use_floyd = replace or k <= 8 or k * k <= 16 * n_max
    per_draw = k * n_pools * m + (0 if use_floyd else n_max * groups)
    chunk = max(1, _BLOCK // per_draw)
    if g == 1:  # value (b, pos, j) of the row-major pools
        flat = np.ascontiguousarray(pools).ravel()
        base = (np.arange(n_pools) * n_max)[None, :, None]
        cols = np.arange(m)[None, None, :]
    else:  # value (b, j, pos) of the transposed pools: method j's pool is contiguous
        flat = np.ascontiguousarray(pools.transpose(0, 2, 1)).ravel()
        offset = np.arange(groups) * n_max
    wins = np.zeros((n_pools, m))
    for start in range(0, n_draws, chunk):
        size = min(chunk, n_draws - start)
        if replace and floats:
            idx = (rng.random((k, size, groups)) * draw_sizes).astype(np.intp)
        elif replace:
            idx = rng.integers(0, _high(draw_sizes), size=(k, size, groups))
        elif use_floyd:
            idx = _floyd_subsets(rng, draw_sizes, k, size, floats)
        else:
            keys = rng.random((size, groups, n_max))
            keys[:, np.arange(n_max)[None, :] >= draw_sizes[:, None]] = np.inf  # outside a pool
            idx = np.moveaxis(np.argpartition(keys, k - 1, axis=2)[:, :, :k], 2, 0)
        # Sum of the k drawn values per (draw, pool, method), term by term in draw order.
        if g == 1:
            sums = np.take(flat, (base + idx[0][:, :, None]) * m + cols)
            for p in range(1, k):
                sums += np.take(flat, (base + idx[p][:, :, None]) * m + cols)
        else:
            sums = np.take(flat, idx[0] + offset).reshape(size, n_pools, m)
            for p in range(1, k):
                sums += np.take(flat, idx[p] + offset).reshape(size, n_pools, m)
        if not valid.all():
            sums[:, ~valid] = 0.0  # NaN padding; these pools are reported as NaN below
        is_best = sums >= sums.max(axis=2, keepdims=True) - tol
        wins += (is_best / is_best.sum(axis=2, keepdims=True)).sum(axis=0)
    wins /= n_draws
    wins[~valid] = np.nan
    return wins


def bootstrap_wins(
    values: np.ndarray,
    rows: np.ndarray,
    k: int,
    n_draws: int,
    replace: bool,
    rng: np.random.Generator,
    higher_is_better: bool,
    pairing: str,
) -> np.ndarray:
    """(B, m) win shares on the B resampled seed pools ``values[rows[b]]``."""
    v = values if higher_is_better else -values
    resampled = v[rows]  # (B, n, m): whole seeds, so each seed keeps all its methods
    if pairing == "paired":
        ok = np.isfinite(resampled).all(axis=2)
        order = np.argsort(~ok, axis=1, kind="stable")
        pools = np.take_along_axis(resampled, order[:, :, None], axis=1)
        sizes = ok.sum(axis=1)[:, None]
    else:
        finite = np.isfinite(resampled)
        order = np.argsort(~finite, axis=1, kind="stable")
        pools = np.take_along_axis(resampled, order, axis=1)
        sizes = finite.sum(axis=1)
    return draw_wins(pools, sizes, k, n_draws, replace, rng, tie_tolerance(v, k), floats=True)


def finite_columns(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def _floyd_subsets(
    rng: np.random.Generator, sizes: np.ndarray, k: int, size: int, floats: bool = False
) -> np.ndarray:
    """(k, size, len(sizes)) indices: for every draw r and group g, ``out[:, r, g]`` is a
    uniform k-subset of range(sizes[g]) (Floyd's algorithm, O(size·groups·k²)). ``floats``:
    draw each index as ``floor(u * (j + 1))`` of a uniform double (non-uniform by at most
    ``(j + 1) / 2**53``), several times faster than integers with per-group bounds."""
    out = np.empty((k, size, len(sizes)), dtype=np.intp)
    taken = np.empty((size, len(sizes)), dtype=bool)
    for i in range(k):
        j = sizes - k + i  # (groups,): Floyd's step draws from range(j + 1)
        if floats:
            t = (rng.random((size, len(sizes))) * (j + 1)).astype(np.intp)
        else:
            t = rng.integers(0, _high(j + 1), size=(size, len(sizes)))
        taken[:] = False
        for p in range(i):
            taken |= out[p] == t
        out[i] = np.where(taken, j, t)
    return out
