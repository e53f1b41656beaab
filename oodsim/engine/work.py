"""What the engine runs on a Dask worker: one task, or the scoring of one seed.

Every call sets torch to one thread and deterministic algorithms. What a script registered in
the driver (detectors, datasets, architectures: :class:`Shipped`) reached the worker once,
when it joined (:mod:`oodsim.engine.worker_setup`); the protocol, built from the run's spec,
travels with each seed's scoring. The same functions run in the driver for seeds whose entries
are all cached, and for every task of an in-process run.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping
from typing import Any

import attrs

from oodsim import plugins
from oodsim.clusters.quiet_logs import DroppedUnlessDebug, install
from oodsim.progress_notes import working_on
from oodsim.protocols import bind
from oodsim.protocols.base import Protocol, SeedFailed, Task, first_failure
from oodsim.results import SeedResult
from oodsim.specs.plugins import plugin_names
from oodsim.store import Store
from oodsim.store.schemes import scheme_of


@attrs.frozen
class Shipped:
    """Driver-side registrations that workers need: the plug-ins of every kind
    (:data:`~oodsim.specs.plugins.PLUGIN_KINDS`) that the spec names and this process
    registered, by kind and name."""

    by_kind: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)

    @classmethod
    def of(cls, spec: Any, location: str = "") -> Shipped:
        """What to ship for ``spec`` and a store at ``location``: found in its fields
        (:func:`plugin_names`) and the location's scheme, each plug-in only where this process
        registered it."""
        names = dict(plugin_names(spec))
        scheme = scheme_of(location)
        if scheme:
            names["store_backend"] = [scheme]
        found = {kind: plugins.registry(kind).shippable(wanted) for kind, wanted in names.items()}
        return cls({kind: records for kind, records in found.items() if records})

    def sources(self) -> list[tuple[str, str, str, Any]]:
        """(kind, name, version, function) of every shipped plug-in, whose source the store
        fingerprints (:mod:`oodsim.store.plugin_sources`)."""
        return [
            source
            for kind, records in self.by_kind.items()
            for source in plugins.registry(kind).sources(records)
        ]

    def adopt(self) -> None:
        """Register the shipped plug-ins here (a worker)."""
        for kind, records in self.by_kind.items():
            plugins.registry(kind).adopt(records)


#: Prefix of the keys of every task the engine submits (see :mod:`oodsim.engine.submitter`).
TASK_KEY_PREFIX = "oodsim-"
#: Prefix of the keys of the scoring calls, one per seed.
SCORE_KEY_PREFIX = f"{TASK_KEY_PREFIX}score-"


class _OwnTaskFailures(DroppedUnlessDebug):
    """Drops distributed's log of oodsim's own failed tasks: a worker's multi-line "Compute
    Failed", and the scheduler's "Task ... marked as failed because 4 workers died". The
    driver reports each failed seed in one line, and ``--debug`` keeps these logs (a task's
    traceback travels with its exception), which otherwise only repeat it above that line."""

    def drops(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return (
            message.startswith("Compute Failed") and f"Key:       {TASK_KEY_PREFIX}" in message
        ) or (message.startswith(f"Task {TASK_KEY_PREFIX}") and "workers died" in message)


def quiet_own_failures(logger_name: str = "distributed.worker") -> None:
    """Install :class:`_OwnTaskFailures` on this process's worker (or scheduler) logger,
    once."""
    install(logger_name, _OwnTaskFailures)


def deterministic_torch(threads: int) -> None:
    """``threads`` torch threads and deterministic algorithms (warnings only where an op has
    none)."""
    # scoring cached seeds in the driver needs no torch
    import torch

    torch.set_num_threads(threads)
    if not torch.are_deterministic_algorithms_enabled():
        set_deterministic(True, warn_only=True)


def set_deterministic(mode: bool, *, warn_only: bool) -> None:
    """torch's deterministic mode. ``torch.use_deterministic_algorithms`` imports the compiler
    stack (``torch._inductor``, 1.5 to 2.5 s) to set a flag of its own, which matters only once
    the compiler is loaded: before that, only torch's own flag is set."""
    # only tasks that compute with torch get here
    import torch

    if "torch._inductor.config" in sys.modules or not hasattr(
        torch._C, "_set_deterministic_algorithms"
    ):
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    else:
        torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)


def run_task(
    task: Task,
    cache_root: str,
    *after: Any,
    torch_threads: int | None = 1,
) -> tuple[str, tuple[tuple[str, str, str], ...]]:
    """Run one task unless its entries exist: (failure message or "", store events).

    ``after`` are the results of the tasks it waits for; a failed one fails this task too.
    """
    failure = first_failure([a[0] for a in after])
    store = Store(cache_root)
    if failure:
        return failure, ()
    if torch_threads:
        deterministic_torch(torch_threads)
    try:
        with working_on(task.label or f"task {task.key[:12]}"):
            if not task.done(store):
                task.compute(store)
    except SeedFailed as error:
        return str(error), tuple(store.events)
    return "", tuple(store.events)


def score_seed(
    job: Protocol,
    seed: int,
    cache_root: str,
    *upstream: Any,
    torch_threads: int | None = 1,
) -> SeedResult:
    """Score one seed from the store; a failed upstream task or scoring fails the seed. The
    seed's coordinates (:meth:`~oodsim.protocols.base.Protocol.seed_coords`) are asked once,
    first: a scored seed and a failed one carry the same."""
    started = time.perf_counter()
    store = Store(cache_root)
    coords = job.seed_coords(seed, store)  # known without scores: a failed seed has them too
    failure = first_failure([u[0] for u in upstream])
    if not failure:
        if torch_threads:
            deterministic_torch(torch_threads)
        try:
            with working_on(f"seed {seed}: scoring"):
                result = job.score(seed, store)
        except SeedFailed as error:
            failure = str(error)
        else:
            return attrs.evolve(
                result,
                coords={**coords, **result.coords},
                events=tuple(store.events),
                seconds=time.perf_counter() - started,
            )
    return SeedResult(
        seed,
        coords=coords,
        failure=failure,
        events=tuple(store.events),
        seconds=time.perf_counter() - started,
    )


def run_seed(spec: Any, seed: int, cache_root: str, *, torch_threads: int | None = 1) -> SeedResult:
    """One seed in this process, without Dask: every missing task in order, then scoring.

    For debugging a protocol and for tests; :func:`oodsim.run` does the same on a cluster.
    """
    job = bind(spec)
    planned = {t.key: t for t in job.plan(seed)}
    results: dict[str, tuple[str, tuple]] = {}

    def visit(task: Task) -> tuple[str, tuple]:
        if task.key not in results:
            after = [visit(planned[k]) for k in task.after if k in planned]
            results[task.key] = run_task(task, cache_root, *after, torch_threads=torch_threads)
        return results[task.key]

    upstream = [visit(task) for task in planned.values()]
    result = score_seed(job, seed, cache_root, *upstream, torch_threads=torch_threads)
    events = tuple(e for _, task_events in results.values() for e in task_events)
    return attrs.evolve(result, events=events + result.events)
