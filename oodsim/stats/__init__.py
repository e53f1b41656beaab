"""Monte Carlo statistics of OOD evaluation results: estimates, win probabilities, paired
comparisons, power, tests, sequential stopping rules and variance components by source.

Every function takes either plain arrays (n_seeds, n_methods) or the results Dataset
(``score`` over seed × method × metric × severity [× ood, model, dataset]); see
``docs/statistics.md`` for what each answers and when to use which. The outputs over cells
leave out a ``severity`` dim whose only label is ``"all"`` (results of a protocol without
levels: :func:`oodsim.results.score_view`), and go to pandas in one call with
``.oodsim.to_frame()`` (:mod:`oodsim.results.accessor`).
"""

from __future__ import annotations

from oodsim.metrics import LOWER_IS_BETTER, higher_is_better, is_ood_metric
from oodsim.results.access import as_score, score_matrix
from oodsim.stats.classes import class_scores, hardest_classes
from oodsim.stats.components import variance_components
from oodsim.stats.crossed import crossed_components
from oodsim.stats.estimates import estimate, running_interval
from oodsim.stats.intervals import betting_interval, t_interval, two_part_interval
from oodsim.stats.paired import adjust_p, compare
from oodsim.stats.power import independent_sample_size, paired_sample_size, power
from oodsim.stats.significance import (
    TESTS,
    required_simulations,
    required_simulations_table,
    sequential_p_values,
)
from oodsim.stats.stopping import (
    BOUNDARIES,
    STOPPING_RULES,
    StopDecision,
    confidence_sequence,
    decide,
    decide_ci_width,
    decide_fixed,
    decide_ranking,
    pairwise_lower_bounds,
)
from oodsim.stats.variance import one_way_anova, variance_components_table
from oodsim.stats.win import (
    PAIRING_LABELS,
    PAIRINGS,
    win_probabilities,
    win_probability,
    win_probability_interval,
    win_probability_intervals,
)

__all__ = [
    "BOUNDARIES",
    "LOWER_IS_BETTER",
    "PAIRINGS",
    "PAIRING_LABELS",
    "STOPPING_RULES",
    "StopDecision",
    "TESTS",
    "adjust_p",
    "as_score",
    "betting_interval",
    "class_scores",
    "compare",
    "confidence_sequence",
    "crossed_components",
    "decide",
    "decide_ci_width",
    "decide_fixed",
    "decide_ranking",
    "estimate",
    "hardest_classes",
    "higher_is_better",
    "independent_sample_size",
    "is_ood_metric",
    "one_way_anova",
    "paired_sample_size",
    "pairwise_lower_bounds",
    "power",
    "required_simulations",
    "required_simulations_table",
    "running_interval",
    "score_matrix",
    "sequential_p_values",
    "t_interval",
    "two_part_interval",
    "variance_components",
    "variance_components_table",
    "win_probabilities",
    "win_probability",
    "win_probability_interval",
    "win_probability_intervals",
]
