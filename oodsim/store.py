"""Content-addressed artifact store on disk: ``<root>/<kind>/<key[:2]>/<key>/``.

An entry holds a zarr group ``arrays.zarr`` and ``meta.json`` (what was computed, from which spec,
package versions, timings, and a sha256 per file). Entries are written into a temporary sibling
and renamed into place, so a reader never sees a half-written entry and a crash leaves only a
``.tmp-*`` folder that :meth:`Store.gc` removes. A corrupt entry (checksum mismatch, a file of the
wrong size, a missing, unparseable or edited meta file) is reported with a warning, moved aside and
treated as missing, so the next run recomputes it. ``meta.json`` carries a sha256 of its own
content (``meta_sha256``), so an edit to any of its fields is caught too.

The store records what it computed (``put``) and loaded (``get``) in :attr:`Store.events`; the
executor gathers these into the result's provenance, which is how tests prove that a re-run
computed nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import zarr

from oodsim.errors import OodsimError

META = "meta.json"
META_DIGEST = "meta_sha256"
ARRAYS = "arrays.zarr"
TMP_PREFIX = ".tmp-"
GITIGNORE = "*\n!.gitignore\n"


class StoreError(OodsimError):
    """The cache directory cannot be used (not writable, full, corrupt beyond repair)."""


class CorruptEntryWarning(UserWarning):
    """A store entry failed its checksum and will be recomputed."""


@attrs.frozen
class Entry:
    """A loaded store entry."""

    kind: str
    key: str
    arrays: dict[str, np.ndarray]
    meta: dict[str, Any]


@attrs.frozen
class EntryInfo:
    """One line of ``oodsim cache ls``."""

    kind: str
    key: str
    path: Path
    size: int
    created: float
    describe: str


def default_root() -> Path:
    """``$OODSIM_CACHE`` or ``./cache``."""
    return Path(os.environ.get("OODSIM_CACHE", "cache"))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(folder: Path, skip: str = META) -> Iterator[Path]:
    """Every file under ``folder`` except the record named ``skip`` that lists them."""
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name != skip:
            yield path


def _checksums(folder: Path, skip: str = META) -> dict[str, str]:
    """sha256 by relative path of every file under ``folder`` (store entries and results)."""
    return {str(p.relative_to(folder)): _sha256(p) for p in _files(folder, skip)}


def _sizes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in _files(folder)}


def _meta_digest(meta: Mapping[str, Any]) -> str:
    """sha256 of a meta record without its own ``meta_sha256`` field, over the JSON form it has
    once written and read back (so tuples, paths and integer keys hash the same both ways)."""
    record = {k: v for k, v in meta.items() if k != META_DIGEST}
    text = json.dumps(json.loads(json.dumps(record, default=str)), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _meta_problem(meta: Mapping[str, Any]) -> str:
    """Why a meta record cannot be trusted ("" when it can). Entries written before meta files
    carried their own digest are accepted as they are."""
    if not isinstance(meta, dict):
        return "meta.json does not hold a record"
    expected = meta.get(META_DIGEST)
    if expected is not None and expected != _meta_digest(meta):
        return "meta.json was altered (its own checksum does not match)"
    return ""


def _write_arrays(folder: Path, arrays: Mapping[str, np.ndarray]) -> None:
    group = zarr.open_group(folder / ARRAYS, mode="w")
    for name, value in arrays.items():
        value = np.ascontiguousarray(value)
        group.create_array(name, data=value, chunks=value.shape or "auto")


def _read_arrays(folder: Path) -> dict[str, np.ndarray]:
    group = zarr.open_group(folder / ARRAYS, mode="r")
    return {name: np.asarray(group[name][...]) for name in group.array_keys()}


@attrs.define
class Store:
    """Artifacts by (kind, content key) under ``root``; see the module docstring."""

    root: Path = attrs.field(converter=lambda p: Path(p).expanduser())
    verify_on_read: bool = True
    events: list[tuple[str, str, str]] = attrs.field(factory=list)

    # ----------------------------------------------------------------- paths
    def path(self, kind: str, key: str) -> Path:
        return self.root / kind / key[:2] / key

    def has(self, kind: str, key: str) -> bool:
        """Whether a complete entry exists: its meta file (written last, then renamed) intact and
        every file at its recorded size. A cheap check (no hashing of data files) that catches
        truncation and edited or missing meta files; altered data bytes are caught by the
        checksums when the entry is read, by :meth:`verify_entry`, or by :meth:`verify`.

        An entry folder that fails the check is quarantined (warning, moved aside): left in
        place it would also block the rename that writes its replacement.
        """
        folder = self.path(kind, key)
        if not folder.is_dir():
            return False
        try:
            meta = json.loads((folder / META).read_text())
            problem = _meta_problem(meta)
            for name, size in meta.get("sizes", {}).items() if not problem else ():
                actual = (folder / name).stat().st_size
                if actual != size:
                    problem = f"{name} has {actual} bytes, not {size}"
                    break
        except FileNotFoundError as error:
            if not folder.is_dir():
                return False  # removed meanwhile (repaired by another process)
            problem = f"missing file: {error}"
        except (OSError, ValueError) as error:
            problem = f"unreadable meta.json: {error}"
        if problem:
            self._quarantine(kind, key, problem)
            return False
        return True

    def verify_entry(self, kind: str, key: str) -> bool:
        """Whether an entry exists and every file matches its checksum, without loading arrays
        or recording an event; a corrupt entry is quarantined like in :meth:`get`. For artifacts
        that a run depends on but does not read (a checkpoint whose outputs are cached)."""
        if not self.has(kind, key):
            return False
        folder = self.path(kind, key)
        try:
            problem = self._check(folder, json.loads((folder / META).read_text()))
        except (OSError, ValueError) as error:
            problem = str(error)
        if problem:
            self._quarantine(kind, key, problem)
            return False
        return True

    def ensure_writable(self) -> None:
        """Fail early, before any compute, when the cache root cannot take new entries."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            ignore = self.root / ".gitignore"
            if not ignore.exists():
                ignore.write_text(GITIGNORE)
            probe = self.root / f"{TMP_PREFIX}probe-{uuid.uuid4().hex}"
            probe.write_bytes(b"ok")
            probe.unlink()
        except OSError as error:
            raise StoreError(f"cache directory {self.root} is not writable: {error}") from None

    # ----------------------------------------------------------------- read
    def get(self, kind: str, key: str) -> Entry | None:
        """Load an entry, or None when it is missing or corrupt (corrupt ones are moved aside)."""
        folder = self.path(kind, key)
        if not (folder / META).is_file():
            return None
        try:
            meta = json.loads((folder / META).read_text())
            if self.verify_on_read:
                problem = self._check(folder, meta)
                if problem:
                    raise ValueError(problem)
            arrays = _read_arrays(folder)
        except (ValueError, OSError, KeyError) as error:
            self._quarantine(kind, key, str(error))
            return None
        self.events.append(("loaded", kind, key))
        return Entry(kind, key, arrays, meta)

    def meta(self, kind: str, key: str) -> dict[str, Any] | None:
        """An entry's meta data without loading its arrays."""
        try:
            return json.loads((self.path(kind, key) / META).read_text())
        except (OSError, ValueError):
            return None

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

    @contextlib.contextmanager
    def lock(self, kind: str, key: str, *, poll: float = 0.1) -> Iterator[None]:
        """Exclusive lock on computing (kind, key) across processes and hosts sharing the root.

        The lock file records host, pid and the process start time; a lock whose holder is gone
        (same host, process dead, a zombie, or pid reused) is stale and taken over, as is one on
        another host untouched for :data:`STALE_LOCK_SECONDS`.
        """
        path = self.root / "locks" / f"{kind}-{key}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        owner = _owner()
        while True:
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if _is_stale(path):
                    _break_lock(path)
                else:
                    time.sleep(poll)
                continue
            with os.fdopen(fd, "w") as handle:
                json.dump(owner, handle)
            break
        try:
            yield
        finally:
            try:
                if json.loads(path.read_text()) == owner:
                    path.unlink()
            except (OSError, ValueError):
                pass

    # ----------------------------------------------------------------- write
    def put(
        self,
        kind: str,
        key: str,
        arrays: Mapping[str, np.ndarray],
        meta: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write an entry atomically; if another writer got there first, keep theirs."""
        final = self.path(kind, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.parent / f"{TMP_PREFIX}{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        started = time.time()
        try:
            tmp.mkdir()
            _write_arrays(tmp, arrays)
            record = {
                "kind": kind,
                "key": key,
                "created": started,
                "write_seconds": round(time.time() - started, 4),
                "shapes": {name: list(np.shape(v)) for name, v in arrays.items()},
                **(meta or {}),
                "files": _checksums(tmp),
                "sizes": _sizes(tmp),
            }
            record[META_DIGEST] = _meta_digest(record)
            with (tmp / META).open("w") as handle:
                json.dump(record, handle, sort_keys=True, default=str)
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.rename(tmp, final)
            except OSError:
                # the target exists: a concurrent writer won (keep theirs), or it is a corrupt
                # leftover, which has() quarantines so that the rename can be tried once more
                if self.has(kind, key):
                    shutil.rmtree(tmp, ignore_errors=True)
                else:
                    os.rename(tmp, final)
        except BaseException as error:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(error, OSError):
                raise StoreError(
                    f"could not write {kind} entry to {final}: {error}. Nothing of it was kept; "
                    f"free space in (or fix permissions of) {self.root} and run again: "
                    "finished entries stay cached"
                ) from error
            raise
        self.events.append(("computed", kind, key))
        return final

    # ----------------------------------------------------------------- maintenance
    def _check(self, folder: Path, meta: Mapping[str, Any]) -> str:
        """What is wrong with an entry ("" when nothing): its meta record, then every checksum."""
        problem = _meta_problem(meta)
        if problem:
            return problem
        expected = meta.get("files", {})
        actual = _checksums(folder)
        if set(expected) != set(actual):
            return f"files differ from meta: missing {sorted(set(expected) - set(actual))}"
        bad = [name for name, digest in expected.items() if actual[name] != digest]
        return f"checksum mismatch in {bad}" if bad else ""

    def _quarantine(self, kind: str, key: str, reason: str) -> None:
        folder = self.path(kind, key)
        warnings.warn(
            f"corrupt cache entry {kind}/{key[:12]} ({reason}); it will be recomputed",
            CorruptEntryWarning,
            stacklevel=3,
        )
        aside = folder.parent / f"{TMP_PREFIX}corrupt-{key}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(folder, aside)
            shutil.rmtree(aside, ignore_errors=True)
        except OSError:
            pass

    def _folders(self) -> Iterator[Path]:
        """Every entry folder (``<kind>/<key[:2]>/<key>``), complete or not, temporaries aside."""
        if not self.root.is_dir():
            return
        for folder in sorted(self.root.glob("*/??/*")):
            if (
                folder.is_dir()
                and not folder.name.startswith(TMP_PREFIX)
                and folder.name[:2] == folder.parent.name
            ):
                yield folder

    def entries(self) -> Iterator[EntryInfo]:
        """Every entry folder under the root (one without a readable meta file is listed with an
        empty description, so that :meth:`verify` can report it)."""
        for folder in self._folders():
            try:
                meta = json.loads((folder / META).read_text())
                meta = meta if isinstance(meta, dict) else {}
            except (OSError, ValueError):
                meta = {}
            size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
            yield EntryInfo(
                kind=folder.parent.parent.name,
                key=folder.name,
                path=folder,
                size=size,
                created=float(meta.get("created", 0.0)),
                describe=str(meta.get("describe", "")),
            )

    def verify(self, *, repair: bool = False) -> list[tuple[EntryInfo, str]]:
        """Check every entry's meta file and checksums; with ``repair``, remove the corrupt ones."""
        problems = []
        for info in self.entries():
            try:
                meta = json.loads((info.path / META).read_text())
                problem = self._check(info.path, meta)
            except (OSError, ValueError) as error:
                problem = f"unreadable meta: {error}"
            if problem:
                problems.append((info, problem))
                if repair:
                    shutil.rmtree(info.path, ignore_errors=True)
        return problems

    def gc(self, *, older_than: float = 3600.0) -> list[Path]:
        """Remove temporary leftovers of interrupted writes older than ``older_than`` seconds."""
        removed = []
        if not self.root.is_dir():
            return removed
        for lock in self.stale_locks():
            _break_lock(lock)
            removed.append(lock)
        now = time.time()
        for path in self.root.glob(f"**/{TMP_PREFIX}*"):
            try:
                if now - path.stat().st_mtime >= older_than:
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
                    removed.append(path)
            except OSError:
                continue
        return removed

    def stale_locks(self) -> list[Path]:
        """Lock files whose holder is gone."""
        folder = self.root / "locks"
        return [p for p in sorted(folder.glob("*.lock")) if _is_stale(p)] if folder.is_dir() else []

    def counts(self) -> dict[str, dict[str, int]]:
        """``{"computed": {kind: n}, "loaded": {kind: n}}`` from this store's events."""
        return summarize_events(self.events)


#: A lock from another host is considered abandoned after this many seconds.
STALE_LOCK_SECONDS = 6 * 3600.0


def _proc_stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first); [] if none."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _start_time(pid: int) -> str | None:
    """A process's start time (Linux /proc), to tell a live holder from a reused pid."""
    fields = _proc_stat(pid)
    return fields[19] if len(fields) > 19 else None


def _owner() -> dict[str, object]:
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "start": _start_time(pid),
        "time": time.time(),
    }


def _is_stale(path: Path) -> bool:
    """Whether a lock file's holder is gone (see :meth:`Store.lock`)."""
    try:
        owner = json.loads(path.read_text())
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return False  # released meanwhile: just retry
    except (OSError, ValueError):
        # unreadable: a holder killed between create and write, unless it is being written now
        return time.time() - path.stat().st_mtime > 5.0 if path.exists() else False
    if owner.get("host") != socket.gethostname():
        return age > STALE_LOCK_SECONDS
    pid = int(owner.get("pid", -1))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    fields = _proc_stat(pid)
    if fields and fields[0] in ("Z", "X"):
        return True  # a zombie (dead, not yet reaped by its parent) holds nothing
    return owner.get("start") != _start_time(pid)


def _break_lock(path: Path) -> None:
    """Remove a stale lock. It is renamed aside first and checked again there: if a live
    process re-took the lock in between (another breaker was faster), it is put back."""
    aside = path.with_name(f"{path.name}.stale-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, aside)
    except OSError:
        return
    try:
        if not _is_stale(aside):
            os.link(aside, path)  # restore the live holder's lock (fails if a new one exists)
    except OSError:
        pass
    aside.unlink(missing_ok=True)


def summarize_events(events: list[tuple[str, str, str]]) -> dict[str, dict[str, int]]:
    """Count store events by action and kind."""
    summary: dict[str, dict[str, int]] = {"computed": {}, "loaded": {}}
    for action, kind, _ in events:
        summary[action][kind] = summary[action].get(kind, 0) + 1
    return summary
