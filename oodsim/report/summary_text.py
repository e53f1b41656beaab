"""The text of ``summary.md`` (:func:`summary_text`): accuracy, estimates, win probabilities,
the stopping decision, paired comparisons and power, variance components, each with what it
rests on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from oodsim.metrics import higher_is_better
from oodsim.report.analyses import (
    MIN_METHODS,
    MIN_PAIRED_SEEDS,
    Analyses,
    ReportOptions,
    resamples_one_test_set,
)
from oodsim.report.comparisons import (
    adjust_name,
    paired_table,
    power_of_results,
    power_table,
)
from oodsim.report.figures import metric_label
from oodsim.report.provenance import seed_lines, spec_lines
from oodsim.report.source_table import variance_sources_table
from oodsim.report.tables import (
    bootstrap_table,
    estimate_table,
    fixed_note,
    fmt,
    interval_name,
    render,
    seed_counts,
    too_small,
    variance_table,
    win_interval_note,
    win_table,
)
from oodsim.results.access import method_names, metrics_of, n_scored, ood_metrics
from oodsim.stats import StopDecision, as_score, class_scores, estimate, hardest_classes
from oodsim.stats.classes import CLASS_AUROC


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


def _one_method(score: xr.DataArray, what: str) -> str | None:
    """The line shown instead of ``what`` (which compares methods) when the results have
    fewer than :data:`MIN_METHODS` methods; None otherwise."""
    methods = method_names(score)
    if len(methods) >= MIN_METHODS:
        return None
    return (
        f"Not computed: the results have one method ({', '.join(methods)}); {what} compare methods."
    )


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
    if one := _one_method(score, "win probabilities"):
        return one
    n = n_scored(score)  # failed and excluded seeds enter no draw
    if n < k:
        return too_small(f"the results have {n} scored seeds, fewer than k = {k}")
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
        f"{win_interval_note(wins, n)}.{note}{both}\n\n{ways}\n\n"
        + win_table(results, k, n_draws, rng, wins=wins)
    )


def _stopping_lines(results: xr.Dataset | xr.DataArray) -> list[str]:
    decision = StopDecision.recorded(results)
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
    opts: ReportOptions,
    done: Analyses,
    shown: xr.Dataset | xr.DataArray,
) -> list[str]:
    """The paired comparisons and the seeds a paired test needs, for the report's metric
    (the cells the figures show; the multiplicity adjustment counted every cell)."""
    lines = ["## Paired comparisons", ""]
    if opts.metric is None:
        return [*lines, "Not computed: the results have no OOD metric.", ""]
    if one := _one_method(as_score(results), "paired comparisons and the seeds needed for power"):
        return [*lines, one, ""]
    if done.comparison is None:
        n = n_scored(as_score(results))
        reason = (
            f"{n} seed{'s' if n != 1 else ''} with scores; paired comparisons and the seeds "
            f"needed for power start at {MIN_PAIRED_SEEDS} (a paired t test of 2 seeds has one "
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
        f"Seeds a two-sided paired t test needs to detect a difference of "
        f"{' / '.join(f'{d:g}' for d in needed['delta'].values)} in {opts.metric} with 80% "
        f"power at alpha = {opts.alpha:g} (noncentral t; the observed SD of the paired "
        "differences taken as the truth, no multiplicity adjustment). The differences are "
        "fixed, not the observed ones: power at an observed difference says nothing the "
        "p-value does not (Hoenig & Heisey 2001). `oodsim.stats.required_simulations` (the "
        "first seed at which one ordering of the seeds crosses alpha) is optimistic; this is "
        "the design number.",
        "",
        power_table(needed),
        "",
    ]


def _variance_lines(results: xr.Dataset | xr.DataArray, done: Analyses) -> list[str]:
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


def summary_text(
    results: xr.Dataset | xr.DataArray,
    opts: ReportOptions,
    source: str | Path | None,
    done: Analyses,
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
    if resamples_one_test_set(results):
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
    lines += _class_lines(results)
    return lines + _stopping_lines(results)


#: How many of each method's hardest unknown classes the report names.
HARDEST = 3


def _class_lines(results: xr.Dataset | xr.DataArray) -> list[str]:
    """Each method's hardest unknown classes, with their AUROC intervals (open set results
    with held-out classes)."""
    if not isinstance(results, xr.Dataset) or CLASS_AUROC not in results:
        return []
    scores = class_scores(results)
    if not (scores["n"] > 0).any():
        return ["## Hardest unknown classes", "", too_small("no seed scored a class"), ""]
    rows = []
    for method in method_names(scores["mean"]):
        cells = []
        for name in hardest_classes(scores, method, HARDEST):
            cell = scores.sel({"method": method, "ood_class": name})
            interval = f"[{fmt(cell['lower'].item(), 3)}, {fmt(cell['upper'].item(), 3)}]"
            cells.append(f"{name}: {fmt(cell['mean'].item(), 3)} {interval}")
        rows.append([method, *cells, *[""] * (HARDEST - len(cells))])
    header = ["method", *[f"{rank}" for rank in ("hardest", "2nd", "3rd")[:HARDEST]]]
    return [
        "## Hardest unknown classes",
        "",
        "AUROC of each method against one unknown class at a time (the ID test samples "
        "against that class's test samples), mean over the seeds where the class was unknown "
        f"[{interval_name(scores)}], lowest first; n = {seed_counts(scores['n'])} seeds per class. "
        "`oodsim.stats.class_scores(results)` has every class.",
        "",
        render(header, rows, markdown=True),
        "",
    ]
