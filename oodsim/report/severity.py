"""Tables and PNG plots (matplotlib Agg) of severity results.

- :func:`format_level_table` — per-level metric of every (model, κ), with ID accuracy/AUROC.
- :func:`plot_levels` — the metric vs. severity level, one panel per model, one line per κ.
- :func:`plot_improvement` — box plots across models of each κ's improvement over softmax.
- :func:`plot_correlation` — Spearman ρ of ID accuracy / ID AUROC with the metric, per level.
- :func:`write_severity_report` — all of the above into a folder with a Markdown summary.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import xarray as xr
from matplotlib.figure import Figure

from oodsim.protocols import severity_analysis as analysis

_NCOLS = 3


def _figure(n_panels: int, width: float = 4.8, height: float = 3.4) -> tuple[Figure, list]:
    ncols = min(_NCOLS, max(n_panels, 1))
    nrows = math.ceil(max(n_panels, 1) / ncols)
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    return fig, [fig.add_subplot(nrows, ncols, i + 1) for i in range(max(n_panels, 1))]


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=100)
    return path


def _levels(results: xr.Dataset) -> list[str]:
    return [str(s) for s in results["severity"].values]


def format_level_table(results: xr.Dataset, metric: str = "auroc", digits: int = 3) -> str:
    """Plain-text table: one row per (model, κ), one column per level, then ID acc / AUROC."""
    score = results["score"].sel(metric=metric).transpose("model", "method", "severity")
    levels = _levels(results)
    head = ["model", "method", *levels, "ID acc", "ID AUROC"]
    rows = []
    for i, model in enumerate(score["model"].values):
        for j, method in enumerate(score["method"].values):
            values = [f"{v:.{digits}f}" for v in score.values[i, j]]
            accuracy = float(results["id_accuracy"].values[i])
            id_auroc = float(results["id_auroc"].values[i, j])
            rows.append([str(model), str(method), *values, f"{accuracy:.3f}", f"{id_auroc:.3f}"])
    widths = [max(len(str(r[k])) for r in [head, *rows]) for k in range(len(head))]
    lines = ["  ".join(str(c).rjust(w) for c, w in zip(line, widths)) for line in [head, *rows]]
    return f"{metric} by severity level (0 = easiest)\n" + "\n".join(lines)


def plot_levels(results: xr.Dataset, path: str | Path, metric: str = "auroc") -> Path:
    """Metric vs. severity level: one panel per model, one line per κ."""
    score = results["score"].sel(metric=metric).transpose("model", "method", "severity")
    fig, axes = _figure(score.sizes["model"])
    x = np.arange(score.sizes["severity"])
    for i, (ax, model) in enumerate(zip(axes, score["model"].values)):
        for j, method in enumerate(score["method"].values):
            ax.plot(x, score.values[i, j], marker="o", ms=3, label=str(method))
        accuracy = float(results["id_accuracy"].values[i])
        ax.set_title(f"{model} (ID acc {accuracy:.3f})", fontsize=9)
        ax.set_xticks(x, _levels(results))
        ax.set_xlabel("severity level")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, path)


def plot_improvement(
    results: xr.Dataset, path: str | Path, baseline: str = "msp", metric: str = "auroc"
) -> Path:
    """Per κ (panel): box plot over models of its improvement over ``baseline`` at each level."""
    delta = analysis.improvement(results, baseline, metric).transpose("method", "severity", "model")
    fig, axes = _figure(delta.sizes["method"])
    levels = _levels(results)
    for ax, method, values in zip(axes, delta["method"].values, delta.values):
        data = [row[np.isfinite(row)] for row in values]
        ax.boxplot(data, tick_labels=levels, showmeans=True)
        ax.axhline(0.0, color="grey", lw=0.8)
        n = delta.sizes["model"]
        ax.set_title(f"{method} vs. {baseline} ({n} model{'s' if n != 1 else ''})", fontsize=9)
        ax.set_xlabel("severity level")
        ax.set_ylabel(f"{metric} improvement")
        ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_correlation(
    results: xr.Dataset, path: str | Path, metric: str = "auroc", method: str | None = None
) -> Path:
    """Spearman ρ across models of ID accuracy and of ID AUROC with ``metric``, per level."""
    fig, (ax,) = _figure(1, width=6.0)
    method = method or str(results["method"].values[0])
    x = np.arange(results.sizes["severity"])
    for predictor in analysis.PREDICTORS:
        rho = analysis.correlation(results, predictor, metric)["rho"].sel({"method": method})
        ax.plot(x, rho.values, marker="o", ms=3, label=predictor.replace("_", " "))
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_ylim(-1.05, 1.05)
    ax.set_xticks(x, _levels(results))
    ax.set_xlabel("severity level")
    ax.set_ylabel(f"Spearman ρ with {metric}")
    ax.set_title(f"{method}, {results.sizes['model']} models", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _markdown(table: xr.DataArray, name: str, digits: int = 3) -> str:
    """A (method, severity) array as a Markdown table."""
    levels = [str(s) for s in table["severity"].values]
    lines = [f"| {name} | " + " | ".join(levels) + " |", "|---|" + "---:|" * len(levels)]
    for method, row in zip(table["method"].values, table.transpose("method", "severity").values):
        lines.append(f"| {method} | " + " | ".join(f"{v:.{digits}f}" for v in row) + " |")
    return "\n".join(lines)


def write_severity_report(
    results: xr.Dataset, folder: str | Path, *, metric: str = "auroc", baseline: str = "msp"
) -> Path:
    """PNG plots and ``severity_summary.md`` in ``folder``; returns the summary's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    parts = [f"# Severity benchmark: {results.attrs.get('experiment', '')}", ""]
    parts += ["```", format_level_table(results, metric), "```", ""]
    plot_levels(results, folder / f"{metric}_by_level.png", metric)
    parts.append(f"![{metric} by level]({metric}_by_level.png)")
    methods = [str(m) for m in results["method"].values]
    if baseline in methods and len(methods) > 1:
        plot_improvement(results, folder / f"{metric}_improvement.png", baseline, metric)
        summary = analysis.improvement_summary(results, baseline, metric)
        parts += ["", f"## Improvement over {baseline} (median across models)", ""]
        parts += [_markdown(summary["median"], "method"), ""]
        parts.append(f"![improvement]({metric}_improvement.png)")
    if results.sizes["model"] >= 3:
        plot_correlation(results, folder / f"{metric}_correlation.png", metric)
        for predictor in analysis.PREDICTORS:
            rho = analysis.correlation(results, predictor, metric)["rho"]
            parts += ["", f"## Spearman ρ across models: {predictor} vs. {metric}", ""]
            parts.append(_markdown(rho, "method"))
        parts += ["", f"![correlation]({metric}_correlation.png)"]
    path = folder / "severity_summary.md"
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return path
