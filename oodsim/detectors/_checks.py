"""Errors and input checks shared by the detector modules, so every message reads the same."""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import attrs
import numpy as np

from oodsim.errors import OodsimError
from oodsim.outputs import Outputs

SPLIT_WORDS = {"train": "training", "val": "validation"}


class DetectorInputError(OodsimError, ValueError):
    """A detector was called with inputs or parameters it cannot work with."""


class UnknownParameterError(DetectorInputError, TypeError):
    """A parameter name the detector does not take."""


def fit_hint(name: str, split: str | None, arrays: str = "...") -> str:
    """The sentence that tells a user which fit split to pass."""
    word = SPLIT_WORDS.get(split or "train", split)
    return f"detector {name!r} needs fit=Outputs({arrays}) of the in-distribution {word} split"


class FitArrays(NamedTuple):
    """The in-distribution rows (label ≥ 0 where labels are known) of a fit split, as float64."""

    logits: np.ndarray
    features: np.ndarray | None
    labels: np.ndarray | None


def fit_arrays(
    name: str, fit: Outputs | None, split: str, *, features: bool = False, labels: bool = False
) -> FitArrays:
    """Check that ``fit`` holds what the detector needs and drop OOD rows (label −1)."""
    wanted = ", ".join(
        ["logits=..."] + (["features=..."] if features else []) + (["labels=..."] if labels else [])
    )
    if fit is None:
        raise DetectorInputError(fit_hint(name, split, wanted))
    if not isinstance(fit, Outputs):
        raise DetectorInputError(fit_hint(name, split, wanted) + f"; got {type(fit).__name__}")
    for field, needed in (("features", features), ("labels", labels)):
        if needed and getattr(fit, field) is None:
            raise DetectorInputError(
                f"detector {name!r} needs fit.{field}: pass fit=Outputs({wanted}) of the "
                f"in-distribution {SPLIT_WORDS[split]} split"
            )
    keep = slice(None) if fit.labels is None else np.asarray(fit.labels) >= 0
    arrays = FitArrays(
        logits=as_float(fit.logits[keep]),
        features=None if fit.features is None else as_float(fit.features[keep]),
        labels=None if fit.labels is None else np.asarray(fit.labels[keep]).astype(np.int64),
    )
    if len(arrays.logits) == 0:
        raise DetectorInputError(f"detector {name!r}: fit has no in-distribution rows")
    if arrays.labels is not None:
        label_range(name, "fit", arrays.logits, arrays.labels)
    return arrays


def label_range(name: str, what: str, logits: np.ndarray, labels: np.ndarray) -> None:
    """In-distribution labels must index a logit column: labels from one class set and logits
    from a model of another (e.g. 10 labels, 6 known classes) would otherwise give silently
    wrong per-class fits or an index error deep inside a detector."""
    n_classes = np.shape(logits)[1]
    known = np.asarray(labels)[np.asarray(labels) >= 0]
    if len(known) and int(known.max()) >= n_classes:
        raise DetectorInputError(
            f"detector {name!r}: {what}.labels go up to {int(known.max())} but {what}.logits have "
            f"{n_classes} classes (columns); labels must be class indices 0..{n_classes - 1} of "
            "the logits (-1 for OOD rows)"
        )


def as_float(array: object) -> np.ndarray:
    """A float64 copy-if-needed of ``array``: detectors compute in double precision."""
    return np.asarray(array, dtype=np.float64)


@attrs.frozen
class Limit:
    """The values a detector parameter allows beyond its type: a range or a set of choices.

    Declared with the detector (``register(..., limits={"k": at_least(1)})``) so that a spec
    is checked where it is built, before any compute, and ``confidence`` checks a direct call
    the same way. ``None`` (a parameter's "choose for me") is always allowed here: whether a
    parameter takes it is its annotation's business.
    """

    low: float | None = None
    low_open: bool = False
    choices: tuple[str, ...] | None = None
    high: float | None = None

    def allows(self, value: object) -> bool:
        if value is None:
            return True
        if self.choices is not None:
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if not math.isfinite(value):
            return False
        if self.high is not None and value > self.high:
            return False
        if self.low is None:
            return True
        return value > self.low if self.low_open else value >= self.low

    @property
    def expected(self) -> str:
        """What is allowed, as the end of "expected ..." in an error message."""
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.low is None:
            return "a finite number" + ("" if self.high is None else f" <= {_short(self.high)}")
        if self.high is not None:
            opening = "(" if self.low_open else "["
            return f"a number in {opening}{_short(self.low)}, {_short(self.high)}]"
        return f"a number {'>' if self.low_open else '>='} {_short(self.low)}"

    def check(self, name: str, param: str, value: object) -> None:
        """Raise :class:`DetectorInputError` naming the detector when ``value`` is outside."""
        if not self.allows(value):
            raise DetectorInputError(
                f"detector {name!r}: {param} must be {self.expected}, got {value!r}"
            )


def _short(number: float) -> float | int:
    """A bound as a message writes it (1, not 1.0)."""
    return int(number) if float(number).is_integer() else number


def between(low: float, high: float) -> Limit:
    """Numbers in [``low``, ``high``]."""
    return Limit(low=low, high=high)


def at_least(low: float) -> Limit:
    """Numbers ≥ ``low``."""
    return Limit(low=low)


def greater_than(low: float) -> Limit:
    """Numbers > ``low``."""
    return Limit(low=low, low_open=True)


def one_of(*choices: str) -> Limit:
    """One of the strings ``choices``."""
    return Limit(choices=tuple(choices))


def positive(name: str, param: str, value: object) -> float:
    """``value`` as a finite float > 0, or a clear error."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise DetectorInputError(
            f"detector {name!r}: {param} must be a finite number > 0, got {value!r}"
        )
    return number


def integer(name: str, param: str, value: object, low: int, high: float = math.inf) -> int:
    """``value`` as an int in [low, high], or a clear error."""
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool)
    if not ok or not low <= int(value) <= high:  # type: ignore[arg-type]
        bound = f"in [{low}, {int(high)}]" if math.isfinite(high) else f">= {low}"
        raise DetectorInputError(
            f"detector {name!r}: {param} must be an integer {bound}, got {value!r}"
        )
    return int(value)  # type: ignore[arg-type]


def same_width(name: str, what: str, x: np.ndarray, fit_x: np.ndarray) -> None:
    """The scored rows and the fit rows must have the same number of columns."""
    if np.shape(x)[1] != np.shape(fit_x)[1]:
        raise DetectorInputError(
            f"detector {name!r}: {what} have {np.shape(x)[1]} columns but "
            f"fit.{what} have {np.shape(fit_x)[1]}"
        )
