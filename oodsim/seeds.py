"""Named random streams spawned from one simulation seed.

Every source of randomness (class split, sample split, weight init, data order, augmentation,
training dropout, stochastic inference, OOD sampling) draws from its own stream, so that pinning
one (``seeds.pinned``) fixes that source alone. A stream's entropy is the simulation seed unless
pinned; its identity inside :class:`numpy.random.SeedSequence` is the stream's position in
:data:`STREAMS`, which is append-only so that existing keys and results never change.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

STREAMS: tuple[str, ...] = (
    "class_split",
    "sample_split",
    "init",
    "data_order",
    "augmentation",
    "dropout",
    "inference",
    "ood_sampling",
    "bootstrap",  # ImageNet-O: the resample of the ID/OOD test images a seed scores
    "estimation_split",  # severity: estimation/test samples of every OOD class
    "id_sampling",  # severity: the ID test subsample (an ID source with max_per_class)
)

#: Streams an open set simulation draws from (the ones ``[seeds.design]`` may cross).
OPEN_SET_STREAMS = STREAMS[:8]

#: Streams that determine a trained checkpoint.
TRAINING_STREAMS = ("class_split", "sample_split", "init", "data_order", "augmentation", "dropout")


@attrs.frozen
class SeedStreams:
    """The random streams of one simulation."""

    seed: int
    pinned: Mapping[str, int] = attrs.field(factory=dict, converter=dict)

    def entropy(self, stream: str) -> int:
        """The integer that seeds ``stream``: pinned value or the simulation seed."""
        if stream not in STREAMS:
            raise KeyError(f"unknown random stream {stream!r}; known: {', '.join(STREAMS)}")
        return int(self.pinned.get(stream, self.seed))

    def sequence(self, stream: str) -> np.random.SeedSequence:
        return np.random.SeedSequence(self.entropy(stream), spawn_key=(STREAMS.index(stream),))

    def rng(self, stream: str) -> np.random.Generator:
        """A numpy generator for ``stream``."""
        return np.random.Generator(np.random.PCG64(self.sequence(stream)))

    def torch_seed(self, stream: str) -> int:
        """A 63-bit integer for ``torch.Generator.manual_seed``."""
        return int(self.sequence(stream).generate_state(1, np.uint64)[0] >> np.uint64(1))

    def entropies(self, streams: tuple[str, ...]) -> dict[str, int]:
        """Entropy per stream: what enters the key of an artifact drawn from these streams."""
        return {name: self.entropy(name) for name in streams}


class SeedRange(Sequence[int]):
    """Seeds ``start .. stop - 1`` generated on demand: a ``range`` (constant memory, slices
    are ranges too) that compares equal to the tuple or list of the same seeds."""

    __slots__ = ("_range",)
    __hash__ = None  # type: ignore[assignment]  # equal to tuples, so no hash of its own

    def __init__(self, start: int, stop: int) -> None:
        self._range = range(start, stop)

    def __len__(self) -> int:
        return len(self._range)

    def __iter__(self) -> Iterator[int]:
        return iter(self._range)

    def __contains__(self, value: object) -> bool:
        return value in self._range

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            part = self._range[index]
            if part.step != 1:
                return tuple(part)
            return SeedRange(part.start, part.stop)
        return self._range[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SeedRange | range):
            return self._range == (other._range if isinstance(other, SeedRange) else other)
        if isinstance(other, tuple | list):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"SeedRange({self._range.start}, {self._range.stop})"
