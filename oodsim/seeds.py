"""Named random streams spawned from one simulation seed.

Every source of randomness (class split, sample split, weight init, data order, augmentation,
training dropout, stochastic inference, OOD sampling) draws from its own stream, so that pinning
one (``seeds.pinned``) fixes that source alone. A stream's entropy is the simulation seed unless
pinned; its identity inside :class:`numpy.random.SeedSequence` is the stream's position in
:data:`STREAMS`, which is append-only so that existing keys and results never change.
"""

from __future__ import annotations

from collections.abc import Mapping

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
