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
  handler acts (Ctrl-C raises ``KeyboardInterrupt`` where the run's close was);
- in the ``oodsim`` command (:func:`owned`), the first stopping signal starts a clock: a run
  that has not ended :data:`GRACE` seconds later, whatever it waits for (a batch command that
  does not answer, a cluster that does not close), ends at once, and says what it leaves.

A signal held is not lost, and the third one acts at once, so a block that hangs can still be
stopped. Only signals with a Python handler are held, in the main thread (where Python runs
them); ignored signals stay ignored, and nothing changes in other threads.
"""

from __future__ import annotations

import contextlib
import functools
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
    delivery, or at the block's end): a Ctrl-C in those milliseconds is never lost. A closed
    terminal's SIGHUP never reaches the fork server or the resource tracker, which would
    print tracebacks and could not clean up."""
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
#: Seconds the ``oodsim`` command may take to end after its first stopping signal before it
#: ends at once (:func:`owned`): a stopped run says how to resume within a second and closes
#: its cluster within two; the rest leaves time to read the resume line, under 5 s in all.
GRACE = 4.0
#: the clock started by the first stopping signal of the command (:func:`_start_clock`)
_CLOCK: list[threading.Timer] = []
#: whether the command's run has said how to resume (:meth:`Held.told`)
_TOLD = threading.Event()
#: held while the command says how a stopped run ends (:func:`saying`); the clock takes it
#: for good, so that one line says it
_SAYING = threading.Lock()


@contextlib.contextmanager
def saying() -> Iterator[None]:
    """For the block, the command alone says how its stopped run ends (its resume line, an
    interrupt's notes): the clock's line (:func:`owned`) comes before or after it, never
    both, and once the clock has spoken the block waits for the process's end."""
    with _SAYING:
        yield


@contextlib.contextmanager
def ended_with(end: Callable[[], str | None]) -> Iterator[None]:
    """For the block, a run that ends at once (:func:`end_at_once`) calls ``end`` first: it
    ends what would outlive the run (a local cluster's worker processes, batch jobs) and may
    return a line that says what may still outlive it (printed before the process ends). It
    runs in a signal handler of the main thread or in the :data:`GRACE` clock's thread: it
    must neither wait nor take locks."""
    _ENDERS.append(end)
    try:
        yield
    finally:
        _ENDERS.remove(end)


@contextlib.contextmanager
def owned() -> Iterator[None]:
    """For the block, this process is the ``oodsim`` command's: a run that said how to resume
    and gets another stopping signal ends the process at once (:func:`end_at_once`), and so
    does any stopping signal after that run, until the process has exited. The first stopping
    signal in the block also starts a clock: if the block has not ended :data:`GRACE` seconds
    later, whatever it waits for, the process ends at once then."""
    _OWNED.set()
    _TOLD.clear()
    clocked: dict[int, Handler] = {}
    if _main_thread():
        for signum in STOPPING:
            handler = signal.getsignal(signum)
            if callable(handler):
                clocked[signum] = functools.partial(_clocked, handler)
                signal.signal(signum, clocked[signum])
    try:
        yield
    finally:
        while _CLOCK:
            _CLOCK.pop().cancel()
        for signum, wrapper in clocked.items():
            # unless the block put another in place (a told run's: end at once)
            if signal.getsignal(signum) is wrapper:
                signal.signal(signum, wrapper.args[0])
        _OWNED.clear()


def _clocked(handler: Handler, signum: int, frame: FrameType | None) -> Any:
    """``handler``, once the clock of :func:`owned` runs."""
    _start_clock(signum)
    return handler(signum, frame)


def _start_clock(signum: int) -> None:
    """In the ``oodsim`` command (:func:`owned`), start the clock that ends the process
    :data:`GRACE` seconds after its first stopping signal (once)."""
    if _OWNED.is_set() and not _CLOCK:
        clock = threading.Timer(GRACE, _overdue, args=(signum,))
        clock.name = "oodsim-stop-clock"
        clock.daemon = True
        _CLOCK.append(clock)
        clock.start()


def _overdue(signum: int) -> None:
    """The process got ``signum`` :data:`GRACE` seconds ago and is still here: end it, with
    the line that says so (the resume line, unless the run has said it)."""
    name = signal.Signals(signum).name
    _SAYING.acquire()  # for good: nothing else is said of the run (see saying())
    if _TOLD.is_set():
        line = f"oodsim: ended {GRACE:g} s after {name}, without waiting for its cluster to close"
    else:
        line = (
            f"oodsim: interrupted by {name}, and still waiting {GRACE:g} s later (for its "
            "cluster or a batch command): ended now; everything computed is in the store; "
            "run the same spec again to resume."
        )
    with contextlib.suppress(Exception):
        print(line, file=sys.stderr, flush=True)
    end_at_once(signum, None, None)


def end_at_once(signum: int, frame: FrameType | None, handler: Handler | None) -> None:
    """End a stopped run at once: what :func:`ended_with` registered is ended first; then
    the ``oodsim`` command's process (:func:`owned`) exits with ``128 + signum``, and in
    another process ``handler``, the signal's own, acts (Ctrl-C raises ``KeyboardInterrupt``
    in the caller's code, which may go on). Nothing is left to say or to save: the resume
    line is out, what it counts is in the store, and a store entry is whole or absent (a
    write in flight leaves a temporary sibling, a lock of a dead process is stale)."""
    for note in _end_all():
        with contextlib.suppress(Exception):
            print(note, file=sys.stderr)
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


def _end_all() -> list[str]:
    """Call what :func:`ended_with` registered; the lines they return (what may outlive the
    run). One that fails is passed over: the others still end what they hold."""
    notes = []
    for end in list(_ENDERS):
        with contextlib.suppress(Exception):
            notes.append(end())
    return [note for note in notes if note]


def _exit_at_once(signum: int, frame: FrameType | None) -> None:
    end_at_once(signum, frame, None)


class Held:
    """Stopping signals caught from :meth:`hold` until :meth:`release`; after ``patience`` of
    them the handlers that were in place are back, so that the next one acts at once. Once
    :meth:`told` (the run said how to resume), one caught ends the run at once
    (:func:`end_at_once`)."""

    def __init__(self, patience: int, clocked: bool = True) -> None:
        self.patience = patience
        self.clocked = clocked  # a signal caught starts the clock (else: at release)
        self.handlers: dict[int, Handler] = {}  # the handlers in place before hold()
        self.caught: list[tuple[int, FrameType | None]] = []
        self.holding = False
        self.ending = False  # told(): a signal caught ends the run at once
        self.clock: threading.Timer | None = None  # outside the command (see _catch)
        self.notes: list[str] = []  # what the enders said when the clock ran out
        self.overdue = False  # the clock ran out: what the block waited for was ended

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
        if self.clocked:
            _start_clock(signum)
            if not _OWNED.is_set() and self.clock is None:
                # outside the command, a block that holds a signal over GRACE seconds has what
                # it waits for ended (a batch command that does not answer), and then ends too
                self.clock = threading.Timer(GRACE, self._overdue)
                self.clock.daemon = True
                self.clock.start()
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
        _TOLD.set()
        if self.holding and self.caught:
            self._catch(*self.caught.pop())

    def release(self) -> None:
        """The handlers in place before :meth:`hold`, back."""
        if self.holding:
            self.holding = False
            for signum, handler in self.handlers.items():
                signal.signal(signum, handler)

    def _overdue(self) -> None:
        self.overdue = True
        self.notes += _end_all()

    def stop_clock(self) -> None:
        if self.clock is not None:
            self.clock.cancel()

    def deliver(self, cause: BaseException | None = None) -> None:
        """Handle the first signal caught, with its handler from before :meth:`hold`; what it
        raises carries the enders' notes (the clock ran out) and ``cause`` (what the block
        raised) as its cause."""
        if not self.caught:
            return
        signum, frame = self.caught[0]
        try:
            self.handlers[signum](signum, frame)
        except BaseException as error:
            for note in self.notes:
                error.add_note(note)
            if cause is not None:
                error.__cause__ = cause
            raise


@contextlib.contextmanager
def held(clocked: bool = True) -> Iterator[None]:
    """A stopping signal that arrives in the block is handled as the block ends (its handler
    raises ``KeyboardInterrupt``: enter what must then be closed inside the block); one that
    arrives after two held ones acts at once. Dropped if the block raises, unless the clock
    ran out: outside the ``oodsim`` command (which ends :data:`GRACE` seconds after the
    signal, :func:`owned`), a block still running :data:`GRACE` seconds after the signal has
    what it waits for ended (:func:`ended_with`: a hung batch command is killed), and the
    signal is then handled with the block's error as its cause, carrying what that left.
    ``clocked=False``: a block bounded on its own whose end must not be cut short (a local
    cluster's start: processes forked as the driver exits print tracebacks) starts the clock
    of a signal it held only as it ends."""
    holder = Held(patience=2, clocked=clocked)
    holder.hold()
    try:
        yield
    except Exception as error:
        holder.release()
        holder.stop_clock()
        if holder.overdue:
            holder.deliver(cause=error)
        raise
    finally:
        holder.release()
        holder.stop_clock()
        if not clocked and holder.caught:
            _start_clock(holder.caught[0][0])
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
