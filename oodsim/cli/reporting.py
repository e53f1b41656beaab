"""Writing a report from a command (``oodsim report``, ``oodsim run --report``): what it is
doing, on stderr, whenever :data:`QUIET_SECONDS` pass without a line (:class:`ReportProgress`),
and an interrupted report says so in one line."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from oodsim.errors import telling_interrupt
from oodsim.periodic import Periodic

#: The longest a report goes without a progress line (a quicker one prints none).
QUIET_SECONDS = 5.0


class ReportProgress(Periodic):
    """The progress of a report on ``stream``, given each step as it starts
    (``progress("drawing figure 3 of 6: distributions")``): nothing while the report is quick;
    once ``quiet`` seconds (default :data:`QUIET_SECONDS`) pass without a line, the step it is
    at, then every step as it starts, and the step again whenever ``quiet`` seconds pass
    without a line. A report that ends (or fails, with its one error line) within ``quiet``
    seconds prints nothing; ``quiet=0`` says every step (and a lasting one each second)."""

    thread_name = "oodsim-report-progress"
    #: Seconds between two looks at the time since the last line.
    TICK = 0.25

    def __init__(self, stream: TextIO, quiet: float | None = None) -> None:
        super().__init__(self.TICK)
        self.stream = stream
        self.quiet = QUIET_SECONDS if quiet is None else quiet
        self.started = self.said = time.monotonic()
        self.step = "starting"
        self.speaking = self.quiet <= 0  # the report took long enough to be told step by step
        self._lock = threading.Lock()  # steps come from the report's thread, ticks from ours

    def __call__(self, step: str) -> None:
        """The report starts ``step``."""
        with self._lock:
            self.step = step
            if self.speaking:
                self._say()

    def tick(self) -> None:
        with self._lock:
            repeat = self.quiet - self.TICK if self.quiet > 0 else 1.0  # quiet=0: each second
            if time.monotonic() - self.said >= repeat:
                self.speaking = True
                self._say()

    def _say(self) -> None:
        self.said = time.monotonic()
        elapsed = self.said - self.started
        print(f"oodsim: report ({elapsed:.0f} s): {self.step}", file=self.stream, flush=True)


def write_report_telling(
    results: Any, out: Path, *, progress: ReportProgress | None = None, **options: Any
) -> Path:
    """:func:`oodsim.report.write_report` telling ``progress`` its steps; a Ctrl-C (or
    SIGTERM) goes on with the note that the folder holds an incomplete report (its marker
    says so), which ``oodsim`` prints."""
    # loaded by the command that needs it, so `oodsim --help` stays fast
    from oodsim.report import write_report

    with telling_interrupt(
        f"oodsim: interrupted: the report in {out} is incomplete; the same command writes it again"
    ):
        return write_report(results, out, progress=progress, **options)


def report_after_run(results: Any, out: Path, quiet: bool, **options: Any) -> Path:
    """``oodsim run --report``: :func:`write_report_telling`, saying its progress on stderr
    unless ``quiet``."""
    if quiet:
        return write_report_telling(results, out, **options)
    with ReportProgress(sys.stderr) as progress:
        return write_report_telling(results, out, progress=progress, **options)


def cmd_report(args: argparse.Namespace) -> int:
    """``oodsim report RESULTS``: read the results, then write their report, saying what it
    does whenever :data:`QUIET_SECONDS` pass without a line (the imports and reading count)."""
    with ReportProgress(sys.stderr) as progress:
        progress(f"reading {args.results}")
        # loaded by the command that needs it, so `oodsim --help` stays fast
        from oodsim.report.folder import TABLE_FILES, named, report_folder
        from oodsim.results import is_remote, open_results

        # `oodsim report .` inside r.zarr: its name, r.zarr (a URL is read as it is)
        source = args.results if is_remote(args.results) else named(args.results)
        results = open_results(source, trust=args.trust)
        out = Path(args.out) if args.out else report_folder(source)
        path = write_report_telling(
            results,
            out,
            progress=progress,
            overwrite=args.overwrite,
            source=source,
            figures=args.figures,
            tables=tuple(dict.fromkeys(args.tables)),
        )
    print(f"report written to {path}")
    for name in dict.fromkeys(args.tables):
        print(f"{name} table written to {path.parent / TABLE_FILES[name]}")
    return 0
