"""Severity plan: what one seed needs, the content keys of its store entries, and where
scoring finds them; and the checks that run before any compute (:func:`preflight`).

Per seed and model:

- a ``trained`` model: the open set task that trains its checkpoint and infers its split
  (``checkpoint`` and ``outputs`` entries of :mod:`oodsim.artifacts`, shared with open
  set runs of the same experiment); ``split`` sources read that ``outputs`` entry;
- per other (source[, class shard]) one :class:`Unit`: its ``outputs`` entry (logits,
  features, labels; keyed in the namespace ``severity_outputs``, the kind older versions
  stored them under) and the ``severity_kappa`` entries of model-based κ (ODIN, MC dropout).
  :func:`oodsim.protocols.severity.compute.tasks` turns units into engine tasks.

Keys say what an output depends on, so the engine computes each one once: a pretrained model on
a dataset or folder source is keyed by (model, source) and shared by every seed; a ``trained``
model's outputs by its checkpoint (per seed unless the model's seed is pinned); noise outputs
also by the seed's ``ood_sampling`` stream. Changing a key or its version here invalidates
cached entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from oodsim import zoo
from oodsim.artifacts import keys as artifact_keys
from oodsim.artifacts.compute import simulation_task
from oodsim.artifacts.outputs import OUTPUTS, warn_legacy_outputs
from oodsim.artifacts.simulation import simulation
from oodsim.errors import SpecError
from oodsim.keys import digest
from oodsim.models import versions
from oodsim.protocols.base import Task
from oodsim.protocols.severity.sources import VERSION, n_shards, pick_classes, trained_data
from oodsim.protocols.severity.spec import (
    PoolSpec,
    SeveritySpec,
    SourceSpec,
    check_data,
    detector_info,
)
from oodsim.seeds import SeedStreams
from oodsim.simulation.splits import split_classes
from oodsim.specs import DetectorSpec, ExperimentSpec
from oodsim.store import Store
from oodsim.zoo import (
    ModelRef,
    find_timm_weights,
    find_torchvision_weights,
    missing_weights,
    split_name,
)

#: the namespace (tag) of the keys of severity's outputs entries (of kind ``outputs``)
OUTPUTS_TAG = "severity_outputs"
KAPPA = "severity_kappa"
KAPPA_CHUNK = 1024  # samples per call of a model-based κ (fixed: stochastic κ depend on it)


@attrs.frozen
class Part:
    """Where one model's outputs on one source (or class shard) live in the store: an
    ``outputs`` entry, and the arrays' name prefix inside it (``in_test`` in an open set
    simulation's entry, which its training task fills; "" in an entry a severity task infers).
    """

    key: str
    prefix: str = ""

    @property
    def entry(self) -> tuple[str, str]:
        return OUTPUTS, self.key

    @property
    def inferred(self) -> bool:
        """Whether a severity task infers it (not a ``trained`` model's split subset)."""
        return not self.prefix

    def array(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name


@attrs.frozen
class Kappa:
    """A model-based κ on one part: the detector, its parameters (with the seed of a stochastic
    one) and the key of its ``severity_kappa`` entry."""

    detector: DetectorSpec
    params: tuple[tuple[str, Any], ...]
    key: str


@attrs.frozen
class Unit:
    """One model on one source (or class shard) for one seed: what an inference task computes.

    ``seed`` is the seed of a ``trained`` model's checkpoint (None for zoo models); ``streams``
    the run's streams for noise sources (None otherwise: the images do not depend on the seed).
    """

    ref: ModelRef
    seed: int | None
    source: SourceSpec
    per_class: int | None
    shard: int | None
    part: Part
    features: bool
    streams: SeedStreams | None = None
    kappas: tuple[Kappa, ...] = ()

    @property
    def entries(self) -> tuple[tuple[str, str], ...]:
        """Store entries the task fills (a ``split`` part's outputs come from training)."""
        own = (self.part.entry,) if self.part.inferred else ()
        return own + tuple((KAPPA, k.key) for k in self.kappas)


# --------------------------------------------------------------------------- models


def streams_of(spec: SeveritySpec, seed: int) -> SeedStreams:
    """The run's random streams for one seed (the spec's pinned streams applied)."""
    return spec.seeds.streams(seed)


def model_seed(ref: ModelRef, seed: int) -> int | None:
    """Whose checkpoint a ``trained`` model uses in ``seed``: its pinned seed, else the run's;
    None for zoo models (the same for every seed)."""
    if ref.prefix != "trained":
        return None
    return ref.seed if ref.seed is not None else seed


def experiment_of(ref: ModelRef) -> ExperimentSpec:
    if ref.experiment is None:
        raise SpecError(f"models[{ref.label}]", ref.name, "a 'trained' model with an experiment")
    return ref.experiment


def training_spec(ref: ModelRef) -> ExperimentSpec:
    """The open set experiment of a ``trained`` model, reduced to what severity needs: its
    checkpoint and split outputs (its own detectors and OOD sets do not enter either key)."""
    return attrs.evolve(experiment_of(ref), detectors=("msp",), ood=("held_out",))


def checkpoint_key(ref: ModelRef, seed: int) -> str:
    """The open set checkpoint key of a ``trained`` model in ``seed``."""
    experiment = experiment_of(ref)
    streams = experiment.seeds.streams(model_seed(ref, seed) or 0)
    return artifact_keys.checkpoint_key(experiment, streams)


def training_task(ref: ModelRef, seed: int) -> Task:
    """The open set task that trains a ``trained`` model and infers its split."""
    own_seed = model_seed(ref, seed)
    assert own_seed is not None
    task = simulation_task(training_spec(ref), own_seed)
    return attrs.evolve(task, label=f"train {ref.label} (seed {own_seed})")


def model_identity(ref: ModelRef, seed: int) -> str:
    """What a model's outputs depend on: its checkpoint key (``trained``) or its key."""
    return checkpoint_key(ref, seed) if ref.prefix == "trained" else ref.key


# --------------------------------------------------------------------------- keys


def outputs_key(
    identity: str,
    source: SourceSpec,
    per_class: int | None,
    features: bool,
    shard: int | None = None,
    noise: int | None = None,
) -> str:
    """Key of a severity ``outputs`` entry; ``noise`` is the seed's ``ood_sampling`` entropy
    for noise sources (their images are drawn anew per seed)."""
    fields = {
        "model": identity,
        "source": source.key,
        "per_class": per_class,
        "features": features,
        "shard": shard,
        "noise": noise,
    }
    return digest(OUTPUTS_TAG, f"{VERSION}/{zoo.VERSION}/{versions.INFERENCE}", fields)


def kappa(part: Part, detector: DetectorSpec, streams: SeedStreams) -> Kappa:
    """A model-based κ of ``detector`` on ``part``; a stochastic one (a ``seed`` parameter the
    spec leaves open) is seeded from the run's ``inference`` stream, as in open set runs, and
    keyed by it."""
    params = detector.kwargs
    per_seed = "seed" in detector_info(detector).defaults and "seed" not in params
    if per_seed:
        params["seed"] = streams.torch_seed("inference")
    fields = {
        "outputs": part.key,
        "prefix": part.prefix,
        "detector": detector.key,
        "inference": streams.entropy("inference") if per_seed else None,
        "chunk": KAPPA_CHUNK,
    }
    key = digest(KAPPA, detector.version, fields)
    return Kappa(detector, tuple(sorted(params.items())), key)


def model_detectors(spec: SeveritySpec) -> list[DetectorSpec]:
    return [d for d in spec.detectors if "model" in detector_info(d).needs]


# --------------------------------------------------------------------------- parts


def source_units(
    spec: SeveritySpec,
    ref: ModelRef,
    seed: int,
    source: SourceSpec,
    per_class: int | None,
    *,
    with_kappa: bool,
) -> list[Unit]:
    """The units (one per class shard) that give one model's outputs on one source."""
    own_seed = model_seed(ref, seed)
    streams = streams_of(spec, seed)
    if source.kind == "split":
        part = Part(artifact_keys.outputs_key(checkpoint_key(ref, seed)), source.subset)
        parts = [(part, None)]
    else:
        identity = model_identity(ref, seed)
        noise = streams.entropy("ood_sampling") if source.is_noise else None
        shards = n_shards(source)
        parts = [
            (Part(outputs_key(identity, source, per_class, spec.features, s, noise)), s)
            for s in ([None] if shards is None else range(shards))
        ]
    detectors = model_detectors(spec) if with_kappa else []
    return [
        Unit(
            ref,
            own_seed,
            source,
            per_class,
            shard,
            part,
            spec.features,
            streams if source.is_noise else None,
            tuple(kappa(part, d, streams) for d in detectors),
        )
        for part, shard in parts
    ]


def id_units(spec: SeveritySpec, pool: PoolSpec, ref: ModelRef, seed: int) -> list[Unit]:
    """The ID test set of one dataset: inferred for all its samples (a seed draws its
    ``max_per_class`` subsample when scoring)."""
    return source_units(spec, ref, seed, pool.id, None, with_kappa=True)


def ood_units(spec: SeveritySpec, pool: PoolSpec, ref: ModelRef, seed: int) -> list[Unit]:
    """The OOD class pool of one dataset, source by source (and shard by shard)."""
    return [
        unit
        for source in pool.ood
        for unit in source_units(
            spec, ref, seed, source, spec.pool_per_class(source), with_kappa=True
        )
    ]


def fit_units(spec: SeveritySpec, ref: ModelRef, seed: int) -> dict[str, list[Unit]]:
    """The ID fit sets of a model by split name (``train``/``val``); empty when none is needed.
    ``[fit]`` serves both; a ``trained`` model defaults to its split's ``in_train``/``in_val``."""
    if not spec.needs_fit:
        return {}
    if spec.fit is not None:
        units = source_units(spec, ref, seed, spec.fit, spec.fit.max_per_class, with_kappa=False)
        return {"train": units, "val": units}
    return {
        which: source_units(
            spec, ref, seed, SourceSpec(kind="split", subset=f"in_{which}"), None, with_kappa=False
        )
        for which in ("train", "val")
    }


def units(spec: SeveritySpec, seed: int) -> list[Unit]:
    """Every unit of one seed, once per part (model-based κ merged where roles share a part)."""
    found: dict[Part, Unit] = {}
    for ref in spec.models:
        every = [u for pool in spec.datasets for u in id_units(spec, pool, ref, seed)]
        every += [u for pool in spec.datasets for u in ood_units(spec, pool, ref, seed)]
        every += [u for group in fit_units(spec, ref, seed).values() for u in group]
        for unit in every:
            known = found.get(unit.part)
            if known is None or len(unit.kappas) > len(known.kappas):
                found[unit.part] = unit
    return list(found.values())


# --------------------------------------------------------------------------- before compute


def preflight(spec: SeveritySpec, store: Store, seeds: Sequence[int]) -> None:
    """What can fail before compute: data folders, weights, cache, ID/OOD class overlap, and
    the data, split and architecture of each ``trained`` model (:meth:`Simulation.check`)."""
    check_data(spec)
    for ref in spec.models:
        prefix, arch, tag = split_name(ref.name)
        if ref.pretrained and not ref.weights and prefix in ("timm", "torchvision"):
            if prefix == "timm":
                found, looked = find_timm_weights(arch, tag)
            else:
                _, found, looked = find_torchvision_weights(arch, tag)
            if found is None:
                raise missing_weights(ref.name, looked)
        if prefix == "trained":
            _check_overlap(spec, ref, seeds)
            # the open set simulation that trains it, checked as a worker would set it up
            simulation(training_spec(ref), model_seed(ref, seeds[0]) or 0, store).check()
    store.ensure_writable()
    warn_legacy_outputs(store)


def _check_overlap(spec: SeveritySpec, ref: ModelRef, seeds: Sequence[int]) -> None:
    """An OOD source from a trained model's dataset must not contain its ID classes (in any
    seed the run may take: unpinned models draw their class split per seed)."""
    experiment = experiment_of(ref)
    data = trained_data(ref)
    for seed in sorted({model_seed(ref, s) for s in seeds}, key=lambda s: s or 0):
        streams = experiment.seeds.streams(seed or 0)
        known = set(split_classes(data.n_classes, experiment.split, streams).known)
        for field, source in spec.named_sources():
            if "ood" not in field or source.kind != "dataset":
                continue
            if source.name != experiment.dataset.name:
                continue
            overlap = sorted(known & set(pick_classes(source, data.class_names)))
            if overlap:
                raise SpecError(
                    f"{field}.classes",
                    [data.class_names[c] for c in overlap],
                    f"classes other than the ID classes of model {ref.label!r} in seed {seed} "
                    f"({[data.class_names[c] for c in sorted(known)]})",
                )
