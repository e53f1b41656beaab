"""The open set experiment: :class:`ExperimentSpec`, read from TOML by :func:`load_spec`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from oodsim.errors import SpecError
from oodsim.seeds import OPEN_SET_STREAMS
from oodsim.specs.converter import structure
from oodsim.specs.detector import CLASS_BOUNDED
from oodsim.specs.files import read_spec
from oodsim.specs.params import is_grid
from oodsim.specs.parts import DatasetSpec, ModelSpec, OODSetSpec, SplitSpec, TrainingSpec
from oodsim.specs.run import RunSpec, check_labels
from oodsim.specs.seeded import NO_SEVERITY, DegenerateSpec
from oodsim.specs.types import spec_class


def _ood_sets(value: Any) -> Any:
    if not isinstance(value, list | tuple):
        return value
    return tuple(OODSetSpec(kind=v) if isinstance(v, str) else v for v in value)


@spec_class
class ExperimentSpec(RunSpec):
    """An open set simulation experiment: everything that determines its results (with the
    fields of every run: :class:`~oodsim.specs.run.RunSpec`)."""

    TAG = "experiment"
    VERSION = "1"
    DEFAULT_METRICS = ("auroc", "accuracy")

    dataset: DatasetSpec
    split: SplitSpec = attrs.field(factory=SplitSpec)
    model: ModelSpec = attrs.field(factory=ModelSpec)
    training: TrainingSpec = attrs.field(factory=TrainingSpec)
    ood: tuple[OODSetSpec, ...] = attrs.field(default=("held_out",), converter=_ood_sets)
    degenerate: DegenerateSpec = attrs.field(factory=DegenerateSpec)

    @classmethod
    def metric_names(cls) -> list[str]:
        """Every metric: an open set seed also scores its classifier (``accuracy``)."""
        # specs sit below the registries they validate against
        from oodsim.metrics import spec_metrics

        return spec_metrics()

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
        super().__attrs_post_init__()
        self._check_grids()
        check_labels("ood", [o.label for o in self.ood])
        self._check_ood_is_not_the_id_data()
        self._check_split_fits_dataset()
        self._check_detectors_fit_the_classes()
        self._check_design()
        self.check_stopping((NO_SEVERITY,))

    def _check_grids(self) -> None:
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
        is refused: pytorch-ood's ``OpenMax`` runs with it, silently identical to ``alpha`` =
        the number of classes, and the results would carry the larger value."""
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


def spec_from_dict(data: Mapping[str, Any], base: Path | None = None) -> ExperimentSpec:
    """Build an :class:`ExperimentSpec` from plain data, with field-path error messages.
    ``base`` (the spec file's folder) is taken like every protocol's reader takes it: an open
    set spec's paths (a dataset's ``root``) are kept as written."""
    return structure(data, ExperimentSpec)


def load_spec(path: str | Path) -> ExperimentSpec:
    """Read an experiment spec from a TOML file; errors name the file and line of each problem
    (:func:`~oodsim.specs.files.read_spec`). The spec remembers the file (``source``), as
    :func:`oodsim.load` does."""
    spec = read_spec(path, spec_from_dict)
    return attrs.evolve(spec, source=str(Path(path).resolve()))
