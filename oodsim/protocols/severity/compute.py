"""Severity runs: C-OOD severity levels for many models × κ functions from cached outputs.

A :class:`SeveritySpec` names models (``timm:``/``torchvision:`` zoo names or the open set
``trained`` CNN), confidence functions κ, an ID test set and an OOD class pool built from
sources (registered datasets with chosen classes, image folders by class, noise classes).
:func:`run_severity` plans one store entry of logits + features per (model, source) (kind
``severity_outputs``; κ of model-based detectors such as ODIN in ``severity_kappa``), computes
the missing ones as one Dask task per (model, source), and then builds the levels of every
(model, κ) in this process from the cache (:mod:`oodsim.protocols.severity`). Adding a κ or a
model computes only what is new. The result is an ``xarray.Dataset`` over
``(model, method, metric, severity)``.

This module holds the compute: the Dask tasks that fill the store (run on workers), the
preflight checks and :func:`run_severity`. The other concerns live in their own modules, and
their public names are re-exported here:

- :mod:`oodsim.protocols.severity_spec`: spec classes, validation, TOML / dict loading;
- :mod:`oodsim.protocols.severity_sources`: the samples (images or files, labels) of a source;
- :mod:`oodsim.protocols.severity_plan`: tasks and the content keys of their store entries;
- :mod:`oodsim.protocols.severity_scoring`: κ, levels, metrics and the result Dataset.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np
import xarray as xr

from oodsim.errors import SpecError
from oodsim.models.zoo import ModelRef
from oodsim.outputs import Outputs
from oodsim.protocols.severity_plan import (
    KAPPA,
    OUTPUTS,
    SeverityRunError,
    Task,
    fit_sources,
    kappa_key,
    outputs_key,
    plan,
    source_tasks,
)
from oodsim.protocols.severity_scoring import ModelScores, assemble, score_model
from oodsim.protocols.severity_sources import (
    VERSION,
    SourceItems,
    folder_classes,
    n_shards,
    noise_images,
    pick_classes,
    source_items,
    subsample,
    trained_data,
)
from oodsim.protocols.severity_spec import (
    DEFAULT_METRICS,
    LABEL_MODES,
    NOISE_KINDS,
    SOURCE_KINDS,
    SPLIT_SUBSETS,
    SeveritySpec,
    SourceSpec,
    check_data,
    detector_info,
    load_severity_spec,
    severity_spec_from_dict,
)
from oodsim.specs import DetectorSpec
from oodsim.store import Store, default_root, summarize_events

if TYPE_CHECKING:
    from oodsim.seeds import SeedStreams

__all__ = [
    "DEFAULT_METRICS",
    "KAPPA",
    "KAPPA_CHUNK",
    "LABEL_MODES",
    "NOISE_KINDS",
    "OUTPUTS",
    "SOURCE_KINDS",
    "SPLIT_SUBSETS",
    "VERSION",
    "ModelScores",
    "SeverityRunError",
    "SeveritySpec",
    "SourceItems",
    "SourceSpec",
    "Task",
    "assemble",
    "check_data",
    "compute_task",
    "fit_sources",
    "folder_classes",
    "kappa_key",
    "load_severity_spec",
    "n_shards",
    "noise_images",
    "outputs_key",
    "plan",
    "preflight",
    "run_severity",
    "score_model",
    "severity_spec_from_dict",
    "source_items",
    "source_tasks",
    "subsample",
    "train_task",
]


# --------------------------------------------------------------------------- compute (worker)


def _batches(items: SourceItems, preprocessing: Any, batch_size: int) -> Iterator[Any]:
    from oodsim.models.zoo import array_batches, file_batches

    if items.images is not None:
        return array_batches(items.images, preprocessing, batch_size)
    return file_batches(items.files or (), preprocessing, batch_size)


KAPPA_CHUNK = 1024  # samples per call of a model-based κ (fixed: stochastic κ depend on it)


def _model_kappa(
    detector: DetectorSpec,
    params: dict[str, Any],
    model: Any,
    items: SourceItems,
    outputs: Outputs,
    preprocessing: Any,
    batch_size: int,
    device: str,
) -> np.ndarray:
    """κ of a detector that runs the network, in chunks so inputs never fill the memory."""
    import torch

    from oodsim.detectors import confidence

    parts = []
    for start in range(0, len(items), KAPPA_CHUNK):
        rows = slice(start, start + KAPPA_CHUNK)
        inputs = torch.cat(list(_batches(items.take(rows), preprocessing, batch_size))).to(device)
        parts.append(
            confidence(detector.name, outputs.take(rows), model=model, inputs=inputs, **params)
        )
    return np.concatenate(parts).astype(np.float64)


def compute_task(
    spec: SeveritySpec,
    task: Task,
    cache_root: str,
    after: Any = None,
    *,
    torch_threads: int | None = None,
    batch_size: int = 256,
    device: str | None = None,
) -> tuple[tuple[str, str, str], ...]:
    """Infer one (model, source) and store its outputs and model-based κ; return store events.

    ``after`` is ignored: it lets a Dask task wait for the one that trains its model.
    """
    import torch

    from oodsim.models.zoo import infer_tensors

    if torch_threads:
        torch.set_num_threads(torch_threads)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    store = Store(cache_root)
    ref = spec.models[task.model]
    missing_kappa = [(j, k) for j, k in task.kappa_keys if not store.has(KAPPA, k)]
    if store.has(OUTPUTS, task.outputs_key) and not missing_kappa:
        return tuple(store.events)
    loaded = _load(ref, store)
    items = source_items(task.source, task.per_class, loaded, ref, task.shard)
    if len(items) == 0:
        raise SeverityRunError(f"{task.source.label}: no samples for model {ref.label}")
    model = loaded.model.to(device)
    entry = store.get(OUTPUTS, task.outputs_key)
    if entry is None:
        logits, features = infer_tensors(
            model, _batches(items, loaded.preprocessing, batch_size), device
        )
        if not (np.isfinite(logits).all() and np.isfinite(features).all()):
            raise SeverityRunError(
                f"model {ref.label} gave non-finite outputs on {task.source.label}"
            )
        arrays = {
            "logits": logits,
            "labels": items.labels,
            "targets": items.targets,
            "index": items.index,
        }
        if spec.features:
            arrays["features"] = features
        store.put(
            OUTPUTS,
            task.outputs_key,
            arrays,
            {
                "describe": f"{ref.label} on {task.source.label} ({len(items)} samples)",
                "class_names": list(items.class_names),
                "weights": loaded.source,
                "preprocessing": loaded.preprocessing.describe(),
            },
        )
    else:
        logits, features = entry.arrays["logits"], entry.arrays.get("features")
    outputs = Outputs(logits=logits, features=features, labels=items.targets)
    for j, key in missing_kappa:
        detector = spec.detectors[j]
        params = detector.kwargs
        if "seed" in detector_info(detector).defaults:
            params.setdefault("seed", spec.seed)
        kappa = _model_kappa(
            detector, params, model, items, outputs, loaded.preprocessing, batch_size, device
        )
        store.put(
            KAPPA,
            key,
            {"kappa": kappa},
            {"describe": f"{detector.label} of {ref.label} on {task.source.label}"},
        )
    return tuple(store.events)


def _load(ref: ModelRef, store: Store) -> Any:
    from oodsim.models.zoo import load_model

    return load_model(ref, store)


def train_task(ref: ModelRef, cache_root: str, *, torch_threads: int | None = None) -> tuple:
    """Train (or load) a ``trained`` model's checkpoint; return store events."""
    if torch_threads:
        import torch

        torch.set_num_threads(torch_threads)
        torch.use_deterministic_algorithms(True, warn_only=True)
    store = Store(cache_root)
    _load(ref, store)
    return tuple(store.events)


def _streams(ref: ModelRef) -> SeedStreams:
    """The seed streams of a ``trained`` model (its seed, its experiment's pinned streams)."""
    from oodsim.seeds import SeedStreams

    return SeedStreams(ref.seed, dict(ref.experiment.seeds.pinned))


def _checkpoint_missing(ref: ModelRef, store: Store) -> bool:
    from oodsim.protocols.open_set import CHECKPOINT, checkpoint_key

    return not store.has(CHECKPOINT, checkpoint_key(ref.experiment, _streams(ref)))


# --------------------------------------------------------------------------- run


def preflight(spec: SeveritySpec, store: Store) -> None:
    """What can fail before compute: cache, data folders, weights, ID/OOD class overlap."""
    from oodsim.models.zoo import (
        find_timm_weights,
        find_torchvision_weights,
        missing_weights,
        split_name,
    )

    store.ensure_writable()
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
            _check_overlap(spec, ref)


def _check_overlap(spec: SeveritySpec, ref: ModelRef) -> None:
    """An OOD source from the trained model's dataset must not contain its ID classes."""
    from oodsim.data.splits import split_classes

    experiment = ref.experiment
    data = trained_data(ref)
    known = set(split_classes(data.n_classes, experiment.split, _streams(ref)).known)
    for i, source in enumerate(spec.ood):
        if source.kind == "dataset" and source.name == experiment.dataset.name:
            overlap = sorted(known & set(pick_classes(source, data.class_names)))
            if overlap:
                raise SpecError(
                    f"ood[{i}].classes",
                    [data.class_names[c] for c in overlap],
                    f"classes other than the ID classes of model {ref.label!r} "
                    f"({[data.class_names[c] for c in sorted(known)]})",
                )


def _task_name(task: Task) -> str:
    return "oodsim-severity-" + task.outputs_key[:24]


def _compute_missing(
    spec: SeveritySpec,
    store: Store,
    missing: Sequence[Task],
    address: str | None,
    n_workers: int | None,
    stream: TextIO | None,
) -> list[tuple[str, str, str]]:
    """Submit the missing tasks (after training their models) and gather the store events."""
    from distributed import as_completed

    from oodsim.executor import cluster_client

    root = str(store.root.resolve())
    events: list[tuple[str, str, str]] = []
    started = time.perf_counter()
    with cluster_client(address, n_workers) as client:
        trains = {}
        for i in sorted({t.model for t in missing}):
            ref = spec.models[i]
            if ref.prefix == "trained" and _checkpoint_missing(ref, store):
                trains[i] = client.submit(
                    train_task,
                    ref,
                    root,
                    torch_threads=1,
                    pure=False,
                    key=f"oodsim-severity-train-{ref.key[:24]}",
                )
        futures = [
            client.submit(
                compute_task,
                spec,
                task,
                root,
                trains.get(task.model),
                torch_threads=1,
                key=_task_name(task),
                pure=False,
            )
            for task in missing
        ]
        for done, future in enumerate(as_completed(futures), start=1):
            events += future.result()
            if stream is not None:
                print(
                    f"oodsim severity: {done}/{len(futures)} (model, source) outputs in "
                    f"{time.perf_counter() - started:.1f} s",
                    file=stream,
                    flush=True,
                )
        for future in trains.values():
            events += future.result()
    return events


def run_severity(
    spec: SeveritySpec | str | Path,
    *,
    address: str | None = None,
    n_workers: int | None = None,
    cache: str | Path | None = None,
    out: str | Path | None = None,
    progress: bool | TextIO = True,
) -> xr.Dataset:
    """Run (or resume) a severity benchmark and return its results.

    Missing (model, source) outputs are computed on a Dask cluster (``address`` of a scheduler,
    else a local cluster of ``n_workers`` processes, not started when everything is cached);
    levels and metrics are computed here from the store (``cache``, default ``$OODSIM_CACHE``
    or ``./cache``). ``out``: also save the results (zarr, :func:`oodsim.results.save_results`).
    ``attrs["store"]`` says what was computed and what was loaded, by kind.
    """
    from oodsim.results import save_results

    if not isinstance(spec, SeveritySpec):
        spec = load_severity_spec(spec)
    store = Store(cache if cache is not None else default_root())
    preflight(spec, store)
    stream = (sys.stderr if progress is True else progress) or None
    started = time.perf_counter()
    missing = [t for t in plan(spec) if not all(store.has(*e) for e in t.entries())]
    events = []
    if missing:
        events = _compute_missing(spec, store, missing, address, n_workers, stream)
    per_model = [score_model(spec, i, store) for i in range(len(spec.models))]
    events += store.events
    results = assemble(
        spec,
        per_model,
        {
            "store": json.dumps(summarize_events(events)),
            "wall_seconds": round(time.perf_counter() - started, 3),
        },
    )
    if out is not None:
        save_results(results, out)
    return results
