"""Classifiers: the architecture registry (:func:`register_architecture`), built-in
architectures and inference (training is :mod:`oodsim.simulation.training`, pretrained models
:mod:`oodsim.zoo`). Importing this package does not import torch:
:class:`Classifier` and :class:`ContractModel` (torch modules) load on first use."""

from typing import Any

from oodsim.models.registry import (
    ENTRY_POINT_GROUP,
    Architecture,
    ArchitectureError,
    available_architectures,
    get_architecture,
    register_architecture,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "Architecture",
    "Classifier",
    "ContractModel",
    "ArchitectureError",
    "available_architectures",
    "get_architecture",
    "register_architecture",
]


def torch_attribute(module: str, name: str) -> Any:
    """``Classifier`` or ``ContractModel`` for a module's ``__getattr__``: imported (with
    torch) on first use, not when a spec names an architecture."""
    if name in ("Classifier", "ContractModel"):
        # torch loads when a classifier is first needed, not when a spec names one
        from oodsim.models import classifier

        return getattr(classifier, name)
    raise AttributeError(f"module {module!r} has no attribute {name!r}")


def __getattr__(name: str) -> Any:
    return torch_attribute(__name__, name)
