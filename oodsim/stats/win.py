"""Win probability: how often each method "wins" a k-seed comparison (paper, section 4.2); the
draws themselves are :mod:`oodsim.stats.win_draws`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd
import xarray as xr

from oodsim.metrics import higher_is_better
from oodsim.results.access import iter_cells, metrics_of, select_metric
from oodsim.results.select import score_view
from oodsim.stats.checks import check_alpha, check_count, check_dim, complete_rows
from oodsim.stats.intervals import percentile_interval
from oodsim.stats.win_draws import (
    bootstrap_stream,
    bootstrap_wins,
    draw_wins,
    finite_columns,
    tie_tolerance,
)

Pairing = Literal["independent", "paired"]


#: How the k seeds of one simulated experiment are drawn. The study's text admits both (see
#: docs/statistics.md, "Which k seeds"); ``win_probabilities`` keeps ``"independent"`` as its
#: default only for compatibility, and reports show both (:func:`win_probability_intervals`).
PAIRINGS: tuple[str, ...] = ("independent", "paired")


#: The words reports and the CLI use for each pairing: what is drawn, not whose reading it is.
PAIRING_LABELS: dict[str, str] = {
    "independent": "independent: each method averages its own k seeds",
    "paired": "paired: every method averages the same k seeds",
}


#: Seeds from which the bootstrap intervals of win probabilities (both pairings, k = 5) cover
#: a true probability between 0.05 and 0.95 at least 90% of the time, measured by
#: benchmarks/win_coverage.py (400 resampled pools, nominal 95%): below it they are too
#: narrow for small probabilities (0.79 at 10 seeds and 0.86 at 20 for a true 0.05), and
#: reports say so.
RELIABLE_FROM = 30


def win_probability(
    values: np.ndarray,
    k: int = 5,
    n_draws: int = 10_000,
    replace: bool = False,
    rng: np.random.Generator | int | None = 0,
    higher_is_better: bool = True,
    *,
    pairing: Pairing = "independent",
) -> np.ndarray:
    """Probability that each method has the best mean over k randomly drawn seeds.

    ``values`` is (n_seeds, n_methods); NaN marks a failed seed of a method. Each of the
    ``n_draws`` simulated experiments gives every method the mean of k seeds, and the method
    with the best mean wins; a tie (equal within floating-point rounding) splits the win
    equally, so the returned win shares sum to 1.

    ``pairing`` says which k seeds each method gets (the study's text can be read either way;
    :func:`win_probability_intervals` reports both, with intervals):

    - ``"independent"`` (default, kept for compatibility): every method draws its own k seeds
      from its own finite values, independently of the other methods, as separate experiments
      per method would. Each method needs k finite seeds (one with replacement).
    - ``"paired"``: one draw of k seeds is shared by all methods, as one k-seed experiment
      that runs every method on the same seeds would be. Seeds where any method is NaN are
      dropped first.

    The two differ when the seeds share an effect across methods (an easy class split lifts
    every detector): paired draws cancel it, so a method that is slightly worse on every seed
    rarely wins; independent draws add it to each method's mean as noise, which spreads the
    wins out. Without replacement (default; the study does not say) draws are uniform
    k-subsets (Floyd's algorithm, vectorized over draws and methods); with replacement, k
    i.i.d. seeds. ``rng`` defaults to the fixed seed 0, so the same values give the same
    probabilities; pass ``None`` for fresh entropy.

    ``k`` and ``n_draws`` must be integers >= 1, and without replacement ``k`` at most the
    finite seeds of every method (paired: the complete seeds); ValueError naming ``k`` (with
    both numbers) or ``n_draws`` otherwise.
    """
    k, n_draws = _check(k, n_draws, pairing)
    if pairing == "paired":
        pool = complete_rows(values)
        sizes = np.array([[len(pool)]])
        if len(pool) == 0:
            raise ValueError("k: no complete seed to draw from (every seed has a NaN method)")
        if not replace and k > len(pool):
            raise ValueError(
                f"k must be at most the number of complete seeds to draw without replacement: "
                f"k={k}, {len(pool)} complete seeds"
            )
    else:
        pool, counts = finite_columns(values)
        sizes = counts[None, :]
        if counts.min() < (1 if replace else k):
            j = int(counts.argmin())
            raise ValueError(
                "k must be at most the number of finite seeds of every method to draw "
                f"without replacement: k={k}, method {j} has {counts[j]} finite seeds"
                if not replace
                else f"k: method {j} has no finite seed to draw from"
            )
    if not higher_is_better:
        pool = -pool
    rng = np.random.default_rng(rng)
    return draw_wins(pool[None], sizes, k, n_draws, replace, rng, tie_tolerance(pool, k))[0]


def win_probability_interval(
    values: np.ndarray,
    k: int = 5,
    n_draws: int = 10_000,
    replace: bool = False,
    rng: np.random.Generator | int | None = 0,
    higher_is_better: bool = True,
    *,
    pairing: Pairing = "independent",
    n_boot: int = 400,
    boot_draws: int = 1_000,
    confidence: float = 0.95,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`win_probability` with a bootstrap percentile interval over the seed pool:
    ``(estimate, lower, upper)``, each over methods.

    ``estimate`` is exactly ``win_probability(values, k, n_draws, replace, rng, ...)``. The
    interval resamples the seeds (whole rows, so the paired structure is kept) with
    replacement ``n_boot`` times, recomputes the win probability on each resampled pool with
    ``boot_draws`` draws, and takes the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2``
    percentiles. It says how much the probabilities depend on which seeds happen to be in the
    pool; it also holds the Monte Carlo error of ``boot_draws`` draws (at most
    ``0.5 / sqrt(boot_draws)`` in standard deviation), which widens it slightly. A percentile
    interval can miss a skewed estimate; near 0 or 1 it is lopsided, as it should be. ``rng``
    is a seed (default 0), a Generator, or None for fresh entropy; the bootstrap stream is a
    child spawned from it after the estimate, so the same seed gives the same numbers.
    Resampled pools where a draw is impossible (a method left with fewer than ``k`` finite
    seeds) are skipped.
    """
    k, n_draws = _check(k, n_draws, pairing)
    n_boot, boot_draws, confidence = _check_boot(n_boot, boot_draws, confidence)
    estimate = win_probability(values, k, n_draws, replace, rng, higher_is_better, pairing=pairing)
    v = np.asarray(values, dtype=float)
    v = v[:, None] if v.ndim == 1 else v
    boot = bootstrap_stream(rng)
    rows = boot.integers(0, len(v), size=(int(n_boot), len(v)))
    reps = bootstrap_wins(v, rows, k, int(boot_draws), replace, boot, higher_is_better, pairing)
    lower, upper = percentile_interval(reps, confidence)
    return estimate, lower, upper


def _check(k: object, n_draws: object, pairing: str) -> tuple[int, int]:
    """``(k, n_draws)`` as ints >= 1; ValueError naming the argument otherwise."""
    k, n_draws = check_count(k, "k"), check_count(n_draws, "n_draws")
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {', '.join(PAIRINGS)}, got {pairing!r}")
    return k, n_draws


def _check_boot(n_boot: object, boot_draws: object, confidence: object) -> tuple[int, int, float]:
    """``(n_boot, boot_draws, confidence)`` checked: ints >= 1 and a level in (0, 1)."""
    return (
        check_count(n_boot, "n_boot"),
        check_count(boot_draws, "boot_draws"),
        check_alpha(confidence, "confidence"),
    )


def _check_seeds(score: xr.DataArray, dim: object, k: int, replace: bool) -> str:
    """``dim`` checked (:func:`check_dim`), and ``k`` at most its length without replacement."""
    dim = check_dim(score, dim)
    if not replace and k > score.sizes[dim]:
        raise ValueError(
            f"k must be at most the number of seeds to draw without replacement: k={k}, "
            f"{score.sizes[dim]} seeds along {dim!r}"
        )
    return dim


def win_probabilities(
    results: xr.Dataset | xr.DataArray,
    metric: str | Sequence[str] | None = None,
    k: int = 5,
    n_draws: int = 10_000,
    replace: bool = False,
    rng: np.random.Generator | int | None = 0,
    dim: str = "seed",
    *,
    pairing: Pairing | Literal["both"] = "independent",
) -> xr.DataArray:
    """:func:`win_probability` per cell of the results: a DataArray over ``method``.

    ``pairing="both"`` gives both readings side by side, over a leading ``pairing`` dim
    (``"independent"``, ``"paired"``), each exactly the single-pairing call (an integer
    ``rng`` seeds each; a Generator is used by them in turn);
    :func:`win_probability_intervals` adds their bootstrap intervals.

    One metric (a string) drops the ``metric`` dim; ``None`` or a list keeps it. The other
    dims (``severity``, ``ood``, ``model``, ``dataset``) are kept, but a ``severity`` of results
    without levels (:func:`~oodsim.results.score_view`); each cell is computed on its
    own (the direction follows the metric: lower is better for FPR). ``pairing`` is
    ``"independent"`` (default, kept for compatibility: each method draws its own k seeds) or
    ``"paired"`` (one draw shared by all methods); see :func:`win_probability`, and
    :func:`win_probability_intervals` for both side by side with intervals. Cells where a
    draw is impossible (without replacement: a method with fewer than ``k`` finite seeds, or
    fewer than ``k`` complete seeds when paired) are NaN; a ``k`` above the number of seeds
    along ``dim`` (no cell could draw) is refused. ``rng`` defaults to the fixed seed 0
    (one generator for all cells, in order), so the same results give the same numbers; pass a
    Generator to continue a stream, or None for fresh entropy. ``attrs`` record ``k``,
    ``n_draws``, ``replace`` and ``pairing``.
    """
    k, n_draws = _check(k, n_draws, "paired" if pairing == "both" else pairing)
    dim = _check_seeds(score_view(results), dim, k, replace)
    if pairing == "both":
        both = _by_pairing(results, metric, k, n_draws, replace, rng, dim, PAIRINGS)
        both.attrs["pairing"] = "both"
        return both
    return _cells(results, metric, k, n_draws, replace, rng, dim, pairing)


def _cells(
    results: xr.Dataset | xr.DataArray,
    metric: str | Sequence[str] | None,
    k: int,
    n_draws: int,
    replace: bool,
    rng: np.random.Generator | int | None,
    dim: str,
    pairing: str,
) -> xr.DataArray:
    """:func:`win_probabilities` of one pairing with its arguments checked, ``k`` above the
    seeds allowed (every cell NaN)."""
    score = score_view(results)
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


def _seed_of(
    rng: np.random.Generator | np.random.SeedSequence | int | None,
) -> np.random.Generator | np.random.SeedSequence:
    """What starts each pairing: a seed (or None: fresh entropy, drawn once) as a SeedSequence
    that every pairing starts from afresh, as separate calls would; a Generator, shared."""
    if isinstance(rng, np.random.Generator | np.random.SeedSequence):
        return rng
    return np.random.SeedSequence(rng)


def _by_pairing(
    results: xr.Dataset | xr.DataArray,
    metric: str | Sequence[str] | None,
    k: int,
    n_draws: int,
    replace: bool,
    rng: np.random.Generator | int | None,
    dim: str,
    pairings: Sequence[str],
) -> xr.DataArray:
    """:func:`win_probabilities` of each pairing over a leading ``pairing`` dim (``rng`` as in
    :func:`_seed_of`)."""
    seed = _seed_of(rng)
    each = [
        _cells(results, metric, k, n_draws, replace, np.random.default_rng(seed), dim, p)
        for p in pairings
    ]
    out = xr.concat(each, dim=pd.Index(list(pairings), name="pairing"))
    out.attrs = dict(each[0].attrs)
    return out.rename("win_probability")


def win_probability_intervals(
    results: xr.Dataset | xr.DataArray,
    metric: str | Sequence[str] | None = None,
    k: int = 5,
    n_draws: int = 10_000,
    replace: bool = False,
    rng: np.random.Generator | int | None = 0,
    dim: str = "seed",
    *,
    pairings: Sequence[str] = PAIRINGS,
    n_boot: int = 400,
    boot_draws: int = 1_000,
    confidence: float = 0.95,
) -> xr.Dataset:
    """Win probabilities under each pairing side by side, with bootstrap intervals.

    Returns an ``xr.Dataset`` with ``win_probability``, ``lower`` and ``upper`` over
    ``(pairing, method, ...)``: ``pairing`` holds ``pairings`` (default both,
    ``"independent"`` and ``"paired"``); the other dims are those of
    :func:`win_probabilities` (one metric as a string drops ``metric``).

    - ``win_probability`` of pairing ``p`` is ``win_probabilities(results, metric, k,
      n_draws, replace, rng, dim, pairing=p)``: for a seed (default 0), exactly the numbers of
      that separate call, each pairing starting from the same seed; a Generator is used by
      the pairings in turn.
    - ``lower``/``upper``: the ``confidence`` bootstrap percentile interval over the seed
      pool (:func:`win_probability_interval`): per cell, the seeds are resampled with
      replacement ``n_boot`` times (whole seeds, so a seed keeps every method's score and
      paired draws stay paired; both pairings use the same resamples), each resampled pool
      gets ``boot_draws`` draws, and the percentiles of the ``n_boot`` probabilities are
      taken. The bootstrap stream is a child spawned from ``rng``, so the same results and
      seed give the same numbers.

    ``rng``: a seed (default 0: the same results give the same numbers), a Generator, or None
    for fresh entropy.

    ``attrs``: ``k``, ``n_draws``, ``replace``, ``n_boot``, ``boot_draws``, ``confidence``
    and ``interval`` (in words). Cells where a draw is impossible are NaN, as in
    :func:`win_probabilities`, and so is every cell when ``k`` is above the number of seeds
    (reports ask only with at least ``k`` seeds). ``k``, ``n_draws``, ``n_boot`` and
    ``boot_draws`` must be integers >= 1, ``confidence`` lie in (0, 1) and ``dim`` be a dim
    of the score other than ``method`` and ``metric``: ValueError naming the argument
    otherwise.
    """
    pairings = tuple(str(p) for p in pairings)
    if not pairings or len(set(pairings)) < len(pairings):
        raise ValueError(f"pairings must name distinct pairings, got {pairings!r}")
    for p in pairings:
        k, n_draws = _check(k, n_draws, p)
    n_boot, boot_draws, confidence = _check_boot(n_boot, boot_draws, confidence)
    dim = check_dim(score_view(results), dim)
    seed = _seed_of(rng)
    point = _by_pairing(results, metric, k, n_draws, replace, seed, dim, pairings)
    point.attrs = {}
    boot = bootstrap_stream(np.random.default_rng(seed))
    lower = xr.full_like(point, np.nan)
    upper = xr.full_like(point, np.nan)
    score = score_view(results)
    names = metrics_of(score, metric)
    for name in names or [None]:
        sub = score if name is None else select_metric(score, name)
        direction = True if name is None else higher_is_better(name)
        for labels, cell in iter_cells(sub, (dim, "method")):
            where = dict(labels)
            if name is not None and "metric" in point.dims:
                where["metric"] = name
            v = cell.transpose(dim, "method").values.astype(float)
            rows = boot.integers(0, len(v), size=(int(n_boot), len(v)))
            for p in pairings:
                at = {**where, "pairing": p}
                if not np.isfinite(point.loc[at].values).all():
                    continue  # no draw possible in this cell
                reps = bootstrap_wins(v, rows, int(k), int(boot_draws), replace, boot, direction, p)
                lo, hi = percentile_interval(reps, confidence)
                lower.loc[at] = lo
                upper.loc[at] = hi
    out = xr.Dataset({"win_probability": point, "lower": lower, "upper": upper})
    out.attrs = {
        "k": int(k),
        "n_draws": int(n_draws),
        "replace": bool(replace),
        "n_boot": int(n_boot),
        "boot_draws": int(boot_draws),
        "confidence": float(confidence),
        "interval": "bootstrap percentile over the seed pool",
    }
    return out
