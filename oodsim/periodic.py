"""Work repeated in the background while a ``with`` block runs: a held lock's touch, the
keeper of a cluster's batch jobs."""

from __future__ import annotations

import threading
from typing import Self


class Periodic:
    """Calls :meth:`tick` every ``interval`` seconds from a daemon thread, from entering the
    ``with`` block until leaving it (the thread is stopped and joined on exit)."""

    #: The thread's name (shown by debuggers and ``py-spy``).
    thread_name = "oodsim-periodic"
    #: Seconds the exit waits for a round in progress (None: until it ends); the daemon thread
    #: ends by itself after it.
    join_timeout: float | None = None

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)

    def tick(self) -> None:
        """One round of the work; subclasses define it."""
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.tick()

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(self.join_timeout)
