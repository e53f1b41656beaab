"""Tables a paper can include: mean [interval] per method and metric, as LaTeX (booktabs) and
CSV (:func:`paper_table`, :func:`latex_table`, :func:`csv_table`).

A method is marked best (bold in LaTeX, ``significantly_best`` in CSV) only where it is
significantly better than every other method of its column: the paired t test of
:func:`oodsim.stats.compare`, adjusted over every pair, metric and cell of the table at once,
rejects each of its comparisons in its favour. The highest mean alone is never bold: two
methods within noise of each other both stay plain, and the caption says which test decides.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence

import attrs
import numpy as np
import xarray as xr

from oodsim.metrics import higher_is_better, metric_info
from oodsim.report.comparisons import adjust_name
from oodsim.report.folder import TABLE_FILES
from oodsim.report.tables import fmt, interval_name, seed_counts
from oodsim.results.access import cell_label, iter_cells, method_names, ood_metrics
from oodsim.stats import as_score, compare, estimate

#: LaTeX's special characters and what stands for each in text.
_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_text(text: str) -> str:
    """``text`` with LaTeX's special characters escaped (a method label ``odin(T=1000)``,
    ``max_logit``, ``a|b`` print as they read)."""
    return re.sub(r"[\\&%$#_{}~^]", lambda m: _LATEX_SPECIALS[m.group()], str(text))


@attrs.frozen
class PaperCell:
    """One method's value in one column: mean, interval, seeds, and the marks."""

    mean: float
    lower: float
    upper: float
    n: int
    best: bool  # the best mean of its column
    significantly_best: bool  # better than every other method, after the adjustment


@attrs.frozen
class PaperTable:
    """Rows (methods) × columns (metrics) for each cell of the other dims, with what decided
    the marks: ``caption`` (plain text) names the interval, the test, its adjustment and
    alpha."""

    methods: tuple[str, ...]
    metrics: tuple[str, ...]
    cells: dict[str, dict[tuple[str, str], PaperCell]]  # cell label -> (method, metric) -> value
    caption: str
    n_tests: int


def paper_table(
    results: xr.Dataset,
    metrics: Sequence[str] | None = None,
    *,
    confidence: float = 0.95,
    alpha: float = 0.05,
    adjust: str | None = "holm",
) -> PaperTable:
    """The values and marks of :func:`latex_table` and :func:`csv_table`: :func:`estimate`'s
    mean and interval per method and metric (default: every OOD metric), and the methods that
    are significantly best (see the module's docstring) by :func:`compare` at ``alpha`` after
    ``adjust`` over all the table's pairs."""
    score = as_score(results)
    metrics = tuple(metrics or ood_metrics(score))
    if not metrics:
        raise ValueError("these results have no OOD metric to tabulate")
    if not (score.notnull()).any():
        raise ValueError("no seed of these results was scored: there is nothing to tabulate")
    est = estimate(results, confidence=confidence).sel({"metric": list(metrics)})
    cmp = compare(results, metric=list(metrics), alpha=alpha, adjust=adjust)
    methods = tuple(method_names(score))
    cells: dict[str, dict[tuple[str, str], PaperCell]] = {}
    for labels, _ in iter_cells(est["mean"], ("method", "metric")):
        cell = est.sel(labels) if labels else est
        pairs = cmp.sel(labels) if labels else cmp
        values = {}
        for metric in metrics:
            column = cell.sel({"metric": metric})
            means = column["mean"].values
            sign = 1.0 if higher_is_better(metric) else -1.0
            best = int(np.nanargmax(sign * means)) if np.isfinite(means).any() else -1
            for i, method in enumerate(methods):
                values[(method, metric)] = PaperCell(
                    float(means[i]),
                    float(column["lower"].values[i]),
                    float(column["upper"].values[i]),
                    int(column["n"].values[i]),
                    i == best,
                    i == best and _beats_all(pairs.sel({"metric": metric}), method, sign),
                )
        cells[cell_label(labels)] = values
    n_tests = int(cmp.attrs["n_tests"])
    seeds = seed_counts(est["n"], dash="-")
    caption = (
        f"Mean [{interval_name(est)}] over {seeds} seeds. Bold: significantly better than "
        f"every other method in its column (two-sided paired t test over the seeds both "
        f"methods scored, {adjust_name(cmp)} adjustment over the {n_tests} tests of the "
        f"table, alpha = {alpha:g}); no bold where no method is."
    )
    return PaperTable(methods, metrics, cells, caption, n_tests)


def _beats_all(pairs: xr.Dataset, method: str, sign: float) -> bool:
    """Whether ``method``'s comparison with every other method is significant in its favour."""
    row = pairs.sel({"method": method}).drop_sel({"other": method})
    favour = sign * row["diff"].values > 0
    return bool(row.sizes["other"]) and bool((row["significant"].values & favour).all())


def latex_table(table: PaperTable, *, label: str = "tab:oodsim", digits: int = 3) -> str:
    """A LaTeX ``table`` with a booktabs ``tabular`` per cell (``\\toprule``, ``\\midrule``,
    ``\\bottomrule``: needs ``\\usepackage{booktabs}``): one row per method, one column per
    metric (↑/↓ its direction), ``mean {\\scriptsize [lower, upper]}``, the significantly best
    bold, and :attr:`PaperTable.caption`."""
    heads = [
        latex_text(_head(m)) + (r" $\uparrow$" if higher_is_better(m) else r" $\downarrow$")
        for m in table.metrics
    ]
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{latex_text(table.caption)}}}",
        rf"\label{{{label}}}",
    ]
    for name, values in table.cells.items():
        if name:
            lines.append(rf"\par\smallskip\textit{{{latex_text(name)}}}\par\smallskip")
        lines += [
            rf"\begin{{tabular}}{{l{'c' * len(table.metrics)}}}",
            r"\toprule",
            " & ".join(["Method", *heads]) + r" \\",
            r"\midrule",
        ]
        for method in table.methods:
            row = [latex_text(method)]
            for metric in table.metrics:
                row.append(_latex_value(values[(method, metric)], digits))
            lines.append(" & ".join(row) + r" \\")
        lines += [r"\bottomrule", r"\end{tabular}"]
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def _latex_value(cell: PaperCell, digits: int) -> str:
    if not np.isfinite(cell.mean):
        return "--"
    mean = fmt(cell.mean, digits)
    mean = rf"\textbf{{{mean}}}" if cell.significantly_best else mean
    if not (np.isfinite(cell.lower) and np.isfinite(cell.upper)):
        return mean
    return rf"{mean} {{\scriptsize [{fmt(cell.lower, digits)}, {fmt(cell.upper, digits)}]}}"


#: The columns of :func:`csv_table`, in order.
CSV_COLUMNS = (
    "cell",
    "method",
    "metric",
    "mean",
    "lower",
    "upper",
    "n",
    "best_mean",
    "significantly_best",
)


def csv_table(table: PaperTable) -> str:
    """One row per cell, method and metric (:data:`CSV_COLUMNS`; ``cell`` is empty unless
    the results vary another dim), full precision, for a spreadsheet or a plotting script."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for name, values in table.cells.items():
        for method in table.methods:
            for metric in table.metrics:
                cell = values[(method, metric)]
                writer.writerow(
                    [
                        name,
                        method,
                        metric,
                        repr(cell.mean),
                        repr(cell.lower),
                        repr(cell.upper),
                        cell.n,
                        cell.best,
                        cell.significantly_best,
                    ]
                )
    return out.getvalue()


def render_table(table: PaperTable, fmt_name: str) -> str:
    """:func:`latex_table` or :func:`csv_table` by the name of the format."""
    if fmt_name == "latex":
        return latex_table(table)
    if fmt_name == "csv":
        return csv_table(table)
    raise ValueError(f"table format must be one of {', '.join(TABLE_FILES)}, got {fmt_name!r}")


def _head(metric: str) -> str:
    """How a table heads ``metric``: its record's label (:attr:`MetricInfo.label`), else its
    name."""
    info = metric_info(metric)
    return info.label if info is not None and info.label else metric
