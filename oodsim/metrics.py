"""Vectorized OOD metrics over a leading batch of score vectors.

Every κ metric takes ``kappa`` of shape ``(..., n)`` (a confidence: higher means "more
in-distribution") and ``is_ood`` of shape ``(n,)`` or ``(..., n)``, and returns float64 of shape
``(...)``. All rows are sorted at once along the last axis; per-row curves are then built with
cumulative counts, keeping only the last index of each run of tied scores exactly as
scikit-learn does, so values match ``roc_auc_score``, ``precision_recall_curve`` + ``auc``,
``average_precision_score`` and ``roc_curve`` to rounding error.

Large batches are processed in blocks of rows (one sort per block, no loop over rows) so that
temporaries stay cache-sized; κ is sorted in its own dtype, never converted to float64.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np

from oodsim.errors import OodsimError, UnknownNameError

__all__ = [
    "KAPPA_METRICS",
    "METRICS",
    "NonFiniteScoreError",
    "accuracy",
    "aupr_in",
    "aupr_out",
    "auroc",
    "available_metrics",
    "evaluate",
    "fpr95",
    "fpr_at_tpr",
    "get_metric",
    "metric_range",
]

AUPR_METHODS = ("trapezoid", "step")
_BLOCK_ELEMENTS = 1 << 20  # scores per block: keeps every temporary a few MiB


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


# --------------------------------------------------------------------------- validation


def _with_context(message: str, context: str) -> str:
    """Append the caller's context (e.g. "detector 'odin', seed 17") to a message."""
    return f"{message} [{context}]" if context else message


def _as_kappa(kappa: Any, context: str) -> np.ndarray:
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


def _as_is_ood(is_ood: Any, kappa_shape: tuple[int, ...], context: str) -> np.ndarray:
    """is_ood as bool of shape (n,) when shared by all rows, else broadcast to κ's shape."""
    arr = np.asarray(is_ood)
    if arr.dtype != np.bool_:
        if arr.dtype.kind not in "biuf" or not np.isin(arr, (0, 1)).all():
            raise ValueError(_with_context("is_ood must be boolean (or 0/1)", context))
        arr = arr != 0
    fits = arr.ndim >= 1 and arr.shape[-1] == kappa_shape[-1]
    try:
        fits = fits and np.broadcast_shapes(arr.shape, kappa_shape) == kappa_shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            _with_context(
                f"is_ood of shape {arr.shape} does not match kappa of shape {kappa_shape}; "
                "expected (n,) or a shape that broadcasts to kappa's",
                context,
            )
        )
    while arr.ndim > 1 and arr.shape[0] == 1:  # leading size-1 dims: one label set for all
        arr = arr[0]
    if arr.ndim == 1:
        return arr
    return np.broadcast_to(arr, kappa_shape).reshape(-1, kappa_shape[-1])


def _check_finite(kappa: np.ndarray, context: str) -> None:
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


def _class_counts(
    is_ood: np.ndarray, batch_shape: tuple[int, ...], context: str
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row counts (n_id, n_ood), int64 of shape (rows,); refuse rows missing a class."""
    n_rows = int(np.prod(batch_shape))
    n_ood = np.broadcast_to(np.count_nonzero(is_ood, axis=-1), (n_rows,)).astype(np.int64)
    n_id = is_ood.shape[-1] - n_ood
    for counts, what in ((n_id, "ID (is_ood=False)"), (n_ood, "OOD (is_ood=True)")):
        empty = np.flatnonzero(counts == 0)
        if empty.size:
            where = tuple(int(i) for i in np.unravel_index(empty[0], batch_shape))
            raise ValueError(
                _with_context(
                    f"no {what} sample in {empty.size} of {n_rows} row(s), first at batch index "
                    f"{where}; OOD metrics need both ID and OOD samples",
                    context,
                )
            )
    return n_id, n_ood


def _check_method(method: str) -> None:
    """Refuse an unknown AUPR integration rule, naming the known ones."""
    if method not in AUPR_METHODS:
        raise UnknownNameError("method", method, AUPR_METHODS)


def _check_tpr(tpr: float) -> None:
    """Refuse a target TP rate outside (0, 1] (including NaN)."""
    if not 0.0 < tpr <= 1.0:
        raise ValueError(f"tpr must be in (0, 1], got {tpr!r}")


# --------------------------------------------------------------------------- curve building
#
# After sorting a row ascending by κ, each run of tied κ (m = 0..K-1, ascending) is summarised
# by the inclusive counts through its last element: a_m ID samples, b_m samples in all, with
# a_{-1} = b_{-1} = 0. These are exactly sklearn's kept thresholds, seen from both ends:
#   AUPR-OUT ranks by -κ (κ ascending): point m is (TP, seen) = (b_m - a_m, b_m).
#   AUROC, AUPR-IN, FPR rank by κ descending: lowering the threshold to run m adds that run,
#   reaching (TP, seen) = (P - a_{m-1}, n - b_{m-1}) from (P - a_m, n - b_m).
# So every curve step is one run, and every metric is a per-row sum over runs.


class _Runs(NamedTuple):
    """Runs of tied κ of a block of rows, flattened over rows (ascending κ within a row)."""

    a: np.ndarray  # (K,) counts: ID samples through the run
    b: np.ndarray  # (K,) counts: samples through the run
    a_prev: np.ndarray  # (K,) counts: a of the run before (0 for a row's first run)
    b_prev: np.ndarray  # (K,) counts: b of the run before (0 for a row's first run)
    n_id: np.ndarray  # (K,) counts: ID samples of the run's row (P)
    starts: np.ndarray  # int64 (rows,): index of each row's first run
    n: int  # samples per row


def _row_blocks(n_rows: int, n: int) -> Iterator[slice]:
    """Slices of rows holding about _BLOCK_ELEMENTS scores each."""
    step = max(1, _BLOCK_ELEMENTS // n)
    for start in range(0, n_rows, step):
        yield slice(start, min(start + step, n_rows))


def _runs(kappa: np.ndarray, is_ood: np.ndarray, n_id: np.ndarray, columns: np.ndarray) -> _Runs:
    """Sort each row of a (rows, n) block once and summarise its runs of tied κ.

    Keeping only the last index of each run is what sklearn's threshold extraction does.
    ``columns`` holds ``1..n`` tiled over at least the block's rows, in the count dtype (built
    once per call and reused between blocks).
    """
    rows, n = kappa.shape
    order = np.argsort(kappa, axis=-1)
    ood_sorted = is_ood[order] if is_ood.ndim == 1 else np.take_along_axis(is_ood, order, -1)
    ranked = np.sort(kappa, axis=-1)  # faster than gathering by order; ties sort alike
    run_end = np.empty((rows, n), dtype=bool)
    np.not_equal(ranked[:, 1:], ranked[:, :-1], out=run_end[:, :-1])
    run_end[:, -1] = True
    id_through = np.cumsum(~ood_sorted, axis=-1, dtype=columns.dtype)
    ends = np.flatnonzero(run_end)
    a = id_through.ravel().take(ends)
    b = columns[: rows * n].take(ends)
    per_row = np.count_nonzero(run_end, axis=-1)
    starts = np.zeros(rows, dtype=np.int64)
    np.cumsum(per_row[:-1], out=starts[1:])
    return _Runs(
        a, b, _previous(a, starts), _previous(b, starts), np.repeat(n_id, per_row), starts, n
    )


def _previous(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Each element's predecessor within its row, 0 for a row's first element."""
    prev = np.empty_like(values)
    prev[1:] = values[:-1]
    prev[starts] = 0
    return prev


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den in float64, 1.0 where den == 0 (sklearn's appended precision-1 point)."""
    return np.divide(num, den, out=np.ones(num.shape, dtype=np.float64), where=den != 0)


def _row_sum(values: np.ndarray, runs: _Runs) -> np.ndarray:
    """Per-row sums of a (K,) array, shape (rows,)."""
    return np.add.reduceat(values, runs.starts)


def _auroc_runs(runs: _Runs, n_id: np.ndarray, n_ood: np.ndarray) -> np.ndarray:
    """Trapezoidal ROC area, ID positive: Σ ΔFP·(TP + TP_prev) / (2PN), summed exactly."""
    d_fp = (runs.b - runs.b_prev) - (runs.a - runs.a_prev)
    tp_pair = 2 * runs.n_id - runs.a - runs.a_prev
    return _row_sum(np.multiply(d_fp, tp_pair, dtype=np.float64), runs) / (2.0 * n_id * n_ood)


def _aupr_in_runs(runs: _Runs, n_id: np.ndarray, method: str) -> np.ndarray:
    """PR area with ID positive, κ descending: each run adds ΔTP = a - a_prev."""
    d_tp = runs.a - runs.a_prev
    precision = _ratio(runs.n_id - runs.a_prev, runs.n - runs.b_prev)  # after adding the run
    if method == "step":
        return np.maximum(_row_sum(d_tp * precision, runs) / n_id, 0.0)
    precision += _ratio(runs.n_id - runs.a, runs.n - runs.b)  # before: 1.0 at the top
    return _row_sum(d_tp * precision, runs) / (2.0 * n_id)


def _aupr_out_runs(runs: _Runs, n_ood: np.ndarray, method: str) -> np.ndarray:
    """PR area with OOD positive, κ ascending: each run adds ΔTP = OOD samples in the run."""
    d_tp = (runs.b - runs.b_prev) - (runs.a - runs.a_prev)
    precision = _ratio(runs.b - runs.a, runs.b)  # after adding the run
    if method == "step":
        return np.maximum(_row_sum(d_tp * precision, runs) / n_ood, 0.0)
    precision += _ratio(runs.b_prev - runs.a_prev, runs.b_prev)  # before: 1.0 at the top
    return _row_sum(d_tp * precision, runs) / (2.0 * n_ood)


def _fpr_runs(runs: _Runs, n_ood: np.ndarray, tpr: float) -> np.ndarray:
    """FP rate at the highest threshold whose TP rate (computed as sklearn does) is >= tpr.

    Descending κ, the threshold of run m reaches TP = P - a_{m-1}; the TP rate falls with m, so
    the runs that reach ``tpr`` are a prefix of each row and the answer is its last run.
    """
    tp = runs.n_id - runs.a_prev
    reached = _row_sum((tp / runs.n_id >= tpr).astype(np.int32), runs)
    last = runs.starts + reached - 1
    return ((runs.n - runs.b_prev[last]) - tp[last]) / n_ood


def _metrics_block(
    runs: _Runs, n_id: np.ndarray, n_ood: np.ndarray, requests: tuple[tuple[str, Any], ...]
) -> list[np.ndarray]:
    """All requested metrics for one block of rows from its runs."""
    out = []
    for kind, param in requests:
        if kind == "auroc":
            out.append(_auroc_runs(runs, n_id, n_ood))
        elif kind == "aupr_in":
            out.append(_aupr_in_runs(runs, n_id, param))
        elif kind == "aupr_out":
            out.append(_aupr_out_runs(runs, n_ood, param))
        else:
            out.append(_fpr_runs(runs, n_ood, param))
    return out


def _compute(
    kappa: Any, is_ood: Any, requests: tuple[tuple[str, Any], ...], context: str
) -> list[Any]:
    """Validate once, then evaluate every request block by block; results shaped like κ[..., 0]."""
    scores = _as_kappa(kappa, context)
    labels = _as_is_ood(is_ood, scores.shape, context)
    _check_finite(scores, context)
    batch_shape, n = scores.shape[:-1], scores.shape[-1]
    n_id, n_ood = _class_counts(labels, batch_shape, context)
    rows = scores.reshape(-1, n)
    results = [np.empty(rows.shape[0], dtype=np.float64) for _ in requests]
    count_dtype = np.int32 if n < 2**30 else np.int64  # counts never overflow, even 2n
    columns = np.empty(0, dtype=count_dtype)
    for block in _row_blocks(rows.shape[0], n):
        if columns.size < (block.stop - block.start) * n:  # first block is the largest
            columns = np.tile(np.arange(1, n + 1, dtype=count_dtype), block.stop - block.start)
        block_labels = labels if labels.ndim == 1 else labels[block]
        runs = _runs(rows[block], block_labels, n_id[block].astype(count_dtype), columns)
        values = _metrics_block(runs, n_id[block], n_ood[block], requests)
        for result, value in zip(results, values):
            result[block] = value
    return [result.reshape(batch_shape)[()] for result in results]


# --------------------------------------------------------------------------- public metrics


def auroc(kappa: Any, is_ood: Any, *, context: str = "") -> Any:
    """Area under the ROC curve with ID as positive: P(κ_ID > κ_OOD) + ½·P(tie).

    Equals sklearn ``roc_auc_score(~is_ood, kappa)`` for each row.
    """
    return _compute(kappa, is_ood, (("auroc", None),), context)[0]


def aupr_in(kappa: Any, is_ood: Any, *, method: str = "trapezoid", context: str = "") -> Any:
    """Area under the precision-recall curve with ID as positive, ranked by κ.

    ``method="trapezoid"``: ``auc(recall, precision)`` over ``precision_recall_curve`` points
    (the ImageNet-O recipe); ``method="step"``: ``average_precision_score``.
    """
    _check_method(method)
    return _compute(kappa, is_ood, (("aupr_in", method),), context)[0]


def aupr_out(kappa: Any, is_ood: Any, *, method: str = "trapezoid", context: str = "") -> Any:
    """Area under the precision-recall curve with OOD as positive, ranked by -κ.

    ``method`` as in :func:`aupr_in`.
    """
    _check_method(method)
    return _compute(kappa, is_ood, (("aupr_out", method),), context)[0]


def fpr_at_tpr(kappa: Any, is_ood: Any, *, tpr: float = 0.95, context: str = "") -> Any:
    """Share of OOD samples accepted (κ >= t) at the highest t that keeps >= ``tpr`` of ID.

    Equals ``fpr[argmax(tpr_curve >= tpr)]`` on ``roc_curve(~is_ood, kappa,
    drop_intermediate=False)``; no interpolation between thresholds.
    """
    _check_tpr(tpr)
    return _compute(kappa, is_ood, (("fpr", tpr),), context)[0]


def fpr95(kappa: Any, is_ood: Any, *, context: str = "") -> Any:
    """FPR at 95% TPR: :func:`fpr_at_tpr` with ``tpr=0.95``."""
    return fpr_at_tpr(kappa, is_ood, tpr=0.95, context=context)


def accuracy(predictions: Any, labels: Any) -> Any:
    """Closed-set accuracy: share of ``predictions == labels`` along the last axis, float64.

    Shapes ``(..., n)`` broadcast against each other; the result has the broadcast shape
    without the last axis.
    """
    pred, true = np.asarray(predictions), np.asarray(labels)
    try:
        shape = np.broadcast_shapes(pred.shape, true.shape)
    except ValueError:
        shape = None
    if shape is None or pred.ndim == 0 or true.ndim == 0 or pred.shape[-1] != true.shape[-1]:
        raise ValueError(
            f"predictions of shape {pred.shape} and labels of shape {true.shape} do not match; "
            "expected (..., n) shapes that broadcast"
        )
    if shape[-1] == 0:
        raise ValueError("accuracy needs at least one sample, got n=0")
    hits = np.count_nonzero(pred == true, axis=-1)
    return (np.asarray(hits, dtype=np.float64) / shape[-1])[()]


_KAPPA_REQUESTS: dict[str, tuple[str, Any]] = {
    "auroc": ("auroc", None),
    "aupr_in": ("aupr_in", "trapezoid"),
    "aupr_out": ("aupr_out", "trapezoid"),
    "fpr95": ("fpr", 0.95),
}

KAPPA_METRICS: tuple[str, ...] = tuple(_KAPPA_REQUESTS)
"""Names of the metrics that take ``(kappa, is_ood)``; :func:`evaluate` computes any of them."""

METRICS: dict[str, Callable[..., Any]] = {
    "auroc": auroc,
    "aupr_in": aupr_in,
    "aupr_out": aupr_out,
    "fpr95": fpr95,
    "accuracy": accuracy,
}
"""Metric name → function. κ metrics take ``(kappa, is_ood)``; "accuracy" takes
``(predictions, labels)``."""


#: The range every value of a metric lies in: all of oodsim's metrics, and ImageNet-O's ``aupr``,
#: are rates or areas under curves in the unit square. Intervals for their means stay inside it.
METRIC_RANGES: dict[str, tuple[float, float]] = {
    **{name: (0.0, 1.0) for name in METRICS},
    "aupr": (0.0, 1.0),
}


def metric_range(name: str) -> tuple[float, float] | None:
    """``(low, high)`` bounds of the values of metric ``name``; None for a metric oodsim does
    not know (its intervals are then unbounded)."""
    return METRIC_RANGES.get(str(name))


def available_metrics() -> tuple[str, ...]:
    """Names of all registered metrics, sorted."""
    return tuple(sorted(METRICS))


def get_metric(name: str) -> Callable[..., Any]:
    """The metric function called ``name``; unknown names fail with the closest match."""
    try:
        return METRICS[name]
    except KeyError:
        raise UnknownNameError("metric", name, METRICS) from None


def evaluate(
    kappa: Any, is_ood: Any, names: Iterable[str] = KAPPA_METRICS, *, context: str = ""
) -> dict[str, Any]:
    """Several κ metrics at once, sharing one validation and one sort per block of rows.

    Returns ``{name: float64 of shape (...)}``; equal to calling each metric separately.
    """
    names = tuple(names)
    for name in names:
        if name not in _KAPPA_REQUESTS:
            raise UnknownNameError("metric", name, KAPPA_METRICS)
    requests = tuple(_KAPPA_REQUESTS[name] for name in names)
    return dict(zip(names, _compute(kappa, is_ood, requests, context)))
