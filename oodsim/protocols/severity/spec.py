"""Severity specs: the :class:`SourceSpec` and :class:`SeveritySpec` classes, their validation,
and their TOML / plain-data loading (cattrs).

Kept apart from the run so that a spec can be read, checked and keyed without planning or
computing anything: :mod:`oodsim.protocols.severity_sources` turns its sources into samples,
:mod:`oodsim.protocols.severity_plan` into store entries, :mod:`oodsim.protocols.severity_run`
computes them and :mod:`oodsim.protocols.severity_scoring` scores them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import cattrs

from oodsim.errors import DataNotFoundError, SpecError, UnknownNameError
from oodsim.keys import no_key
from oodsim.models.zoo import ModelRef
from oodsim.specs import (
    DetectorSpec,
    _Keyed,
    detector_from_data,
    detector_specs,
    detector_to_data,
    read_toml,
    spec_errors,
    spec_from_dict,
)

if TYPE_CHECKING:
    from oodsim.detectors import Detector

SOURCE_KINDS = ("split", "dataset", "image_folder", "uniform_noise", "gaussian_noise")
NOISE_KINDS = ("uniform_noise", "gaussian_noise")
SPLIT_SUBSETS = ("in_train", "in_val", "in_test")
LABEL_MODES = ("auto", "position", "imagenet1k")
DEFAULT_METRICS = ("auroc", "aupr_in", "aupr_out", "fpr95")


def detector_info(detector: DetectorSpec) -> Detector:
    """The registered detector of a spec: what it ``needs``, its ``fit_on`` split, defaults."""
    from oodsim.detectors import get_detector

    return get_detector(detector.name)


def _class_names(value: Any) -> tuple[str | int, ...]:
    if isinstance(value, str | int):
        value = [value]
    return tuple(v if isinstance(v, int) and not isinstance(v, bool) else str(v) for v in value)


def _positive(_: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not value > 0):
        raise SpecError(attribute.name, value, "a number > 0")


def _shape(value: Any) -> tuple[int, int, int] | None:
    if value is None:
        return None
    shape = tuple(int(v) for v in value)
    if len(shape) != 3 or min(shape) < 1 or shape[2] not in (1, 3):
        raise SpecError("shape", value, "[height, width, channels] with 1 or 3 channels")
    return shape  # type: ignore[return-value]


@attrs.frozen(kw_only=True)
class SourceSpec(_Keyed):
    """Labelled images: the ID test set, the ID fit set, or one part of the OOD class pool.

    - ``split``: a subset (``in_test``, ``in_train``, ``in_val``) of a ``trained`` model's open
      set split (its held-out ID samples); labels are the model's classes.
    - ``dataset``: a registered dataset (``name``), optionally only ``classes`` (ids or names).
    - ``image_folder``: class folders under ``root`` read file by file with each model's own
      preprocessing (ImageNet scale); ``name`` is the data's identity in keys (roots are not).
    - ``uniform_noise`` / ``gaussian_noise``: one class of ``n_samples`` noise images,
      U(low, high) or N(mean, std) clipped to [0, 255], of ``shape`` (default: the model's
      input shape).

    ``max_per_class`` subsamples each class (OOD pool default: ``n_est + n_test``), with a
    draw that depends only on the source, so every model sees the same images. Image folders
    may be cut into ``shard_size`` classes per store entry and task (ImageNet-21k: many tasks,
    bounded memory), and ``wordnet_filter`` keeps only the class folders that
    :func:`oodsim.data.imagenet_classes.filter_ood_classes` keeps against ImageNet-1k. ``labels``
    maps ID classes to model outputs: ``position`` (class order), ``imagenet1k`` (wnid folders
    → sorted ImageNet-1k index) or ``auto`` (imagenet1k when every class is a 1k wnid).
    """

    TAG = "severity_source"
    VERSION = "1"

    kind: str = attrs.field()
    name: str = ""
    root: str | None = attrs.field(default=None, metadata=no_key())
    classes: tuple[str | int, ...] = attrs.field(default=(), converter=_class_names)
    max_per_class: int | None = attrs.field(default=None, validator=_positive)
    image_size: int | None = attrs.field(default=None, validator=_positive)
    subset: str = "in_test"
    n_samples: int = attrs.field(default=200, validator=_positive)
    low: float = 0.0
    high: float = 255.0
    mean: float = 128.0
    std: float = attrs.field(default=128.0, validator=_positive)
    shape: tuple[int, int, int] | None = attrs.field(default=None, converter=_shape)
    labels: str = "auto"
    wordnet_filter: bool = False
    shard_size: int | None = attrs.field(default=None, validator=_positive)
    label: str = attrs.field(metadata=no_key())

    @label.default
    def _default_label(self) -> str:
        if self.kind == "uniform_noise":
            return f"uniform({self.low:g},{self.high:g})"
        if self.kind == "gaussian_noise":
            return f"gaussian({self.mean:g},{self.std:g})"
        if self.kind == "split":
            return self.subset
        return self.name

    @kind.validator
    def _check_kind(self, attribute: attrs.Attribute, value: str) -> None:
        if value not in SOURCE_KINDS:
            raise UnknownNameError("kind", value, SOURCE_KINDS)

    def __attrs_post_init__(self) -> None:
        if self.labels not in LABEL_MODES:
            raise UnknownNameError(f"{self.label}.labels", self.labels, LABEL_MODES)
        if self.kind == "split" and self.subset not in SPLIT_SUBSETS:
            raise UnknownNameError("subset", self.subset, SPLIT_SUBSETS)
        if self.kind == "dataset":
            from oodsim.data.registry import DATASETS

            if self.name not in DATASETS:
                raise UnknownNameError("dataset", self.name, DATASETS)
        if self.kind == "image_folder" and not self.name:
            raise SpecError("name", "", "a name for the image folder (its identity in keys)")
        if self.kind == "uniform_noise" and not 0 <= self.low < self.high <= 255:
            raise SpecError("low/high", (self.low, self.high), "0 <= low < high <= 255")
        if self.kind != "image_folder" and (self.wordnet_filter or self.shard_size):
            raise SpecError("wordnet_filter/shard_size", self.kind, "kind = 'image_folder'")
        if self.kind in ("split", *NOISE_KINDS) and self.classes:
            raise SpecError("classes", self.classes, f"none for kind = {self.kind!r}")

    @property
    def is_noise(self) -> bool:
        return self.kind in NOISE_KINDS


def _models(value: Any) -> tuple[ModelRef, ...]:
    return tuple(ModelRef(name=v) if isinstance(v, str) else v for v in value)


@attrs.frozen(kw_only=True)
class SeveritySpec(_Keyed):
    """A severity benchmark: models × κ over an ID test set and an OOD class pool.

    ``group_size`` (G) defaults to the number of ID classes; ``fit`` is the ID sample set that
    detectors with a fit split (Mahalanobis, kNN, ...) learn from (default for ``trained``
    models: their split's ``in_train``/``in_val``); ``features = false`` stores logits only.
    ``seed`` draws the estimation/test split of the pool (cached outputs do not depend on it).
    """

    TAG = "severity"
    VERSION = "1"

    name: str = attrs.field(default="severity", metadata=no_key())
    models: tuple[ModelRef, ...] = attrs.field(converter=_models)
    detectors: tuple[DetectorSpec, ...] = attrs.field(default=("msp",), converter=detector_specs)
    id: SourceSpec
    ood: tuple[SourceSpec, ...] = attrs.field(converter=tuple)
    fit: SourceSpec | None = None
    n_est: int = attrs.field(default=150, validator=_positive)
    n_test: int = attrs.field(default=50, validator=_positive)
    n_levels: int = 11
    group_size: int | None = attrs.field(default=None, validator=_positive)
    metrics: tuple[str, ...] = attrs.field(default=DEFAULT_METRICS, converter=tuple)
    features: bool = True
    seed: int = 0

    def __attrs_post_init__(self) -> None:
        from oodsim.metrics import KAPPA_METRICS

        for field, labels in (
            ("models", [m.label for m in self.models]),
            ("detectors", [d.label for d in self.detectors]),
            ("ood", [s.label for s in self.ood]),
        ):
            if not labels or len(set(labels)) != len(labels):
                raise SpecError(field, labels, "a non-empty list with distinct labels")
        for metric in self.metrics:
            if metric not in KAPPA_METRICS:
                raise UnknownNameError("metrics", metric, KAPPA_METRICS)
        if not self.metrics or len(set(self.metrics)) != len(self.metrics):
            raise SpecError("metrics", self.metrics, "a non-empty list of distinct metric names")
        n_levels = self.n_levels
        if isinstance(n_levels, bool) or not isinstance(n_levels, int) or n_levels < 2:
            raise SpecError("n_levels", self.n_levels, "an integer >= 2")
        need = self.n_est + self.n_test
        for i, source in enumerate(self.ood):
            if source.kind == "split":
                raise SpecError(f"ood[{i}].kind", "split", "a dataset, folder or noise source")
            if (source.max_per_class or need) < need or (
                source.is_noise and source.n_samples < need
            ):
                raise SpecError(
                    f"ood[{i}] ({source.label}) samples per class",
                    source.n_samples if source.is_noise else source.max_per_class,
                    f"at least n_est + n_test = {need}",
                )
        needs = {n for d in self.detectors for n in detector_info(d).needs}
        if "features" in needs and not self.features:
            raise SpecError("features", False, "true: a detector needs penultimate features")
        fit_needed = self.needs_fit
        for model in self.models:
            if model.prefix != "trained" and self.id.kind == "split":
                raise SpecError(
                    "id.kind",
                    "split",
                    f"a dataset or folder for model {model.label!r}",
                    "kind = 'split' needs 'trained' models",
                )
            if fit_needed and self.fit is None and model.prefix != "trained":
                raise SpecError(
                    "fit",
                    None,
                    f"an ID training set for model {model.label!r}",
                    "a detector with a fit split needs [fit] for pretrained models",
                )

    @property
    def needs_fit(self) -> bool:
        """Whether a κ learns from an ID fit set (a detector with a ``fit_on`` split)."""
        return any(detector_info(d).fit_on for d in self.detectors)

    def pool_per_class(self, source: SourceSpec) -> int:
        """How many samples per class of an OOD source are kept (and inferred)."""
        return source.max_per_class or self.n_est + self.n_test

    def to_dict(self) -> dict[str, Any]:
        """Plain data (round-trips through :func:`severity_spec_from_dict`)."""
        return _converter.unstructure(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, default=str)


# --------------------------------------------------------------------------- TOML / dict I/O

_converter = cattrs.Converter(forbid_extra_keys=True)


def _table(value: Any, cls: type, field: str) -> dict[str, Any]:
    """A TOML table checked against ``cls``'s fields (unknown keys name the allowed ones)."""
    if not isinstance(value, Mapping):
        raise SpecError(field, value, f"a table of {cls.__name__} fields")
    allowed = {f.name for f in attrs.fields(cls)}
    for key in value:
        if key not in allowed:
            raise UnknownNameError(f"{field} field", key, allowed)
    return dict(value)


def _structure_model(value: Any, base: Path | None) -> ModelRef:
    from oodsim.specs import load_spec

    if isinstance(value, str):
        value = {"name": value}
    table = _table(value, ModelRef, "models")
    name = str(table.get("name", ""))
    if name.startswith("trained:"):  # "trained:<open set spec file>"
        table["name"], table["experiment"] = "trained", name.removeprefix("trained:")
    experiment = table.get("experiment")
    if isinstance(experiment, str):
        path = Path(experiment).expanduser()
        table["experiment"] = load_spec(path if path.is_absolute() or base is None else base / path)
    elif isinstance(experiment, Mapping):
        table["experiment"] = spec_from_dict(experiment)
    return ModelRef(**table)


def _structure_source(value: Any, field: str, base: Path | None) -> SourceSpec:
    table = _table(value, SourceSpec, field)
    if table.get("root") and base is not None:
        root = Path(str(table["root"])).expanduser()
        table["root"] = str(root if root.is_absolute() else base / root)
    return SourceSpec(**table)


def _unstructure_model(ref: ModelRef) -> dict[str, Any]:
    out = {f.name: getattr(ref, f.name) for f in attrs.fields(ModelRef) if f.name != "experiment"}
    if ref.experiment is not None:
        out["experiment"] = ref.experiment.to_dict()
    return out


_converter.register_unstructure_hook(DetectorSpec, detector_to_data)
_converter.register_unstructure_hook(ModelRef, _unstructure_model)


def severity_spec_from_dict(
    data: Mapping[str, Any], base: str | Path | None = None
) -> SeveritySpec:
    """Build a :class:`SeveritySpec` from plain data; relative paths resolve against ``base``."""
    base = Path(base) if base is not None else None
    data = dict(data)
    nested: dict[str, Any] = {}
    with spec_errors("severity spec"):
        nested["models"] = tuple(_structure_model(m, base) for m in data.pop("models", ()))
        nested["detectors"] = tuple(detector_from_data(d) for d in data.pop("detectors", ["msp"]))
        if "id" not in data:
            raise SpecError("id", None, "an [id] table: the ID test set")
        nested["id"] = _structure_source(data.pop("id"), "id", base)
        nested["ood"] = tuple(
            _structure_source(s, f"ood[{i}]", base) for i, s in enumerate(data.pop("ood", ()))
        )
        fit = data.pop("fit", None)
        if fit is not None:
            nested["fit"] = _structure_source(fit, "fit", base)
        plain = _converter.structure(data, _PlainFields)
    return SeveritySpec(**attrs.asdict(plain, recurse=False), **nested)


@attrs.frozen(kw_only=True)
class _PlainFields:
    """The scalar fields of a severity spec, structured (and type-checked) by cattrs."""

    name: str = "severity"
    n_est: int = 150
    n_test: int = 50
    n_levels: int = 11
    group_size: int | None = None
    metrics: tuple[str, ...] = DEFAULT_METRICS
    features: bool = True
    seed: int = 0


def load_severity_spec(path: str | Path, *, check_roots: bool = True) -> SeveritySpec:
    """Read a severity spec from TOML; with ``check_roots`` also require its data folders."""
    path = Path(path)
    data = read_toml(path)
    spec = severity_spec_from_dict(data, base=path.parent)
    if check_roots:
        check_data(spec)
    return spec


def check_data(spec: SeveritySpec) -> None:
    """Fail before any compute when a root folder or a weights file is missing."""
    for field, source in _named_sources(spec):
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


def _named_sources(spec: SeveritySpec) -> list[tuple[str, SourceSpec]]:
    named = [("id", spec.id)] + [(f"ood[{i}]", s) for i, s in enumerate(spec.ood)]
    return named + ([("fit", spec.fit)] if spec.fit is not None else [])
