"""Ctrl-C, SIGTERM and SIGHUP while a local cluster starts or closes.

A terminal sends Ctrl-C to every process of the command. While oodsim's local cluster started
(about 3 s), a Ctrl-C left tracebacks after the resume line: the fork server, still importing
torch, died of it; and ``LocalCluster(...)``, interrupted inside its constructor, could not
close the workers it had begun to start (they printed tracebacks once the driver had gone, and
distributed's exit hook failed on them). Once a stopped run has said how to resume, the user
who presses Ctrl-C again wants out: waiting for the cluster's close ignored that Ctrl-C.

- :func:`shielded` starts a process that Ctrl-C and SIGHUP never reach, from its first
  instruction;
- :func:`held` handles a signal that arrives while a cluster starts once it has started,
  where it can be closed;
- :func:`holding` ends a run at once when a stopping signal comes after the run said how to
  resume: it kills the run's local workers (:func:`ended_with`) and, in the ``oodsim``
  command (:func:`owned`), ends the process; in a caller's Python process the signal's own
  handler acts (Ctrl-C raises ``KeyboardInterrupt`` where the run's close was).

A signal held is not lost, and the third one acts at once, so a block that hangs can still be
stopped. Only signals with a Python handler are held, in the main thread (where Python runs
them); ignored signals stay ignored, and nothing changes in other threads.
"""

from __future__ import annotations

import contextlib
import multiprocessing.util
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

#: the signals that stop a run (Ctrl-C; SIGTERM and SIGHUP, which ``oodsim run`` turns into an
#: interrupt)
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

Handler = Callable[[int, FrameType | None], Any]


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


#: the signals a process started in :func:`shielded` never gets: Ctrl-C, and the SIGHUP that
#: the shell sends every process of the command when its terminal closes
SHIELDED = (signal.SIGINT, signal.SIGHUP)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Ctrl-C and SIGHUP never reach a process started in the block, and are not lost here:
    they are blocked in this thread for the block, and a process inherits blocked signals
    across ``exec`` (and the processes it forks), so one sent to it waits, undelivered, until
    the process ignores it (Python's fork server does for Ctrl-C once its imports are done) or
    forever. Here one that arrives meanwhile is handled as usual (by another thread's signal
    delivery, or at the block's end). Ctrl-C used to be ignored here for the block: a Ctrl-C
    in those milliseconds was lost, and a run under load went on computing (a flaky test
    showed it). A closed terminal's SIGHUP killed the fork server and the resource tracker,
    which printed tracebacks and could no longer clean up."""
    if not _main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set(SHIELDED))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


#: what a run that ends at once ends first (:func:`ended_with`): processes that would outlive
#: it, as a local cluster's workers
_ENDERS: list[Callable[[], None]] = []
#: whether this process is the ``oodsim`` command's (:func:`owned`)
_OWNED = threading.Event()


@contextlib.contextmanager
def ended_with(end: Callable[[], None]) -> Iterator[None]:
    """For the block, a run that ends at once (:func:`end_at_once`) calls ``end`` first: it
    ends what would outlive the run (a local cluster's worker processes). It runs in a signal
    handler of the main thread: it must neither wait nor take locks."""
    _ENDERS.append(end)
    try:
        yield
    finally:
        _ENDERS.remove(end)


@contextlib.contextmanager
def owned() -> Iterator[None]:
    """For the block, this process is the ``oodsim`` command's: a run that said how to resume
    and gets another stopping signal ends the process at once (:func:`end_at_once`), and so
    does any stopping signal after that run, until the process has exited."""
    _OWNED.set()
    try:
        yield
    finally:
        _OWNED.clear()


def end_at_once(signum: int, frame: FrameType | None, handler: Handler | None) -> None:
    """End a stopped run at once: what :func:`ended_with` registered is ended first; then
    the ``oodsim`` command's process (:func:`owned`) exits with ``128 + signum``, and in
    another process ``handler``, the signal's own, acts (Ctrl-C raises ``KeyboardInterrupt``
    in the caller's code, which may go on). Nothing is left to say or to save: the resume
    line is out, what it counts is in the store, and a store entry is whole or absent (a
    write in flight leaves a temporary sibling, a lock of a dead process is stale)."""
    for end in list(_ENDERS):
        with contextlib.suppress(Exception):
            end()
    if handler is not None and not _OWNED.is_set():
        handler(signum, frame)
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    # the semaphores of multiprocessing's queues (a nanny's), which its exit hook unlinks:
    # left, the resource tracker warns of each one after the process has gone
    with contextlib.suppress(Exception):
        multiprocessing.util._run_finalizers(0)  # type: ignore[attr-defined]
    os._exit(128 + signum)


def _exit_at_once(signum: int, frame: FrameType | None) -> None:
    end_at_once(signum, frame, None)


class Held:
    """Stopping signals caught from :meth:`hold` until :meth:`release`; after ``patience`` of
    them the handlers that were in place are back, so that the next one acts at once. Once
    :meth:`told` (the run said how to resume), one caught ends the run at once
    (:func:`end_at_once`)."""

    def __init__(self, patience: int) -> None:
        self.patience = patience
        self.handlers: dict[int, Handler] = {}  # the handlers in place before hold()
        self.caught: list[tuple[int, FrameType | None]] = []
        self.holding = False
        self.ending = False  # told(): a signal caught ends the run at once

    def hold(self) -> None:
        if self.holding or not _main_thread():
            return
        self.holding = True
        for signum in STOPPING:
            handler = signal.getsignal(signum)
            if callable(handler):
                self.handlers[signum] = handler
                signal.signal(signum, self._catch)

    def _catch(self, signum: int, frame: FrameType | None) -> None:
        self.caught.append((signum, frame))
        if self.ending:
            self.release()
            end_at_once(signum, frame, self.handlers[signum])
        elif len(self.caught) >= self.patience:
            self.release()

    def told(self) -> None:
        """The run has said how to resume (its resume line is out): a signal caught since
        :meth:`hold`, or the next one, ends it at once."""
        self.ending = True
        if self.holding and self.caught:
            self._catch(*self.caught.pop())

    def release(self) -> None:
        """The handlers in place before :meth:`hold`, back."""
        if self.holding:
            self.holding = False
            for signum, handler in self.handlers.items():
                signal.signal(signum, handler)

    def deliver(self) -> None:
        """Handle the first signal caught, with its handler from before :meth:`hold`."""
        if self.caught:
            signum, frame = self.caught[0]
            self.handlers[signum](signum, frame)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """A stopping signal that arrives in the block is handled as the block ends (its handler
    raises ``KeyboardInterrupt``: enter what must then be closed inside the block); one that
    arrives after two held ones acts at once. Dropped if the block raises."""
    holder = Held(patience=2)
    holder.hold()
    try:
        yield
    finally:
        holder.release()
    holder.deliver()


@contextlib.contextmanager
def holding() -> Iterator[Held]:
    """A :class:`Held` for a block that may stop (a run). The block calls ``hold()`` once
    interrupted, before it counts what is in the store, and ``told()`` once it has said so:
    another stopping signal then ends the run at once (:func:`end_at_once`), rather than wait
    for its cluster to close; one before ``told()`` waits for it, and the one after that acts
    at once (a count that hangs). In the ``oodsim`` command (:func:`owned`), every stopping
    signal after the block of a run so told ends the process at once: it is on its way out."""
    holder = Held(patience=2)
    try:
        yield holder
    finally:
        holder.release()
        if holder.ending and _OWNED.is_set() and _main_thread():
            for signum in holder.handlers:
                signal.signal(signum, _exit_at_once)
