"""The store's layout on disk: names, the patterns of its folders, and what ``cache ls``
shows of an entry. Shared by the store, its maintenance and its locks."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import numpy as np

META = "meta.json"
META_DIGEST = "meta_sha256"
#: the field of an entry's record that holds the inputs its key derives from
KEY_INPUTS = "key_inputs"
TMP_PREFIX = ".tmp-"
QUARANTINE_PREFIX = f"{TMP_PREFIX}corrupt-"
LOCKS = "locks"
GITIGNORE = "*\n!.gitignore\n"
#: meta.json lists a sha256 per chunk file: generous, but bounded
META_LIMIT = 256 << 20
KIND_PATTERN = re.compile(r"[a-z][a-z0-9_]*\Z")
PREFIX_PATTERN = re.compile(r"[0-9a-f]{2}\Z")


#: what is wrong with the entry (kind, key): "" when nothing, None when there is none
EntryProblem = Callable[[str, str], "str | None"]
#: whether the entry (kind, key) is there whole (a corrupt one is removed)
EntryIntact = Callable[[str, str], bool]


#: hex characters of the folder name of an entry's files
VERSION_CHARS = 16


def version_of(meta: bytes) -> str:
    """The folder of an entry's files on object storage: named by its record's bytes."""
    return hashlib.sha256(meta).hexdigest()[:VERSION_CHARS]


@attrs.frozen
class Entry:
    """A loaded store entry."""

    kind: str
    key: str
    arrays: dict[str, np.ndarray]
    meta: dict[str, Any]


@attrs.frozen
class EntryInfo:
    """One line of ``oodsim cache ls`` (and of a problem ``oodsim cache verify`` reports)."""

    kind: str
    key: str
    path: Path | str  # a folder, or an object store's URL
    size: int
    created: float
    describe: str


def belongs(name: str, parent: str, depth: int) -> bool:
    """Whether the layout puts a folder named ``name`` in ``parent`` at ``depth``: a kind
    folder in the root (0), a key-prefix folder in a kind folder (1), an entry folder in a
    key-prefix folder (2)."""
    if depth == 0:
        return name != LOCKS and bool(KIND_PATTERN.match(name))
    if depth == 1:
        return bool(PREFIX_PATTERN.match(name))
    return name[:2] == parent


def is_cache(root: Path) -> bool:
    """Whether ``root`` is a store oodsim created: it holds oodsim's own ``.gitignore``."""
    ignore = root / ".gitignore"
    if ignore.is_symlink() or not ignore.is_file():
        return False
    try:
        with ignore.open("rb") as handle:
            return handle.read(len(GITIGNORE) + 1) == GITIGNORE.encode()
    except OSError:
        return False


def mark_cache(root: Path) -> None:
    """Create ``root`` if missing, and mark a new (or empty) one as a cache with oodsim's
    ``.gitignore``: the cache stays out of git, and ``oodsim cache`` knows it for one. A
    folder that already holds other things is never marked (a ``--cache ~`` gets no
    ``~/.gitignore`` hiding every file from git)."""
    root.mkdir(parents=True, exist_ok=True)
    ignore = root / ".gitignore"
    if not ignore.is_symlink() and not ignore.exists() and not any(root.iterdir()):
        ignore.write_text(GITIGNORE)


def store_root(path: str | Path) -> Path:
    """A store's root from what the user gave: ``~`` expanded, and a root that is itself a
    link (docs/caching.md suggests linking a cache onto a larger disk) replaced by the folder
    it names. The store never follows links inside its root; it read a linked root as empty
    (``oodsim cache verify --cache LINK``: "0 corrupt entries" over a corrupt cache)."""
    root = Path(path).expanduser()
    return root.resolve() if root.is_symlink() else root
