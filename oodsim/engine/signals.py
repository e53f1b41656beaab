"""Ctrl-C, SIGTERM and SIGHUP while a local cluster starts or closes.

A terminal sends Ctrl-C to every process of the command. While oodsim's local cluster started
(about 3 s), a Ctrl-C left tracebacks after the resume line: the fork server, still importing
torch, died of it; and ``LocalCluster(...)``, interrupted inside its constructor, could not
close the workers it had begun to start (they printed tracebacks once the driver had gone, and
distributed's exit hook failed on them). A second Ctrl-C while a stopped run closed its cluster
cut the close short: the run took 12 s to exit instead of 2.

- :func:`shielded` starts a process that Ctrl-C and SIGHUP never reach, from its first
  instruction;
- :func:`held` handles a signal that arrives while a cluster starts once it has started,
  where it can be closed;
- :func:`holding` lets a run that stops close its cluster before another signal acts.

A signal held is not lost, and the third one acts at once, so a block that hangs can still be
stopped. Only signals with a Python handler are held, in the main thread (where Python runs
them); ignored signals stay ignored, and nothing changes in other threads.
"""

from __future__ import annotations

import contextlib
import signal
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


class Held:
    """Stopping signals caught from :meth:`hold` until :meth:`release`; after ``patience`` of
    them the handlers that were in place are back, so that the next one acts at once."""

    def __init__(self, patience: int) -> None:
        self.patience = patience
        self.handlers: dict[int, Handler] = {}  # the handlers in place before hold()
        self.caught: list[tuple[int, FrameType | None]] = []
        self.holding = False

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
        if len(self.caught) >= self.patience:
            self.release()

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
    """A :class:`Held` for a block that may stop (a run): once the block calls ``hold()``
    (after Ctrl-C, before it closes its cluster), the next stopping signal waits until the
    block has ended, when the block's own ``KeyboardInterrupt`` is on its way out anyway; the
    one after acts at once."""
    holder = Held(patience=1)
    try:
        yield holder
    finally:
        holder.release()
