"""The risk–coverage figure of selective classification (``risk_coverage.png``): each method's
mean selective risk over the seeds at each coverage, with its interval."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from oodsim.report.figures import (
    CONTEXT_STYLE,
    best_few,
    figure,
    legend,
    markevery,
    save,
    suptitle,
)
from oodsim.report.styles import method_detectors, method_styles
from oodsim.report.tables import seed_counts
from oodsim.results.access import method_names, scored
from oodsim.stats import estimate

#: The per-seed variable the figure reads (open set results of specs with a selective metric).
RISK_COVERAGE = "risk_coverage"


def plot_risk_coverage(results: xr.Dataset, path: str | Path, confidence: float = 0.95) -> Path:
    """Mean selective risk (wrong share of the accepted ID test samples) against coverage per
    method, over the seeds that were scored; methods ranked by their mean AURC (the area under
    the curve), the best few in colour when there are more than five. No bands: at low
    coverage most seeds sit at risk 0, where an honest interval from tens of seeds spans much
    of the range and would hide the curves (AURC's interval is in the estimates table). Needs
    ``risk_coverage`` in ``results`` (KeyError otherwise)."""
    if RISK_COVERAGE not in results:
        raise KeyError(
            f"{RISK_COVERAGE!r} is not in these results: open set runs store it when their "
            "metrics include a selective one (aurc, eaurc, selective_risk95, ...)"
        )
    curves = scored(results, RISK_COVERAGE)
    est = estimate(curves, confidence=confidence, value_range=(0.0, 1.0))  # mean and n
    coverage = np.asarray(curves["coverage"].values, dtype=float)
    methods = method_names(curves)
    detectors = method_detectors(results)
    styles = method_styles(methods, detectors)
    area = {m: float(est["mean"].sel({"method": m}).mean()) for m in methods}
    coloured = best_few(area, "aurc")
    fig, (ax,) = figure(1, width=5.6, height=4.0)
    for method in methods:
        if method not in coloured:
            ax.plot(coverage, est["mean"].sel({"method": method}), zorder=1, **CONTEXT_STYLE)
    for i, method in enumerate(coloured):
        cell = est.sel({"method": method})
        style = styles[method]
        ax.plot(coverage, cell["mean"], markevery=markevery(i, coverage.size), zorder=3, **style)
    ax.set_xlabel("coverage (share of ID test samples accepted, by κ)")
    ax.set_ylabel("selective risk (lower is better)")
    ax.set_xlim(0.0, 1.0)
    top = float(np.nanmax(est["mean"].values, initial=0.0))
    ax.set_ylim(0.0, max(0.02, 1.4 * top))
    ax.grid(alpha=0.3)
    legend(fig, styles, detectors=detectors, shown=coloured)
    suptitle(
        fig,
        f"Risk–coverage: mean over {seed_counts(est['n'])} seeds; each method's κ ranks the "
        "ID test samples, the classifier's errors are the risk",
    )
    return save(fig, path)
