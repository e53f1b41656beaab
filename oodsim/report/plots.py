"""PNG plots (matplotlib Agg) of evaluation results: each method's mean and interval (a forest
plot), score distributions and running means; win probabilities and the seeds needed to
separate two methods are :mod:`oodsim.report.decisions`.

Every function takes the results Dataset (``score`` over seed × method × metric × severity
[× ood, model, dataset]) and draws one panel per combination of the dims other than seed and
method, so the same code serves open-set runs (severity "all") and severity sweeps. Plots rank
detectors, so they show OOD metrics only: ``accuracy`` is the classifier's, the same for every
detector of a seed, and appears once, in ``summary.md``. A method has the same colour, marker and
line style in every figure (:func:`oodsim.report.figures.method_styles`), and every metric axis
says which way is better.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator
from scipy import stats as sps

from oodsim.metrics import metric_range
from oodsim.report.figures import (
    legend,
    limits,
    markevery,
    method_styles,
    metric_label,
    panels,
    require_ood,
    save,
    suptitle,
)
from oodsim.report.tables import interval_name
from oodsim.results.access import (
    at_metrics,
    default_metric,
    method_names,
    metrics_of,
    ood_metrics,
    select_metric,
)
from oodsim.stats import (
    StopDecision,
    as_score,
    estimate,
    higher_is_better,
    running_interval,
)

#: Points of a density curve.
_GRID = 256


#: Fewer seeds per method than this are drawn as points, not as a kernel density.
_MIN_DENSITY_SEEDS = 5


#: The running-mean plot draws an interval only from this many seeds on (a 2-seed t interval
#: spans most of the metric's range and hides every difference).
_MIN_INTERVAL_SEEDS = 3


def _draw_forest(
    ax: Axes, cell: xr.Dataset, metric: str, styles: dict[str, dict[str, Any]]
) -> None:
    """Each method's mean (marker) and interval (line), one row per method from the best mean
    at the top to the worst (by the metric's direction); methods without a mean last."""
    mean, lower, upper = (cell[v].transpose("method").values for v in ("mean", "lower", "upper"))
    rank = -mean if higher_is_better(metric) else mean
    order = np.argsort(np.where(np.isfinite(rank), rank, np.inf), kind="stable")
    methods = method_names(cell)
    for row, i in enumerate(order):
        style = styles[methods[i]]
        ax.plot([lower[i], upper[i]], [row, row], color=style["color"], linewidth=2)
        ax.plot(mean[i], row, marker=style["marker"], color=style["color"], markersize=7)
    ax.set_yticks(range(len(methods)), [methods[i] for i in order], fontsize=8)
    ax.set_ylim(len(methods) - 0.5, -0.5)
    ax.set_xlim(*limits([mean, lower, upper], metric_range(metric)))
    ax.set_xlabel(metric_label(metric))
    ax.grid(axis="x", alpha=0.3)


def plot_forest(
    results: xr.Dataset | xr.DataArray,
    path: str | Path,
    metrics: str | Sequence[str] | None = None,
    confidence: float = 0.95,
) -> Path:
    """Forest plot: each method's mean over seeds and its interval
    (:func:`oodsim.stats.estimate`), methods sorted best first, one panel per OOD metric (and
    per ood / dataset / model / severity label); the axis label says which way is better.
    ``metrics``: default every OOD metric; ``accuracy`` (the same for every detector) raises
    ValueError."""
    score = as_score(results)
    names = metrics_of(score, metrics) if metrics is not None else ood_metrics(score)
    if not names:
        raise ValueError("results have no OOD metric to plot")
    require_ood(score, names, "a forest plot")
    est = at_metrics(estimate(results, confidence=confidence), names)
    styles = method_styles(method_names(score))
    fig, _ = panels(
        est["mean"],
        ("method",),
        lambda ax, labels, cell: _draw_forest(ax, est.sel(labels), str(labels["metric"]), styles),
        title=names[0],
        height=1.3 + 0.28 * len(styles),
    )
    legend(fig, styles)
    none = " (one seed: no interval)" if int(est["n"].max()) < 2 else ""
    suptitle(fig, f"Mean over seeds [{interval_name(est)}], best method first{none}")
    return save(fig, path)


def _density(values: np.ndarray, grid: np.ndarray) -> np.ndarray | None:
    """Gaussian kernel density of ``values`` on ``grid``; None when there is none (one value,
    constant values)."""
    if values.size < 2:
        return None
    try:
        density = sps.gaussian_kde(values)(grid)
    except (np.linalg.LinAlgError, ValueError):
        return None
    return density if np.all(np.isfinite(density)) else None


def _draw_seeds(ax: Axes, cell: xr.DataArray, styles: dict[str, dict[str, Any]]) -> None:
    """Too few seeds for a density: one row per method, a marker per seed, a bar at the mean."""
    values = cell.transpose("seed", "method").values
    methods = method_names(cell)
    for i, (method, column) in enumerate(zip(methods, values.T, strict=True)):
        v = column[np.isfinite(column)]
        style = styles[method]
        ax.plot(
            v, np.full(v.size, i), linestyle="none", marker=style["marker"], color=style["color"]
        )
        if v.size:
            ax.plot([v.mean()] * 2, [i - 0.35, i + 0.35], color=style["color"], linewidth=2)
    ax.set_yticks(range(len(methods)), methods, fontsize=8)
    ax.set_ylim(len(methods) - 0.5, -0.5)
    ax.set_xlim(*limits([values], None))  # a margin past the range keeps markers whole
    ax.set_xlabel(f"{metric_label(str(cell['metric'].item()))}; markers: seeds, bars: means")
    ax.grid(axis="x", alpha=0.3)


def _draw_densities(ax: Axes, cell: xr.DataArray, styles: dict[str, dict[str, Any]]) -> None:
    """One density curve (a vertical line when there is no density) and a rug per method;
    with fewer than :data:`_MIN_DENSITY_SEEDS` seeds per method, the seeds themselves."""
    if np.isfinite(cell.values).sum(axis=cell.dims.index("seed")).max() < _MIN_DENSITY_SEEDS:
        _draw_seeds(ax, cell, styles)
        return
    name = str(cell["metric"].item())
    values = cell.transpose("seed", "method").values
    lo, hi = limits([values], None)
    pad = (hi - lo) * 0.25
    bounds = metric_range(name) or (-np.inf, np.inf)
    grid = np.linspace(max(lo - pad, bounds[0]), min(hi + pad, bounds[1]), _GRID)
    for i, (method, column) in enumerate(zip(method_names(cell), values.T, strict=True)):
        style = styles[method]
        v = column[np.isfinite(column)]
        if v.size == 0:
            continue
        density = _density(v, grid)
        if density is None:
            ax.axvline(v.mean(), color=style["color"], linestyle=style["linestyle"])
        else:
            ax.plot(grid, density, markevery=markevery(i, _GRID), markersize=4, **style)
        ax.plot(v, np.zeros_like(v), "|", color=style["color"], alpha=0.5, markersize=8)
    ax.set_xlim(grid[0], grid[-1])
    ax.set_xlabel(metric_label(name))
    ax.set_ylabel("density")


def plot_distributions(
    results: xr.Dataset | xr.DataArray, path: str | Path, metric: str | Sequence[str] | None = None
) -> Path:
    """Kernel density of the score over seeds, one curve per method and one panel per OOD
    metric (and per ood / dataset / model / severity label); constant or single-seed methods
    are a vertical line, a rug marks the seeds, and with fewer than five seeds per method the
    panel shows the seeds and their mean instead. ``accuracy`` (the same for every detector) is
    left out; asking for it raises ValueError."""
    score = as_score(results)
    names = metrics_of(score, metric) if metric is not None else ood_metrics(score)
    if not names:
        raise ValueError("results have no OOD metric to plot")
    require_ood(score, names, "a distribution plot")
    styles = method_styles(method_names(score))
    fig, _ = panels(
        at_metrics(score, names),
        ("seed", "method"),
        lambda ax, labels, cell: _draw_densities(ax, cell, styles),
        title=names[0],
    )
    legend(fig, styles)
    suptitle(fig, "Score distribution over seeds")
    return save(fig, path)


def _draw_band(
    ax: Axes,
    n: np.ndarray,
    mean: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    color: Any,
    dodge: float,
    alpha: float,
) -> None:
    """An interval along the seeds: a shaded band, or an error bar (moved ``dodge`` seeds
    sideways, so the bars of several methods stay apart) when it has one point."""
    if n.size == 1:
        yerr = [mean - lower, upper - mean]
        ax.errorbar(n + dodge, mean, yerr=yerr, color=color, capsize=3, linestyle="none")
    elif n.size > 1:
        ax.fill_between(n, lower, upper, color=color, alpha=alpha, linewidth=0)


def _draw_running_mean(
    ax: Axes,
    cell: xr.DataArray,
    styles: dict[str, dict[str, Any]],
    bounds: tuple[float, float] | None,
    confidence: float,
) -> None:
    """Each method's running mean, its interval from :data:`_MIN_INTERVAL_SEEDS` seeds on, and
    y-limits that fit what is drawn (inside the metric's range)."""
    values = cell.transpose("seed", "method").values
    alpha = max(0.06, min(0.2, 0.6 / values.shape[1]))  # overlapping bands stay see-through
    drawn = []
    for i, (method, column) in enumerate(zip(method_names(cell), values.T, strict=True)):
        n, mean, lower, upper = running_interval(column, confidence, value_range=bounds)
        if n.size == 0:
            continue
        style = styles[method]
        ax.plot(n, mean, markevery=markevery(i, n.size), markersize=4, **style)
        shown = n >= _MIN_INTERVAL_SEEDS
        if bounds is not None:
            lower, upper = np.clip(lower, *bounds), np.clip(upper, *bounds)
        dodge = 0.04 * (i - (values.shape[1] - 1) / 2)
        band = (n[shown], mean[shown], lower[shown], upper[shown])
        _draw_band(ax, *band, style["color"], dodge, alpha)
        drawn += [mean, lower[shown], upper[shown]]
    ax.set_ylim(*limits(drawn, bounds))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)


def plot_running_mean(
    results: xr.Dataset | xr.DataArray,
    path: str | Path,
    metric: str | None = None,
    confidence: float = 0.95,
) -> Path:
    """Running mean against the number of seeds, per method, in seed order, with its interval
    (:func:`oodsim.stats.running_interval`, inside the metric's range) from three seeds on; a
    dashed line marks the stopping point recorded in ``attrs["stopping"]``. Only OOD metrics
    (``accuracy`` raises ValueError)."""
    score = as_score(results)
    metric = metric or default_metric(score)
    require_ood(score, [metric], "a running-mean plot")
    styles = method_styles(method_names(score))
    bounds = metric_range(metric)
    decision = StopDecision.recorded(results)

    def draw(ax: Axes, labels: dict[str, object], cell: xr.DataArray) -> None:
        _draw_running_mean(ax, cell, styles, bounds, confidence)
        if decision is not None:
            ax.axvline(decision.n_seeds, color="k", linestyle="--")
        ax.set_xlabel("number of seeds")
        ax.set_ylabel(f"running mean {metric_label(metric)}")

    cells = select_metric(score, metric)
    fig, _ = panels(cells, ("seed", "method"), draw, width=5.4, height=4.0)
    extra = []
    if score.sizes["seed"] >= _MIN_INTERVAL_SEEDS:
        label = f"{confidence:.0%} interval (n ≥ {_MIN_INTERVAL_SEEDS})"
        extra.append(Patch(facecolor="0.5", alpha=0.3, label=label))
    if decision is not None:
        label = f"stop ({decision.rule}, n={decision.n_seeds})"
        extra.append(Line2D([], [], color="k", linestyle="--", label=label))
    legend(fig, styles, extra)
    suptitle(fig, f"Running mean of {metric} over the seeds, in seed order")
    return save(fig, path)
