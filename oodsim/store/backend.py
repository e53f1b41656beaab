"""The seam between :class:`~oodsim.store.Store` and where its entries live.

A store entry is named by (kind, key) and holds files: ``meta.json`` (its record, written last)
and the files the record lists with a sha256 and size each (``arrays.zarr.zip``). The
:class:`~oodsim.store.Store` builds records, checks them and counts what was computed and
loaded; a :class:`Backend` only keeps files. Its contract:

- **Read meta**: :meth:`Backend.read_meta` gives the record's bytes; ``None`` when the entry is
  not there (a write that has not committed is not there either).
- **Open arrays**: :meth:`Backend.files` lists the entry's files with their sizes,
  :meth:`Backend.open` streams one, :meth:`Backend.read_arrays` loads the arrays.
- **Commit a finished entry**: :meth:`Backend.staging` gives a local folder to write an entry
  into; :meth:`Backend.commit` makes it visible at once and whole, or keeps the entry that is
  there already (put if absent: the first complete entry wins, a reader never sees half of one).
- **Lock**: :meth:`Backend.lock` keeps two processes from computing one entry at once. It saves
  work; it never makes the cache correct (commit does), and a dead holder's lock is taken over.
- **List**: :meth:`Backend.entries` lists every entry (:class:`~oodsim.store.layout.EntryInfo`).
- **Remove**: :meth:`Backend.remove` takes a corrupt entry out of sight (it is computed again).

Besides: the checks a run makes before any compute, small records beside the entries (the
plug-in fingerprints of :mod:`oodsim.store.plugin_sources`) and maintenance (what ``oodsim
cache verify --repair`` and ``gc`` remove beyond corrupt entries). The local file system
backend is :class:`~oodsim.store.local.LocalBackend`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable

import numpy as np

from oodsim.store.layout import EntryInfo, EntryIntact, EntryProblem
from oodsim.store.maintenance import Collected
from oodsim.store.migrate import Moved


class CorruptEntryWarning(UserWarning):
    """A store entry (or an object on the way to it) was malformed; it was moved aside and will
    be recomputed."""


@runtime_checkable
class Backend(Protocol):
    """Where a store's entries live; see the module docstring for the contract."""

    #: whether reading a whole entry to check its checksums costs little next to using it (a
    #: local disk: a run checks every cached entry so before counting it done), or is a
    #: download of each (object storage: a run checks records and sizes, and what it then
    #: reads is checked as it is read)
    reading_is_cheap: bool

    @property
    def location(self) -> str:
        """Where the entries are, as text that names them from any folder or machine: for
        messages, and for workers to open the same store (:func:`oodsim.store.Store`)."""

    def place(self, kind: str, key: str) -> Path | str:
        """Where the entry (kind, key) is or would be, for messages (a path or a URL)."""

    # ------------------------------------------------------------ before any compute
    def exists(self) -> bool:
        """Whether the store is there at all (one that is not holds no entry)."""

    def ensure_writable(self) -> None:
        """Raise :class:`~oodsim.errors.StoreError` in one line when no entry can be written."""

    def ensure_present(self) -> None:
        """Raise :class:`~oodsim.errors.StoreError` when there is no store (a mistyped cache
        must not read as an empty, healthy one)."""

    def ensure_ours(self) -> None:
        """Raise :class:`~oodsim.errors.StoreError` unless the store is one oodsim made, before
        anything removes by the store's layout."""

    def check_obstacles(self, kinds: Iterable[str]) -> None:
        """Raise :class:`~oodsim.errors.StoreError` when something that may be the user's
        stands where entries of ``kinds`` go."""

    # ------------------------------------------------------------ entries
    def read_meta(self, kind: str, key: str) -> bytes | None:
        """The bytes of the entry's record; ``None`` when there is no entry. An entry there
        without a readable record raises ``FileNotFoundError`` (none) or ``ValueError``
        (something else where it belongs, saying what)."""

    def files(self, kind: str, key: str) -> dict[str, int | str]:
        """The entry's files but its record, by relative name: the size of each regular file,
        or what stands there instead as it reads in a sentence ("a FIFO"; "a folder" for a
        folder of files, which are listed too)."""

    def open(self, kind: str, key: str, name: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        """One of the entry's files, to read (and seek) as bytes."""

    def read_arrays(self, kind: str, key: str) -> dict[str, np.ndarray]:
        """The entry's arrays."""

    def prefetch(self, entries: Iterable[tuple[str, str]]) -> None:
        """Read ahead, all at once, what :meth:`read_meta` and :meth:`files` will be asked of
        ``entries`` (kind, key) soon: a no-op where each read is cheap."""

    def staging(self, kind: str, key: str) -> contextlib.AbstractContextManager[Path]:
        """A new local folder to write the entry (kind, key) into, removed when the context
        ends (what :meth:`commit` took is not there any more)."""

    def commit(self, kind: str, key: str, staged: Path) -> bool:
        """Make the finished entry in ``staged`` visible under (kind, key), at once and whole.
        Returns False, changing nothing, when something stands there already (a concurrent
        writer's entry, which is kept, or a corrupt leftover, for the store to remove first)."""

    def remove(self, kind: str, key: str, reason: str) -> bool:
        """Take the entry out of sight (readers find none) and delete it; whether there was
        one. ``reason`` says why, for a message. Raises :class:`~oodsim.errors.StoreError`
        naming the fix when it cannot."""

    def lock(self, kind: str, key: str) -> contextlib.AbstractContextManager[None]:
        """Hold the lock on computing (kind, key) across processes and hosts."""

    def entries(self) -> Iterator[EntryInfo]:
        """Every entry, an unreadable one included (with an empty description)."""

    def count(self) -> int:
        """How many entries there are, without reading any (a run's opening line)."""

    # ------------------------------------------------------------ records beside the entries
    def read_record(self, name: str, limit: int) -> Any:
        """The JSON record ``name`` (a relative path) beside the entries. Raises
        ``FileNotFoundError`` when there is none, ``ValueError`` for anything unreadable."""

    def write_record(self, name: str, record: Any) -> None:
        """Write the JSON record ``name`` whole (a reader sees the old one or the new one)."""

    # ------------------------------------------------------------ maintenance
    def layout_problems(self, *, repair: bool) -> list[tuple[EntryInfo, str]]:
        """What is wrong in the store beside its entries (objects out of place, malformed
        locks); with ``repair``, removed, with leftovers and dead holders' locks."""

    def gc(self, *, older_than: float) -> Collected:
        """Remove leftovers of interrupted writes at least ``older_than`` seconds old (never a
        write in progress), stale locks and objects out of place."""

    def stale_locks(self) -> list[Path | str]:
        """Locks whose holder is gone."""

    def holds_kind(self, kind: str) -> bool:
        """Whether any entry of ``kind`` may be in the store (a cheap look)."""

    def move_kind(self, old: str, new: str, problem: EntryProblem, intact: EntryIntact) -> Moved:
        """Move every intact entry of kind ``old`` to kind ``new``: ``problem(kind, key)`` says
        what is wrong with an entry ("" when nothing, None when it is gone), ``intact(kind,
        key)`` whether one is there whole (removing a corrupt one)."""
