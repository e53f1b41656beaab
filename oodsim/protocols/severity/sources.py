"""Severity sources: the samples of each source (ID test set, ID fit set, OOD pool part).

A :class:`~oodsim.protocols.severity.spec.SourceSpec` becomes :class:`SourceItems`: uint8
images or image files, their class positions and each sample's column in the model's outputs.
Dataset and folder samples are drawn from streams that depend on the source only (every model
and seed sees the same images); noise images come from the seed's ``ood_sampling`` stream
(:func:`noise_rng`). This module holds :data:`VERSION`, which also enters the output keys of
:mod:`oodsim.protocols.severity.plan`. It knows nothing of the store, Dask or the scoring.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from oodsim.data.builtin import IMAGE_SUFFIXES
from oodsim.data.imagenet_classes import filter_ood_classes, imagenet1k_wnids
from oodsim.data.registry import ImageData, load_dataset
from oodsim.errors import DataNotFoundError, SpecError, UnknownNameError
from oodsim.keys import digest
from oodsim.protocols.severity.spec import SourceSpec
from oodsim.seeds import SeedStreams
from oodsim.simulation.ood_sets import noise_images
from oodsim.zoo import ModelRef

# bump when source sampling or the stored arrays change: it enters the sampling streams here
# and the output keys (plan.outputs_key)
VERSION = "2"


@attrs.frozen(eq=False)
class SourceItems:
    """A source's samples before inference: uint8 images or image files, with class positions.

    ``targets`` is each sample's column in the model's outputs (-1: not a model class).
    """

    class_names: tuple[str, ...]
    labels: np.ndarray
    index: np.ndarray
    targets: np.ndarray
    images: np.ndarray | None = None
    files: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, rows: slice) -> SourceItems:
        """The samples of ``rows`` (same classes)."""
        return attrs.evolve(
            self,
            labels=self.labels[rows],
            index=self.index[rows],
            targets=self.targets[rows],
            images=None if self.images is None else self.images[rows],
            files=None if self.files is None else self.files[rows],
        )


def _source_rng(
    source: SourceSpec, per_class: int | None, shard: int | None = None
) -> np.random.Generator:
    """A generator that depends on the source only: every model and seed sees the same
    samples."""
    fields = {"source": source.key, "per_class": per_class, "shard": shard}
    return np.random.default_rng(int(digest("severity_sampling", VERSION, fields)[:16], 16))


def child_sequence(streams: SeedStreams, stream: str, tag: str) -> np.random.SeedSequence:
    """A child of one of the seed's streams for one thing (``tag``: a content key), so that
    e.g. two noise sources of one seed draw independent images and adding a source changes
    no other source's draw."""
    parent = streams.sequence(stream)
    return np.random.SeedSequence(parent.entropy, spawn_key=(*parent.spawn_key, int(tag[:15], 16)))


def noise_rng(streams: SeedStreams, source: SourceSpec) -> np.random.Generator:
    """The generator of a noise source's images for one seed (``ood_sampling`` stream)."""
    return np.random.default_rng(child_sequence(streams, "ood_sampling", source.key))


def subsample(labels: np.ndarray, per_class: int | None, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of at most ``per_class`` random samples of every class."""
    if per_class is None:
        return np.arange(len(labels))
    keep = [
        rng.choice(members, size=min(per_class, members.size), replace=False)
        for members in (np.flatnonzero(labels == c) for c in np.unique(labels))
    ]
    return np.sort(np.concatenate(keep)) if keep else np.zeros(0, np.int64)


def _targets(
    source: SourceSpec, names: Sequence[str], labels: np.ndarray, n_classes: int
) -> np.ndarray:
    """Model output column of each sample (-1 where the class is not one of the model's)."""
    mode = source.labels
    wnids = imagenet1k_wnids() if n_classes == 1000 else ()
    if mode == "auto":
        mode = "imagenet1k" if wnids and all(n in set(wnids) for n in names) else "position"
    if mode == "imagenet1k":
        if n_classes != 1000:
            raise SpecError("labels", "imagenet1k", "a 1000-class ImageNet model")
        position = {w: i for i, w in enumerate(wnids)}
        columns = np.array([position.get(n, -1) for n in names], dtype=np.int64)
    else:
        columns = np.arange(len(names), dtype=np.int64)
        columns[columns >= n_classes] = -1
    return columns[labels] if len(labels) else np.zeros(0, np.int64)


def pick_classes(source: SourceSpec, names: Sequence[str]) -> list[int]:
    """Class ids chosen by ``source.classes`` (ids or names), all when empty."""
    if not source.classes:
        return list(range(len(names)))
    chosen = []
    for value in source.classes:
        if isinstance(value, int):
            if not 0 <= value < len(names):
                raise SpecError(f"{source.label}.classes", value, f"ids in 0..{len(names) - 1}")
            chosen.append(value)
        elif value in names:
            chosen.append(list(names).index(value))
        else:
            raise UnknownNameError(f"{source.label}.classes", value, names)
    return chosen


def _dataset_items(source: SourceSpec, per_class: int | None, n_classes: int) -> SourceItems:
    data = load_dataset(source.name, source.root, False, source.image_size)
    chosen = pick_classes(source, data.class_names)
    lookup = np.full(data.n_classes, -1, dtype=np.int64)
    lookup[chosen] = np.arange(len(chosen))
    members = np.flatnonzero(lookup[data.labels] >= 0)
    index = members[subsample(data.labels[members], per_class, _source_rng(source, per_class))]
    labels = lookup[data.labels[index]]
    names = tuple(data.class_names[c] for c in chosen)
    return SourceItems(
        names, labels, index, _targets(source, names, labels, n_classes), images=data.images[index]
    )


@functools.lru_cache(maxsize=32)
def _folder_classes(root: str, classes: tuple[str | int, ...], wordnet: bool) -> tuple[str, ...]:
    path = Path(root)
    if not path.is_dir():
        raise DataNotFoundError(f"image folder {path} does not exist")
    names = tuple(sorted(p.name for p in path.iterdir() if p.is_dir()))
    if classes:
        missing = [str(c) for c in classes if str(c) not in names]
        if missing:
            raise DataNotFoundError(f"class folders {missing[:5]} not found under {path}")
        names = tuple(str(c) for c in classes)
    if wordnet:
        names = filter_ood_classes(None, names).kept
    if not names:
        raise DataNotFoundError(f"image folder {path} has no (kept) class sub-folders")
    return names


def folder_classes(source: SourceSpec) -> tuple[str, ...]:
    """The class folders of an image folder source: chosen, then WordNet-filtered if asked."""
    return _folder_classes(str(source.root), source.classes, source.wordnet_filter)


def n_shards(source: SourceSpec) -> int | None:
    """Number of class shards of a sharded image folder (lists its class folders), else None."""
    if source.kind != "image_folder" or not source.shard_size:
        return None
    return -(-len(folder_classes(source)) // source.shard_size)


def _class_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)


def _folder_items(
    source: SourceSpec, per_class: int | None, n_classes: int, shard: int | None
) -> SourceItems:
    names = folder_classes(source)
    if shard is not None:
        size = source.shard_size or len(names)
        names = names[shard * size : (shard + 1) * size]
    files = [_class_files(Path(str(source.root)) / n) for n in names]
    all_files = [f for group in files for f in group]
    all_labels = np.repeat(np.arange(len(names)), [len(g) for g in files])
    index = subsample(all_labels, per_class, _source_rng(source, per_class, shard))
    labels = all_labels[index]
    return SourceItems(
        names,
        labels,
        index,
        _targets(source, names, labels, n_classes),
        files=tuple(str(all_files[i]) for i in index),
    )


def source_noise(
    source: SourceSpec, shape: tuple[int, int, int], rng: np.random.Generator
) -> np.ndarray:
    """A noise source's ``n_samples`` uint8 images
    (:func:`oodsim.simulation.ood_sets.noise_images`)."""
    return noise_images(
        source.kind,
        source.n_samples,
        source.shape or shape,
        rng,
        low=source.low,
        high=source.high,
        mean=source.mean,
        std=source.std,
    )


def source_items(
    source: SourceSpec,
    per_class: int | None,
    loaded: Any,
    ref: ModelRef | None = None,
    shard: int | None = None,
    noise: np.random.Generator | None = None,
) -> SourceItems:
    """The samples of a source for a loaded model (:class:`~oodsim.zoo.LoadedModel`).

    ``split`` sources need the ``trained`` model's ``ref`` (its experiment names the data);
    noise sources the seed's generator ``noise`` (:func:`noise_rng`).
    """
    if source.kind == "split":
        return _split_items(source, loaded, ref)
    if source.kind == "dataset":
        return _dataset_items(source, per_class, loaded.n_classes)
    if source.kind == "image_folder":
        return _folder_items(source, per_class, loaded.n_classes, shard)
    if noise is None:
        raise ValueError(f"noise source {source.label!r} needs the seed's generator")
    images = source_noise(source, loaded.preprocessing.input_shape, noise)
    n = len(images)
    return SourceItems(
        (source.label,),
        np.zeros(n, np.int64),
        np.arange(n),
        np.full(n, -1, np.int64),
        images=images,
    )


def ood_class_names(source: SourceSpec) -> tuple[str, ...]:
    """The names the OOD classes of ``source`` carry in results (``level_classes``, the
    ``ood_class`` coordinate): ``"<label>/<class>"`` for a dataset or folder, the label alone
    for a noise source (one class). The same names scoring builds from the stored outputs."""
    if source.is_noise:
        return (source.label,)
    if source.kind == "dataset":
        data = load_dataset(source.name, source.root, False, source.image_size)
        names = [data.class_names[c] for c in pick_classes(source, data.class_names)]
    elif source.kind == "image_folder":
        names = list(folder_classes(source))
    else:
        raise SpecError("kind", source.kind, "a dataset, folder or noise source in an OOD pool")
    return tuple(f"{source.label}/{name}" for name in names)


def trained_data(ref: ModelRef) -> ImageData:
    """The dataset that a ``trained`` model's open set experiment names (from the registry)."""
    return ref.experiment.dataset.load()


def _split_items(source: SourceSpec, loaded: Any, ref: ModelRef | None) -> SourceItems:
    if loaded.split is None or ref is None or ref.experiment is None:
        raise SpecError("kind", "split", "a source of 'trained' models only")
    data = trained_data(ref)
    index = loaded.split.indices[source.subset]
    labels = loaded.split.known_labels(data.labels)[index]
    names = tuple(data.class_names[c] for c in loaded.split.classes.known)
    return SourceItems(names, labels, index, labels.copy(), images=data.images[index])
