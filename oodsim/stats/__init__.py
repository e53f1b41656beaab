"""Monte Carlo statistics of OOD evaluation results: estimates, win probabilities, tests,
sequential stopping rules and variance components.

Every function takes either plain arrays (n_seeds, n_methods) or the results Dataset
(``score`` over seed × method × metric × severity [× ood, model, dataset]); see
``docs/statistics.md`` for what each answers and when to use which.
"""

from __future__ import annotations

from oodsim.stats._common import (
    LOWER_IS_BETTER,
    as_score,
    higher_is_better,
    is_ood_metric,
    score_matrix,
)
from oodsim.stats.estimates import (
    betting_interval,
    estimate,
    running_interval,
    t_interval,
    two_part_interval,
)
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
from oodsim.stats.variance import variance_components, variance_components_table
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
    "TESTS",
    "StopDecision",
    "as_score",
    "betting_interval",
    "confidence_sequence",
    "decide",
    "decide_ci_width",
    "decide_fixed",
    "decide_ranking",
    "estimate",
    "higher_is_better",
    "is_ood_metric",
    "pairwise_lower_bounds",
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
