"""The figures a reader decides with (PNG, matplotlib Agg): the probability that each method wins
a k-seed paper, and how many simulations separate two methods; like every plot, one panel per
combination of the dims other than seed and method, OOD metrics only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LogNorm, to_rgba
from matplotlib.patches import Patch, Rectangle

from oodsim.report.figures import (
    direction,
    ink,
    metric_label,
    panels,
    require_ood,
    save,
    suptitle,
)
from oodsim.report.styles import method_detectors, method_styles
from oodsim.report.tables import win_intervals
from oodsim.results.access import default_metric, method_names, n_scored
from oodsim.stats import (
    PAIRING_LABELS,
    PAIRINGS,
    as_score,
    required_simulations_table,
)

#: Cells of the required-simulations heatmap that no number of the seeds separates.
_NOT_SEPARATED = "#c8c8c8"


#: The required-simulations heatmap has a colour bar only with more seeds than this (a scale
#: from 2 to 3 seeds tells nothing the numbers in the cells do not).
_MIN_COLOURBAR_SEEDS = 3


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
    """Horizontal bars of the probability that each method has the best mean over ``k`` seeds,
    one row per method (the likeliest winner at the top), with its bootstrap interval over the
    seeds as an error bar (:func:`oodsim.stats.win.win_probability_intervals`; the replicates
    get ``min(1000, n_draws)`` draws). ``pairing="both"`` (default) draws two bars per method,
    independent (hatched, light) above paired (solid); ``"independent"`` or ``"paired"`` one.
    Every bar is labelled right of its error bar, a positive probability below 0.005 as
    ``<0.01``. Only OOD metrics: ``accuracy`` is the same for every detector and raises
    ValueError. ``wins``: intervals computed already (e.g. for the report's table, which then
    shows the same numbers), with ``metric`` among them."""
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
    styles = method_styles(method_names(score), method_detectors(results))

    def draw(ax: Axes, labels: dict[str, object], cell: xr.DataArray) -> None:
        _draw_wins(ax, wins.sel(labels), pairings, styles)
        ax.set_xlabel(f"P(best mean {metric}; {direction(metric)})", fontsize=8)

    wp = wins["win_probability"].sel(pairing=pairings[0], drop=True)
    rows = wp.sizes["method"] * (0.12 + 0.18 * len(pairings))
    fig, _ = panels(wp, ("method",), draw, width=5.4, height=1.4 + rows)
    if len(pairings) > 1:
        handles = [
            Patch(**_bar_look(p, "0.4"), label=PAIRING_LABELS[p].replace("k seeds", f"{k} seeds"))
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
        f"over the {n_scored(score)} scored seeds)",
    )
    return save(fig, path)


def _bar_look(pairing: str, colour: Any) -> dict[str, Any]:
    """How a win-probability bar of ``pairing`` looks in its method's colour when both
    pairings are drawn: independent draws hatched on a light face, paired draws solid."""
    if pairing == "independent":
        return {"facecolor": to_rgba(colour, 0.3), "edgecolor": colour, "hatch": "////"}
    return {"facecolor": colour, "edgecolor": "k"}


def _draw_wins(
    ax: Axes, cell: xr.Dataset, pairings: tuple[str, ...], styles: dict[str, dict[str, Any]]
) -> None:
    """One row per method, the likeliest winner (over the pairings drawn) at the top; a bar
    per pairing with its interval and its value right of the error bar."""
    probability = cell["win_probability"].sel(pairing=list(pairings)).mean("pairing").values
    methods = method_names(cell)
    order = np.argsort(-np.nan_to_num(probability, nan=-1.0), kind="stable")
    colours = [styles[methods[i]]["color"] for i in order]
    height = 0.8 / len(pairings)
    for q, p in enumerate(pairings):
        w = cell.sel({"pairing": p})
        value, upper = w["win_probability"].values[order], w["upper"].values[order]
        spread = np.stack([value - w["lower"].values[order], upper - value])
        y = np.arange(len(methods)) + (q - (len(pairings) - 1) / 2) * height
        for yi, v, colour in zip(y, value, colours, strict=True):
            look = _bar_look(p, colour) if len(pairings) > 1 else {"color": colour}
            ax.barh(yi, v, height=height, linewidth=0.6, **look)
        xerr = np.clip(np.nan_to_num(spread), 0, None)
        ax.errorbar(value, y, xerr=xerr, fmt="none", elinewidth=0.8, capsize=2, ecolor="0.2")
        ends = np.fmax(np.nan_to_num(value), np.nan_to_num(upper))
        for yi, v, end in zip(y, value, ends, strict=True):
            ax.annotate(
                _bar_text(v),
                (end, yi),
                xytext=(3, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
            )
    ax.set_yticks(range(len(methods)), [methods[i] for i in order], fontsize=8)
    ax.set_ylim(len(methods) - 0.5, -0.5)
    ax.set_xlim(0, 1.15)
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
    ax.grid(axis="x", alpha=0.3)


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
            ax.text(j, i, f">{n_seeds}", ha="center", va="center", fontsize=7.5, color="0.25")
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
