"""The store's backend on a local or shared POSIX file system.

An entry is the folder ``<root>/<kind>/<key[:2]>/<key>/``; locks are files in ``<root>/locks/``
(:mod:`oodsim.store.locks`). An entry is written into a temporary sibling (``.tmp-*``) and
renamed into place: a reader never sees half of one, and a crash leaves a ``.tmp-*`` folder
that ``gc`` removes. Nothing follows a symbolic link inside the root (:mod:`oodsim.store.fs`).

A cache is a folder anyone can tamper with. Anything where the layout needs a folder (a file, a
link, a FIFO in place of a kind, key-prefix, entry or locks folder) is moved aside on the way,
with a :class:`~oodsim.store.backend.CorruptEntryWarning`, in a root oodsim made; in any other
root only entries are (:mod:`oodsim.store.obstacles`). What cannot be moved stops the run with
a :class:`~oodsim.errors.StoreError` that says where and how to fix it. Maintenance (``ls``,
``verify``, ``gc``) is :class:`~oodsim.store.maintenance.Maintenance`, moving the entries of
an older kind :class:`~oodsim.store.migrate.Migration`.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import attrs
import numpy as np

from oodsim.errors import StoreError
from oodsim.progress_notes import note_progress
from oodsim.store.arrays import read_arrays
from oodsim.store.backend import CorruptEntryWarning
from oodsim.store.fs import (
    described,
    objects,
    plain_relative,
    read_json,
    read_limited,
    remove,
    what_is,
    write_replacing,
)
from oodsim.store.layout import (
    LOCKS,
    META,
    META_LIMIT,
    QUARANTINE_PREFIX,
    TMP_PREFIX,
    mark_cache,
    store_root,
)
from oodsim.store.locks import STALE_LOCK_SECONDS, hold, holder
from oodsim.store.maintenance import Maintenance
from oodsim.store.migrate import Migration
from oodsim.store.obstacles import check_obstacles, refuse_to_move


@attrs.define
class LocalBackend(Maintenance, Migration):
    """Entries in folders under ``root`` (see the module docstring)."""

    root: Path = attrs.field(converter=store_root)
    _marked: bool = attrs.field(default=False, init=False, repr=False)
    reading_is_cheap = True

    @property
    def location(self) -> str:
        return str(self.root.resolve())

    def place(self, kind: str, key: str) -> Path:
        return self.root / kind / key[:2] / key

    # ------------------------------------------------------------ before any compute
    def exists(self) -> bool:
        return self.root.is_dir()

    def check_obstacles(self, kinds: Iterable[str]) -> None:
        check_obstacles(self.root, kinds)

    def ensure_writable(self) -> None:
        if what_is(self.root) not in ("folder", "missing") and not self.root.is_dir():
            raise StoreError(
                f"cache directory {self.root} is {described(what_is(self.root))}, not a folder; "
                "choose another cache path (--cache)"
            )
        try:
            mark_cache(self.root)
            self._marked = True
            probe = self.root / f"{TMP_PREFIX}probe-{uuid.uuid4().hex}"
            probe.write_bytes(b"ok")
            probe.unlink()
        except OSError as error:
            raise StoreError(f"cache directory {self.root} is not writable: {error}") from None

    def _mark(self) -> None:
        """Before this store's first write, and any write that finds the root gone (deleted
        while a run wrote: made again unmarked, `oodsim cache` refused it): mark a new or
        empty root as a cache (a root that cannot be written is reported by the write)."""
        if not self._marked or not self.root.is_dir():
            with contextlib.suppress(OSError):
                mark_cache(self.root)
            self._marked = True

    # ------------------------------------------------------------ entries
    def _locate(self, kind: str, key: str) -> Path | None:
        """The entry folder of (kind, key), or None when there is none. Anything else where
        the kind, key-prefix or entry folder belongs (a file, a link, a FIFO) is moved aside on
        the way: left in place it would block the write of the entry."""
        folder = self.place(kind, key)
        for path in (folder.parent.parent, folder.parent, folder):
            found = what_is(path)
            if found == "missing":
                return None
            if found != "folder":
                what = (
                    f"entry {kind}/{key[:12]}"
                    if path == folder
                    else f"folder {path.relative_to(self.root)}/"
                )
                self._heal(path, f"{described(found)} where a folder belongs", what)
                return None
        return folder

    def read_meta(self, kind: str, key: str) -> bytes | None:
        folder = self._locate(kind, key)
        if folder is None:
            return None
        try:
            return read_limited(folder / META, META_LIMIT)
        except FileNotFoundError:
            if what_is(folder) != "folder":
                return None  # moved aside meanwhile by another process
            raise

    def files(self, kind: str, key: str) -> dict[str, int | str]:
        folder = self.place(kind, key)
        found: dict[str, int | str] = {}
        for path, what in objects(folder):
            name = path.relative_to(folder).as_posix()
            if name == META:
                continue
            found[name] = os.lstat(path).st_size if what == "file" else described(what)
        return found

    def open(self, kind: str, key: str, name: str) -> IO[bytes]:
        relative = plain_relative(name)
        if relative is None:
            raise FileNotFoundError(f"no file {name!r} in an entry")
        path = self.place(kind, key) / relative
        return os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb")

    def read_arrays(self, kind: str, key: str) -> dict[str, np.ndarray]:
        return read_arrays(self.place(kind, key))

    def count(self) -> int:
        """Entry folders holding a record (a glob of the layout: no record is read)."""
        metas = self.root.glob(f"*/*/*/{META}")
        return sum(not path.parent.name.startswith(TMP_PREFIX) for path in metas)

    def prefetch(self, entries: Iterable[tuple[str, str]]) -> None:
        """Each read of a local disk is cheap: nothing to read ahead."""

    @contextlib.contextmanager
    def staging(self, kind: str, key: str) -> Iterator[Path]:
        self._mark()
        self._locate(kind, key)  # moves aside whatever would block the folders below
        final = self.place(kind, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.parent / f"{TMP_PREFIX}{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            yield tmp
        finally:
            with contextlib.suppress(OSError):
                remove(tmp)

    def commit(self, kind: str, key: str, staged: Path) -> bool:
        final = self.place(kind, key)
        try:
            os.rename(staged, final)
        except OSError:
            if what_is(final) == "missing":
                raise  # not taken by another entry: the folder cannot be written
            return False
        return True

    def remove(self, kind: str, key: str, reason: str = "removed") -> bool:
        return self._move_aside(self.place(kind, key), reason, f"entry {kind}/{key[:12]}")

    def _heal(self, path: Path, reason: str, what: str) -> None:
        """Move aside an object where the layout needs a folder, and warn that it was."""
        if self._move_aside(path, reason, what):
            warnings.warn(
                f"corrupt cache {what} ({reason}); moved aside, it will be recomputed",
                CorruptEntryWarning,
                stacklevel=6,
            )

    def _move_aside(self, path: Path, reason: str, what: str) -> bool:
        """Rename a malformed object to a ``.tmp-corrupt-*`` sibling and delete it (a
        leftover of a failed delete blocks nothing; ``gc`` removes it). Whether it was there
        (one that is gone was handled by another process); one that cannot be moved raises
        :class:`StoreError`."""
        refuse_to_move(self.root, path, what)  # unless it may be the user's
        aside = path.parent / f"{QUARANTINE_PREFIX}{path.name}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return False
        except OSError as error:
            raise StoreError(
                f"corrupt cache {what} at {path} ({reason}) cannot be moved aside: "
                f"{error.strerror}. Remove it (rm -rf '{path}') or make {path.parent} "
                "writable, then run again"
            ) from None
        with contextlib.suppress(OSError):
            remove(aside)
        return True

    # ------------------------------------------------------------ locks
    def _locks(self) -> Path:
        """The locks folder, created if needed; anything else in its place is moved aside."""
        self._mark()
        folder = self.root / LOCKS
        found = what_is(folder)
        if found not in ("folder", "missing"):
            self._heal(folder, f"{described(found)} where a folder belongs", f"folder {LOCKS}/")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(
                f"cannot create the locks folder {folder}: {error.strerror}; make {self.root} "
                "writable, then run again"
            ) from None
        return folder

    def lock(
        self, kind: str, key: str, *, poll: float = 0.1
    ) -> contextlib.AbstractContextManager[None]:
        """The lock file ``locks/<kind>-<key>.lock``: see :mod:`oodsim.store.locks`."""
        path = self._locks() / f"{kind}-{key}.lock"

        def waiting(lock: Path) -> None:
            note_progress(
                f"waiting for {kind} {key[:12]}: another process computes it ({holder(lock)}; "
                f"its lock {lock} is taken over once untouched for {STALE_LOCK_SECONDS:.0f} s)"
            )

        return hold(path, self._locks, waiting, poll=poll)

    # ------------------------------------------------------------ records beside the entries
    def read_record(self, name: str, limit: int) -> Any:
        return read_json(self.root / name, limit)

    def write_record(self, name: str, record: Any) -> None:
        self._mark()
        path = self.root / name
        path.parent.mkdir(exist_ok=True)
        write_replacing(path, lambda tmp: tmp.write_text(json.dumps(record)))
