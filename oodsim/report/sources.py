"""Where the variance comes from, in the report: a stacked bar of each method's variance shares
by source of randomness (:func:`oodsim.stats.variance_components` on a ``[seeds.design]`` run).
The table of shares with their intervals is :mod:`oodsim.report.source_table`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import xarray as xr
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.patches import Patch

from oodsim.report.figures import panels, require_ood, save, suptitle
from oodsim.results.access import method_names
from oodsim.stats import as_score, variance_components

#: The residual's colour: every stream the design does not cross, plus what it cannot separate.
_RESIDUAL_COLOUR = "#d9d9d9"


def source_colours(sources: list[str]) -> dict[str, object]:
    """One colour per source, the residual grey, the same in the figure and its legend."""
    palette = colormaps["tab10"]
    named = [s for s in sources if s != "residual"]
    colours: dict[str, object] = {s: palette(i % 10) for i, s in enumerate(named)}
    return colours | {"residual": _RESIDUAL_COLOUR}


def _draw_shares(ax: Axes, cell: xr.Dataset, colours: dict[str, object]) -> None:
    """One horizontal bar per method, split into its sources' shares (left to right)."""
    methods = method_names(cell)
    left = np.zeros(len(methods))
    for source in [str(s) for s in cell["source"].values]:
        share = np.nan_to_num(cell["share"].sel(source=source).values)
        ax.barh(range(len(methods)), share, left=left, color=colours[source], edgecolor="white")
        left += share
    ax.set_yticks(range(len(methods)), methods, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the seed-to-seed variance", fontsize=8)


def plot_variance_sources(
    results: xr.Dataset,
    path: str | Path,
    metric: str = "auroc",
    components: xr.Dataset | None = None,
) -> Path:
    """Stacked bars of each method's variance shares by source (one panel per cell); the
    intervals are in the report's table. ``components``: the fit, when already computed."""
    require_ood(as_score(results), [metric], "a variance-sources plot")
    vc = components if components is not None else variance_components(results, metric)
    sources = [str(s) for s in vc["source"].values]
    colours = source_colours(sources)
    n_methods = vc.sizes["method"]
    fig, _ = panels(
        vc["share"],
        ("method", "source"),
        lambda ax, labels, cell: _draw_shares(ax, vc.sel(labels), colours),
        width=6.0,
        height=1.2 + 0.35 * n_methods,
    )
    keys = [Patch(facecolor=colours[s], label=s) for s in sources]
    fig.legend(handles=keys, loc="outside right center", fontsize=8, frameon=False)
    levels = ", ".join(f"{k} x{v}" for k, v in json.loads(vc.attrs["n_levels"]).items())
    suptitle(
        fig,
        f"Share of the seed-to-seed variance of {metric} by source of randomness "
        f"(design: {levels}; {vc.attrs['estimator']} fit, intervals in summary.md)",
        fontsize=9,
    )
    return save(fig, path)
