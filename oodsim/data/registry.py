"""Dataset registry: names → loaders returning uint8 images (N, H, W, C) and integer labels.

Loaders read local files only. Where a dataset is missing the error says where oodsim looked and
how to get the data; nothing is downloaded unless the spec asks for ``download = true``.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import attrs
import numpy as np

from oodsim.errors import OodsimError
from oodsim.plugins import Registry, View


class DatasetError(OodsimError, ValueError):
    """A dataset loader returned images or labels oodsim cannot use."""


def _array_problem(images: object, labels: object, class_names: object) -> str:
    """What is wrong with a dataset's arrays, with the fix, or "" when they are usable."""
    if not isinstance(images, np.ndarray) or not isinstance(labels, np.ndarray):
        return (
            f"images and labels must be numpy arrays, got {type(images).__name__} and "
            f"{type(labels).__name__}"
        )
    shape, dtype = images.shape, images.dtype
    if images.ndim == 3:
        return (
            f"images have shape {shape}: expected (N, H, W, C); add a channel axis for "
            "grayscale images (images[..., None])"
        )
    if images.ndim != 4 or shape[-1] not in (1, 3):
        return f"images have shape {shape}: expected (N, H, W, C) with C = 1 or 3"
    if dtype != np.uint8:
        fix = (
            "for floats in [0, 1], (images * 255).round().astype(np.uint8)"
            if np.issubdtype(dtype, np.floating)
            else "images.astype(np.uint8) after scaling them to 0..255"
        )
        return f"images are {dtype}: expected uint8 pixels 0..255 ({fix})"
    if labels.ndim != 1 or len(labels) != len(images):
        return (
            f"labels have shape {labels.shape} for {len(images)} images: expected ({len(images)},)"
        )
    if not np.issubdtype(labels.dtype, np.integer):
        return f"labels are {labels.dtype}: expected integer class indices 0..n_classes-1"
    if not isinstance(class_names, tuple) or not all(isinstance(c, str) for c in class_names):
        return "class_names must be a tuple of strings, one per class"
    if len(labels) and (labels.min() < 0 or labels.max() >= len(class_names)):
        return (
            f"labels run from {int(labels.min())} to {int(labels.max())} but there are "
            f"{len(class_names)} class names: labels must be 0..{len(class_names) - 1}"
        )
    return ""


@attrs.frozen
class ImageData:
    """A labelled image set: uint8 images (N, H, W, C), int64 labels (N,), class names.

    Arrays of another shape or dtype raise :class:`DatasetError` saying how to convert them.
    """

    images: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...] = attrs.field(converter=tuple)

    def __attrs_post_init__(self) -> None:
        problem = _array_problem(self.images, self.labels, self.class_names)
        if problem:
            raise DatasetError(problem)

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(H, W, C) of one image."""
        return tuple(self.images.shape[1:])  # type: ignore[return-value]

    @functools.cached_property
    def digest(self) -> str:
        """A digest of the images and labels, in order: what a checkpoint records of the data
        it was trained on (a loader must return the same arrays every time). Computed once:
        every seed of a process shares the loaded arrays, which are read-only."""
        found = hashlib.blake2b(digest_size=16)
        for array in (self.images, self.labels):
            found.update(np.ascontiguousarray(array).data)
        return found.hexdigest()


@attrs.frozen
class DatasetInfo:
    """What oodsim knows about a dataset before reading it. ``version`` is the loader's: any
    other than "1" enters the dataset's key, so bumping it recomputes what was trained or
    inferred on the old data."""

    name: str
    n_classes: int | None
    hflip: bool
    load: Callable[..., ImageData]
    description: str
    version: str = "1"
    #: ``files(root) -> paths`` the loader reads (files or folders): their fingerprint
    #: (:mod:`oodsim.data.fingerprint`) enters the key. None: the data is not in files the
    #: user points at (scikit-learn's bundled digits) or the loader's version says it all.
    files: Callable[[str | None], Sequence[Path]] | None = None

    @property
    def builtin(self) -> bool:
        return self.load.__module__.startswith("oodsim.")


#: entry point group of installed datasets (``name = "package.module:loader"``, a loader
#: decorated with :func:`register_dataset` or a :class:`DatasetInfo`)
ENTRY_POINT_GROUP = "oodsim.datasets"


#: every dataset by name (:mod:`oodsim.plugins`); built-ins are added by
#: :mod:`oodsim.data.builtin`
REGISTRY: Registry[DatasetInfo] = Registry(
    "dataset",
    group=ENTRY_POINT_GROUP,
    record_type=DatasetInfo,
    decorator="oodsim.data.register_dataset",
    source="load",
    # a shipped loader is a new object every time: compared by what it is, so that the data
    # is read again only for another loader (a new version, an edited body)
    identity=lambda info: _identity(info),
    on_change=lambda: _load.cache_clear(),
)
_USER = REGISTRY.user


#: every dataset by name, read through :data:`REGISTRY`
DATASETS: Mapping[str, DatasetInfo] = View(REGISTRY)


def register_dataset(
    name: str,
    *,
    n_classes: int | None,
    hflip: bool,
    description: str,
    version: str = "1",
    files: Callable[[str | None], Sequence[Path]] | None = None,
    replace: bool = False,
) -> Callable[[Callable[..., ImageData]], Callable[..., ImageData]]:
    """Decorator: register a loader ``load(root=None, download=False, image_size=None) ->
    ImageData`` under ``name``.

    ``n_classes`` (None: whatever the loader finds), ``hflip`` (whether a horizontal flip keeps
    the class, for augmentation), ``description`` (one line). ``version`` enters the key: bump
    it when the loader returns other data. ``files(root)`` (optional) returns the files or
    folders the loader reads for that ``root``: their fingerprint enters the key too, so two
    folders (or changed files) never share cached results. A script's datasets are shipped to
    the Dask workers.
    A taken name raises ``ValueError``; ``replace=True`` re-registers a script's own dataset,
    never a built-in one.
    """

    def decorate(load: Callable[..., ImageData]) -> Callable[..., ImageData]:
        info = DatasetInfo(name, n_classes, hflip, load, description, str(version), files)
        if info.builtin:
            REGISTRY.builtin(name, info)
        else:
            REGISTRY.register(name, info, replace=replace)
        load.__oodsim_dataset__ = info  # lets an entry point name the loader
        _load.cache_clear()
        return load

    return decorate


def available_datasets() -> list[str]:
    """Names of every dataset: built-in, registered in this process and installed."""
    return REGISTRY.available()


def _identity(info: DatasetInfo) -> tuple:
    """What tells two registrations apart (a shipped loader is a new object every time, so
    comparing functions would reload the data for every task): its fields, and the loader's
    name and compiled body, so that a worker that took a loader takes it again once its body
    was edited under the same name and version."""
    code = getattr(info.load, "__code__", None)
    body = None if code is None else (code.co_code, code.co_consts, code.co_names)
    return (
        info.version,
        info.n_classes,
        info.hflip,
        info.description,
        info.load.__qualname__,
        body,
    )


def adopt_datasets(infos: Iterable[DatasetInfo]) -> None:
    """Register datasets shipped from the driver in this (worker) process; a newer
    registration (another version) replaces the one a previous run shipped."""
    REGISTRY.adopt({info.name: info for info in infos})


def data_fingerprint(name: str, root: str | None) -> str | None:
    """The fingerprint of the files dataset ``name`` reads for ``root`` (None for a loader
    that declares no files)."""
    # hashing loads only for datasets read from files
    from oodsim.data.fingerprint import fingerprint

    files = dataset_info(name).files
    return None if files is None else fingerprint(files(root))


def dataset_info(name: str) -> DatasetInfo:
    """The dataset registered (or installed) as ``name``; an unknown one raises with a close
    match."""
    return REGISTRY.get(name)


def load_dataset(
    name: str, root: str | None = None, download: bool = False, image_size: int | None = None
) -> ImageData:
    """Load a registered dataset (cached per process: workers read the files once, and every
    seed of a worker shares the arrays, which are therefore read-only). Files changed since
    they were loaded (their fingerprint, :func:`data_fingerprint`) are loaded again: a folder
    rewritten between two runs of one script was trained on as it was. What the loader returns
    is checked: an :class:`ImageData` whose labels fit the declared classes, or one
    :class:`DatasetError` naming the dataset and the fix."""
    return _load(name, root, download, image_size, data_fingerprint(name, root))


@functools.lru_cache(maxsize=8)
def _load(
    name: str, root: str | None, download: bool, image_size: int | None, files: str | None
) -> ImageData:
    """:func:`load_dataset`, cached by its arguments and the fingerprint of the ``files``."""
    info = dataset_info(name)
    try:
        data = info.load(root=root, download=download, image_size=image_size)
    except DatasetError as error:
        raise DatasetError(f"dataset {name!r}: {error}") from None
    if not isinstance(data, ImageData):
        raise DatasetError(
            f"dataset {name!r}: its loader returned {type(data).__name__}; return "
            "oodsim.data.ImageData(images, labels, class_names)"
        )
    if info.n_classes is not None and data.n_classes != info.n_classes:
        raise DatasetError(
            f"dataset {name!r} is registered with n_classes={info.n_classes} but its loader "
            f"returned {data.n_classes} class names"
        )
    size = tuple(data.images.shape[1:3])
    if image_size is not None and size != (image_size, image_size):
        raise DatasetError(
            f"dataset {name!r} returned {size[0]}x{size[1]} images for image_size={image_size}: "
            "its loader does not resize (the built-in datasets other than image folders keep "
            "their own size); leave image_size out"
        )
    for array in (data.images, data.labels):  # shared by every later call here (the cache)
        array.flags.writeable = False
    return data


load_dataset.cache_clear = _load.cache_clear  # type: ignore[attr-defined]  # as lru_cache's
