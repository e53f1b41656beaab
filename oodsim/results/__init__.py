"""Results: one schema for every protocol (:mod:`~oodsim.results.schema`: ``score`` by seed ×
method × metric × severity, a ``failure`` per seed, provenance in ``attrs``), saved with a
checksum manifest (:mod:`~oodsim.results.save`, :mod:`~oodsim.results.manifest`), reopened
checked (:mod:`~oodsim.results.read`), selected by label (:mod:`~oodsim.results.select`) and
read alike by every statistic and report (:mod:`~oodsim.results.access`: the score with failed
seeds masked, metrics, cells, method names)."""

from oodsim.results.manifest import MANIFEST
from oodsim.results.read import REPLACED_PATIENCE, ResultsCorrupt, ResultsNotFound, open_results
from oodsim.results.save import (
    ForeignOutput,
    OutputError,
    check_output,
    check_writable,
    save_results,
)
from oodsim.results.schema import (
    DEGENERATE,
    DESIGN_PREFIX,
    NO_SEVERITY,
    SCORE_DIMS,
    Layout,
    SeedResult,
    build,
    design_coord,
    exclusions,
    package_versions,
    store_counts,
)
from oodsim.results.select import LabelError, select

__all__ = [
    "DEGENERATE",
    "DESIGN_PREFIX",
    "MANIFEST",
    "NO_SEVERITY",
    "REPLACED_PATIENCE",
    "SCORE_DIMS",
    "ForeignOutput",
    "LabelError",
    "Layout",
    "OutputError",
    "ResultsCorrupt",
    "ResultsNotFound",
    "SeedResult",
    "build",
    "check_output",
    "check_writable",
    "design_coord",
    "exclusions",
    "open_results",
    "package_versions",
    "save_results",
    "select",
    "store_counts",
]
