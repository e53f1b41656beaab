"""What a run will find in the store before it starts: how many seeds are cached already.

For the opening line of ``oodsim run`` ("20 simulations: 8 in the cache, 12 to compute"),
within a time budget: the cheap check (entries present at their recorded sizes, no
checksums) takes about 2 ms a seed, so a run of thousands of seeds counts the first ones only
and says so.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import attrs

from oodsim.protocols.base import Protocol
from oodsim.store import Store

#: seconds the count may take before it stops and reports a partial count
BUDGET_SECONDS = 1.0


@attrs.frozen
class CacheCount:
    """``cached`` of the first ``checked`` of ``total`` seeds have every entry in the store."""

    cached: int
    checked: int
    total: int

    def describe(self, unit: str) -> str:
        """E.g. "20 simulations: 8 in the cache, 12 to compute"."""
        if self.checked == self.total:
            if self.cached == self.total:
                return f"{self.total} {unit}, all in the cache"
            todo = self.total - self.cached
            return f"{self.total} {unit}: {self.cached} in the cache, {todo} to compute"
        return (
            f"{self.total} {unit}: {self.cached} of the first {self.checked} in the cache "
            "(the rest not checked yet)"
        )


def count_cached(
    job: Protocol, store: Store, seeds: Sequence[int], budget: float = BUDGET_SECONDS
) -> CacheCount:
    """How many of ``seeds`` of the run's protocol (:func:`oodsim.protocols.bind`) have every
    entry of their tasks in ``store`` (present at their recorded sizes; the run checks
    checksums before it trusts them), counted in order for at most ``budget`` seconds."""
    deadline = time.perf_counter() + budget
    cached = checked = 0
    if store.exists():
        for seed in seeds:
            if checked and time.perf_counter() > deadline:
                break
            cached += all(task.present(store) for task in job.plan(seed))
            checked += 1
    else:
        checked = len(seeds)
    return CacheCount(cached, checked, len(seeds))
