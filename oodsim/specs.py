"""Experiment specs: frozen attrs classes, validated at construction, keyed by content.

A spec is data. It says *what* to compute (dataset, class/sample split, model, training recipe,
detectors, metrics, OOD test sets, seeds and stopping rule), never *how* (workers, device, cache
root): execution settings are arguments of :func:`oodsim.run`, or fields marked ``no_key`` that do
not enter :attr:`key`. Specs load from TOML with :func:`load_spec` and build the same in Python.

Types are strict, for every protocol's spec (see :func:`spec_class` and :func:`structure`): a
value of the wrong type is a :class:`SpecError` naming the field path, the value and the
expected type; nothing is coerced except an integer where a float is expected (it becomes that
float) and a list where a tuple is expected. Floats are finite, integers fit in 64 bits.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import math
import numbers
import os
import re
import tomllib
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import cattrs
from cattrs.errors import AttributeValidationNote, IterableValidationNote

from oodsim.errors import SpecError, UnknownNameError
from oodsim.keys import content_key, digest, no_key
from oodsim.seeds import STREAMS, SeedRange

INT64_MAX = 2**63 - 1
#: A spec ``name`` names files (the default output ``results/<name>.zarr``): letters, digits,
#: ``.``, ``_`` and ``-``, at most 100 characters, not starting with a dot.
SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")

# --------------------------------------------------------------------------- strict types

#: How messages name a type: (singular, plural). Protocols add their tables with
#: :func:`register_table`.
_NOUNS: dict[Any, tuple[str, str]] = {
    int: ("an integer", "integers"),
    float: ("a finite number", "finite numbers"),
    bool: ("true or false", "true/false values"),
    str: ("a string", "strings"),
}
#: Tables that may be written as one string: ``"msp"`` → ``{name = "msp"}``.
_SHORTHAND: dict[type, str] = {}


def register_table(
    cls: type, *, shorthand: str | None = None, nouns: tuple[str, str] | None = None
) -> None:
    """Say how data becomes a ``cls`` table: ``shorthand`` is the field a lone string fills
    (``"timm:resnet18"`` → ``{name = "timm:resnet18"}``); ``nouns`` name it in messages."""
    if shorthand is not None:
        _SHORTHAND[cls] = shorthand
    if nouns is not None:
        _NOUNS[cls] = nouns


def type_nouns(tp: Any) -> tuple[str, str]:
    """How an error message names a type: ``("an integer", "integers")``."""
    if tp in _NOUNS:
        return _NOUNS[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        named = [type_nouns(a) for a in args if a is not type(None)]
        return " or ".join(s for s, _ in named), " or ".join(p for _, p in named)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            plural = type_nouns(args[0])[1]
            return f"a list of {plural}", f"lists of {plural}"
        if len(set(args)) == 1:
            plural = type_nouns(args[0])[1]
            return f"a list of {len(args)} {plural}", f"lists of {len(args)} {plural}"
        listed = ", ".join(type_nouns(a)[0] for a in args)
        return f"a list [{listed}]", f"lists [{listed}]"
    if tp is Any:
        return "anything", "anything"
    table = getattr(tp, "TAG", getattr(tp, "__name__", str(tp)))
    return f"a {table} table", f"{table} tables"


class _Mismatch(Exception):
    """A value of the wrong type at ``at`` (e.g. ``[2]``) inside the value being checked."""

    def __init__(self, at: str, value: Any, expected: str) -> None:
        super().__init__(at, value, expected)
        self.at, self.value, self.expected = at, value, expected


def _conform(value: Any, tp: Any, at: str = "") -> Any:
    """``value`` checked against the type ``tp``, without coercion.

    Returns the value with lists as tuples and integers in float places as floats; raises
    :class:`_Mismatch` for anything else: a bool is no integer, a string no number or list, a
    float must be finite, an integer must fit in 64 bits.
    """
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _conform(value, option, at)
            except _Mismatch as mismatch:
                if mismatch.at != at:  # the right container with a wrong item: say which
                    raise
        raise _Mismatch(at, value, type_nouns(tp)[0])
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            raise _Mismatch(at, value, type_nouns(tp)[0])
        if len(args) == 2 and args[1] is Ellipsis:
            args = (args[0],) * len(value)
        elif len(value) != len(args):
            raise _Mismatch(at, value, type_nouns(tp)[0])
        return tuple(_conform(v, t, f"{at}[{i}]") for i, (v, t) in enumerate(zip(value, args)))
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            if -INT64_MAX - 1 <= value <= INT64_MAX:
                return int(value)
            raise _Mismatch(at, value, "an integer that fits in 64 bits")
    elif tp is float:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:
                number = math.inf
            if math.isfinite(number):
                return number
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is type(None):
        if value is None:
            return None
    elif isinstance(tp, type):
        if isinstance(value, tp):
            return value
    else:  # a typing construct specs do not use: not checked
        return value
    raise _Mismatch(at, value, type_nouns(tp)[0])


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _table_of(instance: Any) -> str:
    """Where a spec class's fields sit in a file: ``dataset``, or "" for top-level specs and
    tables that appear in several places (a severity source)."""
    cls = type(instance)
    return getattr(cls, "TABLE", getattr(cls, "TAG", ""))


def located(error: SpecError, relative: str) -> SpecError:
    """Mark ``error`` as being about ``relative`` (a field, e.g. ``scale[1]``) of the table that
    raised it: building from data puts the table's path in front (``training.augment.scale[1]``)."""
    error.relative = relative  # type: ignore[attr-defined]
    return error


def spec_error(
    instance: Any, relative: str, value: Any, expected: str, hint: str = ""
) -> SpecError:
    """A :class:`SpecError` about field ``relative`` of the spec ``instance`` (e.g. ``seeds.n``
    in Python; from data, with its full path)."""
    table = _table_of(instance)
    field = f"{table}.{relative}" if table and relative else table or relative
    return located(SpecError(field, value, expected, hint), relative)


def _strict_converter(own: Callable[[Any], Any] | None) -> Callable[[Any, Any, Any], Any]:
    def convert(value: Any, instance: Any, field: attrs.Attribute) -> Any:
        if own is not None:
            value = own(value)
        try:
            return _conform(value, _field_types(type(instance))[field.name])
        except _Mismatch as mismatch:
            relative = field.name + mismatch.at
            raise spec_error(instance, relative, mismatch.value, mismatch.expected) from None

    return convert


def _strict_fields(cls: type, fields: list[attrs.Attribute]) -> list[attrs.Attribute]:
    """attrs field transformer: every field's value (after its own converter, which may only
    change the shape: a name to a spec, a table to sorted pairs) is checked by :func:`_conform`
    before any validator sees it."""
    return [
        field.evolve(
            converter=attrs.Converter(
                _strict_converter(field.converter), takes_self=True, takes_field=True
            )
        )
        for field in fields
    ]


def spec_class(cls: type) -> type:
    """``attrs.frozen(kw_only=True)`` with strict types: a value whose type does not match the
    field's annotation is a :class:`SpecError` (in Python, with ``attrs.evolve`` and from data)."""
    return attrs.frozen(cls, kw_only=True, field_transformer=_strict_fields)


def check_fields(obj: Any, path: str) -> None:
    """Type-check the fields of an attrs object of another module (e.g. a zoo ``ModelRef``) that
    a spec holds: the same rules as :func:`spec_class`, the message naming ``path.field``."""
    hints = _field_types(type(obj))
    for field in attrs.fields(type(obj)):
        try:
            _conform(getattr(obj, field.name), hints[field.name])
        except _Mismatch as mismatch:
            where = f"{path}.{field.name}{mismatch.at}"
            raise SpecError(where, mismatch.value, mismatch.expected) from None


def path_string(value: Any) -> Any:
    """Converter: a ``pathlib.Path`` (any ``os.PathLike``) becomes its string."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


# --------------------------------------------------------------------------- validators


def _field(instance: Any, attribute: attrs.Attribute) -> str:
    """The field's path as a user writes it in TOML, e.g. ``dataset.name`` or ``seeds.n``."""
    table = _table_of(instance)
    return f"{table}.{attribute.name}" if table else attribute.name


def positive(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not value > 0:
        raise spec_error(instance, attribute.name, value, "a number > 0")


def _non_negative(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not value >= 0:
        raise spec_error(instance, attribute.name, value, "a number >= 0")


def _unit_interval(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise spec_error(instance, attribute.name, value, "a number in [0, 1)")


def one_of(*allowed: str) -> Callable[[Any, attrs.Attribute, Any], None]:
    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value not in allowed:
            raise located(
                UnknownNameError(_field(instance, attribute), value, allowed), attribute.name
            )

    return check


def _registered(names: Callable[[], list[str]]) -> Callable[[Any, attrs.Attribute, Any], None]:
    """Validate a name against a registry that is looked up lazily (plugins load late)."""

    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        known = names()
        if value not in known:
            raise located(
                UnknownNameError(_field(instance, attribute), value, known), attribute.name
            )

    return check


def safe_name(instance: Any, attribute: attrs.Attribute, value: str) -> None:
    """A spec ``name`` is a safe file name (it names the default output folder)."""
    if not SAFE_NAME.fullmatch(value):
        raise spec_error(
            instance,
            attribute.name,
            value,
            "a file name of 1 to 100 letters, digits, '.', '_' or '-', not starting with '.'",
            "The name labels the run and names its default output results/<name>.zarr",
        )


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


class _Keyed:
    """Mixin: a content key and dask tokenization by that key."""

    @property
    def key(self) -> str:
        """sha256 content key (see :mod:`oodsim.keys`)."""
        return content_key(self)

    def __dask_tokenize__(self) -> str:
        return self.key


# --------------------------------------------------------------------------- components


@spec_class
class DatasetSpec(_Keyed):
    """A labelled image dataset from the registry in :mod:`oodsim.data.registry`."""

    TAG = "dataset"
    VERSION = "1"

    name: str = attrs.field(validator=_registered(_dataset_names))
    max_per_class: int | None = attrs.field(default=None, validator=positive)
    image_size: int | None = attrs.field(default=None, validator=positive)
    root: str | None = attrs.field(default=None, converter=path_string, metadata=no_key())
    download: bool = attrs.field(default=False, metadata=no_key())


@spec_class
class SplitSpec(_Keyed):
    """Class split (known / OOD train / OOD val / OOD test) and per-class sample split.

    ``n_known`` classes are drawn at random per seed unless ``known_classes`` lists fixed
    known-class sets; then the seed's ``class_split`` stream picks list ``entropy % len``, so
    consecutive seeds cycle through the lists. ``n_ood_test=None`` takes all remaining classes.
    """

    TAG = "split"
    VERSION = "1"

    n_known: int | None = attrs.field(default=6, validator=positive)
    n_ood_train: int = attrs.field(default=0, validator=_non_negative)
    n_ood_val: int = attrs.field(default=0, validator=_non_negative)
    n_ood_test: int | None = attrs.field(default=None, validator=_non_negative)
    known_classes: tuple[tuple[int, ...], ...] = attrs.field(default=())
    fractions: tuple[float, float, float] = attrs.field(default=(0.6, 0.2, 0.2))

    @fractions.validator
    def _check_fractions(self, attribute: attrs.Attribute, value: tuple[float, ...]) -> None:
        if any(not f > 0 for f in value) or not math.isclose(sum(value), 1.0):
            raise spec_error(
                self, "fractions", value, "three fractions > 0 (train, val, test) summing to 1"
            )

    @known_classes.validator
    def _check_known(self, attribute: attrs.Attribute, value: tuple[tuple[int, ...], ...]) -> None:
        for classes in value:
            if len(set(classes)) != len(classes) or not classes or min(classes) < 0:
                raise spec_error(
                    self, "known_classes", classes, "non-empty lists of distinct class ids"
                )
            if self.n_known is not None and len(classes) != self.n_known:
                raise spec_error(
                    self, "known_classes", classes, f"lists of n_known={self.n_known} class ids"
                )

    def n_classes_needed(self) -> int:
        """The fewest classes a dataset must have for this split."""
        known = self.n_known or 0
        return known + self.n_ood_train + self.n_ood_val + (self.n_ood_test or 1)


@spec_class
class ModelSpec(_Keyed):
    """A classifier architecture from :mod:`oodsim.models.architectures`.

    ``dropout`` and ``width`` are the architectures' parameters (every architecture takes
    both); they are checked here, at spec construction."""

    TAG = "model"
    VERSION = "1"

    arch: str = attrs.field(default="small_cnn", validator=_registered(_architecture_names))
    dropout: float = attrs.field(default=0.2, validator=_unit_interval)
    width: int = attrs.field(default=32, validator=positive)


@spec_class
class AugmentSpec(_Keyed):
    """Training augmentation; ``hflip=None`` flips only datasets where a flip keeps the class."""

    TAG = "augment"
    VERSION = "1"

    enabled: bool = True
    hflip: bool | None = None
    rotation: float = attrs.field(default=10.0, validator=_non_negative)
    scale: tuple[float, float] = attrs.field(default=(0.9, 1.1))

    @scale.validator
    def _check_scale(self, attribute: attrs.Attribute, value: tuple[float, ...]) -> None:
        if not 0 < value[0] <= value[1]:
            raise spec_error(self, "scale", value, "(low, high) with 0 < low <= high")


@spec_class
class TrainingSpec(_Keyed):
    """SGD with cosine annealing and early stopping on the D_in_val loss (the paper's recipe)."""

    TAG = "training"
    VERSION = "1"

    batch_size: int = attrs.field(default=128, validator=positive)
    lr: float = attrs.field(default=0.01, validator=positive)
    momentum: float = attrs.field(default=0.9, validator=_unit_interval)
    weight_decay: float = attrs.field(default=5e-4, validator=_non_negative)
    max_epochs: int = attrs.field(default=30, validator=positive)
    patience: int = attrs.field(default=3, validator=positive)
    augment: AugmentSpec = attrs.field(factory=AugmentSpec)


Params = tuple[tuple[str, Any], ...]
_NOUNS[Params] = ("a table of parameters", "tables of parameters")


def _params(value: Any) -> Any:
    """Converter: a table (or pairs) → sorted ``(name, value)`` pairs, a list value → a tuple
    (a grid); anything else is left for the type check to refuse."""
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, list | tuple):
        items = list(value)
        if not all(isinstance(item, list | tuple) and len(item) == 2 for item in items):
            return value
    else:
        return value
    items = [(k, tuple(v) if isinstance(v, list) else v) for k, v in items]
    return tuple(sorted(items, key=lambda item: (not isinstance(item[0], str), str(item[0]))))


_PARAM_TYPES = {"int": int, "float": float, "bool": bool, "str": str, "None": type(None)}


def _annotated_types(func: Callable, param: str) -> tuple[type, ...] | None:
    """The scalar types a detector parameter's annotation names (``float | None`` →
    ``(float, NoneType)``), read from the signature without evaluating it (no imports);
    None when the annotation is missing or names anything else (an array, a module)."""
    try:
        parameter = inspect.signature(func).parameters.get(param)
    except (TypeError, ValueError):
        return None
    if parameter is None or parameter.annotation is inspect.Parameter.empty:
        return None
    annotation = parameter.annotation
    if isinstance(annotation, str):
        parts: Sequence[Any] = [_PARAM_TYPES.get(p.strip()) for p in annotation.split("|")]
    elif typing.get_origin(annotation) in (typing.Union, types.UnionType):
        parts = typing.get_args(annotation)
    else:
        parts = [annotation]
    if not all(p in _PARAM_TYPES.values() for p in parts):
        return None
    return tuple(parts)


def _param_mismatch(value: Any, kinds: tuple[type, ...] | None) -> str | None:
    """What a detector parameter value should be, or None when it is fine: a finite number,
    a string, true/false or none, of the types the parameter's annotation names."""
    allowed = kinds or (bool, int, float, str, type(None))
    expected = " or ".join(type_nouns(k)[0] for k in allowed if k is not type(None))
    if value is None:
        ok = type(None) in allowed
    elif isinstance(value, bool):
        ok = bool in allowed
    elif isinstance(value, numbers.Integral):
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            return "an integer that fits in 64 bits"
        ok = int in allowed or float in allowed
    elif isinstance(value, numbers.Real):
        ok = float in allowed and math.isfinite(value)
    elif isinstance(value, str):
        ok = str in allowed
    else:
        ok = False
    return None if ok else expected or "none"


@spec_class
class DetectorSpec(_Keyed):
    """A confidence function κ by registry name, with parameters; ``label`` names it in results.

    Parameters are checked at construction against the detector's signature: names (unless
    it takes ``**kwargs``), and types where its annotation names ``int``, ``float``, ``bool``,
    ``str`` or ``None``; every number must be finite. A list of values is a grid (open set
    specs choose among them on OOD validation data).
    """

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
    def _check_params(self, attribute: attrs.Attribute, value: Params) -> None:
        # specs sit below the registries they validate against
        from oodsim.detectors import get_detector

        detector = get_detector(self.name)
        for name, param in value:
            if not detector.takes_any_param and name not in detector.defaults:
                raise UnknownNameError(f"detector {self.name!r} parameter", name, detector.defaults)
            kinds = _annotated_types(detector.func, name)
            grid = isinstance(param, tuple)
            if grid and not param:
                raise self._param_error(name, param, "a value or a non-empty list (a grid)")
            for i, item in enumerate(param if grid else (param,)):
                at = f"{name}[{i}]" if grid else name
                if isinstance(item, list | tuple):
                    raise self._param_error(at, item, "one value (a grid is a flat list)")
                expected = _param_mismatch(item, kinds)
                if expected is not None:
                    raise self._param_error(at, item, expected)

    def _param_error(self, at: str, value: Any, expected: str) -> SpecError:
        return located(SpecError(f"detector {self.name!r} parameter {at}", value, expected), at)

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


@spec_class
class OODSetSpec(_Keyed):
    """An OOD test set: the held-out classes, another dataset, or noise images.

    Noise has the in-distribution image shape: uniform U(0, 255) or Gaussian N(128, 128) clipped
    to [0, 255] (the study's σ = 128). ``n_samples`` bounds a dataset set (random subset).
    """

    TAG = "ood"
    VERSION = "1"

    kind: str = attrs.field(default="held_out", validator=one_of(*OOD_KINDS))
    dataset: DatasetSpec | None = None
    n_samples: int | None = attrs.field(default=None, validator=positive)
    label: str = attrs.field(metadata=no_key())

    @label.default
    def _default_label(self) -> str:
        return self.dataset.name if self.kind == "dataset" and self.dataset else self.kind

    def __attrs_post_init__(self) -> None:
        if (self.kind == "dataset") != (self.dataset is not None):
            raise spec_error(
                self, "dataset", self.dataset, "a dataset exactly when kind = 'dataset'"
            )

    @property
    def size(self) -> int | None:
        """Number of samples; noise sets default to 1,000 as in the study."""
        if self.kind in ("uniform_noise", "gaussian_noise"):
            return self.n_samples or 1000
        return self.n_samples


@spec_class
class SeedsSpec(_Keyed):
    """Which simulations to run: seeds ``start .. start+n-1`` (or ``values``), streams pinned.

    Seeds are distinct integers in 0 .. 2**63 − 1 (results index them as int64); :meth:`all`
    generates them lazily, so ``n = 10**9`` with a stopping rule costs nothing up front.
    """

    TAG = "seeds"
    VERSION = "1"

    n: int = attrs.field(default=50, validator=positive)
    start: int = attrs.field(default=0, validator=_non_negative)
    values: tuple[int, ...] = attrs.field(default=())
    pinned: Params = attrs.field(default=(), converter=_params)

    @values.validator
    def _check_values(self, attribute: attrs.Attribute, value: tuple[int, ...]) -> None:
        for i, seed in enumerate(value):
            if seed < 0:
                raise spec_error(self, f"values[{i}]", seed, "a seed >= 0")
        if len(set(value)) != len(value):
            seen: set[int] = set()
            repeated = sorted({seed for seed in value if seed in seen or seen.add(seed)})
            raise spec_error(
                self,
                "values",
                repeated,
                "distinct seeds (each value once)",
                "A repeated seed is one simulation: it would be counted once in a run and "
                "twice from the cache",
            )

    @pinned.validator
    def _check_pinned(self, attribute: attrs.Attribute, value: Params) -> None:
        for stream, entropy in value:
            if stream not in STREAMS:
                raise located(UnknownNameError("seeds.pinned", stream, STREAMS), "pinned")
            valid = isinstance(entropy, int) and not isinstance(entropy, bool)
            if not valid or not 0 <= entropy <= INT64_MAX:
                raise spec_error(self, f"pinned.{stream}", entropy, "an integer in 0 .. 2**63 - 1")

    def __attrs_post_init__(self) -> None:
        if not self.values and self.start + self.n - 1 > INT64_MAX:
            raise spec_error(
                self,
                "n",
                self.n,
                f"at most {INT64_MAX - self.start + 1} seeds from start = {self.start}",
                "Seeds must fit in 64 bits: start + n - 1 <= 2**63 - 1",
            )

    @property
    def count(self) -> int:
        """How many seeds there are."""
        return len(self.values) if self.values else self.n

    def all(self) -> Sequence[int]:
        """The seeds in the order they are submitted: ``values``, or a lazy :class:`SeedRange`
        (iterating, slicing and indexing it builds no list)."""
        return self.values if self.values else SeedRange(self.start, self.start + self.n)


STOPPING_RULES = ("fixed", "ci_width", "ranking")


@spec_class
class StoppingSpec(_Keyed):
    """When to stop simulating: after all seeds, or by a sequential rule checked per batch."""

    TAG = "stopping"
    VERSION = "1"

    rule: str = attrs.field(default="fixed", validator=one_of(*STOPPING_RULES))
    metric: str = "auroc"  # checked against the spec's own metrics (Seeded.check_stopping)
    epsilon: float = attrs.field(default=0.01, validator=positive)
    alpha: float = attrs.field(default=0.05, validator=_unit_interval)
    min_seeds: int = attrs.field(default=5, validator=positive)
    max_seeds: int | None = attrs.field(default=None, validator=positive)
    batch_size: int = attrs.field(default=10, validator=positive)
    severity: str | None = None  # a level label ("0" … "10"; open set: "all")


@spec_class
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
            raise spec_error(self, "alpha", value, "a number in (0, 1)")


class Seeded:
    """Mixin of every protocol's spec: ``seeds``, ``stopping`` and ``on_failure`` fields.

    The rule watches ``stopping.metric`` at severity level ``stopping.severity`` (default: the
    first level) for every method; see :func:`oodsim.engine.run.stopping_values`.
    """

    TABLE = ""  # a top-level spec: its fields are written without a table

    seeds: SeedsSpec
    stopping: StoppingSpec
    metrics: tuple[str, ...]

    @property
    def max_seeds(self) -> int:
        """The most seeds the run may take: ``stopping.max_seeds`` or all seeds."""
        return self.stopping.max_seeds or self.seeds.count

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
        if rule.max_seeds is not None and rule.max_seeds > self.seeds.count:
            raise SpecError(
                "stopping.max_seeds",
                rule.max_seeds,
                f"at most the {self.seeds.count} seeds in [seeds]",
            )
        if rule.min_seeds > self.max_seeds:
            raise SpecError(
                "stopping.min_seeds", rule.min_seeds, f"at most max_seeds = {self.max_seeds}"
            )


# --------------------------------------------------------------------------- the experiment


def detector_specs(value: Any) -> Any:
    """Converter: a list of detector names or specs → a tuple of :class:`DetectorSpec`."""
    if not isinstance(value, list | tuple):
        return value
    return tuple(DetectorSpec(name=v) if isinstance(v, str) else v for v in value)


def _ood_sets(value: Any) -> Any:
    if not isinstance(value, list | tuple):
        return value
    return tuple(OODSetSpec(kind=v) if isinstance(v, str) else v for v in value)


@spec_class
class ExperimentSpec(Seeded, _Keyed):
    """An open set simulation experiment: everything that determines its results."""

    TAG = "experiment"
    VERSION = "1"

    name: str = attrs.field(default="experiment", validator=safe_name, metadata=no_key())
    dataset: DatasetSpec
    split: SplitSpec = attrs.field(factory=SplitSpec)
    model: ModelSpec = attrs.field(factory=ModelSpec)
    training: TrainingSpec = attrs.field(factory=TrainingSpec)
    detectors: tuple[DetectorSpec, ...] = attrs.field(default=("msp",), converter=detector_specs)
    metrics: tuple[str, ...] = attrs.field(default=("auroc", "accuracy"))
    ood: tuple[OODSetSpec, ...] = attrs.field(default=("held_out",), converter=_ood_sets)
    seeds: SeedsSpec = attrs.field(factory=SeedsSpec)
    stopping: StoppingSpec = attrs.field(factory=StoppingSpec)
    on_failure: str = attrs.field(default="record", validator=one_of("record", "abort"))
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
        expected = "a detector name or a table with 'name' and parameters"
        raise located(SpecError("detectors", value, expected), "")
    table = dict(value)
    name, label, params = table.pop("name"), table.pop("label", None), table.pop("params", {})
    if not isinstance(params, Mapping):
        raise located(SpecError("params", params, "a table of detector parameters"), "params")
    labelled = {"label": label} if label is not None else {}
    return DetectorSpec(name=name, params={**params, **table}, **labelled)


def detector_to_data(spec: DetectorSpec) -> dict[str, Any]:
    """The TOML form of a detector (inverse of :func:`detector_from_data`)."""
    return {"name": spec.name, "label": spec.label, **spec.kwargs}


#: Tables built by their own function from data (instead of field by field).
_FROM_DATA: dict[type, Callable[[Any], Any]] = {DetectorSpec: detector_from_data}
register_table(DetectorSpec, nouns=("a detector (a name or a table)", "detectors"))
register_table(OODSetSpec, shorthand="kind", nouns=("an OOD set (a kind or a table)", "OOD sets"))
register_table(DatasetSpec, shorthand="name", nouns=("a dataset (a name or a table)", "datasets"))


def _is_table(tp: Any) -> bool:
    return isinstance(tp, type) and attrs.has(tp)


def _has_tables(tp: Any) -> bool:
    return _is_table(tp) or any(_has_tables(a) for a in typing.get_args(tp) if a is not Ellipsis)


def _table_hook(cls: type) -> Callable[[Any, type], Any]:
    """Structure a table of ``cls``: unknown keys and every field error carry their path."""
    generated = cattrs.gen.make_dict_structure_fn(cls, _converter)

    def structure(value: Any, _: type) -> Any:
        if isinstance(value, cls):
            return value
        if cls in _FROM_DATA:
            return _FROM_DATA[cls](value)
        if isinstance(value, str) and cls in _SHORTHAND:
            value = {_SHORTHAND[cls]: value}
        if not isinstance(value, Mapping):
            raise located(SpecError("", value, type_nouns(cls)[0]), "")
        return generated(dict(value), cls)

    return structure


def _structure_items(value: Any, tp: Any) -> Any:
    """A list of tables, each structured with its index in the error path; anything but a list
    goes to the field as it is (its type check names what was expected)."""
    if not isinstance(value, list | tuple):
        return value
    args = typing.get_args(tp)
    items, errors = [], []
    for i, item in enumerate(value):
        if len(args) == 2 and args[1] is Ellipsis:
            item_type = args[0]
        else:
            item_type = args[i] if i < len(args) else Any
        try:
            items.append(_converter.structure(item, item_type))
        except Exception as error:  # collected like cattrs does, to name the index
            error.add_note(IterableValidationNote(f"Structuring {tp} @ index {i}", i, item_type))
            errors.append(error)
    if errors:
        raise cattrs.IterableValidationError(f"While structuring {tp!r}", errors, tp)
    return tuple(items)


def _structure_optional(value: Any, tp: Any) -> Any:
    """``Table | None``: a table (or its shorthand string) is structured, the rest left as is."""
    tables = [a for a in typing.get_args(tp) if _is_table(a)]
    if value is None or isinstance(value, tuple(tables)) or len(tables) != 1:
        return value
    if isinstance(value, Mapping) or (isinstance(value, str) and tables[0] in _SHORTHAND):
        return _converter.structure(value, tables[0])
    return value


def _raw(value: Any, _: Any) -> Any:
    return value


# Only tables are structured here; every other value reaches its field as written, where the
# one strict type check (_conform) refuses a wrong type instead of coercing it.
_converter.register_structure_hook_func(lambda t: not _has_tables(t), _raw)
for _scalar in (int, float, bool, str):
    _converter.register_structure_hook(_scalar, _raw)
_converter.register_structure_hook_factory(_is_table, _table_hook)
_converter.register_structure_hook_func(
    lambda t: typing.get_origin(t) is tuple and _has_tables(t), _structure_items
)
_converter.register_structure_hook_func(
    lambda t: typing.get_origin(t) in (typing.Union, types.UnionType) and _has_tables(t),
    _structure_optional,
)
_converter.register_unstructure_hook(DetectorSpec, detector_to_data)
_converter.register_unstructure_hook_func(lambda t: t == Params, dict)


def _leaves(error: BaseException, parts: tuple = ()) -> Iterator[tuple[BaseException, tuple]]:
    """Every leaf error inside a (nested) cattrs error, with its path (field names and list
    indexes), in field order."""
    if not isinstance(error, cattrs.ClassValidationError | cattrs.IterableValidationError):
        yield error, parts
        return
    for inner in error.exceptions:
        step: tuple = ()
        for note in getattr(inner, "__notes__", ()):
            if isinstance(note, AttributeValidationNote):
                step = (note.name,)
                break
            if isinstance(note, IterableValidationNote):
                step = (note.index,)
                break
        yield from _leaves(inner, parts + step)


def _path(parts: tuple, relative: str = "") -> str:
    """``("ood", 2, "dataset")`` and ``"max_per_class"`` → ``ood[2].dataset.max_per_class``."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    if relative:
        text += relative if relative.startswith("[") or not text else f".{relative}"
    return text


def _placed(error: SpecError, parts: tuple, rename: Callable[[str], str], what: str) -> SpecError:
    """``error`` with its field path completed by where in the data it was raised."""
    relative = getattr(error, "relative", None)
    if relative is None:
        return error
    path = rename(_path(parts, relative)) or what
    message = error.args[0]
    if message.startswith(f"{error.field}: "):
        error.args = (path + message[len(error.field) :], *error.args[1:])
    error.field = path
    del error.relative  # type: ignore[attr-defined]
    return error


@contextlib.contextmanager
def spec_errors(what: str = "spec", rename: Callable[[str], str] | None = None) -> Iterator[None]:
    """Turn the errors of building a spec from data into one :class:`SpecError` that names the
    field path (``training.augment.enabled``, ``ood[1].n_samples``): the first type or value
    error, else a misspelled field (with a close match) or a missing one, else cattrs' own
    messages. ``rename`` rewrites paths (a protocol's shorthand tables)."""
    rename = rename or (lambda path: path)
    try:
        yield
    except SpecError as error:
        raise _placed(error, (), rename, what) from None
    except cattrs.BaseValidationError as error:
        leaves = list(_leaves(error))
        for leaf, parts in leaves:
            if isinstance(leaf, SpecError):
                raise _placed(leaf, parts, rename, what) from None
        for leaf, parts in leaves:
            if isinstance(leaf, cattrs.ForbiddenExtraKeysError):
                table = rename(_path(parts))
                allowed = [f.name for f in attrs.fields(leaf.cl)]
                field = f"{table} field" if table else "field"
                raise UnknownNameError(field, sorted(leaf.extra_fields)[0], allowed) from None
            if isinstance(leaf, KeyError) and parts:
                field = rename(_path(parts)) or what
                raise SpecError(field, None, "a value (the field is required)") from None
        messages = cattrs.transform_error(error, path=what)
        raise SpecError(what, "; ".join(messages), "fields of the documented types") from None
    except (TypeError, ValueError) as error:
        raise SpecError(what, str(error), "fields of the documented types") from None


def structure(
    data: Any, cls: type, what: str = "spec", rename: Callable[[str], str] | None = None
) -> Any:
    """Build a spec of class ``cls`` (any protocol's) from plain data with the one converter:
    tables by field, every other value checked strictly at its field (see :func:`_conform`);
    errors name the field path (see :func:`spec_errors`)."""
    with spec_errors(what, rename):
        return _converter.structure(data, cls)


def spec_from_dict(data: Mapping[str, Any]) -> ExperimentSpec:
    """Build an :class:`ExperimentSpec` from plain data, with field-path error messages."""
    return structure(data, ExperimentSpec)


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


def unstructure(spec: Any) -> Any:
    """Plain data of a spec (any protocol's), the inverse of :func:`structure`."""
    return _converter.unstructure(spec)
