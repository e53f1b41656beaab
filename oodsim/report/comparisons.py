"""Paired comparisons and power in the report: a heat map of every pair's mean paired difference
(non-significant pairs greyed, after the multiplicity adjustment), and the tables behind it
(:func:`oodsim.stats.compare`, :func:`oodsim.stats.power`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import TwoSlopeNorm
from matplotlib.patches import Patch, Rectangle

from oodsim.report.figures import ink, metric_label, panels, require_ood, save, suptitle
from oodsim.report.tables import render, too_small
from oodsim.results.access import cell_label, iter_cells, method_names
from oodsim.stats import as_score, compare, higher_is_better, power
from oodsim.stats.power import DEFAULT_DELTAS

#: A pair whose adjusted p-value is not below alpha.
_NOT_SIGNIFICANT = "#d0d0d0"

#: The adjustment names as a reader meets them.
_ADJUST_NAMES = {"holm": "Holm", "bh": "Benjamini-Hochberg", "none": "no"}


def adjust_name(comparison: xr.Dataset) -> str:
    """``Holm``, ``Benjamini-Hochberg`` or ``no``: the adjustment a comparison made."""
    return _ADJUST_NAMES.get(str(comparison.attrs["adjust"]), str(comparison.attrs["adjust"]))


def _advantage(comparison: xr.Dataset, metric: str) -> xr.DataArray:
    """How much better the row method is than the column method (the sign of ``diff`` turned
    for a lower-is-better metric), which the colours show."""
    sign = 1.0 if higher_is_better(metric) else -1.0
    return sign * comparison["diff"]


def _draw_differences(
    ax: Axes, cell: xr.Dataset, metric: str, cmap: Any, norm: TwoSlopeNorm
) -> None:
    """The pair matrix: coloured by advantage where significant, grey where not, the mean
    difference written in every off-diagonal cell."""
    diff = cell["diff"].transpose("method", "other").values
    advantage = _advantage(cell, metric).transpose("method", "other").values
    significant = cell["significant"].transpose("method", "other").values
    shown = np.ma.masked_where(~significant | ~np.isfinite(advantage), advantage)
    ax.imshow(shown, cmap=cmap, norm=norm, aspect="equal")
    for (i, j), value in np.ndenumerate(diff):
        if i == j:
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="white", edgecolor="none"))
        elif np.isfinite(value):
            colour = ink(cmap(norm(advantage[i, j]))) if significant[i, j] else "0.35"
            ax.text(j, i, f"{value:+.3f}", ha="center", va="center", fontsize=7.5, color=colour)
    methods = method_names(cell)
    ax.set_xticks(range(len(methods)), methods, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(methods)), methods, fontsize=8)
    ax.set_xlabel("other", fontsize=8)


def plot_paired_differences(
    results: xr.Dataset | xr.DataArray,
    path: str | Path,
    metric: str = "auroc",
    alpha: float = 0.05,
    adjust: str | None = "holm",
    comparison: xr.Dataset | None = None,
) -> Path:
    """Heat map of the mean paired difference ``method − other`` of every pair (one panel per
    cell), coloured by how much better the row method is where the adjusted paired t test
    rejects at ``alpha`` (with a colour bar), grey where it does not (no colour bar when no pair
    is significant). ``comparison``: the :func:`compare` result, when already computed."""
    require_ood(as_score(results), [metric], "a paired-differences plot")
    cmp = (
        comparison
        if comparison is not None
        else compare(results, metric, alpha=alpha, adjust=adjust)
    )
    reach = float(np.nanmax(np.abs(cmp["diff"].values), initial=0.0)) or 1e-3
    cmap = colormaps["RdBu"].with_extremes(bad=_NOT_SIGNIFICANT)
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-reach, vmax=reach)
    m = cmp.sizes["method"]
    fig, axes = panels(
        cmp["diff"],
        ("method", "other"),
        lambda ax, labels, cell: _draw_differences(ax, cmp.sel(labels), metric, cmap, norm),
        width=2.0 + 0.6 * m,
        height=1.6 + 0.55 * m,
    )
    if bool(cmp["significant"].any()):  # else every cell is grey: a colour bar of nothing
        bar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=axes, shrink=0.8)
        bar.set_label(f"row better by: {metric_label(metric)}", fontsize=8)
    keys = [
        Patch(
            facecolor=_NOT_SIGNIFICANT,
            edgecolor="0.5",
            label=f"not significant ({adjust_name(cmp)}-adjusted p >= {alpha:g})",
        )
    ]
    fig.legend(handles=keys, loc="outside lower center", fontsize=8, frameon=False)
    suptitle(
        fig,
        f"Mean paired difference row − column in {metric_label(metric)} over the seeds both "
        f"scored; paired t test, {adjust_name(cmp)} adjustment over {cmp.attrs['n_tests']} tests",
    )
    return save(fig, path)


def _pair_text(v: xr.Dataset) -> str:
    """``+0.012 [+0.004, +0.020]*`` (star: significant after adjustment)."""
    diff = v["diff"].item()
    if not np.isfinite(diff):
        return ""
    star = "*" if bool(v["significant"].item()) else ""
    return f"{diff:+.4f} [{v['diff_low'].item():+.4f}, {v['diff_high'].item():+.4f}]{star}"


def _matrices(
    ds: xr.Dataset, text: Any, empty: str, shown_dims: tuple[str, ...] = ("method", "other")
) -> str:
    """One markdown matrix (rows: method, columns: other) per cell of the other dims; the line
    ``empty`` instead when no pair has a value (tables of blanks say nothing)."""
    parts, filled = [], False
    first = next(iter(ds.data_vars))
    for labels, _ in iter_cells(ds[first], shown_dims):
        cell = ds.sel(labels)
        methods = method_names(cell)
        rows = [
            [a] + ["" if a == b else text(cell.sel({"method": a, "other": b})) for b in methods]
            for a in methods
        ]
        filled = filled or any(value for row in rows for value in row[1:])
        varying = {d: v for d, v in labels.items() if ds.sizes.get(d, 1) > 1}
        heading = f"*{cell_label(varying)}*\n\n" if varying else ""
        parts.append(heading + render(["", *methods], rows, markdown=True))
    return "\n\n".join(parts) if filled else empty


def paired_table(comparison: xr.Dataset) -> str:
    """Every pair's mean paired difference ``row − column`` with its t interval; ``*`` marks
    the pairs whose adjusted p-value is below alpha."""
    return _matrices(comparison, _pair_text, too_small("no pair has seeds both methods scored"))


def _one_n(n: float) -> str:
    if np.isnan(n):
        return ""
    return "inf" if np.isinf(n) else f"{int(n):,}"


def _n_text(v: xr.Dataset) -> str:
    """The seeds needed for each ``delta`` of the cell, ``"1,204 / 302 / 77"``; blank where
    the spread is unknown."""
    needed = np.atleast_1d(v["n_required"].values)
    if np.isnan(needed).all():
        return ""
    return " / ".join(_one_n(n) for n in needed)


def power_table(needed: xr.Dataset) -> str:
    """Seeds a paired t test needs per pair and difference (:func:`oodsim.stats.power`),
    ``"n₁ / n₂ / n₃"`` for the differences of its ``delta`` coordinate; blank where the
    spread of the paired differences is unknown (fewer than 2 seeds, or all equal)."""
    none = (
        "Not computed: no pair has paired differences that spread (2 or more seeds, not all "
        "equal) to power a test against."
    )
    return _matrices(needed, _n_text, none, shown_dims=("method", "other", "delta"))


def power_of_results(
    results: xr.Dataset | xr.DataArray, metric: str, alpha: float, target: float = 0.8
) -> xr.Dataset:
    """:func:`oodsim.stats.power` of every pair (paired) for the fixed differences
    :data:`oodsim.stats.power.DEFAULT_DELTAS`, never the observed ones."""
    return power(results, metric, delta=DEFAULT_DELTAS, power=target, alpha=alpha, paired=True)
