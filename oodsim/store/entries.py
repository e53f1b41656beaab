"""The store: entries by (kind, content key), each ``arrays.zarr.zip``
(:mod:`oodsim.store.arrays`) and ``meta.json`` (what was computed, versions, timings, a sha256
and size per file, the entry's kind, key and the inputs the key derives from, and a sha256 of its
own), kept by a :class:`~oodsim.store.backend.Backend` (the local file system's:
:class:`~oodsim.store.local.LocalBackend`).

The store writes records and checks them; an entry whose record or files are malformed (a
missing, edited, older or wrong-schema ``meta.json``, or one that does not derive its entry's
key, :func:`~oodsim.store.digests.meta_problem`; a missing file, a wrong size or checksum) is
reported with a :class:`~oodsim.store.backend.CorruptEntryWarning`, removed and recomputed;
where it cannot be removed, :class:`StoreError` says where and how to fix it. :attr:`Store.events`
records what was computed (``put``) and loaded (``get``): the run's provenance.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from oodsim.errors import StoreError
from oodsim.keys import Key
from oodsim.store.arrays import ARRAYS_ZIP, members_problem, write_zip
from oodsim.store.backend import Backend, CorruptEntryWarning
from oodsim.store.digests import (
    arrays_problem,
    file_checksums,
    file_sizes,
    meta_problem,
    sha256_of,
    write_meta,
)
from oodsim.store.fs import parse_json
from oodsim.store.layout import KEY_INPUTS, META, Entry, EntryInfo
from oodsim.store.maintenance import Collected
from oodsim.store.migrate import Moved
from oodsim.store.schemes import backend_at


def as_backend(where: Backend | str | Path) -> Backend:
    """The backend of a store at ``where``: a :class:`Backend` as it is, a location by
    :func:`~oodsim.store.schemes.backend_at` (a path: the local file system's)."""
    if isinstance(where, (str, Path)):
        return backend_at(where)
    return where


@attrs.define
class Store:
    """Artifacts by (kind, content key) in ``backend`` (or at a location: a path is the local
    file system's, a URL its scheme's backend); see the module docstring."""

    backend: Backend = attrs.field(converter=as_backend)
    verify_on_read: bool = True
    events: list[tuple[str, str, str]] = attrs.field(factory=list)

    # ----------------------------------------------------------------- where
    @property
    def location(self) -> str:
        """Where the entries are, as text that names them from any folder (the root's absolute
        path): for messages, and for workers to reopen the store."""
        return self.backend.location

    def place(self, kind: str, key: str) -> Path | str:
        """Where the entry (kind, key) is or would be (a path on the local file system)."""
        return self.backend.place(kind, key)

    def exists(self) -> bool:
        """Whether the store is there (one that is not holds no entry)."""
        return self.backend.exists()

    def check_obstacles(self, kinds: Iterable[str]) -> None:
        """Before any compute: nothing that may be the user's where ``kinds`` and the locks go
        (:func:`~oodsim.store.obstacles.check_obstacles`)."""
        self.backend.check_obstacles(kinds)

    def ensure_writable(self) -> None:
        """Fail early, before any compute, when the store cannot take new entries."""
        self.backend.ensure_writable()

    def ensure_present(self) -> None:
        """Fail in one line when there is no store: for ``cache ls``, ``verify`` and ``gc``, a
        mistyped path must not read as an empty, healthy cache."""
        self.backend.ensure_present()

    def ensure_ours(self) -> None:
        """Fail in one line unless the store is one oodsim made (nothing is read or changed
        by the store's layout in a folder of the user's)."""
        self.backend.ensure_ours()

    # ----------------------------------------------------------------- checks
    def problem(
        self, kind: str, key: str, *, full: bool = True, members: bool = True
    ) -> str | None:
        """What is wrong with the entry (kind, key): "" when nothing, None when there is none.
        Always checks the record (:func:`~oodsim.store.digests.meta_problem`) and that each file
        it lists is there at its recorded size; ``full`` also checks that no other file is
        there, every checksum and, with ``members``, the arrays ZIP's members against the
        recorded shapes (a reader that checks the arrays it reads skips it)."""
        return self._inspect(kind, key, full=full, members=members)[0]

    def _inspect(
        self, kind: str, key: str, *, full: bool, members: bool = True
    ) -> tuple[str | None, dict[str, Any]]:
        """(:meth:`problem`, the entry's record when it could be read and trusted)."""
        try:
            data = self.backend.read_meta(kind, key)
        except FileNotFoundError:
            return "missing meta.json", {}
        except (OSError, ValueError) as error:
            return f"unreadable meta.json: {error}", {}
        if data is None:
            return None, {}
        try:
            meta = parse_json(data, META)
        except ValueError as error:
            return f"unreadable meta.json: {error}", {}
        problem = meta_problem(meta, kind, key)
        if problem:
            return problem, {}
        found = self.backend.files(kind, key)
        for name in sorted(meta["files"]):
            size = found.get(name)
            if size is None:
                return f"missing file: {name}", meta
            if isinstance(size, str):
                return f"{name} is {size}, not a file", meta
            if size != meta["sizes"][name]:
                return f"{name} has {size} bytes, not {meta['sizes'][name]}", meta
        if not full:
            return "", meta
        odd = [
            (n, what) for n, what in found.items() if isinstance(what, str) and what != "a folder"
        ]
        if odd:
            return f"{odd[0][0]} is {odd[0][1]}", meta
        extra = sorted(
            n for n, size in found.items() if isinstance(size, int) and n not in meta["files"]
        )
        if extra:
            return f"files differ from meta: not recorded {extra}", meta
        bad = [n for n, digest in meta["files"].items() if self._sha256(kind, key, n) != digest]
        if bad:
            return f"checksum mismatch in {bad}", meta
        shapes = meta.get("shapes")
        if members and isinstance(shapes, dict) and isinstance(found.get(ARRAYS_ZIP), int):
            with self.backend.open(kind, key, ARRAYS_ZIP) as handle:
                return members_problem(handle, shapes), meta
        return "", meta

    def _sha256(self, kind: str, key: str, name: str) -> str:
        """The sha256 of one of an entry's files."""
        with self.backend.open(kind, key, name) as handle:
            return sha256_of(handle)

    def has(self, kind: str, key: str) -> bool:
        """Whether a complete entry exists: its record (written last) intact and every file at
        its recorded size. A cheap check (no hashing of data files) that catches truncation,
        missing files and edited, wrong or missing records; altered data bytes are caught by
        the checksums when the entry is read, by :meth:`verify_entry`, or by :meth:`verify`.
        What fails the check is removed (see the module docstring)."""
        return self._intact(kind, key, full=False)

    def verify_entry(self, kind: str, key: str, *, members: bool = True) -> bool:
        """Whether an entry exists and every file matches its checksum, without loading arrays
        or recording an event; a corrupt entry is removed like in :meth:`get`. Where reading
        is cheap the engine checks every entry of a seed this way before it counts the seed's
        tasks as done (:meth:`counts_as_done`), without ``members``: the check of the arrays
        ZIP's members against the record (a ZIP resealed after an edit) that every read
        repeats on the arrays it reads."""
        return self._intact(kind, key, full=True, members=members)

    def prefetch(self, entries: Iterable[tuple[str, str]]) -> None:
        """Read ahead what checking ``entries`` (kind, key) will read, all at once where each
        read is a request (object storage; :meth:`Backend.prefetch`)."""
        self.backend.prefetch(entries)

    def counts_as_done(self, kind: str, key: str) -> bool:
        """Whether a run may count the entry as computed: :meth:`verify_entry` (without the
        members check, which every read repeats) where reading is cheap, else :meth:`has`
        (object storage, where checksums would download every entry: what a run reads is
        checked as it is read)."""
        if self.backend.reading_is_cheap:
            return self.verify_entry(kind, key, members=False)
        return self.has(kind, key)

    def _intact(self, kind: str, key: str, *, full: bool, members: bool = True) -> bool:
        try:
            problem = self.problem(kind, key, full=full, members=members)
        except OSError as error:  # a file vanished or became unreadable while it was checked
            problem = f"unreadable file: {error}"
        if problem:
            self._quarantine(kind, key, problem)
        return problem == ""

    # ----------------------------------------------------------------- read
    def get(self, kind: str, key: str) -> Entry | None:
        """Load an entry, or None when it is missing or corrupt (corrupt ones are removed)."""
        try:
            # the arrays read are checked against meta below: no members check first
            problem, meta = self._inspect(kind, key, full=self.verify_on_read, members=False)
            arrays = self.backend.read_arrays(kind, key) if problem == "" else {}
            if problem == "":
                problem = arrays_problem(arrays, meta)
        except StoreError:
            raise
        except Exception as error:  # zarr raises many kinds of errors on damaged data
            problem = f"unreadable: {type(error).__name__}: {error}"
        if problem:
            self._quarantine(kind, key, problem)
        if problem != "":
            return None
        self.events.append(("loaded", kind, key))
        return Entry(kind, key, arrays, meta)

    def meta(self, kind: str, key: str) -> dict[str, Any] | None:
        """An entry's record without loading its arrays (None when there is none, or it is not
        a record)."""
        try:
            data = self.backend.read_meta(kind, key)
            meta = parse_json(data, META) if data is not None else None
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) else None

    # ----------------------------------------------------------------- locks
    def lock(self, kind: str, key: str) -> contextlib.AbstractContextManager[None]:
        """Exclusive lock on computing (kind, key) across processes and hosts sharing the
        store; a dead holder's lock is taken over (:meth:`Backend.lock`)."""
        return self.backend.lock(kind, key)

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

    # ----------------------------------------------------------------- write
    def put(
        self,
        kind: str,
        key: str,
        arrays: Mapping[str, np.ndarray],
        meta: Mapping[str, Any] | None = None,
    ) -> Path | str:
        """Write an entry whole (another writer's, first, is kept); where it is. ``key``: a
        :class:`~oodsim.keys.Key` of :func:`oodsim.keys.digest`, whose inputs are recorded."""
        if not isinstance(key, Key):
            no_inputs = f"store key {str(key)[:12]!r} of {kind} carries no inputs: use digest"
            raise TypeError(f"{no_inputs}, so that the entry's record can derive it")
        started = time.time()
        try:
            with self.backend.staging(kind, key) as folder:
                write_zip(folder / ARRAYS_ZIP, arrays)
                record = {
                    "created": started,
                    "write_seconds": round(time.time() - started, 4),
                    "shapes": {name: list(np.shape(v)) for name, v in arrays.items()},
                    **(meta or {}),
                    "kind": kind,  # what the entry's own place says: checked on every read
                    "key": str(key),
                    KEY_INPUTS: key.inputs,  # what the key derives from: checked on every read
                    "files": file_checksums(folder),
                    "sizes": file_sizes(folder),
                }
                write_meta(folder, record)
                # something in the way: a concurrent writer's entry (kept), or a corrupt
                # leftover, which has() removes so that the commit can be tried once more
                if not self.backend.commit(kind, key, folder) and not self.has(kind, key):
                    self.backend.commit(kind, key, folder)
        except OSError as error:
            raise StoreError(
                f"could not write {kind} entry to {self.place(kind, key)}: {error}. Nothing of "
                f"it was kept; free space in (or fix permissions of) {self.location} and run "
                "again: finished entries stay cached"
            ) from error
        self.events.append(("computed", kind, key))
        return self.place(kind, key)

    def _quarantine(self, kind: str, key: str, reason: str) -> None:
        """Remove a corrupt entry and warn that it will be computed again."""
        if self.backend.remove(kind, key, reason):
            warnings.warn(
                f"corrupt cache entry {kind}/{key[:12]} ({reason}); moved aside, it will be "
                "recomputed",
                CorruptEntryWarning,
                stacklevel=4,
            )

    # ----------------------------------------------------------------- maintenance
    def entries(self) -> Iterator[EntryInfo]:
        """Every entry (one without a readable record is listed with an empty description, so
        that :meth:`verify` can report it)."""
        return self.backend.entries()

    def count(self) -> int:
        """How many entries the store holds, without reading any."""
        return self.backend.count()

    def verify(self, *, repair: bool = False) -> list[tuple[EntryInfo, str]]:
        """Check every entry (record, sizes, checksums) and what the backend keeps beside them
        (objects out of place, malformed locks). Returns the problems; with ``repair``, removes
        them (and leftovers, and locks of dead holders)."""
        self.ensure_ours()
        problems: list[tuple[EntryInfo, str]] = []
        for info in self.entries():
            try:
                problem = self.problem(info.kind, info.key) or ""
            except OSError as error:
                problem = f"unreadable file: {error}"
            if problem and repair:
                try:
                    self.backend.remove(info.kind, info.key, problem)
                except StoreError as error:
                    problem = f"{problem}; could not remove it: {error}"
            if problem:
                problems.append((info, problem))
        return problems + self.backend.layout_problems(repair=repair)

    def gc(self, *, older_than: float = 3600.0) -> Collected:
        """Remove what can block or clutter a run: leftovers of interrupted writes at least
        ``older_than`` seconds old (never a write in progress), stale and malformed locks,
        objects out of place. Returns what was removed and what could not be."""
        return self.backend.gc(older_than=older_than)

    def stale_locks(self) -> list[Path | str]:
        """Locks whose holder is gone, and malformed ones."""
        return self.backend.stale_locks()

    def holds_kind(self, kind: str) -> bool:
        """Whether any entry of ``kind`` may be in the store (a cheap look: no records read)."""
        return self.backend.holds_kind(kind)

    def move_kind(self, old: str, new: str) -> Moved:
        """Move every intact entry of kind ``old`` to kind ``new`` (same key, same files), in a
        store oodsim made (:mod:`oodsim.store.migrate`)."""
        return self.backend.move_kind(old, new, self.problem, self.has)

    def counts(self) -> dict[str, dict[str, int]]:
        """``{"computed": {kind: n}, "loaded": {kind: n}}`` from this store's events."""
        return summarize_events(self.events)


def summarize_events(events: list[tuple[str, str, str]]) -> dict[str, dict[str, int]]:
    """Count store events by action and kind."""
    summary: dict[str, dict[str, int]] = {"computed": {}, "loaded": {}}
    for action, kind, _ in events:
        summary[action][kind] = summary[action].get(kind, 0) + 1
    return summary
