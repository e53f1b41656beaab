"""Severity specs: :class:`SourceSpec`, :class:`PoolSpec` (an ID test set and its OOD class
pool), :class:`SeveritySpec`, their validation and their TOML / plain-data loading.

A spec can be read, checked and keyed without planning or computing anything:
:mod:`~oodsim.protocols.severity.sources` turns its sources into samples,
:mod:`~oodsim.protocols.severity.plan` into content-keyed tasks and
:mod:`~oodsim.protocols.severity.scoring` scores one seed from the store.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import cattrs

from oodsim.data.ood_sets import NOISE_KINDS
from oodsim.data.registry import DATASETS
from oodsim.detectors import Detector, get_detector
from oodsim.errors import DataNotFoundError, SpecError, UnknownNameError
from oodsim.keys import no_key
from oodsim.metrics import KAPPA_METRICS
from oodsim.models.zoo import ModelRef
from oodsim.protocols.tuning import is_grid
from oodsim.specs import (
    DetectorSpec,
    Seeded,
    SeedsSpec,
    StoppingSpec,
    _Keyed,
    detector_from_data,
    detector_specs,
    detector_to_data,
    load_spec,
    spec_errors,
    spec_from_dict,
)

SOURCE_KINDS = ("split", "dataset", "image_folder", *NOISE_KINDS)
SPLIT_SUBSETS = ("in_train", "in_val", "in_test")
LABEL_MODES = ("auto", "position", "imagenet1k")
DEFAULT_METRICS = ("auroc", "aupr_in", "aupr_out", "fpr95")


def detector_info(detector: DetectorSpec) -> Detector:
    """The registered detector of a spec: what it ``needs``, its ``fit_on`` split, defaults."""
    return get_detector(detector.name)


def _class_names(value: Any) -> tuple[str | int, ...]:
    if isinstance(value, str | int):
        value = [value]
    return tuple(v if isinstance(v, int) and not isinstance(v, bool) else str(v) for v in value)


def _positive(_: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not value > 0):
        raise SpecError(attribute.name, value, "a number > 0")


def _pixel(value: Any) -> int:
    """A pixel value 0..255 (uniform noise bounds are integers: the noise is integer-valued)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise SpecError("low/high", value, "an integer pixel value in 0..255")
    return int(value)


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
    VERSION = "2"

    kind: str = attrs.field()
    name: str = ""
    root: str | None = attrs.field(default=None, metadata=no_key())
    classes: tuple[str | int, ...] = attrs.field(default=(), converter=_class_names)
    max_per_class: int | None = attrs.field(default=None, validator=_positive)
    image_size: int | None = attrs.field(default=None, validator=_positive)
    subset: str = "in_test"
    n_samples: int = attrs.field(default=200, validator=_positive)
    low: int = attrs.field(default=0, converter=_pixel)
    high: int = attrs.field(default=255, converter=_pixel)
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
            return f"uniform({self.low},{self.high})"
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
        if self.kind == "dataset" and self.name not in DATASETS:
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


def _sources(value: Any) -> tuple[SourceSpec, ...]:
    return (value,) if isinstance(value, SourceSpec) else tuple(value)


@attrs.frozen(kw_only=True)
class PoolSpec(_Keyed):
    """One benchmark of a severity spec: an ID test set (``id``) and an OOD class pool
    (``ood``, one or more sources). A spec with several of them (``[[datasets]]`` in TOML)
    gets a ``dataset`` dimension labelled by ``label``."""

    TAG = "severity_dataset"
    VERSION = "1"

    label: str = attrs.field(default="", metadata=no_key())
    id: SourceSpec
    ood: tuple[SourceSpec, ...] = attrs.field(converter=_sources)

    def __attrs_post_init__(self) -> None:
        labels = [s.label for s in self.ood]
        if not labels or len(set(labels)) != len(labels):
            raise SpecError("ood", labels, "a non-empty list of sources with distinct labels")
        for i, source in enumerate(self.ood):
            if source.kind == "split":
                raise SpecError(f"ood[{i}].kind", "split", "a dataset, folder or noise source")
        if self.id.is_noise:
            raise SpecError("id.kind", self.id.kind, "a split, dataset or image folder")


def _models(value: Any) -> tuple[ModelRef, ...]:
    return tuple(ModelRef(name=v) if isinstance(v, str) else v for v in value)


def _pools(value: Any) -> tuple[PoolSpec, ...]:
    return (value,) if isinstance(value, PoolSpec) else tuple(value)


def _one_of(*allowed: str) -> Any:
    def check(_: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value not in allowed:
            raise UnknownNameError(attribute.name, value, allowed)

    return check


@attrs.frozen(kw_only=True)
class SeveritySpec(Seeded, _Keyed):
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

    name: str = attrs.field(default="severity", metadata=no_key())
    models: tuple[ModelRef, ...] = attrs.field(converter=_models)
    detectors: tuple[DetectorSpec, ...] = attrs.field(default=("msp",), converter=detector_specs)
    datasets: tuple[PoolSpec, ...] = attrs.field(converter=_pools)
    fit: SourceSpec | None = None
    n_est: int = attrs.field(default=150, validator=_positive)
    n_test: int = attrs.field(default=50, validator=_positive)
    n_levels: int = 11
    group_size: int | None = attrs.field(default=None, validator=_positive)
    metrics: tuple[str, ...] = attrs.field(default=DEFAULT_METRICS, converter=tuple)
    features: bool = True
    seeds: SeedsSpec = attrs.field(factory=lambda: SeedsSpec(n=1))
    stopping: StoppingSpec = attrs.field(factory=StoppingSpec)
    on_failure: str = attrs.field(default="record", validator=_one_of("record", "abort"))

    def __attrs_post_init__(self) -> None:
        for field, labels in (
            ("models", [m.label for m in self.models]),
            ("detectors", [d.label for d in self.detectors]),
            ("datasets", [d.label for d in self.datasets]),
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
        self._check_pools()
        self._check_detectors()
        self._check_models()
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
        data = _converter.unstructure(self)
        if not self.varies_dataset:  # written as in TOML: [id] and [[ood]] at the top
            pool = data.pop("datasets")[0]
            data |= {"id": pool["id"], "ood": pool["ood"]}
        return data

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


def _structure_pool(value: Any, field: str, base: Path | None, label: str) -> PoolSpec:
    """A :class:`PoolSpec` from a ``[[datasets]]`` table (``field`` = its path, "" at the top)."""
    table = _table(value, PoolSpec, field or "spec")
    at = f"{field}." if field else ""
    if "id" not in table:
        raise SpecError(f"{at}id", None, "an [id] table: the ID test set")
    if not isinstance(table.get("ood"), list) or not table["ood"]:
        raise SpecError(f"{at}ood", None, "one or more [[ood]] tables: the OOD class pool")
    return PoolSpec(
        label=str(table.get("label", label)),
        id=_structure_source(table["id"], f"{at}id", base),
        ood=tuple(_structure_source(s, f"{at}ood[{i}]", base) for i, s in enumerate(table["ood"])),
    )


def _unstructure_model(ref: ModelRef) -> dict[str, Any]:
    out = {f.name: getattr(ref, f.name) for f in attrs.fields(ModelRef) if f.name != "experiment"}
    if ref.experiment is not None:
        out["experiment"] = ref.experiment.to_dict()
    return out


_converter.register_unstructure_hook(DetectorSpec, detector_to_data)
_converter.register_unstructure_hook(ModelRef, _unstructure_model)

_OLD_SEED_HINT = (
    "severity specs take a [seeds] table like open set specs (n, start, values, pinned); a seed "
    "redraws the estimation/test split, the noise and the 'trained' models. "
    "For the old behaviour write [seeds] n = 1 (seed 0)"
)


def severity_spec_from_dict(
    data: Mapping[str, Any], base: str | Path | None = None
) -> SeveritySpec:
    """Build a :class:`SeveritySpec` from plain data; relative paths resolve against ``base``.

    One benchmark is written as top-level ``[id]`` and ``[[ood]]``; several as ``[[datasets]]``
    tables, each with a ``label``, an ``[id]`` and ``[[ood]]`` sources.
    """
    base = Path(base) if base is not None else None
    data = dict(data)
    if "seed" in data:
        raise SpecError("seed", data["seed"], "no top-level seed", _OLD_SEED_HINT)
    nested: dict[str, Any] = {}
    with spec_errors("severity spec"):
        nested["models"] = tuple(_structure_model(m, base) for m in data.pop("models", ()))
        nested["detectors"] = tuple(detector_from_data(d) for d in data.pop("detectors", ["msp"]))
        nested["datasets"] = _structure_pools(data, base)
        fit = data.pop("fit", None)
        if fit is not None:
            nested["fit"] = _structure_source(fit, "fit", base)
        if "seeds" in data:
            nested["seeds"] = SeedsSpec(**_table(data.pop("seeds"), SeedsSpec, "seeds"))
        if "stopping" in data:
            nested["stopping"] = StoppingSpec(
                **_table(data.pop("stopping"), StoppingSpec, "stopping")
            )
        plain = _converter.structure(data, _PlainFields)
        return SeveritySpec(**attrs.asdict(plain, recurse=False), **nested)


def _structure_pools(data: dict[str, Any], base: Path | None) -> tuple[PoolSpec, ...]:
    """The benchmarks of a spec: ``[[datasets]]`` tables, or the top-level ``id``/``ood``."""
    entries = data.pop("datasets", None)
    if entries is None:
        top = {k: data.pop(k) for k in ("id", "ood") if k in data}
        return (_structure_pool(top, "", base, str(data.get("name", "severity"))),)
    if "id" in data or "ood" in data:
        raise SpecError(
            "id/ood", "top-level tables", "[id] and [[ood]] inside each [[datasets]] table"
        )
    if not isinstance(entries, list) or not entries:
        raise SpecError("datasets", entries, "a non-empty list of [[datasets]] tables")
    pools = []
    for i, entry in enumerate(entries):
        field = f"datasets[{i}]"
        if isinstance(entry, Mapping) and "seed" in entry:
            raise SpecError(f"{field}.seed", entry["seed"], "no seed here", _OLD_SEED_HINT)
        label = entry.get("label") if isinstance(entry, Mapping) else None
        if not isinstance(label, str) or not label:
            raise SpecError(f"{field}.label", label, "a name for this dataset")
        pools.append(_structure_pool(entry, field, base, label))
    return tuple(pools)


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
    on_failure: str = "record"


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
