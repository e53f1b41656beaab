"""The report of evaluation results: :func:`write_report` draws the figures
(:mod:`oodsim.report.plots`, :mod:`oodsim.report.decisions`) and assembles ``summary.md`` from
what was run (:mod:`oodsim.report.provenance`) and the tables (:mod:`oodsim.report.tables`,
:mod:`oodsim.report.comparisons`, :mod:`oodsim.report.sources`): estimates, win probabilities,
paired comparisons, power, variance components, the stopping decision (the text is
:mod:`oodsim.report.summary_text`, what it shares with the figures
:mod:`oodsim.report.analyses`).

Everything goes into a folder of its own (``results/foo.zarr`` → ``results/foo.report``,
:func:`oodsim.report.folder.report_folder`) marked by ``.oodsim-report.json``: it refreshes a
report of the same results and refuses any other folder unless ``overwrite=True``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from oodsim.metrics import is_ood_metric
from oodsim.report.analyses import Analyses, ReportOptions, resamples_one_test_set, run_analyses
from oodsim.report.comparisons import (
    plot_paired_differences,
)
from oodsim.report.decisions import plot_win_probability
from oodsim.report.folder import (
    FIGURE_FILES,
    SUMMARY,
    claim,
    finish,
    marker_for,
    section,
    write_file,
)
from oodsim.report.hooks import report_hooks
from oodsim.report.paper import TABLE_FILES, paper_table, render_table
from oodsim.report.plots import plot_distributions, plot_forest, plot_running_mean
from oodsim.report.selective import RISK_COVERAGE, plot_risk_coverage
from oodsim.report.sources import plot_variance_sources
from oodsim.report.summary_text import summary_text
from oodsim.results.access import default_metric, n_scored, ood_metrics
from oodsim.stats import PAIRINGS, as_score

#: write_report draws every metric's distribution and forest plot only up to this many panels,
#: and this many rows (a row per method in each panel); beyond, the main metric's alone.
_MAX_PANELS = 24
_MAX_ROWS = 96


#: write_report's figures show at most this many cells (ood × severity × model × dataset);
#: beyond, evenly spaced severity levels (severity/ has every level).
_MAX_CELLS = 12


#: what the summary says where its figures would be, when none were drawn
NO_FIGURES = (
    "Not drawn (`figures=False`, `oodsim report --no-figures`); the tables hold every number."
)
#: ... and when no seed has scores to draw (every one failed or was excluded)
NOTHING_TO_DRAW = (
    "Not drawn: no seed has scores (every seed failed or was excluded, see above), so every "
    "figure would be empty."
)


#: ``progress(step)``: told each step of a report as it starts ("drawing figure 3 of 6: forest")
Progress = Callable[[str], object]


def _figure_plan(
    results: xr.Dataset | xr.DataArray, out: Path, opts: ReportOptions, done: Analyses
) -> list[tuple[str, Callable[[], Path]]]:
    """The report's figures as (name, draw) in the order the summary shows them, the forest
    plot first (none without an OOD metric; no win probability with < k seeds), of the cells
    of ``results`` (the shown ones); ``done`` holds the analyses of all cells."""
    metric, k = opts.metric, opts.k
    score = as_score(results)
    ood = ood_metrics(score)
    if metric is None:
        return []
    n_panels = len(ood) * _n_cells(score)
    few = n_panels <= _MAX_PANELS and n_panels * score.sizes["method"] <= _MAX_ROWS
    shown_metrics = ood if few else [metric]
    file = {name: out / FIGURE_FILES[name] for name in FIGURE_FILES}
    distributions = (
        "distributions",
        lambda: plot_distributions(results, file["distributions"], shown_metrics),
    )
    if resamples_one_test_set(results):  # the spread of the replicates only
        return [distributions]
    plan = [("forest", lambda: plot_forest(results, file["forest"], shown_metrics)), distributions]
    shown = {d: score[d].values for d in score.dims if d not in ("seed", "method", "metric")}

    def of_shown(analysis: xr.Dataset) -> xr.Dataset:
        return analysis.sel({d: v for d, v in shown.items() if d in analysis.dims})

    if done.comparison is not None:
        comparison = of_shown(done.comparison)
        plan.append(
            (
                "paired_differences",
                lambda: plot_paired_differences(
                    results,
                    file["paired_differences"],
                    metric,
                    opts.alpha,
                    opts.adjust,
                    comparison=comparison,
                ),
            )
        )
    plan.append(("running_mean", lambda: plot_running_mean(results, file["running_mean"], metric)))
    if done.wins is not None:  # a k-seed experiment needs k seeds to draw from
        pairing = "both" if len(opts.pairings) > 1 else opts.pairings[0]
        wins = of_shown(done.wins)
        plan.append(
            (
                "win_probability",
                lambda: plot_win_probability(
                    results,
                    file["win_probability"],
                    metric,
                    k,
                    opts.n_draws,
                    opts.rng,
                    pairing,
                    wins=wins,
                ),
            )
        )
    if isinstance(results, xr.Dataset) and RISK_COVERAGE in results:
        plan.append(("risk_coverage", lambda: plot_risk_coverage(results, file["risk_coverage"])))
    if done.sources is not None and isinstance(results, xr.Dataset):
        sources = done.sources
        plan.append(
            (
                "variance_sources",
                lambda: plot_variance_sources(
                    results, file["variance_sources"], metric, components=sources
                ),
            )
        )
    return plan


def _figures(
    results: xr.Dataset | xr.DataArray,
    out: Path,
    opts: ReportOptions,
    done: Analyses,
    progress: Progress,
) -> list[Path]:
    """Draw the figures of :func:`_figure_plan`, telling ``progress`` each one."""
    plan = _figure_plan(results, out, opts, done)
    written = []
    for i, (name, draw) in enumerate(plan, 1):
        progress(f"drawing figure {i} of {len(plan)}: {name}")
        written.append(draw())
    return written


def _n_cells(score: xr.DataArray) -> int:
    """Panels of a per-cell figure: labels of every dim but seed, method and metric."""
    return int(
        np.prod([n for d, n in score.sizes.items() if d not in ("seed", "method", "metric")])
    )


def _shown(results: xr.Dataset | xr.DataArray) -> tuple[xr.Dataset | xr.DataArray, str]:
    """The results the report's figures show, and a note when that is not all of them: up to
    :data:`_MAX_CELLS` panels, thinned to evenly spaced severity levels (first and last kept)."""
    score = as_score(results)
    n_levels = score.sizes.get("severity", 1)
    if _n_cells(score) <= _MAX_CELLS or n_levels < 3:
        return results, ""
    keep = max(1, min(n_levels, _MAX_CELLS * n_levels // _n_cells(score)))
    index = np.unique(np.linspace(0, n_levels - 1, max(keep, 2)).round().astype(int))
    levels = ", ".join(str(score["severity"].values[i]) for i in index)
    note = f"The figures show severity levels {levels} of {n_levels}; severity/ shows every level."
    return results.isel(severity=index), note


def write_report(
    results: xr.Dataset | xr.DataArray,
    out_dir: str | Path,
    metric: str | None = None,
    k: int = 5,
    alpha: float = 0.05,
    n_draws: int = 10_000,
    rng: np.random.Generator | int | None = 0,
    pairing: str = "both",
    *,
    adjust: str | None = "holm",
    overwrite: bool = False,
    source: str | Path | None = None,
    figures: bool = True,
    tables: Sequence[str] = (),
    progress: Progress | None = None,
) -> Path:
    """Write all plots (the forest plot of the estimates first) and ``summary.md`` (what was
    run, which seeds were excluded and why, estimates, win probabilities, paired comparisons,
    seeds needed for 80% power at fixed differences, variance components by source, stopping
    decision) into the folder ``out_dir``; return the path of ``summary.md``. A part that
    would be empty or say nothing at this number of seeds is one line, ``n too small:
    <reason>.``

    ``metric`` (default auroc) drives the per-metric plots, the paired comparisons (adjusted
    over every pair and cell by ``adjust``: ``"holm"``, ``"bh"`` or None) and the power table;
    an accuracy-type metric, the same for every detector, is replaced by the first OOD metric.
    Win probabilities cover the OOD metrics only; ``pairing`` is ``"both"`` (default: the
    independent and the paired draws side by side, each with a bootstrap interval over the
    seeds, :func:`oodsim.stats.win.win_probability_intervals`) or one of them.
    ``source``: the results' path, named in the summary. ``figures=False`` writes the
    Markdown alone (every table, no PNG): seconds instead of about two per figure. Results
    without a scored seed (every one failed or excluded) get no figure, and a line saying why.
    ``tables``: any of ``"latex"`` and ``"csv"``, the estimates as ``table.tex`` (booktabs)
    and ``table.csv`` (:mod:`oodsim.report.paper`; bold only where a method is significantly
    best after ``adjust``).

    ``out_dir`` gets a :data:`~oodsim.report.folder.REPORT_MARKER` naming the results. A folder
    holding a report of the same results (same spec key) is refreshed: files of the old report
    that the new one does not write are removed. Any other non-empty folder raises
    :class:`~oodsim.report.folder.ReportFolderError` unless ``overwrite``; then the files of
    the report there are written over, and nothing else is replaced or deleted. A folder
    holding a file the report writes (``summary.md``, a figure) that its marker does not list
    is refused whatever ``overwrite`` says. A report interrupted before its end leaves
    a marker that says so (:func:`~oodsim.report.folder.is_complete`) and lists what it wrote.

    ``progress(step)``, optional, is told each step as it starts, in words ("computing win
    probabilities and paired comparisons", "drawing figure 3 of 6: distributions"), from the
    thread that writes the report.
    """
    unknown = [name for name in tables if name not in TABLE_FILES]
    if unknown:
        raise ValueError(f"tables must be among {', '.join(TABLE_FILES)}, got {unknown}")
    if pairing != "both" and pairing not in PAIRINGS:
        raise ValueError(f"pairing must be 'both' or one of {', '.join(PAIRINGS)}, got {pairing!r}")
    pairings = PAIRINGS if pairing == "both" else (pairing,)
    score = as_score(results)
    metric = metric or default_metric(score)
    if not is_ood_metric(metric):
        metric = next(iter(ood_metrics(score)), None)
    out = Path(out_dir)
    marker = marker_for(results, source)
    previous = claim(out, marker, overwrite)
    opts = ReportOptions(metric, k, alpha, n_draws, rng, pairings, adjust)
    tell = progress or (lambda step: None)
    shown, note = _shown(results)
    tell("computing win probabilities and paired comparisons")
    done = run_analyses(results, opts)  # once, for the tables and the figures alike
    drawn = figures and n_scored(score) > 0
    written = _figures(shown, out, opts, done, tell) if drawn else []
    tell(f"writing {SUMMARY}")
    lines = summary_text(results, opts, source, done, shown)
    lines += ["", "## Figures", ""]
    if drawn:
        lines += [note, ""] if note else []
        lines += [f"![{p.stem}]({p.name})" for p in written]
    else:
        lines.append(NOTHING_TO_DRAW if figures else NO_FIGURES)
    if tables and isinstance(results, xr.Dataset) and n_scored(score) > 0:
        tell("writing the tables for papers")
        table = paper_table(results, alpha=alpha, adjust=adjust)
        for name in tables:
            text = render_table(table, name)
            written.append(
                write_file(out / TABLE_FILES[name], lambda tmp, t=text: tmp.write_text(t, "utf-8"))
            )
        lines += ["", "## Tables for papers", ""]
        lines += [f"- [{TABLE_FILES[name]}]({TABLE_FILES[name]})" for name in tables]
        lines += ["", table.caption]
    files = report_hooks(results).files  # the protocol's own files (severity's levels)
    protocol = results.attrs.get("protocol")
    if isinstance(results, xr.Dataset) and files is not None and section(protocol):
        tell(f"writing the files of the {protocol} protocol")
        extra, extra_lines = files(results, out / section(protocol), metric or "auroc", drawn)
        written += extra
        lines += extra_lines
    text = "\n".join(lines) + "\n"
    path = write_file(out / SUMMARY, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    finish(out, marker, [*written, path], previous)
    return path
