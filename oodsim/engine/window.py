"""Seeds reach the cluster through a bounded window, so that a run costs the same to start and
to stop at any number of seeds.

A run cuts its seeds into batches, made when they are needed, and keeps at most two in flight:
the one it is collecting and the next. A fixed run's batch holds a few seeds per thread of the
cluster (:func:`fixed_batch_size`), enough to keep every worker busy while the batch before
lands; a sequential run's batch is its stopping rule's ``batch_size``. So the driver plans,
hashes and holds futures for two batches, never for the whole range: the first simulation of a
million seeds starts as soon as that of ten, and an interrupted run counts what is stored
among the seeds it reached without planning the others
(:meth:`oodsim.engine.progress.Progress.interrupted` says so).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

#: seeds per thread of the cluster in a fixed run's batch (two batches are in flight)
PER_SLOT = 4
#: the smallest batch of a fixed run (before the cluster reports its threads)
MIN_BATCH = 8


def fixed_batch_size(slots: int) -> int:
    """Seeds in a fixed run's next batch, for a cluster of ``slots`` threads."""
    return max(MIN_BATCH, PER_SLOT * slots)


def batches(seeds: Sequence[int], size: Callable[[], int]) -> Iterator[Sequence[int]]:
    """Consecutive batches of ``seeds``, each cut when asked for, of ``size()`` seeds (read
    again for every batch: a cluster's threads are known only once it runs)."""
    start = 0
    while start < len(seeds):
        stop = start + max(1, size())
        yield seeds[start:stop]
        start = stop
