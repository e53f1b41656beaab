"""Figure helpers shared by every report plot (:mod:`oodsim.report.plots`,
:mod:`oodsim.report.decisions`, :mod:`oodsim.report.severity`): which methods a crowded figure
draws in colour (:func:`best_few`), grids of panels with one legend outside the axes (methods
grouped by family, styles of :mod:`oodsim.report.styles`), titles that fit, axis limits inside a
metric's range, a metric's direction on its axis label.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import imsave
from matplotlib.lines import Line2D

from oodsim.metrics import higher_is_better, is_ood_metric
from oodsim.report.folder import write_file
from oodsim.report.styles import CONTEXT, grouped
from oodsim.results.access import iter_cells, ood_metrics

_NCOLS = 3

# ----------------------------------------------------------------------------- style

#: Figures of overlapping lines draw every method in colour up to this many methods; with more,
#: the best :data:`BEST_FEW` in colour and the others in grey behind them (:func:`best_few`).
MAX_COLOURED = 5
BEST_FEW = 4
#: How a method drawn as context looks: a thin grey line, no marker.
CONTEXT_STYLE: dict[str, Any] = {"color": CONTEXT, "linewidth": 0.9, "linestyle": "-"}


def best_few(values: Mapping[str, float], metric: str) -> list[str]:
    """The methods a figure of overlapping lines draws in colour: all of ``values`` (method →
    the value it is ranked by) up to :data:`MAX_COLOURED`, else the best :data:`BEST_FEW` by
    the metric's direction (methods without a value last), in the order given."""
    if len(values) <= MAX_COLOURED:
        return list(values)
    sign = -1.0 if higher_is_better(metric) else 1.0
    ranked = sorted(values, key=lambda m: sign * values[m] if np.isfinite(values[m]) else np.inf)
    best = set(ranked[:BEST_FEW])
    return [m for m in values if m in best]


def direction(metric: str) -> str:
    """``"higher is better"`` or ``"lower is better"`` (fpr95, aurc, ...) for ``metric``."""
    return "higher is better" if higher_is_better(metric) else "lower is better"


def metric_label(metric: str) -> str:
    """``"fpr95 (lower is better)"``: a metric with its direction, for an axis label."""
    return f"{metric} ({direction(metric)})"


def markevery(i: int, n_points: int, n_marks: int = 8) -> tuple[int, int]:
    """About ``n_marks`` markers on a curve of ``n_points``, shifted per method so markers of
    overlapping curves do not sit on top of each other."""
    step = max(1, n_points // n_marks)
    return (i * max(1, step // 5)) % step, step


def legend(
    fig: Figure,
    styles: dict[str, dict[str, Any]],
    extra: Sequence[Any] = (),
    detectors: Mapping[str, str] | None = None,
    shown: Collection[str] | None = None,
) -> None:
    """One legend for the whole figure, outside the axes on the right: the methods (line and
    marker; those in ``shown``, default all) grouped under their family's name in bold
    (``detectors``: label → detector name, :func:`~oodsim.report.styles.method_detectors`),
    one grey entry for the others when some are not shown, then ``extra`` handles."""
    handles, headers = [], []
    listed = [m for m in styles if shown is None or m in shown]
    for family, methods in grouped(listed, detectors).items():
        headers.append(len(handles))
        handles.append(Line2D([], [], linestyle="none", label=family))
        handles += [Line2D([], [], markersize=6, label=m, **styles[m]) for m in methods]
    if len(listed) < len(styles):
        n = len(styles) - len(listed)
        handles.append(Line2D([], [], label=f"{n} other method{'s' * (n > 1)}", **CONTEXT_STYLE))
    box = fig.legend(
        handles=[*handles, *extra], loc="outside right center", fontsize=8, frameon=False
    )
    for i in headers:
        box.get_texts()[i].set_fontweight("bold")


# ----------------------------------------------------------------------------- panels


def figure(n_panels: int, width: float = 4.8, height: float = 3.4) -> tuple[Figure, list[Axes]]:
    """A figure with ``n_panels`` axes on a grid of at most three columns (four on two: a
    square without an empty cell)."""
    ncols = 2 if n_panels == 4 else min(_NCOLS, max(n_panels, 1))
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


#: the resolution of every figure file (pixels per inch)
DPI = 100


def save(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as a PNG at ``path`` at :data:`DPI` (its folder created, a link there
    replaced, never written through: :func:`oodsim.report.folder.write_file`); return the
    path."""
    return write_file(Path(path), lambda tmp: _write_png(fig, tmp))


def _write_png(fig: Figure, path: Path) -> None:
    """Lay ``fig`` out and render it in one pass, then encode the pixels as a PNG: the pixels
    ``fig.savefig(path, dpi=DPI)`` writes, without the extra draw it makes to lay a figure out
    first (a third of its time)."""
    fig.set_dpi(DPI)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    imsave(path, np.asarray(canvas.buffer_rgba()), format="png", dpi=DPI)


def limits(values: Iterable[np.ndarray], bounds: tuple[float, float] | None) -> tuple:
    """Axis limits around the finite ``values`` with a 5% margin, inside ``bounds``; ``bounds``
    (else 0 to 1) when there are none (every seed failed, nothing drawn)."""
    finite = np.concatenate([np.empty(0), *(np.asarray(v, dtype=float).ravel() for v in values)])
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
