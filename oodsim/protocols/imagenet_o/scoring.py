"""Scoring a seed from the stored logits (the full sets, or a bootstrap resample of them) and
the percentile interval over the replicates (:func:`bootstrap_interval`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from oodsim.artifacts.outputs import OUTPUTS
from oodsim.data.imagenet_classes import imagenet1k_wnids, imagenet_o_wnids
from oodsim.detectors import NonFiniteKappaError, confidence
from oodsim.errors import SpecError
from oodsim.outputs import Outputs
from oodsim.protocols.base import SeedFailed, stored
from oodsim.protocols.imagenet_o.compute import file_sets, logits_key
from oodsim.protocols.imagenet_o.recipe import (
    NAME,
    bootstrap_indices,
    check_confidence,
    ood_metrics,
    result_labels,
    subset_columns,
)
from oodsim.protocols.imagenet_o.spec import ImageNetOSpec
from oodsim.store import Store


def resample(
    spec: ImageNetOSpec, seed: int, id_kappa: np.ndarray, ood_kappa: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """κ ``(..., n_id)`` / ``(..., n_ood)`` of the seed's bootstrap resample (the same images
    for every model and detector: comparisons are paired)."""
    streams = spec.seeds.streams(seed)
    id_index, ood_index = bootstrap_indices(streams, id_kappa.shape[-1], ood_kappa.shape[-1])
    return id_kappa[..., id_index], ood_kappa[..., ood_index]


def metric_array(spec: ImageNetOSpec, id_kappa: np.ndarray, ood_kappa: np.ndarray) -> np.ndarray:
    """The spec's metrics of κ ``(model, method, n)`` as ``(method, metric, model)``."""
    values = ood_metrics(id_kappa, ood_kappa, spec.metrics)  # each (model, method)
    return np.stack([values[name].T for name in spec.metrics], axis=1)


def logits_kappa(
    spec: ImageNetOSpec, logits: Sequence[tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """κ ``(model, method, n_id)`` and ``(model, method, n_ood)`` of every detector on the
    logits restricted to the 200 classes."""
    columns = subset_columns(imagenet1k_wnids(), imagenet_o_wnids())
    n_id, n_ood = len(logits[0][0]), len(logits[0][1])
    kappa = np.empty((len(spec.models), len(spec.detectors), n_id + n_ood))
    for m, (id_logits, ood_logits) in enumerate(logits):
        outputs = Outputs(logits=np.concatenate([id_logits, ood_logits])[:, columns])
        for d, detector in enumerate(spec.detectors):
            try:
                kappa[m, d] = confidence(detector.name, outputs, **detector.kwargs)
            except NonFiniteKappaError as error:
                raise SeedFailed(
                    f"detector {detector.label} on {spec.models[m].label}: {error}"
                ) from None
    return kappa[..., :n_id], kappa[..., n_id:]


#: κ and scores of the full test set of the specs a process scored last, by (spec key, store
#: root): every bootstrap seed of a run resamples the same κ, so a worker reads the logits
#: and scores the full set once per run, not once per seed (1,000 seeds: 1,000 reads).
_FULL_SETS: dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


_KEEP_FULL_SETS = 2


def full_test_set(spec: ImageNetOSpec, store: Store) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """κ ``(model, method, n_id)``, ``(model, method, n_ood)`` and the full set's scores
    ``(method, metric, severity, model)`` of ``spec``, read from ``store`` once per process."""
    cache_key = (spec.key, store.location)
    if cache_key not in _FULL_SETS:
        id_set, ood_set = file_sets(spec)
        logits = [
            tuple(
                stored(
                    store,
                    OUTPUTS,
                    logits_key(ref, files),
                    f"logits of {ref.label} on the {files.side} images",
                ).arrays["logits"]
                for files in (id_set, ood_set)
            )
            for ref in spec.models
        ]
        id_kappa, ood_kappa = logits_kappa(spec, logits)
        full = metric_array(spec, id_kappa, ood_kappa)[:, :, None, :]  # severity axis
        while len(_FULL_SETS) >= _KEEP_FULL_SETS:
            _FULL_SETS.pop(next(iter(_FULL_SETS)))
        _FULL_SETS[cache_key] = (id_kappa, ood_kappa, full)
    return _FULL_SETS[cache_key]


def bootstrap_interval(results: Any, confidence: float = 0.95) -> Any:
    """Point estimate and test-set sampling interval of every score of an ImageNet-O run.

    ``estimate``: the metric on the full test set (``full_score``; every seed holds the same
    value). ``lower``/``upper``: the percentile interval of the seeds' scores, each seed a
    bootstrap replicate of the fixed test set (NaN without ``bootstrap = true``); ``n``: the
    replicates used (failed seeds are left out). ``attrs`` say what the numbers are
    (:func:`result_labels`) and ``confidence``.

    The interval is the sampling uncertainty of the test-set numbers (how much they would
    move with another test set drawn like this one), not the Monte Carlo error of a mean over
    seeds, and not a statement about other models or data: more seeds make its ends more
    precise, never narrower.
    """
    import xarray as xr  # only analyses of finished results need these, never a worker's task

    from oodsim.results.access import scored_seeds
    from oodsim.stats.intervals import percentile_interval

    check_confidence(confidence)
    if results.attrs.get("protocol") != NAME:
        raise SpecError("results", results.attrs.get("protocol"), "results of an ImageNet-O run")
    boot = bool(json.loads(results.attrs["spec"])["bootstrap"])
    ok = scored_seeds(results)
    score = results["score"].where(ok)
    if "full_score" in results.data_vars:
        full = results["full_score"].where(ok).max("seed", skipna=True)
    elif not boot:  # results of an older version: every seed scored the full sets
        full = score.max("seed", skipna=True)
    else:
        raise SpecError(
            "results",
            "no full_score",
            "results of this version (run the spec again: the logits are cached, "
            "only the cheap scoring is redone)",
        )
    if boot:
        lower, upper = percentile_interval(score.values, confidence, axis=0)
    else:
        lower = upper = np.full(full.shape, np.nan)
    dims = full.dims
    return xr.Dataset(
        {
            "estimate": full,
            "lower": (dims, lower),
            "upper": (dims, upper),
            "n": score.count("seed"),
        },
        attrs={**result_labels(boot, confidence), "confidence": confidence},
    )
