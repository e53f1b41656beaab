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

import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import xarray as xr

from oodsim.clusters import signals
from oodsim.clusters.address import check_scheduler
from oodsim.data import fingerprint
from oodsim.engine import window
from oodsim.engine.opening import follows_line, opening_line
from oodsim.engine.placement import place
from oodsim.engine.progress import Progress, interrupted_message
from oodsim.engine.stopping import check_stopping
from oodsim.engine.submitter import Submitter
from oodsim.environment import check_environment
from oodsim.errors import ClusterError, OodsimError, SpecError
from oodsim.protocols import bind
from oodsim.results import (
    WORKER_DIED,
    ForeignOutput,
    SeedResult,
    build,
    check_not_results,
    check_output,
    failure_kind,
    is_remote,
    read_pointer,
    save_results,
)
from oodsim.results.history import Saved, read_saved
from oodsim.specs.cluster import ClusterSpec
from oodsim.store import CacheRoot, Store, cache_root, main_script
from oodsim.store.plugin_sources import check_sources, record_sources
from oodsim.store.schemes import scheme_of


class RunAborted(OodsimError):
    """A seed failed and the spec says ``on_failure = "abort"``."""


class OutputExists(ForeignOutput):
    """The results path holds results of another spec (or something oodsim did not write)."""


def run(
    spec: Any,
    *,
    address: str | None = None,
    n_workers: int | None = None,
    cache: str | Path | CacheRoot | None = None,
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
    store, a folder or an object store's URL (``s3://bucket/prefix``; default: the spec's
    ``cache``, else ``$OODSIM_CACHE``, else the ``cache/`` of the project of the spec's file,
    else of the running script, else the user cache: :func:`oodsim.store.cache_root`);
    ``out``: also save the results there (zarr).
    ``progress``: print what the run will do (the cache and why, seeds cached and to compute,
    where results go) and then a status line, to stderr (or the given stream). ``worker_timeout``:
    stop with :class:`~oodsim.engine.ClusterError` when the cluster has had no worker for this
    many seconds while work is pending (default: 120 s on oodsim's own local cluster; none with
    ``address`` or batch jobs, where workers may still be queued). ``out`` that holds results
    of the same spec is replaced; results of an earlier version of the spec (the same
    ``name``) move beside it, kept by key (:mod:`oodsim.results.history`); results of a spec of
    another name (or anything that is not oodsim results) are refused before any compute
    unless ``overwrite=True``.

    With a sequential stopping rule, seeds go out in batches of ``stopping.batch_size``; when
    the rule fires, queued work is cancelled and the decision is recorded in
    ``attrs["stopping"]``. ``attrs["store"]`` counts what was computed and what was loaded.
    """
    check_environment()  # every $OODSIM_* variable, before anything is read or made
    fingerprint.forget()  # data changed since an earlier run of this process gets new keys
    job = bind(spec)
    spec = job.spec
    seeds = spec.seeds.all()[: spec.max_seeds]
    where = place(
        getattr(spec, "cluster", None),
        len(seeds),
        cluster=cluster,
        address=address,
        n_workers=n_workers,
        worker_timeout=worker_timeout,
    )
    stream = (sys.stderr if progress is True else progress) or None
    # a silent run still tells a stall (no worker, a scheduler that does not answer), once
    tracker = Progress(len(seeds), stream, unit=job.unit, notices=None if stream else sys.stderr)
    located = _cache_root(cache, spec)
    root = located.location
    folder = root if isinstance(root, Path) else None  # (an object store is no folder)
    with tracker.telling(f"interrupted before any of its {job.unit} started; nothing was computed"):
        earlier = check_out(out, spec, overwrite, folder) if out is not None else None
        if folder is not None:
            check_not_results(folder)
        store = Store(root)
        if not where.in_process and scheme_of(root) == "memory":
            raise SpecError(
                "cache",
                str(root),
                "a store other processes can reach: memory:// lives in one process "
                "(run in this process, n_workers=1, or give a folder or a bucket)",
            )
        if where.address is not None and not store.exists():  # all to compute: it is needed
            check_scheduler(where.address)  # before the store's folder is made
        if stream is not None:
            saved_to = None if out is None else out if is_remote(out) else Path(out)
            print(opening_line(job, store, located, saved_to), file=stream, flush=True)
            if earlier is not None:
                print(follows_line(spec, earlier, Path(out)), file=stream, flush=True)
        job.preflight(store)  # it only reads: a seed's checks as a worker would run them
        kinds = [kind for task in job.plan(seeds[0]) for kind, _ in task.entries]
        layout = job.layout()
        store.check_obstacles(kinds)
    sequential = spec.stopping.rule != "fixed"
    results: list[SeedResult] = []
    decision = None
    started = time.perf_counter()
    submitter = Submitter(job, store, where, tracker.heard if stream is not None else None)
    with signals.holding() as stopping, submitter, tracker.watching():
        tracker.slots = submitter.slots
        unrecorded = check_sources(store, submitter.shipped.sources())
        upcoming = window.batches(
            seeds,
            (lambda: spec.stopping.batch_size)
            if sequential
            else (lambda: window.fixed_batch_size(submitter.slots())),
        )
        try:
            batch = next(upcoming, None)
            if batch is not None:
                submitter.submit(batch)
            while batch is not None:
                following = next(upcoming, None)
                if following is not None:
                    submitter.submit(following)  # runs while this batch lands
                results += _collect(spec, submitter, batch, tracker)
                submitter.release()
                if sequential:
                    decision = check_stopping(spec, layout, results, final=following is None)
                    if decision.stop:
                        break
                batch = following
        except KeyboardInterrupt as error:
            stopping.hold()  # another Ctrl-C waits for the resume line
            stored = submitter.stored(results)
            reached = submitter.reached
            with signals.saying():  # one resume line, this one or the clock's
                told = interrupted_message(stored, reached, len(seeds), job.unit)
                tracker.interrupted(error, told)
                stopping.told()  # and then ends the run at once, rather than wait for the close
            raise
        events = submitter.task_events()
        record_sources(store, unrecorded)  # the plug-ins' sources, as this run computed with them
        if decision is not None and decision.stop and len(results) < len(seeds):
            submitter.cancel()
            tracker.stopped(f"stopped after {len(results)} {job.unit}: {decision.reason}")
    _check_some_scored(results, where.jobs, job.unit)
    extra: dict[str, Any] = {
        "wall_seconds": round(time.perf_counter() - started, 3),
        "n_reused": tracker.cached,  # seeds whose every entry was in the store
    }
    if decision is not None:
        extra["stopping"] = json.dumps(decision.as_dict())
    whole = f" (the results at {out} are whole: the earlier ones, or these)" if out else ""
    with tracker.telling(
        f"interrupted while its results were assembled{whole}; everything computed is in the "
        "store: run the same spec again to have them without computing anything"
    ):
        result = build(spec, job.name, layout, results, events, extra)
        if out is not None:
            _check_out_again(out, spec, overwrite, folder)
            save_results(result, out)
    return result


def _cache_root(cache: str | Path | CacheRoot | None, spec: Any) -> CacheRoot:
    """The store root of a run and why it is that one: ``cache`` as given, else the default
    of the spec's file or the running script (:func:`oodsim.store.cache_root`)."""
    if isinstance(cache, CacheRoot):
        return cache
    if cache is None:
        return cache_root(
            getattr(spec, "source", None), main_script(), getattr(spec, "cache", None)
        )
    if not str(cache).strip():  # an unset variable: not "the default"
        raise SpecError("cache", cache, "a folder path or URL (None for the default)")
    return CacheRoot(cache, "given")


def check_out(
    out: str | Path, spec: Any, overwrite: bool, cache: str | Path | None
) -> Saved | None:
    """Before any compute: ``out`` must be absent (in a folder that takes new files), an empty
    folder, or results oodsim wrote: of this spec, of an earlier version of it (the same
    ``name``: an edited spec, whose results then move beside ``out`` by key; returned, so that
    the run can say how the spec changed), or, with ``overwrite``, of another spec.
    Anything else (see :func:`~oodsim.results.check_output`, which also keeps ``out`` apart
    from the ``cache`` root) raises :class:`OutputExists` whatever ``overwrite`` says, and an
    output path that cannot be written raises :class:`~oodsim.results.OutputError`."""
    try:
        if is_remote(out):  # results under an object store's URL: no history kept beside
            pointer = read_pointer(str(out)) or {}
            key, earlier, name = pointer.get("key"), None, pointer.get("name")
            if name == spec.name:
                return None
        else:
            key = check_output(Path(out), cache=cache)
            earlier = read_saved(Path(out)) if key not in (None, spec.key) else None
            name = earlier.name if earlier is not None else None
    except ForeignOutput as error:  # oodsim replaces only what it wrote
        raise OutputExists(str(error)) from None
    if key is None or key == spec.key:
        return None
    if earlier is not None and earlier.name == spec.name:
        return earlier
    if overwrite:
        return None
    named = f" named {name!r}" if name else ""
    raise OutputExists(
        f"{out} holds results of another spec{named} (key {key[:12]}), not of {spec.name!r}: "
        "choose another output path, or pass overwrite=True (`oodsim run --overwrite`) to "
        "replace them"
    )


def _check_out_again(out: str | Path, spec: Any, overwrite: bool, cache: str | Path | None) -> None:
    """:func:`check_out` once more before the results are written: another run may have
    written there while this one computed (two runs of one name started together)."""
    try:
        check_out(out, spec, overwrite, cache)
    except OutputExists as error:
        raise OutputExists(
            f"{error}. They were written there while this run computed; nothing there was "
            "replaced, and everything computed is in the cache: the same command with another "
            "output path writes the results without computing anything"
        ) from None


def _collect(
    spec: Any, submitter: Submitter, batch: Sequence[int], tracker: Progress
) -> list[SeedResult]:
    """The results of one batch, in seed order, each checked and counted as it comes."""
    results = []
    for result, cached in submitter.collect(batch, tracker.no_worker, tracker.unanswered):
        results.append(_check(spec, result))
        kind = failure_kind(result.failure)
        excluded = kind is not None and kind.excluded
        tracker.update(result.failed and not excluded, cached=cached, excluded=excluded)
    order = {seed: i for i, seed in enumerate(batch)}
    return sorted(results, key=lambda r: order[r.seed])


def _check_some_scored(results: Sequence[SeedResult], jobs: ClusterSpec | None, unit: str) -> None:
    """A run whose every seed failed because its work killed every worker that ran it is the
    environment's failure, not data: :class:`~oodsim.engine.ClusterError`, and no results.
    The probe: SLURM jobs of ``memory = "200MB"`` (each worker's nanny kills it at 95 % of its
    share) failed all 4 seeds that way, and the run printed a table of dashes and exited 0.
    A run where some seeds were scored (or failed for reasons of their own) is data as ever:
    each such seed is a failure in ``results.failure``."""
    if not results or any(failure_kind(r.failure) is not WORKER_DIED for r in results):
        return
    if jobs is not None and jobs.is_jobs:
        share = f"{jobs.memory} a job for {jobs.worker_processes} worker process(es)"
        likely = f"the {jobs.kind} jobs' memory ({share}): raise [cluster] memory"
    else:
        likely = "the workers' memory (on oodsim's local cluster: run fewer, --workers)"
    n = len(results)
    died = WORKER_DIED.detail(results[0].failure).split(";")[0]
    raise ClusterError(
        f"{n} of {n} {unit} failed, none was scored: each one's worker process died {died}. "
        f"Most likely the cause is {likely}; else a crash in native code "
        "(oodsim.engine.work.run_seed runs a seed in one process, where it shows). No results "
        "were written; finished work is cached"
    )


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
