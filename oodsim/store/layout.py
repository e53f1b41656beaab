"""The store's layout on disk: names, the patterns of its folders, and what ``cache ls``
shows of an entry. Shared by the store, its maintenance and its locks."""

from __future__ import annotations

import re
from pathlib import Path

import attrs

META = "meta.json"
META_DIGEST = "meta_sha256"
TMP_PREFIX = ".tmp-"
QUARANTINE_PREFIX = f"{TMP_PREFIX}corrupt-"
LOCKS = "locks"
GITIGNORE = "*\n!.gitignore\n"
#: meta.json lists a sha256 per chunk file: generous, but bounded
META_LIMIT = 256 << 20
KIND_PATTERN = re.compile(r"[a-z][a-z0-9_]*\Z")
PREFIX_PATTERN = re.compile(r"[0-9a-f]{2}\Z")


@attrs.frozen
class EntryInfo:
    """One line of ``oodsim cache ls`` (and of a problem ``oodsim cache verify`` reports)."""

    kind: str
    key: str
    path: Path
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
