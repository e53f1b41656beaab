"""``oodsim.run``: run (or resume) a spec of any protocol and return its ``xarray`` result.

For each batch of seeds the spec's protocol plans content-keyed tasks; the engine skips the
ones whose store entries exist, submits the others to a Dask cluster (started on first need;
a task shared by several seeds runs once), scores each seed where its tasks ran (or here, when
everything was cached) and assembles one result. The next batch is submitted while the current
one runs, and no other (:mod:`oodsim.engine.window`): planning, futures and scheduler state
stay bounded at any number of seeds. A sequential stopping rule is checked when a whole batch
has landed, in seed order, so its decision does not depend on worker timing. An interrupted
run loses nothing that finished: the same call resumes from the store.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import xarray as xr

from oodsim.engine import window
from oodsim.engine.cluster import LOCAL_WORKER_TIMEOUT, as_landed, check_jobs, cluster_client
from oodsim.engine.guard import check_main_guard
from oodsim.engine.inprocess import InProcess
from oodsim.engine.load import as_spec
from oodsim.engine.progress import Progress
from oodsim.engine.stopping import check_stopping
from oodsim.engine.work import Shipped, run_task, score_seed
from oodsim.errors import OodsimError, SpecError
from oodsim.heartbeat import Listener, listening
from oodsim.protocols import bind
from oodsim.protocols.base import Bound, Task
from oodsim.results import (
    ForeignOutput,
    SeedResult,
    build,
    check_output,
    failure_kind,
    save_results,
)
from oodsim.specs.cluster import ClusterSpec, resolve_cluster, runs_in_process
from oodsim.store import Store, default_root
from oodsim.store.plugin_sources import check_sources

#: task keys remembered as complete in the store before the set is emptied (memory bound)
_MAX_CACHED = 100_000


class RunAborted(OodsimError):
    """A seed failed and the spec says ``on_failure = "abort"``."""


class OutputExists(ForeignOutput):
    """The results path holds results of another spec (or something oodsim did not write)."""


class _Submitter:
    """Submits the missing tasks of a batch and one scoring call per seed (cluster on demand)."""

    def __init__(
        self,
        job: Bound,
        store: Store,
        stack: contextlib.ExitStack,
        address: str | None,
        n_workers: int | None,
        worker_timeout: float | None = None,
        jobs: ClusterSpec | None = None,
        in_process: bool = False,
        listener: Listener | None = None,
    ) -> None:
        self.job, self.store, self.stack = job, store, stack
        self.address, self.n_workers, self.worker_timeout = address, n_workers, worker_timeout
        self.jobs, self.in_process, self.listener = jobs, in_process, listener
        self.root = str(store.root.resolve())
        self.shipped = Shipped.of(job.spec)
        self.client: Any = None
        self.tasks: dict[str, Any] = {}  # task key → future, of the batches in flight
        self.seed_tasks: dict[int, list[str]] = {}  # seed in flight → its submitted tasks
        self.planned: dict[int, dict[str, Task]] = {}  # seed in flight → its tasks, by key
        self.events: list[tuple[str, str, str]] = []  # of tasks released (see release())
        self.cached: set[str] = set()  # task keys found complete in the store
        self.healed: set[int] = set()  # seeds computed again after scoring lost an entry
        self.replaced: list[Any] = []  # task futures of earlier attempts (for their events)
        self.redone: set[str] = set()  # task keys submitted again by heal()
        # scoring reads data roots, which specs do not key: one run's keys are its own
        self.run_id = uuid.uuid4().hex[:16]

    def _client(self) -> Any:
        """A Dask client (the cluster starts on first need), or the in-process executor."""
        if self.client is None:
            self.client = self.stack.enter_context(
                InProcess()
                if self.in_process
                else cluster_client(self.address, self.n_workers, self.jobs)
            )
            if self.listener is not None:  # the work's heartbeats, for the status line
                self.stack.enter_context(listening(self.client, self.listener))
        return self.client

    def slots(self) -> int:
        """How many tasks run at once: the cluster's threads (1 in process or before the
        cluster started)."""
        if self.client is None or self.in_process:
            return 1
        try:
            return max(1, sum(self.client.nthreads().values()))
        except Exception:  # a closing client: the estimate is only a status line
            return 1

    def _done(self, task: Task) -> bool:
        """Whether a task's entries are all intact, checksums included: a corrupt entry is
        quarantined here, while planning, and its task submitted, so that scoring never finds
        it (checksumming costs about a tenth of reading the entries, see docs/caching.md). The
        arrays ZIP's members are left to the read, which checks the arrays it reads against
        the entry's record (a resealed ZIP then heals, see :meth:`heal`): checking them here
        too cost more than the checksums (0.4 ms an outputs entry, 0.9 ms a checkpoint)."""
        if task.key not in self.cached and all(
            self.store.verify_entry(*entry, members=False)
            for entry in dict.fromkeys(task.entries + task.verify)
        ):
            if len(self.cached) >= _MAX_CACHED:  # bounded: a key forgotten is checked again
                self.cached.clear()
            self.cached.add(task.key)
            return True
        return task.key in self.cached

    def _plan(self, seed: int) -> dict[str, Task]:
        """The tasks of a seed in flight, planned once (planning hashes every key) and kept
        until its batch is released."""
        if seed not in self.planned:
            self.planned[seed] = {t.key: t for t in self.job.plan(seed)}
        return self.planned[seed]

    def _task_future(self, task: Task, planned: dict[str, Task], client: Any) -> Any:
        if task.key not in self.tasks:
            after = [
                self._task_future(planned[k], planned, client)
                for k in task.after
                if k in planned and not self._done(planned[k])
            ]
            self.tasks[task.key] = client.submit(
                run_task,
                task,
                self.root,
                self.shipped,
                *after,
                key=f"oodsim-task-{task.key[:32]}{'-again' * (task.key in self.redone)}",
                pure=False,
            )
        return self.tasks[task.key]

    def submit(self, batch: Sequence[int]) -> dict[int, Any]:
        """A scoring future per seed with missing tasks; None for seeds scored from the cache."""
        futures: dict[int, Any] = {}
        for seed in batch:
            planned = self._plan(seed)
            missing = [t for t in planned.values() if not self._done(t)]
            if not missing:
                futures[seed] = None
                continue
            client = self._client()
            upstream = [self._task_future(t, planned, client) for t in missing]
            self.seed_tasks[seed] = [t.key for t in missing]
            futures[seed] = client.submit(
                score_seed,
                self.job,
                seed,
                self.root,
                self.shipped,
                *upstream,
                key=f"oodsim-score-{self.run_id}-{seed}{'-again' * (seed in self.healed)}",
                pure=False,
            )
        return futures

    def complete(self, seed: int) -> bool:
        """Whether every task of ``seed`` is done in the store (its scoring needs no compute)."""
        return all(task.done(self.store) for task in self._plan(seed).values())

    def score_here(self, seed: int) -> SeedResult:
        return self.heal(score_seed(self.job, seed, self.root, self.shipped, torch_threads=None))

    def heal(self, result: SeedResult) -> SeedResult:
        """A seed that failed because an entry it read had vanished or was corrupt (moved
        aside on read: bytes altered while the run went on), in scoring or in its own task, is
        planned, computed and scored once more, in this run. At most once per seed; a seed
        that failed for a reason of its own (diverged training, non-finite κ) is returned as
        it is."""
        seed = result.seed
        if not result.failed or seed in self.healed:
            return result
        planned = self._plan(seed)
        if any(map(self._failed, planned)) or all(t.done(self.store) for t in planned.values()):
            return result
        self.healed.add(seed)
        for key in planned:
            self.cached.discard(key)
            if key in self.tasks:  # its entries are gone: run it again, under a new Dask key
                self.replaced.append(self.tasks.pop(key))
                self.redone.add(key)
        future = self.submit([seed])[seed]
        if future is None:  # complete again (another process computed it meanwhile)
            return self.score_here(seed)
        return next(iter(as_landed([future], self.worker_timeout))).result()

    def _failed(self, task_key: str) -> bool:
        """Whether a task of this run finished with a failure of its own (e.g. diverged
        training); an entry that vanished under it (damaged while the task ran) is not one."""
        future = self.tasks.get(task_key)
        if future is None or future.status != "finished":
            return False
        kind = failure_kind(future.result()[0])
        return kind is not None and not kind.heals

    def release(self, batch: Sequence[int]) -> None:
        """Forget the finished tasks of a collected batch (keeping their store events), so
        that the futures held here and the scheduler's state do not grow with the run. A task
        another seed still needs stays with that seed's scoring in the scheduler; once
        finished, it is found in the store."""
        for seed in batch:
            self.planned.pop(seed, None)
            for key in self.seed_tasks.pop(seed, ()):
                future = self.tasks.get(key)
                if future is not None and future.status == "finished":
                    self.events += future.result()[1]
                    del self.tasks[key]

    def task_events(self) -> list[tuple[str, str, str]]:
        """Store events of every task that finished (each shared task counted once)."""
        events = list(self.events)
        for future in [*self.replaced, *self.tasks.values()]:
            if future.status == "finished":
                events += future.result()[1]
        return events

    def cancel(self, futures: Sequence[Any]) -> None:
        if self.client is not None and futures:
            self.client.cancel(list(futures))


def run(
    spec: Any,
    *,
    address: str | None = None,
    n_workers: int | None = None,
    cache: str | Path | None = None,
    out: str | Path | None = None,
    progress: bool | TextIO = True,
    worker_timeout: float | None = None,
    overwrite: bool = False,
    cluster: str | ClusterSpec | Mapping[str, Any] | None = None,
) -> xr.Dataset:
    """Run (or resume) a spec of any protocol (or a spec file) and return its results.

    ``address``: an existing Dask scheduler; else the spec's ``[cluster]`` (batch jobs on
    SLURM, PBS or local processes, see ``docs/cluster.md``) or a local cluster of
    ``n_workers`` processes, started only when something is missing from the store. With
    ``n_workers=1`` (or one seed and no ``n_workers``) and nothing naming a cluster, the tasks
    run in this process without one (faster; the same store entries and results).
    ``cluster``: a kind (``"slurm"``, ``"pbs"``, ``"local-jobs"``, ``"local"``,
    ``"in-process"``) that replaces
    the kind of the spec's ``[cluster]`` table, a whole table (a ``ClusterSpec`` or a dict),
    or a scheduler address (like ``address``, which may not be given with it). ``cache``: the
    store root (default ``$OODSIM_CACHE``, else the ``cache/`` of the current folder's project,
    :func:`oodsim.store.default_root`); ``out``: also save the results
    there (zarr).
    ``progress``: print a status line to stderr (or the given stream). ``worker_timeout``:
    stop with :class:`~oodsim.engine.ClusterError` when the cluster has had no worker for this
    many seconds while work is pending (default: 120 s on oodsim's own local cluster; none with
    ``address`` or batch jobs, where workers may still be queued). ``out`` that holds results
    of another spec (or anything that is not oodsim results) is refused before any compute
    unless ``overwrite=True``; results of the same spec are replaced.

    With a sequential stopping rule, seeds go out in batches of ``stopping.batch_size``; when
    the rule fires, queued work is cancelled and the decision is recorded in
    ``attrs["stopping"]``. ``attrs["store"]`` counts what was computed and what was loaded.
    """
    job = bind(as_spec(spec))
    spec = job.spec
    if n_workers is not None and (isinstance(n_workers, bool) or n_workers < 1):
        raise SpecError("workers", n_workers, "a number of worker processes >= 1")
    if worker_timeout is not None and not (
        isinstance(worker_timeout, int | float)
        and not isinstance(worker_timeout, bool)
        and math.isfinite(worker_timeout)
        and worker_timeout > 0
    ):
        raise SpecError("worker_timeout", worker_timeout, "a finite number of seconds > 0")
    seeds = spec.seeds.all()[: spec.max_seeds]
    table = getattr(spec, "cluster", None)
    in_process = runs_in_process(table, cluster, address, n_workers, len(seeds))
    if in_process and n_workers not in (None, 1):
        raise SpecError("workers", n_workers, "no worker count with an in-process run")
    jobs, address = resolve_cluster(table, cluster, address)
    if jobs is not None:
        if n_workers is not None:
            raise SpecError(
                "workers",
                n_workers,
                f"no worker count with a {jobs.kind} cluster: [cluster] n_jobs x processes",
            )
        check_jobs(jobs)  # dask-jobqueue and the submit command, before any compute
    elif address is None and not in_process:  # a local cluster's workers re-import the script
        check_main_guard()
    if out is not None:
        check_out(out, spec, overwrite, cache if cache is not None else default_root())
    store = Store(cache if cache is not None else default_root())
    job.preflight(store)
    layout = job.layout()
    stream = (sys.stderr if progress is True else progress) or None
    sequential = spec.stopping.rule != "fixed"
    tracker = Progress(len(seeds), stream, unit=job.unit)
    if worker_timeout is None and address is None and (jobs is None or jobs.kind == "local-jobs"):
        # local processes (a local cluster, or local jobs: no batch queue to wait in) start
        # within seconds; a batch system's jobs may queue for hours, so they get no default
        worker_timeout = LOCAL_WORKER_TIMEOUT
    results: list[SeedResult] = []
    decision = None
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        submitter = _Submitter(
            job,
            store,
            stack,
            address,
            n_workers,
            worker_timeout,
            jobs,
            in_process,
            listener=tracker.heard if stream is not None else None,
        )
        tracker.slots = submitter.slots
        check_sources(store.root, submitter.shipped.sources())
        futures: dict[int, Any] = {}  # seed in flight → its scoring future (None: cached)
        upcoming = window.batches(
            seeds,
            (lambda: spec.stopping.batch_size)
            if sequential
            else (lambda: window.fixed_batch_size(submitter.slots())),
        )
        flight: list[Sequence[int]] = []  # the batch being collected and the next one
        reached = 0  # seeds handed out so far: those of the batches before and in flight

        def hand_out(batch: Sequence[int] | None) -> Sequence[int] | None:
            nonlocal reached
            if batch is not None:
                reached += len(batch)
                flight.append(batch)
                futures.update(submitter.submit(batch))  # a future or None for every seed
            return batch

        try:
            batch = hand_out(next(upcoming, None))
            while batch is not None:
                following = hand_out(next(upcoming, None))  # runs while this batch lands
                results += _collect(spec, submitter, batch, futures, tracker, worker_timeout)
                submitter.release(flight.pop(0))
                if sequential:
                    decision = check_stopping(spec, layout, results, final=following is None)
                    if decision.stop:
                        break
                batch = following
        except KeyboardInterrupt:
            # what landed, and the seeds in flight (planned again: two batches at most)
            landed = {r.seed for r in results if not r.failed}
            unsure = {*(s for b in flight for s in b), *(r.seed for r in results)} - landed
            stored = len(landed) + sum(map(submitter.complete, unsure))
            tracker.stopped(window.interrupted_message(stored, reached, len(seeds), job.unit))
            raise
        events = submitter.task_events()
        if decision is not None and decision.stop and len(results) < len(seeds):
            submitter.cancel([f for f in futures.values() if f is not None])
            submitter.cancel([f for f in submitter.tasks.values() if f.status != "finished"])
            tracker.stopped(f"stopped after {len(results)} {job.unit}: {decision.reason}")
    extra: dict[str, Any] = {"wall_seconds": round(time.perf_counter() - started, 3)}
    if decision is not None:
        extra["stopping"] = json.dumps(decision.as_dict())
    extra |= job.result_attrs()
    result = build(spec, job.name, layout, results, events, extra)
    if out is not None:
        save_results(result, out)
    return result


def check_out(out: str | Path, spec: Any, overwrite: bool, cache: str | Path) -> None:
    """Before any compute: ``out`` must be absent (in a folder that takes new files), an empty
    folder, or results oodsim wrote, of this spec or, with ``overwrite``, of another one.
    Anything else (see :func:`~oodsim.results.check_output`, which also keeps ``out`` apart
    from the ``cache`` root) raises :class:`OutputExists` whatever ``overwrite`` says, and an
    output path that cannot be written raises :class:`~oodsim.results.OutputError`."""
    path = Path(out)
    try:
        key = check_output(path, cache=cache)
    except ForeignOutput as error:  # oodsim replaces only what it wrote
        raise OutputExists(str(error)) from None
    if key is None or key == spec.key or overwrite:
        return
    raise OutputExists(
        f"{path} holds results of another spec (key {key[:12]}); choose another output path, "
        "or pass overwrite=True (`oodsim run --overwrite`) to replace it"
    )


def _collect(
    spec: Any,
    submitter: _Submitter,
    batch: Sequence[int],
    futures: dict[int, Any],
    tracker: Progress,
    worker_timeout: float | None,
) -> list[SeedResult]:
    """Results of one batch: cached seeds scored here, the others gathered as they land."""
    results = []
    for seed in batch:
        if futures.get(seed) is None:
            results.append(_check(spec, submitter.score_here(seed)))
            tracker.update(results[-1].failed, cached=True)
    running = [futures.pop(seed) for seed in batch if futures.get(seed) is not None]
    no_worker = tracker.no_worker if tracker.stream is not None else None
    for future in as_landed(running, worker_timeout, no_worker=no_worker):
        results.append(_check(spec, submitter.heal(future.result())))
        tracker.update(results[-1].failed, cached=False)
    for seed in batch:
        futures.pop(seed, None)
    order = {seed: i for i, seed in enumerate(batch)}
    return sorted(results, key=lambda r: order[r.seed])


def _check(spec: Any, result: SeedResult) -> SeedResult:
    """Abort on a failed seed when the spec says so; a degenerate training is an exclusion,
    not a failure of the run."""
    kind = failure_kind(result.failure)
    if kind is not None and not kind.excluded and spec.on_failure == "abort":
        raise RunAborted(
            f"seed {result.seed} failed: {result.failure} "
            "(on_failure = 'abort'; finished seeds stay cached)"
        )
    return result
