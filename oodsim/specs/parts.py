"""The parts of an experiment: dataset, class/sample split, model, augmentation, training recipe
and OOD test sets; each validated at construction and keyed by content."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from oodsim import limits
from oodsim.errors import SpecError
from oodsim.keys import no_key
from oodsim.specs.keyed import KeyedSpec
from oodsim.specs.params import Params, check_param_table, param_table
from oodsim.specs.plugins import plugin
from oodsim.specs.types import (
    label_text,
    located,
    non_negative,
    one_of,
    path_string,
    positive,
    register_table,
    registered,
    spec_class,
    spec_error,
    unit_interval,
)

if TYPE_CHECKING:
    from oodsim.data.registry import ImageData


def _dataset_names() -> list[str]:
    # specs sit below the registries they validate against
    from oodsim.data.registry import DATASETS

    return sorted(DATASETS)


def _architecture_names() -> list[str]:
    # specs sit below the registries they validate against (importing it registers the
    # built-ins, without torch)
    from oodsim.models.registry import available_architectures

    return available_architectures()


@spec_class
class DatasetSpec(KeyedSpec):
    """A labelled image dataset from the registry in :mod:`oodsim.data.registry`."""

    TAG = "dataset"
    VERSION = "1"

    name: str = attrs.field(validator=registered(_dataset_names), metadata=plugin("dataset"))
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

    def load(self) -> ImageData:
        """The images and labels this spec names, from the dataset registry."""
        # specs sit below the registries they validate against
        from oodsim.data.registry import load_dataset

        return load_dataset(self.name, self.root, self.download, self.image_size)


@spec_class
class SplitSpec(KeyedSpec):
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
                "anything, and the training would be wasted",
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


#: architecture parameters that size a model, and the limit each is checked against
MODEL_SIZES = {
    "depth": "model_depth",
    "width": "model_width",
    "widen_factor": "model_width",
    "num_features": "model_width",
}


@spec_class
class ModelSpec(KeyedSpec):
    """A classifier architecture by registry name (:mod:`oodsim.models.registry`).

    ``dropout`` and ``width`` go to every builder that takes them; ``params`` are the
    architecture's own parameters (one value each), checked here against its builder's
    signature like detector parameters. Empty ``params`` leave the key as it was before
    architectures had them."""

    TAG = "model"
    VERSION = "1"

    arch: str = attrs.field(default="small_cnn", metadata=plugin("architecture"))
    dropout: float = attrs.field(default=0.2, validator=unit_interval)
    width: int = attrs.field(default=32, validator=positive)
    params: Params = attrs.field(default=(), converter=param_table, metadata=no_key())

    @arch.validator
    def _check_arch(self, attribute: attrs.Attribute, value: str) -> None:
        # specs sit below the registries they validate against
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
        # specs sit below the registries they validate against
        from oodsim.models.registry import get_architecture

        architecture = get_architecture(self.arch)
        check_param_table(
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

    @classmethod
    def check_data(cls, data: Mapping[str, Any]) -> None:
        """Refuse, from a spec file, a ``width`` for an architecture whose builder takes none
        (``resnet18``, ``wrn40_2``): it was ignored, yet keyed an identical model apart, which
        then trained again. (A model evolved in Python keeps its width when its arch changes.)"""
        # specs sit below the registries they validate against
        from oodsim.models.registry import get_architecture

        arch = data.get("arch", attrs.fields(cls).arch.default)
        if "width" not in data or not isinstance(arch, str):
            return
        try:
            takes = get_architecture(arch).takes("width")
        except SpecError:  # an unknown arch: the field's own check names it
            return
        if not takes:
            raise located(
                SpecError(
                    "width",
                    data["width"],
                    f"no width for arch {arch!r}",
                    "Its builder takes no width (its size is fixed, or set in [model.params]): "
                    "a width would be ignored, yet key an identical model apart",
                ),
                "width",
            )

    @property
    def kwargs(self) -> dict[str, Any]:
        """The architecture's own parameters, for its builder."""
        return dict(self.params)

    def key_extra(self) -> dict[str, Any]:
        """``params`` enter the key only when there are any (keys of older specs stay)."""
        return {"params": dict(self.params)} if self.params else {}


#: The largest zoom of training augmentation: beyond it a crop of a few pixels fills the image
MAX_SCALE = 10.0


@spec_class
class AugmentSpec(KeyedSpec):
    """Training augmentation; ``hflip=None`` flips only datasets where a flip keeps the class."""

    TAG = "augment"
    VERSION = "1"

    enabled: bool = True
    hflip: bool | None = None
    rotation: float = attrs.field(default=10.0)
    scale: tuple[float, float] = attrs.field(default=(0.9, 1.1))

    @rotation.validator
    def _check_rotation(self, attribute: attrs.Attribute, value: float) -> None:
        if not 0 <= value <= 180:
            raise spec_error(
                self,
                "rotation",
                value,
                "degrees in [0, 180]",
                "Images turn by up to ± rotation degrees: 180 already covers every angle (1e300 "
                "became an infinite angle, and the training's loss NaN)",
            )

    @scale.validator
    def _check_scale(self, attribute: attrs.Attribute, value: tuple[float, ...]) -> None:
        if not 0 < value[0] <= value[1] <= MAX_SCALE:
            raise spec_error(
                self, "scale", value, f"(low, high) with 0 < low <= high <= {MAX_SCALE:g}"
            )


@spec_class
class TrainingSpec(KeyedSpec):
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


OOD_KINDS = ("held_out", "dataset", "uniform_noise", "gaussian_noise")


@spec_class
class OODSetSpec(KeyedSpec):
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


register_table(OODSetSpec, shorthand="kind", nouns=("an OOD set (a kind or a table)", "OOD sets"))


register_table(DatasetSpec, shorthand="name", nouns=("a dataset (a name or a table)", "datasets"))
