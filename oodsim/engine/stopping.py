"""A sequential stopping rule applied to the seeds of a run so far, in submission order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from oodsim.results import Layout, SeedResult


def stopping_values(layout: Layout, results: Sequence[SeedResult], rule: Any) -> np.ndarray:
    """(seed, method) values a stopping rule watches: ``rule.metric`` at level
    ``rule.severity`` (default: the first), first entry of every other dimension (model,
    dataset, ood); failed seeds are NaN rows, which the rules skip."""
    metric = list(layout.coords["metric"]).index(rule.metric)
    levels = [str(level) for level in layout.coords["severity"]]
    level = levels.index(str(rule.severity)) if rule.severity is not None else 0
    n_methods = len(layout.coords["method"])
    rows = []
    for result in results:
        if result.failed:
            rows.append(np.full(n_methods, np.nan))
            continue
        score = np.asarray(result.variables["score"])[:, metric, level]
        rows.append(score.reshape(n_methods, -1)[:, 0])
    return np.array(rows).reshape(-1, n_methods)


def check_stopping(
    spec: Any, layout: Layout, results: Sequence[SeedResult], *, final: bool = False
) -> Any:
    """Apply the spec's stopping rule to the results so far (in submission order).
    Reaching ``max_seeds`` always stops."""
    # stats pulls in scipy: only runs with a stopping rule need it
    from oodsim.stats import decide, higher_is_better

    rule = spec.stopping
    params: dict[str, Any] = {"min_seeds": rule.min_seeds, "max_seeds": spec.max_seeds}
    if rule.rule == "ci_width":
        params["epsilon"] = rule.epsilon
    else:
        params |= {
            "alpha": rule.alpha,
            "batch_size": rule.batch_size,
            "higher_is_better": higher_is_better(rule.metric),
            "method_names": [str(m) for m in layout.coords["method"]],
        }
    decision = decide(rule.rule, stopping_values(layout, results, rule), **params)
    if final and not decision.stop:
        decision = attrs.evolve(
            decision, stop=True, reason=f"all {len(results)} seeds ran ({decision.reason})"
        )
    return decision
