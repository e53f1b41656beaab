"""The statistics API checks its arguments: every public function of :mod:`oodsim.stats`
refuses a bad ``n_draws``, ``n_boot``, ``k``, ``alpha``, ``power``, ``delta``, ``confidence``
or ``dim`` (and its other checked arguments) with an error that names the argument, before any
computation; missing design levels are refused with the coordinate named."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oodsim import stats
from oodsim.errors import OodsimError
from oodsim.stats.paired import ADJUSTMENTS
from tests.factories import synthetic_results

N_SEEDS = 6


@functools.cache
def results() -> xr.Dataset:
    """Open set results of 6 seeds, 3 methods, none failed."""
    return synthetic_results(N_SEEDS, failed=())


@functools.cache
def designed() -> xr.Dataset:
    """Results of a full 4 × 4 class_split × init design, none failed (balanced)."""
    return synthetic_results(16, design={"class_split": 4, "init": 4}, failed=())


@functools.cache
def class_table() -> xr.Dataset:
    return stats.class_scores(results())


def values() -> np.ndarray:
    return np.random.default_rng(0).uniform(0.6, 0.9, (N_SEEDS, 3))


def _levels() -> dict[str, np.ndarray]:
    return {"a": np.repeat(np.arange(3), 4), "b": np.tile(np.arange(4), 3)}


# Each public function with small valid arguments; a bad one replaces its own.
CALLS: dict[str, Callable[..., Any]] = {
    "adjust_p": lambda **a: stats.adjust_p(np.array([0.01, 0.2, 0.04]), **a),
    "betting_interval": lambda **a: stats.betting_interval(values().T, **a),
    "class_scores": lambda **a: stats.class_scores(results(), **a),
    "compare": lambda **a: stats.compare(results(), **a),
    "confidence_sequence": lambda **a: stats.confidence_sequence(values()[:, 0], **a),
    "crossed_components": lambda **a: stats.crossed_components(
        np.random.default_rng(1).normal(size=12), _levels(), **{"n_draws": 50, **a}
    ),
    "decide": lambda rule="ranking", **a: stats.decide(rule, values(), **a),
    "decide_ci_width": lambda **a: stats.decide_ci_width(values(), 0.05, **a),
    "decide_fixed": lambda **a: stats.decide_fixed(3, **{"n": 5, **a}),
    "decide_ranking": lambda **a: stats.decide_ranking(values(), **a),
    "estimate": lambda **a: stats.estimate(results(), **{"n_boot": 50, **a}),
    "hardest_classes": lambda **a: stats.hardest_classes(class_table(), "msp", **a),
    "independent_sample_size": lambda **a: stats.independent_sample_size(0.5, **a),
    "one_way_anova": lambda groups=None, **a: stats.one_way_anova(
        values()[:, 0], np.arange(N_SEEDS) % 2 if groups is None else groups, **a
    ),
    "paired_sample_size": lambda **a: stats.paired_sample_size(0.5, **a),
    "pairwise_lower_bounds": lambda **a: stats.pairwise_lower_bounds(values(), **a),
    "power": lambda **a: stats.power(results(), **a),
    "required_simulations": lambda **a: stats.required_simulations(
        values()[:, 0], values()[:, 1], **a
    ),
    "required_simulations_table": lambda **a: stats.required_simulations_table(results(), **a),
    "running_interval": lambda **a: stats.running_interval(values()[:, 0], **a),
    "sequential_p_values": lambda **a: stats.sequential_p_values(
        values()[:, 0], values()[:, 1], **a
    ),
    "t_interval": lambda **a: stats.t_interval(
        np.array([0.5]), np.array([0.1]), np.array([5]), **{"confidence": 0.95, **a}
    ),
    "two_part_interval": lambda **a: stats.two_part_interval(
        np.array([10]),
        a.pop("k", np.array([4])),
        np.array([0.1]),
        np.array([0.02]),
        **{"confidence": 0.95, **a},
    ),
    "variance_components": lambda **a: stats.variance_components(
        designed(), **{"n_draws": 50, **a}
    ),
    "variance_components_table": lambda **a: stats.variance_components_table(results(), **a),
    "win_probabilities": lambda **a: stats.win_probabilities(
        results(), "auroc", **{"n_draws": 50, **a}
    ),
    "win_probability": lambda **a: stats.win_probability(values(), **{"n_draws": 50, **a}),
    "win_probability_interval": lambda **a: stats.win_probability_interval(
        values(), **{"n_draws": 50, "n_boot": 5, "boot_draws": 20, **a}
    ),
    "win_probability_intervals": lambda **a: stats.win_probability_intervals(
        results(), "auroc", **{"n_draws": 50, "n_boot": 5, "boot_draws": 20, **a}
    ),
}

#: Public names that are not functions of statistics arguments, and why.
NOT_DRIVEN = {
    "as_score": "takes results alone",
    "higher_is_better": "a metric's direction (oodsim.metrics): takes a metric name alone",
    "is_ood_metric": "oodsim.metrics: takes a metric name alone",
    "score_matrix": "driven below, as a known gap (oodsim.results.access)",
}


# ----------------------------------------------------------------------------- bad values

_words = st.text(max_size=4)
_nonnumbers = st.one_of(_words, st.none(), st.booleans(), st.just([0.5]))


def bad_probability() -> st.SearchStrategy[Any]:
    """Anything but a number strictly inside (0, 1)."""
    return st.one_of(
        st.floats(max_value=0.0),
        st.floats(min_value=1.0),
        st.sampled_from([math.nan, math.inf, -math.inf]),
        _nonnumbers,
    )


def bad_count(minimum: int, above: int | None = None) -> st.SearchStrategy[Any]:
    """Anything but an integer >= ``minimum`` (and, with ``above``, <= it)."""
    fractions = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6)
    options = [
        st.integers(min_value=-(10**6), max_value=minimum - 1),
        fractions.filter(lambda x: not x.is_integer()),
        st.sampled_from([math.nan, math.inf, -math.inf]),
        st.text(max_size=4),
        st.none(),
        st.booleans(),
    ]
    if above is not None:
        options.append(st.integers(min_value=above + 1, max_value=10**4))
    return st.one_of(*options)


def bad_dim(valid: set[str]) -> st.SearchStrategy[Any]:
    """A dim that is not one of ``valid``: another dim of the score, or none at all."""
    named = st.sampled_from(["method", "metric", "severity", "ood_class", "nosuch", "", "Seed"])
    return st.one_of(named, st.text(max_size=5), st.integers(), st.none()).filter(
        lambda d: d not in valid
    )


def bad_delta() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.floats(max_value=0.0),
        st.sampled_from([math.nan, math.inf, [], [0.01, -0.01], [0.01, 0.01]]),
        st.booleans(),
        _words,
    )


SEED_DIM = {"seed"}
# (function, argument, strategy of bad values); extra keyword arguments after them
CASES: list[tuple[str, str, st.SearchStrategy[Any], dict[str, Any]]] = [
    ("adjust_p", "method", _words.filter(lambda s: s.lower() not in ADJUSTMENTS), {}),
    ("betting_interval", "confidence", bad_probability(), {}),
    ("class_scores", "confidence", bad_probability(), {}),
    ("compare", "alpha", bad_probability(), {}),
    ("compare", "dim", bad_dim(SEED_DIM), {}),
    ("confidence_sequence", "alpha", bad_probability(), {}),
    ("crossed_components", "confidence", bad_probability(), {}),
    ("crossed_components", "n_draws", bad_count(0), {}),
    ("crossed_components", "n_boot", bad_count(0), {}),
    ("decide", "alpha", bad_probability(), {"rule": "ranking"}),
    ("decide", "confidence", bad_probability(), {"rule": "ci_width", "epsilon": 0.05}),
    ("decide_ci_width", "confidence", bad_probability(), {}),
    ("decide_fixed", "n", bad_count(1), {}),
    ("decide_ranking", "alpha", bad_probability(), {}),
    ("estimate", "confidence", bad_probability(), {}),
    ("estimate", "n_boot", bad_count(1), {}),
    ("estimate", "dim", bad_dim({"seed", "method", "metric"}), {}),
    ("hardest_classes", "k", bad_count(1), {}),
    ("independent_sample_size", "power", bad_probability(), {}),
    ("independent_sample_size", "alpha", bad_probability(), {}),
    ("one_way_anova", "confidence", bad_probability(), {}),
    ("paired_sample_size", "power", bad_probability(), {}),
    ("paired_sample_size", "alpha", bad_probability(), {}),
    ("pairwise_lower_bounds", "alpha", bad_probability(), {}),
    ("power", "power", bad_probability(), {}),
    ("power", "alpha", bad_probability(), {}),
    ("power", "delta", bad_delta(), {}),
    ("power", "dim", bad_dim(SEED_DIM), {}),
    ("required_simulations", "alpha", bad_probability(), {}),
    ("required_simulations_table", "alpha", bad_probability(), {}),
    ("required_simulations_table", "dim", bad_dim(SEED_DIM), {}),
    ("running_interval", "confidence", bad_probability(), {}),
    ("sequential_p_values", "test", _words.filter(lambda s: s not in stats.TESTS), {}),
    ("t_interval", "confidence", bad_probability(), {}),
    ("two_part_interval", "confidence", bad_probability(), {}),
    ("two_part_interval", "k", bad_count(0, above=10).map(lambda k: np.array([k])), {}),
    ("variance_components", "confidence", bad_probability(), {}),
    ("variance_components", "n_draws", bad_count(0), {}),
    ("variance_components", "n_boot", bad_count(0), {}),
    ("variance_components", "dim", bad_dim(SEED_DIM), {}),
    ("variance_components_table", "confidence", bad_probability(), {}),
    ("variance_components_table", "dim", bad_dim(SEED_DIM), {}),
    ("win_probabilities", "k", bad_count(1, above=N_SEEDS), {}),
    ("win_probabilities", "n_draws", bad_count(1), {}),
    ("win_probabilities", "dim", bad_dim(SEED_DIM), {}),
    ("win_probability", "k", bad_count(1, above=N_SEEDS), {}),
    ("win_probability", "n_draws", bad_count(1), {}),
    ("win_probability_interval", "k", bad_count(1, above=N_SEEDS), {}),
    ("win_probability_interval", "n_draws", bad_count(1), {}),
    ("win_probability_interval", "n_boot", bad_count(1), {}),
    ("win_probability_interval", "boot_draws", bad_count(1), {}),
    ("win_probability_interval", "confidence", bad_probability(), {}),
    ("win_probability_intervals", "k", bad_count(1), {}),
    ("win_probability_intervals", "n_draws", bad_count(1), {}),
    ("win_probability_intervals", "n_boot", bad_count(1), {}),
    ("win_probability_intervals", "confidence", bad_probability(), {}),
    ("win_probability_intervals", "dim", bad_dim(SEED_DIM), {}),
]


def test_every_public_function_is_driven() -> None:
    public = {name for name in stats.__all__ if callable(getattr(stats, name))}
    public -= {"StopDecision"}  # a record of a decision, not a statistic
    assert public == set(CALLS) | set(NOT_DRIVEN)
    assert {case[0] for case in CASES} == set(CALLS)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_valid_arguments_give_a_result(name: str) -> None:
    CALLS[name]()  # required_simulations' result may be None: the test never rejects


@pytest.mark.parametrize(
    ("name", "argument", "bad", "extra"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_bad_argument_is_refused_by_name(
    name: str, argument: str, bad: st.SearchStrategy[Any], extra: dict[str, Any], data: Any
) -> None:
    value = data.draw(bad, label=argument)
    try:
        out = CALLS[name](**extra, **{argument: value})
    except (OodsimError, ValueError) as error:
        assert argument in str(error), f"{name}({argument}={value!r}): {error}"
    else:
        pytest.fail(f"{name}({argument}={value!r}) gave a result: {out!r:.200}")


def test_score_matrix_names_a_bad_dim() -> None:
    with pytest.raises(ValueError, match="dim"):
        stats.score_matrix(results(), dim="method")


# ----------------------------------------------------------------------------- known failures


def test_a_nan_design_level_is_refused_with_its_coordinate_and_seed() -> None:
    """Before: the NaN was a level of its own (shares 0.845 -> 0.921, no message)."""
    base = designed()
    init = base["stream_init"].values.astype(float)
    init[0] = np.nan
    broken = base.assign_coords(stream_init=("seed", init))
    with pytest.raises(
        ValueError, match=r"coordinate 'stream_init' has 1 missing level .* seed 100"
    ):
        stats.variance_components(broken, n_draws=20)


def test_a_missing_factor_level_is_refused_by_crossed_components() -> None:
    y = np.random.default_rng(2).normal(size=12)
    for missing in (np.nan, None):
        levels = _levels()
        a = levels["a"].astype(object)
        a[[2, 5]] = missing
        with pytest.raises(ValueError, match=r"factor 'a' has 2 missing levels .* positions 2, 5"):
            stats.crossed_components(y, {"a": a, "b": levels["b"]}, n_draws=20)


def test_a_missing_group_label_is_refused_by_one_way_anova() -> None:
    groups = np.array([0.0, 1.0, 0.0, np.nan, 0.0, 1.0])
    with pytest.raises(ValueError, match="groups has 1 missing level"):
        stats.one_way_anova(values()[:, 0], groups)


def test_negative_n_draws_is_refused_and_zero_is_said() -> None:
    """Before: n_draws = 0 or -5 gave NaN intervals and no word."""
    with pytest.raises(ValueError, match=r"n_draws must be an integer >= 0 .*got -5"):
        stats.variance_components(designed(), n_draws=-5)
    with pytest.raises(ValueError, match=r"n_boot must be an integer >= 0"):
        stats.variance_components(designed(), n_boot=-1)
    skipped = stats.variance_components(designed(), n_draws=0)
    assert np.isnan(skipped["share_low"]).all()
    assert skipped.attrs["interval"] == "none: n_draws=0 skips the fiducial intervals"


def test_n_draws_nan_is_refused_by_name() -> None:
    """Before: ``cannot convert float NaN to integer``."""
    with pytest.raises(ValueError, match=r"n_draws must be an integer >= 1, got nan"):
        stats.win_probability(values(), n_draws=math.nan)


def test_k_above_the_seeds_is_refused_naming_both() -> None:
    """Before: every win probability was NaN, no message."""
    with pytest.raises(ValueError, match=r"k must be at most the number of seeds.*k=7, 6 seeds"):
        stats.win_probabilities(results(), "auroc", k=7)
    # the intervals keep NaN cells (tests/test_win_pairings.py pins it; reports ask with >= k)
    wide = stats.win_probability_intervals(results(), "auroc", k=7, n_draws=50, n_boot=5)
    assert wide["win_probability"].isnull().all()
    with pytest.raises(ValueError, match=r"k must be at most .*k=7, method 0 has 6"):
        stats.win_probability(values(), k=7)
    # with replacement k may exceed the seeds
    assert np.isfinite(
        stats.win_probabilities(results(), "auroc", k=7, replace=True, n_draws=50)
    ).all()


@pytest.mark.parametrize("function", [stats.compare, stats.power])
def test_dim_method_is_refused_with_the_dims_allowed(function: Callable[..., Any]) -> None:
    """Before: xarray's ``axes don't match array``."""
    with pytest.raises(
        ValueError,
        match=r"dim must be one of the score's dims 'seed' \(method, metric cannot be\), "
        r"got 'method'",
    ):
        function(results(), dim="method")
