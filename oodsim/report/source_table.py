"""The variance-by-source table of designed seeds (``[seeds.design]``): text only, so that a
run that prints it never loads matplotlib. Its figure is :mod:`oodsim.report.sources`."""

from __future__ import annotations

import numpy as np
import xarray as xr

from oodsim.report.tables import fmt, render
from oodsim.results import DESIGN_PREFIX
from oodsim.results.access import cell_label, iter_cells, method_names


def has_design(results: xr.Dataset | xr.DataArray) -> bool:
    """Whether the seeds of ``results`` carry designed stream levels (``stream_*``)."""
    return any(
        str(name).startswith(DESIGN_PREFIX) and results[name].dims == ("seed",)
        for name in results.coords
    )


def _share_text(v: xr.Dataset, digits: int) -> str:
    """``share [low, high]`` of one method and source."""
    low, high = fmt(v["share_low"].item(), digits), fmt(v["share_high"].item(), digits)
    return f"{fmt(v['share'].item(), digits)} [{low}, {high}]"


def variance_sources_table(vc: xr.Dataset, digits: int = 2, markdown: bool = True) -> str:
    """One row per source, one column per method, ``share [low, high]``, and the
    total SD of each method; one table per cell of the other dims (severity, ood, ...)."""
    parts = []
    for labels, _ in iter_cells(vc["share"], ("method", "source")):
        sub = vc.sel(labels)
        methods = method_names(sub)
        rows = [
            [source]
            + [_share_text(sub.sel({"source": source, "method": m}), digits) for m in methods]
            for source in [str(s) for s in sub["source"].values]
        ]
        totals = [np.sqrt(sub["total"].sel({"method": m}).item()) for m in methods]
        rows.append(["total SD", *[fmt(t, 4) for t in totals]])
        shown = {d: v for d, v in labels.items() if vc.sizes[d] > 1}
        heading = f"*{cell_label(shown)}*\n\n" if shown else ""
        parts.append(heading + render(["source", *methods], rows, markdown=markdown))
    return "\n\n".join(parts)
