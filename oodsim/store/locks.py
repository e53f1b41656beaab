"""Lock files of the store: who holds the lock on computing a key, and when a lock is stale.

``<root>/locks/<kind>-<key>.lock`` is a regular file holding one JSON record: the holder's
``host``, ``pid``, process ``start`` time (from Linux ``/proc``, to tell a live holder from a
reused pid) and ``time``; while it computes, its holder touches the file every
:data:`TOUCH_SECONDS` (:class:`LockToucher`). A lock is *stale*, and is taken over, when

- its holder is gone: same host and the process is dead, a zombie, or its pid was reused by
  another process; or it is from another host and untouched for :data:`STALE_LOCK_SECONDS`
  (ten missed touches: the holder's job was preempted or its node crashed);
- it is not a lock at all: a folder, a link or a FIFO where the file belongs, a record of the
  wrong form (not an object, no host, a pid that is not a positive integer, ...), or a file that
  is not JSON and untouched for :data:`WRITE_GRACE_SECONDS` (a holder writes its record right
  after creating the file, so an unreadable young file may be one being written).

Nothing here follows a link or opens anything but a regular file, and nothing raises on a
malformed lock: :func:`why_stale` returns the reason as text.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from oodsim.errors import StoreError
from oodsim.periodic import Periodic
from oodsim.store.fs import NotJSON, described, read_json, remove, what_is

#: A holder touches its lock file this often (:class:`LockToucher`), so that other hosts can
#: tell a live holder from a dead one by the file's age.
TOUCH_SECONDS = 20.0
#: A lock from another host untouched for this long is abandoned (its holder missed ten
#: touches: a preempted job, a crashed node) and is taken over.
STALE_LOCK_SECONDS = 10 * TOUCH_SECONDS
#: An unreadable lock file younger than this may be one whose holder is writing it.
WRITE_GRACE_SECONDS = 5.0
#: A lock record is about 100 bytes; anything much larger is not one.
LOCK_LIMIT = 1 << 16
#: seconds between two notices of a run that waits for another's lock
LOCK_NOTICE_SECONDS = 30.0
#: Name part of a lock renamed aside while it is broken (``<lock>.stale-<id>``).
STALE_MARK = ".stale-"
_MAX_PID = 1 << 22  # Linux's largest pid_max


def proc_stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first: then the
    parent's pid, ..., the start time at index 19); [] if none (Linux only)."""
    try:  # the name, in bytes, may be any (not UTF-8): the fields after it are ASCII
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].decode().split()
    except (OSError, IndexError):
        return []


def _start_time(pid: int) -> str | None:
    """A process's start time (Linux /proc), to tell a live holder from a reused pid."""
    fields = proc_stat(pid)
    return fields[19] if len(fields) > 19 else None


def owner() -> dict[str, object]:
    """The lock record of this process."""
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "start": _start_time(pid),
        "time": time.time(),
    }


def record_problem(record: Any) -> str:
    """Why a parsed lock file is not a lock record ("" when it is one)."""
    if not isinstance(record, dict):
        return f"it holds {type(record).__name__}, not a lock record"
    host, pid, start = record.get("host"), record.get("pid"), record.get("start")
    if not isinstance(host, str) or not host:
        return f"its host is {host!r}, not a host name"
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= _MAX_PID:
        return f"its pid is {pid!r}, not a process id"
    if start is not None and not isinstance(start, str):
        return f"its start time is {start!r}, not a /proc start time"
    if not isinstance(record.get("time", 0.0), (int, float)):
        return f"its time is {record.get('time')!r}, not a number"
    return ""


def _state(path: Path) -> tuple[str, bool]:
    """(why the lock at ``path`` may be taken over, whether that is because it is no lock at
    all); ("", False) when it is live, being written, or already gone."""
    found = what_is(path)
    if found == "missing":
        return "", False  # released meanwhile: just retry
    if found != "file":
        return f"{described(found)} where a lock file belongs", True
    try:
        age = abs(time.time() - os.lstat(path).st_mtime)  # a future mtime is no younger
        record = read_json(path, LOCK_LIMIT)
    except FileNotFoundError:
        return "", False
    except (OSError, ValueError) as error:
        if isinstance(error, NotJSON) and age <= WRITE_GRACE_SECONDS:
            return "", False  # maybe a holder that has created the file and is writing it
        return f"unreadable lock file ({error})", True
    return holder_gone(record, age)


def holder_gone(record: Any, age: float) -> tuple[str, bool]:
    """(why a lock holding ``record``, untouched for ``age`` seconds, may be taken over,
    whether that is because it is no lock record at all); ("", False) while its holder lives:
    on this host, its process runs (and is the one that took the lock); on another, it touched
    the lock within :data:`STALE_LOCK_SECONDS`."""
    problem = record_problem(record)
    if problem:
        return f"not an oodsim lock: {problem}", True
    if record["host"] != socket.gethostname():
        if age > STALE_LOCK_SECONDS:
            return f"held by host {record['host']} and untouched for {age:.0f} s", False
        return "", False
    pid = record["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return f"its holder (pid {pid}) is gone", False
    except PermissionError:
        pass  # alive, another user's
    fields = proc_stat(pid)
    if fields and fields[0] in ("Z", "X"):
        return f"its holder (pid {pid}) has exited", False  # a zombie holds nothing
    if record.get("start") != _start_time(pid):
        return f"pid {pid} now belongs to another process", False
    if age > STALE_LOCK_SECONDS:  # a live holder touches it every TOUCH_SECONDS
        return f"its holder (pid {pid}) has not touched it for {age:.0f} s (stopped?)", False
    return "", False


def holder(path: Path) -> str:
    """Who holds the lock at ``path``, in words: "pid 12 on host a, touched 40 s ago"."""
    try:
        age = abs(time.time() - os.lstat(path).st_mtime)
        record = read_json(path, LOCK_LIMIT)
    except (OSError, ValueError):
        return "a holder being written"
    if record_problem(record):
        return "an unreadable holder"
    return f"pid {record['pid']} on host {record['host']}, touched {age:.0f} s ago"


def why_stale(path: Path) -> str:
    """Why the lock at ``path`` may be taken over (its holder is gone, or it is no lock at
    all); "" when it is live (or being written, or already gone)."""
    return _state(path)[0]


def lock_problem(path: Path) -> str:
    """Why ``path`` is not a lock at all (a folder, a link, a wrong record, unreadable), ""
    when it is one (live or stale) or is being written."""
    reason, malformed = _state(path)
    return reason if malformed else ""


def break_lock(path: Path) -> None:
    """Remove a stale lock. It is renamed aside first and checked again there: if a live
    process re-took the lock in between (another breaker was faster), it is put back.
    Raises ``OSError`` when the lock cannot be moved (a read-only locks folder)."""
    aside = path.with_name(f"{path.name}{STALE_MARK}{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return  # released or broken meanwhile
    with contextlib.suppress(OSError):
        if not why_stale(aside):
            os.link(aside, path)  # restore the live holder's lock (fails if a new one exists)
    with contextlib.suppress(OSError):  # a leftover is harmless: `oodsim cache gc` removes it
        remove(aside)


class LockToucher(Periodic):
    """Touches a held lock file every :data:`TOUCH_SECONDS` from a daemon thread, while
    its holder computes (minutes of training), so that a waiter on another host sees it alive
    and takes it over only once the touches stop (the holder's job was preempted, its node
    crashed)."""

    thread_name = "oodsim-lock-touch"

    def __init__(self, path: Path, interval: float = TOUCH_SECONDS) -> None:
        self.path = path
        super().__init__(interval)

    def tick(self) -> None:
        with contextlib.suppress(OSError):  # gone or taken over: the holder finds out
            os.utime(self.path, follow_symlinks=False)


@contextlib.contextmanager
def hold(
    path: Path,
    folder: Callable[[], Path],
    waiting: Callable[[Path], None],
    *,
    poll: float = 0.1,
) -> Iterator[None]:
    """Hold the lock file ``path`` (in the locks folder ``folder()`` makes) until the context
    ends, touching it meanwhile (:class:`LockToucher`). A live holder's lock is waited for
    (``waiting(path)`` every :data:`LOCK_NOTICE_SECONDS`), a stale one taken over. A lock that
    cannot be created or taken over raises :class:`~oodsim.errors.StoreError` naming the path
    and the fix; it never spins."""
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
                    waiting(path)
                time.sleep(poll)
                continue
            try:
                break_lock(path)
            except OSError as error:
                raise StoreError(
                    f"the lock {path} is stale ({reason}) but cannot be removed: "
                    f"{error.strerror}. Remove it (rm -rf '{path}') or make {path.parent} "
                    "writable, then run again"
                ) from None
            continue
        except FileNotFoundError:  # the locks folder was removed meanwhile
            folder()
            continue
        except OSError as error:
            raise StoreError(
                f"cannot create the lock file {path}: {error.strerror}; make {path.parent} "
                "writable (or free space there), then run again"
            ) from None
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(record, handle)
        except OSError as error:
            path.unlink(missing_ok=True)
            raise StoreError(
                f"cannot write the lock file {path}: {error.strerror}; free space in (or "
                f"fix permissions of) {path.parent}, then run again"
            ) from None
        break
    try:
        with LockToucher(path):
            yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            if read_json(path, LOCK_LIMIT) == record:
                path.unlink()
