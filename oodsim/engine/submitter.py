"""The run's side of the cluster: which tasks of a batch to submit, one scoring call per seed,
collecting the seeds' results, healing a seed whose entries were lost, and forgetting what a
collected batch no longer needs.

:class:`Submitter` holds every future of the run, planned once per seed in flight (two batches
at most, see :mod:`oodsim.engine.window`); a task shared by several seeds is submitted once.
The cluster starts on first need (a fully cached run never starts one) and closes with the
submitter.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from oodsim.clusters.cluster import SHARED_CLOSE_TIMEOUT, cluster_client
from oodsim.engine.inprocess import InProcess
from oodsim.engine.placement import Placement
from oodsim.engine.waiting import ANSWER_TIMEOUT, as_landed, gathered, threads
from oodsim.engine.work import (
    SCORE_KEY_PREFIX,
    TASK_KEY_PREFIX,
    Shipped,
    quiet_own_failures,
    run_task,
    score_seed,
)
from oodsim.errors import ClusterError
from oodsim.progress_notes import TOPIC, Listener
from oodsim.protocols.base import Protocol, Task
from oodsim.results import WORKER_DIED, SeedResult, failure_kind
from oodsim.store import Store

#: task keys remembered as complete in the store before the set is emptied (memory bound)
_MAX_CACHED = 100_000


class Submitter(contextlib.ExitStack):
    """Submits the missing tasks of a batch and one scoring call per seed (cluster on demand),
    and collects the seeds' results; a context manager (an ``ExitStack`` of the client and its
    progress notes) that closes the cluster it started, told of the error that ends the run, if
    any, so that it closes without a log line."""

    def __init__(
        self,
        job: Protocol,
        store: Store,
        where: Placement,
        listener: Listener | None = None,
    ) -> None:
        super().__init__()
        self.job = job
        self.store = store
        self.where = where
        self.listener = listener
        self.root = store.location
        self.shipped = Shipped.of(job.spec, store.location)
        self.client: Any = None
        self.scoring: dict[int, Any] = {}  # seed in flight → its scoring future (None: cached)
        self.flight: list[Sequence[int]] = []  # the batches submitted and not yet released
        self.reached = 0  # seeds submitted so far: those of the batches before and in flight
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
            self.client = self.enter_context(
                InProcess()
                if self.where.in_process
                else cluster_client(
                    self.where.address,
                    self.where.n_workers,
                    self.where.jobs,
                    told=self.listener,  # how the cluster's start goes, on the status line
                    worker_setup=functools.partial(set_up_workers, shipped=self.shipped),
                )
            )
            if self.listener is not None:  # the work's progress notes, for the status line
                self.enter_context(_progress_notes(self.client, self.listener))
        return self.client

    def slots(self) -> int:
        """How many tasks run at once: the cluster's threads (1 in process or before the
        cluster started)."""
        if self.client is None or self.where.in_process:
            return 1
        try:  # bounded: a scheduler that does not answer is told while the run waits
            return max(1, threads(self.client, ANSWER_TIMEOUT) or 0)
        except Exception:  # a closing client: it is only an estimate
            return 1

    def _done(self, task: Task) -> bool:
        """Whether a task's entries are all intact, checksums included on a local disk
        (:meth:`~oodsim.store.Store.counts_as_done`): a corrupt entry is
        quarantined here, while planning, and its task submitted, so that scoring never finds
        it (checksumming costs about a tenth of reading the entries, see docs/caching.md). The
        arrays ZIP's members are left to the read, which checks the arrays it reads against
        the entry's record (a resealed ZIP then heals, see :meth:`heal`): checking them here
        too cost more than the checksums (0.4 ms an outputs entry, 0.9 ms a checkpoint)."""
        if task.key not in self.cached and all(
            self.store.counts_as_done(*entry) for entry in dict.fromkeys(task.entries + task.verify)
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
                *after,
                key=f"{TASK_KEY_PREFIX}task-{task.key[:32]}{'-again' * (task.key in self.redone)}",
                pure=False,
            )
        return self.tasks[task.key]

    def submit(self, batch: Sequence[int]) -> None:
        """Plan ``batch`` and submit its seeds' missing tasks, with a scoring call for each
        seed that has any; the others will be scored here, from the cache (:meth:`collect`)."""
        self.flight.append(batch)
        self.reached += len(batch)
        self.scoring.update(self._submit(batch))

    def _submit(self, seeds: Sequence[int]) -> dict[int, Any]:
        """A scoring future per seed with missing tasks; None for seeds scored from the cache."""
        futures: dict[int, Any] = {}
        tasks = [t for seed in seeds for t in self._plan(seed).values() if t.key not in self.cached]
        self.store.prefetch(e for t in tasks for e in (*t.entries, *t.verify))
        for seed in seeds:
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
                *upstream,
                key=f"{SCORE_KEY_PREFIX}{self.run_id}-{seed}{'-again' * (seed in self.healed)}",
                pure=False,
            )
        return futures

    def collect(
        self,
        batch: Sequence[int],
        no_worker: Callable[[float, str], None] | None = None,
        unanswered: Callable[[float, float], None] | None = None,
    ) -> Iterator[tuple[SeedResult, bool]]:
        """The results of a submitted ``batch`` as they come, each with whether it was scored
        here, from the cache: those seeds first, then the others as their scoring lands
        (``no_worker``, ``unanswered``: see :func:`~oodsim.engine.waiting.as_landed`). A seed
        that lost an entry meanwhile is healed (:meth:`heal`)."""
        for seed in batch:
            if self.scoring.get(seed) is None:
                if self.listener is not None:
                    self.listener({"task": f"seed {seed}", "stage": "scoring here, from the cache"})
                yield self.heal(self.score_here(seed)), True
        running = [seed for seed in batch if self.scoring.get(seed) is not None]
        seed_of = {id(self.scoring[seed]): seed for seed in running}
        futures = [self.scoring[seed] for seed in running]
        for future in self._landed(futures, no_worker, unanswered):
            yield self.heal(self.landed(future, seed_of[id(future)])), False

    def _landed(
        self,
        futures: Sequence[Any],
        no_worker: Callable[[float, str], None] | None = None,
        unanswered: Callable[[float, float], None] | None = None,
    ) -> Iterator[Any]:
        """:func:`~oodsim.engine.waiting.as_landed` with this run's timeouts."""
        return as_landed(
            futures,
            self.where.worker_timeout,
            no_worker=no_worker,
            unanswered=unanswered,
            scheduler_timeout=self.where.scheduler_timeout,
        )

    def stored(self, results: Sequence[SeedResult]) -> int:
        """How many of the seeds reached have every entry in the store, given the ``results``
        collected: those that landed, and those in flight or failed whose tasks are all done
        (planned again: two batches at most), without planning the seeds never reached."""
        landed = {r.seed for r in results if not r.failed}
        unsure = {*(s for b in self.flight for s in b), *(r.seed for r in results)} - landed
        return len(landed) + sum(map(self.complete, unsure))

    def complete(self, seed: int) -> bool:
        """Whether every task of ``seed`` is done in the store (its scoring needs no compute)."""
        return all(task.done(self.store) for task in self._plan(seed).values())

    def score_here(self, seed: int, *upstream: Any) -> SeedResult:
        """Score ``seed`` in this process, from the cache (``upstream``: as for
        :func:`~oodsim.engine.work.score_seed`)."""
        return score_seed(self.job, seed, self.root, *upstream, torch_threads=None)

    def heal(self, result: SeedResult) -> SeedResult:
        """A seed that failed because an entry it read had vanished or was corrupt (moved
        aside on read: bytes altered while the run went on), in scoring or in its own task, is
        planned, computed and scored once more, in this run. At most once per seed; a seed
        that failed for a reason of its own (diverged training, non-finite κ) is returned as
        it is, and so is a seed scored and excluded by the spec's rule (a degenerate
        classifier: its entries were read whole)."""
        seed = result.seed
        kind = failure_kind(result.failure)
        if kind is None or kind.excluded or seed in self.healed:
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
        future = self._submit([seed])[seed]
        if future is None:  # complete again (another process computed it meanwhile)
            return self.score_here(seed)
        return self.landed(next(iter(self._landed([future]))), seed)

    def landed(self, future: Any, seed: int) -> SeedResult:
        """The result of ``seed``'s scoring ``future``. Work that killed its worker on every
        attempt (a crash in native code, the system's out-of-memory killer) fails that seed,
        as any error of a seed does, instead of ending the run with distributed's
        ``KilledWorker``: the other seeds go on."""
        try:
            return self._result(future)
        except Exception as error:
            died = worker_died(error)
            if died is None:
                raise
            # scored as a seed whose task failed: its coordinates, with that failure
            return self.score_here(seed, (died, ()))

    def _result(self, future: Any) -> Any:
        """The result of a finished ``future``, fetched within the run's scheduler timeout."""
        return gathered(future, self.where.scheduler_timeout)

    def _failed(self, task_key: str) -> bool:
        """Whether a task of this run failed for a reason of its own: it finished with such a
        failure (e.g. diverged training), or it erred (its worker died on every attempt: four
        more deaths would not heal it); an entry that vanished under it (damaged while the
        task ran) is not one."""
        future = self.tasks.get(task_key)
        if future is not None and future.status == "error":
            return True
        if future is None or future.status != "finished":
            return False
        kind = failure_kind(self._result(future)[0])
        return kind is not None and not kind.heals

    def release(self) -> None:
        """Forget the oldest batch in flight, once collected, and its finished tasks (keeping
        their store events), so that the futures held here and the scheduler's state do not
        grow with the run. A task another seed still needs stays with that seed's scoring in
        the scheduler; once finished, it is found in the store."""
        for seed in self.flight.pop(0):
            self.scoring.pop(seed, None)
            self.planned.pop(seed, None)
            for key in self.seed_tasks.pop(seed, ()):
                future = self.tasks.get(key)
                if future is not None and future.status == "finished":
                    self.events += self._result(future)[1]
                    del self.tasks[key]

    def task_events(self) -> list[tuple[str, str, str]]:
        """Store events of every task that finished (each shared task counted once)."""
        events = list(self.events)
        for future in [*self.replaced, *self.tasks.values()]:
            if future.status == "finished":
                events += self._result(future)[1]
        return events

    def cancel(self) -> None:
        """Cancel the work in flight (a stopping rule has decided)."""
        pending = [f for f in self.scoring.values() if f is not None]
        pending += [f for f in self.tasks.values() if f.status != "finished"]
        if self.client is not None and pending:
            self.client.cancel(pending)


@contextlib.contextmanager
def _progress_notes(client: Any, listener: Listener) -> Iterator[None]:
    """Deliver the progress notes of ``client``'s work (:mod:`oodsim.progress_notes`) to
    ``listener`` while the block runs (a Dask client's workers, or this process for
    :class:`InProcess`)."""
    client.subscribe_topic(TOPIC, lambda event: listener(event[1]))
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # the client may be closing already
            client.unsubscribe_topic(TOPIC)


def worker_died(error: BaseException) -> str | None:
    """A seed's failure when ``error`` is distributed's ``KilledWorker`` (the work killed
    every worker that tried it), else None."""
    if "distributed" not in sys.modules:  # an in-process run's error: no cluster, no worker
        return None
    from distributed import KilledWorker  # loaded already (checked above): costs nothing

    if not isinstance(error, KilledWorker):
        return None
    what = "scoring" if str(error.task).startswith(SCORE_KEY_PREFIX) else "task"
    return WORKER_DIED.message(
        f"each of the {error.allowed_failures + 1} times it ran the "
        f"seed's {what}: killed by the system (out of memory?) or a crash in native code (a "
        "plug-in's?); oodsim.engine.work.run_seed runs it in one process, where the crash shows"
    )


@contextlib.contextmanager
def set_up_workers(client: Any, shared: bool, *, shipped: Shipped) -> Iterator[None]:
    """Set ``client``'s workers up for a run (``cluster_client``'s ``worker_setup``): register
    :class:`~oodsim.engine.worker_setup.WorkerSetup` on its scheduler under a name of this
    run's own, and keep oodsim's own failed tasks out of the scheduler's log in this process
    (a local or job cluster's). On a ``shared`` scheduler (an ``address``, which outlives the
    run) the plugin is unregistered when the run ends. A worker that cannot take the driver's
    registrations (say, a script's module it cannot import) stops the run here, in one line."""
    # distributed is loaded: a client exists
    from oodsim.engine.worker_setup import WorkerSetup

    quiet_own_failures("distributed.scheduler")
    name = f"oodsim-worker-setup-{uuid.uuid4().hex[:12]}"
    try:
        client.register_plugin(WorkerSetup(shipped), name=name)
    except OSError:  # a worker went away during the broadcast (distributed's CommClosedError)
        pass  # the scheduler keeps the plugin and gives it to every worker that joins
    except Exception as error:  # a worker's setup failed: it cannot run this script's work
        raise ClusterError(
            "the workers could not take the detectors, datasets or architectures this script "
            f"registered: {type(error).__name__}: {error}"
        ) from None
    try:
        yield
    finally:
        if shared:  # the scheduler keeps its plugins: leave it as it was found
            _unregister(client, name)


def _unregister(client: Any, name: str) -> None:
    """Unregister the worker plugin ``name`` from ``client``'s scheduler within
    :data:`SHARED_CLOSE_TIMEOUT`: one that does not answer keeps it, and the run ends anyway
    (``Client.unregister_worker_plugin`` takes no timeout: it waits forever for a stopped
    scheduler)."""
    try:
        client.sync(
            client.scheduler.unregister_worker_plugin,
            name=name,
            callback_timeout=SHARED_CLOSE_TIMEOUT,
        )
    except Exception as error:
        logging.getLogger(__name__).debug("the worker plugin %s stays: %r", name, error)
