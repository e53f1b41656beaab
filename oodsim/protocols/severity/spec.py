"""Severity specs: :class:`SourceSpec`, :class:`PoolSpec` (an ID test set and its OOD class
pool), :class:`SeveritySpec` and their validation; their TOML / plain-data loading is
:mod:`~oodsim.protocols.severity.reading`.

A spec can be read, checked and keyed without planning or computing anything:
:mod:`~oodsim.protocols.severity.sources` turns its sources into samples,
:mod:`~oodsim.protocols.severity.plan` into content-keyed tasks and
:mod:`~oodsim.protocols.severity.scoring` scores one seed from the store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from oodsim import limits
from oodsim.data.fingerprint import fingerprint
from oodsim.data.registry import DATASETS, data_fingerprint
from oodsim.detectors import Detector, get_detector
from oodsim.errors import DataNotFoundError, SpecError, UnknownNameError
from oodsim.keys import no_key
from oodsim.simulation.ood_sets import NOISE_KINDS
from oodsim.specs import (
    DetectorSpec,
    KeyedSpec,
    RunSpec,
    check_labels,
)
from oodsim.specs.converter import unstructure
from oodsim.specs.params import is_grid
from oodsim.specs.plugins import plugin
from oodsim.specs.types import (
    check_fields,
    located,
    path_string,
    positive,
    register_table,
    spec_class,
    spec_error,
)
from oodsim.zoo import ModelRef, model_refs

SOURCE_KINDS = ("split", "dataset", "image_folder", *NOISE_KINDS)


SPLIT_SUBSETS = ("in_train", "in_val", "in_test")


LABEL_MODES = ("auto", "position", "imagenet1k")


DEFAULT_METRICS = ("auroc", "aupr_in", "aupr_out", "fpr95")


def detector_info(detector: DetectorSpec) -> Detector:
    """The registered detector of a spec: what it ``needs``, its ``fit_on`` split, defaults."""
    return get_detector(detector.name)


def _shape(instance: Any, attribute: attrs.Attribute, value: tuple[int, ...] | None) -> None:
    if value is not None and (min(value) < 1 or value[2] not in (1, 3)):
        raise spec_error(instance, "shape", value, "[height, width, channels] with 1 or 3 channels")


@spec_class
class SourceSpec(KeyedSpec):
    """Labelled images: the ID test set, the ID fit set, or one part of the OOD class pool.

    - ``split``: a subset (``in_test``, ``in_train``, ``in_val``) of a ``trained`` model's open
      set split (its held-out ID samples); labels are the model's classes.
    - ``dataset``: a registered dataset (``name``), optionally only ``classes`` (ids or names).
    - ``image_folder``: class folders under ``root`` read file by file with each model's own
      preprocessing (ImageNet scale); ``name`` is the data's identity in keys (roots are not).
    - ``uniform_noise`` / ``gaussian_noise``: one class of ``n_samples`` noise images, uniform on
      the integers ``low..high`` or N(mean, std²) clipped to [0, 255], of ``shape`` (default:
      the model's input shape), drawn anew for every seed.

    ``max_per_class``: on the ID source, each seed draws that many test samples per class (from
    outputs inferred once for all samples); on an OOD source, how many samples per class are
    inferred (default ``n_est + n_test``, a draw that depends on the source only, so every model
    and seed sees the same images), from which each seed draws its estimation/test split; on
    the fit source, a fixed draw. Image folders may be cut into ``shard_size`` classes per store
    entry and task (ImageNet-21k: many tasks, bounded memory), and ``wordnet_filter`` keeps only
    the class folders that :func:`oodsim.data.imagenet_classes.filter_ood_classes` keeps against
    ImageNet-1k. ``labels`` maps ID classes to model outputs: ``position`` (class order),
    ``imagenet1k`` (wnid folders → sorted ImageNet-1k index) or ``auto`` (imagenet1k when every
    class is a 1k wnid).
    """

    TAG = "severity_source"
    TABLE = ""  # written as [id], [[ood]] or [fit]: building from data names which
    VERSION = "2"

    kind: str = attrs.field()
    name: str = attrs.field(default="", metadata=plugin("dataset"))
    root: str | None = attrs.field(default=None, converter=path_string, metadata=no_key())
    classes: tuple[str | int, ...] = ()
    max_per_class: int | None = attrs.field(default=None, validator=positive)
    image_size: int | None = attrs.field(default=None, validator=positive)
    subset: str = "in_test"
    n_samples: int = attrs.field(default=200, validator=positive)
    low: int = 0
    high: int = 255
    mean: float = 128.0
    std: float = attrs.field(default=128.0, validator=positive)
    shape: tuple[int, int, int] | None = attrs.field(default=None, validator=_shape)
    labels: str = "auto"
    wordnet_filter: bool = False
    shard_size: int | None = attrs.field(default=None, validator=positive)
    label: str = attrs.field(metadata=no_key())

    @label.default
    def _default_label(self) -> str:
        if self.kind == "uniform_noise":
            return f"uniform({self.low},{self.high})"
        if self.kind == "gaussian_noise":
            return f"gaussian({self.mean:g},{self.std:g})"
        if self.kind == "split":
            return self.subset
        return self.name

    @kind.validator
    def _check_kind(self, attribute: attrs.Attribute, value: str) -> None:
        if value not in SOURCE_KINDS:
            raise located(UnknownNameError("kind", value, SOURCE_KINDS), "kind")

    def __attrs_post_init__(self) -> None:
        if self.labels not in LABEL_MODES:
            raise located(UnknownNameError("labels", self.labels, LABEL_MODES), "labels")
        if self.kind == "split" and self.subset not in SPLIT_SUBSETS:
            raise located(UnknownNameError("subset", self.subset, SPLIT_SUBSETS), "subset")
        if self.kind == "dataset" and self.name not in DATASETS:
            raise located(UnknownNameError("dataset", self.name, DATASETS), "name")
        if self.kind == "image_folder" and not self.name:
            raise spec_error(self, "name", "", "a name for the image folder (its identity in keys)")
        pixels = (self.low, self.high)
        if not (0 <= self.low <= 255 and 0 <= self.high <= 255):
            raise spec_error(self, "low/high", pixels, "integer pixel values in 0..255")
        if self.kind == "uniform_noise" and not self.low < self.high:
            raise spec_error(self, "low/high", pixels, "0 <= low < high <= 255")
        if self.kind != "image_folder" and (self.wordnet_filter or self.shard_size):
            raise spec_error(self, "wordnet_filter/shard_size", self.kind, "kind = 'image_folder'")
        if self.is_noise and (problem := limits.over(self.n_samples, "noise_samples")):
            raise spec_error(self, "n_samples", self.n_samples, *problem)
        if self.kind in ("split", *NOISE_KINDS) and self.classes:
            raise spec_error(self, "classes", self.classes, f"none for kind = {self.kind!r}")

    @property
    def is_noise(self) -> bool:
        return self.kind in NOISE_KINDS

    def key_extra(self) -> dict[str, Any]:
        """The fingerprint of the files a dataset or an image folder source reads
        (:mod:`oodsim.data.fingerprint`): two folders under one name never share cached
        outputs. A sharded folder (``shard_size``, ImageNet-21k scale) is keyed by its name and
        each shard's classes only: listing millions of files for every key would cost more
        than the run."""
        if self.kind == "dataset":
            data = data_fingerprint(self.name, self.root)
        elif self.kind == "image_folder" and self.root and not self.shard_size:
            data = fingerprint([self.root])
        else:
            data = None
        return {} if data is None else {"data": data}


def _sources(value: Any) -> Any:
    return (value,) if isinstance(value, SourceSpec) else value


@spec_class
class PoolSpec(KeyedSpec):
    """One benchmark of a severity spec: an ID test set (``id``) and an OOD class pool
    (``ood``, one or more sources). A spec with several of them (``[[datasets]]`` in TOML)
    gets a ``dataset`` dimension labelled by ``label``."""

    TAG = "severity_dataset"
    TABLE = ""
    VERSION = "1"

    label: str = attrs.field(default="", metadata=no_key())
    id: SourceSpec
    ood: tuple[SourceSpec, ...] = attrs.field(converter=_sources)

    def __attrs_post_init__(self) -> None:
        labels = [s.label for s in self.ood]
        if not labels or len(set(labels)) != len(labels):
            raise spec_error(
                self, "ood", labels, "a non-empty list of sources with distinct labels"
            )
        for i, source in enumerate(self.ood):
            if source.kind == "split":
                raise spec_error(
                    self, f"ood[{i}].kind", "split", "a dataset, folder or noise source"
                )
        if self.id.is_noise:
            raise spec_error(self, "id.kind", self.id.kind, "a split, dataset or image folder")


def _pools(value: Any) -> Any:
    return (value,) if isinstance(value, PoolSpec) else value


register_table(SourceSpec, nouns=("a source table", "source tables"))


register_table(PoolSpec, nouns=("a [[datasets]] table", "[[datasets]] tables"))


@spec_class
class SeveritySpec(RunSpec):
    """A severity benchmark: models × κ over one or more datasets (ID test set + OOD pool),
    repeated for ``seeds``.

    ``group_size`` (G) defaults to the number of ID classes; ``fit`` is the ID sample set that
    detectors with a fit split (Mahalanobis, kNN, ...) learn from (default for ``trained``
    models: their split's ``in_train``/``in_val``); ``features = false`` stores logits only.
    A seed redraws the estimation/test split of every OOD class, the ID test subsample (an ID
    source with ``max_per_class``), the noise images and the ``trained`` models whose ``seed``
    is not pinned; pretrained models are the same for every seed.
    """

    TAG = "severity"
    VERSION = "2"
    DEFAULT_METRICS = DEFAULT_METRICS
    DEFAULT_N_SEEDS = 1

    models: tuple[ModelRef, ...] = attrs.field(converter=model_refs)
    datasets: tuple[PoolSpec, ...] = attrs.field(converter=_pools)
    fit: SourceSpec | None = None
    n_est: int = attrs.field(default=150, validator=positive)
    n_test: int = attrs.field(default=50, validator=positive)
    n_levels: int = 11
    group_size: int | None = attrs.field(default=None, validator=positive)
    features: bool = True

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for i, model in enumerate(self.models):
            check_fields(model, f"models[{i}]")
        check_labels("models", [m.label for m in self.models])
        check_labels("datasets", [d.label for d in self.datasets])
        if self.n_levels < 2:
            raise SpecError("n_levels", self.n_levels, "an integer >= 2")
        if problem := limits.over(self.n_levels, "n_levels"):
            raise SpecError("n_levels", self.n_levels, *problem)
        self._check_pools()
        self._check_detectors()
        self._check_models()
        self.refuse_design()
        self.check_stopping(self.levels)

    def _check_pools(self) -> None:
        need = self.n_est + self.n_test
        for pool in self.datasets:
            where = f"datasets[{pool.label}]." if len(self.datasets) > 1 else ""
            for i, source in enumerate(pool.ood):
                if (source.max_per_class or need) < need or (
                    source.is_noise and source.n_samples < need
                ):
                    raise SpecError(
                        f"{where}ood[{i}] ({source.label}) samples per class",
                        source.n_samples if source.is_noise else source.max_per_class,
                        f"at least n_est + n_test = {need}",
                    )
        if self.fit is not None and self.fit.is_noise:
            raise SpecError("fit.kind", self.fit.kind, "a split, dataset or image folder")

    def _check_detectors(self) -> None:
        for detector in self.detectors:
            info = detector_info(detector)
            if is_grid(detector.kwargs):
                raise SpecError(
                    f"detectors[{detector.label}]",
                    detector.kwargs,
                    "one value per parameter",
                    "severity benchmarks have no OOD validation data to choose parameters on",
                )
            if "model" in info.needs and info.fit_on:
                raise SpecError(
                    f"detectors[{detector.label}]",
                    f"needs model and fit_on={info.fit_on!r}",
                    "a detector that either runs the network or has a fit split",
                    "severity runs κ that run the network per source, where no fit is shared",
                )
            if "features" in info.needs and not self.features:
                raise SpecError(
                    "features", False, f"true: detector {detector.label!r} needs features"
                )

    def _check_models(self) -> None:
        splits = [field for field, s in self.named_sources() if s.kind == "split"]
        for model in self.models:
            if model.prefix == "trained":
                continue
            if splits:
                raise SpecError(
                    f"{splits[0]}.kind",
                    "split",
                    f"a dataset or folder for model {model.label!r}",
                    "kind = 'split' needs 'trained' models",
                )
            if self.needs_fit and self.fit is None:
                raise SpecError(
                    "fit",
                    None,
                    f"an ID training set for model {model.label!r}",
                    "a detector with a fit split needs [fit] for pretrained models",
                )

    @property
    def levels(self) -> tuple[str, ...]:
        """The severity level labels, ``"0"`` (easiest) to ``str(n_levels - 1)`` (hardest)."""
        return tuple(str(i) for i in range(self.n_levels))

    @property
    def varies_dataset(self) -> bool:
        """Whether results get a ``dataset`` dimension (several ``[[datasets]]``)."""
        return len(self.datasets) > 1

    @property
    def needs_fit(self) -> bool:
        """Whether a κ learns from an ID fit set (a detector with a ``fit_on`` split)."""
        return any(detector_info(d).fit_on for d in self.detectors)

    def pool_per_class(self, source: SourceSpec) -> int:
        """How many samples per class of an OOD source are inferred."""
        return source.max_per_class or self.n_est + self.n_test

    def named_sources(self) -> list[tuple[str, SourceSpec]]:
        """Every source with the field path a user wrote it at (for messages)."""
        named = []
        for pool in self.datasets:
            where = f"datasets[{pool.label}]." if self.varies_dataset else ""
            named.append((f"{where}id", pool.id))
            named += [(f"{where}ood[{i}]", s) for i, s in enumerate(pool.ood)]
        return named + ([("fit", self.fit)] if self.fit is not None else [])

    def to_dict(self) -> dict[str, Any]:
        """Plain data (round-trips through :func:`severity_spec_from_dict`)."""
        data = unstructure(self)
        if not self.varies_dataset:  # written as in TOML: [id] and [[ood]] at the top
            pool = data.pop("datasets")[0]
            data |= {"id": pool["id"], "ood": pool["ood"]}
        return data


def check_data(spec: SeveritySpec) -> None:
    """Fail before any compute when a root folder or a weights file is missing."""
    for field, source in spec.named_sources():
        if source.kind == "image_folder" and not (source.root and Path(source.root).is_dir()):
            raise DataNotFoundError(
                f"{field} ({source.name}): image folder root={source.root!r} does not exist; "
                "point root= at a folder of class folders"
            )
        if source.kind == "dataset" and source.root and not Path(source.root).exists():
            raise DataNotFoundError(f"{field} ({source.name}): root={source.root!r} not found")
    for model in spec.models:
        if model.weights and not Path(model.weights).expanduser().is_file():
            raise DataNotFoundError(f"model {model.label}: weights file {model.weights} missing")
