"""Severity plan: the store entries a severity spec needs, and the tasks that produce them.

One :class:`Task` per (model, source[, class shard]) gives a ``severity_outputs`` entry (logits,
features, labels) and the ``severity_kappa`` entries of the model-based κ (ODIN, MC dropout).
Their content keys live here, apart from the compute (:mod:`oodsim.protocols.severity_run`),
because the scoring (:mod:`oodsim.protocols.severity_scoring`) finds its inputs by the same
plan. Changing a key or its version here invalidates cached entries.
"""

from __future__ import annotations

import attrs

from oodsim.errors import OodsimError
from oodsim.keys import digest
from oodsim.models.zoo import ModelRef
from oodsim.protocols.severity_sources import VERSION, n_shards
from oodsim.protocols.severity_spec import SeveritySpec, SourceSpec, detector_info
from oodsim.specs import DetectorSpec

OUTPUTS = "severity_outputs"
KAPPA = "severity_kappa"


class SeverityRunError(OodsimError):
    """A (model, source) task failed: non-finite outputs, unreadable images, wrong labels."""


@attrs.frozen
class Task:
    """One (model, source[, shard]) unit of work: its outputs entry and model-based κ entries."""

    model: int  # index into spec.models
    role: str  # "id", "ood", "fit_train", "fit_val"
    source: SourceSpec
    per_class: int | None
    shard: int | None  # index of the class shard of an image folder, else None
    outputs_key: str
    kappa_keys: tuple[tuple[int, str], ...]  # (detector index, key)

    def entries(self) -> list[tuple[str, str]]:
        return [(OUTPUTS, self.outputs_key)] + [(KAPPA, key) for _, key in self.kappa_keys]


def outputs_key(
    ref: ModelRef,
    source: SourceSpec,
    per_class: int | None,
    features: bool,
    shard: int | None = None,
) -> str:
    from oodsim.models import inference, zoo

    fields = {
        "model": ref.key,
        "source": source.key,
        "per_class": per_class,
        "features": features,
        "shard": shard,
    }
    return digest(OUTPUTS, f"{VERSION}/{zoo.VERSION}/{inference.VERSION}", fields)


def kappa_key(outputs: str, detector: DetectorSpec, seed: int) -> str:
    fields = {"outputs": outputs, "detector": detector.key, "seed": seed}
    return digest(KAPPA, detector.version, fields)


def fit_sources(spec: SeveritySpec, ref: ModelRef) -> dict[str, SourceSpec]:
    """The ID fit sets of a model by split name (``train``/``val``); empty when none is needed."""
    if not spec.needs_fit:
        return {}
    if spec.fit is not None:
        return {"train": spec.fit, "val": spec.fit}
    return {which: SourceSpec(kind="split", subset=f"in_{which}") for which in ("train", "val")}


def source_tasks(
    spec: SeveritySpec, model: int, role: str, source: SourceSpec, per_class: int | None
) -> list[Task]:
    """The tasks (one per shard) that give one model's outputs on one source."""
    ref = spec.models[model]
    detectors = [(j, d) for j, d in enumerate(spec.detectors) if "model" in detector_info(d).needs]
    shards = n_shards(source)
    tasks = []
    for shard in [None] if shards is None else range(shards):
        key = outputs_key(ref, source, per_class, spec.features, shard)
        kappas: tuple[tuple[int, str], ...] = ()
        if role in ("id", "ood"):
            kappas = tuple((j, kappa_key(key, d, spec.seed)) for j, d in detectors)
        tasks.append(Task(model, role, source, per_class, shard, key, kappas))
    return tasks


def _roles(spec: SeveritySpec, model: int) -> list[tuple[str, SourceSpec, int | None]]:
    """(role, source, samples per class) of every source one model is run on."""
    roles = [("id", spec.id, spec.id.max_per_class)]
    roles += [("ood", s, spec.pool_per_class(s)) for s in spec.ood]
    fits = fit_sources(spec, spec.models[model])
    return roles + [(f"fit_{w}", s, s.max_per_class) for w, s in fits.items()]


def plan(spec: SeveritySpec) -> list[Task]:
    """Every task of a spec, with the store entries it produces (one fit set serves both)."""
    tasks, seen = [], set()
    for i in range(len(spec.models)):
        for role, source, per_class in _roles(spec, i):
            for task in source_tasks(spec, i, role, source, per_class):
                if task.outputs_key not in seen:
                    seen.add(task.outputs_key)
                    tasks.append(task)
    return tasks
