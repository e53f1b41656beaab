"""Writing a report from a command: an interrupted report says so in one line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def write_report_telling(results: Any, out: Path, **options: Any) -> Path:
    """:func:`oodsim.report.write_report`; on Ctrl-C (or SIGTERM), one line saying that the
    folder holds an incomplete report (its marker says so) before the interrupt goes on."""
    # loaded by the command that needs it, so `oodsim --help` stays fast
    from oodsim.report import write_report

    try:
        return write_report(results, out, **options)
    except KeyboardInterrupt:
        print(
            f"interrupted: the report in {out} is incomplete; the same command writes it again",
            file=sys.stderr,
        )
        raise
