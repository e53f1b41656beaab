"""Figure helpers shared by every report plot (:mod:`oodsim.report.plots`,
:mod:`oodsim.report.severity`): the method → style mapping, grids of panels with one legend
outside the axes, titles that fit, axis limits inside a metric's range.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from oodsim.stats._common import is_ood_metric, iter_cells, ood_metrics

_NCOLS = 3

# ----------------------------------------------------------------------------- style

#: Qualitative colours: tab10, then five that differ from all of them.
_PALETTE = (
    *(colormaps["tab10"](i) for i in range(10)),
    "#000000",
    "#882255",
    "#44aa99",
    "#332288",
    "#e6ab02",
)
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "p", "h", "d", "+", "x")
_LINESTYLES = ("-", "--", ":", "-.")


def method_styles(methods: Iterable[object]) -> dict[str, dict[str, Any]]:
    """Colour, marker and line style of each method, by its position in ``methods`` (the
    results' method order), so a method looks the same in every figure of a report. All three
    differ for up to 15 methods; beyond that, the line style tells the repeats apart."""
    styles = {}
    for i, method in enumerate(methods):
        styles[str(method)] = {
            "color": _PALETTE[i % len(_PALETTE)],
            "marker": _MARKERS[i % len(_MARKERS)],
            "linestyle": _LINESTYLES[(i // 10) % len(_LINESTYLES)],
        }
    return styles


def markevery(i: int, n_points: int, n_marks: int = 8) -> tuple[int, int]:
    """About ``n_marks`` markers on a curve of ``n_points``, shifted per method so markers of
    overlapping curves do not sit on top of each other."""
    step = max(1, n_points // n_marks)
    return (i * max(1, step // 5)) % step, step


def legend(fig: Figure, styles: dict[str, dict[str, Any]], extra: Sequence[Any] = ()) -> None:
    """One legend for the whole figure, outside the axes on the right: every method (its line
    and marker) plus ``extra`` handles."""
    handles = [Line2D([], [], markersize=6, label=m, **s) for m, s in styles.items()]
    fig.legend(handles=[*handles, *extra], loc="outside right center", fontsize=8, frameon=False)


# ----------------------------------------------------------------------------- panels


def figure(n_panels: int, width: float = 4.8, height: float = 3.4) -> tuple[Figure, list[Axes]]:
    """A figure with ``n_panels`` axes on a grid of at most three columns."""
    ncols = min(_NCOLS, max(n_panels, 1))
    nrows = math.ceil(max(n_panels, 1) / ncols)
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = [fig.add_subplot(nrows, ncols, i + 1) for i in range(max(n_panels, 1))]
    return fig, axes


def wrap(text: str, inches: float, fontsize: float) -> str:
    """``text`` broken into lines that fit ``inches`` at ``fontsize`` points."""
    chars = max(16, int(inches * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.fill(line, chars) for line in text.splitlines())


def suptitle(fig: Figure, text: str, fontsize: float = 10) -> None:
    """A figure title wrapped to the figure's width (constrained layout makes room for it)."""
    fig.suptitle(wrap(text, fig.get_figwidth() * 0.9, fontsize), fontsize=fontsize)


def panels(
    da: xr.DataArray,
    keep: Sequence[str],
    draw: Callable[[Axes, dict[str, object], xr.DataArray], None],
    title: str = "",
    width: float = 4.8,
    height: float = 3.4,
) -> tuple[Figure, list[Axes]]:
    """One panel per cell of ``da`` over the dims not in ``keep``: titled by the labels of the
    dims that vary (``title`` when none does), then drawn by ``draw(ax, labels, cell)``."""
    cells = list(iter_cells(da, keep))
    fig, axes = figure(len(cells), width, height)
    for ax, (labels, cell) in zip(axes, cells, strict=False):
        varying = [
            str(v) if d == "metric" else f"{d}={v}" for d, v in labels.items() if da.sizes[d] > 1
        ]
        ax.set_title(wrap(", ".join(varying) or title, width * 0.9, 9), fontsize=9)
        draw(ax, labels, cell)
    return fig, axes


def ink(rgba: Sequence[float]) -> str:
    """Black text on a light cell, white on a dark one (by the cell colour's luminance)."""
    r, g, b = rgba[:3]
    return "k" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "w"


def save(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as a PNG at ``path`` (its folder created); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=100)
    return path


def limits(values: Iterable[np.ndarray], bounds: tuple[float, float] | None) -> tuple:
    """Axis limits around the finite ``values`` with a 5% margin, inside ``bounds``."""
    finite = np.concatenate([np.asarray(v, dtype=float).ravel() for v in values])
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return bounds or (0.0, 1.0)
    lo, hi = float(finite.min()), float(finite.max())
    pad = max(hi - lo, 1e-3) * 0.05
    lo, hi = lo - pad, hi + pad
    if bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return lo, hi


def require_ood(score: xr.DataArray, names: Sequence[str], what: str) -> list[str]:
    """``names`` if every one is an OOD metric, else a ValueError saying why ``what`` (a plot
    of detectors) does not show it."""
    for name in names:
        if not is_ood_metric(name):
            raise ValueError(
                f"{what} compares OOD detectors; {name!r} is not an OOD metric (it is the same "
                f"for every detector); use one of {', '.join(ood_metrics(score)) or 'none'}"
            )
    return list(names)
