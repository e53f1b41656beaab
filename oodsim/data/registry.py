"""Dataset registry: names → loaders returning uint8 images (N, H, W, C) and integer labels.

Loaders read local files only. Where a dataset is missing the error says where oodsim looked and
how to get the data; nothing is downloaded unless the spec asks for ``download = true``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

import attrs
import numpy as np

from oodsim.errors import UnknownNameError


@attrs.frozen
class ImageData:
    """A labelled image set: uint8 images (N, H, W, C), int64 labels (N,), class names."""

    images: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]

    def __attrs_post_init__(self) -> None:
        if self.images.dtype != np.uint8 or self.images.ndim != 4:
            raise ValueError(
                f"images must be uint8 (N, H, W, C), got {self.images.dtype} {self.images.shape}"
            )
        if len(self.images) != len(self.labels):
            raise ValueError(f"{len(self.images)} images but {len(self.labels)} labels")

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(H, W, C) of one image."""
        return tuple(self.images.shape[1:])  # type: ignore[return-value]


@attrs.frozen
class DatasetInfo:
    """What oodsim knows about a dataset before reading it."""

    name: str
    n_classes: int | None
    hflip: bool
    load: Callable[..., ImageData]
    description: str


DATASETS: dict[str, DatasetInfo] = {}


def register_dataset(
    name: str, *, n_classes: int | None, hflip: bool, description: str
) -> Callable[[Callable[..., ImageData]], Callable[..., ImageData]]:
    """Register a loader ``load(root, download, image_size) -> ImageData``."""

    def decorate(load: Callable[..., ImageData]) -> Callable[..., ImageData]:
        DATASETS[name] = DatasetInfo(name, n_classes, hflip, load, description)
        return load

    return decorate


def user_datasets(names: Iterable[str]) -> tuple[DatasetInfo, ...]:
    """The datasets among ``names`` that a script registered in this process (not oodsim's
    own loaders): worker processes never ran that script, so the engine ships these."""
    return tuple(
        DATASETS[name]
        for name in dict.fromkeys(names)
        if name in DATASETS and not DATASETS[name].load.__module__.startswith("oodsim.")
    )


def adopt_datasets(infos: Iterable[DatasetInfo]) -> None:
    """Register datasets shipped from the driver in this (worker) process."""
    for info in infos:
        DATASETS.setdefault(info.name, info)


def dataset_info(name: str) -> DatasetInfo:
    try:
        return DATASETS[name]
    except KeyError:
        raise UnknownNameError("dataset", name, DATASETS) from None


@functools.lru_cache(maxsize=8)
def load_dataset(
    name: str, root: str | None = None, download: bool = False, image_size: int | None = None
) -> ImageData:
    """Load a registered dataset (cached per process: workers read the files once)."""
    return dataset_info(name).load(root=root, download=download, image_size=image_size)
