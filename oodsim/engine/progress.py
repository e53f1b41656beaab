"""The status line of a run: done/total, cached, excluded, failed, elapsed, what is running,
time left.

A run says what it does from its first seconds: until seeds finish, the progress notes of the
work (:mod:`oodsim.progress_notes`: "simulation 3: training, epoch 4/30") fill the line. A time
left is shown only once it means something: after every worker finished two seeds, with a
range meant to hold the true time left nine times in ten (:mod:`oodsim.engine.time_left`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from oodsim.engine.time_left import HISTORY, time_left
from oodsim.environment import read
from oodsim.errors import tell_interrupt
from oodsim.progress_notes import describe

#: seconds without any worker before the status line says so
NO_WORKER_NOTICE = 10.0
#: seconds without a progress note or a landed seed, while work is pending, before it says so
QUIET_NOTICE = 120.0
#: seconds before ``interval`` that a line naming what the run does is shown again (with a
#: watcher that asks every half second, a line comes at least every ``interval`` seconds)
KEEP_ALIVE_EARLY = 1.0
#: the environment variable naming a JSON file where a run that ends records when each of its
#: seeds landed (``benchmarks/progress.py`` records and replays them)
RECORD_ENV = "OODSIM_RECORD_LANDINGS"


class Progress:
    """Status of a run, printed to ``stream`` (None: silent).

    A silent run still tells a stall on ``notices``, once each (no worker for a while, a
    scheduler that does not answer): ``oodsim run --quiet`` on a queue that never gives a
    worker says so instead of waiting for hours without a word.

    On a terminal one line is rewritten in place; in logs a line is printed at most every
    ``interval`` seconds and at the end. ``slots`` says how many seeds run at once (the
    cluster's threads), for the time left; it is asked only from the driver's thread, and never
    while the lock that progress notes take is held.
    """

    def __init__(
        self,
        total: int,
        stream: TextIO | None,
        interval: float = 5.0,
        unit: str = "seeds",
        slots: Callable[[], int] = lambda: 1,
        notices: TextIO | None = None,
    ) -> None:
        self.total, self.stream, self.interval, self.unit = total, stream, interval, unit
        self.notices = notices
        self.noticed = False  # a silent run told the stall it is in
        self.slots = slots
        self.done = self.cached = self.failed = self.excluded = 0
        self.started = time.perf_counter()
        self.last = -math.inf  # when a line was last printed
        self.finished: list[float] = []  # when each computed (not cached) seed landed
        # with RECORD_ENV, every landing: (seconds since the start, cached, failed, slots)
        self.landings: list[tuple[float, bool, bool, int]] = []
        self.record: Path | None = read(RECORD_ENV)
        self.eta = ""
        self.working = ""  # the latest progress note (or notice), in words
        self.workerless = False  # the cluster has no worker (said by no_worker)
        self.unheard = False  # the scheduler does not answer (said by unanswered)
        self.news = self.started  # when a progress note or a seed last arrived
        self.latest = ""  # the latest progress note, in words
        self.ended = False
        self.width = 0  # length of the line on a terminal, to blank what a shorter one leaves
        self.tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        self._lock = threading.Lock()  # progress notes arrive on the Dask client's thread

    def update(self, failed: bool, cached: bool, excluded: bool = False) -> None:
        """One seed landed (scored from the cache, or computed): failed, or scored and
        excluded by the spec's rule (a degenerate classifier), or neither."""
        now = time.perf_counter()
        # asked before the lock: the cluster answers on the thread that delivers progress notes,
        # which may be waiting for the lock
        slots = self.slots() if self.stream is not None or self.record else 1
        with self._lock:
            self.done += 1
            self.cached += cached
            self.failed += failed
            self.excluded += excluded
            if not cached:
                self.finished.append(now)
            if self.record:
                self.landings.append((round(now - self.started, 3), cached, failed, slots))
                if self.done == self.total:
                    self._write_record()
            self.news, self.working, self.workerless, self.unheard = now, "", False, False
            self.noticed = False
            self.eta = self._time_left(slots) if self.stream is not None else ""
            self._show(now, final=self.done == self.total)

    def heard(self, message: dict[str, Any]) -> None:
        """A progress note of the work (see :mod:`oodsim.progress_notes`)."""
        now = time.perf_counter()
        with self._lock:
            if self.ended or self.done == self.total:
                return
            self.news, self.workerless, self.unheard = now, False, False
            self.working = self.latest = describe(message)
            self._show(now)

    def waiting(self) -> None:
        """Asked every half second while the run goes on (:meth:`watching`): the line, naming
        what the run does (a cluster's start, a progress note), is shown again with the time that
        went by (on a terminal every half second, in logs at least every ``interval`` seconds),
        so that a long step is no silent stretch. After :data:`QUIET_NOTICE` seconds without a
        progress note or a seed, it says so. A stopped (SIGSTOP) worker held a run's other work
        back, and its status line stood still for 8.5 minutes (until distributed's
        ``worker-ttl`` had the worker restarted and the run went on; oodsim's local cluster now
        has a silent worker restarted after 60 to 120 s: ``LOCAL_WORKER_TTL`` of
        :mod:`oodsim.clusters.cluster`)."""
        now = time.perf_counter()
        with self._lock:
            quiet = now - self.news
            if self.ended or self.workerless or self.unheard or quiet < QUIET_NOTICE:
                if self.working and not self.ended:  # (else the line says so: no_worker...)
                    self._show(now, early=KEEP_ALIVE_EARLY)
                return
            last = f" (the last: {self.latest})" if self.latest else ""
            self.working = (
                f"nothing heard from the work for {clock(quiet)}{last}; a long step sends no "
                "progress note, but the work may also be stuck (a stopped worker, a file system "
                "that hangs)"
            )
            self._show(now)

    def no_worker(self, seconds: float, hint: str = "") -> None:
        """The cluster has had no worker for ``seconds`` (0: it has workers again): say so on
        the status line, with ``hint``, where to look (a job cluster's: what its batch system
        says of its jobs, :mod:`oodsim.clusters.job_watch`)."""
        now = time.perf_counter()
        with self._lock:
            self.workerless = seconds >= NO_WORKER_NOTICE  # 0: the workers are there
            if self.ended or not self.workerless:
                self.noticed = self.noticed and self.unheard
                return
            why = hint or "the cluster's workers have not connected"
            self.working = f"no worker yet ({clock(seconds)}): {why}"
            self._show(now)
            self._notice()

    def unanswered(self, seconds: float, limit: float) -> None:
        """The scheduler has not answered for ``seconds`` (0: it answers again), and the run
        stops after ``limit``: say so, rather than that the work may be stuck (a stopped
        scheduler was blamed on the work, with a line repeated forever)."""
        now = time.perf_counter()
        with self._lock:
            if self.unheard and seconds <= 0:  # it answers again: the work's news is back
                self.working = self.latest
            self.unheard = seconds > 0
            if self.ended or not self.unheard:
                self.noticed = self.noticed and self.workerless
                return
            self.working = (
                f"the Dask scheduler has not answered for {clock(seconds)} (stopped or hung, or "
                f"a network that drops its packets); the run stops after {clock(limit)} without "
                "an answer"
            )
            self._show(now)
            self._notice()

    def stopped(self, reason: str) -> None:
        """End the status line early (a stopping rule fired or the run was interrupted)."""
        with self._lock:
            self.ended = True
            if self.stream is not None:
                start = "\n" if self.tty and self.width else ""
                print(f"{start}oodsim: {reason}", file=self.stream, flush=True)

    def interrupted(self, error: BaseException, reason: str) -> None:
        """Say once what an interrupt (``error``) left: on the status line, else (a silent
        run) as the interrupt's note, which ``oodsim run --quiet`` prints and a traceback
        shows (:func:`~oodsim.errors.tell_interrupt`)."""
        if self.stream is None:
            tell_interrupt(error, f"oodsim: {reason}")
        self.stopped(reason)

    @contextlib.contextmanager
    def watching(self, every: float = 0.5) -> Iterator[None]:
        """For the block, a thread asks :meth:`waiting` every ``every`` seconds: a silent
        stretch is told wherever it is (seeds scored here from the cache, work on a cluster,
        an in-process task), not only while the run waits for a cluster's futures. Nothing
        starts for a silent run."""
        if self.stream is None:
            yield
            return
        done = threading.Event()

        def watch() -> None:
            while not done.wait(every):
                self.waiting()

        watcher = threading.Thread(target=watch, name="oodsim-progress", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            done.set()
            watcher.join()

    @contextlib.contextmanager
    def telling(self, reason: str) -> Iterator[None]:
        """The block's interrupt is told with ``reason`` (:meth:`interrupted`)."""
        try:
            yield
        except KeyboardInterrupt as error:
            self.interrupted(error, reason)
            raise

    def _write_record(self) -> None:
        """Write the landings to the file named by :data:`RECORD_ENV` (a run that ended)."""
        record = {
            "total": self.total,
            "unit": self.unit,
            "cpus": os.cpu_count(),
            "load": [round(x, 2) for x in os.getloadavg()],
            "landings": [list(landing) for landing in self.landings],
        }
        Path(self.record).write_text(json.dumps(record) + "\n", encoding="utf-8")

    def _notice(self) -> None:
        """In a silent run, tell the stall on the status line's place once, on ``notices``."""
        if self.stream is None and self.notices is not None and not self.noticed:
            self.noticed = True
            print(f"oodsim: {self.working}", file=self.notices, flush=True)

    def _show(self, now: float, final: bool = False, early: float = 0.0) -> None:
        """Print the line, unless one was printed less than a second (on a terminal) or
        ``interval`` seconds (in logs) ago, less ``early`` (at most half of that)."""
        if self.stream is None or self.ended:
            return
        limit = 1.0 if self.tty else self.interval
        if not (final or now - self.last >= limit - min(early, limit / 2)):
            return
        self.last = now
        failed = f", {self.excluded} excluded" if self.excluded else ""
        failed += f", {self.failed} failed" if self.failed else ""
        working = f"; {self.working}" if self.working and not final else ""
        line = (
            f"oodsim: {self.done}/{self.total} {self.unit} ({self.cached} cached{failed}) "
            f"in {clock(now - self.started)}{'' if final else self.eta}{working}"
        )
        if self.tty:
            blank = " " * max(0, self.width - len(line))
            self.width = 0 if final else len(line)
            print(f"\r{line}{blank}", end="\n" if final else "", file=self.stream, flush=True)
        else:
            print(line, file=self.stream, flush=True)
        if final:
            self.ended = True

    def _time_left(self, slots: int) -> str:
        """ ", ~m:ss left (low–high)" once each slot finished ``ROUNDS_BEFORE_ESTIMATE``
        seeds (:func:`~oodsim.engine.time_left.time_left`: a prediction interval), else ""."""
        computed = [when - self.started for when in self.finished[-HISTORY:]]
        estimate = time_left(computed, self.done, self.total, slots, len(self.finished))
        if estimate is None:
            return ""
        low, middle, high = estimate.low, estimate.middle, estimate.high
        return f", ~{clock(middle)} left ({clock(low)}–{clock(high)})"


def clock(seconds: float) -> str:
    """Seconds as m:ss (h:mm:ss from an hour)."""
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


def interrupted_message(stored: int, reached: int, total: int, unit: str) -> str:
    """What an interrupted run says: how many of the seeds it reached have everything in the
    store (seeds beyond them are not planned to count them, :mod:`oodsim.engine.window`)."""
    among = f"{total}" if reached >= total else f"the first {reached} of {total}"
    return (
        f"interrupted; {stored} of {among} {unit} have everything in the store; "
        "run the same spec again to resume."
    )
