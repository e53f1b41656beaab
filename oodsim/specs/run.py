"""The base of every protocol's spec: :class:`RunSpec`, the fields the engine reads.

A run of any protocol has a name, detectors, metrics, seeds, a stopping rule, what to do when
a seed fails and an optional cluster. They are declared once, here, with their checks; a
protocol's spec subclasses :class:`RunSpec` and adds its own fields (an experiment's dataset
and split, a severity benchmark's models and pools). Class attributes give the defaults that
differ between protocols.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

import attrs

from oodsim.errors import SpecError, UnknownNameError
from oodsim.keys import no_key
from oodsim.specs.cluster import ClusterSpec
from oodsim.specs.converter import unstructure
from oodsim.specs.detector import DetectorSpec, detector_specs
from oodsim.specs.keyed import KeyedSpec
from oodsim.specs.plugins import plugin
from oodsim.specs.seeded import Seeded, SeedsSpec, StoppingSpec
from oodsim.specs.types import one_of, path_string, safe_name, spec_class


def _default_name(spec: RunSpec) -> str:
    return type(spec).TAG


def _default_metrics(spec: RunSpec) -> tuple[str, ...]:
    return tuple(type(spec).DEFAULT_METRICS)


def _default_seeds(spec: RunSpec) -> SeedsSpec:
    n = type(spec).DEFAULT_N_SEEDS
    return SeedsSpec() if n is None else SeedsSpec(n=n)


def check_labels(field: str, labels: Sequence[str]) -> None:
    """A list of labels (of detectors, models, OOD sets) must be non-empty and distinct."""
    if not labels or len(set(labels)) != len(labels):
        raise SpecError(field, list(labels), "a non-empty list with distinct labels")


def _cache_location(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not (isinstance(value, str) and value.strip()):
        raise SpecError("cache", value, "a folder or an object store's URL (s3://bucket/prefix)")


@spec_class
class RunSpec(Seeded, KeyedSpec):
    """What every protocol's spec has: ``name``, ``detectors``, ``metrics``, ``seeds``,
    ``stopping``, ``on_failure``, ``cluster`` and ``cache`` (where the store is: a folder,
    relative to the spec file's, or an object store's URL ``s3://bucket/prefix``; execution
    only, like ``cluster``: never in the key), and
    ``source``: the spec file it was read from (set by :func:`oodsim.load`, kept by
    ``attrs.evolve``; None for a spec built in Python or a shipped spec loaded by name). A run
    finds its default cache and results folder from it (:mod:`oodsim.store.defaults`); it is
    never in the key, in plain data or in comparisons.

    A subclass sets ``TAG`` and ``VERSION`` (its key's tag, and the default ``name``),
    ``DEFAULT_METRICS``, ``DEFAULT_N_SEEDS`` (None: :class:`SeedsSpec`'s 50) and, where it
    scores more than κ metrics, :meth:`metric_names`. A subclass's ``__attrs_post_init__``
    calls ``super().__attrs_post_init__()`` first.
    """

    TAG: ClassVar[str] = "run"
    VERSION: ClassVar[str] = "1"
    DEFAULT_METRICS: ClassVar[tuple[str, ...]] = ("auroc",)
    DEFAULT_N_SEEDS: ClassVar[int | None] = None

    name: str = attrs.field(
        default=attrs.Factory(_default_name, takes_self=True),
        validator=safe_name,
        metadata=no_key(),
    )
    detectors: tuple[DetectorSpec, ...] = attrs.field(default=("msp",), converter=detector_specs)
    metrics: tuple[str, ...] = attrs.field(
        default=attrs.Factory(_default_metrics, takes_self=True), metadata=plugin("metric")
    )
    seeds: SeedsSpec = attrs.field(default=attrs.Factory(_default_seeds, takes_self=True))
    stopping: StoppingSpec = attrs.field(factory=StoppingSpec)
    on_failure: str = attrs.field(default="record", validator=one_of("record", "abort"))
    cluster: ClusterSpec | None = attrs.field(default=None, metadata=no_key())
    cache: str | None = attrs.field(
        default=None, converter=path_string, validator=_cache_location, metadata=no_key()
    )
    source: str | None = attrs.field(
        default=None, eq=False, repr=False, metadata=no_key(data=False)
    )

    @classmethod
    def metric_names(cls) -> Sequence[str]:
        """The metrics this protocol's seeds can score (default: every metric of κ that
        needs no validation samples or classifier outputs, registered ones included)."""
        # specs sit below the registries they validate against
        from oodsim.metrics import kappa_metric_names

        return kappa_metric_names()

    def __attrs_post_init__(self) -> None:
        check_labels("detectors", [d.label for d in self.detectors])
        names = self.metric_names()
        for metric in self.metrics:
            if metric not in names:
                raise UnknownNameError("metrics", metric, names)
        if not self.metrics or len(set(self.metrics)) != len(self.metrics):
            raise SpecError("metrics", self.metrics, "a non-empty list of distinct metric names")

    def to_dict(self) -> dict[str, Any]:
        """Plain data (round-trips through the protocol's ``from_data``)."""
        return unstructure(self)

    def to_json(self) -> str:
        """The spec as sorted JSON, as results carry it."""
        return json.dumps(self.to_dict(), sort_keys=True, default=str)
