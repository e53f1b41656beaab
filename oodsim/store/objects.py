"""The store's backend on object storage (S3, Google Cloud Storage, Azure Blob) through fsspec.

Under the location ``scheme://bucket/prefix``::

    <kind>/<key[:2]>/<key>/meta.json            the entry's record, written last and only if absent
    <kind>/<key[:2]>/<key>/<v>/arrays.zarr.zip  its files; <v>: sha256 of the record's bytes, 16 hex
    locks/<kind>-<key>.lock                     who computes the entry, touched while held
    .oodsim-cache                               the mark of a store oodsim made

An entry is committed by uploading its files into the folder its record names, then its record
with a conditional put (``If-None-Match: *``): the record is the entry, so a reader sees a whole
entry or none, and of two writers of one entry the first record wins; the other's files are
removed. A writer killed before its record leaves files no record names, invisible to readers,
which ``gc`` removes. A store whose service ignores the condition keeps the last record, still
whole, and ``gc`` removes the files of the one it replaced.

Locks only save work (:mod:`oodsim.store.object_locks`): a lock object is created only if
absent, touched while held, and taken over once its holder is gone (a dead process on this
host) or untouched for :data:`~oodsim.store.locks.STALE_LOCK_SECONDS`. A process remembers
the records it has read (:data:`SEEN`), so a cached rerun reads each once. Credentials come
from the environment and fsspec's configuration (``FSSPEC_S3_ENDPOINT_URL``, ``~/.aws``),
never from the location, and messages name the location only.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import attrs
import numpy as np

from oodsim.errors import StoreError
from oodsim.store.arrays import ARRAYS_ZIP, read_zip
from oodsim.store.fs import parse_json
from oodsim.store.layout import (
    LOCKS,
    META,
    META_LIMIT,
    TMP_PREFIX,
    EntryInfo,
    EntryIntact,
    EntryProblem,
    belongs,
    version_of,
)
from oodsim.store.migrate import Moved
from oodsim.store.object_errors import Guarded, plain_error
from oodsim.store.object_locks import hold, stale
from oodsim.store.object_maintenance import ObjectMaintenance

#: the object that marks a prefix as a store oodsim made
MARK = ".oodsim-cache"


#: entries this process has seen whole, by (location, kind, key): their record and file sizes.
#: An entry never changes once committed; one removed meanwhile (``verify --repair``, another
#: process's quarantine) fails the read of its files, which forgets it here. A cached rerun so
#: reads each record once, not at planning and again at scoring.
SEEN: dict[tuple[str, str, str], tuple[bytes, dict[str, int]]] = {}
SEEN_LIMIT = 100_000


def clean_location(location: str) -> str:
    """``location`` without a trailing slash; one that carries credentials is refused."""
    scheme, _, rest = str(location).partition("://")
    if "@" in rest.split("/", 1)[0]:
        raise StoreError(
            f"the cache {scheme}://…@{rest.split('@', 1)[1]} names credentials: give them "
            "through the environment or fsspec's configuration, never in a location"
        )
    return f"{scheme.lower()}://{rest.rstrip('/')}"


@attrs.define
class ObjectBackend(ObjectMaintenance):
    """Entries as objects under ``location`` (see the module docstring)."""

    location: str = attrs.field(converter=clean_location)
    _fs: Any = attrs.field(default=None, init=False, repr=False, eq=False)
    _root: str = attrs.field(default="", init=False, repr=False, eq=False)
    _marked: bool = attrs.field(default=False, init=False, repr=False, eq=False)
    _records: dict[tuple[str, str], bytes] = attrs.field(factory=dict, init=False, repr=False)
    _listed: dict[str, dict[str, dict[str, int]]] = attrs.field(
        factory=dict, init=False, repr=False
    )
    _fetched: dict[str, bytes] = attrs.field(factory=dict, init=False, repr=False)
    reading_is_cheap = False

    def __getstate__(self) -> dict[str, Any]:
        """What a pickle of this backend holds: its location (a copy opens its own file system
        and remembers nothing of this one's reads)."""
        return {"location": self.location}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["location"])  # type: ignore[misc]

    def _connect(self) -> None:
        """Open the fsspec file system on first use (a worker opens its own)."""
        if self._fs is None:
            # fsspec and its protocol's package load with the first store that needs them
            import fsspec

            # listings are read fresh: other processes write the same prefix
            fs, self._root = fsspec.core.url_to_fs(self.location, use_listings_cache=False)
            self._fs = Guarded(fs, self.location)

    @property
    def fs(self) -> Any:
        """The file system (:class:`Guarded`)."""
        self._connect()
        return self._fs

    @property
    def root(self) -> str:
        """The location as the file system names it (``bucket/prefix``)."""
        self._connect()
        return self._root

    def place(self, kind: str, key: str) -> str:
        return f"{self.location}/{kind}/{key[:2]}/{key}"

    def _entry(self, kind: str, key: str) -> str:
        return f"{self.root}/{kind}/{key[:2]}/{key}"

    # ------------------------------------------------------------ before any compute
    def exists(self) -> bool:
        return self.fs.exists(f"{self.root}/{MARK}")

    def ensure_writable(self) -> None:
        probe = f"{self.root}/{TMP_PREFIX}probe-{uuid.uuid4().hex}"
        try:  # what the service refuses is a StoreError already (Guarded)
            self.fs.pipe_file(probe, b"ok")
            self.fs.rm_file(probe)
        except OSError as error:
            raise StoreError(
                f"cannot use the cache {self.location}: {plain_error(error, self.location)}"
            ) from None
        self._mark()

    def _mark(self) -> None:
        """Before this store's first write: mark the prefix as a store oodsim made."""
        if not self._marked:
            with contextlib.suppress(FileExistsError):
                self.fs.pipe_file(f"{self.root}/{MARK}", b"oodsim\n", mode="create")
            self._marked = True

    def ensure_present(self) -> None:
        if not self.exists():
            raise StoreError(
                f"no cache at {self.location}: no store oodsim made is there (its mark {MARK} "
                "is missing); pass the cache's location with --cache (or set $OODSIM_CACHE)"
            )

    def ensure_ours(self) -> None:
        self.ensure_present()

    def check_obstacles(self, kinds: Iterable[str]) -> None:
        """Nothing stands in an entry's way on object storage: every name is free."""

    # ------------------------------------------------------------ entries
    def read_meta(self, kind: str, key: str) -> bytes | None:
        known = SEEN.get((self.location, kind, key))
        if known is not None:
            meta = known[0]
        else:
            try:
                meta = self.fs.cat_file(f"{self._entry(kind, key)}/{META}")
            except FileNotFoundError:
                return None
            if len(meta) > META_LIMIT:
                raise ValueError(f"{META} is larger than {META_LIMIT} bytes")
        self._records[kind, key] = meta
        return meta

    def _folder(self, kind: str, key: str) -> str:
        """The folder of the files of the entry whose record was read last (read now if
        none was)."""
        record = self._records.get((kind, key)) or self.read_meta(kind, key)
        if record is None:
            raise FileNotFoundError(f"no entry {kind}/{key[:12]} in {self.location}")
        return f"{self._entry(kind, key)}/{version_of(record)}"

    def files(self, kind: str, key: str) -> dict[str, int | str]:
        known = SEEN.get((self.location, kind, key))
        if known is not None and known[0] == self._records.get((kind, key)):
            return dict(known[1])
        folder = self._folder(kind, key)
        try:
            found = self.fs.find(folder, detail=True)
        except FileNotFoundError:
            return {}
        sizes = {path[len(folder) + 1 :]: int(info["size"]) for path, info in found.items()}
        if sizes:
            self._seen(kind, key, sizes)
        return dict(sizes)

    def prefetch(self, entries: Iterable[tuple[str, str]]) -> None:
        """The records of ``entries`` not seen yet, read concurrently, and their files' sizes
        from one listing of each kind (a page per thousand objects), into :data:`SEEN`: a
        rerun's planning then asks nothing more of them, where each entry cost two requests
        one after another."""
        wanted = [
            (k, key) for k, key in dict.fromkeys(entries) if (self.location, k, key) not in SEEN
        ]
        if not wanted:
            return
        paths = {f"{self._entry(kind, key)}/{META}": (kind, key) for kind, key in wanted}
        records = self.fs.cat(list(paths), on_error="return")
        for kind in {kind for kind, _ in wanted} - set(self._listed):
            try:  # once a backend: an entry's folder never changes (named by its record)
                listed = self.fs.find(f"{self.root}/{kind}", detail=True)
            except FileNotFoundError:
                listed = {}
            folders = self._listed[kind] = {}
            for path, info in listed.items():
                folder, _, name = path.rpartition("/")
                folders.setdefault(folder, {})[name] = int(info["size"])
        for path, meta in records.items():
            if not isinstance(meta, bytes) or len(meta) > META_LIMIT:
                continue  # none, or unreadable: read as usual, and judged
            kind, key = paths[path]
            folder = self._listed[kind].get(f"{self._entry(kind, key)}/{version_of(meta)}")
            if folder:
                self._records[kind, key] = meta
                self._seen(kind, key, folder)

    def _seen(self, kind: str, key: str, sizes: dict[str, int]) -> None:
        """Remember the entry whose record this backend read or wrote last, and its files."""
        if len(SEEN) >= SEEN_LIMIT:
            SEEN.clear()
        SEEN[self.location, kind, key] = (self._records[kind, key], sizes)

    def _read(self, kind: str, key: str, name: str) -> bytes:
        """One of the entry's files; an entry whose file is gone is forgotten (see SEEN)."""
        try:
            return self.fs.cat_file(f"{self._folder(kind, key)}/{name}")
        except FileNotFoundError:
            SEEN.pop((self.location, kind, key), None)
            raise

    def open(self, kind: str, key: str, name: str) -> IO[bytes]:
        last = f"{kind}/{key}/{name}"  # the file read last is read once: checksum, then arrays
        if last not in self._fetched:
            self._fetched = {last: self._read(kind, key, name)}
        return io.BytesIO(self._fetched[last])

    def read_arrays(self, kind: str, key: str) -> dict[str, np.ndarray]:
        raw = self._fetched.pop(f"{kind}/{key}/{ARRAYS_ZIP}", None)
        return read_zip(raw if raw is not None else self._read(kind, key, ARRAYS_ZIP))

    @contextlib.contextmanager
    def staging(self, kind: str, key: str) -> Iterator[Path]:
        folder = Path(tempfile.mkdtemp(prefix=f"oodsim-{kind}-{key[:12]}-"))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def commit(self, kind: str, key: str, staged: Path) -> bool:
        self._mark()
        meta = (staged / META).read_bytes()
        entry = self._entry(kind, key)
        folder = f"{entry}/{version_of(meta)}"
        sizes = {}
        for path in sorted(staged.rglob("*")):
            if path.is_file() and path.name != META:
                name = path.relative_to(staged).as_posix()
                self.fs.put_file(str(path), f"{folder}/{name}")
                sizes[name] = path.stat().st_size
        try:
            self.fs.pipe_file(f"{entry}/{META}", meta, mode="create")
        except FileExistsError:  # another writer's record came first: theirs stays
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(folder, recursive=True)
            return False
        self._records[kind, key] = meta
        self._seen(kind, key, sizes)
        return True

    def remove(self, kind: str, key: str, reason: str = "removed") -> bool:
        entry = self._entry(kind, key)
        judged = self._records.pop((kind, key), None)
        SEEN.pop((self.location, kind, key), None)
        try:
            meta = self.fs.cat_file(f"{entry}/{META}")
        except FileNotFoundError:
            return False
        if judged is not None and meta != judged:
            return False  # replaced meanwhile by another process: not the entry judged
        try:
            self.fs.rm_file(f"{entry}/{META}")  # out of sight first, then its files
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(f"{entry}/{version_of(meta)}", recursive=True)
        except OSError as error:
            raise StoreError(
                f"corrupt cache entry {kind}/{key[:12]} at {self.place(kind, key)} ({reason}) "
                f"cannot be removed: {plain_error(error, self.location)}; remove it (or let "
                "your credentials delete objects there), then run again"
            ) from None
        return True

    def entries(self) -> Iterator[EntryInfo]:
        for kind, key, objects in self._entry_objects():
            if META not in objects:
                continue
            try:
                raw = self.fs.cat_file(f"{self._entry(kind, key)}/{META}")
                meta = parse_json(raw, META)
            except (OSError, ValueError):
                raw, meta = b"", {}
            meta = meta if isinstance(meta, dict) else {}
            version = version_of(raw) if raw else ""
            size = sum(s for name, s in objects.items() if name.split("/")[0] in (version, META))
            created = meta.get("created", 0.0)
            yield EntryInfo(
                kind=kind,
                key=key,
                path=self.place(kind, key),
                size=size,
                created=float(created) if isinstance(created, (int, float)) else 0.0,
                describe=str(meta.get("describe", "")),
            )

    def count(self) -> int:
        """Entries holding a record, from one listing (a page per thousand objects)."""
        return sum(META in objects for _, _, objects in self._entry_objects())

    def _entry_objects(self) -> Iterator[tuple[str, str, dict[str, int]]]:
        """(kind, key, {name inside the entry: size}) of every entry's place that holds
        objects, a record or not."""
        try:
            found = self.fs.find(self.root, detail=True)
        except FileNotFoundError:
            return
        grouped: dict[tuple[str, str], dict[str, int]] = {}
        for path, info in found.items():
            parts = path[len(self.root) + 1 :].split("/")
            if len(parts) < 4 or not belongs(parts[0], "", 0) or not belongs(parts[1], "", 1):
                continue
            if not belongs(parts[2], parts[1], 2):
                continue
            grouped.setdefault((parts[0], parts[2]), {})["/".join(parts[3:])] = int(info["size"])
        for (kind, key), objects in sorted(grouped.items()):
            yield kind, key, objects

    # ------------------------------------------------------------ locks
    def _lock_path(self, kind: str, key: str) -> str:
        return f"{self.root}/{LOCKS}/{kind}-{key}.lock"

    def _stale(self, path: str) -> tuple[str, bool]:
        """(why the lock object may be taken over, whether it is no lock at all)."""
        return stale(self.fs, path)

    def lock(
        self, kind: str, key: str, *, poll: float = 0.5
    ) -> contextlib.AbstractContextManager[None]:
        self._mark()  # (the first write of a computing process)
        where = f"{self.location}/{LOCKS}/{kind}-{key}.lock"
        return hold(self.fs, self._lock_path(kind, key), f"{kind} {key[:12]}", where, poll)

    def _locks(self) -> list[tuple[str, tuple[str, bool]]]:
        """Every lock object with why it may be taken over."""
        try:
            paths = self.fs.ls(f"{self.root}/{LOCKS}", detail=False)
        except FileNotFoundError:
            return []
        return [(path, self._stale(path)) for path in sorted(paths)]

    def stale_locks(self) -> list[Path | str]:
        return [f"{self.location}/{p[len(self.root) + 1 :]}" for p, why in self._locks() if why[0]]

    # ------------------------------------------------------------ records beside the entries
    def read_record(self, name: str, limit: int) -> Any:
        raw = self.fs.cat_file(f"{self.root}/{name}")
        if len(raw) > limit:
            raise ValueError(f"{name} is larger than {limit} bytes")
        return parse_json(raw, name)

    def write_record(self, name: str, record: Any) -> None:
        self._mark()
        self.fs.pipe_file(f"{self.root}/{name}", json.dumps(record).encode())

    def holds_kind(self, kind: str) -> bool:
        try:
            return bool(self.fs.ls(f"{self.root}/{kind}", detail=False))
        except FileNotFoundError:
            return False

    def move_kind(self, old: str, new: str, problem: EntryProblem, intact: EntryIntact) -> Moved:
        """Object stores never held the kinds of older oodsim versions: nothing to move."""
        return Moved()
