"""Experiment specs: frozen attrs classes, validated at construction, keyed by content.

A spec is data. It says *what* to compute (dataset, class/sample split, model, training recipe,
detectors, metrics, OOD test sets, seeds and stopping rule), never *how* (workers, device, cache
root): execution settings are arguments of :func:`oodsim.run`, or fields marked ``no_key`` that do
not enter :attr:`key`. Specs load from TOML with :func:`load_spec` and build the same in Python.
"""

from __future__ import annotations

import contextlib
import json
import math
import tomllib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import cattrs

from oodsim.errors import SpecError, UnknownNameError
from oodsim.keys import content_key, digest, no_key
from oodsim.seeds import STREAMS

# --------------------------------------------------------------------------- validators


def _field(instance: Any, attribute: attrs.Attribute) -> str:
    """The field's path as a user writes it in TOML, e.g. ``dataset.name`` or ``seeds.n``."""
    tag = getattr(type(instance), "TAG", "")
    return f"{tag}.{attribute.name}" if tag and tag != "experiment" else attribute.name


def _positive(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not value > 0:
        raise SpecError(_field(instance, attribute), value, "a number > 0")


def _non_negative(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not value >= 0:
        raise SpecError(_field(instance, attribute), value, "a number >= 0")


def _unit_interval(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise SpecError(_field(instance, attribute), value, "a number in [0, 1)")


def _one_of(*allowed: str) -> Callable[[Any, attrs.Attribute, Any], None]:
    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value not in allowed:
            raise UnknownNameError(_field(instance, attribute), value, allowed)

    return check


def _registered(names: Callable[[], list[str]]) -> Callable[[Any, attrs.Attribute, Any], None]:
    """Validate a name against a registry that is looked up lazily (plugins load late)."""

    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        known = names()
        if value not in known:
            raise UnknownNameError(_field(instance, attribute), value, known)

    return check


def _dataset_names() -> list[str]:
    # specs sit below the registries they validate against
    from oodsim.data.registry import DATASETS

    return sorted(DATASETS)


def _architecture_names() -> list[str]:
    # imports torch: only when an architecture name is checked
    from oodsim.models.architectures import ARCHITECTURES

    return sorted(ARCHITECTURES)


def _metric_names() -> list[str]:
    # specs sit below the registries they validate against
    from oodsim.metrics import METRICS

    return sorted(METRICS)


def _int_tuple(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


class _Keyed:
    """Mixin: a content key and dask tokenization by that key."""

    @property
    def key(self) -> str:
        """sha256 content key (see :mod:`oodsim.keys`)."""
        return content_key(self)

    def __dask_tokenize__(self) -> str:
        return self.key


# --------------------------------------------------------------------------- components


@attrs.frozen(kw_only=True)
class DatasetSpec(_Keyed):
    """A labelled image dataset from the registry in :mod:`oodsim.data.registry`."""

    TAG = "dataset"
    VERSION = "1"

    name: str = attrs.field(validator=_registered(_dataset_names))
    max_per_class: int | None = attrs.field(default=None, validator=_positive)
    image_size: int | None = attrs.field(default=None, validator=_positive)
    root: str | None = attrs.field(default=None, metadata=no_key())
    download: bool = attrs.field(default=False, metadata=no_key())


@attrs.frozen(kw_only=True)
class SplitSpec(_Keyed):
    """Class split (known / OOD train / OOD val / OOD test) and per-class sample split.

    ``n_known`` classes are drawn at random per seed unless ``known_classes`` lists fixed
    known-class sets; then the seed's ``class_split`` stream picks list ``entropy % len``, so
    consecutive seeds cycle through the lists. ``n_ood_test=None`` takes all remaining classes.
    """

    TAG = "split"
    VERSION = "1"

    n_known: int | None = attrs.field(default=6, validator=_positive)
    n_ood_train: int = attrs.field(default=0, validator=_non_negative)
    n_ood_val: int = attrs.field(default=0, validator=_non_negative)
    n_ood_test: int | None = attrs.field(default=None, validator=_non_negative)
    known_classes: tuple[tuple[int, ...], ...] = attrs.field(
        default=(), converter=lambda v: tuple(_int_tuple(c) for c in v)
    )
    fractions: tuple[float, float, float] = attrs.field(
        default=(0.6, 0.2, 0.2), converter=lambda v: tuple(float(f) for f in v)
    )

    @fractions.validator
    def _check_fractions(self, attribute: attrs.Attribute, value: tuple[float, ...]) -> None:
        if len(value) != 3 or any(not f > 0 for f in value) or not math.isclose(sum(value), 1.0):
            raise SpecError(
                "fractions", value, "three fractions > 0 (train, val, test) summing to 1"
            )

    @known_classes.validator
    def _check_known(self, attribute: attrs.Attribute, value: tuple[tuple[int, ...], ...]) -> None:
        for classes in value:
            if len(set(classes)) != len(classes) or not classes or min(classes) < 0:
                raise SpecError("known_classes", classes, "non-empty lists of distinct class ids")
            if self.n_known is not None and len(classes) != self.n_known:
                raise SpecError(
                    "known_classes", classes, f"lists of n_known={self.n_known} class ids"
                )

    def n_classes_needed(self) -> int:
        """The fewest classes a dataset must have for this split."""
        known = self.n_known or 0
        return known + self.n_ood_train + self.n_ood_val + (self.n_ood_test or 1)


@attrs.frozen(kw_only=True)
class ModelSpec(_Keyed):
    """A classifier architecture from :mod:`oodsim.models.architectures`."""

    TAG = "model"
    VERSION = "1"

    arch: str = attrs.field(default="small_cnn", validator=_registered(_architecture_names))
    dropout: float = attrs.field(default=0.2, validator=_unit_interval)
    width: int = attrs.field(default=32, validator=_positive)


@attrs.frozen(kw_only=True)
class AugmentSpec(_Keyed):
    """Training augmentation; ``hflip=None`` flips only datasets where a flip keeps the class."""

    TAG = "augment"
    VERSION = "1"

    enabled: bool = True
    hflip: bool | None = None
    rotation: float = attrs.field(default=10.0, validator=_non_negative)
    scale: tuple[float, float] = attrs.field(
        default=(0.9, 1.1), converter=lambda v: tuple(float(s) for s in v)
    )

    @scale.validator
    def _check_scale(self, attribute: attrs.Attribute, value: tuple[float, ...]) -> None:
        if len(value) != 2 or not 0 < value[0] <= value[1]:
            raise SpecError("scale", value, "(low, high) with 0 < low <= high")


@attrs.frozen(kw_only=True)
class TrainingSpec(_Keyed):
    """SGD with cosine annealing and early stopping on the D_in_val loss (the paper's recipe)."""

    TAG = "training"
    VERSION = "1"

    batch_size: int = attrs.field(default=128, validator=_positive)
    lr: float = attrs.field(default=0.01, validator=_positive)
    momentum: float = attrs.field(default=0.9, validator=_unit_interval)
    weight_decay: float = attrs.field(default=5e-4, validator=_non_negative)
    max_epochs: int = attrs.field(default=30, validator=_positive)
    patience: int = attrs.field(default=3, validator=_positive)
    augment: AugmentSpec = attrs.field(factory=AugmentSpec)


Params = tuple[tuple[str, Any], ...]


def _params(value: Any) -> Params:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted((str(k), tuple(v) if isinstance(v, list) else v) for k, v in items))


@attrs.frozen(kw_only=True)
class DetectorSpec(_Keyed):
    """A confidence function κ by registry name, with parameters; ``label`` names it in results."""

    TAG = "detector"
    VERSION = "1"

    name: str = attrs.field()
    params: Params = attrs.field(default=(), converter=_params)
    label: str = attrs.field(metadata=no_key())

    @label.default
    def _default_label(self) -> str:
        if not self.params:
            return self.name
        return self.name + "(" + ",".join(f"{k}={v}" for k, v in self.params) + ")"

    @name.validator
    def _check_name(self, attribute: attrs.Attribute, value: str) -> None:
        # specs sit below the registries they validate against
        from oodsim.detectors import available

        if value not in available():
            raise UnknownNameError("detector", value, available())

    @params.validator
    def _check_params(self, attribute: attrs.Attribute, value: tuple) -> None:
        # specs sit below the registries they validate against
        from oodsim.detectors import get_detector

        allowed = set(get_detector(self.name).defaults)
        for name, _ in value:
            if name not in allowed:
                raise UnknownNameError(f"detector {self.name!r} parameter", name, allowed)

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def key(self) -> str:
        """Content key; execution parameters (e.g. ``batch_size``) never enter it."""
        # specs sit below the registries they validate against
        from oodsim.detectors import EXECUTION_PARAMS

        params = {k: v for k, v in self.params if k not in EXECUTION_PARAMS}
        return digest(self.TAG, self.VERSION, {"name": self.name, "params": params})

    @property
    def version(self) -> str:
        """The detector implementation's version; enters the key of its cached κ."""
        # specs sit below the registries they validate against
        from oodsim.detectors import get_detector

        return get_detector(self.name).version


OOD_KINDS = ("held_out", "dataset", "uniform_noise", "gaussian_noise")


@attrs.frozen(kw_only=True)
class OODSetSpec(_Keyed):
    """An OOD test set: the held-out classes, another dataset, or noise images.

    Noise has the in-distribution image shape: uniform U(0, 255) or Gaussian N(128, 128) clipped
    to [0, 255] (the study's σ = 128). ``n_samples`` bounds a dataset set (random subset).
    """

    TAG = "ood"
    VERSION = "1"

    kind: str = attrs.field(default="held_out", validator=_one_of(*OOD_KINDS))
    dataset: DatasetSpec | None = None
    n_samples: int | None = attrs.field(default=None, validator=_positive)
    label: str = attrs.field(metadata=no_key())

    @label.default
    def _default_label(self) -> str:
        return self.dataset.name if self.kind == "dataset" and self.dataset else self.kind

    def __attrs_post_init__(self) -> None:
        if (self.kind == "dataset") != (self.dataset is not None):
            raise SpecError("ood.dataset", self.dataset, "a dataset exactly when kind = 'dataset'")

    @property
    def size(self) -> int | None:
        """Number of samples; noise sets default to 1,000 as in the study."""
        if self.kind in ("uniform_noise", "gaussian_noise"):
            return self.n_samples or 1000
        return self.n_samples


@attrs.frozen(kw_only=True)
class SeedsSpec(_Keyed):
    """Which simulations to run: seeds ``start .. start+n-1`` (or ``values``), streams pinned."""

    TAG = "seeds"
    VERSION = "1"

    n: int = attrs.field(default=50, validator=_positive)
    start: int = attrs.field(default=0, validator=_non_negative)
    values: tuple[int, ...] = attrs.field(default=(), converter=_int_tuple)
    pinned: Params = attrs.field(default=(), converter=_params)

    @pinned.validator
    def _check_pinned(self, attribute: attrs.Attribute, value: tuple) -> None:
        for stream, entropy in value:
            if stream not in STREAMS:
                raise UnknownNameError("seeds.pinned", stream, STREAMS)
            if not isinstance(entropy, int) or entropy < 0:
                raise SpecError(f"seeds.pinned.{stream}", entropy, "an integer >= 0")

    def all(self) -> tuple[int, ...]:
        """The seeds in the order they are submitted."""
        return self.values or tuple(range(self.start, self.start + self.n))


STOPPING_RULES = ("fixed", "ci_width", "ranking")


@attrs.frozen(kw_only=True)
class StoppingSpec(_Keyed):
    """When to stop simulating: after all seeds, or by a sequential rule checked per batch."""

    TAG = "stopping"
    VERSION = "1"

    rule: str = attrs.field(default="fixed", validator=_one_of(*STOPPING_RULES))
    metric: str = "auroc"  # checked against the spec's own metrics (Seeded.check_stopping)
    epsilon: float = attrs.field(default=0.01, validator=_positive)
    alpha: float = attrs.field(default=0.05, validator=_unit_interval)
    min_seeds: int = attrs.field(default=5, validator=_positive)
    max_seeds: int | None = attrs.field(default=None, validator=_positive)
    batch_size: int = attrs.field(default=10, validator=_positive)
    severity: str | None = attrs.field(
        default=None, converter=lambda v: None if v is None else str(v)
    )


@attrs.frozen(kw_only=True)
class DegenerateSpec(_Keyed):
    """Which simulations are degenerate: the classifier's closed-set test accuracy is not
    clearly above chance (one-sided binomial test at level ``alpha`` against the accuracy of
    always predicting the most frequent test class; see :mod:`oodsim.protocols.degenerate`).

    ``keep = false`` (default) records the reason in ``failure`` and excludes the seed from
    every estimate like a failed seed; ``keep = true`` keeps its scores in. Either way the
    reason is in the per-seed ``degenerate`` variable of the results.
    """

    TAG = "degenerate"
    VERSION = "1"

    alpha: float = attrs.field(default=1e-3, validator=_unit_interval)
    keep: bool = False

    @alpha.validator
    def _check_alpha(self, attribute: attrs.Attribute, value: float) -> None:
        if not value > 0.0:
            raise SpecError(_field(self, attribute), value, "a number in (0, 1)")


class Seeded:
    """Mixin of every protocol's spec: ``seeds``, ``stopping`` and ``on_failure`` fields.

    The rule watches ``stopping.metric`` at severity level ``stopping.severity`` (default: the
    first level) for every method; see :func:`oodsim.engine.run.stopping_values`.
    """

    seeds: SeedsSpec
    stopping: StoppingSpec
    metrics: tuple[str, ...]

    @property
    def max_seeds(self) -> int:
        """The most seeds the run may take: ``stopping.max_seeds`` or all seeds."""
        return self.stopping.max_seeds or len(self.seeds.all())

    def check_stopping(self, levels: tuple[str, ...]) -> None:
        """A sequential rule must watch one of the spec's metrics and levels and fit the seeds."""
        rule = self.stopping
        if rule.severity is not None and rule.severity not in levels:
            raise SpecError("stopping.severity", rule.severity, f"one of the levels {list(levels)}")
        if rule.rule == "fixed":
            return
        if rule.metric not in self.metrics:
            raise SpecError(
                "stopping.metric",
                rule.metric,
                f"one of the spec's metrics {list(self.metrics)}",
            )
        if rule.max_seeds is not None and rule.max_seeds > len(self.seeds.all()):
            raise SpecError(
                "stopping.max_seeds",
                rule.max_seeds,
                f"at most the {len(self.seeds.all())} seeds in [seeds]",
            )
        if rule.min_seeds > self.max_seeds:
            raise SpecError(
                "stopping.min_seeds", rule.min_seeds, f"at most max_seeds = {self.max_seeds}"
            )


# --------------------------------------------------------------------------- the experiment


def detector_specs(value: Any) -> tuple[DetectorSpec, ...]:
    """Converter: detector names or specs → a tuple of :class:`DetectorSpec`."""
    return tuple(DetectorSpec(name=v) if isinstance(v, str) else v for v in value)


def _ood_sets(value: Any) -> tuple[OODSetSpec, ...]:
    return tuple(OODSetSpec(kind=v) if isinstance(v, str) else v for v in value)


@attrs.frozen(kw_only=True)
class ExperimentSpec(Seeded, _Keyed):
    """An open set simulation experiment: everything that determines its results."""

    TAG = "experiment"
    VERSION = "1"

    name: str = attrs.field(default="experiment", metadata=no_key())
    dataset: DatasetSpec
    split: SplitSpec = attrs.field(factory=SplitSpec)
    model: ModelSpec = attrs.field(factory=ModelSpec)
    training: TrainingSpec = attrs.field(factory=TrainingSpec)
    detectors: tuple[DetectorSpec, ...] = attrs.field(default=("msp",), converter=detector_specs)
    metrics: tuple[str, ...] = attrs.field(default=("auroc", "accuracy"), converter=tuple)
    ood: tuple[OODSetSpec, ...] = attrs.field(default=("held_out",), converter=_ood_sets)
    seeds: SeedsSpec = attrs.field(factory=SeedsSpec)
    stopping: StoppingSpec = attrs.field(factory=StoppingSpec)
    on_failure: str = attrs.field(default="record", validator=_one_of("record", "abort"))
    degenerate: DegenerateSpec = attrs.field(factory=DegenerateSpec)

    @metrics.validator
    def _check_metrics(self, attribute: attrs.Attribute, value: tuple[str, ...]) -> None:
        for metric in value:
            if metric not in _metric_names():
                raise UnknownNameError("metrics", metric, _metric_names())
        if len(set(value)) != len(value) or not value:
            raise SpecError("metrics", value, "a non-empty list of distinct metric names")

    def __attrs_post_init__(self) -> None:
        self._check_unique("detectors", [d.label for d in self.detectors])
        self._check_grids()
        self._check_unique("ood", [o.label for o in self.ood])
        self._check_split_fits_dataset()
        self.check_stopping(("all",))

    def _check_grids(self) -> None:
        # specs sit below the protocols
        from oodsim.protocols.tuning import is_grid

        tuned = [d.label for d in self.detectors if is_grid(d.kwargs)]
        if tuned and self.split.n_ood_val < 1:
            raise SpecError(
                "split.n_ood_val",
                self.split.n_ood_val,
                f">= 1 OOD validation class to choose the parameters of {tuned}",
            )

    @staticmethod
    def _check_unique(field: str, labels: list[str]) -> None:
        if not labels or len(set(labels)) != len(labels):
            raise SpecError(field, labels, "a non-empty list with distinct labels")

    def _check_split_fits_dataset(self) -> None:
        # specs sit below the registries they validate against
        from oodsim.data.registry import DATASETS

        n_classes = DATASETS[self.dataset.name].n_classes
        if n_classes is None:  # image folders: checked when the data is read
            return
        if self.split.n_known is None and not self.split.known_classes:
            raise SpecError("split.n_known", None, "a number of known classes or known_classes")
        needed = self.split.n_classes_needed()
        if needed > n_classes or (self.split.n_known or 0) >= n_classes:
            raise SpecError(
                "split",
                f"n_known={self.split.n_known}, n_ood_train={self.split.n_ood_train}, "
                f"n_ood_val={self.split.n_ood_val}, n_ood_test={self.split.n_ood_test}",
                f"at most {n_classes} classes in total for dataset {self.dataset.name!r} "
                "with at least one OOD test class",
            )
        for classes in self.split.known_classes:
            if max(classes) >= n_classes:
                raise SpecError("split.known_classes", classes, f"class ids in 0..{n_classes - 1}")

    @property
    def varies_ood(self) -> bool:
        """Whether results get an ``ood`` dimension (more than one OOD test set)."""
        return len(self.ood) > 1

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (round-trips through :func:`spec_from_dict`)."""
        return _converter.unstructure(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


# --------------------------------------------------------------------------- TOML / dict I/O

_converter = cattrs.Converter(forbid_extra_keys=True)


def detector_from_data(value: Any) -> DetectorSpec:
    """A detector from TOML data: a name, or a table with ``name``, parameters and ``label``."""
    if isinstance(value, str):
        return DetectorSpec(name=value)
    if not isinstance(value, Mapping) or "name" not in value:
        raise SpecError("detectors", value, "a name or a table with 'name' and parameters")
    value = dict(value)
    name, label = value.pop("name"), value.pop("label", None)
    params = dict(value.pop("params", {})) | value
    return DetectorSpec(name=name, params=params, **({"label": label} if label else {}))


def detector_to_data(spec: DetectorSpec) -> dict[str, Any]:
    """The TOML form of a detector (inverse of :func:`detector_from_data`)."""
    return {"name": spec.name, "label": spec.label, **spec.kwargs}


def _structure_ood(value: Any, _: type) -> OODSetSpec:
    if isinstance(value, str):
        return OODSetSpec(kind=value)
    value = dict(value)
    if isinstance(value.get("dataset"), Mapping | str):
        dataset = value["dataset"]
        value["dataset"] = _converter.structure(
            {"name": dataset} if isinstance(dataset, str) else dataset, DatasetSpec
        )
    return OODSetSpec(**value)


_converter.register_structure_hook(DetectorSpec, lambda value, _: detector_from_data(value))
_converter.register_unstructure_hook(DetectorSpec, detector_to_data)
_converter.register_structure_hook(OODSetSpec, _structure_ood)
_converter.register_structure_hook_func(lambda t: t == Params, lambda v, _: _params(v))
_converter.register_unstructure_hook_func(lambda t: t == Params, dict)


def first_spec_error(error: BaseException) -> SpecError | None:
    """The first :class:`SpecError` inside a (nested) cattrs validation error, if any."""
    if isinstance(error, SpecError):
        return error
    for inner in getattr(error, "exceptions", ()):
        found = first_spec_error(inner)
        if found is not None:
            return found
    return None


def _unknown_field(error: BaseException, messages: list[str]) -> UnknownNameError | None:
    """A misspelled field name as an error that names its table, the allowed fields and the
    closest one (``training.max_epoch`` → "Did you mean 'max_epochs'?")."""
    extra = _first_extra_keys(error)
    if extra is None:
        return None
    path = next((m.rsplit(" @ ", 1)[1] for m in messages if "extra fields" in m), "spec")
    table = path.removeprefix("spec.").removeprefix("spec")
    field = f"{table} field" if table else "field"
    allowed = [f.name for f in attrs.fields(extra.cl)]
    return UnknownNameError(field, sorted(extra.extra_fields)[0], allowed)


def _first_extra_keys(error: BaseException) -> cattrs.ForbiddenExtraKeysError | None:
    if isinstance(error, cattrs.ForbiddenExtraKeysError):
        return error
    for inner in getattr(error, "exceptions", ()):
        found = _first_extra_keys(inner)
        if found is not None:
            return found
    return None


@contextlib.contextmanager
def spec_errors(what: str = "spec") -> Iterator[None]:
    """Turn the errors of building a spec from data into one :class:`SpecError`: the first
    validator's own error when there is one, else cattrs' messages with field paths."""
    try:
        yield
    except SpecError:
        raise
    except cattrs.BaseValidationError as error:
        found = first_spec_error(error)
        if found is not None:
            raise found from None
        messages = cattrs.transform_error(error, path=what)
        unknown = _unknown_field(error, messages)
        if unknown is not None:
            raise unknown from None
        raise SpecError(what, "; ".join(messages), "fields of the documented types") from None
    except (TypeError, ValueError) as error:
        raise SpecError(what, str(error), "fields of the documented types") from None


def spec_from_dict(data: Mapping[str, Any]) -> ExperimentSpec:
    """Build an :class:`ExperimentSpec` from plain data, with field-path error messages."""
    with spec_errors("spec"):
        return _converter.structure(dict(data), ExperimentSpec)


def load_spec(path: str | Path) -> ExperimentSpec:
    """Read an experiment spec from a TOML file; errors name the line/column or the field."""
    return spec_from_dict(read_toml(path))


def read_toml(path: str | Path) -> dict[str, Any]:
    """A TOML file as plain data; a missing file or a syntax error (with line and column) is a
    :class:`SpecError`."""
    path = Path(path)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError("spec file", str(path), "an existing TOML file") from None
    except tomllib.TOMLDecodeError as error:
        raise SpecError(f"spec file {path}", "TOML syntax", f"valid TOML ({error})") from None
