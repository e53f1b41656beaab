"""Checks of what the statistics take: a probability in (0, 1), rows complete in every
method."""

from __future__ import annotations

import numpy as np


def complete_rows(values: np.ndarray) -> np.ndarray:
    """Rows of a (n_seeds, n_methods) array where every method has a finite value."""
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    if values.ndim != 2:
        raise ValueError(f"values must have shape (n_seeds, n_methods), got {values.shape}")
    return values[np.isfinite(values).all(axis=1)]


def check_alpha(alpha: float, name: str = "alpha") -> float:
    """Validate a probability in (0, 1)."""
    alpha = float(alpha)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {alpha}")
    return alpha
