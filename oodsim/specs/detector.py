"""Detector specs: a registered κ function's name, its parameters and the label results use."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from oodsim import limits
from oodsim.errors import SpecError, UnknownNameError
from oodsim.keys import digest, no_key
from oodsim.specs.converter import register_unstructure, structure
from oodsim.specs.keyed import KeyedSpec
from oodsim.specs.params import Params, check_param_table, param_table
from oodsim.specs.plugins import plugin
from oodsim.specs.types import label_text, located, register_table, spec_class, spec_error

#: detector parameters that count classes (at most the known classes of an open set split)
CLASS_BOUNDED = {"openmax": "alpha", "pytorch_ood:OpenMax": "alpha"}


@spec_class
class DetectorSpec(KeyedSpec):
    """A confidence function κ by registry name, with parameters; ``label`` names it in results.

    Parameters are checked at construction against the detector's signature: names (unless
    it takes ``**kwargs``), and types where its annotation names ``int``, ``float``, ``bool``,
    ``str`` or ``None``; every number must be finite and within the detector's ``limits``.
    A list of values is a grid (open set specs choose among them on OOD validation data).
    """

    TAG = "detector"
    VERSION = "1"

    name: str = attrs.field(metadata=plugin("detector"))
    params: Params = attrs.field(default=(), converter=param_table)
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
        check_param_table(
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


register_unstructure(DetectorSpec, detector_to_data)
