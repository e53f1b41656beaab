"""Sources of variance, one way: how much of the spread comes from the class split (paper, 4.1).

The crossed design over several streams is :mod:`oodsim.stats.crossed`."""

from __future__ import annotations

import numpy as np
import xarray as xr

from oodsim.results.access import iter_cells
from oodsim.results.select import score_view
from oodsim.stats.checks import check_alpha, check_dim, check_levels

#: Keys of :func:`one_way_anova`, in the order the xarray wrapper stores them.
COMPONENT_KEYS: tuple[str, ...] = (
    "sigma2_between",
    "sigma2_between_lower",
    "sigma2_between_upper",
    "sigma2_within",
    "sigma2_within_lower",
    "sigma2_within_upper",
    "icc",
    "icc_lower",
    "icc_upper",
    "sigma2_between_raw",
    "f",
    "p_value",
    "df_between",
    "df_within",
    "n0",
    "n_groups",
    "n",
)


def one_way_anova(
    values: np.ndarray, groups: np.ndarray, confidence: float = 0.95
) -> dict[str, float]:
    """One-way random-effects ANOVA of ``values`` grouped by ``groups`` (unbalanced allowed).

    Model: y_ij = mu + b_i + e_ij with b_i ~ (0, sigma2_between) per group (e.g. class split)
    and e_ij ~ (0, sigma2_within) per seed inside a group. Estimates are the ANOVA (method of
    moments) ones: sigma2_within = MSW, sigma2_between = (MSB - MSW) / n0 truncated at zero
    (``sigma2_between_raw`` keeps the sign), n0 = (N - sum n_i^2 / N) / (a - 1), and the
    intra-class correlation icc = sigma2_between / (sigma2_between + sigma2_within).
    ``f`` and ``p_value`` test sigma2_between = 0 (the same F as scipy.stats.f_oneway).

    Intervals (two-sided, ``confidence``): sigma2_within is exact (chi-square, N - a df);
    the ratio sigma2_between / sigma2_within has Searle's F-based interval (exact when
    balanced, with n0 otherwise), giving the icc interval and, times MSW, the sigma2_between
    interval (which ignores MSW's own uncertainty, small when N >> a). NaN seeds are dropped;
    a missing group label (NaN or None) is refused (ValueError naming ``groups``), never
    taken as a group of its own, and so is a ``confidence`` outside (0, 1).
    """
    check_alpha(confidence, "confidence")
    y = np.asarray(values, dtype=float).ravel()
    g = np.asarray(groups).ravel()
    if len(y) != len(g):
        raise ValueError(f"{len(y)} values but {len(g)} group labels")
    check_levels(g, "groups")
    keep = np.isfinite(y)
    y, g = y[keep], g[keep]
    _, inverse = np.unique(g, return_inverse=True)
    sizes = np.bincount(inverse)
    a, n = len(sizes), len(y)
    out = dict.fromkeys(COMPONENT_KEYS, float("nan"))
    out.update(n_groups=float(a), n=float(n))
    if a < 2 or n <= a:
        return out
    means = np.bincount(inverse, weights=y) / sizes
    grand = y.mean()
    ssb = float((sizes * (means - grand) ** 2).sum())
    ssw = float(((y - means[inverse]) ** 2).sum())
    df_b, df_w = a - 1, n - a
    msb, msw = ssb / df_b, ssw / df_w
    n0 = (n - (sizes**2).sum() / n) / df_b
    raw = (msb - msw) / n0
    between = max(raw, 0.0)
    q = (1.0 - confidence) / 2.0
    from scipy import stats as sps  # scipy.stats (0.5 s) loads with the first analysis

    f_upper, f_lower = sps.f.ppf(1 - q, df_b, df_w), sps.f.ppf(q, df_b, df_w)
    with np.errstate(divide="ignore", invalid="ignore"):
        # numpy's division: F is inf where the seeds agree within every group (MSW = 0, a
        # saturated metric) and differ between them, NaN where every value is one
        f = np.float64(msb) / msw
        p = float(sps.f.sf(f, df_b, df_w)) if np.isfinite(f) else (0.0 if msb > 0 else np.nan)
        total = between + msw
        icc = between / total if total > 0 else np.nan
        ratio_lo = max((f / f_upper - 1.0) / n0, 0.0)  # NaN stays NaN
        ratio_hi = max((f / f_lower - 1.0) / n0, 0.0)
    # the ratio's bounds times MSW, written so that MSW = 0 gives their limit, not inf * 0
    lower = np.nan if np.isnan(f) else max((msb / f_upper - msw) / n0, 0.0)
    upper = np.nan if np.isnan(f) else max((msb / f_lower - msw) / n0, 0.0)
    out.update(
        sigma2_between=between,
        sigma2_between_lower=lower,
        sigma2_between_upper=upper,
        sigma2_within=msw,
        sigma2_within_lower=ssw / sps.chi2.ppf(1 - q, df_w),
        sigma2_within_upper=ssw / sps.chi2.ppf(q, df_w),
        icc=icc,
        icc_lower=_icc_of_ratio(ratio_lo),
        icc_upper=_icc_of_ratio(ratio_hi),
        sigma2_between_raw=raw,
        f=float(f),
        p_value=p,
        df_between=float(df_b),
        df_within=float(df_w),
        n0=float(n0),
    )
    return {key: float(value) for key, value in out.items()}


def _icc_of_ratio(ratio: float) -> float:
    """The icc of a between/within variance ratio: 1 at an infinite ratio, NaN at NaN."""
    return 1.0 if ratio == np.inf else ratio / (1.0 + ratio)


def variance_components_table(
    results: xr.Dataset | xr.DataArray,
    group: str = "class_split",
    confidence: float = 0.95,
    dim: str = "seed",
) -> xr.Dataset:
    """:func:`one_way_anova` per cell (method, metric, severity, ...) of the results (no
    severity for results without levels: :func:`~oodsim.results.score_view`), grouping the
    seeds by the ``group`` coordinate (the seed's class split by default). ``confidence``
    must lie in (0, 1), ``dim`` be a dim of the score other than ``method`` and ``metric``,
    and every seed have a ``group`` label: ValueError naming the argument (or the coordinate
    and its seeds) otherwise."""
    check_alpha(confidence, "confidence")
    score = score_view(results)
    dim = check_dim(score, dim)
    if group not in score.coords and isinstance(results, xr.Dataset) and group in results:
        score = score.assign_coords({group: results[group]})
    if group not in score.coords:
        raise KeyError(f"results have no {group!r} coordinate to group the seeds by")
    labels = np.asarray(score[group].values)
    if score[group].dims != (dim,):
        raise ValueError(
            f"{group!r} must be a coordinate along {dim!r}, has dims {score[group].dims}"
        )
    seeds = score[dim].values.tolist()
    check_levels(labels, f"coordinate {group!r}", [f"{dim} {s}" for s in seeds])
    template = score.isel({dim: 0}, drop=True)
    arrays = {key: np.full(template.shape, np.nan) for key in COMPONENT_KEYS}
    for cell_labels, cell in iter_cells(score, (dim,)):
        index = tuple(
            int(np.flatnonzero(template[d].values == cell_labels[d])[0]) for d in template.dims
        )
        comp = one_way_anova(cell.values, labels, confidence)
        for key in COMPONENT_KEYS:
            arrays[key][index] = comp[key]
    data = {key: template.copy(data=value) for key, value in arrays.items()}
    return xr.Dataset(data, attrs={"confidence": confidence, "group": group, "dim": dim})
