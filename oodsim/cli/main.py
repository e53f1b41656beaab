"""The oodsim command: run (any protocol's spec), report, cache ls|verify|gc,
imagenet21k-classes, imagenet-o (one model or saved logits); severity is an alias of run.

Ctrl-C (SIGINT) and SIGTERM stop a run the same way: finished work stays in the store, one line
says how to resume, and the exit code is 130 or 143.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from oodsim.cli.imagenet_o import add_command as add_imagenet_o
from oodsim.cli.options import add_trust
from oodsim.errors import DEBUG_ENV, OodsimError, SpecError

#: exit codes of a command stopped by Ctrl-C (SIGINT) or SIGTERM: 128 + the signal's number
EXIT_SIGINT, EXIT_SIGTERM = 128 + signal.SIGINT, 128 + signal.SIGTERM


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
        help="store root (default: $OODSIM_CACHE, else the cache/ folder of the spec's project; "
        "see docs/caching.md)",
    )
    command.add_argument(
        "--out",
        help="where to write results (default: $OODSIM_RESULTS/<name>.zarr, else "
        "results/<name>.zarr of the spec's project)",
    )
    command.add_argument("--quiet", action="store_true", help="no progress line")
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
    command.add_argument("--report", help="also write plots and a summary into this folder")
    command.add_argument(
        "--overwrite",
        action="store_true",
        help="replace results of another spec at --out, and write --report into a folder "
        "that holds other files or another report (refused otherwise)",
    )


def _cmd_run(args: argparse.Namespace) -> int:
    # loaded by the command that needs it, so `oodsim --help` stays fast
    from oodsim.engine import load, run
    from oodsim.report import check_report_folder, format_summary_table, write_report
    from oodsim.store import default_results, default_root

    address, cluster = _cluster_options(args.address, args.cluster)
    spec = load(args.spec)
    metric = _table_metric(spec, args.metric)
    near = Path(args.spec).parent  # one cache and results folder per project, from any folder
    cache = Path(args.cache) if args.cache else default_root(near)
    new_cache = " (a new cache: it was empty)" if not cache.exists() else ""
    out = Path(args.out) if args.out else default_results(spec.name, near)
    if args.report:  # refused before any compute, not after it
        check_report_folder(args.report, spec, overwrite=args.overwrite, results=out)
    if not args.quiet:
        print(_opening_line(spec, cache, out), flush=True)  # stderr: errors and progress
    started = time.perf_counter()
    results = run(
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
    protocol = results.attrs["protocol"]
    if protocol == "severity":
        # severity results only
        from oodsim.report.severity import format_level_table

        print(format_level_table(results, metric))
    elif protocol == "imagenet_o":
        # ImageNet-O seeds resample one fixed test set: the full set's score, and the
        # percentile interval of the replicates, labelled as test-set sampling
        from oodsim.report.tables import bootstrap_table

        print(bootstrap_table(results))
    else:
        print(format_summary_table(results))
    _print_failures(results, metric)
    if protocol != "imagenet_o":  # a win over bootstrap replicates of one test set means little
        _print_win_probabilities(results, metric)
        _print_variance_sources(results, metric)
    if args.report:
        report = write_report(results, Path(args.report), overwrite=args.overwrite, source=out)
        print(f"report written to {report}")
    n_failed = int(results.attrs.get("n_failed", 0))
    failed = f" ({n_failed} excluded)" if n_failed else ""
    print(
        f"\n{results.sizes['seed']} {_unit(results)}{failed} in {seconds:.1f} s "
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
    from oodsim.protocols import protocol_of
    from oodsim.store import Store
    from oodsim.store.layout import TMP_PREFIX

    protocol = protocol_of(spec)
    store = Store(cache)
    entries = sum(not p.parent.name.startswith(TMP_PREFIX) for p in cache.glob("*/*/*/meta.json"))
    held = f"{entries} entries" if entries else "empty: everything is computed"
    plan = count_cached(spec, store, spec.seeds.all()[: spec.max_seeds]).describe(protocol.unit)
    rule = "" if spec.stopping.rule == "fixed" else f", stopping rule {spec.stopping.rule}"
    return (
        f"oodsim: {spec.name} ({protocol.name}; {plan}{rule}); "
        f"cache {cache.resolve()} ({held}); results to {out}"
    )


def _table_metric(spec, metric: str | None) -> str:
    """The metric of the printed tables: one the spec computes (refused before any compute
    otherwise), by default auroc or else the spec's first OOD metric."""
    # loaded by the command that needs it, so `oodsim --help` stays fast
    from oodsim.errors import UnknownNameError
    from oodsim.stats import is_ood_metric

    names = tuple(spec.metrics)
    if metric is not None:
        if metric not in names:
            raise UnknownNameError("--metric", metric, names)
        return metric
    return "auroc" if "auroc" in names else next((m for m in names if is_ood_metric(m)), names[0])


def _unit(results) -> str:
    """What one seed is called in the protocol that made ``results`` ("simulations", "seeds")."""
    from oodsim.protocols import get_protocol  # (fast --help)

    return get_protocol(str(results.attrs.get("protocol", "open_set"))).unit


def _print_failures(results, metric: str) -> None:
    """Which seeds the estimates leave out and why: failed seeds (grouped by message) and
    degenerate ones (a classifier not above chance, each with its balanced accuracy). They are
    NaN or masked rows that every estimate skips, so the summary must say they exist; with
    degenerate seeds, each method's mean ``metric`` with and without them."""
    from oodsim.report.tables import exclusion_effect_table  # (fast --help)
    from oodsim.results import exclusions

    groups = exclusions(results)
    if not groups:
        return
    n = sum(len(seeds) for seeds in groups.values())
    print(f"\n{n} of {results.sizes['seed']} {_unit(results)} excluded from the estimates above:")
    for reason, seeds in groups.items():
        if reason == "degenerate":
            print(
                f"  {len(seeds)} x degenerate: classifier not above chance (kept with "
                "[degenerate] keep = true)"
            )
            for seed, detail in seeds[:10]:
                print(f"    seed {seed}: {detail}")
            if len(seeds) > 10:
                print(f"    ... and {len(seeds) - 10} more")
            continue
        shown = ", ".join(str(s) for s, _ in seeds[:10]) + (", ..." if len(seeds) > 10 else "")
        print(f"  {len(seeds)} x failed: {reason} (seed {shown})")
    effect = exclusion_effect_table(results, metric)
    if effect:
        print("\n" + effect)


def _print_variance_sources(results, metric: str) -> None:
    """Under ``[seeds.design]``: each method's variance share by source of randomness, with
    its interval (:func:`oodsim.stats.variance_components`)."""
    # loaded by the command that needs it, so `oodsim --help` stays fast
    from oodsim.report.sources import has_design, variance_sources_table
    from oodsim.stats import is_ood_metric, variance_components

    if not has_design(results) or not is_ood_metric(metric):
        return
    vc = variance_components(results, metric)
    print(
        f"\nShare of the seed-to-seed variance of {metric} by source [{vc.attrs['confidence']:.0%} "
        f"interval; {vc.attrs['estimator']} fit, see docs/statistics.md]:"
    )
    table = variance_sources_table(vc, markdown=False)
    print("\n".join("  " + line for line in table.splitlines()))


def _print_win_probabilities(results, metric: str, k: int = 5) -> None:
    """P(each method has the best mean over k random seeds), per cell (OOD set, level, model),
    for both ways of drawing the seeds side by side (independent per method, paired), each
    with a bootstrap interval over the seeds; every method is listed, however small. Only for
    an OOD metric (accuracy is the same for every detector), the first one of the results when
    ``metric`` is not one."""
    # loaded by the command that needs it, so `oodsim --help` stays fast
    from oodsim.report.tables import win_interval_note, win_intervals, win_table
    from oodsim.stats import PAIRING_LABELS, PAIRINGS, is_ood_metric

    if results.sizes["method"] < 2 or results.sizes["seed"] < k:
        return
    names = [str(m) for m in results.metric.values]
    if metric not in names or not is_ood_metric(metric):
        metric = next((m for m in names if is_ood_metric(m)), None)
        if metric is None:
            return
    n_draws = 10_000
    wins = win_intervals(results, metric, k, n_draws, 0, PAIRINGS)
    print(
        f"\nP(best mean {metric} in a {k}-seed comparison; {n_draws} draws) "
        f"{win_interval_note(wins, results.sizes['seed'])}:"
    )
    for p in PAIRINGS:
        print("  " + PAIRING_LABELS[p].replace("k seeds", f"{k} seeds"))
    table = win_table(results, k, n_draws, 0, markdown=False, metric=metric, wins=wins)
    print("\n".join("  " + line for line in table.splitlines()))


def _cmd_report(args: argparse.Namespace) -> int:
    # loaded by the command that needs it, so `oodsim --help` stays fast
    from oodsim.report import report_folder, write_report
    from oodsim.results import open_results

    results = open_results(args.results, trust=args.trust)
    out = Path(args.out) if args.out else report_folder(args.results)
    path = write_report(
        results, out, overwrite=args.overwrite, source=args.results, figures=args.figures
    )
    print(f"report written to {path}")
    return 0


def _cmd_cache(args: argparse.Namespace) -> int:
    # loaded by the command that needs it, so `oodsim --help` stays fast
    from oodsim.store import Store, default_root

    store = Store(args.cache or default_root())
    store.ensure_present()
    if args.action == "gc" and not (math.isfinite(args.older_than) and args.older_than >= 0):
        raise SpecError("--older-than", args.older_than, "a finite number of seconds >= 0")
    if args.action == "ls":
        total = 0
        for info in store.entries():
            total += info.size
            print(f"{info.kind:12s} {info.key[:16]}  {info.size / 1e6:8.2f} MB  {info.describe}")
        print(f"total {total / 1e6:.2f} MB in {store.root}")
    elif args.action == "verify":
        problems = store.verify(repair=args.repair)
        for info, problem in problems:
            action = "removed" if args.repair else "corrupt"
            print(f"{action}: {info.kind}/{info.key}: {problem}")
        print(f"{len(problems)} corrupt entries" + (" removed" if args.repair and problems else ""))
        return 1 if problems and not args.repair else 0
    elif args.action == "gc":
        removed = store.gc(older_than=args.older_than)
        print(
            f"removed {len(removed)} leftovers (interrupted writes, stale or malformed locks, "
            "objects out of place)"
        )
    return 0


def _cmd_imagenet21k(args: argparse.Namespace) -> int:
    # loaded by the command that needs it, so `oodsim --help` stays fast
    from oodsim.data.imagenet_classes import filter_ood_classes, write_class_table
    from oodsim.results import OutputError, check_writable

    if Path(args.out).is_dir():
        raise OutputError(f"cannot write the class table to {args.out}: it is a folder")
    check_writable(args.out, "the class table")
    result = filter_ood_classes(None, None, wordnet_root=args.wordnet_root)
    write_class_table(result, args.out)
    for reason, count in sorted(result.counts().items()):
        print(f"{reason:24s} {count:6d}")
    print(f"class table written to {args.out}")
    return 0


def version() -> str:
    """The installed oodsim's version (``oodsim.__version__`` when run from a source tree)."""
    # loaded by the one option that needs it, so every other command starts without it
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("oodsim")
    except PackageNotFoundError:
        from oodsim import __version__  # a source tree without installed metadata

        return __version__


def parser() -> argparse.ArgumentParser:
    """The ``oodsim`` command's parser; every help text is plain text (no reST markup)."""
    main = argparse.ArgumentParser(prog="oodsim", description=__doc__)
    main.add_argument("--version", action="version", version=f"oodsim {version()}")
    main.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    commands = main.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        help="the command (oodsim COMMAND --help tells more)",
    )

    for name, text in (
        ("run", "run (or resume) a spec of any protocol: open set, severity, ImageNet-O"),
        ("severity", "alias of `run` (kept for older scripts)"),
    ):
        run = commands.add_parser(name, help=text, description=text)
        run.add_argument("spec", help="spec file (TOML); its `protocol` key picks the protocol")
        add_run_options(run)
        run.set_defaults(func=_cmd_run)

    text = "plots and a summary of saved results"
    report = commands.add_parser("report", help=text, description=text)
    report.add_argument("results", help="results written by `oodsim run`")
    report.add_argument(
        "--out", help="report folder (default: the results' name with .report: results/x.report)"
    )
    report.add_argument(
        "--overwrite",
        action="store_true",
        help="write into a folder that holds other files or the report of other results "
        "(oodsim's files are replaced; nothing else is deleted)",
    )
    report.add_argument(
        "--no-figures",
        dest="figures",
        action="store_false",
        help="write summary.md alone, every table and no PNG (seconds instead of minutes)",
    )
    add_trust(report)
    report.set_defaults(func=_cmd_report)

    add_cache_command(commands)

    text = "filter ImageNet-21k classes with WordNet (CSV)"
    classes = commands.add_parser("imagenet21k-classes", help=text, description=text)
    classes.add_argument(
        "--out",
        default="imagenet21k_classes.csv",
        help="CSV file of the class table (default: imagenet21k_classes.csv)",
    )
    classes.add_argument("--wordnet-root", help="WordNet 3.0 WNDB folder")
    classes.set_defaults(func=_cmd_imagenet21k)

    add_imagenet_o(commands)
    return main


def add_cache_command(commands: argparse._SubParsersAction) -> None:
    """``oodsim cache ls|verify|gc``, each with its own help and options."""
    text = "inspect and maintain the store"
    cache = commands.add_parser("cache", help=text, description=text)
    cache.set_defaults(func=_cmd_cache)
    actions = cache.add_subparsers(
        dest="action",
        required=True,
        metavar="ACTION",
        help="what to do (oodsim cache ACTION --help tells more)",
    )
    for name, text in (
        ("ls", "list the store's entries: kind, key, size, what each one is"),
        ("verify", "check every entry's checksums and list the corrupt ones (exit code 1)"),
        ("gc", "remove leftovers: interrupted writes, stale or malformed locks, misplaced objects"),
    ):
        action = actions.add_parser(name, help=text, description=text)
        action.add_argument(
            "--cache", help="store root (default: $OODSIM_CACHE, else the project's cache/)"
        )
        if name == "verify":
            action.add_argument(
                "--repair",
                action="store_true",
                help="remove the corrupt entries (the next run computes them again)",
            )
        if name == "gc":
            action.add_argument(
                "--older-than",
                type=float,
                default=3600.0,
                metavar="SECONDS",
                help="remove temporary leftovers only when they are this old (default: 3600; "
                "a write in progress, younger than 200 s or under a live lock, is always kept)",
            )


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt so that a run stops the same way."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    """The SIGTERM handler while a command runs; a second SIGTERM ends the process at once."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise Terminated


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """While a command runs, SIGTERM (``kill``, a batch system's cancel) raises
    :class:`Terminated`; the handler before is restored after (the main thread only)."""
    try:
        before = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread: signals are not ours to handle
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def main(argv: list[str] | None = None) -> int:
    """Run one command; every error is one ``oodsim: error: ...`` line and exit code 2
    (``--debug`` shows the traceback instead). Ctrl-C exits with 130, SIGTERM with 143."""
    args = parser().parse_args(argv)
    try:
        with _sigterm_as_interrupt(), _debug_env(args.debug):
            return args.func(args)
    except Terminated:
        return EXIT_SIGTERM
    except KeyboardInterrupt:
        return EXIT_SIGINT
    except BrokenPipeError:  # `oodsim cache ls | head`: the reader left, nothing to report
        sys.stderr.close()
        return 0
    except Exception as error:
        if args.debug:
            raise
        message = str(error) if isinstance(error, OodsimError) else _describe(error)
        print(f"oodsim: error: {message}", file=sys.stderr)
        return 2


@contextlib.contextmanager
def _debug_env(debug: bool) -> Iterator[None]:
    """With ``--debug``, ``$OODSIM_DEBUG`` is set while the command runs: the local workers it
    starts inherit it and keep their own log of failed tasks (see ``oodsim.engine.work``)."""
    if not debug:
        yield
        return
    before = os.environ.get(DEBUG_ENV)
    os.environ[DEBUG_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(DEBUG_ENV, None)
        else:
            os.environ[DEBUG_ENV] = before


def _describe(error: Exception) -> str:
    """An unexpected error as one line: its type and message, and where to see more. A
    ``MemoryError`` (often without any message) says what ran out and what to lower."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if isinstance(error, MemoryError):
        text = (
            f"out of memory{f' ({text})' if text else ''}: lower the sizes of the spec "
            "(dataset.max_per_class, n_samples of noise sets, batch_size, the model's width) "
            "or give the run more memory; what finished is cached"
        )
    return f"{type(error).__name__}: {text} (run with --debug for the traceback)"
