"""Datasets: the registry of loaders (:mod:`oodsim.data.registry`) and the built-in ones.

Importing the package registers the built-in loaders (:mod:`oodsim.data.builtin`), so every
``from oodsim.data.registry import ...`` sees them. Register your own with
:func:`register_dataset` (see docs/datasets.md).
"""

from oodsim.data import builtin, registry  # noqa: F401  (builtin registers its loaders)
from oodsim.data.registry import (
    DatasetError,
    DatasetInfo,
    ImageData,
    available_datasets,
    dataset_info,
    load_dataset,
    register_dataset,
)

__all__ = [
    "DatasetError",
    "DatasetInfo",
    "ImageData",
    "available_datasets",
    "dataset_info",
    "load_dataset",
    "register_dataset",
]
