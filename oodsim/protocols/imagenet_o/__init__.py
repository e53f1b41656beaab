"""The ImageNet-O evaluation (Hendrycks et al., "Natural Adversarial Examples", 2019).

Restrict a 1000-way ImageNet classifier to the 200 ImageNet-O classes, take the softmax over
those 200 logits, score each image by −max softmax (the anomaly score) and report the area
under the precision-recall curve with ImageNet-O images as positives (trapezoidal
``auc(recall, precision)`` over ``precision_recall_curve``). The ID set is the ImageNet
validation images of the 200 classes (10,000), the OOD set ImageNet-O's 2,000 images; chance
AUPR is the OOD share, 2,000 / 12,000 ≈ 16.7 %.

Three ways in:

- the recipe on logits: :func:`evaluate_logits` (or ``.npy`` files, :func:`evaluate_logit_files`);
- one model on the two image folders, in this process: :func:`evaluate_folders`;
- a spec of several models (:class:`ImageNetOSpec`, ``specs/imagenet_o.toml``) run by the
  engine, ``oodsim.run(spec)``: :data:`PROTOCOL` plans one task per model that infers the
  1000-way logits of the ID and OOD files and stores them (``outputs`` entries, keyed by
  the model, the file listing and the inference version; the same for every seed), and scores
  each seed from the store. With ``bootstrap = true`` a seed scores a bootstrap resample of the
  ID and the OOD images (stream ``bootstrap``): a replicate of the one fixed test set; without
  it every seed scores the full sets. :func:`bootstrap_interval` turns the replicates into the
  point estimate on the full test set and its percentile interval (test-set sampling
  uncertainty). Stopping rules are refused when the spec is made (:data:`STOPPING_REFUSED`).

The modules follow the flow: :mod:`.recipe` (the recipe on logits, bootstrap replicates),
:mod:`.folders` (one model on image folders), :mod:`.spec` (:class:`ImageNetOSpec`),
:mod:`.compute` (the logits task) and :mod:`.scoring` (a seed from the store, the interval).

Two AUPRs: ``aupr`` is the card's trapezoid ``auc(recall, precision)``, ``ap`` the authors'
code's ``average_precision_score``; both with ImageNet-O as positives and score −max softmax."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from oodsim.artifacts.outputs import OUTPUTS, warn_legacy_outputs
from oodsim.keys import digest
from oodsim.protocols.base import Protocol, Task
from oodsim.protocols.imagenet_o.compute import check_weights, file_sets, infer_logits, logits_key
from oodsim.protocols.imagenet_o.folders import (
    check_options,
    evaluate_folders,
    evaluate_logit_files,
    id_files,
    ood_files,
)
from oodsim.protocols.imagenet_o.recipe import (
    LOGITS,
    NAME,
    SEED_MEANING,
    STOPPING_REFUSED,
    bootstrap_indices,
    check_bootstrap,
    check_seed,
    evaluate_logits,
    max_softmax,
    ood_metrics,
    restrict_logits,
    result_labels,
    subset_columns,
)
from oodsim.protocols.imagenet_o.scoring import (
    bootstrap_interval,
    full_test_set,
    metric_array,
    resample,
)
from oodsim.protocols.imagenet_o.spec import ImageNetOSpec, spec_from_data
from oodsim.results import NO_SEVERITY, Layout, SeedResult
from oodsim.store import Store

__all__ = [
    "LOGITS",
    "PROTOCOL",
    "SEED_MEANING",
    "STOPPING_REFUSED",
    "ImageNetOProtocol",
    "ImageNetOSpec",
    "bootstrap_indices",
    "bootstrap_interval",
    "check_bootstrap",
    "check_options",
    "check_seed",
    "evaluate_folders",
    "evaluate_logit_files",
    "evaluate_logits",
    "file_sets",
    "id_files",
    "logits_key",
    "max_softmax",
    "ood_files",
    "ood_metrics",
    "restrict_logits",
    "spec_from_data",
    "subset_columns",
]


class ImageNetOProtocol(Protocol):
    """ImageNet-O: one logits task per model (shared by all seeds), scored per seed."""

    name = NAME
    spec_type = ImageNetOSpec

    spec: ImageNetOSpec

    @classmethod
    def from_data(cls, data: Mapping[str, Any], base: Path | None) -> ImageNetOSpec:
        return spec_from_data(data, base)

    def preflight(self, store: Store) -> None:
        """Both image folders readable and non-empty, every model's weights on disk, the cache
        writable; the reads come first, so bad input leaves the cache untouched."""
        spec = self.spec
        file_sets(spec)
        for ref in spec.models:
            check_weights(ref)
        store.ensure_writable()
        warn_legacy_outputs(store)

    def plan(self, seed: int) -> list[Task]:
        spec = self.spec
        sets = file_sets(spec)
        tasks = []
        for ref in spec.models:
            entries = tuple((OUTPUTS, logits_key(ref, files)) for files in sets)
            tasks.append(
                Task(
                    key=digest("imagenet_o_task", "1", {"entries": [k for _, k in entries]}),
                    entries=entries,
                    compute=partial(infer_logits, ref, sets, spec.batch_size),
                    label=f"logits of {ref.label}",
                )
            )
        return tasks

    def score(self, seed: int, store: Store) -> SeedResult:
        spec = self.spec
        id_set, ood_set = file_sets(spec)
        id_kappa, ood_kappa, full = full_test_set(spec, store)
        scores = full
        if spec.bootstrap:
            scores = metric_array(spec, *resample(spec, seed, id_kappa, ood_kappa))[:, :, None, :]
        n_id, n_ood = len(id_set.files), len(ood_set.files)
        return SeedResult(
            seed,
            {
                "score": scores,
                "full_score": full,
                "n_id": n_id,
                "n_ood": n_ood,
                "chance": n_ood / (n_id + n_ood),
                "n_id_classes": id_set.n_classes,
            },
        )

    def layout(self) -> Layout:
        spec = self.spec
        coords = {
            "method": [d.label for d in spec.detectors],
            "metric": list(spec.metrics),
            "severity": [NO_SEVERITY],
            "model": [m.label for m in spec.models],
        }
        variables = {
            "score": ("method", "metric", "severity", "model"),
            "full_score": ("method", "metric", "severity", "model"),
            "n_id": (),
            "n_ood": (),
            "chance": (),
            "n_id_classes": (),
        }
        # what a seed is, in the results themselves and in their attrs (result_labels: also
        # what the point estimate is and which interval the seeds give)
        static = {"seed_meaning": ((), np.array(SEED_MEANING[spec.bootstrap]))}
        return Layout(coords, variables, static=static, attrs=result_labels(spec.bootstrap))


PROTOCOL = ImageNetOProtocol
