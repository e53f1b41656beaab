"""The open set protocol: split, train (or load), infer (or load), score every detector.

One seed is one simulation. :data:`PROTOCOL` plans one task per seed (:func:`compute_seed`,
run on a Dask worker by the engine), which consults the store for every artifact first and
computes only what is missing:

- ``checkpoint``: trained weights + input normalization, per (dataset, split, model, training,
  training streams);
- ``outputs``: logits, features, labels and sample indices of every subset of the split;
- ``ood_outputs``: the same for each extra OOD test set (another dataset, noise);
- ``kappa``: κ of a model-based detector (ODIN, MC dropout) on one evaluated subset;
- ``degenerate_verdict``: the degenerate rule's verdict on the validation outputs, where it took
  the permutation test (written by scoring, not by the task: :mod:`oodsim.protocols.degenerate`).

Scoring (:meth:`OpenSetProtocol.score`) reads these entries; logit/feature detectors are cheap
and never cached, so adding one to a finished experiment reads the cached arrays only.

The entries and the task that fills them are :mod:`oodsim.artifacts` (the severity protocol
plans the same ones for its ``trained`` models); :mod:`.scoring` scores a seed from them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from oodsim.artifacts.compute import compute_seed, simulation_task
from oodsim.artifacts.keys import (
    CHECKPOINT,
    HELD_OUT,
    KAPPA,
    OOD_OUTPUTS,
    OUTPUTS,
    PartKeys,
    checkpoint_key,
    entries,
    kappa_key,
    ood_outputs_key,
    outputs_key,
)
from oodsim.artifacts.simulation import SimulationFailed, simulation, trained_model
from oodsim.data.registry import dataset_info
from oodsim.metrics import COVERAGES
from oodsim.protocols.base import Protocol, Task
from oodsim.protocols.open_set.scoring import score, scores_selective
from oodsim.results import DEGENERATE, NO_SEVERITY, Layout, SeedResult, design_coord
from oodsim.simulation.splits import split_classes
from oodsim.specs import ExperimentSpec, spec_from_dict
from oodsim.store import Store

__all__ = [
    "CHECKPOINT",
    "HELD_OUT",
    "KAPPA",
    "OOD_OUTPUTS",
    "OUTPUTS",
    "PROTOCOL",
    "OpenSetProtocol",
    "SimulationFailed",
    "checkpoint_key",
    "class_split_label",
    "compute_seed",
    "entries",
    "kappa_key",
    "ood_outputs_key",
    "outputs_key",
    "score",
    "trained_model",
]


def class_split_label(spec: ExperimentSpec, seed: int) -> str:
    """The known classes of a seed, e.g. "0-3-5-7-8-9": drawn again from its ``class_split``
    stream (milliseconds), never read from a stored record that could have been altered."""
    info = dataset_info(spec.dataset.name)
    n_classes = info.n_classes
    if n_classes is None:  # a folder of classes: as many as the data has
        n_classes = spec.dataset.load().n_classes
    streams = spec.seeds.streams(seed)
    return split_classes(n_classes, spec.split, streams).label


class OpenSetProtocol(Protocol):
    """Open set simulations (the randomness study): one seed is one simulation."""

    name = "open_set"
    spec_type = ExperimentSpec
    unit = "simulations"

    spec: ExperimentSpec

    @classmethod
    def from_data(cls, data: Mapping[str, Any], base: Path | None) -> ExperimentSpec:
        return spec_from_dict(data)

    def preflight(self, store: Store) -> None:
        """The first seed's simulation checked as a worker would set it up (data, split,
        model: :meth:`Simulation.check`), then the cache writable. The checks only read, so
        bad input leaves the cache directory untouched."""
        simulation(self.spec, self.spec.seeds.all()[0], store).check()
        store.ensure_writable()

    @functools.cached_property
    def part_keys(self) -> PartKeys:
        """The keys of the spec and its parts, hashed once for the run (this object lives
        for one run: :func:`oodsim.protocols.bind`)."""
        return PartKeys.of(self.spec)

    def plan(self, seed: int) -> list[Task]:
        return [simulation_task(self.spec, seed, self.part_keys)]

    def score(self, seed: int, store: Store) -> SeedResult:
        spec = self.spec
        sim = simulation(spec, seed, store, self.part_keys)
        scored = score(sim)
        scores = scored.score[:, :, None, :]  # severity axis
        variables = {
            "score": scores if spec.varies_ood else scores[..., 0],
            "degenerate": np.array(scored.degenerate),
            "detector_params": np.array(scored.params),
        }
        if scored.class_auroc is not None:
            variables["class_auroc"] = scored.class_auroc
        if scored.risk_coverage is not None:
            variables["risk_coverage"] = scored.risk_coverage
        excluded = scored.degenerate and not spec.degenerate.keep
        failure = DEGENERATE.message(scored.degenerate) if excluded else ""
        return SeedResult(seed, variables, failure=failure)

    def seed_coords(self, seed: int, store: Store) -> dict[str, Any]:
        """The seed's class split and, under ``[seeds.design]``, the level of each designed
        stream (``stream_<name>``, an integer: the grid the variance components fit)."""
        levels = self.spec.seeds.design_levels(seed)
        return {"class_split": class_split_label(self.spec, seed)} | {
            design_coord(stream): level for stream, level in levels.items()
        }

    def layout(self) -> Layout:
        spec = self.spec
        coords: dict[str, list[str]] = {
            "method": [d.label for d in spec.detectors],
            "metric": list(spec.metrics),
            "severity": [NO_SEVERITY],
        }
        dims = ("method", "metric", "severity")
        if spec.varies_ood:
            coords["ood"] = [o.label for o in spec.ood]
            dims += ("ood",)
        variables = {"score": dims, "degenerate": (), "detector_params": ("method",)}
        if any(ood.kind == HELD_OUT for ood in spec.ood):
            # the dataset's class names: the driver has read the data for its first seed
            coords["ood_class"] = list(spec.dataset.load().class_names)
            variables["class_auroc"] = ("method", "ood_class")
        if scores_selective(spec.metrics):
            coords["coverage"] = list(COVERAGES)
            variables["risk_coverage"] = ("method", "coverage")
        designed = tuple(design_coord(stream) for stream, _ in spec.seeds.designed_streams())
        return Layout(coords, variables, seed_coords=("class_split", *designed))


PROTOCOL = OpenSetProtocol
