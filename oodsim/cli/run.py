"""``oodsim run``: its options, the opening line (what it will do), and the run itself."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from oodsim.cli.options import path_text
from oodsim.cli.reporting import report_after_run
from oodsim.cli.summary import (
    last_line,
    print_failures,
    print_variance_sources,
    print_win_probabilities,
    table_metric,
)
from oodsim.errors import OodsimError, telling_interrupt


def add_run_options(command: argparse.ArgumentParser) -> None:
    """The options of ``oodsim run`` (the same for every protocol)."""
    command.add_argument(
        "--cluster",
        metavar="KIND|ADDRESS",
        help="where tasks run: a kind (local, in-process: no cluster, or slurm, pbs, local-jobs: "
        "batch jobs described by the spec's [cluster] table, whose kind this replaces) or the "
        "address of an existing Dask scheduler, e.g. tcp://host:8786 or tls://host:8786 "
        "(default: the spec's [cluster], else local; see docs/cluster.md)",
    )
    # the old spelling of --cluster ADDRESS, kept working for scripts but not shown
    command.add_argument("--address", help=argparse.SUPPRESS)
    command.add_argument(
        "--workers",
        type=int,
        help="worker processes of the local cluster (default: one per core; 1, or a run of one "
        "seed, runs in this process without a cluster unless --cluster local)",
    )
    command.add_argument(
        "--cache",
        type=path_text,
        help="store root (default: $OODSIM_CACHE, else the cache/ folder of the spec's project; "
        "see docs/caching.md)",
    )
    command.add_argument(
        "--out",
        type=path_text,
        help="where to write results (default: $OODSIM_RESULTS/<name>.zarr, else "
        "results/<name>.zarr of the spec's project)",
    )
    command.add_argument(
        "--quiet", action="store_true", help="no progress line (a stall is still told, once)"
    )
    command.add_argument(
        "--worker-timeout",
        type=float,
        help="seconds without any worker before giving up (default: 120 on the local cluster)",
    )
    command.add_argument(
        "--metric",
        help="metric of the printed tables, one of the spec's metrics (default: auroc, else the "
        "spec's first OOD metric)",
    )
    command.add_argument(
        "--report", type=path_text, help="also write plots and a summary into this folder"
    )
    command.add_argument(
        "--overwrite",
        action="store_true",
        help="replace results of a spec of another name at --out (results of an earlier "
        "version of the same spec are kept by key beside the new ones, without this), and "
        "write --report into a folder that holds other files or another report (refused "
        "otherwise)",
    )


def cmd_run(args: argparse.Namespace) -> int:
    """Run a spec; an interrupt, whenever it comes, says in one line what it left."""
    with telling_interrupt("oodsim: interrupted before the run started; nothing was computed"):
        # a spec is read and checked before the engine (dask, torch) loads: errors come at once
        from oodsim.protocols import load

        address, cluster = _cluster_options(args.address, args.cluster)
        spec = load(args.spec)
        metric = table_metric(spec, args.metric)
        # loaded once the spec is good, so that its errors come at once
        from oodsim.clusters import signals
        from oodsim.engine import run
        from oodsim.store import CacheRoot, cache_root, default_results
        from oodsim.store.defaults import as_location

        # one cache and results folder per project, from any folder: the spec file's project
        # (a shipped spec by name: the working folder's), as oodsim.run finds it from Python
        cache = (
            CacheRoot(args.cache, "--cache")
            if args.cache
            else cache_root(spec.source, script=None, spec_cache=spec.cache)
        )
        out = as_location(args.out) if args.out else default_results(spec.name, _folder(spec))
        if args.report:  # refused before any compute, not after it
            # the report package (0.3 s of imports) loads here or after the run: a cached
            # rerun starts scoring without it
            from oodsim.report import check_report_folder

            check_report_folder(args.report, spec, overwrite=args.overwrite, results=out)
    started = time.perf_counter()
    with signals.owned():  # a Ctrl-C after the resume line ends the command at once
        results = run(  # says what it will do, then tells its own interrupt
            spec,
            address=address,
            cluster=cluster,
            n_workers=args.workers,
            cache=cache,
            out=out,
            progress=not args.quiet,
            worker_timeout=args.worker_timeout,
            overwrite=args.overwrite,
        )
    seconds = time.perf_counter() - started
    with telling_interrupt(f"oodsim: interrupted after the run; its results are in {out}"):
        # after the run: tables and the report
        from oodsim.report import report_hooks

        hooks = report_hooks(results)  # the protocol's table, and whether seeds compare methods
        print(hooks.table(results, metric))
        print_failures(results, metric)
        if hooks.compares_methods:  # not over bootstrap replicates of one test set (ImageNet-O)
            print_win_probabilities(results, metric)
            print_variance_sources(results, metric)
        if args.report:
            report = report_after_run(
                results, Path(args.report), args.quiet, overwrite=args.overwrite, source=out
            )
            print(f"report written to {report}")
    print("\n" + last_line(results, seconds, out))
    return 0


def _folder(spec) -> Path:
    """The folder whose project takes the results of ``spec`` (see oodsim.store.run_folder)."""
    from oodsim.store import run_folder  # (fast --help)

    return run_folder(spec.source, script=None)[0]


class OptionConflict(OodsimError):
    """Two options of one command ask for different things."""


def _cluster_options(address: str | None, cluster: str | None) -> tuple[str | None, str | None]:
    """``(address, cluster)`` for ``run``: ``--address`` is the old spelling of
    ``--cluster ADDRESS``, so both may be given only with the same value."""
    if address is None or cluster is None:
        return address, cluster
    if address != cluster:
        raise OptionConflict(
            f"--cluster {cluster} and --address {address} name different clusters: give "
            "--cluster or --address, not both (--address is the old spelling of --cluster ADDRESS)"
        )
    return address, None
