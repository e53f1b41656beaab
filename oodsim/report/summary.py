"""Plots (PNG, matplotlib Agg) and Markdown / plain-text summaries of evaluation results.

Every function takes the results Dataset (``score`` over seed × method × metric × severity
[× ood, model, dataset]) and draws one panel per combination of the dims other than seed and
method, so the same code serves open-set runs (severity "all") and severity sweeps. Plots rank
detectors, so they show OOD metrics only: ``accuracy`` is the classifier's, the same for every
detector of a seed, and appears once, in ``summary.md``. A method has the same colour, marker and
line style in every figure (:func:`oodsim.report.figures.method_styles`).

:func:`write_report` writes everything into a folder of its own (``results/foo.zarr`` →
``results/foo.report``, :func:`report_folder`) marked by ``.oodsim-report.json``: it refreshes a
report of the same results and refuses any other folder unless ``overwrite=True``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
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

from oodsim.errors import OodsimError
from oodsim.metrics import metric_range
from oodsim.report.figures import (
    legend,
    limits,
    markevery,
    method_styles,
    panels,
    require_ood,
    save,
    suptitle,
)
from oodsim.results import exclusions
from oodsim.stats import (
    PAIRING_LABELS,
    PAIRINGS,
    StopDecision,
    as_score,
    estimate,
    required_simulations_table,
    running_interval,
    variance_components_table,
    win_probabilities,
)
from oodsim.stats._common import (
    cell_label,
    is_ood_metric,
    iter_cells,
    metrics_of,
    ood_metrics,
    select_metric,
)

_GRID = 256
#: write_report draws every metric's distribution only up to this many panels.
_MAX_PANELS = 24
#: write_report's figures show at most this many cells (ood × severity × model × dataset);
#: beyond, evenly spaced severity levels (severity/ has every level).
_MAX_CELLS = 12
#: The file that marks a folder as an oodsim report, and names the results it reports.
REPORT_MARKER = ".oodsim-report.json"

#: What an excluded "degenerate" seed is, in the summary.
_DEGENERATE = "degenerate (the classifier is not above chance)"
#: Cells of the required-simulations heatmap that no number of the seeds separates.
_NOT_SEPARATED = "#c8c8c8"


class ReportFolderError(OodsimError, FileExistsError):
    """A report folder that holds something other than a report of the same results."""


# ----------------------------------------------------------------------------- helpers


def _default_metric(score: xr.DataArray) -> str:
    """``auroc`` when present, else the first OOD metric (else the first metric)."""
    names = metrics_of(score, None)
    if not names:
        raise ValueError("results have no metric dimension")
    ood = ood_metrics(score)
    return "auroc" if "auroc" in names else (ood or names)[0]


def _methods(da: xr.DataArray) -> list[str]:
    return [str(m) for m in da["method"].values]


def _fmt(value: float, digits: int = 3) -> str:
    return "–" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def _render(header: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> str:
    """A Markdown table or an aligned plain-text table."""
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*row) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def _varying(da: xr.DataArray, skip: Sequence[str]) -> list[str]:
    """Dims (other than ``skip``) with more than one label: the ones worth a table column."""
    return [d for d in da.dims if d not in skip and da.sizes[d] > 1]


def _fixed_note(da: xr.DataArray, skip: Sequence[str]) -> str:
    """``"severity=all"``-style note for dims of size one, which tables leave out."""
    fixed = {d: da[d].values[0].item() for d in da.dims if d not in skip and da.sizes[d] == 1}
    return cell_label(fixed)


def _stopping(results: xr.Dataset | xr.DataArray) -> StopDecision | None:
    text = results.attrs.get("stopping")
    if not text:
        return None
    try:
        return StopDecision.from_json(text)
    except (ValueError, KeyError, TypeError):
        return None


# ----------------------------------------------------------------------------- plots

#: Fewer seeds per method than this are drawn as points, not as a kernel density.
_MIN_DENSITY_SEEDS = 5
#: The running-mean plot draws an interval only from this many seeds on (a 2-seed t interval
#: spans most of the metric's range and hides every difference).
_MIN_INTERVAL_SEEDS = 3


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
    methods = _methods(cell)
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
    ax.set_xlabel(f"{cell['metric'].item()} (markers: seeds, bars: means)")
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
    for i, (method, column) in enumerate(zip(_methods(cell), values.T, strict=True)):
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
    ax.set_xlabel(name)
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
    styles = method_styles(_methods(score))
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
    pairing: str = "independent",
) -> Path:
    """Bar chart of the probability that each method has the best mean over ``k`` seeds
    (``pairing`` as in :func:`oodsim.stats.win_probability`, named in the title). Only OOD
    metrics: ``accuracy`` is the same for every detector and raises ValueError."""
    score = as_score(results)
    metric = metric or _default_metric(score)
    require_ood(score, [metric], "a win-probability plot")
    wp = win_probabilities(results, metric, k=k, n_draws=n_draws, rng=rng, pairing=pairing)
    styles = method_styles(_methods(score))

    def draw(ax: Axes, labels: dict[str, object], cell: xr.DataArray) -> None:
        methods = _methods(cell)
        bars = ax.bar(
            range(len(methods)),
            cell.values,
            color=[styles[m]["color"] for m in methods],
            edgecolor="k",
            linewidth=0.5,
        )
        shown = [f"{v:.2f}" if v >= 0.005 else "" for v in cell.values]
        ax.bar_label(bars, labels=shown, fontsize=7, padding=1)
        ax.set_xticks(range(len(methods)), methods, rotation=45, ha="right", fontsize=8)
        ax.set_ylim(0, 1.1)
        ax.set_ylabel("P(best mean)")

    width = max(4.8, 1.2 + 0.42 * wp.sizes["method"])
    fig, _ = panels(wp, ("method",), draw, width=width, height=4.0)
    suptitle(
        fig,
        f"Probability of the best mean {metric} in a {k}-seed experiment "
        f"({PAIRING_LABELS[pairing]}, {n_draws} draws)",
    )
    return save(fig, path)


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
            r, g, b, _ = cmap(norm(value))
            ink = "k" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "w"
            ax.text(j, i, f"{int(value)}", ha="center", va="center", fontsize=8, color=ink)
        else:
            ax.text(j, i, f">{n_seeds}", ha="center", va="center", fontsize=6, color="0.25")
    methods = _methods(cell)
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
    colour bar; pairs not separated within the available seeds get their own grey (marked
    ``>n``), the diagonal stays blank. Only OOD metrics (``accuracy`` raises ValueError)."""
    score = as_score(results)
    metric = metric or _default_metric(score)
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
        f"Seeds until a two-sided {test} test separates two methods ({metric}, alpha={alpha:g})",
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
    for i, (method, column) in enumerate(zip(_methods(cell), values.T, strict=True)):
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
    metric = metric or _default_metric(score)
    require_ood(score, [metric], "a running-mean plot")
    styles = method_styles(_methods(score))
    bounds = metric_range(metric)
    decision = _stopping(results)

    def draw(ax: Axes, labels: dict[str, object], cell: xr.DataArray) -> None:
        _draw_running_mean(ax, cell, styles, bounds, confidence)
        if decision is not None:
            ax.axvline(decision.n_seeds, color="k", linestyle="--")
        ax.set_xlabel("number of seeds")
        ax.set_ylabel(f"running mean {metric}")

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


# ----------------------------------------------------------------------------- tables

_INTERVALS = {
    "t": "Student-t interval",
    "t (logit scale)": "Student-t interval on the logit scale",
    "bootstrap": "bootstrap percentile interval",
}


def _interval_name(est: xr.Dataset) -> str:
    """What :func:`oodsim.stats.estimate` computed, in words (``"95% Student-t interval"``)."""
    kind = str(est.attrs.get("interval", "t"))
    return f"{est.attrs['confidence']:.0%} {_INTERVALS.get(kind, kind + ' interval')}"


def _estimate_table(est: xr.Dataset, metrics: Sequence[str], markdown: bool, digits: int) -> str:
    """Mean [lower, upper] of ``metrics`` per method (and per varying ood / severity / ...)."""
    outer = _varying(est["mean"], ("method", "metric"))
    header = [*outer, "method", *metrics, "n"]
    rows = []
    for labels, cell in iter_cells(est["mean"], ("method", "metric")):
        for method in _methods(cell):
            where = {**labels, "method": method}
            row = [str(labels[d]) for d in outer] + [method]
            for name in metrics:
                e = est.sel({**where, "metric": name})
                row.append(
                    f"{_fmt(e['mean'].item(), digits)} "
                    f"[{_fmt(e['lower'].item(), digits)}, {_fmt(e['upper'].item(), digits)}]"
                )
            n = est["n"].sel(where)
            row.append(
                f"{int(n.min())}" if n.min() == n.max() else f"{int(n.min())}-{int(n.max())}"
            )
            rows.append(row)
    return _render(header, rows, markdown)


def format_summary_table(
    results: xr.Dataset | xr.DataArray, confidence: float = 0.95, digits: int = 3
) -> str:
    """Plain-text table of mean [confidence interval] per method × metric (rows also split
    by ood / severity / dataset / model when they vary); the CLI prints it."""
    score = as_score(results)
    note = _fixed_note(score, ("seed", "method", "metric"))
    est = estimate(results, confidence=confidence)
    title = f"Mean [{_interval_name(est)}] over {score.sizes['seed']} seeds" + (
        f" ({note})" if note else ""
    )
    table = _estimate_table(est, metrics_of(score, None), markdown=False, digits=digits)
    return title + "\n" + table


def _win_table(
    results: xr.Dataset | xr.DataArray, k: int, n_draws: int, rng: object, pairing: str
) -> str:
    """Win probabilities of every OOD metric (``accuracy`` is the same for every detector)."""
    score = as_score(results)
    wp = win_probabilities(
        results, ood_metrics(score), k=k, n_draws=n_draws, rng=rng, pairing=pairing
    )
    outer = _varying(wp, ("method", "metric"))
    metrics = metrics_of(wp, None)
    header = [*outer, "method", *metrics]
    rows = []
    for labels, cell in iter_cells(wp, ("method", "metric")):
        for method in _methods(score):
            values = [cell.sel({"method": method, "metric": name}).item() for name in metrics]
            rows.append([str(labels[d]) for d in outer] + [method] + [_fmt(v, 3) for v in values])
    return _render(header, rows, markdown=True)


def _required_table(results: xr.Dataset | xr.DataArray, metric: str, alpha: float) -> str:
    table = required_simulations_table(results, metric, alpha=alpha)
    parts = []
    for labels, cell in iter_cells(table, ("method", "versus")):
        methods = _methods(cell)
        values = cell.transpose("method", "versus").values
        rows = [
            [a] + ["" if not np.isfinite(v) else str(int(v)) for v in row]
            for a, row in zip(methods, values, strict=True)
        ]
        heading = f"*{cell_label(labels)}*\n\n" if labels else ""
        parts.append(heading + _render(["", *methods], rows, markdown=True))
    return "\n\n".join(parts)


def _variance_table(results: xr.Dataset, confidence: float) -> str | None:
    """The ANOVA table of the OOD metrics by class split; None when the split does not vary,
    a note when no split has two seeds (nothing to estimate the within-split variance from)."""
    if "class_split" not in results.coords or results["class_split"].dims != ("seed",):
        return None
    excluded = [seed for group in _exclusions(results).values() for seed, _ in group]
    used = ~np.isin(results["seed"].values, excluded)
    splits, counts = np.unique(results["class_split"].values[used], return_counts=True)
    if len(splits) < 2:
        return None
    if counts.max() < 2:
        return "Not computed: no class split has two seeds to compare within it."
    ood = ood_metrics(as_score(results))
    vc = variance_components_table(
        results.sel(metric=ood) if ood else results, confidence=confidence
    )
    outer = _varying(vc["icc"], ("method", "metric"))
    header = [*outer, "method", "metric", "sd between", "sd within", "ICC [CI]", "p (F)"]
    rows = []
    for labels, _ in iter_cells(vc["icc"], ()):
        v = vc.sel(labels)
        icc = (
            f"{_fmt(v['icc'].item(), 2)} "
            f"[{_fmt(v['icc_lower'].item(), 2)}, {_fmt(v['icc_upper'].item(), 2)}]"
        )
        rows.append(
            [str(labels[d]) for d in outer]
            + [str(labels["method"]), str(labels["metric"])]
            + [
                _fmt(np.sqrt(v["sigma2_between"].item()), 4),
                _fmt(np.sqrt(v["sigma2_within"].item()), 4),
                icc,
                f"{v['p_value'].item():.2g}",
            ]
        )
    return _render(header, rows, markdown=True)


def _win_text(
    results: xr.Dataset | xr.DataArray,
    k: int,
    n_draws: int,
    rng: object,
    pairing: str,
    ood: list[str],
) -> str:
    """The win-probability section of ``summary.md``: what was drawn, then the table."""
    score = as_score(results)
    if score.sizes["seed"] < k:
        return f"Not computed: the results have {score.sizes['seed']} seeds, fewer than k = {k}."
    if not ood:
        return "Not computed: the results have no OOD metric."
    how = {
        "independent": f"each method's {k} seeds drawn from its own seeds, as in the study",
        "paired": f"one draw of {k} seeds shared by all methods",
    }[pairing]
    skipped = [name for name in metrics_of(score, None) if name not in ood]
    note = f" {', '.join(skipped)}: left out, the same for every detector." if skipped else ""
    return (
        f"Probability that a method has the best mean in a {k}-seed experiment "
        f"({PAIRING_LABELS[pairing]}: {how}; {n_draws} draws without replacement, "
        f"ties split).{note}\n\n" + _win_table(results, k, n_draws, rng, pairing)
    )


# ----------------------------------------------------------------------------- what was run


def _seed_ranges(seeds: Iterable[int]) -> str:
    """Sorted seeds as runs of consecutive numbers: ``"0-4, 7, 9-12"``."""
    runs: list[list[int]] = []
    for seed in sorted(int(s) for s in seeds):
        if runs and seed == runs[-1][-1] + 1:
            runs[-1].append(seed)
        else:
            runs.append([seed])
    parts = [f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs]
    return ", ".join(parts)


def _exclusions(results: xr.Dataset | xr.DataArray) -> dict[str, list[tuple[int, str]]]:
    """The seeds every estimate leaves out, grouped by why, as :func:`oodsim.results.exclusions`
    gives them (``"degenerate"`` with a detail per seed, or the failure message), plus seeds
    without any score (``"no scores"``, e.g. a bare score DataArray)."""
    has_failure = isinstance(results, xr.Dataset) and "failure" in results
    groups = exclusions(results) if has_failure else {}
    listed = {seed for group in groups.values() for seed, _ in group}
    score = as_score(results)
    empty = np.isnan(score).all(dim=[d for d in score.dims if d != "seed"]).values
    for seed in score["seed"].values[empty]:
        if int(seed) not in listed:
            groups.setdefault("no scores", []).append((int(seed), ""))
    return dict(sorted(groups.items(), key=lambda item: -len(item[1])))


def _unique(names: Iterable[object]) -> list[str]:
    return list(dict.fromkeys(str(n) for n in names if n))


def _datasets(spec: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The datasets a spec reads (every ``dataset`` name, data source of kind ``dataset`` and
    data root, models' training data included) and the labels of its OOD sets."""
    names: list[object] = []

    def walk(node: object, key: str) -> None:
        if isinstance(node, dict):
            if key == "dataset" or node.get("kind") == "dataset":
                names.append(node.get("name"))
            names.extend(v for k, v in node.items() if k.endswith("_root") and k != "root")
            for child_key, child in node.items():
                walk(child, child_key)
        elif isinstance(node, list):
            for child in node:
                walk(child, key)

    walk(spec, "")
    groups = [spec, *(d for d in spec.get("datasets") or () if isinstance(d, dict))]
    oods = [o.get("label") for g in groups for o in g.get("ood") or () if isinstance(o, dict)]
    return _unique(names), _unique(oods)


def _spec_lines(results: xr.Dataset | xr.DataArray, source: str | Path | None) -> list[str]:
    """What was run: spec name, protocol and key, the results' path, the datasets."""
    attrs = results.attrs
    lines = []
    if attrs.get("spec_key") or attrs.get("experiment"):
        lines.append(
            f"- spec: `{attrs.get('experiment', '?')}` (protocol "
            f"`{attrs.get('protocol', 'open_set')}`, key `{attrs.get('spec_key', '?')}`)"
        )
    if source is not None:
        lines.append(f"- results: `{source}`")
    try:
        spec = json.loads(attrs["spec"])
    except (KeyError, TypeError, ValueError):
        return lines
    datasets, oods = _datasets(spec)
    if datasets or oods:
        ood = f"; OOD sets: {', '.join(oods)}" if oods else ""
        lines.append(f"- datasets: {', '.join(datasets) or '–'}{ood}")
    return lines


def _seed_lines(results: xr.Dataset | xr.DataArray, score: xr.DataArray) -> list[str]:
    """How many seeds, which ones, which were excluded from the estimates and why (grouped by
    reason, with each degenerate seed's accuracy), and degenerate seeds a spec chose to keep."""
    seeds = score["seed"].values
    excluded = _exclusions(results)
    n_excluded = sum(len(group) for group in excluded.values())
    head = f"- seeds: {len(seeds)} ({_seed_ranges(seeds)}); "
    lines = [head + "none excluded"]
    if n_excluded:
        lines = [
            head + f"{len(seeds) - n_excluded} in the estimates, {n_excluded} excluded from "
            "every estimate, table and figure:"
        ]
    for reason, group in excluded.items():
        unit = "seed" if len(group) == 1 else "seeds"
        why = _DEGENERATE if reason == "degenerate" else reason
        lines.append(f"  - {len(group)} {unit}, {why}: {_seed_ranges(s for s, _ in group)}")
        lines += [f"    - seed {seed}: {detail}" for seed, detail in group if detail]
    listed = {seed for group in excluded.values() for seed, _ in group}
    kept = [seed for seed in _degenerate_seeds(results) if seed not in listed]
    if kept:
        lines.append(f"  - kept although {_DEGENERATE}: {_seed_ranges(kept)}")
    return lines


def _degenerate_seeds(results: xr.Dataset | xr.DataArray) -> list[int]:
    """Seeds with a degenerate training (of any model) by the ``degenerate`` variable, which
    names them whether the spec excluded them or kept them."""
    if not isinstance(results, xr.Dataset) or "degenerate" not in results:
        return []
    reasons = results["degenerate"]
    if reasons.dtype.kind not in "UO":
        return []
    flagged = (reasons.astype(str) != "").any([d for d in reasons.dims if d != "seed"])
    return [int(seed) for seed in results["seed"].values[flagged.values]]


def _accuracy_line(est: xr.Dataset) -> list[str]:
    """The classifier's accuracy, once (it is the same for every detector of a seed)."""
    if "accuracy" not in metrics_of(est["mean"], None):
        return []
    acc = est.sel(metric="accuracy").isel(method=0)
    if acc["mean"].size == 1:
        value = (
            f"{_fmt(acc['mean'].item(), 4)} [{_fmt(acc['lower'].item(), 4)}, "
            f"{_fmt(acc['upper'].item(), 4)}] over {int(acc['n'].item())} seeds"
        )
    else:
        means = acc["mean"].values
        value = f"{_fmt(np.nanmin(means), 4)}-{_fmt(np.nanmax(means), 4)} across cells"
    return [f"- classifier accuracy: {value} (the same for every detector; not plotted)"]


# ----------------------------------------------------------------------------- the folder


def report_folder(results_path: str | Path) -> Path:
    """Where ``oodsim report`` writes the report of the results at ``results_path`` by default:
    ``results/foo.zarr`` → ``results/foo.report`` (another name gets ``.report`` appended)."""
    path = Path(results_path)
    name = path.stem if path.suffix == ".zarr" else path.name
    return path.with_name(f"{name}.report")


def _results_key(results: xr.Dataset | xr.DataArray) -> str:
    """What identifies the results a report shows: the spec key, else a hash of the scores."""
    if results.attrs.get("spec_key"):
        return str(results.attrs["spec_key"])
    score = as_score(results)
    digest = hashlib.sha256(np.ascontiguousarray(score.values, dtype=float).tobytes())
    labels = {str(d): [str(v) for v in score[d].values] for d in score.dims}
    digest.update(json.dumps(labels, sort_keys=True).encode())
    return "scores-" + digest.hexdigest()


def _marker(results: xr.Dataset | xr.DataArray, source: str | Path | None) -> dict[str, Any]:
    """The content of :data:`REPORT_MARKER` (less the list of files written)."""
    return {
        "oodsim_report": 1,
        "results_key": _results_key(results),
        "experiment": results.attrs.get("experiment"),
        "protocol": results.attrs.get("protocol"),
        "results": None if source is None else str(source),
    }


def _read_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of a report folder; None when there is none, ``{}`` when it is unreadable."""
    path = folder / REPORT_MARKER
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_marker(folder: Path, marker: dict[str, Any]) -> None:
    """Write the marker atomically (a reader never sees half of it)."""
    tmp = folder / f"{REPORT_MARKER}.tmp"
    tmp.write_text(json.dumps(marker, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, folder / REPORT_MARKER)


def _describe(marker: dict[str, Any]) -> str:
    key = str(marker.get("results_key") or "?")
    return f"{marker.get('experiment') or 'unnamed'}, key {key[:12]}"


def _claim(folder: Path, marker: dict[str, Any], overwrite: bool) -> list[str]:
    """Make ``folder`` this report's (before anything is written); return the files the
    report there before wrote. Refuses a file, a folder of other things and a report of other
    results unless ``overwrite``."""
    if folder.exists() and not folder.is_dir():
        raise ReportFolderError(f"{folder} is a file, not a report folder; choose another folder")
    folder.mkdir(parents=True, exist_ok=True)
    old = _read_marker(folder)
    how = "use --overwrite (overwrite=True) to write into it anyway, or choose another folder"
    if old is None and any(folder.iterdir()) and not overwrite:
        raise ReportFolderError(
            f"{folder} exists and is not an oodsim report (no {REPORT_MARKER}); {how} "
            "(no file oodsim did not write is deleted)"
        )
    old = old or {}
    if old and old.get("results_key") != marker["results_key"] and not overwrite:
        raise ReportFolderError(
            f"{folder} holds the report of other results ({_describe(old)}), not of "
            f"{_describe(marker)}; {how}"
        )
    previous = [f for f in old.get("files", ()) if isinstance(f, str)]
    _write_marker(folder, {**marker, "files": previous})
    return previous


def _owned(folder: Path, name: str) -> Path | None:
    """``folder / name`` if ``name`` is a plain relative path inside ``folder``."""
    relative = Path(name)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        return None
    return folder / relative


def _finish(folder: Path, marker: dict[str, Any], written: list[Path], previous: list[str]):
    """Remove files an earlier report wrote and this one did not (only those), then record
    what this report wrote in the marker."""
    names = sorted(p.relative_to(folder).as_posix() for p in written)
    for name in set(previous) - set(names):
        path = _owned(folder, name)
        if path is None or not path.is_file():
            continue
        path.unlink()
        parent = path.parent
        while parent != folder and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    _write_marker(folder, {**marker, "files": names})


# ----------------------------------------------------------------------------- the report


def _figures(
    results: xr.Dataset | xr.DataArray,
    out: Path,
    metric: str | None,
    k: int,
    alpha: float,
    n_draws: int,
    rng: np.random.Generator,
    pairing: str,
) -> list[Path]:
    """The report's PNGs (none without an OOD metric; no win probability with < k seeds)."""
    score = as_score(results)
    ood = ood_metrics(score)
    if metric is None:
        return []
    all_metrics = len(ood) * _n_cells(score) <= _MAX_PANELS
    figures = [
        plot_distributions(results, out / "distributions.png", None if all_metrics else metric),
        plot_required_simulations(results, out / "required_simulations.png", metric, alpha),
        plot_running_mean(results, out / "running_mean.png", metric),
    ]
    if score.sizes["seed"] >= k:  # a k-seed experiment needs k seeds to draw from
        figures.append(
            plot_win_probability(
                results, out / "win_probability.png", metric, k, n_draws, rng, pairing
            )
        )
    return figures


def _n_cells(score: xr.DataArray) -> int:
    """Panels of a per-cell figure: labels of every dim but seed, method and metric."""
    return int(
        np.prod([n for d, n in score.sizes.items() if d not in ("seed", "method", "metric")])
    )


def _shown(results: xr.Dataset | xr.DataArray) -> tuple[xr.Dataset | xr.DataArray, str]:
    """The results the report's figures show, and a note when that is not all of them: up to
    :data:`_MAX_CELLS` panels, thinned to evenly spaced severity levels (first and last kept)."""
    score = as_score(results)
    n_levels = score.sizes.get("severity", 1)
    if _n_cells(score) <= _MAX_CELLS or n_levels < 3:
        return results, ""
    keep = max(1, min(n_levels, _MAX_CELLS * n_levels // _n_cells(score)))
    index = np.unique(np.linspace(0, n_levels - 1, max(keep, 2)).round().astype(int))
    levels = ", ".join(str(score["severity"].values[i]) for i in index)
    note = f"The figures show severity levels {levels} of {n_levels}; severity/ shows every level."
    return results.isel(severity=index), note


def _stopping_lines(results: xr.Dataset | xr.DataArray) -> list[str]:
    decision = _stopping(results)
    lines = ["## Stopping decision", ""]
    if decision is None:
        return [*lines, "No stopping rule recorded (fixed number of seeds)."]
    row = [
        decision.rule,
        str(decision.stop),
        str(decision.n_seeds),
        f"{decision.statistic:.4g}",
        decision.reason,
    ]
    return [*lines, _render(["rule", "stop", "seeds", "statistic", "reason"], [row], True)]


def _summary(
    results: xr.Dataset | xr.DataArray,
    metric: str | None,
    k: int,
    alpha: float,
    n_draws: int,
    rng: np.random.Generator,
    pairing: str,
    source: str | Path | None,
) -> list[str]:
    """The lines of ``summary.md`` up to its figures."""
    score = as_score(results)
    ood = ood_metrics(score)
    est = estimate(results, confidence=0.95)
    note = _fixed_note(score, ("seed", "method", "metric"))
    name = results.attrs.get("experiment")
    lines = [f"# oodsim report{f': {name}' if name else ''}", ""]
    lines += _spec_lines(results, source) + _seed_lines(results, score)
    lines.append(f"- methods: {', '.join(_methods(score))}")
    lower = " (fpr95: lower is better)" if "fpr95" in ood else ""
    lines.append(f"- OOD metrics: {', '.join(ood) or 'none'}{lower}")
    lines += _accuracy_line(est) + ([f"- {note}"] if note else [])
    lines += [
        "",
        "## Estimates",
        "",
        f"Mean over seeds [{_interval_name(est)} for the expected score], n = seeds used.",
        "",
        _estimate_table(est, ood or metrics_of(score, None), markdown=True, digits=4),
        "",
        "## Win probability",
        "",
        _win_text(results, k, n_draws, rng, pairing, ood),
        "",
        "## Required simulations",
        "",
    ]
    if metric is None:
        lines.append("Not computed: the results have no OOD metric.")
    else:
        lines += [
            f"Seeds until a two-sided Welch t-test separates two methods on {metric} "
            f"(alpha = {alpha:g}); empty: not within {score.sizes['seed']} seeds.",
            "",
            _required_table(results, metric, alpha),
        ]
    lines.append("")
    if isinstance(results, xr.Dataset) and (variance := _variance_table(results, 0.95)):
        lines += [
            "## Sources of variance",
            "",
            "One-way random-effects ANOVA of the seeds grouped by class split "
            "(ICC = share of the variance due to the class split), OOD metrics.",
            "",
            variance,
            "",
        ]
    return lines + _stopping_lines(results)


def write_report(
    results: xr.Dataset | xr.DataArray,
    out_dir: str | Path,
    metric: str | None = None,
    k: int = 5,
    alpha: float = 0.05,
    n_draws: int = 10_000,
    rng: np.random.Generator | int | None = 0,
    pairing: str = "independent",
    *,
    overwrite: bool = False,
    source: str | Path | None = None,
) -> Path:
    """Write all plots and ``summary.md`` (what was run, which seeds were excluded and why,
    estimates, win probabilities, required simulations, variance components by class split,
    stopping decision) into the folder ``out_dir``; return the path of ``summary.md``.

    ``metric`` (default auroc) drives the per-metric plots and the required-simulations table;
    an accuracy-type metric, the same for every detector, is replaced by the first OOD metric.
    Win probabilities cover the OOD metrics only and draw seeds as ``pairing`` says (see
    :func:`oodsim.stats.win_probability`). ``source``: the results' path, named in the summary.

    ``out_dir`` gets a :data:`REPORT_MARKER` naming the results. A folder holding a report of
    the same results (same spec key) is refreshed: files of the old report that the new one
    does not write are removed. Any other non-empty folder raises :class:`ReportFolderError`
    unless ``overwrite``; then oodsim's files are written over, and nothing else is deleted.
    """
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {', '.join(PAIRINGS)}, got {pairing!r}")
    score = as_score(results)
    metric = metric or _default_metric(score)
    if not is_ood_metric(metric):
        metric = next(iter(ood_metrics(score)), None)
    out = Path(out_dir)
    marker = _marker(results, source)
    previous = _claim(out, marker, overwrite)
    rng = np.random.default_rng(rng)
    shown, note = _shown(results)
    written = _figures(shown, out, metric, k, alpha, n_draws, rng, pairing)
    lines = _summary(results, metric, k, alpha, n_draws, rng, pairing, source)
    lines += ["", "## Figures", ""] + ([note, ""] if note else [])
    lines += [f"![{p.stem}]({p.name})" for p in written]
    if isinstance(results, xr.Dataset) and results.attrs.get("protocol") == "severity":
        from oodsim.report.severity import write_severity_files  # severity results only

        severity = write_severity_files(results, out / "severity", metric=metric or "auroc")
        written += severity
        lines += ["", "## Severity levels", ""]
        lines.append(f"See [{severity[-1].name}](severity/{severity[-1].name}).")
    path = out / "summary.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _finish(out, marker, [*written, path], previous)
    return path
