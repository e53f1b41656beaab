"""Reports of results: tables and PNG plots.

Every protocol's results (seed × method × metric × severity) get the same report:
:mod:`oodsim.report.summary` writes it (:func:`write_report`) into a folder of its own
(:mod:`oodsim.report.folder`, :func:`report_folder`) from the figures of
:mod:`oodsim.report.plots` and :mod:`oodsim.report.decisions`, the tables of
:mod:`oodsim.report.tables` (:func:`format_summary_table`), the paired comparisons and power
of :mod:`oodsim.report.comparisons`, the variance by source of :mod:`oodsim.report.sources` and
what was run (:mod:`oodsim.report.provenance`). :mod:`oodsim.report.severity` adds the
per-level views of severity results, through the hooks of :mod:`oodsim.report.hooks` (where a
registered protocol may give its own table and files). :mod:`oodsim.report.styles` gives each
method one look in every report, a colour of its family's palette and a marker
(:func:`method_styles`, :func:`method_family`); :mod:`oodsim.report.figures` holds what every
plot shares: panel grids with one legend outside the axes, titles that fit.
"""

from oodsim.report.comparisons import plot_paired_differences
from oodsim.report.decisions import plot_required_simulations, plot_win_probability
from oodsim.report.folder import (
    REPORT_MARKER,
    ReportFolderError,
    check_report_folder,
    is_complete,
    report_folder,
)
from oodsim.report.hooks import ReportHooks, register_report, report_hooks
from oodsim.report.plots import plot_distributions, plot_forest, plot_running_mean
from oodsim.report.sources import plot_variance_sources
from oodsim.report.styles import method_detectors, method_family, method_style, method_styles
from oodsim.report.summary import write_report
from oodsim.report.tables import format_summary_table

__all__ = [
    "REPORT_MARKER",
    "ReportFolderError",
    "ReportHooks",
    "check_report_folder",
    "is_complete",
    "format_summary_table",
    "method_detectors",
    "method_family",
    "method_style",
    "method_styles",
    "plot_distributions",
    "plot_forest",
    "plot_paired_differences",
    "plot_required_simulations",
    "plot_running_mean",
    "plot_variance_sources",
    "plot_win_probability",
    "register_report",
    "report_folder",
    "report_hooks",
    "write_report",
]
