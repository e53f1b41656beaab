"""Classifiers: the architecture registry (:func:`register_architecture`), built-in
architectures, training and inference. Importing this package does not import torch."""

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
    "ArchitectureError",
    "available_architectures",
    "get_architecture",
    "register_architecture",
]
