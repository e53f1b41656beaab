"""Writing a report from a command: an interrupted report says so in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oodsim.errors import telling_interrupt


def write_report_telling(results: Any, out: Path, **options: Any) -> Path:
    """:func:`oodsim.report.write_report`; a Ctrl-C (or SIGTERM) goes on with the note that
    the folder holds an incomplete report (its marker says so), which ``oodsim`` prints."""
    # loaded by the command that needs it, so `oodsim --help` stays fast
    from oodsim.report import write_report

    with telling_interrupt(
        f"oodsim: interrupted: the report in {out} is incomplete; the same command writes it again"
    ):
        return write_report(results, out, **options)
