"""The inputs of the metrics, checked once: κ, the OOD mask, the correctness of ID predictions,
the AUPR method and the TPR level; non-finite scores are refused with where they are."""

from __future__ import annotations

from typing import Any

import numpy as np

from oodsim.errors import OodsimError, UnknownNameError

AUPR_METHODS = ("trapezoid", "step")


class NonFiniteScoreError(OodsimError, ValueError):
    """κ holds NaN or ±inf: no ranking metric is defined, so we refuse instead of guessing."""

    def __init__(
        self,
        count: int,
        batch_index: tuple[int, ...],
        row_count: int,
        rows_affected: int,
        n_rows: int,
        context: str = "",
    ) -> None:
        self.count, self.batch_index, self.row_count = count, batch_index, row_count
        self.rows_affected, self.n_rows, self.context = rows_affected, n_rows, context
        values = "value" if count == 1 else "values"
        message = (
            f"kappa holds {count} non-finite {values} (NaN or ±inf) in {rows_affected} of "
            f"{n_rows} row(s); first at batch index {batch_index} ({row_count} there)"
        )
        super().__init__(_with_context(message, context))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle by fields so the error survives a trip back from a dask worker."""
        fields = (self.count, self.batch_index, self.row_count, self.rows_affected)
        return type(self), (*fields, self.n_rows, self.context)


def _with_context(message: str, context: str) -> str:
    """Append the caller's context (e.g. "detector 'odin', seed 17") to a message."""
    return f"{message} [{context}]" if context else message


def as_kappa(kappa: Any, context: str) -> np.ndarray:
    """κ as a real array of shape (..., n) with n >= 1, in its own dtype (no float64 copy)."""
    arr = np.asarray(kappa)
    if arr.dtype.kind not in "biuf":
        raise ValueError(
            _with_context(f"kappa must be real numbers, got dtype {arr.dtype}", context)
        )
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise ValueError(
            _with_context(f"kappa must have shape (..., n>0), got {arr.shape}", context)
        )
    return arr


def as_is_ood(is_ood: Any, kappa_shape: tuple[int, ...], context: str) -> np.ndarray:
    """is_ood as bool of shape (n,) when shared by all rows, else broadcast to κ's shape."""
    return as_mask(is_ood, "is_ood", kappa_shape, context)


def as_mask(values: Any, name: str, kappa_shape: tuple[int, ...], context: str) -> np.ndarray:
    """A per-sample flag (is_ood, correct) as bool (n,) if shared by all rows, else (rows, n)."""
    arr = np.asarray(values)
    if arr.dtype != np.bool_:
        if arr.dtype.kind not in "biuf" or not np.isin(arr, (0, 1)).all():
            raise ValueError(_with_context(f"{name} must be boolean (or 0/1)", context))
        arr = arr != 0
    fits = arr.ndim >= 1 and arr.shape[-1] == kappa_shape[-1]
    try:
        fits = fits and np.broadcast_shapes(arr.shape, kappa_shape) == kappa_shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            _with_context(
                f"{name} of shape {arr.shape} does not match kappa of shape {kappa_shape}; "
                "expected (n,) or a shape that broadcasts to kappa's",
                context,
            )
        )
    while arr.ndim > 1 and arr.shape[0] == 1:  # leading size-1 dims: one label set for all
        arr = arr[0]
    if arr.ndim == 1:
        return arr
    return np.broadcast_to(arr, kappa_shape).reshape(-1, kappa_shape[-1])


def check_finite(kappa: np.ndarray, context: str) -> None:
    """Raise NonFiniteScoreError saying how many values are bad and in which row."""
    if kappa.dtype.kind != "f" or np.isfinite(kappa).all():
        return
    per_row = np.count_nonzero(~np.isfinite(kappa.reshape(-1, kappa.shape[-1])), axis=-1)
    first = int(np.flatnonzero(per_row)[0])
    raise NonFiniteScoreError(
        count=int(per_row.sum()),
        batch_index=tuple(int(i) for i in np.unravel_index(first, kappa.shape[:-1])),
        row_count=int(per_row[first]),
        rows_affected=int(np.count_nonzero(per_row)),
        n_rows=per_row.size,
        context=context,
    )


def class_counts(
    is_ood: np.ndarray, batch_shape: tuple[int, ...], context: str, need_ood: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row counts (n_id, n_ood), int64 of shape (rows,); refuse rows missing a class.

    Every metric needs ID samples; ``need_ood=False`` (AURC alone) accepts rows without OOD.
    """
    n_rows = int(np.prod(batch_shape))
    n_ood = np.broadcast_to(np.count_nonzero(is_ood, axis=-1), (n_rows,)).astype(np.int64)
    n_id = is_ood.shape[-1] - n_ood
    checks = [(n_id, "ID (is_ood=False)"), (n_ood, "OOD (is_ood=True)")][: 1 + need_ood]
    need = "OOD metrics need both ID and OOD samples" if need_ood else "AURC needs ID samples"
    for counts, what in checks:
        empty = np.flatnonzero(counts == 0)
        if empty.size:
            where = tuple(int(i) for i in np.unravel_index(empty[0], batch_shape))
            raise ValueError(
                _with_context(
                    f"no {what} sample in {empty.size} of {n_rows} row(s), first at batch index "
                    f"{where}; {need}",
                    context,
                )
            )
    return n_id, n_ood


def check_aupr_method(method: str) -> None:
    """Refuse an unknown AUPR integration rule, naming the known ones."""
    if method not in AUPR_METHODS:
        raise UnknownNameError("method", method, AUPR_METHODS)


def check_rate(value: float, name: str) -> None:
    """Refuse a target rate (a TP rate, a coverage) outside (0, 1] (including NaN)."""
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")


def require_correct(name: str, correct: Any, context: str) -> None:
    """Refuse to compute a metric that judges predictions without their correctness."""
    if correct is None:
        raise ValueError(
            _with_context(
                f"metric {name!r} needs correct=: each ID sample's prediction correctness "
                "(bool of shape (n,) or broadcastable to kappa's (..., n))",
                context,
            )
        )
