"""Variance components of a crossed design of random streams (class split × init × ...).

A seed design crosses named random streams (:mod:`oodsim.seeds`): e.g. ``class_split`` at 4
levels × ``init`` at 4 levels, each grid cell run by one or more seeds (replicates differ in
every stream the design does not fix). The score of a seed is then modelled as a crossed
random-effects model with every main effect and every estimable interaction,

    y = mu + sum over non-empty subsets T of the factors of b_T[levels of T] + e,

b_T ~ (0, sigma2_T) independent, e ~ (0, sigma2_residual); the streams outside the design
follow the seed and are part of the residual. :func:`crossed_components` estimates the
sigma2 of one array of scores; :func:`~oodsim.stats.components.variance_components` runs it
over every cell (method, metric, severity, ...) of a results Dataset.

Two estimators:

``anova`` (a balanced complete design: every combination of levels present r >= 1 times)
    The method of moments of the balanced random model. The sums of squares are the
    orthogonal projections of y (inclusion–exclusion of marginal means), with the expected
    mean squares of Cornfield and Tukey, E[MS_T] = sum over U ⊇ T of (N / prod_{k in U} L_k)
    sigma2_U + sigma2_residual; the Möbius inversion of that triangular system gives each
    sigma2_T as a signed sum of mean squares, truncated at zero (``variance_raw`` keeps the
    unbiased signed value). With r = 1 the highest-order interaction is confounded with the
    residual and folded into it. Intervals are generalized (fiducial) confidence intervals
    (Weerahandi 1993; Hannig, Iyer & Patterson 2006): with W_U ~ chi2(df_U) independent, the
    pivot SS_U / W_U of E[MS_U] goes through the same Möbius combination, giving draws of
    every sigma2_T (truncated at zero), of the total and of every share; the intervals are
    their percentiles.

``reml`` (missing cells or unequal replication, e.g. after failed seeds are dropped)
    Restricted maximum likelihood with dense matrices, V = sum_T sigma2_T Z_T Z_T' +
    sigma2_residual I, maximized over the log-variances by L-BFGS-B (analytic gradient) from
    moment starting values. A term enters the model when its columns add rank to those of
    the terms before it and leave some degree of freedom to the residual; an interaction
    that would use up the residual (one seed per observed cell) is folded into it, as in
    the balanced case, and a term aliased with earlier ones (two factors that move
    together) is left out. Intervals are a parametric bootstrap (simulate from the fit,
    refit, percentiles; ``n_boot`` refits), much slower than the fiducial draws: n_boot
    REML fits per cell.

For a balanced design whose ANOVA estimates are all positive both estimators give the same
values.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs
import numpy as np

from oodsim.stats.checks import check_alpha, check_count, check_levels
from oodsim.stats.intervals import percentile_interval
from oodsim.stats.reml import (
    Subset,
    moment_start,
    one_blas_thread,
    reml_fit,
    reml_model,
    simulate,
)

#: Name of the residual source (with one seed per cell it includes the top interaction).
RESIDUAL = "residual"


#: Per-source arrays of :class:`CrossedComponents`, in the order the wrapper stores them.
SOURCE_KEYS: tuple[str, ...] = (
    "variance",
    "variance_raw",
    "variance_low",
    "variance_high",
    "share",
    "share_low",
    "share_high",
    "df",
)


Method = Literal["auto", "anova", "reml"]


@attrs.frozen(eq=False)
class CrossedComponents:
    """Variance components of one crossed design (see :func:`crossed_components`).

    Every array is aligned with ``sources``: the main effects in factor order, then the
    interactions (``"a:b"``, by order, then factor order), then ``"residual"``. ``method`` is
    ``"anova"``, ``"reml"`` or ``"none"`` (too little data: every value NaN).
    """

    sources: tuple[str, ...]
    variance: np.ndarray
    variance_raw: np.ndarray
    variance_low: np.ndarray
    variance_high: np.ndarray
    share: np.ndarray
    share_low: np.ndarray
    share_high: np.ndarray
    df: np.ndarray
    total: float
    total_low: float
    total_high: float
    method: str
    n: int
    n_levels: dict[str, int]
    confidence: float
    interval: str

    def row(self, source: str) -> dict[str, float]:
        """The values of one source, keyed as :data:`SOURCE_KEYS`."""
        if source not in self.sources:
            raise KeyError(f"no source {source!r}; sources: {', '.join(self.sources)}")
        i = self.sources.index(source)
        return {key: float(getattr(self, key)[i]) for key in SOURCE_KEYS}

    def as_dict(self) -> dict[str, Any]:
        """Plain dict: ``{source: row}`` under ``"sources"`` plus the scalar fields."""
        return {
            "sources": {name: self.row(name) for name in self.sources},
            "total": self.total,
            "total_low": self.total_low,
            "total_high": self.total_high,
            "method": self.method,
            "n": self.n,
            "n_levels": dict(self.n_levels),
            "confidence": self.confidence,
            "interval": self.interval,
        }


def term_subsets(k: int) -> list[Subset]:
    """Non-empty subsets of ``range(k)``: main effects, then 2-way, ... (factor order)."""
    return [c for size in range(1, k + 1) for c in itertools.combinations(range(k), size)]


def source_name(subset: Subset, names: Sequence[str]) -> str:
    return ":".join(names[i] for i in subset)


def _rng(rng: int | np.random.Generator | None) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def interval_text(method: str, n_draws: int, n_boot: int) -> str:
    """The interval of an estimator in words (``"none: ..."`` when its draws are 0)."""
    if method == "anova":
        if n_draws == 0:
            return "none: n_draws=0 skips the fiducial intervals"
        return f"generalized (fiducial) confidence interval, {n_draws} draws"
    if method == "reml":
        if n_boot == 0:
            return "none: n_boot=0 skips the bootstrap intervals"
        return (
            f"approximate: parametric bootstrap percentile interval, {n_boot} REML refits "
            "(unbalanced designs; with few levels it covered 0.89-0.98 for 95%, "
            "benchmarks/vc_coverage.py)"
        )
    return "none"


def _result(
    sources: Sequence[str],
    values: dict[str, np.ndarray],
    totals: tuple[float, float, float],
    method: str,
    n: int,
    n_levels: dict[str, int],
    confidence: float,
    interval: str,
) -> CrossedComponents:
    nan = np.full(len(sources), np.nan)
    arrays = {key: np.asarray(values.get(key, nan), dtype=float) for key in SOURCE_KEYS}
    return CrossedComponents(
        sources=tuple(sources),
        total=float(totals[0]),
        total_low=float(totals[1]),
        total_high=float(totals[2]),
        method=method,
        n=int(n),
        n_levels=n_levels,
        confidence=confidence,
        interval=interval,
        **arrays,
    )


def _shares(variance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Total along the last axis and the shares (NaN where the total is not positive)."""
    total = variance.sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where((total > 0)[..., None], variance / np.expand_dims(total, -1), np.nan)
    return total, share


def _summaries(
    draws: np.ndarray, confidence: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, float]:
    """Percentile intervals of variance, share and total from (n_draws, n_sources) draws
    (already truncated at zero)."""
    total, share = _shares(draws)
    v_lo, v_hi = percentile_interval(draws, confidence)
    s_lo, s_hi = percentile_interval(share, confidence)
    t_lo, t_hi = percentile_interval(total, confidence)
    return v_lo, v_hi, s_lo, s_hi, float(t_lo), float(t_hi)


def _anova(
    y: np.ndarray,
    codes: np.ndarray,
    levels: tuple[int, ...],
    names: Sequence[str],
    confidence: float,
    n_draws: int,
    rng: np.random.Generator,
) -> tuple[list[str], dict[str, np.ndarray], tuple[float, float, float]] | None:
    """Balanced ANOVA with generalized confidence intervals; None without residual df."""
    k, n = len(levels), len(y)
    n_cells = math.prod(levels)
    r = n // n_cells
    cell = np.ravel_multi_index(tuple(codes.T), levels)
    cube = y[np.argsort(cell, kind="stable")].reshape(*levels, r)
    subsets = term_subsets(k)
    full = tuple(range(k))
    # Marginal means over every subset of factors (the replicate axis always averaged).
    means = {
        s: cube.mean(axis=tuple(a for a in range(k + 1) if a not in s), keepdims=True)
        for s in [(), *subsets]
    }
    ss, df, coef = {}, {}, {}
    for t in subsets:
        effect = sum(
            (-1) ** (len(t) - len(s)) * means[s]
            for size in range(len(t) + 1)
            for s in itertools.combinations(t, size)
        )
        coef[t] = n / math.prod(levels[i] for i in t)
        ss[t] = float(coef[t] * np.sum(effect**2))
        df[t] = math.prod(levels[i] - 1 for i in t)
    if r > 1:
        terms = subsets
        ss_res = float(np.sum((cube - means[full]) ** 2))
        df_res = n_cells * (r - 1)
    elif k == 1:
        return None  # one value per level: no residual degree of freedom
    else:  # the top interaction is the residual
        terms = subsets[:-1]
        ss_res, df_res = ss[full], df[full]
    if df_res < 1:
        return None
    m = len(terms) + 1
    # E[MS] = A @ sigma2: A[i, j] = coef_U for U = terms[j] ⊇ terms[i]; residual coefficient 1.
    a = np.zeros((m, m))
    for i, t in enumerate(terms):
        for j, u in enumerate(terms):
            if set(t) <= set(u):
                a[i, j] = coef[u]
    a[:, -1] = 1.0
    mobius = np.linalg.inv(a)  # upper triangular with signed 1/coef entries: Möbius inversion
    ss_vec = np.array([ss[t] for t in terms] + [ss_res])
    df_vec = np.array([df[t] for t in terms] + [df_res], dtype=float)
    raw = mobius @ (ss_vec / df_vec)
    variance = np.maximum(raw, 0.0)
    total, share = _shares(variance)
    values = {"variance": variance, "variance_raw": raw, "share": share, "df": df_vec}
    t_lo = t_hi = float("nan")
    if n_draws > 0:
        pivots = ss_vec / rng.chisquare(df_vec, size=(n_draws, m))
        draws = np.maximum(pivots @ mobius.T, 0.0)
        v_lo, v_hi, s_lo, s_hi, t_lo, t_hi = _summaries(draws, confidence)
        values |= {
            "variance_low": v_lo,
            "variance_high": v_hi,
            "share_low": s_lo,
            "share_high": s_hi,
        }
    sources = [source_name(t, names) for t in terms] + [RESIDUAL]
    return sources, values, (float(total), t_lo, t_hi)


def _reml(
    y: np.ndarray,
    codes: np.ndarray,
    levels: tuple[int, ...],
    names: Sequence[str],
    confidence: float,
    n_boot: int,
    rng: np.random.Generator,
) -> tuple[list[str], dict[str, np.ndarray], tuple[float, float, float]] | None:
    model = reml_model(codes, levels, term_subsets(len(levels)))
    if model is None:
        return None
    m = len(model.terms) + 1
    equal = np.full(m, float(np.var(y, ddof=1)) / m)
    variance = reml_fit(y, model, [moment_start(y, model), equal])
    total, share = _shares(variance)
    values = {
        "variance": variance,
        "variance_raw": variance,
        "share": share,
        "df": model.df,
    }
    if n_boot > 0:
        draws = np.empty((n_boot, m))
        start = np.maximum(variance, 1e-3 * total if total > 0 else 1.0)
        for b in range(n_boot):
            y_star = simulate(model, float(y.mean()), variance, len(y), rng)
            draws[b] = reml_fit(y_star, model, [start])
        v_lo, v_hi, s_lo, s_hi, t_lo, t_hi = _summaries(draws, confidence)
        values |= {
            "variance_low": v_lo,
            "variance_high": v_hi,
            "share_low": s_lo,
            "share_high": s_hi,
        }
    else:
        t_lo = t_hi = float("nan")
    sources = [source_name(t, names) for t in model.terms] + [RESIDUAL]
    return sources, values, (float(total), t_lo, t_hi)


def crossed_components(
    values: np.ndarray | Sequence[float],
    factors: Mapping[str, np.ndarray | Sequence[Any]],
    confidence: float = 0.95,
    n_draws: int = 4000,
    rng: int | np.random.Generator | None = 0,
    *,
    n_boot: int = 200,
    method: Method = "auto",
) -> CrossedComponents:
    """Variance components of ``values`` under a crossed random-effects model of ``factors``.

    ``factors`` maps a factor name (e.g. ``"class_split"``) to the level of every value (any
    hashable labels: a stream's entropy, a split name). NaN values are dropped. The model
    has every main effect and every estimable interaction (named ``"a:b"``) plus the
    ``"residual"``; see the module docstring for the estimators. ``method="auto"`` uses the
    balanced ANOVA when every combination of the levels left after dropping NaNs is present
    equally often, REML otherwise; ``"anova"`` insists on a balanced design, ``"reml"``
    forces REML (equal to the ANOVA on balanced data when every ANOVA estimate is
    positive). ``n_draws`` fiducial draws (ANOVA) or ``n_boot`` parametric-bootstrap refits
    (REML; much slower) give percentile intervals at ``confidence``,
    reproducible for an integer ``rng``; 0 skips them (NaN, and ``interval`` says so).

    Per source: ``variance`` (truncated at zero), ``variance_raw`` (ANOVA: the unbiased
    signed moment estimate; REML: the same as ``variance``), ``variance_low``/``_high``,
    ``share`` of the total variance with its interval, and ``df`` (ANOVA degrees of
    freedom; REML: the source's rank beyond its marginals). Fewer than two values or no
    residual degree of freedom give NaNs (``method="none"``).

    Raises ValueError, naming the argument, for a factor with a single level (nothing to
    estimate) or a missing level (NaN or None: refused, never taken as a level of its own),
    ``confidence`` outside (0, 1), ``n_draws`` or ``n_boot`` not an integer >= 0, and
    ``method="anova"`` on an unbalanced design.
    """
    check_alpha(confidence, "confidence")
    n_draws = check_count(n_draws, "n_draws", 0, "0 skips the intervals")
    n_boot = check_count(n_boot, "n_boot", 0, "0 skips the intervals")
    if method not in ("auto", "anova", "reml"):
        raise ValueError(f"method must be 'auto', 'anova' or 'reml', got {method!r}")
    if not factors:
        raise ValueError("no factors given")
    y = np.asarray(values, dtype=float).ravel()
    names = [str(name) for name in factors]
    labels = [np.asarray(factors[name]).ravel() for name in factors]
    for name, lab in zip(names, labels, strict=True):
        if len(lab) != len(y):
            raise ValueError(f"{len(y)} values but {len(lab)} levels of factor {name!r}")
        check_levels(lab, f"factor {name!r}")
        if len(np.unique(lab)) < 2:
            raise ValueError(f"factor {name!r} has a single level: nothing to estimate")
    keep = np.isfinite(y)
    y = y[keep]
    uniques, codes = [], []
    for lab in labels:
        u, inv = np.unique(lab[keep], return_inverse=True)
        uniques.append(u)
        codes.append(inv)
    levels = tuple(len(u) for u in uniques)
    n_levels = dict(zip(names, levels, strict=True))
    generator = _rng(rng)

    def empty() -> CrossedComponents:
        return _result(
            [*names, RESIDUAL], {}, (np.nan,) * 3, "none", len(y), n_levels, confidence, "none"
        )

    if len(y) < 2 or min(levels) < 2:
        return empty()
    code_matrix = np.column_stack(codes)
    counts = np.bincount(
        np.ravel_multi_index(tuple(code_matrix.T), levels), minlength=math.prod(levels)
    )
    balanced = counts.min() == counts.max()
    if method == "anova" and not balanced:
        raise ValueError(
            "the design is not balanced (missing cells or unequal replication): use REML"
        )
    use = "anova" if method == "anova" or (method == "auto" and balanced) else "reml"
    if use == "anova":
        fit = _anova(y, code_matrix, levels, names, confidence, n_draws, generator)
    else:
        with one_blas_thread():
            fit = _reml(y, code_matrix, levels, names, confidence, n_boot, generator)
    if fit is None:
        return empty()
    sources, arrays, totals = fit
    return _result(
        sources,
        arrays,
        totals,
        use,
        len(y),
        n_levels,
        confidence,
        interval_text(use, n_draws, n_boot),
    )
