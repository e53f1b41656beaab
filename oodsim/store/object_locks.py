"""Locks on object storage: a lock object per entry being computed, created only if absent
(a conditional put), touched while held, taken over once its holder is gone.

A lock only saves work: the store's commit makes entries correct. Two processes that take
over one stale lock at once may both compute the entry; one copy stays. A holder is gone
when it ran on this host and its process has ended, or when it has not touched its lock for
:data:`~oodsim.store.locks.STALE_LOCK_SECONDS` (:func:`~oodsim.store.locks.holder_gone`).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

from oodsim.periodic import Periodic
from oodsim.progress_notes import note_progress
from oodsim.store.fs import parse_json
from oodsim.store.locks import (
    LOCK_NOTICE_SECONDS,
    STALE_LOCK_SECONDS,
    TOUCH_SECONDS,
    holder_gone,
    owner,
)


def stale(fs: Any, path: str) -> tuple[str, bool]:
    """(why the lock object at ``path`` may be taken over, whether it is no lock at all);
    ("", False) while its holder lives, or once it is released."""
    try:
        record = parse_json(fs.cat_file(path), "lock")
    except FileNotFoundError:
        return "", False  # released meanwhile
    except ValueError as error:
        return f"unreadable lock ({error})", True
    touched = record.get("time") if isinstance(record, dict) else None
    age = abs(time.time() - touched) if isinstance(touched, (int, float)) else 0.0
    return holder_gone(record, age)


@contextlib.contextmanager
def hold(fs: Any, path: str, what: str, where: str, poll: float = 0.5) -> Iterator[None]:
    """Hold the lock object at ``path`` (on computing ``what``; ``where``: its URL, for the
    notice of a wait) until the context ends, touching it meanwhile."""
    record = owner()
    told = time.monotonic()
    while True:
        try:
            fs.pipe_file(path, json.dumps(record).encode(), mode="create")
            break
        except FileExistsError:
            if stale(fs, path)[0]:
                with contextlib.suppress(FileNotFoundError):
                    fs.rm_file(path)  # two takers may both remove it: the work is done twice
                continue
            if time.monotonic() - told >= LOCK_NOTICE_SECONDS:
                told = time.monotonic()
                note_progress(
                    f"waiting for {what}: another process computes it (its lock {where} is "
                    f"taken over once untouched for {STALE_LOCK_SECONDS:.0f} s)"
                )
            time.sleep(poll)
    try:
        with Toucher(fs, path, record):
            yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            held = parse_json(fs.cat_file(path), "lock")
            ours = isinstance(held, dict) and held.get("pid") == record["pid"]
            if ours and held.get("host") == record["host"]:
                fs.rm_file(path)


class Toucher(Periodic):
    """Rewrites a held lock object with the time every :data:`TOUCH_SECONDS`."""

    thread_name = "oodsim-lock-touch"

    def __init__(self, fs: Any, path: str, record: dict[str, Any]) -> None:
        self.fs, self.path, self.record = fs, path, record
        super().__init__(TOUCH_SECONDS)

    def tick(self) -> None:
        with contextlib.suppress(Exception):  # gone or unreachable: the holder finds out
            self.fs.pipe_file(self.path, json.dumps({**self.record, "time": time.time()}).encode())
