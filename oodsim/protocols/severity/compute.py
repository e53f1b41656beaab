"""Severity compute: the engine tasks of one seed and the work they do on a worker.

:func:`tasks` turns the :mod:`~oodsim.protocols.severity.plan` of a seed into
:class:`~oodsim.protocols.base.Task` objects: the open set training task of each ``trained``
model, then one task per :class:`~oodsim.protocols.severity.plan.Unit` that waits for it.
:func:`run_unit` (run on a worker by the engine) loads the model (:func:`load_model`), reads the
unit's samples (:mod:`~oodsim.protocols.severity.sources`), infers them with the zoo's inference
helpers and stores the outputs and the model-based κ.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import attrs
import numpy as np
import torch

from oodsim.artifacts.kappa import model_kappa, put_kappa
from oodsim.artifacts.outputs import put_outputs
from oodsim.artifacts.simulation import trained_model
from oodsim.detectors import NonFiniteKappaError
from oodsim.keys import digest
from oodsim.models.tensors import device as model_device
from oodsim.outputs import Outputs
from oodsim.protocols.base import SeedFailed, Task, stored
from oodsim.protocols.severity.plan import (
    KAPPA,
    KAPPA_CHUNK,
    Kappa,
    Unit,
    training_task,
    units,
)
from oodsim.protocols.severity.sources import (
    VERSION,
    SourceItems,
    noise_rng,
    source_items,
    trained_data,
)
from oodsim.protocols.severity.spec import SeveritySpec
from oodsim.store import Store
from oodsim.zoo import (
    LoadedModel,
    ModelRef,
    Preprocessing,
    array_batches,
    file_batches,
    infer_tensors,
)
from oodsim.zoo import load_model as load_zoo_model


def tasks(spec: SeveritySpec, seed: int) -> list[Task]:
    """The tasks of one seed: training of ``trained`` models, then one task per unit (a task
    shared by several seeds, e.g. a pretrained model on a dataset, has the same key in each)."""
    found: dict[str, Task] = {}
    training: dict[str, str] = {}  # model label → key of its training task
    for ref in spec.models:
        if ref.prefix == "trained":
            task = training_task(ref, seed)
            found.setdefault(task.key, task)
            training[ref.label] = task.key
    for unit in units(spec, seed):
        entries = unit.entries
        if not entries:  # a split part without model-based κ: the training task fills it
            continue
        key = digest("severity_task", VERSION, {"entries": [list(e) for e in entries]})
        after = (training[unit.ref.label],) if unit.ref.label in training else ()
        label = f"{unit.ref.label} on {unit.source.label}"
        found.setdefault(key, Task(key, entries, partial(run_unit, unit), after, label=label))
    return list(found.values())


# --------------------------------------------------------------------------- models


def load_model(ref: ModelRef, seed: int | None, store: Store) -> LoadedModel:
    """A zoo model, or the ``trained`` CNN of one seed of its open set experiment (trained and
    stored if missing) with the open set preprocessing: ``conform`` to the training shape,
    then the training normalization."""
    if ref.prefix != "trained":
        return load_zoo_model(ref)
    assert ref.experiment is not None and seed is not None
    model, mean, std, split = trained_model(ref.experiment, seed, store)
    shape = trained_data(ref).shape
    preprocessing = Preprocessing(
        kind="conform", crop_size=shape[:2], mean=mean, std=std, channels=shape[2]
    )
    source = f"open set checkpoint (seed {seed}, known classes {split.classes.known})"
    return LoadedModel(model.eval(), preprocessing, len(split.classes.known), None, source, split)


# --------------------------------------------------------------------------- one unit


def _batches(items: SourceItems, preprocessing: Any, batch_size: int) -> Iterator[Any]:
    if items.images is not None:
        return array_batches(items.images, preprocessing, batch_size)
    return file_batches(items.files or (), preprocessing, batch_size)


def _model_kappa(
    kappa: Kappa,
    model: Any,
    items: SourceItems,
    outputs: Outputs,
    preprocessing: Any,
    batch_size: int,
    device: str,
) -> np.ndarray:
    """κ of a detector that runs the network, :data:`KAPPA_CHUNK` samples at a time."""

    def inputs_of(rows: slice) -> Any:
        return torch.cat(list(_batches(items.take(rows), preprocessing, batch_size))).to(device)

    return model_kappa(
        kappa.detector.name, outputs, model, inputs_of, KAPPA_CHUNK, **dict(kappa.params)
    )


@attrs.define
class _Work:
    """The lazily loaded model and samples of one unit on a worker (each loaded at most once)."""

    unit: Unit
    store: Store
    batch_size: int = 256
    device: str = attrs.field(factory=model_device)
    _loaded: LoadedModel | None = None
    _items: SourceItems | None = None

    @property
    def loaded(self) -> LoadedModel:
        if self._loaded is None:
            self._loaded = load_model(self.unit.ref, self.unit.seed, self.store)
            self._loaded.model.to(self.device)
        return self._loaded

    @property
    def items(self) -> SourceItems:
        if self._items is None:
            unit = self.unit
            noise = noise_rng(unit.streams, unit.source) if unit.streams is not None else None
            items = source_items(
                unit.source, unit.per_class, self.loaded, unit.ref, unit.shard, noise
            )
            if len(items) == 0:
                raise SeedFailed(f"{unit.source.label}: no samples for model {unit.ref.label}")
            self._items = items
        return self._items

    def infer(self) -> None:
        """Infer the unit's samples and store its ``outputs`` entry."""
        unit, loaded, items = self.unit, self.loaded, self.items
        batches = _batches(items, loaded.preprocessing, self.batch_size)
        logits, features = infer_tensors(loaded.model, batches, self.device)
        if not (np.isfinite(logits).all() and np.isfinite(features).all()):
            raise SeedFailed(
                f"model {unit.ref.label} gave non-finite outputs on {unit.source.label}"
            )
        arrays = {
            "logits": logits,
            "labels": items.labels,
            "targets": items.targets,
            "index": items.index,
        }
        if unit.features:
            arrays["features"] = features
        put_outputs(
            self.store,
            unit.part.key,
            arrays,
            {
                "describe": f"{unit.ref.label} on {unit.source.label} ({len(items)} samples)",
                "class_names": list(items.class_names),
                "weights": loaded.source,
                "preprocessing": loaded.preprocessing.describe(),
            },
        )

    def outputs(self) -> Outputs:
        part = self.unit.part
        entry = stored(
            self.store, *part.entry, f"outputs of {self.unit.ref.label} on {self.unit.source.label}"
        )
        return Outputs(
            logits=entry.arrays[part.array("logits")],
            features=entry.arrays.get(part.array("features")),
            labels=self.items.targets,
        )

    def kappa(self, kappa: Kappa, outputs: Outputs) -> None:
        """Compute and store one model-based κ."""
        loaded, label = self.loaded, self.unit.source.label
        try:
            values = _model_kappa(
                kappa,
                loaded.model,
                self.items,
                outputs,
                loaded.preprocessing,
                self.batch_size,
                self.device,
            )
        except NonFiniteKappaError as error:
            raise SeedFailed(
                f"detector {kappa.detector.label} gave non-finite κ on {label}: {error}"
            ) from None
        put_kappa(
            self.store,
            kappa.key,
            values,
            f"{kappa.detector.label} of {self.unit.ref.label} on {label}",
            kind=KAPPA,
        )


def run_unit(unit: Unit, store: Store) -> None:
    """The task of one unit: infer its outputs unless stored, then its missing model-based κ.

    Entries are computed under the store's lock (:meth:`~oodsim.store.Store.ensure`): two
    seeds' tasks that share an outputs entry (a stochastic κ makes their keys differ) infer it
    once. Non-finite outputs or κ fail the seeds that use them (:class:`SeedFailed`).
    """
    work = _Work(unit, store)
    if unit.part.inferred:
        store.ensure(*unit.part.entry, work.infer)
    missing = [k for k in unit.kappas if not store.has(KAPPA, k.key)]
    if missing:
        outputs = work.outputs()
        for kappa in missing:
            store.ensure(KAPPA, kappa.key, lambda k=kappa: work.kappa(k, outputs))
