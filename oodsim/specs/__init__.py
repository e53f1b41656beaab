"""Specs: frozen attrs classes, validated at construction, keyed by content.

A spec is data. It says *what* to compute (dataset, class/sample split, model, training recipe,
detectors, metrics, OOD test sets, seeds and stopping rule), never *how* (workers, device, cache
root): execution settings are arguments of :func:`oodsim.run`, or fields marked ``no_key`` that
do not enter its key. Specs load from TOML with :func:`load_spec` and build the same in Python.
Types are strict, as in every protocol's spec: the rules are :mod:`oodsim.specs.types`, the
one converter :mod:`oodsim.specs.converter`; the parts every protocol shares are
:mod:`~oodsim.specs.run` (the base of every protocol's spec: :class:`RunSpec`),
:mod:`~oodsim.specs.seeded` (seeds, stopping), :mod:`~oodsim.specs.parts`,
:mod:`~oodsim.specs.detector` and :mod:`~oodsim.specs.cluster`; the open set experiment is
:mod:`~oodsim.specs.experiment`.
"""

from oodsim.specs.cluster import ClusterSpec
from oodsim.specs.converter import structure, unstructure
from oodsim.specs.detector import (
    CLASS_BOUNDED,
    DetectorSpec,
    detector_from_data,
    detector_specs,
    detector_to_data,
)
from oodsim.specs.experiment import ExperimentSpec, load_spec, spec_from_dict
from oodsim.specs.keyed import KeyedSpec
from oodsim.specs.params import Params
from oodsim.specs.parts import (
    MODEL_SIZES,
    OOD_KINDS,
    AugmentSpec,
    DatasetSpec,
    ModelSpec,
    OODSetSpec,
    SplitSpec,
    TrainingSpec,
)
from oodsim.specs.run import RunSpec, check_labels
from oodsim.specs.seeded import (
    MAX_DESIGN_LEVELS,
    STOPPING_RULES,
    DegenerateSpec,
    Seeded,
    SeedsSpec,
    StoppingSpec,
)

__all__ = [
    "CLASS_BOUNDED",
    "MAX_DESIGN_LEVELS",
    "MODEL_SIZES",
    "OOD_KINDS",
    "STOPPING_RULES",
    "AugmentSpec",
    "ClusterSpec",
    "DatasetSpec",
    "DegenerateSpec",
    "DetectorSpec",
    "ExperimentSpec",
    "KeyedSpec",
    "ModelSpec",
    "OODSetSpec",
    "Params",
    "RunSpec",
    "Seeded",
    "SeedsSpec",
    "SplitSpec",
    "StoppingSpec",
    "TrainingSpec",
    "check_labels",
    "detector_from_data",
    "detector_specs",
    "detector_to_data",
    "load_spec",
    "spec_from_dict",
    "structure",
    "unstructure",
]
