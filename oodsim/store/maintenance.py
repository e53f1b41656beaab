"""Maintenance of a local store: list its entries, find what is out of place, and collect what
can block a run.

:class:`Maintenance` is a mixin of :class:`oodsim.store.local.LocalBackend` (``entries()``,
``layout_problems(repair=)``, ``gc(older_than=)``, ``stale_locks()``); the store checks the
entries themselves (:meth:`oodsim.store.Store.verify`). What removes anything works only in a
root that holds oodsim's ``.gitignore`` (:meth:`ensure_ours`). They
walk the layout without ever entering a link, and remove only what they can name: objects
where a folder belongs, malformed and stale locks, quarantine and temporary leftovers.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs

from oodsim.errors import StoreError
from oodsim.store.fs import described, listing, objects, read_json, remove, what_is
from oodsim.store.layout import (
    LOCKS,
    META,
    META_LIMIT,
    QUARANTINE_PREFIX,
    TMP_PREFIX,
    EntryInfo,
    belongs,
    is_cache,
)
from oodsim.store.locks import (
    STALE_LOCK_SECONDS,
    STALE_MARK,
    WRITE_GRACE_SECONDS,
    break_lock,
    lock_problem,
    why_stale,
)


class Maintenance:
    """What ``oodsim cache ls|verify|gc`` do beside checking entries, for a class with
    ``root``."""

    root: Path
    _move_aside: Callable[[Path, str, str], bool]

    def ensure_present(self) -> None:
        """Fail in one line when the root is not an existing folder: for ``cache ls``, ``verify``
        and ``gc``, a mistyped path must not read as an empty, healthy cache."""
        kind = what_is(self.root)
        if kind == "missing":
            raise StoreError(
                f"no cache at {self.root}: the folder does not exist; pass the cache's path "
                "with --cache (or set $OODSIM_CACHE)"
            )
        if not self.root.is_dir():
            raise StoreError(
                f"cache directory {self.root} is {described(kind)}, not a folder; pass the "
                "cache's path with --cache (or set $OODSIM_CACHE)"
            )

    def ensure_ours(self) -> None:
        """Raise :class:`~oodsim.errors.StoreError` unless the root is a cache oodsim made.
        Maintenance reads and removes by the store's layout, so in any other folder (a mistyped
        ``--cache .``) it would take a user's ``results/ab/ab_run/`` folder for a corrupt
        entry, an hour-old ``.tmp-*`` file or a ``locks/`` folder's files for leftovers."""
        if not is_cache(self.root):
            raise StoreError(
                f"{self.root} is not an oodsim cache: it has no .gitignore of oodsim's, which "
                "oodsim writes into every cache it creates; nothing there was read or changed. "
                "Pass the cache's path with --cache (or set $OODSIM_CACHE); a folder that held "
                "other files when runs began to use it is never marked: give runs a new folder "
                f"of their own (e.g. {self.root / 'oodsim-cache'})"
            )

    def _walk(self) -> Iterator[tuple[Path, str, str]]:
        """Every object of the store's layout as (path, what it is, role), never entering a
        link. Roles: "entry" (an entry folder), "misplaced" (anything but a folder where a
        kind, key-prefix or entry folder belongs), "tmp" (a ``.tmp-*`` leftover). Objects that
        are none of these (a ``README`` in a kind folder) are left alone. What removes any of
        them first checks that the root is a cache (:meth:`ensure_ours`)."""
        if not self.root.is_dir():
            return
        queue = [(self.root, 0)]  # folders to list, with their depth: root 0, kind 1, prefix 2
        while queue:
            folder, depth = queue.pop(0)
            for path in listing(folder):
                found = what_is(path)
                if path.name.startswith(TMP_PREFIX):
                    yield path, found, "tmp"
                elif not belongs(path.name, folder.name, depth):
                    continue
                elif found != "folder":
                    yield path, found, "misplaced"
                elif depth == 2:
                    yield path, found, "entry"
                else:
                    queue.append((path, depth + 1))

    def _info(self, path: Path) -> EntryInfo:
        """Who an object of the layout is: (kind, key) from its place."""
        parts = path.relative_to(self.root).parts
        kind, key = parts[0], parts[-1] if len(parts) > 1 else ""
        return EntryInfo(kind=kind, key=key, path=path, size=0, created=0.0, describe="")

    def entries(self) -> Iterator[EntryInfo]:
        """Every entry folder under the root (one without a readable meta file is listed with an
        empty description, so that :meth:`verify` can report it)."""
        for path, _, role in self._walk():
            if role != "entry":
                continue
            try:
                meta = read_json(path / META, META_LIMIT)
                meta = meta if isinstance(meta, dict) else {}
            except (OSError, ValueError):
                meta = {}
            size = 0
            for item, found in objects(path):
                if found == "file":
                    with contextlib.suppress(OSError):
                        size += os.lstat(item).st_size
            created = meta.get("created", 0.0)
            yield attrs.evolve(
                self._info(path),
                size=size,
                created=float(created) if isinstance(created, (int, float)) else 0.0,
                describe=str(meta.get("describe", "")),
            )

    def layout_problems(self, *, repair: bool) -> list[tuple[EntryInfo, str]]:
        """Objects out of place (a file or link where a folder belongs) and malformed locks.
        With ``repair``, removes them (a link, never its target), and also quarantine leftovers
        and locks of dead holders."""
        problems: list[tuple[EntryInfo, str]] = []
        for path, found, role in self._walk():
            if role == "misplaced":
                problem = f"{described(found)} where a folder belongs"
                problems.append((self._info(path), self._repaired(path, problem, repair)))
            elif role == "tmp" and repair and path.name.startswith(QUARANTINE_PREFIX):
                with contextlib.suppress(OSError):
                    remove(path)
        for path, problem in self._lock_problems():
            problems.append((self._info(path), self._repaired(path, problem, repair)))
        if repair:
            for path in listing(self.root / LOCKS):
                if STALE_MARK in path.name:
                    if abs(time.time() - _changed(path)) >= WRITE_GRACE_SECONDS:
                        _removed(path)  # a leftover of a lock broken by a process that died
                elif why_stale(path):
                    with contextlib.suppress(OSError):
                        break_lock(path)
        return problems

    def _repaired(self, path: Path, problem: str, repair: bool) -> str:
        """``problem``, after removing ``path`` when ``repair`` (moved aside first, so that a
        concurrent reader never sees half of it); says so when it cannot be removed."""
        if repair:
            try:
                self._move_aside(path, problem, f"object {path.name}")
            except StoreError as error:
                return f"{problem}; could not remove it: {error}"
        return problem

    def _lock_problems(self) -> list[tuple[Path, str]]:
        """Malformed lock files (and a locks folder that is not a folder), with the reason."""
        folder = self.root / LOCKS
        found = what_is(folder)
        if found not in ("folder", "missing"):
            return [(folder, f"{described(found)} where the locks folder belongs")]
        found_problems = []
        for path in listing(folder):
            if STALE_MARK not in path.name:
                problem = lock_problem(path)
                if problem:
                    found_problems.append((path, problem))
        return found_problems

    def gc(self, *, older_than: float = 3600.0) -> Collected:
        """Remove what can block or clutter a run: locks of dead holders and malformed locks,
        misplaced objects (a file or link where a folder belongs; a link is removed, never its
        target), quarantine leftovers, and temporary leftovers of interrupted writes that are
        at least ``older_than`` seconds old. A temporary folder younger than
        :data:`STALE_LOCK_SECONDS`, or of a key whose lock a live process holds, is a write in
        progress and is kept whatever ``older_than`` says (removing it would abort the run
        writing it). Returns what was removed and what could not be (in a read-only cache,
        for example: ``oodsim cache gc`` names it rather than reporting nothing removed)."""
        collected = Collected()
        if not self.root.is_dir():
            return collected
        self.ensure_ours()
        now = time.time()
        locks = self.root / LOCKS
        if what_is(locks) not in ("folder", "missing"):
            collected.drop(locks)
        for path in listing(locks):
            if STALE_MARK in path.name:  # an aside of a broken lock: restored or dropped within
                age = abs(now - _changed(path))  # microseconds; its ctime is its rename
                if age >= min(older_than, WRITE_GRACE_SECONDS):
                    collected.drop(path)
            elif why_stale(path):
                collected.drop(path, break_lock)
        for path, _, role in self._walk():
            if role == "misplaced" or (role == "tmp" and path.name.startswith(QUARANTINE_PREFIX)):
                collected.drop(path)
            elif role == "tmp":
                with contextlib.suppress(OSError):
                    age = abs(now - os.lstat(path).st_mtime)
                    if age >= max(older_than, STALE_LOCK_SECONDS) and not self._being_written(path):
                        collected.drop(path)
        return collected

    def _being_written(self, tmp: Path) -> bool:
        """Whether the temporary folder ``tmp`` of a write (``.tmp-<key>-<pid>-<id>``, beside
        the entry) belongs to a key whose lock a live process holds: the writer is at work."""
        parts = tmp.relative_to(self.root).parts
        key = tmp.name[len(TMP_PREFIX) :].split("-")[0]
        if len(parts) != 3 or not key:
            return False
        lock = self.root / LOCKS / f"{parts[0]}-{key}.lock"
        return what_is(lock) == "file" and not why_stale(lock)

    def stale_locks(self) -> list[Path]:
        """Lock files whose holder is gone, and malformed ones (see :mod:`oodsim.store.locks`)."""
        return [p for p in listing(self.root / LOCKS) if STALE_MARK not in p.name and why_stale(p)]


@attrs.define
class Collected:
    """What :meth:`Maintenance.gc` removed, and what it could not remove with the reason."""

    removed: list[Path | str] = attrs.field(factory=list)
    left: list[tuple[Path | str, str]] = attrs.field(factory=list)

    def drop(self, path: Path, how: Callable[[Path], None] = remove) -> None:
        """Remove ``path`` with ``how``, recording it as removed or left (a path already gone
        was removed by someone else: neither)."""
        try:
            how(path)
        except FileNotFoundError:
            return
        except OSError as error:
            self.left.append((path, error.strerror or str(error)))
            return
        self.removed.append(path)


def _changed(path: Path) -> float:
    """When ``path`` was last changed or renamed (its ctime; now when it is gone)."""
    try:
        return os.lstat(path).st_ctime
    except OSError:
        return time.time()


def _removed(path: Path) -> bool:
    """Remove ``path`` (without following links); whether it could be."""
    try:
        remove(path)
    except OSError:
        return False
    return True
