"""What a report computes once and its tables and figures share (:class:`Analyses`): win
probabilities, the paired comparison of every pair, the variance components of a designed run;
and what the report was asked for (:class:`ReportOptions`)."""

from __future__ import annotations

import attrs
import numpy as np
import xarray as xr

from oodsim.report.hooks import report_hooks
from oodsim.report.source_table import has_design
from oodsim.report.tables import (
    win_intervals,
)
from oodsim.results.access import n_scored, ood_metrics
from oodsim.stats import as_score, compare, variance_components

#: Paired comparisons and power from this many seeds on: with two, the paired t test has one
#: degree of freedom (t quantile 12.7) and power takes an SD of one degree of freedom as truth.
MIN_PAIRED_SEEDS = 3
#: Win probabilities, paired comparisons and power compare methods: from this many on.
MIN_METHODS = 2


def _wins(results: xr.Dataset | xr.DataArray, opts: ReportOptions) -> xr.Dataset | None:
    """Win probabilities of every OOD metric with their intervals (both pairings), or None
    where the report shows none (fewer than k seeds, no OOD metric, ImageNet-O replicates)."""
    score = as_score(results)
    ood = ood_metrics(score)
    if n_scored(score) < opts.k or not ood or resamples_one_test_set(results):
        return None
    if score.sizes["method"] < MIN_METHODS:
        return None
    return win_intervals(results, ood, opts.k, opts.n_draws, opts.rng, opts.pairings)


@attrs.frozen
class ReportOptions:
    """What :func:`write_report` was asked for, as every part of the report uses it."""

    metric: str | None  # None: the results have no OOD metric
    k: int
    alpha: float
    n_draws: int
    rng: np.random.Generator | int | None  # a seed restarts in every part (same numbers)
    pairings: tuple[str, ...]
    adjust: str | None = "holm"


@attrs.frozen
class Analyses:
    """What the tables and the figures share, computed once: win probabilities, the paired
    comparison of every pair and the variance components of a designed run (None where the
    report shows none)."""

    wins: xr.Dataset | None
    comparison: xr.Dataset | None
    sources: xr.Dataset | None


def run_analyses(results: xr.Dataset | xr.DataArray, opts: ReportOptions) -> Analyses:
    """The analyses the report shows, each None where it shows none: win probabilities and
    paired comparisons need :data:`MIN_METHODS` methods, comparisons also
    :data:`MIN_PAIRED_SEEDS` scored seeds."""
    score = as_score(results)
    comparable = opts.metric is not None and not resamples_one_test_set(results)
    several = score.sizes["method"] >= MIN_METHODS
    paired = comparable and several and n_scored(score) >= MIN_PAIRED_SEEDS
    comparison = (
        compare(results, opts.metric, alpha=opts.alpha, adjust=opts.adjust) if paired else None
    )
    designed = comparable and isinstance(results, xr.Dataset) and has_design(results)
    sources = variance_components(results, opts.metric) if designed else None
    return Analyses(_wins(results, opts), comparison, sources)


def resamples_one_test_set(results: xr.Dataset | xr.DataArray) -> bool:
    """Whether the seeds of ``results`` do not compare methods: they resample one fixed test
    set (ImageNet-O), so that a mean over seeds and comparisons over seeds say nothing about
    training randomness (the protocol's :class:`~oodsim.report.hooks.ReportHooks`)."""
    return not report_hooks(results).compares_methods
