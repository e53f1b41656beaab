"""The example specs shipped with oodsim (a checkout's ``specs/`` folder): their names, one-line
descriptions and files; :func:`spec_file` finds the file a spec argument names, a path or the
name of a shipped spec (``oodsim run digits`` from any folder, ``oodsim.load("digits")``).

The package holds them as ``oodsim/examples/*.toml``: in a checkout, ``oodsim/examples`` is a
link to ``specs/``, so git keeps one copy of each and an editable install reads the files users
edit; a wheel holds the files themselves.
"""

from __future__ import annotations

import difflib
import os
from importlib.resources import files
from pathlib import Path

from oodsim.errors import SpecFileNotFound


def folder() -> Path:
    """The folder of the shipped specs."""
    return Path(os.fspath(files("oodsim").joinpath("examples")))


def names() -> list[str]:
    """The names of the shipped specs (their files' stems), sorted."""
    return sorted(path.stem for path in folder().glob("*.toml"))


def path(name: str) -> Path:
    """The file of the shipped spec ``name`` (one of :func:`names`)."""
    return folder() / f"{name}.toml"


def describe(text: str) -> str:
    """The one-line description of a spec: its first line, a comment (by convention, the
    shipped specs open with one that says what they are); "" if it opens otherwise."""
    first = text.partition("\n")[0]
    return first[1:].strip().rstrip(".:") if first.startswith("#") else ""


def spec_file(given: str | os.PathLike[str]) -> tuple[Path, bool]:
    """The file the spec argument ``given`` names, and whether it is a shipped spec.

    A bare name (no folder, no suffix) that is no file here is the shipped spec of that name;
    anything else is a path. A path that is not there is a
    :class:`~oodsim.errors.SpecFileNotFound` naming the folder looked in (and, for a bare
    name, the shipped specs, with a close match)."""
    text = os.fspath(given)
    where = Path(text).expanduser()
    bare = where.name == text and not where.suffix
    shipped = names()
    if bare and text in shipped and not where.is_file():
        return path(text), True
    if where.exists() or where.is_symlink():
        return where, False
    looked_in = str(where.absolute().parent)
    hint = ""
    if bare:
        looked_in += " and the shipped specs: " + ", ".join(shipped)
        close = difflib.get_close_matches(text, shipped, n=1)
        hint = f"Did you mean {close[0]!r}?" if close else ""
    elif where.stem in shipped:
        hint = f"{where.stem!r} names a shipped spec: give the name alone to read it"
    raise SpecFileNotFound(text, looked_in, hint)
