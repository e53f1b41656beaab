"""Figure helpers shared by every report plot (:mod:`oodsim.report.plots`,
:mod:`oodsim.report.decisions`, :mod:`oodsim.report.severity`): the method → style mapping (a
colour map per method family), grids of panels with one legend outside the axes, titles that
fit, axis limits inside a metric's range, a metric's direction on its axis label.
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

from oodsim.metrics import higher_is_better, is_ood_metric
from oodsim.report.folder import write_file
from oodsim.results.access import iter_cells, ood_metrics

_NCOLS = 3

# ----------------------------------------------------------------------------- style

#: Method families, each with its colour map: a family's methods are shades of one hue, so
#: the colours say which kind of detector a curve is. A method belongs to a family when its
#: label is a member's name or starts with one and ``_`` (``energy_t2``).
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "softmax / logit": (
        "Blues",
        ("msp", "temperature", "odin", "entropy", "max_logit", "energy", "openmax"),
    ),
    "sampling (MC dropout)": ("Oranges", ("mc_dropout", "mc_dropout_entropy")),
    "feature": ("Greens", ("mahalanobis", "knn", "vim")),
}
#: The family of methods oodsim does not know (registered by users), in a neutral colour map.
OTHER_FAMILY = "other"
_OTHER_CMAP = "Greys"

#: Positions in a family's colour map of its 1st, 2nd, ... method: far apart from the start,
#: so a family's first methods differ most; past ten, the line style tells repeats apart.
_SHADES = (0.9, 0.55, 0.75, 0.4, 0.98, 0.65, 0.47, 0.83, 0.6, 0.7)
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "p", "h", "d", "+", "x")
_LINESTYLES = ("-", "--", ":", "-.")


def method_family(method: object) -> str:
    """The family of ``method`` (a key of :data:`FAMILIES`), else :data:`OTHER_FAMILY`."""
    name = str(method).lower()
    for family, (_, members) in FAMILIES.items():
        if any(name == m or name.startswith(m + "_") for m in members):
            return family
    return OTHER_FAMILY


def families(methods: Iterable[object]) -> dict[str, list[str]]:
    """The methods of each family present, families in :data:`FAMILIES` order (then other),
    methods in the order given."""
    grouped: dict[str, list[str]] = {f: [] for f in [*FAMILIES, OTHER_FAMILY]}
    for method in methods:
        grouped[method_family(method)].append(str(method))
    return {family: names for family, names in grouped.items() if names}


def method_styles(methods: Iterable[object]) -> dict[str, dict[str, Any]]:
    """Colour, marker and line style of each method, by its position in ``methods`` (the
    results' method order), so a method looks the same in every figure of a report. The colour
    is a shade of its family's colour map (:data:`FAMILIES`), the n-th method of a family the
    n-th shade; markers differ for up to 15 methods."""
    names = [str(m) for m in methods]
    seen: dict[str, int] = {}
    styles = {}
    for i, method in enumerate(names):
        family = method_family(method)
        j = seen[family] = seen.get(family, -1) + 1
        cmap = FAMILIES[family][0] if family in FAMILIES else _OTHER_CMAP
        styles[method] = {
            "color": colormaps[cmap](_SHADES[j % len(_SHADES)]),
            "marker": _MARKERS[i % len(_MARKERS)],
            "linestyle": _LINESTYLES[(j // len(_SHADES)) % len(_LINESTYLES)],
        }
    return styles


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


def legend(fig: Figure, styles: dict[str, dict[str, Any]], extra: Sequence[Any] = ()) -> None:
    """One legend for the whole figure, outside the axes on the right: the methods (line and
    marker) grouped under their family's name in bold, then ``extra`` handles."""
    handles, headers = [], []
    for family, methods in families(styles).items():
        headers.append(len(handles))
        handles.append(Line2D([], [], linestyle="none", label=family))
        handles += [Line2D([], [], markersize=6, label=m, **styles[m]) for m in methods]
    box = fig.legend(
        handles=[*handles, *extra], loc="outside right center", fontsize=8, frameon=False
    )
    for i in headers:
        box.get_texts()[i].set_fontweight("bold")


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
    """Write ``fig`` as a PNG at ``path`` (its folder created, a link there replaced, never
    written through: :func:`oodsim.report.folder.write_file`); return the path."""
    return write_file(Path(path), lambda tmp: fig.savefig(tmp, format="png", dpi=100))


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
