"""Classifiers: the architecture registry (:func:`register_architecture`), built-in
architectures and inference (training is :mod:`oodsim.simulation.training`, pretrained models
:mod:`oodsim.zoo`). Importing this package does not import torch:
:class:`Classifier` and :class:`ContractModel` (torch modules) load on first use. Importing it
registers the built-in architectures, so every ``from oodsim.models.registry import ...`` (a
worker that unpickled a task, too) sees them."""

from typing import Any

from oodsim.models import architectures  # noqa: F401  (registers the built-ins, without torch)
from oodsim.models.lazy import torch_attribute
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


def __getattr__(name: str) -> Any:
    return torch_attribute(__name__, name)
