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

The names below load their module on first use (``from oodsim.report import report_hooks``
does not import matplotlib): a run that prints tables and writes no figures never pays for it.
"""

from __future__ import annotations

from oodsim.lazy import lazy_attributes

#: public name -> the module that defines it
_HOMES = {
    "plot_paired_differences": "comparisons",
    "plot_required_simulations": "decisions",
    "plot_win_probability": "decisions",
    "REPORT_MARKER": "folder",
    "ReportFolderError": "folder",
    "check_report_folder": "folder",
    "is_complete": "folder",
    "report_folder": "folder",
    "write_file": "folder",
    "ReportHooks": "hooks",
    "register_report": "hooks",
    "report_hooks": "hooks",
    "plot_distributions": "plots",
    "plot_forest": "plots",
    "plot_running_mean": "plots",
    "plot_variance_sources": "sources",
    "method_detectors": "styles",
    "method_family": "styles",
    "method_style": "styles",
    "method_styles": "styles",
    "write_report": "summary",
    "format_summary_table": "tables",
}

__all__ = sorted(_HOMES)


__getattr__, __dir__ = lazy_attributes(__name__, _HOMES, globals())
