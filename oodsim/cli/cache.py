"""``oodsim cache ls | verify | gc | migrate``: look after a store."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

from oodsim.cli.options import path_text
from oodsim.errors import SpecError, telling_interrupt

if TYPE_CHECKING:  # the store loads with the command that needs it (a fast --help)
    from oodsim.store import Store


def cmd_cache(args: argparse.Namespace) -> int:
    # loaded by the command that needs it, so `oodsim --help` stays fast
    from oodsim.store import Store, default_root

    if args.action == "gc" and not (math.isfinite(args.older_than) and args.older_than >= 0):
        raise SpecError("--older-than", args.older_than, "a finite number of seconds >= 0")
    store = Store(args.cache or default_root())
    store.ensure_present()
    store.ensure_ours()  # a mistyped --cache is read and changed by no action
    with telling_interrupt(f"oodsim: interrupted; {_left(args)}"):
        return _act(args, store)


def _left(args: argparse.Namespace) -> str:
    """What an interrupted action left (each change to the store is one rename or unlink)."""
    if args.action == "verify" and args.repair:
        return "corrupt entries found so far were removed; the same command checks them all again"
    return {
        "gc": "leftovers found so far were removed; the same command removes the rest",
        "migrate": "entries moved so far are in outputs (a .tmp-* folder that `oodsim cache gc` "
        "removes may remain); the same command moves the rest",
    }.get(args.action, "the store is unchanged")


def _act(args: argparse.Namespace, store: Store) -> int:
    """Run ``oodsim cache ACTION`` on ``store``; its exit code."""
    if args.action == "ls":
        total = 0
        for info in store.entries():
            total += info.size
            print(f"{info.kind:12s} {info.key[:16]}  {info.size / 1e6:8.2f} MB  {info.describe}")
        print(f"total {total / 1e6:.2f} MB in {store.location}")
    elif args.action == "verify":
        problems = store.verify(repair=args.repair)
        for info, problem in problems:
            action = "removed" if args.repair else "corrupt"
            print(f"{action}: {info.kind}/{info.key}: {problem}")
        print(f"{len(problems)} corrupt entries" + (" removed" if args.repair and problems else ""))
        return 1 if problems and not args.repair else 0
    elif args.action == "migrate":
        # the outputs kinds an older oodsim wrote (no torch: a small module)
        from oodsim.artifacts.outputs import OUTPUTS, migrate_outputs

        report = migrate_outputs(store)
        for kind, moved in report.items():
            line = f"{kind}: {moved.moved} entries moved to {OUTPUTS}"
            if moved.duplicates:
                line += f", {moved.duplicates} dropped ({OUTPUTS} held them already)"
            print(line)
            for key, problem in moved.left:
                print(f"  left in place: {kind}/{key}: {problem} (oodsim cache verify --repair)")
        return 1 if any(m.left for m in report.values()) else 0
    elif args.action == "gc":
        collected = store.gc(older_than=args.older_than)
        for path, reason in collected.left:
            print(f"could not remove {path}: {reason}")
        print(
            f"removed {len(collected.removed)} leftovers (interrupted writes, stale or malformed "
            "locks, objects out of place)"
            + (
                f"; {len(collected.left)} could not be removed (make {store.location} writable, "
                "or run as its owner)"
                if collected.left
                else ""
            )
        )
        return 1 if collected.left else 0
    return 0


def add_cache_command(commands: argparse._SubParsersAction) -> None:
    """``oodsim cache ls|verify|gc|migrate``, each with its own help and options."""
    text = "inspect and maintain the store"
    cache = commands.add_parser("cache", help=text, description=text)
    cache.set_defaults(func=cmd_cache)
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
        (
            "migrate",
            "move model outputs an older oodsim stored under severity_outputs or "
            "imagenet_o_logits to outputs (keys unchanged), so that runs read them again",
        ),
    ):
        action = actions.add_parser(name, help=text, description=text)
        action.add_argument(
            "--cache",
            type=path_text,
            help="store root (default: $OODSIM_CACHE, else the project's cache/)",
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
