"""What one metric is (:class:`MetricInfo`): its function, its vectorised kernel, direction,
range, inputs, table head and the published number it reproduces."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from oodsim.errors import UnknownNameError
from oodsim.metrics.kernels import Kernel

#: What a metric is computed from: κ with the OOD labels; κ, labels and the ID samples'
#: prediction correctness; κ and correctness of ID samples alone; κ, labels and κ of the ID
#: validation samples (a threshold fixed on them); class predictions and labels; the
#: classifier's probabilities and labels.
METRIC_INPUTS: tuple[str, ...] = (
    "kappa+is_ood",
    "kappa+is_ood+correct",
    "kappa+correct",
    "kappa+is_ood+val_kappa",
    "predictions+labels",
    "probabilities+labels",
)


def _check_inputs(instance: Any, attribute: Any, value: str) -> None:
    if value not in METRIC_INPUTS:
        raise UnknownNameError("inputs", value, METRIC_INPUTS)


@attrs.frozen(kw_only=True)
class MetricInfo:
    """One named metric: its function, direction, range, inputs and the number it reproduces.

    ``function`` takes the arrays ``inputs`` names, in that order (``correct`` third for
    "kappa+is_ood+correct", second for "kappa+correct"); ``kernel``, where given, computes the
    same number for many rows at once; ``reproduces`` names the published recipe (library
    call or paper) whose number it equals. docs/metrics.md tabulates them.
    """

    name: str
    function: Callable[..., Any] = attrs.field(eq=False)
    higher_is_better: bool
    range: tuple[float, float] = (0.0, 1.0)
    inputs: str = attrs.field(default="kappa+is_ood", validator=_check_inputs)
    reproduces: str = ""
    #: how a paper's table heads the metric ("AUROC", "E-AURC"); the name where empty
    label: str = ""
    #: the vectorised computation behind it (:func:`oodsim.metrics.evaluate` computes every
    #: metric with one from one sort per block of rows); None: ``function`` row by row
    kernel: Kernel | None = None
    #: the metric this one is under another name (a protocol's name for it: ImageNet-O's
    #: ``aupr`` is ``aupr_out``); specs offer the other name, results of that protocol this one
    same_as: str = ""

    @property
    def needs_correct(self) -> bool:
        """Whether the metric also needs the ID samples' prediction correctness."""
        return "correct" in self.inputs.split("+")

    @property
    def needs_val_kappa(self) -> bool:
        """Whether the metric also needs κ of the ID validation samples."""
        return "val_kappa" in self.inputs.split("+")

    @property
    def scores_detector(self) -> bool:
        """Whether the metric judges κ (an OOD or selective metric), not the classifier alone."""
        return self.inputs.startswith("kappa")
