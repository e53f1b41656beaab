"""Vectorized OOD metrics over a leading batch of score vectors, one record per metric.

Every κ metric takes ``kappa`` of shape ``(..., n)`` (a confidence: higher means "more
in-distribution") and ``is_ood`` of shape ``(n,)`` or ``(..., n)``, and returns float64 of shape
``(...)``. All rows are sorted at once along the last axis; per-row curves are then built with
cumulative counts, keeping only the last index of each run of tied scores exactly as
scikit-learn does, so values match ``roc_auc_score``, ``precision_recall_curve`` + ``auc``,
``average_precision_score`` and ``roc_curve`` to rounding error. The metrics that also judge the
classifier (:func:`oscr`, :func:`aurc`) take ``correct``, the ID samples' prediction correctness,
of the same trailing length.

Each convention of the field has its own name (``fpr95`` vs ``fpr95_ood``, ``aupr_in`` vs
``ap_in``); :data:`METRIC_INFO` holds one :class:`MetricInfo` per name saying its direction,
range, inputs and the published number it reproduces (docs/metrics.md has the table).

Large batches are processed in blocks of rows (one sort per block, no loop over rows) so that
temporaries stay cache-sized; κ is sorted in its own dtype, never converted to float64.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import attrs
import numpy as np

from oodsim.errors import OodsimError, UnknownNameError

__all__ = [
    "DEFAULT_KAPPA_METRICS",
    "KAPPA_METRICS",
    "METRICS",
    "METRIC_INFO",
    "METRIC_INPUTS",
    "METRIC_RANGES",
    "MetricInfo",
    "NonFiniteScoreError",
    "accuracy",
    "ap_in",
    "ap_out",
    "aupr_in",
    "aupr_out",
    "aurc",
    "auroc",
    "available_metrics",
    "evaluate",
    "fpr95",
    "fpr95_ood",
    "fpr_at_tpr",
    "fpr_at_tpr_ood",
    "get_metric",
    "metric_range",
    "oscr",
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
    return _as_mask(is_ood, "is_ood", kappa_shape, context)


def _as_mask(values: Any, name: str, kappa_shape: tuple[int, ...], context: str) -> np.ndarray:
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
#   FPR95-OOD ranks by -κ (κ ascending), OOD positive: point m is (TP, FP) = (b_m - a_m, a_m).
#   OSCR and AURC also count c_m, the correctly classified ID samples through run m: lowering
#   the threshold to run m accepts C - c_{m-1} of them (C: correct ID samples of the row).


class _Runs(NamedTuple):
    """Runs of tied κ of a block of rows, flattened over rows (ascending κ within a row)."""

    a: np.ndarray  # (K,) counts: ID samples through the run
    b: np.ndarray  # (K,) counts: samples through the run
    a_prev: np.ndarray  # (K,) counts: a of the run before (0 for a row's first run)
    b_prev: np.ndarray  # (K,) counts: b of the run before (0 for a row's first run)
    n_id: np.ndarray  # (K,) counts: ID samples of the run's row (P)
    starts: np.ndarray  # int64 (rows,): index of each row's first run
    n: int  # samples per row
    c: np.ndarray | None = None  # (K,) counts: correct ID samples through the run
    c_prev: np.ndarray | None = None  # (K,) counts: c of the run before (0 for a row's first)
    n_correct: np.ndarray | None = None  # (K,) counts: correct ID samples of the run's row (C)


def _row_blocks(n_rows: int, n: int) -> Iterator[slice]:
    """Slices of rows holding about _BLOCK_ELEMENTS scores each."""
    step = max(1, _BLOCK_ELEMENTS // n)
    for start in range(0, n_rows, step):
        yield slice(start, min(start + step, n_rows))


def _runs(
    kappa: np.ndarray,
    is_ood: np.ndarray,
    n_id: np.ndarray,
    columns: np.ndarray,
    id_correct: np.ndarray | None = None,
) -> _Runs:
    """Sort each row of a (rows, n) block once and summarise its runs of tied κ.

    Keeping only the last index of each run is what sklearn's threshold extraction does.
    ``columns`` holds ``1..n`` tiled over at least the block's rows, in the count dtype (built
    once per call and reused between blocks). ``id_correct`` (bool, (n,) or (rows, n)) marks
    the correctly classified ID samples; given, the runs also count them (for OSCR, AURC).
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
    runs = _Runs(
        a, b, _previous(a, starts), _previous(b, starts), np.repeat(n_id, per_row), starts, n
    )
    if id_correct is None:
        return runs
    if id_correct.ndim == 1:
        correct_sorted = id_correct[order]
    else:
        correct_sorted = np.take_along_axis(id_correct, order, -1)
    correct_through = np.cumsum(correct_sorted, axis=-1, dtype=columns.dtype)
    c = correct_through.ravel().take(ends)
    n_correct = np.repeat(correct_through[:, -1], per_row)
    return runs._replace(c=c, c_prev=_previous(c, starts), n_correct=n_correct)


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


def _fpr_ood_runs(runs: _Runs, n_id: np.ndarray, tpr: float) -> np.ndarray:
    """ID share flagged as OOD at the first threshold on -κ whose OOD TP rate is >= tpr.

    Ascending κ (descending -κ), run m reaches TP = b_m - a_m OOD and FP = a_m ID samples; the
    TP rate (computed as sklearn and pytorch-ood do: TP / N in float64) grows with m, so the
    runs short of ``tpr`` are a prefix of each row and the answer is the run right after it.
    """
    tp_rate = (runs.b - runs.a) / (runs.n - runs.n_id)
    short = _row_sum((tp_rate < tpr).astype(np.int32), runs)
    return runs.a[runs.starts + short] / n_id


def _oscr_runs(runs: _Runs, n_id: np.ndarray, n_ood: np.ndarray) -> np.ndarray:
    """Trapezoidal area under CCR vs FPR: AUROC's sum with correct ID samples as TP.

    Lowering the threshold (κ descending) to run m moves from (FPR, CCR) of run m+1 to
    ((n - b_{m-1} - (P - a_{m-1})) / N, (C - c_{m-1}) / P): a tied run is one straight segment.
    With every ID sample correct (c = a, C = P) this is :func:`_auroc_runs` term for term.
    """
    d_fp = (runs.b - runs.b_prev) - (runs.a - runs.a_prev)
    ccr_pair = 2 * runs.n_correct - runs.c - runs.c_prev
    return _row_sum(np.multiply(d_fp, ccr_pair, dtype=np.float64), runs) / (2.0 * n_id * n_ood)


def _aurc_runs(runs: _Runs, n_id: np.ndarray) -> np.ndarray:
    """Mean selective risk over coverages 1..P of the ID samples, ties in expectation.

    κ descending, run m holds r = a_m - a_{m-1} ID samples, w of them wrong, behind the k =
    P - a_m ID samples ranked above it, W of them wrong. Coverage k + s (s = 1..r) takes s of
    the run's samples; over all orders of the tied run, s·w/r of them are wrong on average, so
    the risk there is (W·r + s·w) / (r·(k + s)), one division of exact integers (exact for
    n < 9e7). Without ties (r = 1) that is W_i / i, the risk of the plain sorted loop.
    """
    r = runs.a - runs.a_prev
    k = runs.n_id - runs.a
    w = r - (runs.c - runs.c_prev)
    wrong_above = k - (runs.n_correct - runs.c)
    group_start = np.cumsum(r, dtype=np.int64) - r
    s = np.arange(1, int(np.sum(r, dtype=np.int64)) + 1, dtype=np.float64)
    s -= np.repeat(group_start, r)  # position within the run: 1..r
    r_e = np.repeat(r.astype(np.float64), r)
    numerator = np.repeat(np.multiply(wrong_above, r, dtype=np.float64), r)
    numerator += s * np.repeat(w.astype(np.float64), r)
    risk = numerator / (r_e * (np.repeat(k.astype(np.float64), r) + s))
    row_starts = np.zeros(n_id.size, dtype=np.int64)  # each row holds its P coverages
    np.cumsum(n_id[:-1], out=row_starts[1:])
    return np.add.reduceat(risk, row_starts) / n_id


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
        elif kind == "fpr":
            out.append(_fpr_runs(runs, n_ood, param))
        elif kind == "fpr_ood":
            out.append(_fpr_ood_runs(runs, n_id, param))
        elif kind == "oscr":
            out.append(_oscr_runs(runs, n_id, n_ood))
        elif kind == "aurc":
            out.append(_aurc_runs(runs, n_id))
        else:  # pragma: no cover - requests come from _KAPPA_REQUESTS and the functions
            raise AssertionError(f"unknown metric request {kind!r}")
    return out


def _compute(
    kappa: Any,
    is_ood: Any,
    requests: tuple[tuple[str, Any], ...],
    context: str,
    correct: Any = None,
) -> list[Any]:
    """Validate once, then evaluate every request block by block; results shaped like κ[..., 0].

    ``correct`` (the ID samples' prediction correctness) is needed by the OSCR and AURC
    requests only; the caller checks it is given.
    """
    scores = _as_kappa(kappa, context)
    labels = _as_is_ood(is_ood, scores.shape, context)
    flags = None if correct is None else _as_mask(correct, "correct", scores.shape, context)
    _check_finite(scores, context)
    batch_shape, n = scores.shape[:-1], scores.shape[-1]
    kinds = {kind for kind, _ in requests}
    n_id, n_ood = _class_counts(labels, batch_shape, context, need_ood=bool(kinds - {"aurc"}))
    use_correct = flags is not None and bool(kinds & _CORRECT_KINDS)
    rows = scores.reshape(-1, n)
    results = [np.empty(rows.shape[0], dtype=np.float64) for _ in requests]
    count_dtype = np.int32 if n < 2**30 else np.int64  # counts never overflow, even 2n
    columns = np.empty(0, dtype=count_dtype)
    for block in _row_blocks(rows.shape[0], n):
        if columns.size < (block.stop - block.start) * n:  # first block is the largest
            columns = np.tile(np.arange(1, n + 1, dtype=count_dtype), block.stop - block.start)
        block_labels = labels if labels.ndim == 1 else labels[block]
        id_correct = None
        if use_correct:
            id_correct = ~block_labels & (flags if flags.ndim == 1 else flags[block])
        runs = _runs(
            rows[block], block_labels, n_id[block].astype(count_dtype), columns, id_correct
        )
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
    (the ImageNet-O recipe, pytorch-ood's "AUPR-IN"); ``method="step"``:
    ``average_precision_score``, also available by name as :func:`ap_in`.
    """
    _check_method(method)
    return _compute(kappa, is_ood, (("aupr_in", method),), context)[0]


def aupr_out(kappa: Any, is_ood: Any, *, method: str = "trapezoid", context: str = "") -> Any:
    """Area under the precision-recall curve with OOD as positive, ranked by -κ.

    ``method`` as in :func:`aupr_in`; ``method="step"`` is also available as :func:`ap_out`.
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
    """FPR at 95% TPR, ID positive: :func:`fpr_at_tpr` with ``tpr=0.95``."""
    return fpr_at_tpr(kappa, is_ood, tpr=0.95, context=context)


def ap_in(kappa: Any, is_ood: Any, *, context: str = "") -> Any:
    """Average precision (step rule) with ID as positive, ranked by κ.

    Equals sklearn ``average_precision_score(~is_ood, kappa)``; :func:`aupr_in` with
    ``method="step"``.
    """
    return _compute(kappa, is_ood, (("aupr_in", "step"),), context)[0]


def ap_out(kappa: Any, is_ood: Any, *, context: str = "") -> Any:
    """Average precision (step rule) with OOD as positive, ranked by -κ.

    Equals sklearn ``average_precision_score(is_ood, -kappa)``; :func:`aupr_out` with
    ``method="step"``.
    """
    return _compute(kappa, is_ood, (("aupr_out", "step"),), context)[0]


def fpr_at_tpr_ood(kappa: Any, is_ood: Any, *, tpr: float = 0.95, context: str = "") -> Any:
    """OOD as positive: share of ID samples flagged as OOD (-κ >= s) at the highest s that
    catches >= ``tpr`` of the OOD samples.

    Equals ``fpr[argmax(tpr_curve >= tpr)]`` on ``roc_curve(is_ood, -kappa,
    drop_intermediate=False)`` and pytorch-ood's ``FPRAtTPR(tpr)`` on outlier scores ``-kappa``;
    no interpolation between thresholds.
    """
    _check_tpr(tpr)
    return _compute(kappa, is_ood, (("fpr_ood", tpr),), context)[0]


def fpr95_ood(kappa: Any, is_ood: Any, *, context: str = "") -> Any:
    """FPR at 95% TPR with OOD as positive: :func:`fpr_at_tpr_ood` with ``tpr=0.95``.

    pytorch-ood's ``OODMetrics()["FPR95TPR"]`` of outlier scores ``-kappa``.
    """
    return fpr_at_tpr_ood(kappa, is_ood, tpr=0.95, context=context)


def oscr(kappa: Any, is_ood: Any, correct: Any, *, context: str = "") -> Any:
    """Open Set Classification Rate (Dhamija, Günther, Boult, NeurIPS 2018).

    Area (trapezoid) under CCR(t) = share of ID samples that are correctly classified and
    have κ >= t, against FPR(t) = share of OOD samples with κ >= t, over every threshold t of
    κ, from (0, 0) to (1, accuracy). A run of tied κ is one straight segment (as in a ROC
    curve), so constant κ gives accuracy / 2. ``correct`` (bool, ``(n,)`` or broadcastable to
    ``kappa``) is each ID sample's prediction correctness; its values at OOD samples are
    ignored. With every ID sample correct, OSCR equals :func:`auroc`.
    """
    _require_correct("oscr", correct, context)
    return _compute(kappa, is_ood, (("oscr", None),), context, correct)[0]


def aurc(kappa: Any, correct: Any, *, context: str = "") -> Any:
    """Area under the risk-coverage curve of ID samples; lower is better.

    Ranked by κ descending, the selective risk at coverage i/n is the share of wrong
    predictions among the i most confident samples; AURC is its mean over i = 1..n. Ties are
    taken in expectation: within a run of tied κ, the risk at each of its coverages is the
    average over all orders of the run (equivalently, the run's wrong predictions are spread
    evenly over it), so the value does not depend on how ties are ordered; without ties this
    is the plain sorted loop. ``correct``: bool, ``(n,)`` or broadcastable to ``kappa``.
    """
    _require_correct("aurc", correct, context)
    scores = _as_kappa(kappa, context)
    all_id = np.zeros(scores.shape[-1], dtype=bool)
    return _compute(scores, all_id, (("aurc", None),), context, correct)[0]


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


def _require_correct(name: str, correct: Any, context: str) -> None:
    """Refuse to compute a metric that judges predictions without their correctness."""
    if correct is None:
        raise ValueError(
            _with_context(
                f"metric {name!r} needs correct=: each ID sample's prediction correctness "
                "(bool of shape (n,) or broadcastable to kappa's (..., n))",
                context,
            )
        )


# --------------------------------------------------------------------------- registry

#: What a metric is computed from: κ with the OOD labels; κ, labels and the ID samples'
#: prediction correctness; κ and correctness of ID samples alone; class predictions and labels.
METRIC_INPUTS: tuple[str, ...] = (
    "kappa+is_ood",
    "kappa+is_ood+correct",
    "kappa+correct",
    "predictions+labels",
)


def _check_inputs(instance: Any, attribute: Any, value: str) -> None:
    if value not in METRIC_INPUTS:
        raise UnknownNameError("inputs", value, METRIC_INPUTS)


@attrs.frozen(kw_only=True)
class MetricInfo:
    """One named metric: its function, direction, range, inputs and the number it reproduces.

    ``function`` takes the arrays ``inputs`` names, in that order (``correct`` third for
    "kappa+is_ood+correct", second for "kappa+correct"); ``reproduces`` names the published
    recipe (library call or paper) whose number it equals. docs/metrics.md tabulates them.
    """

    name: str
    function: Callable[..., Any] = attrs.field(eq=False)
    higher_is_better: bool
    range: tuple[float, float] = (0.0, 1.0)
    inputs: str = attrs.field(default="kappa+is_ood", validator=_check_inputs)
    reproduces: str = ""

    @property
    def needs_correct(self) -> bool:
        """Whether the metric also needs the ID samples' prediction correctness."""
        return "correct" in self.inputs.split("+")


def _info(name: str, function: Callable[..., Any], reproduces: str, **kwargs: Any) -> MetricInfo:
    return MetricInfo(name=name, function=function, reproduces=reproduces, **kwargs)


#: Metric name → its record, in the order results list them by default.
METRIC_INFO: dict[str, MetricInfo] = {
    info.name: info
    for info in (
        _info(
            "auroc",
            auroc,
            "sklearn roc_auc_score(~is_ood, kappa); OpenOOD's and pytorch-ood's AUROC (AUROC does "
            "not depend on which class is positive)",
            higher_is_better=True,
        ),
        _info(
            "aupr_in",
            aupr_in,
            "sklearn auc(recall, precision) of precision_recall_curve(~is_ood, kappa); OpenOOD's "
            "aupr_in, pytorch-ood OODMetrics 'AUPR-IN'",
            higher_is_better=True,
        ),
        _info(
            "aupr_out",
            aupr_out,
            "sklearn auc(recall, precision) of precision_recall_curve(is_ood, -kappa); the "
            "ImageNet-O card's 'aupr', OpenOOD's aupr_out, pytorch-ood OODMetrics 'AUPR-OUT'",
            higher_is_better=True,
        ),
        _info(
            "ap_in",
            ap_in,
            "sklearn average_precision_score(~is_ood, kappa)",
            higher_is_better=True,
        ),
        _info(
            "ap_out",
            ap_out,
            "sklearn average_precision_score(is_ood, -kappa); the ImageNet-O authors' code "
            "(natural-adv-examples)",
            higher_is_better=True,
        ),
        _info(
            "fpr95",
            fpr95,
            "fpr[argmax(tpr >= 0.95)] of roc_curve(~is_ood, kappa, drop_intermediate=False): "
            "ID positive",
            higher_is_better=False,
        ),
        _info(
            "fpr95_ood",
            fpr95_ood,
            "pytorch-ood OODMetrics 'FPR95TPR' of outlier scores -kappa; fpr[argmax(tpr >= 0.95)] "
            "of roc_curve(is_ood, -kappa, drop_intermediate=False): OOD positive",
            higher_is_better=False,
        ),
        _info(
            "oscr",
            oscr,
            "OSCR of Dhamija, Günther & Boult (NeurIPS 2018), ties as one ROC-like segment; "
            "pytorch-ood metrics.oscr_score",
            higher_is_better=True,
            inputs="kappa+is_ood+correct",
        ),
        _info(
            "aurc",
            aurc,
            "AURC of Geifman & El-Yaniv's risk-coverage curve over ID samples: mean selective "
            "risk over coverages i/n, ties in expectation over their orders",
            higher_is_better=False,
            inputs="kappa+correct",
        ),
        _info(
            "accuracy",
            accuracy,
            "sklearn accuracy_score per row",
            higher_is_better=True,
            inputs="predictions+labels",
        ),
    )
}

# name → (kernel, parameter) of the run-based computation behind each κ metric
_KAPPA_REQUESTS: dict[str, tuple[str, Any]] = {
    "auroc": ("auroc", None),
    "aupr_in": ("aupr_in", "trapezoid"),
    "aupr_out": ("aupr_out", "trapezoid"),
    "ap_in": ("aupr_in", "step"),
    "ap_out": ("aupr_out", "step"),
    "fpr95": ("fpr", 0.95),
    "fpr95_ood": ("fpr_ood", 0.95),
    "oscr": ("oscr", None),
    "aurc": ("aurc", None),
}
_CORRECT_KINDS = frozenset({"oscr", "aurc"})  # kernels that count correct ID samples

KAPPA_METRICS: tuple[str, ...] = tuple(_KAPPA_REQUESTS)
"""Names of the metrics computed from κ, all of which :func:`evaluate` computes; ``oscr`` and
``aurc`` also need ``correct`` (see ``METRIC_INFO[name].inputs``)."""

DEFAULT_KAPPA_METRICS: tuple[str, ...] = ("auroc", "aupr_in", "aupr_out", "fpr95")
"""What :func:`evaluate` computes when no names are given."""

METRICS: dict[str, Callable[..., Any]] = {name: info.function for name, info in METRIC_INFO.items()}
"""Metric name → function, taking the arrays ``METRIC_INFO[name].inputs`` names: κ metrics
``(kappa, is_ood)``, ``oscr`` ``(kappa, is_ood, correct)``, ``aurc`` ``(kappa, correct)``,
"accuracy" ``(predictions, labels)``."""


#: The range every value of a metric lies in: all of oodsim's metrics, and ImageNet-O's
#: ``aupr`` and ``ap``, are rates or areas under curves in the unit square. Intervals for their
#: means stay inside it.
METRIC_RANGES: dict[str, tuple[float, float]] = {
    **{name: info.range for name, info in METRIC_INFO.items()},
    "aupr": (0.0, 1.0),
    "ap": (0.0, 1.0),
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
    kappa: Any,
    is_ood: Any,
    names: Iterable[str] = DEFAULT_KAPPA_METRICS,
    *,
    correct: Any = None,
    context: str = "",
) -> dict[str, Any]:
    """Several κ metrics at once, sharing one validation and one sort per block of rows.

    ``names`` are any of :data:`KAPPA_METRICS` (default: :data:`DEFAULT_KAPPA_METRICS`).
    ``oscr`` and ``aurc`` need ``correct``, each sample's prediction correctness (bool, ``(n,)``
    or broadcastable to ``kappa``; read at ID samples only); ``aurc`` is taken over the ID
    samples (``is_ood`` False) of each row. Returns ``{name: float64 of shape (...)}``; equal to
    calling each metric separately (``aurc`` on the ID samples alone).
    """
    names = tuple(names)
    for name in names:
        if name not in _KAPPA_REQUESTS:
            raise UnknownNameError("metric", name, KAPPA_METRICS)
        if correct is None and METRIC_INFO[name].needs_correct:
            _require_correct(name, correct, context)
    requests = tuple(_KAPPA_REQUESTS[name] for name in names)
    return dict(zip(names, _compute(kappa, is_ood, requests, context, correct)))
