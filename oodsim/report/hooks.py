"""What a protocol's results add to, or change in, the report every protocol gets.

One record per protocol name (:class:`ReportHooks`): the table ``oodsim run`` prints after a
run, whether the seeds compare methods (win probabilities and variance sources mean nothing
when every seed resamples one fixed test set, as ImageNet-O's do) and extra files for the
report folder (severity's per-level views). A protocol without a record gets the generic
ones; a registered protocol may give its own with :func:`register_report`. The CLI and
:func:`~oodsim.report.write_report` ask :func:`report_hooks`, never for a protocol by name.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs
import xarray as xr

from oodsim.report.tables import format_summary_table

#: ``table(results, metric) -> str``: what ``oodsim run`` prints after a run
Table = Callable[[xr.Dataset, str], str]
#: ``files(results, folder, metric, figures) -> (paths written, summary.md lines)``
Files = Callable[[xr.Dataset, Path, str, bool], tuple[list[Path], list[str]]]


@attrs.frozen
class ReportHooks:
    """The protocol-specific parts of a report (see the module docstring)."""

    table: Table
    compares_methods: bool = True
    files: Files | None = None


def _summary_table(results: xr.Dataset, metric: str) -> str:
    return format_summary_table(results)


def _level_table(results: xr.Dataset, metric: str) -> str:
    # severity results only
    from oodsim.report.severity import format_level_table

    return format_level_table(results, metric)


def _bootstrap_table(results: xr.Dataset, metric: str) -> str:
    """ImageNet-O seeds resample one fixed test set: the full set's score, and the percentile
    interval of the replicates, labelled as test-set sampling."""
    from oodsim.report.tables import bootstrap_table

    return bootstrap_table(results)


def _severity_files(
    results: xr.Dataset, folder: Path, metric: str, figures: bool
) -> tuple[list[Path], list[str]]:
    # severity results only
    from oodsim.report.severity import write_severity_files

    written = write_severity_files(results, folder / "severity", metric=metric, figures=figures)
    lines = [
        "",
        "## Severity levels",
        "",
        f"See [{written[-1].name}](severity/{written[-1].name}).",
    ]
    return written, lines


GENERIC = ReportHooks(_summary_table)
_HOOKS: dict[str, ReportHooks] = {
    "severity": ReportHooks(_level_table, files=_severity_files),
    "imagenet_o": ReportHooks(_bootstrap_table, compares_methods=False),
}


def register_report(
    protocol: str,
    *,
    table: Table | None = None,
    compares_methods: bool = True,
    files: Files | None = None,
    replace: bool = False,
) -> ReportHooks:
    """Give the results of protocol ``protocol`` their own table (``table(results, metric)``,
    printed by ``oodsim run`` instead of the summary table), say whether their seeds compare
    methods, and add report files (``files(results, folder, metric, figures)`` returns the
    paths it wrote and the lines ``summary.md`` links them with). A built-in protocol's, or a
    name already given, needs ``replace=True``."""
    if protocol in _HOOKS and not replace:
        raise ValueError(f"the results of {protocol!r} already have report hooks")
    hooks = ReportHooks(table or _summary_table, compares_methods, files)
    _HOOKS[protocol] = hooks
    return hooks


def report_hooks(results: xr.Dataset | xr.DataArray) -> ReportHooks:
    """The report hooks of the protocol that made ``results`` (the generic ones by default)."""
    return _HOOKS.get(str(results.attrs.get("protocol", "")), GENERIC)
