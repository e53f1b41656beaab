"""The ImageNet-O spec: models, detectors, metrics, seeds and the image folders
(:class:`ImageNetOSpec`), read from TOML by :func:`spec_from_data`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from oodsim.detectors import get_detector
from oodsim.errors import SpecError
from oodsim.keys import no_key
from oodsim.protocols.imagenet_o.recipe import DEFAULT_METRICS, METRIC_NAMES, STOPPING_REFUSED
from oodsim.specs import (
    RunSpec,
    check_labels,
    detector_to_data,
)
from oodsim.specs.converter import structure, unstructure
from oodsim.specs.params import is_grid
from oodsim.specs.seeded import NO_SEVERITY
from oodsim.specs.types import (
    check_fields,
    path_string,
    positive,
    spec_class,
)
from oodsim.zoo import ModelRef, model_refs


@spec_class
class ImageNetOSpec(RunSpec):
    """Zoo models × κ on ImageNet-O (``specs/imagenet_o.toml``), run with ``oodsim.run``.

    ``id_root`` (ImageNet val, one folder per wnid; only the 200 ImageNet-O classes are read)
    and ``ood_root`` (every image below it is OOD) are where the data lies, not what it is:
    they stay out of the key, and the cached logits are keyed by the listing of the files
    actually read (relative path and byte size of each). ``detectors`` are logit detectors
    applied to the 200 restricted logits (default ``msp``: the paper's −max softmax);
    ``metrics`` are ``aupr`` (the card's: OOD positive, trapezoid ``auc(recall, precision)``),
    ``ap`` (the authors' code: sklearn's ``average_precision_score``, OOD positive) and the κ
    metrics of :mod:`oodsim.metrics`. ``bootstrap``: each seed scores a bootstrap resample of
    the ID and the OOD images (stream ``bootstrap``), a replicate of the one fixed test set
    whose spread is its sampling uncertainty (:func:`bootstrap_interval`); without it every
    seed scores the full sets, so seeds differ only with ``bootstrap = true``. Stopping rules
    are refused either way (:data:`STOPPING_REFUSED`): run a fixed number of replicates.
    ``batch_size`` is an execution setting.
    """

    TAG = "imagenet_o"
    VERSION = "1"
    DEFAULT_METRICS = DEFAULT_METRICS
    DEFAULT_N_SEEDS = 1

    id_root: str = attrs.field(converter=path_string, metadata=no_key())
    ood_root: str = attrs.field(converter=path_string, metadata=no_key())
    models: tuple[ModelRef, ...] = attrs.field(converter=model_refs)
    batch_size: int = attrs.field(default=64, validator=positive, metadata=no_key())
    bootstrap: bool = False

    @classmethod
    def metric_names(cls) -> tuple[str, ...]:
        """The κ metrics of the logits alone (no metric that needs correctness)."""
        return METRIC_NAMES

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for i, ref in enumerate(self.models):
            check_fields(ref, f"models[{i}]")
        check_labels("models", [m.label for m in self.models])
        for ref in self.models:
            if ref.prefix == "trained" or ref.num_classes not in (None, 1000):
                raise SpecError(
                    f"models[{ref.label}]",
                    ref.name if ref.prefix == "trained" else f"num_classes={ref.num_classes}",
                    "timm: or torchvision: ImageNet-1k classifiers (1,000 outputs)",
                )
        for detector in self.detectors:
            info = get_detector(detector.name)
            if not info.needs <= {"logits"} or info.fit_required or is_grid(detector.kwargs):
                raise SpecError(
                    f"detectors[{detector.label}]",
                    detector.name,
                    "a detector of the logits alone, without a fit split or a parameter grid "
                    "(ImageNet-O has no training or validation split)",
                )
        if self.stopping.rule != "fixed":
            if self.bootstrap:
                raise SpecError(
                    "stopping.rule",
                    self.stopping.rule,
                    "'fixed' with bootstrap = true",
                    STOPPING_REFUSED[0].upper() + STOPPING_REFUSED[1:],
                )
            raise SpecError(
                "stopping.rule",
                self.stopping.rule,
                "'fixed': without bootstrap every ImageNet-O seed scores the same fixed test "
                "set (identical numbers, nothing for a rule to watch)",
                "Run one seed, or bootstrap = true with a fixed number of replicates for a "
                "test-set sampling interval",
            )
        self.refuse_design()
        self.check_stopping((NO_SEVERITY,))

    def to_dict(self) -> dict[str, Any]:
        """Plain data (round-trips through ``PROTOCOL.from_data``)."""
        return {
            "name": self.name,
            "id_root": self.id_root,
            "ood_root": self.ood_root,
            "models": [_model_to_data(m) for m in self.models],
            "detectors": [detector_to_data(d) for d in self.detectors],
            "metrics": list(self.metrics),
            "batch_size": self.batch_size,
            "bootstrap": self.bootstrap,
            "seeds": {**attrs.asdict(self.seeds), "pinned": dict(self.seeds.pinned)},
            "stopping": attrs.asdict(self.stopping),
            "on_failure": self.on_failure,
            **({"cluster": unstructure(self.cluster)} if self.cluster is not None else {}),
        }


_MODEL_FIELDS = ("name", "pretrained", "weights", "image_size", "num_classes", "init_seed", "label")


def _model_to_data(ref: ModelRef) -> dict[str, Any]:
    return {name: getattr(ref, name) for name in _MODEL_FIELDS}


def spec_from_data(data: Mapping[str, Any], base: str | Path | None = None) -> ImageNetOSpec:
    """An :class:`ImageNetOSpec` from plain (TOML) data; relative roots resolve against ``base``.

    Types and unknown keys are checked by the one strict converter
    (:func:`oodsim.specs.converter.structure`). A ``[seeds]`` table without ``n`` or ``values``
    means one seed, as without the table.
    """
    if not isinstance(data, Mapping):
        raise SpecError("imagenet_o spec", data, "a table of ImageNet-O spec fields")
    data = dict(data)
    for key in ("id_root", "ood_root"):
        if key not in data:
            raise SpecError(key, None, "a folder (the spec says where the images are)")
        if isinstance(data[key], str):
            root = Path(data[key]).expanduser()
            data[key] = str(root if root.is_absolute() or base is None else Path(base) / root)
    models = data.get("models")
    for model in models if isinstance(models, list | tuple) else ():
        name = model.get("name") if isinstance(model, Mapping) else model
        if isinstance(name, str) and name.partition(":")[0] == "trained":
            raise SpecError("models", name, "timm: or torchvision: ImageNet-1k classifiers")
    seeds = data.get("seeds")
    if isinstance(seeds, Mapping) and "n" not in seeds and "values" not in seeds:
        data["seeds"] = {**seeds, "n": 1}
    return structure(data, ImageNetOSpec, "imagenet_o spec")
