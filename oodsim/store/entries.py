"""Store entries: ``<root>/<kind>/<key[:2]>/<key>/`` holds ``arrays.zarr.zip``
(:mod:`oodsim.store.arrays`) and ``meta.json`` (what was computed, versions, timings, a sha256
and size per file, the entry's kind, key and the inputs the key derives from, and a sha256 of its
own). Entries are written into a temporary sibling and renamed into place: a reader never sees
half an entry; a crash leaves a ``.tmp-*`` folder that :meth:`Store.gc` removes.

Anything malformed on the way to an entry (a file, link or FIFO where a folder belongs; a
missing, edited, older or wrong-schema ``meta.json``, or one that does not derive its folder's
key, :func:`~oodsim.store.digests.meta_problem`; a missing file, a wrong size or checksum) is
reported with a :class:`CorruptEntryWarning`, moved aside and recomputed; where it cannot be
moved, :class:`StoreError` says where and how to fix it. Malformed locks are taken over like
those of dead holders (:mod:`oodsim.store.locks`); nothing follows a symbolic link inside the
root (:mod:`oodsim.store.fs`). :attr:`Store.events` records what was computed (``put``) and
loaded (``get``): the run's provenance.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from oodsim.errors import StoreError
from oodsim.keys import Key
from oodsim.progress_notes import note_progress
from oodsim.store.arrays import ARRAYS_ZIP, read_arrays, write_zip
from oodsim.store.digests import (
    arrays_problem,
    entry_members_problem,
    file_checksums,
    file_sizes,
    meta_problem,
    write_meta,
)
from oodsim.store.fs import described, objects, read_json, remove, what_is
from oodsim.store.layout import (
    KEY_INPUTS,
    LOCKS,
    META,
    META_LIMIT,
    QUARANTINE_PREFIX,
    TMP_PREFIX,
    Entry,
    mark_cache,
    store_root,
)
from oodsim.store.locks import (
    LOCK_LIMIT,
    STALE_LOCK_SECONDS,
    LockToucher,
    break_lock,
    holder,
    owner,
    why_stale,
)
from oodsim.store.maintenance import Maintenance
from oodsim.store.migrate import Migration
from oodsim.store.obstacles import check_obstacles, refuse_to_move

#: seconds between two notices of a run that waits for another's lock
LOCK_NOTICE_SECONDS = 30.0


class CorruptEntryWarning(UserWarning):
    """A store entry (or a folder on the way to it) was malformed; it was moved aside and will
    be recomputed."""


@attrs.define
class Store(Maintenance, Migration):
    """Artifacts by (kind, content key) under ``root``; see the module docstring."""

    root: Path = attrs.field(converter=store_root)
    verify_on_read: bool = True
    events: list[tuple[str, str, str]] = attrs.field(factory=list)
    _marked: bool = attrs.field(default=False, init=False, repr=False)

    # ----------------------------------------------------------------- paths
    @property
    def location(self) -> str:
        """Where the entries are, as text that names them from any folder (the root's absolute
        path): for messages, and for workers to reopen the store."""
        return str(self.root.resolve())

    def exists(self) -> bool:
        """Whether the root is a folder (a store without one holds no entry)."""
        return self.root.is_dir()

    def path(self, kind: str, key: str) -> Path:
        return self.root / kind / key[:2] / key

    def check_obstacles(self, kinds: Iterable[str]) -> None:
        """Before any compute: nothing but a folder where ``kinds`` and the locks go
        (:func:`~oodsim.store.obstacles.check_obstacles`)."""
        check_obstacles(self.root, kinds)

    def _locate(self, kind: str, key: str) -> Path | None:
        """The entry folder of (kind, key), or None when there is none. Anything else where
        the kind, key-prefix or entry folder belongs (a file, a link, a FIFO) is moved aside on
        the way: left in place it would block the write of the entry."""
        folder = self.path(kind, key)
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
                self._move_aside(path, f"{described(found)} where a folder belongs", what)
                return None
        return folder

    def _inspect(
        self, folder: Path, kind: str | None, key: str | None, *, full: bool, members: bool = True
    ) -> tuple[str | None, dict[str, Any]]:
        """(what is wrong with an entry folder, its meta record): "" when nothing, None when
        the folder vanished meanwhile (moved aside by another process). Always checks the meta
        record and that each file is a regular file of its recorded size; ``full`` also checks
        that no other object is there, every checksum and, with ``members``, the arrays ZIP's
        members against the recorded shapes (a reader that checks the arrays it reads skips
        it)."""
        try:
            meta = read_json(folder / META, META_LIMIT)
        except FileNotFoundError:
            return (None if what_is(folder) != "folder" else "missing meta.json"), {}
        except (OSError, ValueError) as error:
            return f"unreadable meta.json: {error}", {}
        problem = meta_problem(meta, kind, key)
        if problem:
            return problem, {}
        sizes = meta.get("sizes", {})
        for name in sorted(meta["files"]):
            found = what_is(folder / name)
            if found == "missing":
                return f"missing file: {name}", meta
            if found != "file":
                return f"{name} is {described(found)}, not a file", meta
            if name in sizes and (actual := os.lstat(folder / name).st_size) != sizes[name]:
                return f"{name} has {actual} bytes, not {sizes[name]}", meta
        if not full:
            return "", meta
        odd = [(p, f) for p, f in objects(folder) if f not in ("file", "folder")]
        if odd:
            return f"{odd[0][0].relative_to(folder)} is {odd[0][1]}", meta
        actual = file_checksums(folder)
        if set(actual) != set(meta["files"]):
            extra = sorted(set(actual) - set(meta["files"]))
            return f"files differ from meta: not recorded {extra}", meta
        bad = [name for name, digest in meta["files"].items() if actual[name] != digest]
        if bad:
            return f"checksum mismatch in {bad}", meta
        return (entry_members_problem(folder, meta) if members else ""), meta

    def has(self, kind: str, key: str) -> bool:
        """Whether a complete entry exists: its meta file (written last, then renamed) intact and
        every file at its recorded size. A cheap check (no hashing of data files) that catches
        truncation, missing files and edited, wrong or missing meta files; altered data bytes
        are caught by the checksums when the entry is read, by :meth:`verify_entry`, or by
        :meth:`verify`. What fails the check is quarantined (see the module docstring)."""
        return self._intact(kind, key, full=False)

    def verify_entry(self, kind: str, key: str, *, members: bool = True) -> bool:
        """Whether an entry exists and every file matches its checksum, without loading arrays
        or recording an event; a corrupt entry is quarantined like in :meth:`get`. The engine
        checks every entry of a seed this way before it counts the seed's tasks as done,
        without ``members``: the check of the arrays ZIP's members against the record (a ZIP
        resealed after an edit) that every read repeats on the arrays it reads."""
        return self._intact(kind, key, full=True, members=members)

    def _intact(self, kind: str, key: str, *, full: bool, members: bool = True) -> bool:
        folder = self._locate(kind, key)
        if folder is None:
            return False
        try:
            problem, _ = self._inspect(folder, kind, key, full=full, members=members)
        except OSError as error:  # a file vanished or became unreadable while it was checked
            problem = f"unreadable file: {error}"
        if problem:
            self._quarantine(kind, key, problem)
        return problem == ""

    def ensure_writable(self) -> None:
        """Fail early, before any compute, when the cache root cannot take new entries."""
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

    # ----------------------------------------------------------------- read
    def get(self, kind: str, key: str) -> Entry | None:
        """Load an entry, or None when it is missing or corrupt (corrupt ones are moved aside)."""
        folder = self._locate(kind, key)
        if folder is None:
            return None
        try:
            # the arrays read are checked against meta below: no members check first
            problem, meta = self._inspect(
                folder, kind, key, full=self.verify_on_read, members=False
            )
            arrays = read_arrays(folder) if problem == "" else {}
            if problem == "":
                problem = arrays_problem(arrays, meta)
        except Exception as error:  # zarr raises many kinds of errors on damaged data
            problem = f"unreadable: {type(error).__name__}: {error}"
        if problem:
            self._quarantine(kind, key, problem)
        if problem != "":
            return None
        self.events.append(("loaded", kind, key))
        return Entry(kind, key, arrays, meta)

    def meta(self, kind: str, key: str) -> dict[str, Any] | None:
        """An entry's meta data without loading its arrays."""
        try:
            meta = read_json(self.path(kind, key) / META, META_LIMIT)
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) else None

    # ----------------------------------------------------------------- locks
    def ensure(self, kind: str, key: str, compute: Callable[[], object]) -> bool:
        """Run ``compute`` (which must :meth:`put` the entry) unless the entry exists.

        Processes sharing the cache compute a key at most once at a time: the first takes the
        key's lock, the others wait for it and then find the entry. Returns whether this call
        computed it.
        """
        if self.has(kind, key):
            return False
        with self.lock(kind, key):
            if self.has(kind, key):
                return False
            compute()
            return True

    def _mark(self) -> None:
        """Before this store's first write, and any write that finds the root gone (deleted
        while a run wrote: made again unmarked, `oodsim cache` refused it): mark a new or
        empty root as a cache (a root that cannot be written is reported by the write)."""
        if not self._marked or not self.root.is_dir():
            with contextlib.suppress(OSError):
                mark_cache(self.root)
            self._marked = True

    def _locks(self) -> Path:
        """The locks folder, created if needed; anything else in its place is moved aside."""
        self._mark()
        folder = self.root / LOCKS
        found = what_is(folder)
        if found not in ("folder", "missing"):
            self._move_aside(
                folder, f"{described(found)} where a folder belongs", f"folder {LOCKS}/"
            )
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(
                f"cannot create the locks folder {folder}: {error.strerror}; make {self.root} "
                "writable, then run again"
            ) from None
        return folder

    @contextlib.contextmanager
    def lock(self, kind: str, key: str, *, poll: float = 0.1) -> Iterator[None]:
        """Exclusive lock on computing (kind, key) across processes and hosts sharing the root.

        The lock file records host, pid and the process start time; a lock whose holder is gone
        (same host, process dead, a zombie, or pid reused) is stale and taken over, as is one on
        another host untouched for :data:`STALE_LOCK_SECONDS` (a holder touches its lock every
        ``TOUCH_SECONDS`` while it computes), and anything that is not a lock record (see
        :mod:`oodsim.store.locks`). A lock that cannot be created or taken over
        raises :class:`StoreError` naming the path and the fix; it never spins.
        """
        folder = self._locks()
        path = folder / f"{kind}-{key}.lock"
        record = owner()
        told = time.monotonic()
        while True:
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644)
            except FileExistsError:
                reason = why_stale(path)
                if not reason:
                    if time.monotonic() - told >= LOCK_NOTICE_SECONDS:
                        told = time.monotonic()
                        self._waiting(kind, key, path)
                    time.sleep(poll)
                    continue
                try:
                    break_lock(path)
                except OSError as error:
                    raise StoreError(
                        f"the lock {path} is stale ({reason}) but cannot be removed: "
                        f"{error.strerror}. Remove it (rm -rf '{path}') or make {folder} "
                        "writable, then run again"
                    ) from None
                continue
            except FileNotFoundError:  # the locks folder was removed meanwhile
                folder = self._locks()
                continue
            except OSError as error:
                raise StoreError(
                    f"cannot create the lock file {path}: {error.strerror}; make {folder} "
                    "writable (or free space there), then run again"
                ) from None
            try:
                with os.fdopen(fd, "w") as handle:
                    json.dump(record, handle)
            except OSError as error:
                path.unlink(missing_ok=True)
                raise StoreError(
                    f"cannot write the lock file {path}: {error.strerror}; free space in (or "
                    f"fix permissions of) {folder}, then run again"
                ) from None
            break
        try:
            with LockToucher(path):
                yield
        finally:
            with contextlib.suppress(OSError, ValueError):
                if read_json(path, LOCK_LIMIT) == record:
                    path.unlink()

    def _waiting(self, kind: str, key: str, path: Path) -> None:
        """Say, every :data:`LOCK_NOTICE_SECONDS`, whose lock this process waits for (a
        progress note: the run's status line shows it), so a run waiting on another, even on a
        stopped holder, is never silent."""
        notice = (
            f"waiting for {kind} {key[:12]}: another process computes it ({holder(path)}; "
            f"its lock {path} is taken over once untouched for {STALE_LOCK_SECONDS:.0f} s)"
        )
        note_progress(notice)

    # ----------------------------------------------------------------- write
    def put(
        self,
        kind: str,
        key: str,
        arrays: Mapping[str, np.ndarray],
        meta: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write an entry atomically (another writer's, first, is kept). ``key``: a
        :class:`~oodsim.keys.Key` of :func:`oodsim.keys.digest`, whose inputs are recorded."""
        if not isinstance(key, Key):
            no_inputs = f"store key {str(key)[:12]!r} of {kind} carries no inputs: use digest"
            raise TypeError(f"{no_inputs}, so that the entry's record can derive it")
        final = self.path(kind, key)
        tmp = final.parent / f"{TMP_PREFIX}{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        started = time.time()
        try:
            self._mark()
            self._locate(kind, key)  # moves aside whatever would block the folders below
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp.mkdir()
            write_zip(tmp / ARRAYS_ZIP, arrays)
            record = {
                "created": started,
                "write_seconds": round(time.time() - started, 4),
                "shapes": {name: list(np.shape(v)) for name, v in arrays.items()},
                **(meta or {}),
                "kind": kind,  # what the entry's own folder says: checked on every read
                "key": str(key),
                KEY_INPUTS: key.inputs,  # what the key derives from: checked on every read
                "files": file_checksums(tmp),
                "sizes": file_sizes(tmp),
            }
            write_meta(tmp, record)
            try:
                os.rename(tmp, final)
            except OSError:
                # the target exists: a concurrent writer won (keep theirs), or it is a corrupt
                # leftover, which has() quarantines so that the rename can be tried once more
                if self.has(kind, key):
                    remove(tmp)
                else:
                    os.rename(tmp, final)
        except BaseException as error:
            with contextlib.suppress(OSError):
                remove(tmp)
            if isinstance(error, OSError):
                raise StoreError(
                    f"could not write {kind} entry to {final}: {error}. Nothing of it was kept; "
                    f"free space in (or fix permissions of) {self.root} and run again: "
                    "finished entries stay cached"
                ) from error
            raise
        self.events.append(("computed", kind, key))
        return final

    # ----------------------------------------------------------------- quarantine
    def _quarantine(self, kind: str, key: str, reason: str) -> None:
        self._move_aside(self.path(kind, key), reason, f"entry {kind}/{key[:12]}")

    def _move_aside(self, path: Path, reason: str, what: str) -> None:
        """Rename a malformed object to a ``.tmp-corrupt-*`` sibling, warn, and delete it (a
        leftover of a failed delete blocks nothing; ``gc`` removes it). One that is gone already
        was handled by another process; one that cannot be moved raises :class:`StoreError`."""
        refuse_to_move(self.root, path, what)  # unless it may be the user's
        aside = path.parent / f"{QUARANTINE_PREFIX}{path.name}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return
        except OSError as error:
            raise StoreError(
                f"corrupt cache {what} at {path} ({reason}) cannot be moved aside: "
                f"{error.strerror}. Remove it (rm -rf '{path}') or make {path.parent} "
                "writable, then run again"
            ) from None
        warnings.warn(
            f"corrupt cache {what} ({reason}); moved aside, it will be recomputed",
            CorruptEntryWarning,
            stacklevel=5,
        )
        with contextlib.suppress(OSError):
            remove(aside)

    # ----------------------------------------------------------------- maintenance
    def counts(self) -> dict[str, dict[str, int]]:
        """``{"computed": {kind: n}, "loaded": {kind: n}}`` from this store's events."""
        return summarize_events(self.events)


def summarize_events(events: list[tuple[str, str, str]]) -> dict[str, dict[str, int]]:
    """Count store events by action and kind."""
    summary: dict[str, dict[str, int]] = {"computed": {}, "loaded": {}}
    for action, kind, _ in events:
        summary[action][kind] = summary[action].get(kind, 0) + 1
    return summary
