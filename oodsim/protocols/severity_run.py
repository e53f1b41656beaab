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
"""

from __future__ import annotations

import functools
import json
import sys
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import attrs
import cattrs
import numpy as np
import xarray as xr

from oodsim.errors import DataNotFoundError, OodsimError, SpecError, UnknownNameError
from oodsim.keys import digest, no_key
from oodsim.models.zoo import ModelRef
from oodsim.outputs import Outputs
from oodsim.specs import DetectorSpec, _Keyed, spec_from_dict
from oodsim.store import Store, default_root, summarize_events

OUTPUTS = "severity_outputs"
KAPPA = "severity_kappa"
VERSION = "1"  # bump when source sampling or the stored arrays change: it enters output keys
SOURCE_KINDS = ("split", "dataset", "image_folder", "uniform_noise", "gaussian_noise")
NOISE_KINDS = ("uniform_noise", "gaussian_noise")
SPLIT_SUBSETS = ("in_train", "in_val", "in_test")
LABEL_MODES = ("auto", "position", "imagenet1k")
DEFAULT_METRICS = ("auroc", "aupr_in", "aupr_out", "fpr95")


class SeverityRunError(OodsimError):
    """A (model, source) task failed: non-finite outputs, unreadable images, wrong labels."""


# --------------------------------------------------------------------------- spec


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


def _detectors(value: Any) -> tuple[DetectorSpec, ...]:
    return tuple(DetectorSpec(name=v) if isinstance(v, str) else v for v in value)


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
    detectors: tuple[DetectorSpec, ...] = attrs.field(default=("msp",), converter=_detectors)
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
        from oodsim.detectors import get_detector
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
        if isinstance(self.n_levels, bool) or not isinstance(self.n_levels, int):
            raise SpecError("n_levels", self.n_levels, "an integer >= 2")
        if self.n_levels < 2:
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
        needs = {n for d in self.detectors for n in get_detector(d.name).needs}
        if "features" in needs and not self.features:
            raise SpecError("features", False, "true: a detector needs penultimate features")
        fit_needed = any(get_detector(d.name).fit_on for d in self.detectors)
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


def _structure_detector(value: Any) -> DetectorSpec:
    if isinstance(value, str):
        return DetectorSpec(name=value)
    if not isinstance(value, Mapping) or "name" not in value:
        raise SpecError("detectors", value, "a name or a table with 'name' and parameters")
    value = dict(value)
    name, label = value.pop("name"), value.pop("label", None)
    params = dict(value.pop("params", {})) | value
    return DetectorSpec(name=name, params=params, **({"label": label} if label else {}))


def _structure_source(value: Any, field: str, base: Path | None) -> SourceSpec:
    table = _table(value, SourceSpec, field)
    if table.get("root") and base is not None:
        root = Path(str(table["root"])).expanduser()
        table["root"] = str(root if root.is_absolute() else base / root)
    return SourceSpec(**table)


def _unstructure_detector(spec: DetectorSpec) -> dict[str, Any]:
    return {"name": spec.name, "label": spec.label, **spec.kwargs}


def _unstructure_model(ref: ModelRef) -> dict[str, Any]:
    out = {f.name: getattr(ref, f.name) for f in attrs.fields(ModelRef) if f.name != "experiment"}
    if ref.experiment is not None:
        out["experiment"] = ref.experiment.to_dict()
    return out


_converter.register_unstructure_hook(DetectorSpec, _unstructure_detector)
_converter.register_unstructure_hook(ModelRef, _unstructure_model)


def _first_spec_error(error: BaseException) -> SpecError | None:
    if isinstance(error, SpecError):
        return error
    for inner in getattr(error, "exceptions", ()):
        found = _first_spec_error(inner)
        if found is not None:
            return found
    return None


def severity_spec_from_dict(
    data: Mapping[str, Any], base: str | Path | None = None
) -> SeveritySpec:
    """Build a :class:`SeveritySpec` from plain data; relative paths resolve against ``base``."""
    base = Path(base) if base is not None else None
    data = dict(data)
    nested: dict[str, Any] = {}
    try:
        nested["models"] = tuple(_structure_model(m, base) for m in data.pop("models", ()))
        nested["detectors"] = tuple(_structure_detector(d) for d in data.pop("detectors", ["msp"]))
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
    except SpecError:
        raise
    except cattrs.BaseValidationError as error:
        found = _first_spec_error(error)
        if found is not None:
            raise found from None
        messages = cattrs.transform_error(error, path="severity spec")
        raise SpecError(
            "severity spec", "; ".join(messages), "fields of the documented types"
        ) from None
    except (TypeError, ValueError) as error:
        raise SpecError("severity spec", str(error), "fields of the documented types") from None
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
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError("spec file", str(path), "an existing TOML file") from None
    except tomllib.TOMLDecodeError as error:
        raise SpecError(f"spec file {path}", "TOML syntax", f"valid TOML ({error})") from None
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


# --------------------------------------------------------------------------- plan


@attrs.frozen
class Task:
    """One (model, source[, shard]) unit of work: its outputs entry and model-based κ entries."""

    model: int  # index into spec.models
    role: str  # "id", "ood", "fit_train", "fit_val"
    source: SourceSpec
    per_class: int | None
    shard: int | None  # index of the class shard of an image folder, else None
    outputs_key: str
    kappa_keys: tuple[tuple[int, str], ...]  # (detector index, key)

    def entries(self) -> list[tuple[str, str]]:
        return [(OUTPUTS, self.outputs_key)] + [(KAPPA, key) for _, key in self.kappa_keys]


def outputs_key(
    ref: ModelRef,
    source: SourceSpec,
    per_class: int | None,
    features: bool,
    shard: int | None = None,
) -> str:
    from oodsim.models import inference, zoo

    fields = {
        "model": ref.key,
        "source": source.key,
        "per_class": per_class,
        "features": features,
        "shard": shard,
    }
    return digest(OUTPUTS, f"{VERSION}/{zoo.VERSION}/{inference.VERSION}", fields)


def kappa_key(outputs: str, detector: DetectorSpec, seed: int) -> str:
    fields = {"outputs": outputs, "detector": detector.key, "seed": seed}
    return digest(KAPPA, detector.version, fields)


def _needs(detector: DetectorSpec) -> Any:
    from oodsim.detectors import get_detector

    return get_detector(detector.name)


def fit_sources(spec: SeveritySpec, ref: ModelRef) -> dict[str, SourceSpec]:
    """The ID fit sets of a model by split name (``train``/``val``); empty when none is needed."""
    if not any(_needs(d).fit_on for d in spec.detectors):
        return {}
    if spec.fit is not None:
        return {"train": spec.fit, "val": spec.fit}
    return {which: SourceSpec(kind="split", subset=f"in_{which}") for which in ("train", "val")}


def n_shards(source: SourceSpec) -> int | None:
    """Number of class shards of a sharded image folder (lists its class folders), else None."""
    if source.kind != "image_folder" or not source.shard_size:
        return None
    return -(-len(folder_classes(source)) // source.shard_size)


def source_tasks(
    spec: SeveritySpec, model: int, role: str, source: SourceSpec, per_class: int | None
) -> list[Task]:
    """The tasks (one per shard) that give one model's outputs on one source."""
    ref = spec.models[model]
    detectors = [(j, d) for j, d in enumerate(spec.detectors) if "model" in _needs(d).needs]
    shards = n_shards(source)
    tasks = []
    for shard in [None] if shards is None else range(shards):
        key = outputs_key(ref, source, per_class, spec.features, shard)
        kappas: tuple[tuple[int, str], ...] = ()
        if role in ("id", "ood"):
            kappas = tuple((j, kappa_key(key, d, spec.seed)) for j, d in detectors)
        tasks.append(Task(model, role, source, per_class, shard, key, kappas))
    return tasks


def _roles(spec: SeveritySpec, model: int) -> list[tuple[str, SourceSpec, int | None]]:
    """(role, source, samples per class) of every source one model is run on."""
    roles = [("id", spec.id, spec.id.max_per_class)]
    roles += [("ood", s, spec.pool_per_class(s)) for s in spec.ood]
    fits = fit_sources(spec, spec.models[model])
    return roles + [(f"fit_{w}", s, s.max_per_class) for w, s in fits.items()]


def plan(spec: SeveritySpec) -> list[Task]:
    """Every task of a spec, with the store entries it produces (one fit set serves both)."""
    tasks, seen = [], set()
    for i in range(len(spec.models)):
        for role, source, per_class in _roles(spec, i):
            for task in source_tasks(spec, i, role, source, per_class):
                if task.outputs_key not in seen:
                    seen.add(task.outputs_key)
                    tasks.append(task)
    return tasks


# --------------------------------------------------------------------------- source images


@attrs.frozen(eq=False)
class SourceItems:
    """A source's samples before inference: uint8 images or image files, with class positions.

    ``targets`` is each sample's column in the model's outputs (-1: not a model class).
    """

    class_names: tuple[str, ...]
    labels: np.ndarray
    index: np.ndarray
    targets: np.ndarray
    images: np.ndarray | None = None
    files: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return len(self.labels)


def _source_rng(
    source: SourceSpec, per_class: int | None, shard: int | None = None
) -> np.random.Generator:
    """A generator that depends on the source only: every model sees the same samples."""
    fields = {"source": source.key, "per_class": per_class, "shard": shard}
    return np.random.default_rng(int(digest("severity_sampling", VERSION, fields)[:16], 16))


def subsample(labels: np.ndarray, per_class: int | None, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of at most ``per_class`` random samples of every class."""
    if per_class is None:
        return np.arange(len(labels))
    keep = [
        rng.choice(members, size=min(per_class, members.size), replace=False)
        for members in (np.flatnonzero(labels == c) for c in np.unique(labels))
    ]
    return np.sort(np.concatenate(keep)) if keep else np.zeros(0, np.int64)


def _targets(
    source: SourceSpec, names: Sequence[str], labels: np.ndarray, n_classes: int
) -> np.ndarray:
    """Model output column of each sample (-1 where the class is not one of the model's)."""
    from oodsim.data.imagenet_classes import imagenet1k_wnids

    mode = source.labels
    wnids = imagenet1k_wnids() if n_classes == 1000 else ()
    if mode == "auto":
        mode = "imagenet1k" if wnids and all(n in set(wnids) for n in names) else "position"
    if mode == "imagenet1k":
        if n_classes != 1000:
            raise SpecError("labels", "imagenet1k", "a 1000-class ImageNet model")
        position = {w: i for i, w in enumerate(wnids)}
        columns = np.array([position.get(n, -1) for n in names], dtype=np.int64)
    else:
        columns = np.arange(len(names), dtype=np.int64)
        columns[columns >= n_classes] = -1
    return columns[labels] if len(labels) else np.zeros(0, np.int64)


def _pick_classes(source: SourceSpec, names: Sequence[str]) -> list[int]:
    """Class ids chosen by ``source.classes`` (ids or names), all when empty."""
    if not source.classes:
        return list(range(len(names)))
    chosen = []
    for value in source.classes:
        if isinstance(value, int):
            if not 0 <= value < len(names):
                raise SpecError(f"{source.label}.classes", value, f"ids in 0..{len(names) - 1}")
            chosen.append(value)
        elif value in names:
            chosen.append(list(names).index(value))
        else:
            raise UnknownNameError(f"{source.label}.classes", value, names)
    return chosen


def _dataset_items(source: SourceSpec, per_class: int | None, n_classes: int) -> SourceItems:
    from oodsim.data.registry import load_dataset

    data = load_dataset(source.name, source.root, False, source.image_size)
    chosen = _pick_classes(source, data.class_names)
    lookup = np.full(data.n_classes, -1, dtype=np.int64)
    lookup[chosen] = np.arange(len(chosen))
    members = np.flatnonzero(lookup[data.labels] >= 0)
    index = members[subsample(data.labels[members], per_class, _source_rng(source, per_class))]
    labels = lookup[data.labels[index]]
    names = tuple(data.class_names[c] for c in chosen)
    return SourceItems(
        names, labels, index, _targets(source, names, labels, n_classes), images=data.images[index]
    )


@functools.lru_cache(maxsize=32)
def _folder_classes(root: str, classes: tuple[str | int, ...], wordnet: bool) -> tuple[str, ...]:
    path = Path(root)
    if not path.is_dir():
        raise DataNotFoundError(f"image folder {path} does not exist")
    names = tuple(sorted(p.name for p in path.iterdir() if p.is_dir()))
    if classes:
        missing = [str(c) for c in classes if str(c) not in names]
        if missing:
            raise DataNotFoundError(f"class folders {missing[:5]} not found under {path}")
        names = tuple(str(c) for c in classes)
    if wordnet:
        from oodsim.data.imagenet_classes import filter_ood_classes

        names = filter_ood_classes(None, names).kept
    if not names:
        raise DataNotFoundError(f"image folder {path} has no (kept) class sub-folders")
    return names


def folder_classes(source: SourceSpec) -> tuple[str, ...]:
    """The class folders of an image folder source: chosen, then WordNet-filtered if asked."""
    return _folder_classes(str(source.root), source.classes, source.wordnet_filter)


def _class_files(folder: Path) -> list[Path]:
    from oodsim.data.builtin import IMAGE_SUFFIXES

    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)


def _folder_items(
    source: SourceSpec, per_class: int | None, n_classes: int, shard: int | None
) -> SourceItems:
    names = folder_classes(source)
    if shard is not None:
        size = source.shard_size or len(names)
        names = names[shard * size : (shard + 1) * size]
    files = [_class_files(Path(str(source.root)) / n) for n in names]
    all_files = [f for group in files for f in group]
    all_labels = np.repeat(np.arange(len(names)), [len(g) for g in files])
    index = subsample(all_labels, per_class, _source_rng(source, per_class, shard))
    labels = all_labels[index]
    return SourceItems(
        names,
        labels,
        index,
        _targets(source, names, labels, n_classes),
        files=tuple(str(all_files[i]) for i in index),
    )


def noise_images(source: SourceSpec, shape: tuple[int, int, int]) -> np.ndarray:
    """``n_samples`` uint8 noise images of ``shape`` drawn from the source's own stream."""
    rng = _source_rng(source, None)
    size = (source.n_samples, *shape)
    if source.kind == "uniform_noise":
        noise = rng.uniform(source.low, source.high, size=size)
    else:
        noise = rng.normal(source.mean, source.std, size=size)
    return np.clip(np.rint(noise), 0, 255).astype(np.uint8)


def source_items(
    source: SourceSpec,
    per_class: int | None,
    loaded: Any,
    ref: ModelRef | None = None,
    shard: int | None = None,
) -> SourceItems:
    """The samples of a source for a loaded model (:class:`~oodsim.models.zoo.LoadedModel`).

    ``split`` sources need the ``trained`` model's ``ref`` (its experiment names the data).
    """
    if source.kind == "split":
        return _split_items(source, loaded, ref)
    if source.kind == "dataset":
        return _dataset_items(source, per_class, loaded.n_classes)
    if source.kind == "image_folder":
        return _folder_items(source, per_class, loaded.n_classes, shard)
    images = noise_images(source, source.shape or loaded.preprocessing.input_shape)
    n = len(images)
    return SourceItems(
        (source.label,),
        np.zeros(n, np.int64),
        np.arange(n),
        np.full(n, -1, np.int64),
        images=images,
    )


def _split_items(source: SourceSpec, loaded: Any, ref: ModelRef | None) -> SourceItems:
    from oodsim.data.registry import load_dataset

    if loaded.split is None or ref is None or ref.experiment is None:
        raise SpecError("kind", "split", "a source of 'trained' models only")
    ds = ref.experiment.dataset
    data = load_dataset(ds.name, ds.root, ds.download, ds.image_size)
    index = loaded.split.indices[source.subset]
    labels = loaded.split.known_labels(data.labels)[index]
    names = tuple(data.class_names[c] for c in loaded.split.classes.known)
    return SourceItems(names, labels, index, labels.copy(), images=data.images[index])


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
        chunk = attrs.evolve(
            items,
            labels=items.labels[rows],
            index=items.index[rows],
            targets=items.targets[rows],
            images=None if items.images is None else items.images[rows],
            files=None if items.files is None else items.files[rows],
        )
        inputs = torch.cat(list(_batches(chunk, preprocessing, batch_size))).to(device)
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
        if "seed" in _needs(detector).defaults:
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


def _checkpoint_missing(ref: ModelRef, store: Store) -> bool:
    from oodsim.protocols.open_set import CHECKPOINT, checkpoint_key
    from oodsim.seeds import SeedStreams

    streams = SeedStreams(ref.seed, dict(ref.experiment.seeds.pinned))
    return not store.has(CHECKPOINT, checkpoint_key(ref.experiment, streams))


# --------------------------------------------------------------------------- score (client)


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


def _load_outputs(store: Store, tasks: Sequence[Task]) -> tuple[Outputs, list[str]]:
    """Outputs of all shards of one source, concatenated, and its class names."""
    entries = [_entry(store, t) for t in tasks]
    names = [n for e in entries for n in e.meta["class_names"]]
    return Outputs.concat([_outputs(e, ood=False) for e in entries]), names


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
        info = _needs(detector)
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
        fits[which] = _load_outputs(store, tasks)[0]
    id_tasks = source_tasks(spec, model, "id", spec.id, spec.id.max_per_class)
    id_entries = [_entry(store, t) for t in id_tasks]
    id_parts = [_outputs(e, ood=False) for e in id_entries]
    id_out, id_names = (
        Outputs.concat(id_parts),
        [n for e in id_entries for n in e.meta["class_names"]],
    )
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
    from oodsim.data.registry import load_dataset
    from oodsim.data.splits import split_classes
    from oodsim.seeds import SeedStreams

    experiment = ref.experiment
    ds = experiment.dataset
    data = load_dataset(ds.name, ds.root, ds.download, ds.image_size)
    streams = SeedStreams(ref.seed, dict(experiment.seeds.pinned))
    known = set(split_classes(data.n_classes, experiment.split, streams).known)
    for i, source in enumerate(spec.ood):
        if source.kind == "dataset" and source.name == ds.name:
            overlap = sorted(known & set(_pick_classes(source, data.class_names)))
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
