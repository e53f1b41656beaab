"""Severity scoring: κ, levels and metrics of every (model, κ) from cached outputs, and the
result Dataset.

Runs in the client process after :mod:`oodsim.protocols.severity_run` has filled the store; it
reads the entries that :mod:`oodsim.protocols.severity_plan` names, one at a time, reduces them
to κ and builds the levels with :mod:`oodsim.protocols.severity`. Nothing here infers a model,
so scoring a new κ or seed from a full cache costs no compute.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import xarray as xr

from oodsim.outputs import Outputs
from oodsim.protocols.severity_plan import (
    KAPPA,
    OUTPUTS,
    SeverityRunError,
    Task,
    fit_sources,
    source_tasks,
)
from oodsim.protocols.severity_spec import SeveritySpec, detector_info
from oodsim.store import Store


@attrs.frozen(eq=False)
class ModelScores:
    """Everything one model contributes to the result."""

    scores: np.ndarray  # (method, metric, level)
    level_severity: np.ndarray  # (method, level)
    level_classes: list[list[str]]  # [method][level] → JSON list of class labels
    id_accuracy: float
    id_auroc: np.ndarray  # (method,)
    n_classes: int
    group_size: int
    dropped: dict[str, int]


def _entry(store: Store, task: Task, kind: str = OUTPUTS, key: str | None = None) -> Any:
    entry = store.get(kind, key or task.outputs_key)
    if entry is None:
        raise SeverityRunError(
            f"{kind} entry of source {task.source.label!r} (model {task.model}) is missing or "
            "corrupt in the store; run again to recompute it"
        )
    return entry


def _outputs(entry: Any, ood: bool) -> Outputs:
    arrays = entry.arrays
    labels = np.full(len(arrays["logits"]), -1) if ood else arrays["targets"]
    return Outputs(logits=arrays["logits"], features=arrays.get("features"), labels=labels)


def _load_outputs(store: Store, tasks: Sequence[Task]) -> tuple[list[Outputs], list[str]]:
    """Outputs of all shards of one ID source (one per shard) and its class names."""
    entries = [_entry(store, t) for t in tasks]
    names = [n for e in entries for n in e.meta["class_names"]]
    return [_outputs(e, ood=False) for e in entries], names


@attrs.define
class _Pool:
    """The OOD pool of one model, gathered entry by entry: κ per detector, class labels."""

    n_detectors: int
    names: list[str] = attrs.field(factory=list)
    labels: list[np.ndarray] = attrs.field(factory=list)
    kappas: list[list[np.ndarray]] = attrs.field(factory=list)

    def __attrs_post_init__(self) -> None:
        self.kappas = [[] for _ in range(self.n_detectors)]

    def add(self, task: Task, entry: Any, kappas: Sequence[np.ndarray]) -> None:
        classes = entry.meta["class_names"]
        noise = task.source.is_noise
        self.labels.append(entry.arrays["labels"] + len(self.names))
        self.names += [task.source.label if noise else f"{task.source.label}/{c}" for c in classes]
        for j, kappa in enumerate(kappas):
            self.kappas[j].append(np.asarray(kappa, dtype=np.float64))


def _kappas(
    spec: SeveritySpec, store: Store, task: Task, outputs: Outputs, fits: Mapping[str, Outputs]
) -> list[np.ndarray]:
    """κ of every detector on one entry: from the entry's logits/features, or its κ entries."""
    from oodsim.detectors import confidence

    model_kappa = dict(task.kappa_keys)
    out = []
    for j, detector in enumerate(spec.detectors):
        info = detector_info(detector)
        if "model" in info.needs:
            out.append(_entry(store, task, KAPPA, model_kappa[j]).arrays["kappa"])
        else:
            fit = fits.get(info.fit_on) if info.fit_on else None
            out.append(confidence(detector.name, outputs, fit=fit, **detector.kwargs))
    return out


def score_model(spec: SeveritySpec, model: int, store: Store) -> ModelScores:
    """Levels and metrics of every κ of one model, from its cached outputs.

    Pool entries are read one at a time and reduced to κ, so memory holds the κ of the whole
    pool but the logits/features of one shard only.
    """
    from oodsim.protocols import severity as sev

    ref = spec.models[model]
    fits: dict[str, Outputs] = {}
    for which, source in fit_sources(spec, ref).items():
        tasks = source_tasks(spec, model, f"fit_{which}", source, source.max_per_class)
        fits[which] = Outputs.concat(_load_outputs(store, tasks)[0])
    id_tasks = source_tasks(spec, model, "id", spec.id, spec.id.max_per_class)
    id_parts, id_names = _load_outputs(store, id_tasks)
    id_out = Outputs.concat(id_parts)
    per_entry = [_kappas(spec, store, t, o, fits) for t, o in zip(id_tasks, id_parts)]
    id_kappa = [np.concatenate(k) for k in zip(*per_entry)]
    known = id_out.labels >= 0
    correct = id_out.logits.argmax(axis=1) == id_out.labels
    accuracy = float(correct[known].mean()) if known.any() else float("nan")
    group_size = spec.group_size or len(id_names)

    pool = _Pool(len(spec.detectors))
    for source in spec.ood:
        for task in source_tasks(spec, model, "ood", source, spec.pool_per_class(source)):
            entry = _entry(store, task)
            outputs = _outputs(entry, ood=True)
            pool.add(task, entry, _kappas(spec, store, task, outputs, fits))
    pool_labels = np.concatenate(pool.labels)

    n_det, n_levels = len(spec.detectors), spec.n_levels
    scores = np.full((n_det, len(spec.metrics), n_levels), np.nan)
    level_sev = np.full((n_det, n_levels), np.nan)
    level_cls: list[list[str]] = []
    id_aurocs = np.full(n_det, np.nan)
    dropped: dict[str, int] = {}
    for j in range(n_det):
        bench = sev.severity_benchmark(
            id_kappa[j],
            np.concatenate(pool.kappas[j]),
            pool_labels,
            group_size=group_size,
            rng=spec.seed,
            n_levels=n_levels,
            n_est=spec.n_est,
            n_test=spec.n_test,
            metrics=spec.metrics,
        )
        scores[j] = np.stack([bench.metrics[m] for m in spec.metrics])
        level_sev[j] = bench.level_severity
        level_cls.append(
            [json.dumps([pool.names[c] for c in bench.level_classes(i)]) for i in range(n_levels)]
        )
        id_aurocs[j] = sev.id_auroc(id_kappa[j][known], correct[known])
        dropped = {pool.names[int(c)]: n for c, n in bench.split.dropped.items()}
    n_kept = len(pool.names) - len(dropped)
    return ModelScores(
        scores, level_sev, level_cls, accuracy, id_aurocs, n_kept, group_size, dropped
    )


def assemble(
    spec: SeveritySpec, per_model: Sequence[ModelScores], extra: Mapping[str, Any] | None = None
) -> xr.Dataset:
    """The result Dataset: ``score`` (model, method, metric, severity) plus level coordinates."""
    from oodsim.results import package_versions

    models = [m.label for m in spec.models]
    methods = [d.label for d in spec.detectors]
    levels = [str(i) for i in range(spec.n_levels)]
    dims3 = ("model", "method", "severity")
    coords = {
        "model": models,
        "method": methods,
        "metric": list(spec.metrics),
        "severity": levels,
        "level_severity": (dims3, np.stack([m.level_severity for m in per_model])),
        "level_classes": (dims3, np.array([m.level_classes for m in per_model], dtype=str)),
    }
    return xr.Dataset(
        {
            "score": (
                ("model", "method", "metric", "severity"),
                np.stack([m.scores for m in per_model]),
            ),
            "id_accuracy": ("model", np.array([m.id_accuracy for m in per_model])),
            "id_auroc": (("model", "method"), np.stack([m.id_auroc for m in per_model])),
            "n_pool_classes": ("model", np.array([m.n_classes for m in per_model])),
            "group_size": ("model", np.array([m.group_size for m in per_model])),
        },
        coords=coords,
        attrs={
            "protocol": "severity",
            "experiment": spec.name,
            "spec": spec.to_json(),
            "spec_key": spec.key,
            "versions": json.dumps(package_versions()),
            "dropped_classes": json.dumps(
                {m.label: s.dropped for m, s in zip(spec.models, per_model)}
            ),
            "seed": spec.seed,
            **(extra or {}),
        },
    )
