"""Reports of results: tables and PNG plots.

:mod:`oodsim.report.summary` serves every protocol (estimates, win probabilities, required
simulations over seed × method × metric × severity) and writes a report into a folder of its own
(:func:`write_report`, :func:`report_folder`); :mod:`oodsim.report.severity` adds the per-level
views of severity results. :mod:`oodsim.report.figures` holds what every plot shares: one style
per method (:func:`method_styles`), panel grids with one legend outside the axes, titles that
fit.
"""

from oodsim.report.figures import method_styles
from oodsim.report.summary import (
    REPORT_MARKER,
    ReportFolderError,
    format_summary_table,
    plot_distributions,
    plot_required_simulations,
    plot_running_mean,
    plot_win_probability,
    report_folder,
    write_report,
)

__all__ = [
    "REPORT_MARKER",
    "ReportFolderError",
    "format_summary_table",
    "method_styles",
    "plot_distributions",
    "plot_required_simulations",
    "plot_running_mean",
    "plot_win_probability",
    "report_folder",
    "write_report",
]
