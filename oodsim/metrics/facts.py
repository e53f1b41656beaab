"""Every metric by name (:data:`METRIC_INFO`): oodsim's own records
(:mod:`oodsim.metrics.builtin`), those registered here (:func:`register_metric`) and installed;
what runs, statistics and reports ask of a metric (its direction, its range, which names a spec
may use)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from oodsim.metrics.builtin import BUILTIN
from oodsim.metrics.record import MetricInfo
from oodsim.plugins import Registry, View

#: every metric by name (:mod:`oodsim.plugins`): oodsim's own, registered here
#: (:func:`register_metric`) and installed (entry points of group ``oodsim.metrics``)
REGISTRY: Registry[MetricInfo] = Registry(
    "metric",
    group="oodsim.metrics",
    order="builtins_first",  # METRIC_INFO lists oodsim's own first, in their order
    record_type=MetricInfo,
    decorator="oodsim.metrics.register_metric",
    source="function",
)
for _info_record in BUILTIN.values():
    REGISTRY.builtin(_info_record.name, _info_record)


#: Metric name → its record: oodsim's own in the order results list them by default, then
#: those registered here and installed.
METRIC_INFO: Mapping[str, MetricInfo] = View(REGISTRY)


def register_metric(
    name: str,
    *,
    higher_is_better: bool,
    range: tuple[float, float] = (0.0, 1.0),
    reproduces: str = "",
    label: str = "",
    replace: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``function(kappa, is_ood) -> float`` (κ and the OOD flags of one
    row of samples) as metric ``name``. Runs compute it for every detector and OOD set (a
    spec's ``metrics``; shipped to the workers), ``oodsim.stats`` and reports read its
    direction (``higher_is_better``) and its ``range`` (intervals stay inside it), and
    ``reproduces`` says which published number it equals, ``label`` how a paper's table heads
    it (default: its name). A taken name raises
    ``ValueError``; ``replace=True`` re-registers your own, never a built-in."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        low, high = (float(x) for x in range)
        if not low < high:
            raise ValueError(f"metric {name!r}: range {range!r} is not (low, high), low < high")
        info = MetricInfo(
            name=name,
            function=function,
            higher_is_better=bool(higher_is_better),
            range=(low, high),
            reproduces=reproduces,
            label=label,
        )
        REGISTRY.register(name, info, replace=replace)
        function.__oodsim_metric__ = info  # lets an entry point name the function
        return function

    return decorate


def spec_metrics() -> list[str]:
    """Every metric a spec may name, sorted: each record's, less a protocol's names of another
    metric (``same_as``: a spec names the other)."""
    return sorted(name for name, info in METRIC_INFO.items() if not info.same_as)


def kappa_metric_names() -> list[str]:
    """The metrics of the test sets' κ a spec may name, sorted: oodsim's
    :data:`KAPPA_METRICS` and the registered and installed ones (of κ and the OOD flags)."""
    return [
        name
        for name in spec_metrics()
        if name in KAPPA_METRICS or METRIC_INFO[name].inputs == "kappa+is_ood"
    ]


def metric_info(name: str) -> MetricInfo | None:
    """The record of metric ``name`` (oodsim's, registered or installed), None if none."""
    name = str(name)
    return REGISTRY.get(name) if name in REGISTRY.available() else None


KAPPA_METRICS: tuple[str, ...] = tuple(
    name for name, info in BUILTIN.items() if info.kernel is not None and not info.same_as
)


"""Names of the metrics a spec may ask for that are computed from the test sets' κ, from one
sort; ``oscr`` and ``aurc`` also need ``correct`` (see ``METRIC_INFO[name].inputs``)."""


VALIDATION_METRICS: tuple[str, ...] = tuple(
    name for name, info in BUILTIN.items() if info.needs_val_kappa
)


"""Names of the metrics that also need κ of the ID validation samples (a threshold fixed on
them); :func:`evaluate` computes them when given ``val_kappa``."""


DEFAULT_KAPPA_METRICS: tuple[str, ...] = ("auroc", "aupr_in", "aupr_out", "fpr95")


"""What :func:`evaluate` computes when no names are given."""


METRICS: Mapping[str, Callable[..., Any]] = View(REGISTRY, lambda info: info.function)


"""Metric name → function, taking the arrays ``METRIC_INFO[name].inputs`` names: κ metrics
``(kappa, is_ood)``, ``oscr`` ``(kappa, is_ood, correct)``, ``aurc`` ``(kappa, correct)``,
"accuracy" ``(predictions, labels)``."""


#: The range every value of a metric lies in, by name (its record's :attr:`MetricInfo.range`):
#: intervals for a metric's mean stay inside it.
METRIC_RANGES: Mapping[str, tuple[float, float]] = View(REGISTRY, lambda info: info.range)


def metric_range(name: str) -> tuple[float, float] | None:
    """``(low, high)`` bounds of the values of metric ``name`` (its record's); None for a
    name without a record (its intervals are then unbounded)."""
    info = metric_info(name)
    return None if info is None else info.range


#: oodsim's own metrics for which a lower value is better (their records say so).
LOWER_IS_BETTER: frozenset[str] = frozenset(
    name for name, info in BUILTIN.items() if not info.higher_is_better
)


def higher_is_better(metric: str) -> bool:
    """Whether a larger value of ``metric`` means a better detector, as its record in
    :data:`METRIC_INFO` says (the name as given, else lower-cased: ``AUROC``). A name without
    a record is taken as higher-is-better: register a metric whose lower values are better
    (:func:`register_metric`, ``higher_is_better=False``) before its results are compared."""
    name = str(metric)
    info = metric_info(name) or metric_info(name.lower())
    return True if info is None else info.higher_is_better


def is_ood_metric(metric: str) -> bool:
    """Whether ``metric`` scores the OOD detector (a κ metric such as AUROC or FPR95) rather
    than the classifier (``accuracy``, the same for every detector of a seed).

    Names :mod:`oodsim.metrics` does not know (a protocol's own, e.g. ImageNet-O's ``aupr``)
    count as OOD metrics.
    """
    info = metric_info(str(metric))
    return info is None or info.scores_detector


def available_metrics() -> tuple[str, ...]:
    """Names of every metric (oodsim's, registered here, installed), sorted."""
    return tuple(sorted(REGISTRY.available()))


def get_metric(name: str) -> Callable[..., Any]:
    """The metric function called ``name``; unknown names fail with the closest match."""
    return REGISTRY.get(name).function
