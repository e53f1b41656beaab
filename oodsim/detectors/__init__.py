"""OOD detectors: confidence functions κ (higher = more in-distribution) of cached model outputs.

Each family lives in its own small module with its math as plain functions of numpy arrays;
this package holds the registry. Built-ins are registered on import, user functions with
:func:`register`, third-party packages through the entry-point group ``oodsim.detectors``
(listed lazily, loaded on first use); ``pytorch_ood:<Class>`` names a class of pytorch-ood
(the extra ``oodsim[pytorch-ood]``, imported on first use, see :mod:`.pytorch_ood`)::

    from oodsim.detectors import confidence
    kappa = confidence("mahalanobis", test_outputs, fit=train_outputs)
"""

from __future__ import annotations

from oodsim.detectors import (  # noqa: F401  (imported to register the built-ins)
    knn,
    logits,
    mahalanobis,
    mc_dropout,
    odin,
    openmax,
    pytorch_ood,
    temperature,
    vim,
)
from oodsim.detectors._api import DetectorWroteInputs, NonFiniteKappaError, confidence
from oodsim.detectors._checks import (
    DetectorInputError,
    Limit,
    UnknownParameterError,
    at_least,
    greater_than,
    one_of,
)
from oodsim.detectors._model_guard import DetectorChangedModel
from oodsim.detectors._registry import (
    ENTRY_POINT_GROUP,
    EXECUTION_PARAMS,
    FAMILIES,
    OTHER_FAMILY,
    Detector,
    adopt,
    available,
    builtin_detectors,
    detector_family,
    families,
    get_detector,
    register,
    user_detectors,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "EXECUTION_PARAMS",
    "FAMILIES",
    "OTHER_FAMILY",
    "Detector",
    "DetectorChangedModel",
    "DetectorInputError",
    "DetectorWroteInputs",
    "Limit",
    "NonFiniteKappaError",
    "UnknownParameterError",
    "adopt",
    "at_least",
    "available",
    "builtin_detectors",
    "confidence",
    "detector_family",
    "families",
    "get_detector",
    "greater_than",
    "one_of",
    "register",
    "user_detectors",
]
