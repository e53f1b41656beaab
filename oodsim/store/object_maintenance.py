"""Maintenance of a store on object storage: what ``oodsim cache verify --repair`` and ``gc``
remove beside corrupt entries (malformed and stale locks, files that no record names).

:class:`ObjectMaintenance` is a mixin of :class:`oodsim.store.objects.ObjectBackend`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from oodsim.store.layout import LOCKS, META, EntryInfo, version_of
from oodsim.store.locks import STALE_LOCK_SECONDS
from oodsim.store.maintenance import Collected


class ObjectMaintenance:
    """``layout_problems`` and ``gc``, for a class with ``fs``, ``root``, ``location``,
    ``place``, ``_entry``, ``_lock_path``, ``_locks``, ``_stale`` and ``_entry_objects``."""

    fs: Any
    root: str
    location: str
    place: Callable[[str, str], str]
    _entry: Callable[[str, str], str]
    _lock_path: Callable[[str, str], str]
    _locks: Callable[[], list[tuple[str, tuple[str, bool]]]]
    _stale: Callable[[str], tuple[str, bool]]
    _entry_objects: Callable[[], Iterator[tuple[str, str, dict[str, int]]]]

    def layout_problems(self, *, repair: bool) -> list[tuple[EntryInfo, str]]:
        problems = []
        for path, (reason, malformed) in self._locks():
            if reason and (malformed or repair):
                if repair:
                    with contextlib.suppress(FileNotFoundError):
                        self.fs.rm_file(path)
                if malformed:
                    name = path.rsplit("/", 1)[1]
                    info = EntryInfo(LOCKS, name, f"{self.location}/{LOCKS}/{name}", 0, 0.0, "")
                    problems.append((info, reason))
        return problems

    def gc(self, *, older_than: float) -> Collected:
        collected = Collected()
        for path, (reason, _) in self._locks():
            if reason:
                self.fs.rm_file(path)
                collected.removed.append(f"{self.location}/{path[len(self.root) + 1 :]}")
        wait = max(older_than, STALE_LOCK_SECONDS)
        for kind, key, objects in self._entry_objects():
            current = self._current_version(kind, key)
            for version in sorted({name.split("/")[0] for name in objects if "/" in name}):
                if version == current or self._young(f"{self._entry(kind, key)}/{version}", wait):
                    continue
                if not self._stale(self._lock_path(kind, key))[0] and self.fs.exists(
                    self._lock_path(kind, key)
                ):
                    continue  # its writer is at work
                self.fs.rm(f"{self._entry(kind, key)}/{version}", recursive=True)
                collected.removed.append(f"{self.place(kind, key)}/{version}")
        return collected

    def _current_version(self, kind: str, key: str) -> str | None:
        try:
            return version_of(self.fs.cat_file(f"{self._entry(kind, key)}/{META}"))
        except FileNotFoundError:
            return None

    def _young(self, folder: str, seconds: float) -> bool:
        """Whether any object in ``folder`` was written less than ``seconds`` ago."""
        for info in self.fs.find(folder, detail=True).values():
            modified = info.get("LastModified") or info.get("mtime") or info.get("created")
            if modified is None:
                return False
            stamp = modified.timestamp() if hasattr(modified, "timestamp") else float(modified)
            if time.time() - stamp < seconds:
                return True
        return False
