"""What a protocol's results add to, or change in, the report every protocol gets.

One record per protocol (:class:`ReportHooks`): the table ``oodsim run`` prints after a run,
whether the seeds compare methods (win probabilities and variance sources mean nothing when
every seed resamples one fixed test set, as ImageNet-O's do) and extra files for the report
folder (severity's per-level views). A protocol names its own (``Protocol.report``, imported
when a report needs it); a script may give or replace them with :func:`register_report`; a
protocol without any gets the generic ones. The CLI and :func:`~oodsim.report.write_report`
ask :func:`report_hooks`; nothing here lists protocols.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

import attrs
import xarray as xr

from oodsim.plugins import Registry
from oodsim.report.tables import bootstrap_table, format_summary_table

#: ``table(results, metric) -> str``: what ``oodsim run`` prints after a run
Table = Callable[[xr.Dataset, str], str]
#: ``files(results, folder, metric, figures) -> (paths written, summary.md lines)``: ``folder``
#: is the report folder's sub-folder named after the protocol, the only place they write
Files = Callable[[xr.Dataset, Path, str, bool], tuple[list[Path], list[str]]]


@attrs.frozen
class ReportHooks:
    """The protocol-specific parts of a report (see the module docstring)."""

    table: Table
    compares_methods: bool = True
    files: Files | None = None


def _summary_table(results: xr.Dataset, metric: str) -> str:
    return format_summary_table(results)


def _bootstrap_table(results: xr.Dataset, metric: str) -> str:
    """Seeds that resample one fixed test set: the full set's score, and the percentile
    interval of the replicates, labelled as test-set sampling."""
    return bootstrap_table(results)


#: the report of results whose protocol names no hooks of its own
GENERIC = ReportHooks(_summary_table)
#: the report of seeds that resample one fixed test set (bootstrap replicates): one
#: interval per method, and no comparison of methods across seeds
FIXED_TEST_SET = ReportHooks(_bootstrap_table, compares_methods=False)
#: report hooks given by :func:`register_report`, by protocol name (:mod:`oodsim.plugins`);
#: a protocol's own (``Protocol.report``) are found through the protocol
REGISTRY: Registry[ReportHooks] = Registry("report")


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
    methods, and add report files (``files(results, folder, metric, figures)`` writes them in
    ``folder``, the report folder's sub-folder named after the protocol, and returns the paths
    it wrote and the lines ``summary.md`` links them with). A built-in protocol's, or a
    name already given, needs ``replace=True``."""
    if not replace and (protocol in REGISTRY.user or _declared(protocol) is not None):
        raise ValueError(f"the results of {protocol!r} already have report hooks")
    hooks = ReportHooks(table or _summary_table, compares_methods, files)
    return REGISTRY.register(protocol, hooks, replace=True)


def _declared(protocol: str) -> ReportHooks | None:
    """The report hooks that protocol ``protocol`` names (``Protocol.report``), if it is known
    here and names any."""
    # the protocols' registry loads with the first report that asks (not to print a table)
    from oodsim.protocols import available, get_protocol

    if protocol not in available():
        return None
    target = get_protocol(protocol).report
    if target is None:
        return None
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def report_hooks(results: xr.Dataset | xr.DataArray) -> ReportHooks:
    """The report hooks of the protocol that made ``results``: those registered for it
    (:func:`register_report`), else those it names, else the generic ones."""
    protocol = str(results.attrs.get("protocol", ""))
    if protocol in REGISTRY.user:
        return REGISTRY.user[protocol]
    return _declared(protocol) or GENERIC
