"""Moving entries of a kind an older oodsim wrote to the kind that holds them now, in place.

:class:`Migration` is a mixin of :class:`oodsim.store.local.LocalBackend`
(``store.move_kind(old, new)`` calls it).
An entry keeps its key and its files; only its folder and the ``kind`` its record names
change. Only an entry whose record derives its own key from the inputs it names is moved (see
:func:`~oodsim.store.digests.meta_problem`); one of an older layout without them, or whose
record names another key, is left in place and named, never trusted: a run computes it again.
Each move renames the entry into a temporary sibling of its new place, checks its record again
there, rewrites it (with its own checksum) and renames it into place, under the new key's lock:
a reader never sees half of it, and an interrupted move leaves a ``.tmp-*`` folder that ``oodsim
cache gc`` removes (the entry is then computed again, never read wrong).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from oodsim.store.digests import meta_problem, write_meta
from oodsim.store.fs import listing, read_json, remove
from oodsim.store.layout import META, META_LIMIT, TMP_PREFIX, EntryIntact, EntryProblem


@attrs.frozen
class Moved:
    """What :meth:`Migration.move_kind` did: entries moved, entries dropped because the new
    kind held them already, and entries left in place with the reason (corrupt ones: ``oodsim
    cache verify --repair`` removes them, a run computes them again)."""

    moved: int = 0
    duplicates: int = 0
    left: tuple[tuple[str, str], ...] = ()


class Migration:
    """``move_kind(old, new, problem, intact)``, for a class with ``root``, ``place``,
    ``lock``, ``_walk`` and ``ensure_ours``."""

    root: Path
    place: Callable[[str, str], Path]
    lock: Callable[..., contextlib.AbstractContextManager[None]]
    _walk: Callable[[], Iterator[tuple[Path, str, str]]]
    ensure_ours: Callable[[], None]

    def holds_kind(self, kind: str) -> bool:
        """Whether any entry folder of ``kind`` is in the store (a cheap look: no records
        read)."""
        return any(listing(prefix) for prefix in listing(self.root / kind))

    def move_kind(self, old: str, new: str, problem: EntryProblem, intact: EntryIntact) -> Moved:
        """Move every intact entry of kind ``old`` to kind ``new`` (same key, same files), in a
        cache oodsim made (:meth:`~oodsim.store.maintenance.Maintenance.ensure_ours`).
        ``problem(kind, key)`` says what is wrong with an entry ("" when nothing, None when it
        is gone); ``intact(kind, key)`` whether an entry is there whole (a corrupt one is
        removed)."""
        self.ensure_ours()
        moved = duplicates = 0
        left: list[tuple[str, str]] = []
        for path, _, role in list(self._walk()):
            if role != "entry" or path.parts[-3] != old:
                continue
            key = path.name
            try:
                wrong = problem(old, key)
            except OSError as error:
                wrong = f"unreadable file: {error}"
            if wrong is None:  # moved away meanwhile (another process)
                continue
            if wrong:
                left.append((key, wrong))
                continue
            with self.lock(new, key):
                if intact(new, key):
                    remove(path)
                    duplicates += 1
                    continue
                wrong = self._move_entry(path, old, new, key)
                if wrong:
                    left.append((key, wrong))
                    continue
                moved += 1
        self._drop_empty(old)
        return Moved(moved, duplicates, tuple(left))

    def _move_entry(self, path: Path, old: str, new: str, key: str) -> str:
        """Move one inspected entry into place under ``new``; "" when moved, else why not: its
        record, read again once moved aside, is no longer bound to (``old``, ``key``) (it was
        replaced meanwhile). Such an entry is removed, never moved."""
        final = self.place(new, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.parent / f"{TMP_PREFIX}{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.rename(path, tmp)
        meta: Any = None
        try:
            meta = read_json(tmp / META, META_LIMIT)
            problem = meta_problem(meta, old, key)
        except (OSError, ValueError) as error:
            problem = f"unreadable meta.json: {error}"
        if problem:
            with contextlib.suppress(OSError):
                remove(tmp)
            return f"{problem}; removed"
        write_meta(tmp, {**meta, "kind": new})
        os.rename(tmp, final)
        return ""

    def _drop_empty(self, kind: str) -> None:
        """Remove the kind's folder and its prefix folders once they are empty."""
        folder = self.root / kind
        for prefix in listing(folder):
            with contextlib.suppress(OSError):
                prefix.rmdir()
        with contextlib.suppress(OSError):
            folder.rmdir()
