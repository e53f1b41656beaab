"""``oodsim specs``: the example specs shipped with oodsim, listed with their one-line
descriptions, and ``oodsim specs copy``, which copies them into a folder to edit."""

from __future__ import annotations

import argparse
import filecmp
import shutil
from pathlib import Path

from oodsim.cli.options import path_text
from oodsim.errors import OodsimError, UnknownNameError

#: where ``oodsim specs copy`` writes without ``--to``: a project's specs/, as in a checkout
DEFAULT_FOLDER = "specs"


class SpecExists(OodsimError):
    """A copy would replace a spec file the user has (and that differs from the shipped one)."""


def add_command(commands: argparse._SubParsersAction) -> None:
    """``oodsim specs`` and ``oodsim specs copy``."""
    text = "list the example specs shipped with oodsim (run one by name: oodsim run digits)"
    specs = commands.add_parser("specs", help=text, description=text)
    specs.set_defaults(func=cmd_list)
    actions = specs.add_subparsers(dest="action", metavar="ACTION", help="what to do with them")
    text = "copy shipped specs into a folder to edit, then run them: oodsim run specs/digits.toml"
    copy = actions.add_parser("copy", help=text, description=text)
    copy.add_argument("names", nargs="*", metavar="NAME", help="specs to copy (default: all)")
    copy.add_argument(
        "--to",
        type=path_text,
        default=DEFAULT_FOLDER,
        metavar="DIR",
        help=f"folder to copy into, made if needed (default: {DEFAULT_FOLDER})",
    )
    copy.add_argument(
        "--overwrite",
        action="store_true",
        help="replace files of the same name that differ from the shipped specs (refused "
        "otherwise, and nothing is copied)",
    )
    copy.set_defaults(func=cmd_copy)


def cmd_list(args: argparse.Namespace) -> int:
    """Print each shipped spec's name and description."""
    from oodsim.specs import shipped  # the specs package loads with this command (fast --help)

    names = shipped.names()
    width = max(map(len, names))
    for name in names:
        print(f"{name:{width}}  {shipped.describe(shipped.path(name).read_text())}")
    print("\nrun one by name (oodsim run digits), or copy them to edit (oodsim specs copy)")
    return 0


def cmd_copy(args: argparse.Namespace) -> int:
    """Copy the named shipped specs (default: all) into ``--to``; a file that is already
    there and differs is replaced only with ``--overwrite`` (else nothing is copied)."""
    from oodsim.specs import shipped  # the specs package loads with this command (fast --help)

    known = shipped.names()
    for name in args.names:
        if name not in known:
            raise UnknownNameError("shipped spec", name, known)
    names = list(dict.fromkeys(args.names)) or known
    folder = Path(args.to)
    targets = {name: folder / f"{name}.toml" for name in names}
    same = [n for n, t in targets.items() if t.is_file() and filecmp.cmp(shipped.path(n), t, False)]
    differ = [str(t) for n, t in targets.items() if n not in same and t.exists()]
    if differ and not args.overwrite:
        raise SpecExists(
            f"{', '.join(differ)}: already there and different from the shipped spec; "
            "nothing was copied (pass --overwrite to replace)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    copied = [name for name in names if name not in same]
    for name in copied:
        shutil.copyfile(shipped.path(name), targets[name])
    if copied:
        print(f"copied to {folder}: {', '.join(f'{name}.toml' for name in copied)}")
    if same:
        print(f"already in {folder}, unchanged: {', '.join(f'{name}.toml' for name in same)}")
    example = "digits" if "digits" in names else names[0]
    print(f"run one: oodsim run {targets[example]}")
    return 0
