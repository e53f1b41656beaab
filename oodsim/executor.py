"""Run an experiment on a Dask cluster: plan from the store, compute only what is missing.

``oodsim.run(spec)`` starts a ``distributed.LocalCluster`` of worker processes (one torch thread
each), or a ``dask_cuda.LocalCUDACluster`` when CUDA and dask-cuda are present, or connects to an
existing scheduler at ``address``. Seeds whose artifacts are all cached are scored in this process
without starting a cluster; the others are submitted as tasks keyed by content. Seeds are handled
in batches so a sequential stopping rule can stop the run early; an interrupted run loses nothing
that finished, and running it again resumes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import attrs
import numpy as np
import xarray as xr

from oodsim.detectors import user_detectors
from oodsim.errors import OodsimError
from oodsim.keys import digest
from oodsim.protocols.open_set import SeedOutcome, is_cached, simulate
from oodsim.results import assemble, save_results
from oodsim.specs import ExperimentSpec, load_spec
from oodsim.store import Store, default_root

CONNECT_TIMEOUT = 10.0
LOCAL_WORKER_TIMEOUT = 120.0  # seconds without any worker before a local run gives up


class ClusterError(OodsimError):
    """The Dask scheduler could not be reached or the cluster could not start."""


class RunAborted(OodsimError):
    """A seed failed and the spec says ``on_failure = "abort"``."""


# --------------------------------------------------------------------------- progress


class Progress:
    """Status of a run: done/total, cached, failed, elapsed, ETA.

    On a terminal one line is rewritten in place; in logs a line is printed at most every
    ``interval`` seconds and at the end.
    """

    def __init__(self, total: int, stream: TextIO | None, interval: float = 5.0) -> None:
        self.total, self.stream, self.interval = total, stream, interval
        self.done = self.cached = self.failed = 0
        self.started = self.last = time.perf_counter()
        self.tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())

    def update(self, outcome: SeedOutcome, cached: bool) -> None:
        self.done += 1
        self.cached += cached
        self.failed += outcome.failed
        now = time.perf_counter()
        finished = self.done == self.total
        if self.stream is None or not (self.tty or finished or now - self.last >= self.interval):
            return
        self.last = now
        elapsed = now - self.started
        computed = self.done - self.cached
        eta = ""
        if computed and not finished:
            eta = f", ~{_clock(elapsed / computed * (self.total - self.done))} left"
        failed = f", {self.failed} failed" if self.failed else ""
        line = (
            f"oodsim: {self.done}/{self.total} simulations ({self.cached} cached{failed}) "
            f"in {_clock(elapsed)}{eta}"
        )
        if self.tty:
            print(f"\r{line}   ", end="\n" if finished else "", file=self.stream, flush=True)
        else:
            print(line, file=self.stream, flush=True)

    def stopped(self, reason: str) -> None:
        """End the status line early (a stopping rule fired or the run was interrupted)."""
        if self.stream is not None:
            print(("\n" if self.tty else "") + f"oodsim: {reason}", file=self.stream, flush=True)


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}:{seconds:02d}"


# --------------------------------------------------------------------------- cluster


def _cuda_cluster() -> Any | None:
    """A LocalCUDACluster (one worker per GPU) when CUDA and dask-cuda are both present."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        from dask_cuda import LocalCUDACluster
    except ImportError:
        return None
    return LocalCUDACluster(threads_per_worker=1, silence_logs=logging.ERROR)


def _probe_scheduler(address: str, timeout: float) -> None:
    """Connect to ``address`` and complete the comm handshake within ``timeout`` seconds.

    ``distributed.Client(address, timeout=...)`` bounds the TCP connect but then waits for the
    handshake without a bound, so a server that accepts connections and never answers (a
    stopped scheduler, a wrong port) hangs it forever. This probe runs the same connect in its
    own event loop (in a thread, so it works under a running loop too) with a hard deadline.
    """
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from distributed.comm import connect
    from distributed.security import Security

    async def probe() -> None:
        args = Security().get_connection_args("client")
        comm = await asyncio.wait_for(connect(address, timeout=timeout, **args), timeout)
        await comm.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, probe()).result()


@contextlib.contextmanager
def cluster_client(address: str | None = None, n_workers: int | None = None) -> Iterator[Any]:
    """A ``distributed.Client``: to ``address``, else to a new local cluster closed on exit."""
    from distributed import Client, LocalCluster

    if address:
        try:
            _probe_scheduler(address, CONNECT_TIMEOUT)
            client = Client(address, timeout=CONNECT_TIMEOUT)
        except ValueError as error:  # not an address at all
            raise ClusterError(
                f"{address!r} is not a Dask scheduler address ({error}); expected e.g. "
                "tcp://host:8786"
            ) from None
        except (OSError, TimeoutError) as error:
            raise ClusterError(
                f"no Dask scheduler answered at {address!r} within {CONNECT_TIMEOUT:.0f} s "
                f"({str(error) or type(error).__name__}). Start one with `dask scheduler` and "
                "`dask worker ADDRESS`."
            ) from None
        with client:
            yield client
        return
    cluster = None if n_workers else _cuda_cluster()
    if cluster is None:
        cluster = LocalCluster(
            n_workers=n_workers or os.cpu_count() or 1,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )
    with cluster, Client(cluster) as client:
        yield client


# --------------------------------------------------------------------------- run


def preflight(spec: ExperimentSpec, store: Store) -> None:
    """Checks that can fail before any compute: data present and consistent, cache writable.

    The data is checked first (reading only), so bad input leaves the cache directory untouched.
    """
    from oodsim.data.registry import load_dataset

    for dataset in [spec.dataset] + [o.dataset for o in spec.ood if o.dataset is not None]:
        data = load_dataset(dataset.name, dataset.root, dataset.download, dataset.image_size)
        if dataset is spec.dataset and spec.split.n_classes_needed() > data.n_classes:
            from oodsim.errors import SpecError

            raise SpecError(
                "split",
                spec.split.n_classes_needed(),
                f"at most {data.n_classes} classes (found in {dataset.root})",
            )
        if dataset is spec.dataset:
            _check_sample_split(spec, data)
    store.ensure_writable()


def _check_sample_split(spec: ExperimentSpec, data: Any) -> None:
    """Build the first seed's split here (labels only, milliseconds): a sample split that
    leaves a subset every seed needs empty (e.g. ``max_per_class = 1``) fails before any
    training instead of failing every seed on the cluster."""
    from oodsim.data.splits import make_split
    from oodsim.errors import SpecError
    from oodsim.seeds import SeedStreams

    seed = spec.seeds.all()[0]
    streams = SeedStreams(seed, dict(spec.seeds.pinned))
    split = make_split(data.labels, data.n_classes, spec.split, streams, spec.dataset.max_per_class)
    needed = ["in_train", "in_val", "in_test"]
    needed += ["out_test"] if any(o.kind == "held_out" for o in spec.ood) else []
    empty = [subset for subset in needed if len(split.indices[subset]) == 0]
    if empty:
        raise SpecError(
            "split",
            f"fractions={list(spec.split.fractions)}, "
            f"dataset.max_per_class={spec.dataset.max_per_class}",
            "a sample split that leaves samples in every subset",
            f"Seed {seed} gets no samples in {', '.join(empty)}; raise max_per_class or the "
            "smallest fraction",
        )


def _task_key(spec: ExperimentSpec, seed: int) -> str:
    return "oodsim-simulate-" + digest("simulation", "1", {"spec": spec.key, "seed": seed})[:24]


def _batches(seeds: Sequence[int], size: int) -> Iterator[Sequence[int]]:
    for start in range(0, len(seeds), size):
        yield seeds[start : start + size]


class _Submitter:
    """Submits the missing seeds of a batch to the cluster (started on first need)."""

    def __init__(
        self,
        spec: ExperimentSpec,
        store: Store,
        stack: contextlib.ExitStack,
        address: str | None,
        n_workers: int | None,
    ) -> None:
        self.spec, self.store, self.stack = spec, store, stack
        self.address, self.n_workers = address, n_workers
        self.client: Any = None

    def submit(self, batch: Sequence[int]) -> dict[int, Any]:
        """Futures for the seeds of ``batch`` with missing artifacts; cached ones are skipped."""
        missing = [s for s in batch if not is_cached(self.spec, s, self.store)]
        if not missing:
            return {}
        if self.client is None:
            self.client = self.stack.enter_context(cluster_client(self.address, self.n_workers))
        root = str(self.store.root.resolve())
        shipped = user_detectors(d.name for d in self.spec.detectors)
        return {
            seed: self.client.submit(
                simulate,
                self.spec,
                seed,
                root,
                torch_threads=1,
                detectors=shipped,
                key=_task_key(self.spec, seed),
                pure=False,
            )
            for seed in missing
        }

    def cancel(self, futures: Sequence[Any]) -> None:
        if self.client is not None and futures:
            self.client.cancel(list(futures))


def run(
    spec: ExperimentSpec | str | Path,
    *,
    address: str | None = None,
    n_workers: int | None = None,
    cache: str | Path | None = None,
    out: str | Path | None = None,
    progress: bool | TextIO = True,
    worker_timeout: float | None = None,
) -> xr.Dataset:
    """Run (or resume) an experiment and return its results as an ``xarray.Dataset``.

    ``address``: an existing Dask scheduler; else a local cluster of ``n_workers`` processes.
    ``cache``: the store root (default ``$OODSIM_CACHE`` or ``./cache``); ``out``: also save the
    results there (zarr). ``progress``: print a status line to stderr (or the given stream).
    ``worker_timeout``: stop with :class:`ClusterError` when the cluster has had no worker for
    this many seconds while work is pending (default: 120 s on oodsim's own local cluster; none
    with ``address``, where workers may still be queued, e.g. on SLURM).

    With a sequential stopping rule, seeds go out in batches of ``stopping.batch_size`` (the
    next batch is submitted while the current one runs); the rule is checked each time a whole
    batch has landed, in seed order, so its decision does not depend on worker timing. When it
    fires, queued work is cancelled and the decision is recorded in ``attrs["stopping"]``.
    """
    if not isinstance(spec, ExperimentSpec):
        spec = load_spec(spec)
    store = Store(cache if cache is not None else default_root())
    preflight(spec, store)
    stream = (sys.stderr if progress is True else progress) or None
    seeds = list(spec.seeds.all())[: spec.max_seeds]
    sequential = spec.stopping.rule != "fixed"
    batches = list(_batches(seeds, spec.stopping.batch_size if sequential else len(seeds)))
    tracker = Progress(len(seeds), stream)
    outcomes: list[SeedOutcome] = []
    decision = None
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        submitter = _Submitter(spec, store, stack, address, n_workers)
        futures = {}
        try:
            for index, batch in enumerate(batches):
                for ahead in batches[index : index + 2]:  # this batch and the next one
                    if ahead[0] not in futures:
                        futures.update(dict.fromkeys(ahead))
                        futures.update(submitter.submit(ahead))
                timeout = worker_timeout
                if timeout is None and address is None:
                    timeout = LOCAL_WORKER_TIMEOUT
                outcomes += _collect(spec, store, batch, futures, tracker, timeout)
                if sequential:
                    decision = check_stopping(spec, outcomes, final=index == len(batches) - 1)
                    if decision.stop:
                        break
        except KeyboardInterrupt:
            tracker.stopped(
                f"interrupted; {len(outcomes)} finished simulations are cached in "
                "the store; run the same spec again to resume."
            )
            raise
        if decision is not None and decision.stop and len(outcomes) < len(seeds):
            submitter.cancel([f for f in futures.values() if f is not None])
            tracker.stopped(f"stopped after {len(outcomes)} simulations: {decision.reason}")
    extra = {"wall_seconds": round(time.perf_counter() - started, 3)}
    if decision is not None:
        extra["stopping"] = json.dumps(decision.as_dict())
    results = assemble(spec, outcomes, extra)
    if out is not None:
        save_results(results, out)
    return results


def _collect(
    spec: ExperimentSpec,
    store: Store,
    batch: Sequence[int],
    futures: dict[int, Any],
    tracker: Progress,
    worker_timeout: float | None = None,
) -> list[SeedOutcome]:
    """Outcomes of one batch: cached seeds scored here, the others gathered as they land."""
    outcomes = []
    for seed in batch:
        if futures.get(seed) is None:
            outcomes.append(_check(spec, simulate(spec, seed, str(store.root))))
            tracker.update(outcomes[-1], cached=True)
    running = [futures.pop(seed) for seed in batch if futures.get(seed) is not None]
    for future in _as_landed(running, worker_timeout):
        outcomes.append(_check(spec, future.result()))
        tracker.update(outcomes[-1], cached=False)
    for seed in batch:
        futures.pop(seed, None)
    order = {seed: i for i, seed in enumerate(batch)}
    return sorted(outcomes, key=lambda o: order[o.seed])


def _as_landed(
    futures: Sequence[Any], worker_timeout: float | None, poll: float = 2.0
) -> Iterator[Any]:
    """Futures as they finish; a cluster without any worker for ``worker_timeout`` seconds
    raises :class:`ClusterError` instead of waiting forever (finished work stays cached)."""
    from distributed import wait

    pending = set(futures)
    idle_since: float | None = None
    while pending:
        try:
            done, pending = wait(pending, timeout=poll, return_when="FIRST_COMPLETED")
        except TimeoutError:
            done = set()
        yield from done
        if done or worker_timeout is None:
            idle_since = None
            continue
        client = next(iter(pending)).client
        if client.nthreads():
            idle_since = None
        elif idle_since is None:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > worker_timeout:
            raise ClusterError(
                f"the Dask cluster has had no worker for {worker_timeout:.0f} s with "
                f"{len(pending)} simulations pending; finished simulations are cached, run "
                "again (or restart the workers) to resume"
            )


def _check(spec: ExperimentSpec, outcome: SeedOutcome) -> SeedOutcome:
    if outcome.failed and spec.on_failure == "abort":
        raise RunAborted(
            f"seed {outcome.seed} failed: {outcome.failure} "
            "(on_failure = 'abort'; finished seeds stay cached)"
        )
    return outcome


def check_stopping(
    spec: ExperimentSpec, outcomes: Sequence[SeedOutcome], *, final: bool = False
) -> Any:
    """Apply the spec's stopping rule to the outcomes so far (in submission order).

    The rule looks at ``stopping.metric`` on the first OOD test set; failed seeds are NaN rows,
    which the rules skip. Reaching ``max_seeds`` always stops.
    """
    from oodsim.stats import decide

    rule = spec.stopping
    column = spec.metrics.index(rule.metric)
    n_methods = len(spec.detectors)
    values = np.array(
        [
            o.scores[:, column, 0] if o.scores is not None else np.full(n_methods, np.nan)
            for o in outcomes
        ]
    ).reshape(-1, n_methods)
    params: dict[str, Any] = {"min_seeds": rule.min_seeds, "max_seeds": spec.max_seeds}
    if rule.rule == "ci_width":
        params["epsilon"] = rule.epsilon
    else:
        params |= {
            "alpha": rule.alpha,
            "batch_size": rule.batch_size,
            "higher_is_better": rule.metric != "fpr95",
            "method_names": [d.label for d in spec.detectors],
        }
    decision = decide(rule.rule, values, **params)
    if final and not decision.stop:
        decision = attrs.evolve(
            decision, stop=True, reason=f"all {len(outcomes)} seeds ran ({decision.reason})"
        )
    return decision
