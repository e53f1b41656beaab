"""PNG plots (matplotlib Agg) of evaluation results: each method's mean and interval (a forest
plot), score distributions (one row per method) and running means (the best few methods in
colour, the others grey behind them); win probabilities and the seeds needed to separate two
methods are :mod:`oodsim.report.decisions`.

Every function takes the results Dataset (``score`` over seed × method × metric × severity
[× ood, model, dataset]) and draws one panel per combination of the dims other than seed and
method, so the same code serves open-set runs (severity "all") and severity sweeps. Plots rank
detectors, so they show OOD metrics only: ``accuracy`` is the classifier's, the same for every
detector of a seed, and appears once, in ``summary.md``. A method has the same colour, marker and
line style in every figure of every report (:func:`oodsim.report.styles.method_style`), and every
metric axis says which way is better.
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

from oodsim.metrics import metric_range
from oodsim.report.figures import (
    BEST_FEW,
    CONTEXT_STYLE,
    MAX_COLOURED,
    best_few,
    legend,
    limits,
    markevery,
    metric_label,
    panels,
    require_ood,
    save,
    suptitle,
)
from oodsim.report.styles import method_detectors, method_styles
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
    detectors = method_detectors(results)
    styles = method_styles(method_names(score), detectors)
    fig, _ = panels(
        est["mean"],
        ("method",),
        lambda ax, labels, cell: _draw_forest(ax, est.sel(labels), str(labels["metric"]), styles),
        title=names[0],
        height=1.3 + 0.28 * len(styles),
    )
    legend(fig, styles, detectors=detectors)
    none = " (one seed: no interval)" if int(est["n"].max()) < 2 else ""
    suptitle(fig, f"Mean over seeds [{interval_name(est)}], best method first{none}")
    return save(fig, path)


def _density(values: np.ndarray, grid: np.ndarray) -> np.ndarray | None:
    """Gaussian kernel density of ``values`` on ``grid`` with Scott's bandwidth (what
    ``scipy.stats.gaussian_kde(values)(grid)`` gives, without its set-up per call); None when
    there is none (one value, constant values)."""
    if values.size < 2:
        return None
    width = float(np.std(values, ddof=1)) * values.size ** (-1 / 5)
    if not np.isfinite(width) or width <= 0:
        return None
    z = (grid[:, None] - values[None, :]) / width
    density = np.exp(-0.5 * z**2).mean(axis=1) / (width * np.sqrt(2 * np.pi))
    return density if np.all(np.isfinite(density)) else None


#: The height of a method's density in its row of the distribution plot (rows are 1 apart).
_RIDGE = 0.85


def _rows(ax: Axes, methods: list[str], xlabel: str) -> None:
    """One row per method, the first at the top, named on the y axis."""
    ax.set_yticks(range(len(methods)), methods, fontsize=8)
    ax.set_ylim(len(methods) - 0.6, -0.95)
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)


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
    ax.set_xlim(*limits([values], None))  # a margin past the range keeps markers whole
    _rows(ax, methods, metric_label(str(cell["metric"].item())))


def _draw_densities(ax: Axes, cell: xr.DataArray, styles: dict[str, dict[str, Any]]) -> bool:
    """One row per method: its density over the seeds (a vertical bar when there is none),
    a tick per seed and its marker at the mean; with fewer than :data:`_MIN_DENSITY_SEEDS`
    seeds per method, the seeds themselves (then it returns True)."""
    if np.isfinite(cell.values).sum(axis=cell.dims.index("seed")).max() < _MIN_DENSITY_SEEDS:
        _draw_seeds(ax, cell, styles)
        return True
    name = str(cell["metric"].item())
    values = cell.transpose("seed", "method").values
    lo, hi = limits([values], None)
    pad = (hi - lo) * 0.25
    bounds = metric_range(name) or (-np.inf, np.inf)
    grid = np.linspace(max(lo - pad, bounds[0]), min(hi + pad, bounds[1]), _GRID)
    methods = method_names(cell)
    for i, (method, column) in enumerate(zip(methods, values.T, strict=True)):
        colour = styles[method]["color"]
        v = column[np.isfinite(column)]
        if v.size == 0:
            continue
        density = _density(v, grid)
        if density is None:
            ax.plot([v.mean()] * 2, [i, i - _RIDGE], color=colour, linewidth=2)
        else:
            ridge = i - _RIDGE * density / density.max()
            ax.fill_between(grid, i, ridge, color=colour, alpha=0.3, linewidth=0)
            ax.plot(grid, ridge, color=colour, linewidth=1.2)
        ax.plot(v, np.full(v.size, i), "|", color=colour, alpha=0.6, markersize=6)
        mean = {"marker": styles[method]["marker"], "color": colour, "markeredgecolor": "k"}
        ax.plot(v.mean(), i, linestyle="none", markersize=6, **mean)
    ax.set_xlim(grid[0], grid[-1])
    _rows(ax, methods, metric_label(name))
    return False


def plot_distributions(
    results: xr.Dataset | xr.DataArray, path: str | Path, metric: str | Sequence[str] | None = None
) -> Path:
    """Kernel density of the score over seeds, one row per method (its density scaled to the
    row, a tick per seed, its marker at the mean) and one panel per OOD metric (and per ood /
    dataset / model / severity label); a constant or single-seed method is a vertical bar, and
    with fewer than five seeds per method the panel shows the seeds and their mean instead.
    ``accuracy`` (the same for every detector) is left out; asking for it raises ValueError."""
    score = as_score(results)
    names = metrics_of(score, metric) if metric is not None else ood_metrics(score)
    if not names:
        raise ValueError("results have no OOD metric to plot")
    require_ood(score, names, "a distribution plot")
    detectors = method_detectors(results)
    styles = method_styles(method_names(score), detectors)
    seeds_drawn: set[bool] = set()
    fig, _ = panels(
        at_metrics(score, names),
        ("seed", "method"),
        lambda ax, labels, cell: seeds_drawn.add(_draw_densities(ax, cell, styles)),
        title=names[0],
        height=1.3 + 0.3 * len(styles),
    )
    legend(fig, styles, detectors=detectors)
    how = {
        False: "a density per method (ticks: seeds, marker: the mean)",
        True: f"fewer than {_MIN_DENSITY_SEEDS} seeds per method: markers are seeds, bars means",
    }
    drawn = "; ".join(how[few] for few in sorted(seeds_drawn))
    suptitle(fig, f"Score distribution over seeds: {drawn}")
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
    metric: str,
    confidence: float,
) -> list[str]:
    """Each method's running mean; the best few by their final mean
    (:func:`~oodsim.report.figures.best_few`) in colour with their interval from
    :data:`_MIN_INTERVAL_SEEDS` seeds on, the others grey behind them; y-limits that fit what is
    drawn (inside the metric's range). Returns the methods drawn in colour."""
    bounds = metric_range(metric)
    values = cell.transpose("seed", "method").values
    curves = {
        method: running_interval(column, confidence, value_range=bounds)
        for method, column in zip(method_names(cell), values.T, strict=True)
    }
    final = {m: float(c[1][-1]) if c[0].size else np.nan for m, c in curves.items()}
    coloured = best_few(final, metric)
    drawn = []
    for method, (n, mean, _, _) in curves.items():
        if method not in coloured and n.size:
            ax.plot(n, mean, zorder=1, **CONTEXT_STYLE)
            drawn.append(mean)
    alpha = max(0.08, min(0.2, 0.6 / len(coloured))) if coloured else 0.2
    for i, method in enumerate(coloured):
        n, mean, lower, upper = curves[method]
        if n.size == 0:
            continue
        style = styles[method]
        ax.plot(n, mean, markevery=markevery(i, n.size), markersize=4, zorder=3, **style)
        shown = n >= _MIN_INTERVAL_SEEDS
        if bounds is not None:
            lower, upper = np.clip(lower, *bounds), np.clip(upper, *bounds)
        dodge = 0.04 * (i - (len(coloured) - 1) / 2)
        band = (n[shown], mean[shown], lower[shown], upper[shown])
        _draw_band(ax, *band, style["color"], dodge, alpha)
        drawn += [mean, lower[shown], upper[shown]]
    ax.set_ylim(*limits(drawn, bounds))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    return coloured


def plot_running_mean(
    results: xr.Dataset | xr.DataArray,
    path: str | Path,
    metric: str | None = None,
    confidence: float = 0.95,
) -> Path:
    """Running mean against the number of seeds, per method, in seed order, with its interval
    (:func:`oodsim.stats.running_interval`, inside the metric's range) from three seeds on; a
    dashed line marks the stopping point recorded in ``attrs["stopping"]``. With more than
    five methods, each panel draws its best four by the final mean in colour and the others as
    grey lines behind them. Only OOD metrics (``accuracy`` raises ValueError)."""
    score = as_score(results)
    metric = metric or default_metric(score)
    require_ood(score, [metric], "a running-mean plot")
    detectors = method_detectors(results)
    styles = method_styles(method_names(score), detectors)
    decision = StopDecision.recorded(results)
    coloured: set[str] = set()

    def draw(ax: Axes, labels: dict[str, object], cell: xr.DataArray) -> None:
        coloured.update(_draw_running_mean(ax, cell, styles, metric, confidence))
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
    legend(fig, styles, extra, detectors=detectors, shown=coloured)
    few = (
        f"; the best {BEST_FEW} by the final mean in colour, the others grey"
        if len(styles) > MAX_COLOURED
        else ""
    )
    suptitle(fig, f"Running mean of {metric} over the seeds, in seed order{few}")
    return save(fig, path)
