"""The ImageNet-O protocol's plug-in object (:class:`ImageNetOProtocol`): one logits task per
model (:mod:`.compute`), each seed scored from the store (:mod:`.scoring`)."""

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
from oodsim.protocols.imagenet_o.recipe import NAME, SEED_MEANING, result_labels
from oodsim.protocols.imagenet_o.scoring import full_test_set, metric_array, resample
from oodsim.protocols.imagenet_o.spec import ImageNetOSpec, spec_from_data
from oodsim.results import NO_SEVERITY, Layout, SeedResult
from oodsim.store import Store


class ImageNetOProtocol(Protocol):
    """ImageNet-O: one logits task per model (shared by all seeds), scored per seed."""

    name = NAME
    spec_type = ImageNetOSpec
    report = "oodsim.report.hooks:FIXED_TEST_SET"  # seeds resample one test set

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
