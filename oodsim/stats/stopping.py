"""Sequential stopping rules: pure decisions the executor takes after each batch of seeds.

Every rule looks at the scores of all seeds landed so far, ``values`` of shape
(n_seeds, n_methods) in the order the seeds were scheduled (an order that must not depend on
the scores), and returns a :class:`StopDecision`. All rules honour ``min_seeds`` (never stop
with fewer usable seeds) and ``max_seeds`` (always stop once that many seeds landed).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import attrs
import numpy as np

from oodsim.errors import UnknownNameError
from oodsim.stats.checks import check_alpha, check_count, complete_rows
from oodsim.stats.estimates import estimate_array, interval_label

Boundary = Literal["bernstein", "normal_mixture"]
BOUNDARIES: tuple[str, ...] = ("bernstein", "normal_mixture")

#: Cap on the predictable bets of the empirical-Bernstein sequence (Waudby-Smith & Ramdas
#: suggest 1/2 or 3/4; the larger cap is tighter when the variance is small, as for AUROC).
_BET_CAP = 0.75


def _nan_to_none(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else value


@attrs.frozen
class StopDecision:
    """The outcome of a stopping rule after ``n_seeds`` seeds.

    ``statistic`` is the number the rule compared with its threshold (seed count, largest
    interval half-width, or the leader's smallest lower confidence bound), NaN if undefined.
    """

    stop: bool = attrs.field(converter=bool)
    rule: str
    reason: str
    statistic: float = attrs.field(converter=lambda v: float("nan") if v is None else float(v))
    n_seeds: int = attrs.field(converter=int)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (NaN statistic as None)."""
        out = attrs.asdict(self)
        out["statistic"] = _nan_to_none(self.statistic)
        return out

    as_dict = to_dict

    def to_json(self) -> str:
        """Strict JSON, as stored in ``results.attrs["stopping"]``."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> StopDecision:
        """Inverse of :meth:`to_json` (also accepts the dict form)."""
        data = json.loads(text) if isinstance(text, str) else dict(text)
        return cls(**{f.name: data[f.name] for f in attrs.fields(cls)})

    @classmethod
    def recorded(cls, results: Any) -> StopDecision | None:
        """The decision a run recorded in ``results.attrs["stopping"]``; None when there is
        none (or it does not parse)."""
        text = results.attrs.get("stopping")
        if not text:
            return None
        try:
            return cls.from_json(text)
        except (ValueError, KeyError, TypeError):
            return None


def _bounds_check(n_seeds: int, min_seeds: int, max_seeds: int | None) -> None:
    if min_seeds < 0 or (max_seeds is not None and max_seeds < max(min_seeds, 1)):
        raise ValueError(
            f"need 0 <= min_seeds <= max_seeds, got min_seeds={min_seeds}, max_seeds={max_seeds}"
        )
    if n_seeds < 0:
        raise ValueError(f"n_seeds must be >= 0, got {n_seeds}")


def _finish(
    rule: str,
    met: bool,
    met_reason: str,
    wait_reason: str,
    statistic: float,
    n_seeds: int,
    usable: int,
    min_seeds: int,
    max_seeds: int | None,
) -> StopDecision:
    """Apply min_seeds / max_seeds around a rule's own verdict."""
    if usable < min_seeds:
        verdict, reason = False, f"{usable} usable seeds < min_seeds={min_seeds}"
    elif met:
        verdict, reason = True, met_reason
    else:
        verdict, reason = False, wait_reason
    if not verdict and max_seeds is not None and n_seeds >= max_seeds:
        verdict, reason = True, f"reached max_seeds={max_seeds} ({reason})"
    return StopDecision(verdict, rule, reason, statistic, n_seeds)


def decide_fixed(
    n_seeds: int, n: int, min_seeds: int = 0, max_seeds: int | None = None
) -> StopDecision:
    """Stop once ``n`` seeds landed: the classic fixed-size protocol (e.g. n = 5). ``n`` must
    be an integer >= 1 (ValueError naming it otherwise)."""
    _bounds_check(int(n_seeds), min_seeds, max_seeds)
    n = check_count(n, "n")
    return _finish(
        "fixed",
        n_seeds >= n,
        f"{n_seeds} of {n} seeds done",
        f"{n_seeds} of {n} seeds landed",
        float(n_seeds),
        n_seeds,
        n_seeds,
        min_seeds,
        max_seeds,
    )


def decide_ci_width(
    values: np.ndarray,
    epsilon: float,
    confidence: float = 0.95,
    min_seeds: int = 2,
    max_seeds: int | None = None,
    value_range: tuple[float, float] | None = (0.0, 1.0),
    method: Literal["auto", "t", "betting"] = "auto",
) -> StopDecision:
    """Stop when every method's interval half-width is below ``epsilon``.

    Answers "is each expected score known to ± epsilon?". The interval is the one
    :func:`~oodsim.stats.estimate` reports with the same ``method``: by default the
    bound-aware interval for values in ``value_range`` (default [0, 1] like every oodsim
    metric): logit-scale t for values inside the range, the two-part interval where seeds sit
    on a bound, the betting interval where all are equal; the plain symmetric t interval for
    ``value_range=None``. Its half-width is half its length. The rule never stops on a
    degenerate interval: a method whose interval has zero width (a constant sample under
    ``method="t"`` or ``value_range=None``) or no interval counts as not known, whatever
    ``epsilon`` is. With the default, ``n`` seeds all scoring exactly 1.0 (or 0.0) give the
    interval ``[((1 - confidence)/2) ** (1/n), 1]``, so ``epsilon=0.01`` stops after 183 such
    seeds, not 10.

    NaN (failed) seeds are skipped per method; ``min_seeds`` counts the seeds usable for every
    method (at least 2 are needed). Stopping on a small observed spread slightly lowers the
    coverage of the final interval; a ``min_seeds`` of 10 or more keeps that effect small.
    """
    check_alpha(confidence, "confidence")
    if epsilon <= 0:
        raise ValueError(f"epsilon must be positive, got {epsilon}")
    if method not in ("auto", "t", "betting"):
        raise ValueError(f"method must be 'auto', 't' or 'betting', got {method!r}")
    v = np.asarray(values, dtype=float)
    v = v[:, None] if v.ndim == 1 else v
    n_seeds = v.shape[0]
    _bounds_check(n_seeds, min_seeds, max_seeds)
    n = np.isfinite(v).sum(axis=0)
    usable = int(n.min()) if v.size else 0
    degenerate = 0
    if usable >= 2:
        low, high = value_range if value_range is not None else (np.nan, np.nan)
        x = v.T  # methods x seeds
        out = estimate_array(x, confidence, method, 0, np.random.default_rng(0), low, high)
        length = out["upper"] - out["lower"]
        degenerate = int((~(length > 0)).sum())  # zero width or NaN: nothing is known
        statistic = float(np.nanmax(length) / 2) if np.isfinite(length).any() else float("nan")
    else:
        statistic = float("nan")
    met = usable >= 2 and degenerate == 0 and statistic < epsilon
    pct = f"{confidence:.0%}"
    kind = interval_label(method, value_range is not None)
    if degenerate:
        wait = (
            f"{degenerate} method(s) with a zero-width {pct} {kind} interval (constant scores): "
            "not known to any precision"
        )
    else:
        wait = f"largest {pct} half-width {statistic:.4g} >= epsilon={epsilon:g}"
    return _finish(
        "ci_width",
        met,
        f"largest {pct} half-width {statistic:.4g} < epsilon={epsilon:g}",
        wait,
        statistic,
        n_seeds,
        usable,
        max(min_seeds, 2),
        max_seeds,
    )


def confidence_sequence(
    x: np.ndarray,
    alpha: float = 0.05,
    boundary: Boundary = "bernstein",
    value_range: tuple[float, float] = (0.0, 1.0),
    tuned_for: int = 20,
) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds, after each observation, of a time-uniform (1 - alpha)
    confidence sequence for the mean of i.i.d. observations ``x`` (shape (T,) or (T, P)).

    With probability at least 1 - alpha the mean lies inside the bounds at *every* t at
    once, so the bounds may be checked after every seed and acted on at any time.

    - ``"bernstein"``: the predictable plug-in empirical-Bernstein sequence of Waudby-Smith &
      Ramdas (2023, JRSS-B, Theorem 2), for observations known to lie in ``value_range``.
      Exact (non-asymptotic) validity follows from Ville's inequality applied to the
      supermartingale prod exp(l_i (x_i - m) - psi(l_i) (x_i - mu_{i-1})^2) with bets l_i
      fixed before x_i; it adapts to the variance but pays a range term of order
      log(2/alpha) / t.
    - ``"normal_mixture"``: Robbins' normal-mixture boundary with the running sample variance
      plugged in (the asymptotic confidence sequence of Waudby-Smith et al., 2024), tuned to
      be tightest after ``tuned_for`` observations. Much narrower for small-variance data,
      but valid only asymptotically (approximately normal means, variance well estimated).
    """
    check_alpha(alpha)
    x = np.asarray(x, dtype=float)
    squeeze = x.ndim == 1
    x = x[:, None] if squeeze else x
    if boundary == "bernstein":
        lo, hi = map(float, value_range)
        if not hi > lo:
            raise ValueError(f"value_range must be (low, high) with high > low, got {value_range}")
        if x.size and (np.nanmin(x) < lo or np.nanmax(x) > hi):
            raise ValueError(
                f"values outside value_range {value_range}: the empirical-Bernstein boundary "
                "needs bounded values; pass the right value_range or boundary='normal_mixture'"
            )
        lower, upper = _bernstein((x - lo) / (hi - lo), alpha)
        lower, upper = lo + (hi - lo) * lower, lo + (hi - lo) * upper
    elif boundary == "normal_mixture":
        lower, upper = _normal_mixture(x, alpha, tuned_for)
    else:
        raise UnknownNameError("boundary", boundary, BOUNDARIES)
    return (lower[:, 0], upper[:, 0]) if squeeze else (lower, upper)


def _bernstein(y: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """PrPl-EB confidence sequence for observations y in [0, 1], columns independent.

    Waudby-Smith & Ramdas (2023), Theorem 2, with one refinement: the bet on each side is
    capped at c / B, where B is the predictable distance from the running mean mu_prev to
    that side's end of [0, 1] (the paper uses B = 1). Fan et al.'s inequality
    exp(l xi - psi(l) xi^2) <= 1 + l xi for xi >= -1, l in [0, 1), psi(l) = -log(1 - l) - l,
    applied with xi = (y - mu_prev) / B and l = bet * B <= c gives the penalty
    psi(bet * B) (y - mu_prev)^2 / B^2; then E[exp(bet (y - m) - penalty)] <= 1 under mean m,
    the product over seeds is a supermartingale, and Ville's inequality at 2 / alpha per side
    gives the two-sided time-uniform bounds.
    """
    t = np.arange(1, y.shape[0] + 1, dtype=float)[:, None]
    mu = (0.5 + np.cumsum(y, axis=0)) / (t + 1)
    sigma2 = (0.25 + np.cumsum((y - mu) ** 2, axis=0)) / (t + 1)
    # Predictable (uses data up to i - 1 only) mean and variance estimates.
    mu_prev = np.vstack([np.full((1, y.shape[1]), 0.5), mu[:-1]])
    sigma2_prev = np.vstack([np.full((1, y.shape[1]), 0.25), sigma2[:-1]])
    log_term = math.log(2.0 / alpha)
    lam = np.sqrt(2.0 * log_term / (sigma2_prev * t * np.log1p(t)))
    sq = (y - mu_prev) ** 2
    bounds = []
    for side, reach in ((-1.0, mu_prev), (1.0, 1.0 - mu_prev)):
        bet = np.minimum(lam, _BET_CAP / reach)
        x = bet * reach  # in [0, c]
        penalty = (-np.log1p(-x) - x) * sq / reach**2
        sum_bet = np.cumsum(bet, axis=0)
        center = np.cumsum(bet * y, axis=0) / sum_bet
        bounds.append(center + side * (log_term + np.cumsum(penalty, axis=0)) / sum_bet)
    return bounds[0], bounds[1]


def _normal_mixture(x: np.ndarray, alpha: float, tuned_for: int) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided normal-mixture (Robbins) boundary with plug-in sample standard deviation."""
    t = np.arange(1, x.shape[0] + 1, dtype=float)[:, None]
    shifted = x - x[:1]
    mean0 = np.cumsum(shifted, axis=0) / t
    with np.errstate(invalid="ignore", divide="ignore"):
        var = np.maximum(np.cumsum(shifted**2, axis=0) - t * mean0**2, 0.0) / (t - 1)
    var[0] = np.inf  # one observation says nothing about the spread
    log_a = -2.0 * math.log(alpha)
    rho2 = (log_a + math.log(log_a + 1.0)) / max(int(tuned_for), 1)
    radius = np.sqrt(var) * np.sqrt(
        2.0 * (t * rho2 + 1.0) / (t**2 * rho2) * np.log(np.sqrt(t * rho2 + 1.0) / alpha)
    )
    center = mean0 + x[:1]
    return center - radius, center + radius


def pairwise_lower_bounds(
    values: np.ndarray,
    alpha: float = 0.05,
    boundary: Boundary = "bernstein",
    value_range: tuple[float, float] = (0.0, 1.0),
    higher_is_better: bool = True,
    tuned_for: int = 20,
    since: int = 1,
) -> np.ndarray:
    """(m, m) matrix: entry [i, j] is a lower confidence bound on "method i beats method j"
    (mean(i) - mean(j), sign flipped when lower is better) after the last complete seed.

    Each pair gets a two-sided confidence sequence at level alpha / (m - 1) on its per-seed
    differences, intersected over the times t >= ``since`` (a running max of the lower
    bound, still valid; starting late keeps the asymptotic boundary away from the first,
    noisy variance estimates). The diagonal is +inf. ``alpha`` must lie in (0, 1)
    (ValueError naming it otherwise).
    """
    alpha = check_alpha(alpha)
    v = complete_rows(values)
    m = v.shape[1]
    bounds = np.full((m, m), np.inf)
    if m < 2:
        return bounds
    if len(v) == 0:
        bounds[~np.eye(m, dtype=bool)] = -np.inf
        return bounds
    sign = 1.0 if higher_is_better else -1.0
    i, j = np.triu_indices(m, 1)
    diff = sign * (v[:, i] - v[:, j])
    width = float(value_range[1]) - float(value_range[0])
    if boundary == "bernstein":
        lo, hi = map(float, value_range)
        if np.nanmin(v) < lo or np.nanmax(v) > hi:
            raise ValueError(
                f"values outside value_range {value_range}: the empirical-Bernstein boundary "
                "needs bounded values; pass the right value_range or boundary='normal_mixture'"
            )
    lower, upper = confidence_sequence(diff, alpha / (m - 1), boundary, (-width, width), tuned_for)
    first = min(max(int(since), 1), len(v)) - 1
    lower = np.nan_to_num(lower[first:], nan=-np.inf).max(axis=0)
    upper = np.nan_to_num(upper[first:], nan=np.inf).min(axis=0)
    bounds[i, j] = lower
    bounds[j, i] = -upper
    return bounds


def decide_ranking(
    values: np.ndarray,
    alpha: float = 0.05,
    min_seeds: int = 5,
    max_seeds: int | None = None,
    batch_size: int | None = None,
    *,
    higher_is_better: bool = True,
    boundary: Boundary = "bernstein",
    value_range: tuple[float, float] = (0.0, 1.0),
    method_names: Sequence[str] | None = None,
    tuned_for: int | None = None,
) -> StopDecision:
    """Stop when one method is separated from every other one at level ``alpha``.

    For every pair of methods a time-uniform confidence sequence (see
    :func:`confidence_sequence`) is run on the per-seed score differences at level
    alpha / (m - 1) (Bonferroni over the m - 1 comparisons that involve the truly best
    method, which is all a wrong "winner" needs to slip through). The rule stops when some
    method's lower bound on its advantage over each other method is above zero. Because the
    sequences hold at all times simultaneously, the probability of ever stopping with a
    wrong or tied winner is at most ``alpha`` however often one looks, so ``batch_size``
    (accepted for a uniform executor interface) does not enter the boundary. Seeds where any
    method failed (NaN) are dropped; ``min_seeds`` counts the remaining ones.

    The default ``"bernstein"`` boundary is exact for metrics bounded in ``value_range``
    (all oodsim metrics lie in [0, 1]); ``"normal_mixture"`` is tighter but asymptotic.
    """
    check_alpha(alpha)
    raw = np.asarray(values, dtype=float)
    raw = raw[:, None] if raw.ndim == 1 else raw
    n_seeds = raw.shape[0]
    _bounds_check(n_seeds, min_seeds, max_seeds)
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if boundary not in BOUNDARIES:
        raise UnknownNameError("boundary", boundary, BOUNDARIES)
    v = complete_rows(raw)
    m, usable = raw.shape[1], len(v)
    names = list(method_names) if method_names is not None else [f"method {k}" for k in range(m)]
    if len(names) != m:
        raise ValueError(f"{len(names)} method_names for {m} methods")
    if m < 2:
        return StopDecision(
            True, "ranking", "fewer than two methods: nothing to rank", np.nan, n_seeds
        )
    tuned = tuned_for if tuned_for is not None else max(min_seeds, 20)
    bounds = pairwise_lower_bounds(
        v, alpha, boundary, value_range, higher_is_better, tuned, since=min_seeds
    )
    margin = bounds.min(axis=1)
    leader = int(np.argmax(margin))
    statistic = float(margin[leader])
    how = f"{boundary} confidence sequence, alpha={alpha:g} / {m - 1} per pair"
    return _finish(
        "ranking",
        statistic > 0,
        f"{names[leader]} is best: its advantage over every other method is at least "
        f"{statistic:.4g} > 0 ({how})",
        f"no method separated yet; {names[leader]} leads with lower bound {statistic:.4g} ({how})",
        statistic,
        n_seeds,
        usable,
        min_seeds,
        max_seeds,
    )


STOPPING_RULES: dict[str, Callable[..., StopDecision]] = {
    "fixed": decide_fixed,
    "ci_width": decide_ci_width,
    "ranking": decide_ranking,
}


def decide(rule: str, values: np.ndarray | int, **params: Any) -> StopDecision:
    """Dispatch to a stopping rule by name: ``"fixed"`` (param ``n``), ``"ci_width"``
    (``epsilon``) or ``"ranking"`` (``alpha``); ``values`` is the (n_seeds, n_methods) score
    array so far (an int seed count suffices for ``"fixed"``)."""
    if rule not in STOPPING_RULES:
        raise UnknownNameError("stopping rule", rule, STOPPING_RULES)
    if rule == "fixed":
        n_seeds = values if isinstance(values, int | np.integer) else len(np.asarray(values))
        return decide_fixed(int(n_seeds), **params)
    return STOPPING_RULES[rule](np.asarray(values, dtype=float), **params)
