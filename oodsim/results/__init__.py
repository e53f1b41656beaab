"""Results: one schema for every protocol (:mod:`~oodsim.results.schema`: ``score`` by seed ×
method × metric × severity, a ``failure`` per seed, provenance in ``attrs``), saved with a
checksum manifest (:mod:`~oodsim.results.save`, :mod:`~oodsim.results.manifest`), reopened
checked (:mod:`~oodsim.results.read`), its failures told apart by kind
(:mod:`~oodsim.results.failures`), selected by label (:mod:`~oodsim.results.select`),
read alike by every statistic and report (:mod:`~oodsim.results.access`: the score with failed
seeds masked, metrics, cells, method names), and sliced or turned into pandas through the
``.oodsim`` accessor of xarray objects (:mod:`~oodsim.results.accessor`, registered by importing
this package)."""

from oodsim.results.accessor import DataArrayAccessor, DatasetAccessor, tidy_frame
from oodsim.results.failures import (
    CRASH,
    DEGENERATE,
    FAILURE_KINDS,
    LOST_ENTRY,
    WORKER_DIED,
    FailureKind,
    excluded_seeds,
    failure_kind,
)
from oodsim.results.manifest import MANIFEST
from oodsim.results.read import REPLACED_PATIENCE, ResultsCorrupt, ResultsNotFound
from oodsim.results.remote import is_remote, open_results, read_pointer, save_results
from oodsim.results.save import (
    ForeignOutput,
    OutputError,
    check_not_results,
    check_output,
    check_writable,
)
from oodsim.results.schema import (
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
from oodsim.results.select import LabelError, drop_no_severity, score_view, select

__all__ = [
    "CRASH",
    "DataArrayAccessor",
    "DatasetAccessor",
    "DEGENERATE",
    "DESIGN_PREFIX",
    "FAILURE_KINDS",
    "LOST_ENTRY",
    "MANIFEST",
    "NO_SEVERITY",
    "REPLACED_PATIENCE",
    "SCORE_DIMS",
    "WORKER_DIED",
    "FailureKind",
    "ForeignOutput",
    "LabelError",
    "Layout",
    "OutputError",
    "ResultsCorrupt",
    "ResultsNotFound",
    "SeedResult",
    "build",
    "check_not_results",
    "check_output",
    "check_writable",
    "design_coord",
    "drop_no_severity",
    "excluded_seeds",
    "exclusions",
    "failure_kind",
    "open_results",
    "package_versions",
    "save_results",
    "is_remote",
    "read_pointer",
    "score_view",
    "select",
    "store_counts",
    "tidy_frame",
]
