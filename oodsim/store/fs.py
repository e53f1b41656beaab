"""File system objects of the store, handled without following symbolic links.

A cache is a folder that anyone can tamper with: a file or a link where a folder belongs, a FIFO
where ``meta.json`` belongs, a read-only folder. These helpers say what an object is (without
opening it), read small JSON records only from regular files, and remove objects without ever
following a link out of the cache (a link is unlinked, its target never touched).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any


def what_is(path: Path) -> str:
    """What ``path`` is, without following a link: "folder", "file", "missing", "a symbolic
    link (to TARGET)", "a FIFO", ... (the last ones as they read in a message)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:
        return "missing"  # a parent is not a folder: reported at that parent
    except PermissionError:
        return "something that cannot be examined (its folder is not searchable)"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        try:
            return f"a symbolic link (to {os.readlink(path)})"
        except OSError:
            return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device file"


def described(found: str) -> str:
    """What :func:`what_is` found, as it reads in a sentence ("a file", "a FIFO", ...)."""
    return {"file": "a file", "folder": "a folder", "missing": "nothing"}.get(found, found)


class NotJSON(ValueError):
    """A regular file whose content is not JSON (maybe one being written)."""


class NotARegularFile(ValueError):
    """What :func:`read_limited` found instead of a regular file (``found``, as
    :func:`what_is` says it)."""

    def __init__(self, path: Path, found: str) -> None:
        self.found = found
        super().__init__(f"{path.name} is {described(found)}")


class TooLarge(ValueError):
    """A file larger than the limit it was read with."""


def read_limited(path: Path, limit: int, *, follow_links: bool = False) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, opened without blocking: a FIFO
    or a device is never opened (a reader would block on one, or read for ever), and a link
    only with ``follow_links``. Raises ``FileNotFoundError``, :class:`NotARegularFile` (a
    folder, a link, a FIFO, ...) or :class:`TooLarge`."""
    if follow_links:
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            raise FileNotFoundError(f"no {path.name}") from None
        found = "file" if stat.S_ISREG(mode) else "folder" if stat.S_ISDIR(mode) else "other"
    else:
        found = what_is(path)
    if found == "missing":
        raise FileNotFoundError(f"no {path.name}")
    if found != "file":
        raise NotARegularFile(path, found if found != "other" else "a FIFO or device")
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow_links else os.O_NOFOLLOW)
    with os.fdopen(os.open(path, flags), "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(f"{path.name} is larger than {limit} bytes")
    return data


def read_json(path: Path, limit: int) -> Any:
    """The JSON content of a regular file of at most ``limit`` bytes (:func:`read_limited`,
    links never followed). Anything else raises ``ValueError`` (saying what is there;
    :class:`NotJSON` for a file of something else) or ``FileNotFoundError``."""
    return parse_json(read_limited(path, limit), path.name)


def parse_json(data: bytes, name: str) -> Any:
    """JSON from ``data`` (the content of ``name``); :class:`NotJSON` for anything else, a
    document nested deeper than Python's recursion limit included (which would otherwise
    escape as a ``RecursionError`` and stop whatever reads it)."""
    try:
        return json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as error:
        raise NotJSON(f"{name} is not JSON ({error})") from None
    except RecursionError:
        raise NotJSON(f"{name} is not JSON of oodsim's (nested too deeply)") from None


def remove(path: Path) -> None:
    """Remove the object at ``path`` (a folder with everything in it, a file, a link, a FIFO)
    without following links; read-only folders inside are made writable first (the store wrote
    them, or tampering did). Raises ``OSError`` when it cannot; a missing path is no error."""
    found = what_is(path)
    if found == "missing":
        return
    if found != "folder":
        path.unlink(missing_ok=True)
        return

    try:
        shutil.rmtree(path)
    except OSError:  # a read-only folder inside: open everything up (as its owner), retry once
        _open_up(path)
        if what_is(path) != "missing":  # (unless a concurrent remover finished it)
            shutil.rmtree(path)


def _open_up(folder: Path) -> None:
    """Give the owner full access to ``folder`` and every folder below it (links untouched)."""
    with contextlib.suppress(OSError):
        os.chmod(folder, 0o700)
    for parent, dirs, _ in os.walk(folder, followlinks=False):
        for name in dirs:
            path = os.path.join(parent, name)
            if not os.path.islink(path):
                with contextlib.suppress(OSError):
                    os.chmod(path, 0o700)


def objects(folder: Path) -> Iterator[tuple[Path, str]]:
    """Every object under ``folder`` as (path, what it is), without entering linked folders."""
    for parent, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            path = Path(parent) / name
            yield path, what_is(path)


def listing(folder: Path) -> list[Path]:
    """The names in ``folder`` (sorted), or [] when it is not a real folder."""
    if what_is(folder) != "folder":
        return []
    try:
        return sorted(folder / name for name in os.listdir(folder))
    except OSError:
        return []


def plain_relative(name: object) -> PurePosixPath | None:
    """``name`` as a relative path that stays inside its folder by its text alone (no ``..``,
    no absolute path, no empty part); None for anything else, a non-string included."""
    if not isinstance(name, str) or not name or "\0" in name:
        return None
    relative = PurePosixPath(name)
    if relative.is_absolute() or any(part in ("", ".", "..") for part in relative.parts):
        return None
    return relative


def owned(folder: Path, name: object) -> Path | None:
    """``folder / name`` when ``name`` (read from a record oodsim wrote: a manifest, a report
    marker) names a path inside ``folder`` without leaving it: :func:`plain_relative`, and
    every folder on the way a real folder, not a link. None otherwise: a record that travelled
    with a folder must never make oodsim delete or overwrite anything outside it."""
    relative = plain_relative(name)
    if relative is None:
        return None
    here = folder
    for part in relative.parts[:-1]:
        here = here / part
        if here.is_symlink() or not here.is_dir():
            return None
    return folder / Path(*relative.parts)


def write_replacing(path: Path, write: Callable[[Path], object]) -> Path:
    """Write ``path`` through ``write(tmp)`` into a new temporary sibling, then rename it onto
    ``path``: a reader never sees half of it, and a link at ``path`` is replaced, never written
    through. The temporary file is removed if the write fails."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
