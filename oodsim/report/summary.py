"""The report of evaluation results: :func:`write_report` draws the figures
(:mod:`oodsim.report.plots`, :mod:`oodsim.report.decisions`) and assembles ``summary.md`` from
what was run (:mod:`oodsim.report.provenance`) and the tables (:mod:`oodsim.report.tables`,
:mod:`oodsim.report.comparisons`, :mod:`oodsim.report.sources`): estimates, win probabilities,
paired comparisons, power, variance components, the stopping decision.

Everything goes into a folder of its own (``results/foo.zarr`` → ``results/foo.report``,
:func:`oodsim.report.folder.report_folder`) marked by ``.oodsim-report.json``: it refreshes a
report of the same results and refuses any other folder unless ``overwrite=True``.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np
import xarray as xr

from oodsim.report._common import default_metric, method_names, n_scored, stop_decision
from oodsim.report.comparisons import (
    adjust_name,
    paired_table,
    plot_paired_differences,
    power_of_results,
    power_table,
)
from oodsim.report.decisions import plot_win_probability
from oodsim.report.figures import metric_label
from oodsim.report.folder import claim, finish, marker_for, write_file
from oodsim.report.plots import plot_distributions, plot_forest, plot_running_mean
from oodsim.report.provenance import seed_lines, spec_lines
from oodsim.report.sources import has_design, plot_variance_sources, variance_sources_table
from oodsim.report.tables import (
    bootstrap_table,
    estimate_table,
    fixed_note,
    fmt,
    interval_name,
    render,
    too_small,
    variance_table,
    win_interval_note,
    win_intervals,
    win_table,
)
from oodsim.stats import PAIRINGS, as_score, compare, estimate, variance_components
from oodsim.stats._common import higher_is_better, is_ood_metric, metrics_of, ood_metrics

#: write_report draws every metric's distribution only up to this many panels.
_MAX_PANELS = 24

#: Paired comparisons and power from this many seeds on: with two, the paired t test has one
#: degree of freedom (t quantile 12.7) and power takes an SD of one degree of freedom as truth.
_MIN_PAIRED_SEEDS = 3

#: write_report's figures show at most this many cells (ood × severity × model × dataset);
#: beyond, evenly spaced severity levels (severity/ has every level).
_MAX_CELLS = 12


def _accuracy_line(est: xr.Dataset) -> list[str]:
    """The classifier's accuracy, once (it is the same for every detector of a seed)."""
    if "accuracy" not in metrics_of(est["mean"], None):
        return []
    acc = est.sel(metric="accuracy").isel(method=0)
    if acc["mean"].size == 1:
        value = (
            f"{fmt(acc['mean'].item(), 4)} [{fmt(acc['lower'].item(), 4)}, "
            f"{fmt(acc['upper'].item(), 4)}] over {int(acc['n'].item())} seeds"
        )
    else:
        means = acc["mean"].values
        value = f"{fmt(np.nanmin(means), 4)}-{fmt(np.nanmax(means), 4)} across cells"
    return [f"- classifier accuracy: {value} (the same for every detector; not plotted)"]


def _wins(results: xr.Dataset | xr.DataArray, opts: _Options) -> xr.Dataset | None:
    """Win probabilities of every OOD metric with their intervals (both pairings), or None
    where the report shows none (fewer than k seeds, no OOD metric, ImageNet-O replicates)."""
    score = as_score(results)
    ood = ood_metrics(score)
    if score.sizes["seed"] < opts.k or not ood or _resamples_one_test_set(results):
        return None
    return win_intervals(results, ood, opts.k, opts.n_draws, opts.rng, opts.pairings)


def _win_text(
    results: xr.Dataset | xr.DataArray,
    k: int,
    n_draws: int,
    rng: object,
    pairings: tuple[str, ...],
    ood: list[str],
    wins: xr.Dataset | None,
) -> str:
    """The win-probability section of ``summary.md``: what was drawn, then the table."""
    score = as_score(results)
    if score.sizes["seed"] < k:
        return too_small(f"the results have {score.sizes['seed']} seeds, fewer than k = {k}")
    if not ood or wins is None:
        return "Not computed: the results have no OOD metric."
    how = {
        "independent": f"each method averages its own {k} seeds, drawn apart from the others'",
        "paired": f"one draw of {k} seeds shared by all methods, as one {k}-seed experiment "
        "running every method on the same seeds",
    }
    ways = "\n".join(f"- {p}: {how[p]}" for p in pairings)
    skipped = [name for name in metrics_of(score, None) if name not in ood]
    note = f" {', '.join(skipped)}: left out, the same for every detector." if skipped else ""
    both = (
        ' The study\'s text can be read either way (docs/statistics.md, "Which k seeds"); '
        "the two differ when seeds shift every method alike."
        if len(pairings) > 1
        else ""
    )
    return (
        f"Probability that a method has the best mean in a {k}-seed experiment ({n_draws} "
        f"draws without replacement, ties split) "
        f"{win_interval_note(wins, score.sizes['seed'])}.{note}{both}\n\n{ways}\n\n"
        + win_table(results, k, n_draws, rng, wins=wins)
    )


@attrs.frozen
class _Options:
    """What :func:`write_report` was asked for, as every part of the report uses it."""

    metric: str | None  # None: the results have no OOD metric
    k: int
    alpha: float
    n_draws: int
    rng: np.random.Generator | int | None  # a seed restarts in every part (same numbers)
    pairings: tuple[str, ...]
    adjust: str | None = "holm"


@attrs.frozen
class _Analyses:
    """What the tables and the figures share, computed once: win probabilities, the paired
    comparison of every pair and the variance components of a designed run (None where the
    report shows none)."""

    wins: xr.Dataset | None
    comparison: xr.Dataset | None
    sources: xr.Dataset | None


#: what the summary says where its figures would be, when none were drawn
NO_FIGURES = (
    "Not drawn (`figures=False`, `oodsim report --no-figures`); the tables hold every number."
)


def _analyses(results: xr.Dataset | xr.DataArray, opts: _Options) -> _Analyses:
    comparable = opts.metric is not None and not _resamples_one_test_set(results)
    paired = comparable and n_scored(as_score(results)) >= _MIN_PAIRED_SEEDS
    comparison = (
        compare(results, opts.metric, alpha=opts.alpha, adjust=opts.adjust) if paired else None
    )
    designed = comparable and isinstance(results, xr.Dataset) and has_design(results)
    sources = variance_components(results, opts.metric) if designed else None
    return _Analyses(_wins(results, opts), comparison, sources)


def _figures(
    results: xr.Dataset | xr.DataArray, out: Path, opts: _Options, done: _Analyses
) -> list[Path]:
    """The report's PNGs, the forest plot first (none without an OOD metric; no win
    probability with < k seeds), of the cells of ``results`` (the shown ones); ``done`` holds
    the analyses of all cells."""
    metric, k = opts.metric, opts.k
    score = as_score(results)
    ood = ood_metrics(score)
    if metric is None:
        return []
    shown_metrics = ood if len(ood) * _n_cells(score) <= _MAX_PANELS else [metric]
    distributions = plot_distributions(results, out / "distributions.png", shown_metrics)
    if _resamples_one_test_set(results):  # the spread of the replicates only
        return [distributions]
    figures = [plot_forest(results, out / "forest.png", shown_metrics), distributions]
    shown = {d: score[d].values for d in score.dims if d not in ("seed", "method", "metric")}
    if done.comparison is not None:
        comparison = done.comparison.sel(
            {d: v for d, v in shown.items() if d in done.comparison.dims}
        )
        figures.append(
            plot_paired_differences(
                results,
                out / "paired_differences.png",
                metric,
                opts.alpha,
                opts.adjust,
                comparison=comparison,
            )
        )
    figures.append(plot_running_mean(results, out / "running_mean.png", metric))
    if done.wins is not None:  # a k-seed experiment needs k seeds to draw from
        figures.append(
            plot_win_probability(
                results,
                out / "win_probability.png",
                metric,
                k,
                opts.n_draws,
                opts.rng,
                "both" if len(opts.pairings) > 1 else opts.pairings[0],
                wins=done.wins.sel({d: v for d, v in shown.items() if d in done.wins.dims}),
            )
        )
    if done.sources is not None and isinstance(results, xr.Dataset):
        figures.append(
            plot_variance_sources(
                results, out / "variance_sources.png", metric, components=done.sources
            )
        )
    return figures


def _resamples_one_test_set(results: xr.Dataset | xr.DataArray) -> bool:
    """Whether the seeds of ``results`` resample one fixed test set (ImageNet-O), so that a
    mean over seeds and comparisons over seeds say nothing about training randomness."""
    return results.attrs.get("protocol") == "imagenet_o"


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


def _stopping_lines(results: xr.Dataset | xr.DataArray) -> list[str]:
    decision = stop_decision(results)
    lines = ["## Stopping decision", ""]
    if decision is None:
        return [*lines, "No stopping rule recorded (fixed number of seeds)."]
    row = [
        decision.rule,
        str(decision.stop),
        str(decision.n_seeds),
        f"{decision.statistic:.4g}",
        decision.reason,
    ]
    return [*lines, render(["rule", "stop", "seeds", "statistic", "reason"], [row], True)]


def _comparison_lines(
    results: xr.Dataset | xr.DataArray,
    opts: _Options,
    done: _Analyses,
    shown: xr.Dataset | xr.DataArray,
) -> list[str]:
    """The paired comparisons and the seeds a paired test needs, for the report's metric
    (the cells the figures show; the multiplicity adjustment counted every cell)."""
    lines = ["## Paired comparisons", ""]
    if opts.metric is None:
        return [*lines, "Not computed: the results have no OOD metric.", ""]
    if done.comparison is None:
        n = n_scored(as_score(results))
        reason = (
            f"{n} seed{'s' if n != 1 else ''} with scores; paired comparisons and the seeds "
            f"needed for power start at {_MIN_PAIRED_SEEDS} (a paired t test of 2 seeds has one "
            "degree of freedom)"
        )
        return [*lines, too_small(reason), ""]
    cmp = done.comparison
    cells = {
        d: shown[d].values for d in cmp.dims if d not in ("method", "other") and d in shown.dims
    }
    needed = power_of_results(results, opts.metric, opts.alpha).sel(cells)
    return [
        *lines,
        f"Mean paired difference row − column in {metric_label(opts.metric)} over the "
        f"seeds both methods scored, [{cmp.attrs['confidence']:.0%} paired t interval]; "
        f"`*`: significant at alpha = {opts.alpha:g} after the {adjust_name(cmp)} adjustment "
        f"over {cmp.attrs['n_tests']} tests ({cmp.attrs['family']}). The intervals are not "
        "adjusted.",
        "",
        paired_table(cmp.sel(cells)),
        "",
        "## Seeds needed (power)",
        "",
        f"Seeds a two-sided paired t test needs to detect each pair's observed difference in "
        f"{opts.metric} with 80% power at alpha = {opts.alpha:g} (noncentral t; the observed SD "
        "of the paired differences taken as the truth, no multiplicity adjustment). Blank: no "
        "difference observed. `oodsim.stats.required_simulations` (the first seed at which one "
        "ordering of the seeds crosses alpha) is optimistic; this is the design number.",
        "",
        power_table(needed),
        "",
    ]


def _variance_lines(results: xr.Dataset | xr.DataArray, done: _Analyses) -> list[str]:
    """Sources of variance: the crossed design's components, else the one-way ANOVA by class
    split when it varies."""
    if done.sources is not None:
        vc = done.sources
        return [
            "## Sources of variance",
            "",
            f"Share of the seed-to-seed variance of {vc.attrs['metric']} by source, "
            f"[{vc.attrs['confidence']:.0%} interval] ({vc.attrs['estimator']} fit of the "
            f"{vc.attrs['model']}; intervals: {vc.attrs['interval']}).",
            "",
            variance_sources_table(vc),
            "",
        ]
    if isinstance(results, xr.Dataset) and (variance := variance_table(results, 0.95)):
        return [
            "## Sources of variance",
            "",
            "One-way random-effects ANOVA of the seeds grouped by class split "
            "(ICC = share of the variance due to the class split), OOD metrics.",
            "",
            variance,
            "",
        ]
    return []


def _summary(
    results: xr.Dataset | xr.DataArray,
    opts: _Options,
    source: str | Path | None,
    done: _Analyses,
    shown: xr.Dataset | xr.DataArray,
) -> list[str]:
    """The lines of ``summary.md`` up to its figures."""
    score = as_score(results)
    ood = ood_metrics(score)
    est = estimate(results, confidence=0.95)
    note = fixed_note(score, ("seed", "method", "metric"))
    name = results.attrs.get("experiment")
    lines = [f"# oodsim report{f': {name}' if name else ''}", ""]
    lines += spec_lines(results, source) + seed_lines(results, score)
    lines.append(f"- methods: {', '.join(method_names(score))}")
    lower = [name for name in ood if not higher_is_better(name)]
    note_lower = f" ({', '.join(lower)}: lower is better)" if lower else ""
    lines.append(f"- OOD metrics: {', '.join(ood) or 'none'}{note_lower}")
    lines += _accuracy_line(est) + ([f"- {note}"] if note else [])
    if _resamples_one_test_set(results):
        return lines + [
            "",
            "## Estimates",
            "",
            bootstrap_table(results, markdown=True, digits=4),
            "",
            "Each seed of an ImageNet-O run is a bootstrap replicate of one fixed test set: the "
            "interval is test-set sampling uncertainty, not uncertainty over training runs, and "
            "win probabilities, required simulations and stopping rules over replicates are "
            "not shown (docs/imagenet_o.md).",
            "",
        ]
    lines += [
        "",
        "## Estimates",
        "",
        f"Mean over seeds [{interval_name(est)} for the expected score], n = seeds used.",
        "",
        estimate_table(est, ood or metrics_of(score, None), markdown=True, digits=4),
        "",
        "## Win probability",
        "",
        _win_text(results, opts.k, opts.n_draws, opts.rng, opts.pairings, ood, done.wins),
        "",
    ]
    lines += _comparison_lines(results, opts, done, shown)
    lines += _variance_lines(results, done)
    return lines + _stopping_lines(results)


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
) -> Path:
    """Write all plots (the forest plot of the estimates first) and ``summary.md`` (what was
    run, which seeds were excluded and why, estimates, win probabilities, paired comparisons,
    seeds needed for 80% power, variance components by source, stopping decision) into the
    folder ``out_dir``; return the path of ``summary.md``. A part that would be empty or say
    nothing at this number of seeds is one line, ``n too small: <reason>.``

    ``metric`` (default auroc) drives the per-metric plots, the paired comparisons (adjusted
    over every pair and cell by ``adjust``: ``"holm"``, ``"bh"`` or None) and the power table;
    an accuracy-type metric, the same for every detector, is replaced by the first OOD metric.
    Win probabilities cover the OOD metrics only; ``pairing`` is ``"both"`` (default: the
    independent and the paired draws side by side, each with a bootstrap interval over the
    seeds, :func:`oodsim.stats.win.win_probability_intervals`) or one of them.
    ``source``: the results' path, named in the summary. ``figures=False`` writes the
    Markdown alone (every table, no PNG): seconds instead of about two per figure.

    ``out_dir`` gets a :data:`~oodsim.report.folder.REPORT_MARKER` naming the results. A folder
    holding a report of the same results (same spec key) is refreshed: files of the old report
    that the new one does not write are removed. Any other non-empty folder raises
    :class:`~oodsim.report.folder.ReportFolderError` unless ``overwrite``; then oodsim's files
    are written over, and nothing else is deleted.
    """
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
    opts = _Options(metric, k, alpha, n_draws, rng, pairings, adjust)
    shown, note = _shown(results)
    done = _analyses(results, opts)  # once, for the tables and the figures alike
    written = _figures(shown, out, opts, done) if figures else []
    lines = _summary(results, opts, source, done, shown)
    lines += ["", "## Figures", ""]
    if figures:
        lines += [note, ""] if note else []
        lines += [f"![{p.stem}]({p.name})" for p in written]
    else:
        lines.append(NO_FIGURES)
    if isinstance(results, xr.Dataset) and results.attrs.get("protocol") == "severity":
        from oodsim.report.severity import write_severity_files  # severity results only

        severity = write_severity_files(
            results, out / "severity", metric=metric or "auroc", figures=figures
        )
        written += severity
        lines += ["", "## Severity levels", ""]
        lines.append(f"See [{severity[-1].name}](severity/{severity[-1].name}).")
    text = "\n".join(lines) + "\n"
    path = write_file(out / "summary.md", lambda tmp: tmp.write_text(text, encoding="utf-8"))
    finish(out, marker, [*written, path], previous)
    return path
