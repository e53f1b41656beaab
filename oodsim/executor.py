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
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import xarray as xr

from oodsim.errors import OodsimError
from oodsim.keys import digest
from oodsim.protocols.open_set import SeedOutcome, plan, simulate
from oodsim.results import assemble, save_results
from oodsim.specs import ExperimentSpec, load_spec
from oodsim.store import Store, default_root

CONNECT_TIMEOUT = 10.0


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


@contextlib.contextmanager
def cluster_client(address: str | None = None, n_workers: int | None = None) -> Iterator[Any]:
    """A ``distributed.Client``: to ``address``, else to a new local cluster closed on exit."""
    from distributed import Client, LocalCluster

    if address:
        try:
            client = Client(address, timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as error:
            raise ClusterError(
                f"no Dask scheduler answered at {address!r} within {CONNECT_TIMEOUT:.0f} s "
                f"({error}). Start one with `dask scheduler` and `dask worker ADDRESS`."
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
    """Checks that can fail before any compute: cache writable, data present and consistent."""
    from oodsim.data.registry import load_dataset

    store.ensure_writable()
    for dataset in [spec.dataset] + [o.dataset for o in spec.ood if o.dataset is not None]:
        data = load_dataset(dataset.name, dataset.root, dataset.download, dataset.image_size)
        if dataset is spec.dataset and spec.split.n_classes_needed() > data.n_classes:
            from oodsim.errors import SpecError

            raise SpecError(
                "split",
                spec.split.n_classes_needed(),
                f"at most {data.n_classes} classes (found in {dataset.root})",
            )


def _task_key(spec: ExperimentSpec, seed: int) -> str:
    return "oodsim-simulate-" + digest("simulation", "1", {"spec": spec.key, "seed": seed})[:24]


def _batches(seeds: Sequence[int], size: int) -> Iterator[Sequence[int]]:
    for start in range(0, len(seeds), size):
        yield seeds[start : start + size]


StopCheck = Callable[[list[SeedOutcome]], Any]


def run(
    spec: ExperimentSpec | str | Path,
    *,
    address: str | None = None,
    n_workers: int | None = None,
    cache: str | Path | None = None,
    out: str | Path | None = None,
    progress: bool | TextIO = True,
) -> xr.Dataset:
    """Run (or resume) an experiment and return its results as an ``xarray.Dataset``.

    ``address``: an existing Dask scheduler; else a local cluster of ``n_workers`` processes.
    ``cache``: the store root (default ``$OODSIM_CACHE`` or ``./cache``); ``out``: also save the
    results there (zarr). ``progress``: print a status line to stderr (or the given stream).
    """
    if not isinstance(spec, ExperimentSpec):
        spec = load_spec(spec)
    store = Store(cache if cache is not None else default_root())
    preflight(spec, store)
    stream = (sys.stderr if progress is True else progress) or None
    seeds = list(spec.seeds.all())
    tracker = Progress(len(seeds), stream)
    stopper = _stopping_rule(spec)
    batch_size = len(seeds) if stopper is None else spec.stopping.batch_size
    outcomes: list[SeedOutcome] = []
    decision = None
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        client = None
        try:
            for batch in _batches(seeds, batch_size):
                cached = [s for s in batch if all(store.has(*e) for e in plan(spec, s))]
                missing = [s for s in batch if s not in set(cached)]
                futures = []
                if missing:
                    if client is None:
                        client = stack.enter_context(cluster_client(address, n_workers))
                    futures = [
                        client.submit(
                            simulate,
                            spec,
                            seed,
                            str(store.root.resolve()),
                            torch_threads=1,
                            key=_task_key(spec, seed),
                            pure=False,
                        )
                        for seed in missing
                    ]
                for seed in cached:
                    outcome = simulate(spec, seed, str(store.root))
                    outcomes.append(_check(spec, outcome))
                    tracker.update(outcome, cached=True)
                if futures:
                    from distributed import as_completed

                    for future in as_completed(futures):
                        outcome = future.result()
                        outcomes.append(_check(spec, outcome))
                        tracker.update(outcome, cached=False)
                if stopper is not None:
                    decision = stopper(outcomes)
                    if decision.stop:
                        tracker.stopped(
                            f"stopped after {len(outcomes)} simulations: {decision.reason}"
                        )
                        break
        except KeyboardInterrupt:
            tracker.stopped(
                f"interrupted; {len(outcomes)} finished simulations are cached in "
                "the store; run the same spec again to resume."
            )
            raise
    extra = {"wall_seconds": round(time.perf_counter() - started, 3)}
    if decision is not None:
        import json

        extra["stopping"] = json.dumps(decision.as_dict())
    results = assemble(spec, outcomes, extra)
    if out is not None:
        save_results(results, out)
    return results


def _check(spec: ExperimentSpec, outcome: SeedOutcome) -> SeedOutcome:
    if outcome.failed and spec.on_failure == "abort":
        raise RunAborted(
            f"seed {outcome.seed} failed: {outcome.failure} "
            "(on_failure = 'abort'; finished seeds stay cached)"
        )
    return outcome


def _stopping_rule(spec: ExperimentSpec) -> StopCheck | None:
    """The spec's sequential stopping rule as a check on the outcomes so far (None: fixed)."""
    if spec.stopping.rule == "fixed":
        return None
    from oodsim.stopping import make_check

    return make_check(spec)
