"""Tables and PNG plots (matplotlib Agg) of severity results.

Severity results have ``score`` over seed × method × metric × severity × model [× dataset];
tables and plots show the mean over seeds (failed and excluded seeds skipped), plots a band of
± one standard deviation across seeds, and results with a ``dataset`` dimension get one section
per dataset.

- :func:`format_level_table` — per-level metric of every (model, κ), with ID accuracy/AUROC.
- :func:`plot_levels` — the metric vs. severity level, one panel per model, one line per κ.
- :func:`plot_improvement` — each κ's improvement over softmax per level: box plots across
  models, or the one model's line.
- :func:`plot_correlation` — Spearman ρ of ID accuracy / ID AUROC with the metric, per level.
- :func:`write_severity_report` — all of the above into a folder with a Markdown summary.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import xarray as xr
from matplotlib.axes import Axes

from oodsim.protocols.severity import analysis
from oodsim.protocols.severity.analysis import per_dataset, seed_mean
from oodsim.report.figures import (
    BEST_FEW,
    CONTEXT_STYLE,
    MAX_COLOURED,
    best_few,
    figure,
    legend,
    metric_label,
    panels,
    require_ood,
    save,
    suptitle,
)
from oodsim.report.folder import write_file
from oodsim.report.hooks import ReportHooks
from oodsim.report.styles import method_detectors, method_styles
from oodsim.report.tables import markdown_row
from oodsim.results.access import as_score, method_names, scored, scored_seeds


def _levels(results: xr.Dataset) -> list[str]:
    return [str(s) for s in results["severity"].values]


def _n_seeds(results: xr.Dataset) -> int:
    """Seeds that enter the means (all seeds minus failed and excluded ones)."""
    if "seed" not in results.dims:
        return 1
    if "failure" in results:
        return int(scored_seeds(results).sum())
    return results.sizes["seed"]


def _over_seeds(results: xr.Dataset) -> str:
    n = _n_seeds(results)
    return f"mean over {n} seed{'s' if n != 1 else ''}"


def format_level_table(results: xr.Dataset, metric: str = "auroc", digits: int = 3) -> str:
    """Plain-text table: one row per ([dataset,] model, κ), one column per level (the mean over
    seeds), then the mean ID accuracy and ID AUROC."""
    score = seed_mean(as_score(results).sel(metric=metric))
    accuracy = seed_mean(scored(results, "id_accuracy"))
    id_auroc = seed_mean(scored(results, "id_auroc"))
    has_dataset = "dataset" in score.dims
    head = (["dataset"] if has_dataset else []) + ["model", "method", *_levels(results)]
    head += ["ID acc", "ID AUROC"]
    rows = []
    for label, _ in per_dataset(results):
        where = {"dataset": label} if has_dataset else {}
        for model in score["model"].values:
            for method in score["method"].values:
                cell = {**where, "model": model}
                values = score.sel(cell).sel({"method": method}).transpose("severity").values
                rows.append(
                    ([label] if has_dataset else [])
                    + [str(model), str(method)]
                    + [f"{v:.{digits}f}" for v in values]
                    + [
                        f"{float(accuracy.sel(cell)):.3f}",
                        f"{float(id_auroc.sel(cell).sel({'method': method})):.3f}",
                    ]
                )
    widths = [max(len(str(r[k])) for r in [head, *rows]) for k in range(len(head))]
    lines = ["  ".join(str(c).rjust(w) for c, w in zip(line, widths)) for line in [head, *rows]]
    title = f"{metric} by severity level (0 = easiest), {_over_seeds(results)}"
    return title + "\n" + "\n".join(lines)


def plot_levels(results: xr.Dataset, path: str | Path, metric: str = "auroc") -> Path:
    """Metric vs. severity level (mean over seeds, ± one standard deviation): one panel per
    model (and dataset), one line per κ in the report's shared styles, with more than five
    κ the best four by their mean over the levels in colour and the others grey behind them;
    the classifier's ID accuracy is named in each panel's title."""
    score = as_score(results).sel(metric=metric)
    require_ood(score, [metric], "a severity plot")
    detectors = method_detectors(results)
    styles = method_styles(score["method"].values, detectors)
    x = np.arange(score.sizes["severity"])
    coloured: set[str] = set()

    def draw(ax: Axes, labels: dict[str, object], cell: xr.DataArray) -> None:
        means = {m: seed_mean(cell.sel({"method": m})).transpose("severity").values for m in styles}
        over_levels = {
            m: float(np.nanmean(v)) if np.isfinite(v).any() else np.nan for m, v in means.items()
        }
        best = best_few(over_levels, metric)
        for method in styles:
            if method not in best:
                ax.plot(x, means[method], zorder=1, **CONTEXT_STYLE)
        for method in best:
            values = cell.sel({"method": method})
            ax.plot(x, means[method], markersize=4, zorder=3, **styles[method])
            if "seed" in values.dims and _n_seeds(results) > 1:
                std = values.std("seed", skipna=True).transpose("severity").values
                mean = means[method]
                colour = styles[method]["color"]
                ax.fill_between(x, mean - std, mean + std, color=colour, alpha=0.12, lw=0)
        coloured.update(best)
        accuracy = float(seed_mean(scored(results, "id_accuracy").sel(labels)))
        name = f"{labels['dataset']}: {labels['model']}" if "dataset" in labels else labels["model"]
        ax.set_title(f"{name} (ID accuracy {accuracy:.3f})", fontsize=9)
        ax.set_xticks(x, _levels(results))
        ax.set_xlabel("severity level")
        ax.set_ylabel(f"{metric_label(metric)},\n{_over_seeds(results)}")
        ax.grid(alpha=0.3)

    fig, _ = panels(score, ("seed", "method", "severity"), draw)
    legend(fig, styles, detectors=detectors, shown=coloured)
    band = ", band: ± one standard deviation" if _n_seeds(results) > 1 else ""
    few = f"; the best {BEST_FEW} in colour, the others grey" if len(styles) > MAX_COLOURED else ""
    suptitle(fig, f"{metric} by severity level ({_over_seeds(results)}{band}{few})")
    return save(fig, path)


def _models(results: xr.Dataset) -> str:
    """``"across 4 models"``, or ``"model resnet"`` when there is one: what a statistic over
    models is taken over, in words that fit the results."""
    n = results.sizes.get("model", 1)
    return f"across {n} models" if n > 1 else f"model {results['model'].values.item()}"


def _one_dataset(results: xr.Dataset) -> None:
    if "dataset" in results.dims:
        raise ValueError("pick one dataset first: results.sel(dataset=...) or per_dataset()")


def plot_improvement(
    results: xr.Dataset, path: str | Path, baseline: str = "msp", metric: str = "auroc"
) -> Path:
    """Per κ (panel): box plot over models of its improvement over ``baseline`` (each model's
    mean over seeds) at each level; with one model, that model's line. Results of one
    dataset."""
    _one_dataset(results)
    delta = seed_mean(analysis.improvement(results, baseline, metric))
    styles = method_styles(results["method"].values, method_detectors(results))
    levels = _levels(results)

    def draw(ax: Axes, labels: dict[str, object], cell: xr.DataArray) -> None:
        values = cell.transpose("severity", "model").values
        style = styles[str(labels["method"])]
        if values.shape[1] == 1:  # one model: its line, not boxes of one value
            ax.plot(levels, values[:, 0], markersize=5, **style)
        else:
            _boxes(ax, values, levels, style)
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_title(f"{labels['method']} vs. {baseline}", fontsize=9)
        ax.set_xlabel("severity level")
        ax.set_ylabel(f"improvement in {metric_label(metric)}", fontsize=8)
        ax.grid(alpha=0.3)

    fig, _ = panels(delta, ("severity", "model"), draw)
    suptitle(fig, f"Improvement in {metric} over {baseline} per level, {_models(results)}")
    return save(fig, path)


def _boxes(ax: Axes, values: np.ndarray, levels: list[str], style: dict) -> None:
    """Box plots of the models' improvements (rows: levels), filled in the method's colour,
    the mean marked with its marker."""
    mean = {"marker": style["marker"], "markerfacecolor": style["color"], "markeredgecolor": "k"}
    boxes = ax.boxplot(
        [row[np.isfinite(row)] for row in values],
        tick_labels=levels,
        showmeans=True,
        patch_artist=True,
        meanprops=mean,
        medianprops={"color": "k"},
    )
    for box in boxes["boxes"]:
        box.set(facecolor=style["color"], alpha=0.4)


def plot_correlation(
    results: xr.Dataset, path: str | Path, metric: str = "auroc", method: str | None = None
) -> Path:
    """Spearman ρ across models of ID accuracy and of ID AUROC with ``metric``, per level.
    Results of one dataset."""
    _one_dataset(results)
    fig, (ax,) = figure(1, width=6.0)
    method = method or str(results["method"].values[0])
    x = np.arange(results.sizes["severity"])
    for predictor in analysis.PREDICTORS:
        rho = analysis.correlation(results, predictor, metric)["rho"].sel({"method": method})
        ax.plot(x, rho.values, marker="o", ms=3, label=predictor.replace("_", " "))
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_ylim(-1.05, 1.05)
    ax.set_xticks(x, _levels(results))
    ax.set_xlabel("severity level")
    ax.set_ylabel(f"Spearman ρ with {metric_label(metric)}", fontsize=8)
    ax.set_title(f"{method}, {results.sizes['model']} models", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return save(fig, path)


def _markdown(table: xr.DataArray, name: str, digits: int = 3) -> str:
    """A (method, severity) array as a Markdown table."""
    levels = [str(s) for s in table["severity"].values]
    lines = [markdown_row([name, *levels]), "|---|" + "---:|" * len(levels)]
    for method, row in zip(table["method"].values, table.transpose("method", "severity").values):
        lines.append(markdown_row([method, *(f"{v:.{digits}f}" for v in row)]))
    return "\n".join(lines)


def _section(
    results: xr.Dataset, folder: Path, prefix: str, metric: str, baseline: str, figures: bool
) -> tuple[list[str], list[Path]]:
    """The tables and plots of one dataset in ``folder / prefix``: their Markdown lines and
    the paths of the plots (none without ``figures``)."""
    parts: list[str] = []
    written: list[Path] = []

    def plot(name: str, alt: str, draw: Callable[[Path], Path]) -> None:
        if figures:
            written.append(draw(folder / f"{prefix}{metric}_{name}.png"))
            parts.extend([*([""] if parts else []), f"![{alt}]({prefix}{metric}_{name}.png)"])

    plot("by_level", f"{metric} by level", lambda path: plot_levels(results, path, metric))
    methods = method_names(results)
    if baseline in methods and len(methods) > 1:
        summary = analysis.improvement_summary(results, baseline, metric)
        median = "median " if results.sizes["model"] > 1 else ""
        parts += ["", f"### Improvement over {baseline} ({median}{_models(results)})", ""]
        parts.append(_markdown(summary["median"], "method"))
        plot(
            "improvement",
            "improvement",
            lambda path: plot_improvement(results, path, baseline, metric),
        )
    if results.sizes["model"] >= 3:
        for predictor in analysis.PREDICTORS:
            rho = analysis.correlation(results, predictor, metric)["rho"]
            parts += ["", f"### Spearman ρ across models: {predictor} vs. {metric}", ""]
            parts.append(_markdown(rho, "method"))
        plot("correlation", "correlation", lambda path: plot_correlation(results, path, metric))
    return parts, written


def write_severity_files(
    results: xr.Dataset,
    folder: str | Path,
    *,
    metric: str = "auroc",
    baseline: str = "msp",
    figures: bool = True,
) -> list[Path]:
    """:func:`write_severity_report`, returning every path it wrote (the summary last)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    parts = [f"# Severity benchmark: {results.attrs.get('experiment', '')}", ""]
    parts += ["```", format_level_table(results, metric), "```", ""]
    written = []
    for label, part in per_dataset(results):
        if label:
            parts += [f"## {label}", ""]
        prefix = f"{label}/" if label else ""
        lines, paths = _section(part, folder, prefix, metric, baseline, figures)
        parts += [*lines, ""]
        written += paths
    text = "\n".join(parts) + "\n"
    path = write_file(
        folder / "severity_summary.md", lambda t: t.write_text(text, encoding="utf-8")
    )
    return [*written, path]


def write_severity_report(
    results: xr.Dataset, folder: str | Path, *, metric: str = "auroc", baseline: str = "msp"
) -> Path:
    """PNG plots and ``severity_summary.md`` in ``folder`` (plots of each dataset in a
    sub-folder named by its label); returns the summary's path."""
    return write_severity_files(results, folder, metric=metric, baseline=baseline)[-1]


def _level_table(results: xr.Dataset, metric: str) -> str:
    return format_level_table(results, metric)


def _severity_files(
    results: xr.Dataset, folder: Path, metric: str, figures: bool
) -> tuple[list[Path], list[str]]:
    written = write_severity_files(results, folder, metric=metric, figures=figures)
    lines = [
        "",
        "## Severity levels",
        "",
        f"See [{written[-1].name}]({folder.name}/{written[-1].name}).",
    ]
    return written, lines


#: the report of severity results (``SeverityProtocol.report``): the per-level table, and the
#: per-level views in the report folder's ``severity/`` (the protocol's section)
REPORT = ReportHooks(_level_table, files=_severity_files)
