"""``oodsim run``: its options, the opening line (what it will do), and the run itself."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from oodsim.cli.options import path_text
from oodsim.cli.reporting import report_after_run
from oodsim.cli.summary import (
    print_failures,
    print_variance_sources,
    print_win_probabilities,
    seed_unit,
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
        help="replace results of another spec at --out, and write --report into a folder "
        "that holds other files or another report (refused otherwise)",
    )


def cmd_run(args: argparse.Namespace) -> int:
    """Run a spec; an interrupt, whenever it comes, says in one line what it left."""
    with telling_interrupt("oodsim: interrupted before the run started; nothing was computed"):
        # loaded by the command that needs it, so `oodsim --help` stays fast
        from oodsim.engine import load, run
        from oodsim.store import default_results, default_root

        address, cluster = _cluster_options(args.address, args.cluster)
        spec = load(args.spec)
        metric = table_metric(spec, args.metric)
        near = Path(args.spec).parent  # one cache and results folder per project, from any folder
        cache = Path(args.cache) if args.cache else default_root(near)
        new_cache = " (a new cache: it was empty)" if not cache.exists() else ""
        out = Path(args.out) if args.out else default_results(spec.name, near)
        if args.report:  # refused before any compute, not after it
            # the report package (0.3 s of imports) loads here or after the run: a cached
            # rerun starts scoring without it
            from oodsim.report import check_report_folder

            check_report_folder(args.report, spec, overwrite=args.overwrite, results=out)
        if not args.quiet:
            print(_opening_line(spec, cache, out), flush=True)  # stderr: errors and progress
    started = time.perf_counter()
    results = run(  # tells its own interrupt: on its status line, else as a note
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
    n_failed = int(results.attrs.get("n_failed", 0))
    failed = f" ({n_failed} excluded)" if n_failed else ""
    print(
        f"\n{results.sizes['seed']} {seed_unit(results)}{failed} in {seconds:.1f} s "
        f"(store {cache.resolve()}{new_cache}: {results.attrs['store']}); "
        f"results written to {out}"
    )
    return 0


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


def _opening_line(spec, cache: Path, out: Path) -> str:
    """What a run is about to do, before anything heavy: the spec, the plan (seeds in the
    cache, seeds to compute), the store it reads (with how many entries it already holds) and
    where the results go."""
    # (fast --help)
    from oodsim.engine.plan import count_cached
    from oodsim.protocols import bind
    from oodsim.store import Store
    from oodsim.store.layout import TMP_PREFIX, is_cache

    job = bind(spec)
    store = Store(cache)
    entries = sum(not p.parent.name.startswith(TMP_PREFIX) for p in cache.glob("*/*/*/meta.json"))
    held = f"{entries} entries" if entries else "empty: everything is computed"
    if cache.is_dir() and not is_cache(cache) and any(cache.iterdir()):
        held += "; a folder of other files, used but not marked: `oodsim cache` refuses it"
    plan = count_cached(job, store, spec.seeds.all()[: spec.max_seeds]).describe(job.unit)
    rule = "" if spec.stopping.rule == "fixed" else f", stopping rule {spec.stopping.rule}"
    return (
        f"oodsim: {spec.name} ({job.name}; {plan}{rule}); "
        f"cache {cache.resolve()} ({held}); results to {out}"
    )
