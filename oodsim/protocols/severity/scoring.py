"""Severity scoring: κ, levels and metrics of one seed, from cached outputs.

Runs where the engine scores a seed (a worker, or the driver when everything is cached). For
each model it reads the entries that :mod:`~oodsim.protocols.severity.plan` names, one at a
time, and reduces them to κ; a detector with a fit split (Mahalanobis, kNN, ViM, OpenMax,
temperature) is fitted once per (model, detector, seed) on the concatenated outputs of every
source. Then, per dataset, the seed draws its ID test subsample and the estimation/test split
of every OOD class, and :func:`~oodsim.protocols.severity.levels.severity_benchmark` builds the
levels of every (model, κ). Nothing here infers a model, so scoring a new κ or seed from a full
cache costs no compute.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from oodsim.artifacts import keys as artifact_keys
from oodsim.detectors import confidence
from oodsim.outputs import Outputs
from oodsim.protocols.base import checked_kappa, stored
from oodsim.protocols.degenerate import stored_judgement
from oodsim.protocols.severity import levels, plan
from oodsim.protocols.severity.plan import (
    KAPPA,
    Part,
    Unit,
    fit_units,
    id_units,
    kappa,
    ood_units,
    streams_of,
)
from oodsim.protocols.severity.sources import child_sequence, ood_class_names, subsample
from oodsim.protocols.severity.spec import PoolSpec, SeveritySpec, detector_info
from oodsim.results import DEGENERATE, Layout, SeedResult
from oodsim.seeds import SeedStreams
from oodsim.store import Store
from oodsim.zoo import ModelRef

#: per-seed variables besides ``score``, with their dims after the leading ones
VARIABLES: dict[str, tuple[str, ...]] = {
    "score": ("method", "metric", "severity"),
    "level_severity": ("method", "severity"),
    "level_classes": ("method", "severity"),
    "class_severity": ("method", "ood_class"),
    "id_accuracy": (),
    "id_auroc": ("method",),
    "n_pool_classes": (),
    "group_size": (),
    "dropped_classes": (),
    "degenerate": (),
}
_STRINGS = ("level_classes", "dropped_classes", "degenerate")


def ood_classes(spec: SeveritySpec) -> list[str]:
    """Every OOD class of every pool, by the name ``level_classes`` gives it, in pool order
    (a class that two pools share is listed once)."""
    names = [n for pool in spec.datasets for source in pool.ood for n in ood_class_names(source)]
    return list(dict.fromkeys(names))


def layout(spec: SeveritySpec) -> Layout:
    """``score`` (method, metric, severity, model[, dataset]) and the level variables;
    ``class_severity`` (method, ood_class, ...): each class's mean confidence on the detector's
    ``confidence_scale`` (NaN for a class a pool lacks or drops); ``level_quantile``
    (severity,): the percentile of each level's window; ``confidence_scale`` (method,)."""
    coords: dict[str, list[Any]] = {
        "method": [d.label for d in spec.detectors],
        "metric": list(spec.metrics),
        "severity": list(spec.levels),
        "model": [m.label for m in spec.models],
        "ood_class": ood_classes(spec),
    }
    tail: tuple[str, ...] = ("model",)
    if spec.varies_dataset:
        coords["dataset"] = [d.label for d in spec.datasets]
        tail += ("dataset",)
    quantile = np.arange(spec.n_levels) / (spec.n_levels - 1)
    scales = [detector_info(d).confidence_scale for d in spec.detectors]
    return Layout(
        coords,
        {name: dims + tail for name, dims in VARIABLES.items()},
        static={
            "level_quantile": (("severity",), quantile),
            "confidence_scale": (("method",), np.array(scales, dtype=str)),
        },
    )


# --------------------------------------------------------------------------- reading


def _entry(store: Store, part: Part, what: str, opened: dict[tuple[str, str], Any]) -> Any:
    """A part's store entry; open set split entries (one entry, several parts) are read once."""
    entry = opened.get(part.entry) or stored(store, *part.entry, what)
    if part.prefix:
        opened[part.entry] = entry
    return entry


@attrs.frozen(eq=False)
class _Read:
    """One part's outputs as scoring needs them: the outputs (kept only while a detector with a
    fit split needs them), class positions, targets (model columns) and predictions."""

    outputs: Outputs | None
    labels: np.ndarray
    targets: np.ndarray
    predicted: np.ndarray
    names: tuple[str, ...]


def _read(store: Store, unit: Unit, opened: dict[tuple[str, str], Any]) -> _Read:
    entry = _entry(store, unit.part, f"{unit.ref.label} on {unit.source.label}", opened)
    part, arrays = unit.part, entry.arrays
    logits = arrays[part.array("logits")]
    labels = arrays[part.array("labels")]
    if part.prefix:  # an open set split: labels are the model's classes
        targets = labels
        names = tuple(str(c) for c in range(logits.shape[1]))
    else:
        targets, names = arrays["targets"], tuple(entry.meta["class_names"])
    outputs = Outputs(logits=logits, features=arrays.get(part.array("features")))
    return _Read(outputs, labels, targets, logits.argmax(axis=1), names)


def _fit(store: Store, fit: Sequence[Unit], opened: dict[tuple[str, str], Any]) -> Outputs:
    """A fit set (its shards concatenated) with the model's classes as labels."""
    parts = [_read(store, unit, opened) for unit in fit]
    return Outputs.concat(
        [attrs.evolve(p.outputs, labels=p.targets) for p in parts if p.outputs is not None]
    )


@attrs.frozen(eq=False)
class _ModelKappa:
    """κ of every detector on every part of one model in one seed."""

    reads: dict[Part, _Read]
    kappa: dict[Part, np.ndarray]  # (detector, samples)

    @classmethod
    def compute(
        cls, spec: SeveritySpec, ref: ModelRef, seed: int, streams: SeedStreams, store: Store
    ) -> _ModelKappa:
        """Parts are read one at a time. κ without a fit split are computed part by part;
        κ with a fit split once, on all parts together (so each is fitted once); model-based
        κ are read from their entries."""
        every = [u for pool in spec.datasets for u in id_units(spec, pool, ref, seed)]
        every += [u for pool in spec.datasets for u in ood_units(spec, pool, ref, seed)]
        unique = list({u.part: u for u in every}.values())
        infos = [detector_info(d) for d in spec.detectors]
        fitted = [j for j, info in enumerate(infos) if info.fit_on]
        reads: dict[Part, _Read] = {}
        rows: dict[Part, list[np.ndarray]] = {}
        opened: dict[tuple[str, str], Any] = {}
        for unit in unique:
            read = _read(store, unit, opened)
            row = []
            for detector, info in zip(spec.detectors, infos):
                if "model" in info.needs:
                    key = kappa(unit.part, detector, streams).key
                    row.append(
                        stored(
                            store, KAPPA, key, f"κ of {detector.label} on {unit.source.label}"
                        ).arrays["kappa"]
                    )
                elif info.fit_on:
                    row.append(np.empty(0))  # filled below, for all parts at once
                else:
                    outputs = read.outputs
                    row.append(
                        checked_kappa(
                            detector.label,
                            seed,
                            lambda d=detector, o=outputs: confidence(d.name, o, **d.kwargs),
                        )
                    )
            rows[unit.part] = row
            reads[unit.part] = read if fitted else attrs.evolve(read, outputs=None)
        if fitted:
            needed = {infos[j].fit_on for j in fitted}
            fits = {
                which: _fit(store, group, opened)
                for which, group in fit_units(spec, ref, seed).items()
                if which in needed
            }
            pooled = Outputs.concat([reads[u.part].outputs for u in unique])
            bounds = np.cumsum([0] + [len(reads[u.part].labels) for u in unique])
            for j in fitted:
                detector, fit = spec.detectors[j], fits[infos[j].fit_on]
                values = checked_kappa(
                    detector.label,
                    seed,
                    lambda d=detector, f=fit: confidence(d.name, pooled, fit=f, **d.kwargs),
                )
                for i, unit in enumerate(unique):
                    rows[unit.part][j] = values[bounds[i] : bounds[i + 1]]
        return cls(reads, {part: np.stack(row) for part, row in rows.items()})


# --------------------------------------------------------------------------- one dataset


@attrs.frozen(eq=False)
class _Pool:
    """One dataset for one model in one seed: the ID test subsample and the OOD pool, as κ."""

    id_kappa: np.ndarray  # (detector, n_id)
    id_targets: np.ndarray
    id_correct: np.ndarray
    n_id_classes: int
    ood_kappa: np.ndarray  # (detector, n_ood)
    ood_labels: np.ndarray  # class position in ``names``
    names: list[str]

    @classmethod
    def gather(
        cls,
        spec: SeveritySpec,
        pool: PoolSpec,
        ref: ModelRef,
        seed: int,
        streams: SeedStreams,
        model: _ModelKappa,
    ) -> _Pool:
        reads = [model.reads[u.part] for u in id_units(spec, pool, ref, seed)]
        offsets = np.cumsum([0] + [len(r.names) for r in reads])
        id_labels = np.concatenate([r.labels + o for r, o in zip(reads, offsets)])
        rows = np.arange(len(id_labels))
        if pool.id.max_per_class:  # the seed's ID test subsample, the same for every model
            rng = np.random.default_rng(child_sequence(streams, "id_sampling", pool.id.key))
            rows = subsample(id_labels, pool.id.max_per_class, rng)
        id_parts = [u.part for u in id_units(spec, pool, ref, seed)]
        targets = np.concatenate([r.targets for r in reads])[rows]
        predicted = np.concatenate([r.predicted for r in reads])[rows]
        names: list[str] = []
        ood_labels, ood_kappa = [], []
        for unit in ood_units(spec, pool, ref, seed):
            read = model.reads[unit.part]
            ood_labels.append(read.labels + len(names))
            label = unit.source.label
            names += [label if unit.source.is_noise else f"{label}/{c}" for c in read.names]
            ood_kappa.append(model.kappa[unit.part])
        return cls(
            np.concatenate([model.kappa[p] for p in id_parts], axis=1)[:, rows],
            targets,
            predicted == targets,
            int(offsets[-1]),
            np.concatenate(ood_kappa, axis=1),
            np.concatenate(ood_labels),
            names,
        )

    def score(
        self, spec: SeveritySpec, streams: SeedStreams, pool: PoolSpec, classes: Sequence[str]
    ) -> dict[str, np.ndarray]:
        """The per-seed variables of this (model, dataset): levels and metrics of every κ;
        ``classes`` are the labels of the result's ``ood_class`` coordinate."""
        group_size = spec.group_size or self.n_id_classes
        split = child_sequence(streams, "estimation_split", pool.key)  # same for every κ, model
        known = self.id_targets >= 0
        n_det, n_levels = len(spec.detectors), spec.n_levels
        out: dict[str, Any] = {
            "score": np.full((n_det, len(spec.metrics), n_levels), np.nan),
            "level_severity": np.full((n_det, n_levels), np.nan),
            "level_classes": np.full((n_det, n_levels), "", dtype=object),
            "class_severity": np.full((n_det, len(classes)), np.nan),
            "id_accuracy": float(self.id_correct[known].mean()) if known.any() else np.nan,
            "id_auroc": np.full(n_det, np.nan),
            "group_size": group_size,
        }
        dropped: dict[str, int] = {}
        column = {name: c for c, name in enumerate(classes)}
        for j in range(n_det):
            bench = levels.severity_benchmark(
                self.id_kappa[j],
                self.ood_kappa[j],
                self.ood_labels,
                group_size=group_size,
                rng=split,
                n_levels=n_levels,
                n_est=spec.n_est,
                n_test=spec.n_test,
                metrics=spec.metrics,
                scale=detector_info(spec.detectors[j]).confidence_scale,
                id_correct=self.id_correct,
            )
            out["score"][j] = np.stack([bench.metrics[m] for m in spec.metrics])
            out["level_severity"][j] = bench.level_severity
            kept = [column[self.names[c]] for c in bench.split.classes]
            out["class_severity"][j, kept] = bench.class_severity
            for i in range(n_levels):
                classes = [self.names[c] for c in bench.level_classes(i)]
                out["level_classes"][j, i] = json.dumps(classes)
            out["id_auroc"][j] = levels.id_auroc(self.id_kappa[j][known], self.id_correct[known])
            dropped = {self.names[int(c)]: n for c, n in bench.split.dropped.items()}
        out["n_pool_classes"] = len(self.names) - len(dropped)
        out["dropped_classes"] = json.dumps(dropped, sort_keys=True)
        out["level_classes"] = out["level_classes"].astype(str)
        return out


# --------------------------------------------------------------------------- one seed


def _degenerate(ref: ModelRef, seed: int, store: Store) -> tuple[str, bool]:
    """Whether a ``trained`` model collapsed in ``seed`` (see :mod:`oodsim.protocols.degenerate`,
    judged on its own validation split) and whether its experiment keeps such seeds;
    ("", True) for pretrained models."""
    if ref.prefix != "trained":
        return "", True
    experiment = plan.experiment_of(ref)
    entry = (artifact_keys.OUTPUTS, artifact_keys.outputs_key(plan.checkpoint_key(ref, seed)))
    what = f"model {ref.label} in seed {seed}"
    arrays = stored(store, *entry, f"outputs of {what}").arrays
    verdict = stored_judgement(store, entry[1], arrays, experiment.degenerate.alpha, what)
    return verdict.reason, experiment.degenerate.keep


def score(spec: SeveritySpec, seed: int, store: Store) -> SeedResult:
    """Every variable of :func:`layout` for one seed, from the store. A seed in which a
    ``trained`` model is degenerate is excluded (``failure``) unless its experiment keeps it."""
    streams = streams_of(spec, seed)
    shaped = layout(spec)
    shape, classes = shaped.shape, shaped.coords["ood_class"]
    values: dict[str, np.ndarray] = {}
    excluded = []
    for i, ref in enumerate(spec.models):
        reason, keep = _degenerate(ref, seed, store)
        if reason and not keep:
            excluded.append(f"model {ref.label}: {reason}")
        model = _ModelKappa.compute(spec, ref, seed, streams, store)
        for d, pool in enumerate(spec.datasets):
            gathered = _Pool.gather(spec, pool, ref, seed, streams, model)
            part = gathered.score(spec, streams, pool, classes)
            part["degenerate"] = reason
            for name, value in part.items():
                if name not in values:
                    dtype = str if name in _STRINGS else np.float64
                    values[name] = np.empty(shape(name), dtype=object if dtype is str else dtype)
                cell = (..., i, d) if spec.varies_dataset else (..., i)
                values[name][cell] = value
    return SeedResult(
        seed,
        {n: v.astype(str) if v.dtype == object else v for n, v in values.items()},
        failure=DEGENERATE.message("; ".join(excluded)) if excluded else "",
    )
