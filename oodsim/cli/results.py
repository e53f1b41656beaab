"""``oodsim results ls``: the results of a project, each with the earlier results of its
spec name that were kept beside it (:mod:`oodsim.results.history`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from oodsim.cli.options import path_text


def add_results_command(commands: argparse._SubParsersAction) -> None:
    """``oodsim results ls [PATH ...]``."""
    text = "list saved results and the earlier results kept beside them"
    results = commands.add_parser("results", help=text, description=text)
    actions = results.add_subparsers(
        dest="action", required=True, metavar="ACTION", help="what to do with them"
    )
    text = (
        "list results: the latest of each spec name, then its earlier results kept by key "
        "(open one with oodsim.open_results(PATH) or `oodsim report PATH`)"
    )
    listing = actions.add_parser("ls", help=text, description=text)
    listing.add_argument(
        "paths",
        nargs="*",
        type=path_text,
        metavar="PATH",
        help="results (x.zarr) or folders holding them (default: the results folder of the "
        "working folder's project, or $OODSIM_RESULTS)",
    )
    listing.set_defaults(func=cmd_results)


def cmd_results(args: argparse.Namespace) -> int:
    """List the results at ``args.paths``; exit 1 when none are found."""
    # loaded by the command that needs it, so `oodsim --help` stays fast
    from oodsim.results.history import HISTORY_SUFFIX, versions
    from oodsim.store import default_results, shown

    paths = [Path(p) for p in args.paths] or [default_results("x").parent]
    stores: list[Path] = []
    for path in paths:
        if versions(path):
            stores.append(path)
        elif path.is_dir():
            stores += sorted(
                p for p in path.iterdir() if p.is_dir() and not p.name.endswith(HISTORY_SUFFIX)
            )
    found = 0
    for store in stores:
        for saved in versions(store):
            found += 1
            when = (saved.saved or "saved before oodsim recorded it").replace("+00:00", " UTC")
            seeds = _count(saved.n_seeds, "seed") if saved.n_seeds is not None else "? seeds"
            methods = _count(len(saved.methods), "method")
            what = f"{saved.key[:12]}  {when:25s}  {seeds:>10s}  {methods:>11s}"
            where = shown(saved.path)
            print(f"{where}  {what}" if saved.latest else f"  earlier: {where}  {what}")
    if not found:
        print(f"no oodsim results in {', '.join(map(shown, paths))}")
        return 1
    return 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
