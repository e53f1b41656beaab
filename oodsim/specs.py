"""Experiment specs: frozen attrs classes, validated at construction, keyed by content.

A spec is data. It says *what* to compute (dataset, class/sample split, model, training recipe,
detectors, metrics, OOD test sets, seeds and stopping rule), never *how* (workers, device, cache
root): execution settings are arguments of :func:`oodsim.run`, or fields marked ``no_key`` that do
not enter :attr:`key`. Specs load from TOML with :func:`load_spec` and build the same in Python.

Types are strict, as in every protocol's spec: the rules and the one converter are in
:mod:`oodsim.spec_types`.
"""

from __future__ import annotations

import inspect
import json
import math
import numbers
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from oodsim import limits
from oodsim.cluster_spec import ClusterSpec
from oodsim.errors import SpecError, UnknownNameError
from oodsim.keys import content_key, digest, no_key
from oodsim.seeds import OPEN_SET_STREAMS, STREAMS, SeedRange, SeedStreams
from oodsim.spec_types import (
    INT64_MAX,
    label_text,
    located,
    non_negative,
    one_of,
    path_string,
    positive,
    read_toml,
    register_table,
    register_unstructure,
    registered,
    safe_name,
    spec_class,
    spec_error,
    structure,
    type_nouns,
    unit_interval,
    unstructure,
)


def _dataset_names() -> list[str]:
    # specs sit below the registries they validate against
    from oodsim.data.registry import DATASETS

    return sorted(DATASETS)


def _architecture_names() -> list[str]:
    # the built-ins register on import (no torch): only when an architecture is checked
    import oodsim.models.architectures  # noqa: F401
    from oodsim.models.registry import available_architectures

    return available_architectures()


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

    name: str = attrs.field(validator=registered(_dataset_names))
    max_per_class: int | None = attrs.field(default=None, validator=positive)
    image_size: int | None = attrs.field(default=None, validator=positive)
    root: str | None = attrs.field(default=None, converter=path_string, metadata=no_key())
    download: bool = attrs.field(default=False, metadata=no_key())

    def key_extra(self) -> dict[str, Any]:
        """A registered loader's ``version`` other than "1" enters the key, and so does the
        fingerprint of the files it reads (:mod:`oodsim.data.fingerprint`), for loaders that
        read files: two folders, or changed files, never share cached results."""
        # specs sit below the registries they validate against
        from oodsim.data.registry import data_fingerprint, dataset_info

        version = dataset_info(self.name).version
        extra = {} if version == "1" else {"loader_version": version}
        data = data_fingerprint(self.name, self.root)
        return extra if data is None else extra | {"data": data}


@spec_class
class SplitSpec(_Keyed):
    """Class split (known / OOD train / OOD val / OOD test) and per-class sample split.

    ``n_known`` classes are drawn at random per seed unless ``known_classes`` lists fixed
    known-class sets; then the seed's ``class_split`` stream picks list ``entropy % len``, so
    consecutive seeds cycle through the lists. ``n_ood_test=None`` takes all remaining classes.
    """

    TAG = "split"
    VERSION = "1"

    n_known: int | None = attrs.field(default=6)
    n_ood_train: int = attrs.field(default=0, validator=non_negative)
    n_ood_val: int = attrs.field(default=0, validator=non_negative)
    n_ood_test: int | None = attrs.field(default=None, validator=non_negative)
    known_classes: tuple[tuple[int, ...], ...] = attrs.field(default=())
    fractions: tuple[float, float, float] = attrs.field(default=(0.6, 0.2, 0.2))

    @n_known.validator
    def _check_n_known(self, attribute: attrs.Attribute, value: int | None) -> None:
        if value is not None and not value >= 2:
            raise spec_error(
                self,
                "n_known",
                value,
                "at least 2 known classes",
                "A classifier of one class is sure of every input: no detector can separate "
                "anything (it used to train, then fail)",
            )

    @fractions.validator
    def _check_fractions(self, attribute: attrs.Attribute, value: tuple[float, ...]) -> None:
        if any(not f > 0 for f in value) or not math.isclose(sum(value), 1.0):
            raise spec_error(
                self, "fractions", value, "three fractions > 0 (train, val, test) summing to 1"
            )

    @known_classes.validator
    def _check_known(self, attribute: attrs.Attribute, value: tuple[tuple[int, ...], ...]) -> None:
        for classes in value:
            if len(set(classes)) != len(classes) or len(classes) < 2 or min(classes) < 0:
                raise spec_error(
                    self, "known_classes", classes, "lists of at least 2 distinct class ids"
                )
            if self.n_known is not None and len(classes) != self.n_known:
                raise spec_error(
                    self, "known_classes", classes, f"lists of n_known={self.n_known} class ids"
                )

    def n_classes_needed(self) -> int:
        """The fewest classes a dataset must have for this split."""
        known = self.n_known or 0
        return known + self.n_ood_train + self.n_ood_val + (self.n_ood_test or 1)


Params = tuple[tuple[str, Any], ...]
register_table(Params, nouns=("a table of parameters", "tables of parameters"))


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


def _check_param_table(
    owner: str,
    func: Callable,
    allowed: Mapping[str, object],
    takes_any: bool,
    params: Params,
    *,
    limits: Mapping[str, Any] | None = None,
    grids: bool = True,
) -> None:
    """Check a parameter table against the function that takes it (a detector, an
    architecture's builder): names (unless it takes ``**kwargs``), types its annotations name,
    finite numbers, declared ``limits``; with ``grids``, a list is a flat grid of such values.
    Errors name ``<owner> parameter <name>[i]``."""

    def refuse(at: str, value: Any, expected: str) -> SpecError:
        return located(SpecError(f"{owner} parameter {at}", value, expected), at)

    for name, param in params:
        if not takes_any and name not in allowed:
            raise UnknownNameError(f"{owner} parameter", name, allowed)
        kinds = _annotated_types(func, name)
        grid = isinstance(param, tuple)
        if grid and not grids:
            raise refuse(name, list(param), "one value (not a list)")
        if grid and not param:
            raise refuse(name, param, "a value or a non-empty list (a grid)")
        for i, item in enumerate(param if grid else (param,)):
            at = f"{name}[{i}]" if grid else name
            if isinstance(item, list | tuple):
                raise refuse(at, item, "one value (a grid is a flat list)")
            expected = _param_mismatch(item, kinds)
            limit = (limits or {}).get(name)
            if expected is None and limit is not None and not limit.allows(item):
                expected = limit.expected
            if expected is not None:
                raise refuse(at, item, expected)


#: detector parameters that count classes (at most the known classes of an open set split)
CLASS_BOUNDED = {"openmax": "alpha", "pytorch_ood:OpenMax": "alpha"}

#: architecture parameters that size a model, and the limit each is checked against
MODEL_SIZES = {
    "depth": "model_depth",
    "width": "model_width",
    "widen_factor": "model_width",
    "num_features": "model_width",
}


@spec_class
class ModelSpec(_Keyed):
    """A classifier architecture by registry name (:mod:`oodsim.models.registry`).

    ``dropout`` and ``width`` go to every builder that takes them; ``params`` are the
    architecture's own parameters (one value each), checked here against its builder's
    signature like detector parameters. Empty ``params`` leave the key as it was before
    architectures had them."""

    TAG = "model"
    VERSION = "1"

    arch: str = attrs.field(default="small_cnn")
    dropout: float = attrs.field(default=0.2, validator=unit_interval)
    width: int = attrs.field(default=32, validator=positive)
    params: Params = attrs.field(default=(), converter=_params, metadata=no_key())

    @arch.validator
    def _check_arch(self, attribute: attrs.Attribute, value: str) -> None:
        # the built-ins register on import (no torch): only when an architecture is checked
        import oodsim.models.architectures  # noqa: F401
        from oodsim.models.registry import TIMM_PREFIX, get_architecture

        if not value.startswith(TIMM_PREFIX):
            registered(_architecture_names)(self, attribute, value)
            return
        try:
            get_architecture(value)
        except SpecError as error:  # named from this table (model.arch)
            raise spec_error(self, "arch", value, error.allowed, error.hint) from None

    @params.validator
    def _check_params(self, attribute: attrs.Attribute, value: Params) -> None:
        # the registry sits above the specs: only when an architecture's parameters are checked
        from oodsim.models.registry import get_architecture

        architecture = get_architecture(self.arch)
        _check_param_table(
            f"arch {self.arch!r}",
            architecture.build,
            architecture.defaults,
            architecture.takes_any_param,
            value,
            grids=False,
        )
        for name, size in value:
            bound = MODEL_SIZES.get(name)
            problem = bound and isinstance(size, int) and limits.over(size, bound)
            if problem:
                raise spec_error(self, f"params.{name}", size, *problem)

    @width.validator
    def _check_width(self, attribute: attrs.Attribute, value: int) -> None:
        if problem := limits.over(value, "model_width"):
            raise spec_error(self, "width", value, *problem)

    @property
    def kwargs(self) -> dict[str, Any]:
        """The architecture's own parameters, for its builder."""
        return dict(self.params)

    def key_extra(self) -> dict[str, Any]:
        """``params`` enter the key only when there are any (keys of older specs stay)."""
        return {"params": dict(self.params)} if self.params else {}


@spec_class
class AugmentSpec(_Keyed):
    """Training augmentation; ``hflip=None`` flips only datasets where a flip keeps the class."""

    TAG = "augment"
    VERSION = "1"

    enabled: bool = True
    hflip: bool | None = None
    rotation: float = attrs.field(default=10.0, validator=non_negative)
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
    momentum: float = attrs.field(default=0.9, validator=unit_interval)
    weight_decay: float = attrs.field(default=5e-4, validator=non_negative)
    max_epochs: int = attrs.field(default=30, validator=positive)
    patience: int = attrs.field(default=3, validator=positive)
    augment: AugmentSpec = attrs.field(factory=AugmentSpec)


@spec_class
class DetectorSpec(_Keyed):
    """A confidence function κ by registry name, with parameters; ``label`` names it in results.

    Parameters are checked at construction against the detector's signature: names (unless
    it takes ``**kwargs``), and types where its annotation names ``int``, ``float``, ``bool``,
    ``str`` or ``None``; every number must be finite and within the detector's ``limits``.
    A list of values is a grid (open set specs choose among them on OOD validation data).
    """

    TAG = "detector"
    VERSION = "1"

    name: str = attrs.field()
    params: Params = attrs.field(default=(), converter=_params)
    label: str = attrs.field(validator=label_text, metadata=no_key())

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
        points = math.prod(len(v) for _, v in value if isinstance(v, list | tuple))
        if problem := limits.over(points, "grid_points"):
            raise spec_error(self, "params", f"a grid of {points:,} points", *problem)
        _check_param_table(
            f"detector {self.name!r}",
            detector.func,
            detector.defaults,
            detector.takes_any_param,
            value,
            limits=detector.limits,
        )

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
    label: str = attrs.field(validator=label_text, metadata=no_key())

    @label.default
    def _default_label(self) -> str:
        return self.dataset.name if self.kind == "dataset" and self.dataset else self.kind

    def __attrs_post_init__(self) -> None:
        if (self.kind == "dataset") != (self.dataset is not None):
            raise spec_error(
                self, "dataset", self.dataset, "a dataset exactly when kind = 'dataset'"
            )
        noise = self.kind in ("uniform_noise", "gaussian_noise")
        if noise and self.n_samples and (problem := limits.over(self.n_samples, "noise_samples")):
            raise spec_error(self, "n_samples", self.n_samples, *problem)

    @property
    def size(self) -> int | None:
        """Number of samples; noise sets default to 1,000 as in the study."""
        if self.kind in ("uniform_noise", "gaussian_noise"):
            return self.n_samples or 1000
        return self.n_samples


#: The most levels one designed stream may take (a grid is run in full).
MAX_DESIGN_LEVELS = 1000


@spec_class
class SeedsSpec(_Keyed):
    """Which simulations to run: seeds ``start .. start+n-1`` (or ``values``), streams pinned
    or crossed.

    Seeds are distinct integers in 0 .. 2**63 − 1 (results index them as int64); :meth:`all`
    generates them lazily, so ``n = 10**9`` with a stopping rule costs nothing up front.

    ``design`` (``[seeds.design]``, e.g. ``class_split = 4, init = 4``) crosses streams: the
    seeds walk the grid of their levels (``n`` a multiple of its size; each further grid is a
    replicate), level ``i`` of a designed stream draws from entropy ``start + i``, and every
    other stream follows the seed unless pinned. Results carry each designed stream's level
    per seed (``stream_class_split``, ...) for :func:`oodsim.stats.variance_components`.
    """

    TAG = "seeds"
    VERSION = "1"

    n: int = attrs.field(default=50, validator=positive)
    start: int = attrs.field(default=0, validator=non_negative)
    values: tuple[int, ...] = attrs.field(default=())
    pinned: Params = attrs.field(default=(), converter=_params)
    # stream -> number of levels; enters the key only when set (see key_extra)
    design: Params = attrs.field(default=(), converter=_params, metadata=no_key())

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

    @design.validator
    def _check_design(self, attribute: attrs.Attribute, value: Params) -> None:
        pinned = dict(self.pinned)
        for stream, levels in value:
            if stream not in STREAMS:
                raise located(UnknownNameError("seeds.design", stream, STREAMS), "design")
            valid = isinstance(levels, int) and not isinstance(levels, bool)
            if not valid or not 2 <= levels <= MAX_DESIGN_LEVELS:
                raise spec_error(
                    self,
                    f"design.{stream}",
                    levels,
                    f"a number of levels in 2 .. {MAX_DESIGN_LEVELS}",
                    "A designed stream takes that many values, crossed with the other "
                    "designed streams",
                )
            if stream in pinned:
                raise spec_error(
                    self,
                    f"design.{stream}",
                    levels,
                    "a stream that is not also pinned",
                    f"seeds.pinned fixes {stream} to one value; a design varies it",
                )

    def __attrs_post_init__(self) -> None:
        if self.design:
            self._check_design_seeds()
        if not self.values and self.start + self.n - 1 > INT64_MAX:
            raise spec_error(
                self,
                "n",
                self.n,
                f"at most {INT64_MAX - self.start + 1} seeds from start = {self.start}",
                "Seeds must fit in 64 bits: start + n - 1 <= 2**63 - 1",
            )

    def _check_design_seeds(self) -> None:
        grid = self.grid_size
        if self.values:
            raise spec_error(
                self,
                "values",
                list(self.values),
                "no values with a design",
                "A design numbers its simulations start, start + 1, ...: give n instead",
            )
        if self.n % grid:
            raise spec_error(
                self,
                "n",
                self.n,
                f"a multiple of the design's {grid} cells (e.g. n = {grid} or {2 * grid})",
                "Every cell of the grid runs the same number of times (replicates), so that "
                "the design stays balanced",
            )

    def key_extra(self) -> dict[str, Any]:
        """A design enters the key only when there is one (specs without keep their keys)."""
        return {"design": dict(self.design)} if self.design else {}

    @property
    def count(self) -> int:
        """How many seeds there are."""
        return len(self.values) if self.values else self.n

    @property
    def grid_size(self) -> int:
        """Cells of the design: the product of its levels (1 without a design)."""
        return math.prod(levels for _, levels in self.design)

    def design_levels(self, seed: int) -> dict[str, int]:
        """The level of every designed stream in ``seed``: cell ``(seed - start) % grid``
        written in mixed radix over the designed streams in :data:`STREAMS` order (the last
        varies fastest); replicate ``(seed - start) // grid`` repeats the grid."""
        cell = (seed - self.start) % self.grid_size
        levels: dict[str, int] = {}
        for stream, count in reversed(self.designed_streams()):
            cell, levels[stream] = divmod(cell, count)
        return {stream: levels[stream] for stream, _ in self.designed_streams()}

    def designed_streams(self) -> list[tuple[str, int]]:
        """``(stream, levels)`` of the design in :data:`STREAMS` order."""
        table = dict(self.design)
        return [(stream, table[stream]) for stream in STREAMS if stream in table]

    def streams(self, seed: int) -> SeedStreams:
        """The random streams of simulation ``seed``: pinned streams fixed, level ``i`` of a
        designed stream drawn from entropy ``start + i``, every other stream from the seed."""
        entropies = dict(self.pinned)
        entropies |= {s: self.start + i for s, i in self.design_levels(seed).items()}
        return SeedStreams(seed, entropies)

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
    alpha: float = attrs.field(default=0.05, validator=unit_interval)
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

    alpha: float = attrs.field(default=1e-3, validator=unit_interval)
    keep: bool = False

    @alpha.validator
    def _check_alpha(self, attribute: attrs.Attribute, value: float) -> None:
        if not value > 0.0:
            raise spec_error(self, "alpha", value, "a number in (0, 1)")


class Seeded:
    """Mixin of every protocol's spec: ``seeds``, ``stopping`` and ``on_failure`` fields.

    The rule watches ``stopping.metric`` at severity level ``stopping.severity`` (default: the
    first level) for every method; see :func:`oodsim.engine.stopping.stopping_values`.
    """

    TABLE = ""  # a top-level spec: its fields are written without a table

    seeds: SeedsSpec
    stopping: StoppingSpec
    metrics: tuple[str, ...]

    @property
    def max_seeds(self) -> int:
        """The most seeds the run may take: ``stopping.max_seeds`` or all seeds."""
        return self.stopping.max_seeds or self.seeds.count

    def refuse_design(self) -> None:
        """Protocols whose results carry no designed streams refuse ``[seeds.design]``."""
        if self.seeds.design:
            raise SpecError(
                "seeds.design",
                dict(self.seeds.design),
                "no design: [seeds.design] is for open set specs",
                "Variance components by source of randomness need an open set experiment",
            )

    def check_stopping(self, levels: tuple[str, ...]) -> None:
        """A sequential rule must watch one of the spec's metrics and levels and fit the seeds."""
        rule = self.stopping
        if rule.severity is not None and rule.severity not in levels:
            raise SpecError("stopping.severity", rule.severity, f"one of the levels {list(levels)}")
        if rule.rule == "fixed":
            return
        if self.seeds.design:
            raise SpecError(
                "stopping.rule",
                rule.rule,
                "'fixed' with a [seeds.design] (a design runs its whole grid)",
                "A sequential rule would stop inside the grid and unbalance it",
            )
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
    """Converter: a list of detectors → a tuple of :class:`DetectorSpec`; each a spec, a name
    or a table (a dict, e.g. ``{"name": "odin", "params": {"temperature": 1000.0}}``).

    Names and tables take the TOML path (:func:`structure`, then :func:`detector_from_data`),
    so a dict builds the same spec, and fails with the same error, as the table in a file."""
    if not isinstance(value, list | tuple):
        return value
    return structure(
        list(value), tuple[DetectorSpec, ...], "detectors", lambda at: f"detectors{at}"
    )


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
    cluster: ClusterSpec | None = attrs.field(default=None, metadata=no_key())

    @metrics.validator
    def _check_metrics(self, attribute: attrs.Attribute, value: tuple[str, ...]) -> None:
        for metric in value:
            if metric not in _metric_names():
                raise UnknownNameError("metrics", metric, _metric_names())
        if len(set(value)) != len(value) or not value:
            raise SpecError("metrics", value, "a non-empty list of distinct metric names")

    def _check_design(self) -> None:
        """Only streams an open set simulation draws from can be designed."""
        for stream, levels in self.seeds.design:
            if stream not in OPEN_SET_STREAMS:
                raise SpecError(
                    f"seeds.design.{stream}",
                    levels,
                    f"one of the streams an open set simulation draws: {list(OPEN_SET_STREAMS)}",
                    f"An open set simulation never draws from {stream}: its levels would be "
                    "identical replicates",
                )

    def __attrs_post_init__(self) -> None:
        self._check_unique("detectors", [d.label for d in self.detectors])
        self._check_grids()
        self._check_unique("ood", [o.label for o in self.ood])
        self._check_ood_is_not_the_id_data()
        self._check_split_fits_dataset()
        self._check_detectors_fit_the_classes()
        self._check_design()
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

    def _check_ood_is_not_the_id_data(self) -> None:
        """An OOD dataset that is the ID dataset itself (same name, same root) holds the known
        classes: its "OOD" images would be in-distribution, and the scores meaningless."""
        for index, ood in enumerate(self.ood):
            same = ood.dataset is not None and (ood.dataset.name, ood.dataset.root) == (
                self.dataset.name,
                self.dataset.root,
            )
            if same:
                raise SpecError(
                    f"ood[{index}].dataset",
                    ood.dataset.name,
                    "a dataset other than the in-distribution one",
                    f"{ood.dataset.name!r} is the ID dataset: its images include the known "
                    "classes. Its unknown classes are the OOD set 'held_out'",
                )

    def _check_detectors_fit_the_classes(self) -> None:
        """Detector parameters bounded by the number of known classes, in the driver: OpenMax
        recalibrates its ``alpha`` top classes, so ``alpha`` above the classes the model has
        is refused (pytorch-ood's ``OpenMax`` used to run with it, silently identical to
        ``alpha`` = the number of classes, and labelled with the larger value)."""
        split = self.split
        known = len(split.known_classes[0]) if split.known_classes else split.n_known
        if known is None:
            return
        for index, detector in enumerate(self.detectors):
            name = CLASS_BOUNDED.get(detector.name)
            value = detector.kwargs.get(name) if name else None
            values = value if isinstance(value, list | tuple) else [value]
            too_many = [v for v in values if isinstance(v, int) and v > known]
            if too_many:
                raise SpecError(
                    f"detectors[{index}].{name}",
                    too_many[0],
                    f"at most {known}, the number of known classes (split.n_known)",
                    f"{detector.name} recalibrates the {name} top classes of a model that has "
                    f"{known} classes",
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
        return unstructure(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


# --------------------------------------------------------------------------- TOML / dict I/O


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


register_table(
    DetectorSpec,
    nouns=("a detector (a name or a table)", "detectors"),
    from_data=detector_from_data,
)
register_table(OODSetSpec, shorthand="kind", nouns=("an OOD set (a kind or a table)", "OOD sets"))
register_table(DatasetSpec, shorthand="name", nouns=("a dataset (a name or a table)", "datasets"))
register_unstructure(DetectorSpec, detector_to_data)
register_unstructure(Params, dict)


def spec_from_dict(data: Mapping[str, Any]) -> ExperimentSpec:
    """Build an :class:`ExperimentSpec` from plain data, with field-path error messages."""
    return structure(data, ExperimentSpec)


def load_spec(path: str | Path) -> ExperimentSpec:
    """Read an experiment spec from a TOML file; errors name the line/column or the field."""
    return spec_from_dict(read_toml(path))
