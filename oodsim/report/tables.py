"""Text tables of evaluation results, Markdown or aligned plain text: estimates with their
intervals (:func:`format_summary_table`, printed by the CLI), win probabilities, seeds needed to
separate two methods, variance components by class split.

Rows split by every dim other than method and metric that varies (ood / severity / dataset /
model); dims of one label are named once, in a note (:func:`fixed_note`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xarray as xr

from oodsim.report._common import method_names
from oodsim.report.provenance import seed_exclusions
from oodsim.results import NO_SEVERITY
from oodsim.stats import (
    as_score,
    estimate,
    required_simulations_table,
    variance_components_table,
    win_probabilities,
)
from oodsim.stats._common import cell_label, iter_cells, metrics_of, ood_metrics


def fmt(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` decimals; a dash when it is missing or not finite."""
    return "–" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def render(header: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> str:
    """A Markdown table or an aligned plain-text table."""
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    row_format = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [row_format.format(*header), row_format.format(*("-" * w for w in widths))]
    lines += [row_format.format(*row) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def varying(da: xr.DataArray, skip: Sequence[str]) -> list[str]:
    """Dims (other than ``skip``) with more than one label: the ones worth a table column."""
    return [d for d in da.dims if d not in skip and da.sizes[d] > 1]


def fixed_note(da: xr.DataArray, skip: Sequence[str]) -> str:
    """``"model=resnet50"``-style note for dims of size one, which tables leave out; the
    ``severity`` label of protocols without levels ("all") says nothing and is left out too."""
    fixed = {
        d: da[d].values[0].item()
        for d in da.dims
        if d not in skip and da.sizes[d] == 1 and not (d == "severity" and _no_levels(da))
    }
    return cell_label(fixed)


def _no_levels(da: xr.DataArray) -> bool:
    return [str(v) for v in da["severity"].values] == [NO_SEVERITY]


_INTERVALS = {
    "t": "Student-t interval",
    "t (logit scale)": "Student-t interval on the logit scale",
    "bootstrap": "bootstrap percentile interval",
}


def interval_name(est: xr.Dataset) -> str:
    """What :func:`oodsim.stats.estimate` computed, in words (``"95% Student-t interval"``)."""
    kind = str(est.attrs.get("interval", "t"))
    return f"{est.attrs['confidence']:.0%} {_INTERVALS.get(kind, kind + ' interval')}"


def estimate_table(est: xr.Dataset, metrics: Sequence[str], markdown: bool, digits: int) -> str:
    """Mean [lower, upper] of ``metrics`` per method (and per varying ood / severity / ...)."""
    outer = varying(est["mean"], ("method", "metric"))
    header = [*outer, "method", *metrics, "n"]
    rows = []
    for labels, cell in iter_cells(est["mean"], ("method", "metric")):
        for method in method_names(cell):
            where = {**labels, "method": method}
            row = [str(labels[d]) for d in outer] + [method]
            for name in metrics:
                e = est.sel({**where, "metric": name})
                row.append(
                    f"{fmt(e['mean'].item(), digits)} "
                    f"[{fmt(e['lower'].item(), digits)}, {fmt(e['upper'].item(), digits)}]"
                )
            n = est["n"].sel(where)
            row.append(
                f"{int(n.min())}" if n.min() == n.max() else f"{int(n.min())}-{int(n.max())}"
            )
            rows.append(row)
    return render(header, rows, markdown)


def format_summary_table(
    results: xr.Dataset | xr.DataArray, confidence: float = 0.95, digits: int = 3
) -> str:
    """Plain-text table of mean [confidence interval] per method × metric (rows also split
    by ood / severity / dataset / model when they vary); the CLI prints it."""
    score = as_score(results)
    note = fixed_note(score, ("seed", "method", "metric"))
    est = estimate(results, confidence=confidence)
    title = f"Mean [{interval_name(est)}] over {score.sizes['seed']} seeds" + (
        f" ({note})" if note else ""
    )
    table = estimate_table(est, metrics_of(score, None), markdown=False, digits=digits)
    return title + "\n" + table


def win_table(
    results: xr.Dataset | xr.DataArray, k: int, n_draws: int, rng: object, pairing: str
) -> str:
    """Win probabilities of every OOD metric (``accuracy`` is the same for every detector)."""
    score = as_score(results)
    wp = win_probabilities(
        results, ood_metrics(score), k=k, n_draws=n_draws, rng=rng, pairing=pairing
    )
    outer = varying(wp, ("method", "metric"))
    metrics = metrics_of(wp, None)
    header = [*outer, "method", *metrics]
    rows = []
    for labels, cell in iter_cells(wp, ("method", "metric")):
        for method in method_names(score):
            values = [cell.sel({"method": method, "metric": name}).item() for name in metrics]
            rows.append([str(labels[d]) for d in outer] + [method] + [fmt(v, 3) for v in values])
    return render(header, rows, markdown=True)


def required_table(results: xr.Dataset | xr.DataArray, metric: str, alpha: float) -> str:
    table = required_simulations_table(results, metric, alpha=alpha)
    parts = []
    for labels, cell in iter_cells(table, ("method", "versus")):
        methods = method_names(cell)
        values = cell.transpose("method", "versus").values
        rows = [
            [a] + ["" if not np.isfinite(v) else str(int(v)) for v in row]
            for a, row in zip(methods, values, strict=True)
        ]
        heading = f"*{cell_label(labels)}*\n\n" if labels else ""
        parts.append(heading + render(["", *methods], rows, markdown=True))
    return "\n\n".join(parts)


def variance_table(results: xr.Dataset, confidence: float) -> str | None:
    """The ANOVA table of the OOD metrics by class split; None when the split does not vary,
    a note when no split has two seeds (nothing to estimate the within-split variance from)."""
    if "class_split" not in results.coords or results["class_split"].dims != ("seed",):
        return None
    excluded = [seed for group in seed_exclusions(results).values() for seed, _ in group]
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
    outer = varying(vc["icc"], ("method", "metric"))
    header = [*outer, "method", "metric", "sd between", "sd within", "ICC [CI]", "p (F)"]
    rows = []
    for labels, _ in iter_cells(vc["icc"], ()):
        v = vc.sel(labels)
        icc = (
            f"{fmt(v['icc'].item(), 2)} "
            f"[{fmt(v['icc_lower'].item(), 2)}, {fmt(v['icc_upper'].item(), 2)}]"
        )
        rows.append(
            [str(labels[d]) for d in outer]
            + [str(labels["method"]), str(labels["metric"])]
            + [
                fmt(np.sqrt(v["sigma2_between"].item()), 4),
                fmt(np.sqrt(v["sigma2_within"].item()), 4),
                icc,
                f"{v['p_value'].item():.2g}",
            ]
        )
    return render(header, rows, markdown=True)
