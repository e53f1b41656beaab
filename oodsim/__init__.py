"""oodsim: evaluate out-of-distribution detectors as a Monte Carlo process.

``load(path)`` reads a spec of any protocol (open set, severity, ImageNet-O) and ``run(spec)``
runs it on the engine (:mod:`oodsim.engine`); ``select(results, method=...)`` picks cells of
its results by label (:mod:`oodsim.results`). The public API is imported lazily so that
``import oodsim`` stays cheap in worker processes.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "run": "oodsim.engine",
    "load": "oodsim.protocols",  # reading a spec loads neither the engine nor torch
    "load_spec": "oodsim.specs",
    "open_results": "oodsim.results",
    "select": "oodsim.results",
    "Outputs": "oodsim.outputs",
    "Store": "oodsim.store",
}

#: subpackages reachable as attributes (``oodsim.detectors.register``) without an import
_SUBPACKAGES = (
    "data",
    "models",
    "detectors",
    "stats",
    "results",
    "store",
    "report",
    "specs",
    "engine",
    "protocols",
    "zoo",
    "simulation",
)

__all__ = ["__version__", *_LAZY, *_SUBPACKAGES]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _SUBPACKAGES:
        return importlib.import_module(f"oodsim.{name}")
    raise AttributeError(f"module 'oodsim' has no attribute {name!r}")
