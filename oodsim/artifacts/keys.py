"""What one simulation stores, and the content keys of its entries: the checkpoint, the outputs
of every subset and extra OOD set, and κ of each model-based detector (:class:`SimulationKeys`)."""

from __future__ import annotations

import attrs

from oodsim.artifacts.outputs import OUTPUTS
from oodsim.detectors import get_detector
from oodsim.keys import digest
from oodsim.metrics import METRIC_INFO
from oodsim.models import versions
from oodsim.models.registry import get_architecture
from oodsim.seeds import TRAINING_STREAMS, SeedStreams
from oodsim.specs import DetectorSpec, ExperimentSpec, OODSetSpec

CHECKPOINT = "checkpoint"


OOD_OUTPUTS = "ood_outputs"


KAPPA = "kappa"


HELD_OUT = "held_out"


@attrs.frozen
class PartKeys:
    """The keys of an experiment and of the parts every checkpoint key hashes in, with its
    architecture's version: the same for every seed of a run. A spec's key reads registries
    and data fingerprints (:meth:`~oodsim.specs.DatasetSpec.key_extra`), which a run holds
    fixed, so a run hashes them once (:meth:`of`), not twice a seed."""

    spec: str
    dataset: str
    split: str
    model: str
    training: str
    architecture: str

    @classmethod
    def of(cls, spec: ExperimentSpec) -> PartKeys:
        return cls(
            spec=spec.key,
            dataset=spec.dataset.key,
            split=spec.split.key,
            model=spec.model.key,
            training=spec.training.key,
            architecture=get_architecture(spec.model.arch).version,
        )


def checkpoint_key(
    spec: ExperimentSpec, streams: SeedStreams, parts: PartKeys | None = None
) -> str:
    """The key of a seed's checkpoint (``parts``: the spec's, hashed once for a run)."""
    parts = parts or PartKeys.of(spec)
    return digest(
        CHECKPOINT,
        f"{versions.TRAINING}/{parts.architecture}",
        {
            "dataset": parts.dataset,
            "split": parts.split,
            "model": parts.model,
            "training": parts.training,
            "streams": streams.entropies(TRAINING_STREAMS),
        },
    )


def outputs_key(checkpoint: str) -> str:
    return digest(OUTPUTS, versions.INFERENCE, {"checkpoint": checkpoint})


def ood_outputs_key(checkpoint: str, ood: OODSetSpec, streams: SeedStreams) -> str:
    return digest(
        OOD_OUTPUTS,
        versions.INFERENCE,
        {"checkpoint": checkpoint, "ood": ood.key, "ood_sampling": streams.entropy("ood_sampling")},
    )


def kappa_key(source: str, subset: str, detector: DetectorSpec, streams: SeedStreams) -> str:
    return digest(
        KAPPA,
        detector.version,
        {
            "source": source,
            "subset": subset,
            "detector": detector.key,
            "inference": streams.entropy("inference"),
        },
    )


def needs_model(detector: DetectorSpec) -> bool:
    return "model" in get_detector(detector.name).needs


@attrs.frozen
class EvalSet:
    """A set of test samples scored against in-distribution test samples."""

    label: str
    entry: tuple[str, str]  # (kind, key) of the store entry holding its outputs
    prefix: str  # array name prefix inside that entry


@attrs.frozen
class SimulationKeys:
    """The content keys of one simulation, hashed once (:func:`simulation_keys`): its
    checkpoint, the outputs of its split, and every set it is evaluated on."""

    streams: SeedStreams
    checkpoint: str
    outputs: str  # of every subset of the split
    sets: tuple[EvalSet, ...]  # the in-distribution test set first, then each OOD test set
    kappa: tuple[tuple[str, str], ...]  # (kind, key) of κ of each model-based detector
    #: the ID validation samples, scored too when a metric fixes a threshold on them
    validation: EvalSet | None = None

    @property
    def scored(self) -> tuple[EvalSet, ...]:
        """Every set κ is computed on: :attr:`sets`, then :attr:`validation` if any."""
        return self.sets if self.validation is None else (*self.sets, self.validation)

    @property
    def entries(self) -> list[tuple[str, str]]:
        """Every (kind, key) a finished simulation has in the store (checkpoint first)."""
        outputs = sorted({s.entry for s in self.sets})
        return [(CHECKPOINT, self.checkpoint), *outputs, *self.kappa]

    def outputs_of(self, label: str) -> str:
        """The key of the outputs entry that holds evaluated set ``label``."""
        return next(s.entry[1] for s in self.sets if s.label == label)


def simulation_keys(
    spec: ExperimentSpec, seed: int, parts: PartKeys | None = None
) -> SimulationKeys:
    """The keys of simulation ``seed`` of ``spec`` (``parts``: :class:`PartKeys` of the spec,
    hashed once for a run)."""
    streams = spec.seeds.streams(seed)
    checkpoint = checkpoint_key(spec, streams, parts)
    split_entry = (OUTPUTS, outputs_key(checkpoint))
    sets = [EvalSet("in_test", split_entry, "in_test")]
    for ood in spec.ood:
        if ood.kind == HELD_OUT:
            sets.append(EvalSet(ood.label, split_entry, "out_test"))
        else:
            key = ood_outputs_key(checkpoint, ood, streams)
            sets.append(EvalSet(ood.label, (OOD_OUTPUTS, key), "ood"))
    validation = None
    if any(METRIC_INFO[name].needs_val_kappa for name in spec.metrics):
        validation = EvalSet("in_val", split_entry, "in_val")
    scored = sets if validation is None else [*sets, validation]
    kappa = [
        (KAPPA, kappa_key(s.entry[1], s.prefix, detector, streams))
        for detector in spec.detectors
        if needs_model(detector)
        for s in scored
    ]
    return SimulationKeys(
        streams, checkpoint, split_entry[1], tuple(sets), tuple(kappa), validation
    )


def entries(spec: ExperimentSpec, seed: int) -> list[tuple[str, str]]:
    """Every (kind, key) a finished simulation of ``seed`` has in the store (checkpoint first)."""
    return simulation_keys(spec, seed).entries
