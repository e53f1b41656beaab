"""Checks of the arguments the statistics take: a probability in (0, 1), a count, the dim of
replicates, design levels without gaps, rows complete in every method.

Every check raises ``ValueError`` whose message starts with the argument's name and says its
allowed range and the value given, before any computation.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from oodsim.results.access import NOT_REPLICATES, check_dim

__all__ = [
    "NOT_REPLICATES",
    "check_alpha",
    "check_count",
    "check_dim",
    "check_levels",
    "complete_rows",
]


def complete_rows(values: np.ndarray) -> np.ndarray:
    """Rows of a (n_seeds, n_methods) array where every method has a finite value."""
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    if values.ndim != 2:
        raise ValueError(f"values must have shape (n_seeds, n_methods), got {values.shape}")
    return values[np.isfinite(values).all(axis=1)]


def check_alpha(alpha: object, name: str = "alpha") -> float:
    """``alpha`` as a float strictly inside (0, 1); ValueError naming ``name`` for anything
    else (NaN, a bound, a string, None)."""
    try:
        if isinstance(alpha, str | bytes):
            raise TypeError(alpha)
        value = float(alpha)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in (0, 1), got {alpha!r}") from None
    if isinstance(alpha, bool) or not 0.0 < value < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {alpha!r}")
    return value


def check_count(value: object, name: str, minimum: int = 1, meaning: str = "") -> int:
    """``value`` as an int ``>= minimum``: an integer, or a float with no fractional part.
    ValueError naming ``name`` and the range for a bool, NaN, inf, a fraction, a string or a
    number below ``minimum``; ``meaning`` (e.g. "0 skips the intervals") follows the range."""
    allowed = f"an integer >= {minimum}" + (f" ({meaning})" if meaning else "")
    real = isinstance(value, numbers.Real) and math.isfinite(float(value))
    whole = isinstance(value, numbers.Integral) or (real and float(value).is_integer())
    if isinstance(value, bool | np.bool_) or not whole:
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    count = int(value)  # type: ignore[call-overload]
    if count < minimum:
        raise ValueError(f"{name} must be {allowed}, got {count}")
    return count


def check_levels(
    levels: Iterable[Any] | np.ndarray, name: str, at: Sequence[Any] | None = None
) -> None:
    """Every value of a design factor ``name`` has a level: ValueError naming ``name``, how
    many levels are missing (NaN, None, NaT) and where (the labels ``at`` of those values,
    their positions without), instead of taking a missing level as one level of its own."""
    labels = np.asarray(levels, dtype=object).ravel()
    missing = np.flatnonzero(pd.isna(labels))
    if missing.size == 0:
        return
    where = [str(at[i]) for i in missing] if at is not None else [str(i) for i in missing]
    shown = ("" if at is not None else "positions ") + ", ".join(where[:5])
    shown += ", ..." if len(where) > 5 else ""
    raise ValueError(
        f"{name} has {missing.size} missing level{'s' if missing.size > 1 else ''} (NaN or "
        f"None) at {shown}: every value needs a level of every factor; drop those values or "
        "give them their levels"
    )
