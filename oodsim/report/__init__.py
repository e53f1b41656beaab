"""Reports of results: tables and PNG plots.

:mod:`oodsim.report.summary` serves every protocol (estimates, win probabilities, required
simulations over seed × method × metric × severity); :mod:`oodsim.report.severity` adds the
per-level views of severity results.
"""

from oodsim.report.summary import (
    format_summary_table,
    plot_distributions,
    plot_required_simulations,
    plot_running_mean,
    plot_win_probability,
    write_report,
)

__all__ = [
    "format_summary_table",
    "plot_distributions",
    "plot_required_simulations",
    "plot_running_mean",
    "plot_win_probability",
    "write_report",
]
