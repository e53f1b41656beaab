"""The open set split: classes into known / OOD train / OOD val / OOD test, samples per class
into train / val / test, giving the six subsets D_in/out × train/val/test of the study."""

from __future__ import annotations

import attrs
import numpy as np

from oodsim.errors import SpecError
from oodsim.seeds import SeedStreams
from oodsim.specs import SplitSpec

SUBSETS = ("in_train", "in_val", "in_test", "out_train", "out_val", "out_test")


@attrs.frozen
class ClassSplit:
    """Original class ids of each group; known classes are relabelled 0..K-1 in this order."""

    known: tuple[int, ...]
    ood_train: tuple[int, ...]
    ood_val: tuple[int, ...]
    ood_test: tuple[int, ...]

    @property
    def label(self) -> str:
        """A short name of the known-class set, used to group seeds by class split."""
        return "-".join(map(str, self.known))


def split_classes(n_classes: int, spec: SplitSpec, streams: SeedStreams) -> ClassSplit:
    """Draw the class split of one simulation from its ``class_split`` stream."""
    rng = streams.rng("class_split")
    if spec.known_classes:
        known = spec.known_classes[streams.entropy("class_split") % len(spec.known_classes)]
        if max(known) >= n_classes:
            raise SpecError("split.known_classes", known, f"class ids in 0..{n_classes - 1}")
        rest = np.array([c for c in range(n_classes) if c not in set(known)])
        rest = rest[rng.permutation(len(rest))]
    else:
        order = rng.permutation(n_classes)
        known, rest = tuple(sorted(order[: spec.n_known].tolist())), order[spec.n_known :]
    n_train, n_val = spec.n_ood_train, spec.n_ood_val
    n_test = len(rest) - n_train - n_val if spec.n_ood_test is None else spec.n_ood_test
    if n_test < 1 or n_train + n_val + n_test > len(rest):
        raise SpecError(
            "split",
            f"{len(known)} known + {n_train} + {n_val} + {n_test} OOD classes",
            f"at most {n_classes} classes with at least one OOD test class",
        )
    groups = np.split(rest, [n_train, n_train + n_val, n_train + n_val + n_test])
    return ClassSplit(
        tuple(int(c) for c in known), *(tuple(sorted(int(c) for c in g)) for g in groups[:3])
    )


def split_samples(
    labels: np.ndarray, fractions: tuple[float, float, float], streams: SeedStreams
) -> np.ndarray:
    """Assign each sample to train (0), val (1) or test (2), stratified per class."""
    rng = streams.rng("sample_split")
    assignment = np.empty(len(labels), dtype=np.int8)
    bounds = np.cumsum(fractions)[:2]
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        members = members[rng.permutation(len(members))]
        cuts = np.round(bounds * len(members)).astype(int)
        for part, chunk in enumerate(np.split(members, cuts)):
            assignment[chunk] = part
    return assignment


def subsample_per_class(
    labels: np.ndarray, max_per_class: int | None, streams: SeedStreams
) -> np.ndarray:
    """Indices of at most ``max_per_class`` samples per class (all when None), sorted."""
    if max_per_class is None:
        return np.arange(len(labels))
    rng = streams.rng("sample_split")
    keep = [
        rng.choice(members, size=min(max_per_class, len(members)), replace=False)
        for members in (np.flatnonzero(labels == c) for c in np.unique(labels))
    ]
    return np.sort(np.concatenate(keep))


@attrs.frozen
class OpenSetSplit:
    """The six subsets of one simulation as sample indices into the dataset."""

    classes: ClassSplit
    indices: dict[str, np.ndarray]

    def known_labels(self, labels: np.ndarray) -> np.ndarray:
        """Known classes relabelled 0..K-1; OOD samples get -1."""
        lookup = np.full(int(labels.max()) + 1, -1, dtype=np.int64)
        lookup[list(self.classes.known)] = np.arange(len(self.classes.known))
        return lookup[labels]


def make_split(
    labels: np.ndarray,
    n_classes: int,
    spec: SplitSpec,
    streams: SeedStreams,
    max_per_class: int | None = None,
) -> OpenSetSplit:
    """Class split × sample split of one simulation."""
    classes = split_classes(n_classes, spec, streams)
    pool = subsample_per_class(labels, max_per_class, streams)
    part = np.full(len(labels), -1, dtype=np.int8)
    part[pool] = split_samples(labels[pool], spec.fractions, streams)
    groups = {
        "in": classes.known,
        "out_train": classes.ood_train,
        "out_val": classes.ood_val,
        "out_test": classes.ood_test,
    }
    indices = {}
    for subset in SUBSETS:
        origin, which = subset.split("_")
        members = np.isin(labels, groups["in"] if origin == "in" else groups[subset])
        indices[subset] = np.flatnonzero(members & (part == ("train", "val", "test").index(which)))
    return OpenSetSplit(classes, indices)
