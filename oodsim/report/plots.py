"""PNG plots (matplotlib Agg) of evaluation results: each method's mean and interval (a forest
plot), score distributions, win probabilities, seeds needed to separate two methods, running
means.

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
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LogNorm
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator
from scipy import stats as sps

from oodsim.metrics import metric_range
from oodsim.report._common import default_metric, method_names, stop_decision
from oodsim.report.figures import (
    direction,
    ink,
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
from oodsim.report.tables import interval_name, win_intervals
from oodsim.stats import (
    PAIRING_LABELS,
    PAIRINGS,
    as_score,
    estimate,
    higher_is_better,
    required_simulations_table,
    running_interval,
)
from oodsim.stats._common import metrics_of, ood_metrics, select_metric

#: Points of a density curve.
_GRID = 256

#: Cells of the required-simulations heatmap that no number of the seeds separates.
_NOT_SEPARATED = "#c8c8c8"

#: Fewer seeds per method than this are drawn as points, not as a kernel density.
_MIN_DENSITY_SEEDS = 5

#: The required-simulations heatmap has a colour bar only with more seeds than this (a scale
#: from 2 to 3 seeds tells nothing the numbers in the cells do not).
_MIN_COLOURBAR_SEEDS = 3

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
    est = estimate(results, confidence=confidence).sel(metric=names)
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
        score.sel(metric=names),
        ("seed", "method"),
        lambda ax, labels, cell: _draw_densities(ax, cell, styles),
        title=names[0],
    )
    legend(fig, styles)
    suptitle(fig, "Score distribution over seeds")
    return save(fig, path)


def plot_win_probability(
    results: xr.Dataset | xr.DataArray,
    path: str | Path,
    metric: str | None = None,
    k: int = 5,
    n_draws: int = 10_000,
    rng: np.random.Generator | int | None = 0,
    pairing: str = "both",
    *,
    n_boot: int = 400,
    wins: xr.Dataset | None = None,
) -> Path:
    """Bar chart of the probability that each method has the best mean over ``k`` seeds, with
    its bootstrap interval over the seeds as an error bar
    (:func:`oodsim.stats.win.win_probability_intervals`; the replicates get
    ``min(1000, n_draws)`` draws). ``pairing="both"`` (default) draws two bars per method,
    independent (hatched) and paired (solid), side by side; ``"independent"`` or ``"paired"``
    one. Every bar is labelled, a positive probability below 0.005 as ``<0.01``. Only OOD
    metrics: ``accuracy`` is the same for every detector and raises ValueError. ``wins``:
    intervals computed already (e.g. for the report's table, which then shows the same
    numbers), with ``metric`` among them."""
    if pairing != "both" and pairing not in PAIRINGS:
        raise ValueError(f"pairing must be 'both' or one of {', '.join(PAIRINGS)}, got {pairing!r}")
    pairings = PAIRINGS if pairing == "both" else (pairing,)
    score = as_score(results)
    metric = metric or default_metric(score)
    require_ood(score, [metric], "a win-probability plot")
    if wins is None:
        wins = win_intervals(results, metric, k, n_draws, rng, pairings, n_boot)
    elif "metric" in wins.dims:
        wins = wins.sel({"metric": metric})
    styles = method_styles(method_names(score))
    width_of = 0.8 / len(pairings)

    def draw(ax: Axes, labels: dict[str, object], cell: xr.DataArray) -> None:
        methods = method_names(cell)
        x = np.arange(len(methods))
        for q, p in enumerate(pairings):
            w = wins.sel({**labels, "pairing": p})
            value = w["win_probability"].values
            spread = np.stack([value - w["lower"].values, w["upper"].values - value])
            bars = ax.bar(
                x + (q - (len(pairings) - 1) / 2) * width_of,
                value,
                width=width_of,
                color=[styles[m]["color"] for m in methods],
                edgecolor="k",
                linewidth=0.5,
                hatch=_HATCH[p] if len(pairings) > 1 else None,
                yerr=np.clip(np.nan_to_num(spread), 0, None),
                error_kw={"elinewidth": 0.7, "capsize": 1.5, "ecolor": "0.25"},
            )
            top = np.fmax(np.nan_to_num(value), np.nan_to_num(w["upper"].values))
            rotation = 90 if len(pairings) > 1 else 0
            for xi, yi, v in zip(bars_x(bars), top, value, strict=True):
                ax.annotate(
                    _bar_text(v),
                    (xi, yi),
                    xytext=(0, 2),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=6,
                    rotation=rotation,
                )
        ax.set_xticks(x, methods, rotation=45, ha="right", fontsize=8)
        ax.set_ylim(0, 1.18)
        ax.set_ylabel(f"P(best mean {metric}; {direction(metric)})", fontsize=8)

    wp = wins["win_probability"].sel(pairing=pairings[0], drop=True)
    width = max(4.8, 1.2 + (0.42 + 0.2 * (len(pairings) - 1)) * wp.sizes["method"])
    fig, _ = panels(wp, ("method",), draw, width=width, height=4.0)
    if len(pairings) > 1:
        handles = [
            Patch(
                facecolor="white",
                edgecolor="k",
                hatch=_HATCH[p],
                label=PAIRING_LABELS[p].replace("k seeds", f"{k} seeds"),
            )
            for p in pairings
        ]
        fig.legend(handles=handles, loc="outside lower center", fontsize=8, frameon=False)
    drawn = (
        ""
        if len(pairings) > 1
        else f"{PAIRING_LABELS[pairings[0]].replace('k seeds', f'{k} seeds')}; "
    )
    suptitle(
        fig,
        f"Probability of the best mean {metric} in a {k}-seed experiment "
        f"({drawn}{n_draws} draws; error bars: {wins.attrs['confidence']:.0%} bootstrap interval "
        f"over the {score.sizes['seed']} seeds)",
    )
    return save(fig, path)


def bars_x(bars: Any) -> list[float]:
    """The centre of each bar of a bar container."""
    return [b.get_x() + b.get_width() / 2 for b in bars]


#: How a win-probability bar shows its pairing when both are drawn.
_HATCH = {"independent": "////", "paired": ""}


def _bar_text(value: float) -> str:
    """A bar's label: two decimals, ``<0.01`` for a positive value that would read 0.00."""
    if not np.isfinite(value):
        return ""
    return "<0.01" if 0 < value < 0.005 else f"{value:.2f}"


def _colorbar_ticks(norm: LogNorm) -> list[int]:
    """Whole numbers of seeds for a logarithmic colour bar: 1-2-5 steps and its ends."""
    steps = [s * 10**e for e in range(6) for s in (1, 2, 5)]
    inside = [s for s in steps if norm.vmin < s < norm.vmax]
    return [int(norm.vmin), *inside, int(norm.vmax)]


def _draw_heatmap(ax: Axes, cell: xr.DataArray, cmap: Any, norm: LogNorm, n_seeds: int) -> None:
    """Seeds needed per pair, ``>n`` on the not-separated colour, a blank diagonal."""
    values = cell.transpose("method", "versus").values
    ax.imshow(np.ma.masked_invalid(values), cmap=cmap, norm=norm, aspect="equal")
    for (i, j), value in np.ndenumerate(values):
        if i == j:
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="white", edgecolor="none"))
        elif np.isfinite(value):
            colour = ink(cmap(norm(value)))
            ax.text(j, i, f"{int(value)}", ha="center", va="center", fontsize=8, color=colour)
        else:
            ax.text(j, i, f">{n_seeds}", ha="center", va="center", fontsize=6, color="0.25")
    methods = method_names(cell)
    ax.set_xticks(range(len(methods)), methods, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(methods)), methods, fontsize=8)


def plot_required_simulations(
    results: xr.Dataset | xr.DataArray,
    path: str | Path,
    metric: str | None = None,
    alpha: float = 0.05,
    test: str = "welch",
) -> Path:
    """Heatmap of the seeds a two-sided test needs to separate each pair of methods, with a
    colour bar from four seeds on (below, the numbers in the cells alone); pairs not separated
    within the available seeds get their own grey (marked ``>n``), the diagonal stays blank.
    Only OOD metrics (``accuracy`` raises ValueError)."""
    score = as_score(results)
    metric = metric or default_metric(score)
    require_ood(score, [metric], "a required-simulations plot")
    table = required_simulations_table(results, metric, alpha=alpha, test=test)
    n_seeds, m = score.sizes["seed"], table.sizes["method"]
    cmap = colormaps["viridis_r"].with_extremes(bad=_NOT_SEPARATED)
    norm = LogNorm(vmin=2, vmax=max(n_seeds, 3))
    fig, axes = panels(
        table,
        ("method", "versus"),
        lambda ax, labels, cell: _draw_heatmap(ax, cell, cmap, norm, n_seeds),
        width=1.8 + 0.5 * m,
        height=1.4 + 0.5 * m,
    )
    if n_seeds > _MIN_COLOURBAR_SEEDS:  # a scale of 2-3 seeds says nothing the cells do not
        bar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=axes, shrink=0.8)
        bar.set_ticks(_colorbar_ticks(norm), labels=[str(t) for t in _colorbar_ticks(norm)])
        bar.minorticks_off()
        bar.set_label("seeds needed")
    keys = [
        Patch(facecolor=_NOT_SEPARATED, edgecolor="0.5", label=f"not separated in {n_seeds} seeds"),
        Patch(facecolor="white", edgecolor="0.5", label="diagonal: a method against itself"),
    ]
    fig.legend(handles=keys, loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    suptitle(
        fig,
        f"Seeds until a two-sided {test} test separates two methods ({metric_label(metric)}, "
        f"alpha={alpha:g})",
    )
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
    decision = stop_decision(results)

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
