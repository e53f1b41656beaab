"""The run's side of the cluster: which tasks of a batch to submit, one scoring call per seed,
healing a seed whose entries were lost, and forgetting what a landed batch no longer needs.

:class:`Submitter` holds the run's futures, planned once per seed in flight (two batches at
most, see :mod:`oodsim.engine.window`); a task shared by several seeds is submitted once. The
cluster starts on first need: a fully cached run never starts one.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from oodsim.engine.cluster import as_landed, cluster_client
from oodsim.engine.inprocess import InProcess
from oodsim.engine.work import SCORE_KEY_PREFIX, TASK_KEY_PREFIX, Shipped, run_task, score_seed
from oodsim.heartbeat import TOPIC, Listener
from oodsim.protocols.base import Protocol, Task
from oodsim.results import SeedResult, failure_kind
from oodsim.specs.cluster import ClusterSpec
from oodsim.store import Store

#: task keys remembered as complete in the store before the set is emptied (memory bound)
_MAX_CACHED = 100_000


class Submitter:
    """Submits the missing tasks of a batch and one scoring call per seed (cluster on demand)."""

    def __init__(
        self,
        job: Protocol,
        store: Store,
        stack: contextlib.ExitStack,
        address: str | None,
        n_workers: int | None,
        worker_timeout: float | None = None,
        jobs: ClusterSpec | None = None,
        in_process: bool = False,
        listener: Listener | None = None,
    ) -> None:
        self.job = job
        self.store = store
        self.stack = stack
        self.address = address
        self.n_workers = n_workers
        self.worker_timeout = worker_timeout
        self.jobs = jobs
        self.in_process = in_process
        self.listener = listener
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
                else cluster_client(self.address, self.n_workers, self.jobs, self.shipped)
            )
            if self.listener is not None:  # the work's heartbeats, for the status line
                self.stack.enter_context(_heartbeats(self.client, self.listener))
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
                *after,
                key=f"{TASK_KEY_PREFIX}task-{task.key[:32]}{'-again' * (task.key in self.redone)}",
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
                *upstream,
                key=f"{SCORE_KEY_PREFIX}{self.run_id}-{seed}{'-again' * (seed in self.healed)}",
                pure=False,
            )
        return futures

    def complete(self, seed: int) -> bool:
        """Whether every task of ``seed`` is done in the store (its scoring needs no compute)."""
        return all(task.done(self.store) for task in self._plan(seed).values())

    def score_here(self, seed: int) -> SeedResult:
        return self.heal(score_seed(self.job, seed, self.root, torch_threads=None))

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
        return self.landed(next(iter(as_landed([future], self.worker_timeout))), seed)

    def landed(self, future: Any, seed: int) -> SeedResult:
        """The result of ``seed``'s scoring ``future``. Work that killed its worker on every
        attempt (a crash in native code, the system's out-of-memory killer) fails that seed,
        as any error of a seed does, instead of ending the run with distributed's
        ``KilledWorker``: the other seeds go on."""
        try:
            return future.result()
        except Exception as error:
            died = worker_died(error)
            if died is None:
                raise
            # scored as a seed whose task failed: its coordinates, with that failure
            return score_seed(self.job, seed, self.root, (died, ()), torch_threads=None)

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


@contextlib.contextmanager
def _heartbeats(client: Any, listener: Listener) -> Iterator[None]:
    """Deliver the heartbeats of ``client``'s work (:mod:`oodsim.heartbeat`) to ``listener``
    while the block runs (a Dask client's workers, or this process for :class:`InProcess`)."""
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
    return (
        f"its worker process died each of the {error.allowed_failures + 1} times it ran the "
        f"seed's {what}: killed by the system (out of memory?) or a crash in native code (a "
        "plug-in's?); oodsim.engine.work.run_seed runs it in one process, where the crash shows"
    )
