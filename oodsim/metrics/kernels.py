"""The vectorised kernels: rows sorted at once, runs of tied scores kept as scikit-learn keeps
them, every requested metric of a block of rows from one set of cumulative counts
(:func:`compute_metrics`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import attrs
import numpy as np

from oodsim.metrics.inputs import as_is_ood, as_kappa, as_mask, check_finite, class_counts

_BLOCK_ELEMENTS = 1 << 20  # scores per block: keeps every temporary a few MiB


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
    shared: dict[str, np.ndarray]  # what the kernels of this block share (aurc), by name
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
        a,
        b,
        _previous(a, starts),
        _previous(b, starts),
        np.repeat(n_id, per_row),
        starts,
        n,
        {},
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


def _following(values: np.ndarray, starts: np.ndarray, at_end: np.ndarray) -> np.ndarray:
    """Each element's successor within its row; ``at_end``'s element for a row's last one."""
    following = np.empty_like(values)
    following[:-1] = values[1:]
    last = np.append(starts[1:] - 1, values.size - 1)
    following[last] = at_end[last]
    return following


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


def _aupr_in_runs(runs: _Runs, n_id: np.ndarray, n_ood: np.ndarray, *, method: str) -> np.ndarray:
    """PR area with ID positive, κ descending: each run adds ΔTP = a - a_prev."""
    d_tp = runs.a - runs.a_prev
    precision = _ratio(runs.n_id - runs.a_prev, runs.n - runs.b_prev)  # after adding the run
    if method == "step":
        return np.maximum(_row_sum(d_tp * precision, runs) / n_id, 0.0)
    precision += _ratio(runs.n_id - runs.a, runs.n - runs.b)  # before: 1.0 at the top
    return _row_sum(d_tp * precision, runs) / (2.0 * n_id)


def _aupr_out_runs(runs: _Runs, n_id: np.ndarray, n_ood: np.ndarray, *, method: str) -> np.ndarray:
    """PR area with OOD positive, κ ascending: each run adds ΔTP = OOD samples in the run."""
    d_tp = (runs.b - runs.b_prev) - (runs.a - runs.a_prev)
    precision = _ratio(runs.b - runs.a, runs.b)  # after adding the run
    if method == "step":
        return np.maximum(_row_sum(d_tp * precision, runs) / n_ood, 0.0)
    precision += _ratio(runs.b_prev - runs.a_prev, runs.b_prev)  # before: 1.0 at the top
    return _row_sum(d_tp * precision, runs) / (2.0 * n_ood)


def _fpr_runs(runs: _Runs, n_id: np.ndarray, n_ood: np.ndarray, *, tpr: float) -> np.ndarray:
    """FP rate at the highest threshold whose TP rate (computed as sklearn does) is >= tpr.

    Descending κ, the threshold of run m reaches TP = P - a_{m-1}; the TP rate falls with m, so
    the runs that reach ``tpr`` are a prefix of each row and the answer is its last run.
    """
    tp = runs.n_id - runs.a_prev
    reached = _row_sum((tp / runs.n_id >= tpr).astype(np.int32), runs)
    last = runs.starts + reached - 1
    return ((runs.n - runs.b_prev[last]) - tp[last]) / n_ood


def _fpr_ood_runs(runs: _Runs, n_id: np.ndarray, n_ood: np.ndarray, *, tpr: float) -> np.ndarray:
    """ID share flagged as OOD at the first threshold on -κ whose OOD TP rate is >= tpr.

    Ascending κ (descending -κ), run m reaches TP = b_m - a_m OOD and FP = a_m ID samples; the
    TP rate (computed as sklearn and pytorch-ood do: TP / N in float64) grows with m, so the
    runs short of ``tpr`` are a prefix of each row and the answer is the run right after it.
    """
    tp_rate = (runs.b - runs.a) / (runs.n - runs.n_id)
    short = _row_sum((tp_rate < tpr).astype(np.int32), runs)
    return runs.a[runs.starts + short] / n_id


def _oscr_runs(runs: _Runs, n_id: np.ndarray, n_ood: np.ndarray) -> np.ndarray:
    """Dhamija's OSCR, as the ARPL code computes it: at each distinct threshold (run m, κ
    ascending) CCR counts the correct ID samples strictly above it, (C - c_m) / P, and FPR the
    OOD samples at or above it, (N - o_{m-1}) / N with o = b - a; consecutive thresholds are
    joined by trapezoids, and the highest one by a last to (0, 0).

    From run m's point to run m+1's, FPR falls by run m's OOD samples and CCR goes from
    C - c_m to C - c_{m+1}, where c after a row's last run is C (the point (0, 0)).
    """
    d_ood = (runs.b - runs.b_prev) - (runs.a - runs.a_prev)
    c_next = _following(runs.c, runs.starts, runs.n_correct)
    ccr_pair = 2 * runs.n_correct - runs.c - c_next
    return _row_sum(np.multiply(d_ood, ccr_pair, dtype=np.float64), runs) / (2.0 * n_id * n_ood)


def _oscr_diagonal_runs(runs: _Runs, n_id: np.ndarray, n_ood: np.ndarray) -> np.ndarray:
    """pytorch-ood's OSCR: trapezoidal area under CCR vs FPR, both counting κ >= t (AUROC's
    sum with correct ID samples as TP).

    Lowering the threshold (κ descending) to run m moves from (FPR, CCR) of run m+1 to
    ((n - b_{m-1} - (P - a_{m-1})) / N, (C - c_{m-1}) / P): a tied run is one straight segment.
    With every ID sample correct (c = a, C = P) this is :func:`_auroc_runs` term for term.
    """
    d_fp = (runs.b - runs.b_prev) - (runs.a - runs.a_prev)
    ccr_pair = 2 * runs.n_correct - runs.c - runs.c_prev
    return _row_sum(np.multiply(d_fp, ccr_pair, dtype=np.float64), runs) / (2.0 * n_id * n_ood)


def _aurc_runs(runs: _Runs, n_id: np.ndarray, n_ood: np.ndarray) -> np.ndarray:
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


def _accepted_risk(runs: _Runs) -> tuple[np.ndarray, np.ndarray]:
    """At each run's threshold (accept κ >= its κ): the ID samples accepted, k = P - a_{m-1},
    and the selective risk there, (k - (C - c_{m-1})) / k (0 where nothing is accepted)."""
    accepted = runs.n_id - runs.a_prev
    wrong = accepted - (runs.n_correct - runs.c_prev)
    risk = np.divide(wrong, accepted, out=np.zeros(accepted.shape), where=accepted > 0)
    return accepted, risk


def _aurc_thresholds_runs(runs: _Runs, n_id: np.ndarray, n_ood: np.ndarray) -> np.ndarray:
    """AURC at the thresholds only: each ID sample takes the selective risk of the threshold
    at which it is first accepted (its own κ), so a tied run takes the risk of all of it.
    Without ties this is the plain sorted loop, as :func:`_aurc_runs`."""
    _, risk = _accepted_risk(runs)
    return _row_sum(risk * (runs.a - runs.a_prev), runs) / n_id


def _oracle_aurc(n_id: np.ndarray, n_correct: np.ndarray) -> np.ndarray:
    """AURC of the best ranking of P ID samples, C of them correct (all correct ones first):
    the mean over i = 1..P of max(i - C, 0) / i = ((P - C) - C (H_P - H_C)) / P."""
    harmonic = np.zeros(int(n_id.max(initial=0)) + 1)
    np.cumsum(1.0 / np.arange(1, harmonic.size), out=harmonic[1:])  # H_0 .. H_max(P)
    p, c = n_id.astype(np.float64), n_correct.astype(np.float64)
    return ((p - c) - c * (harmonic[n_id] - harmonic[n_correct])) / p


def _selective_risk_runs(
    runs: _Runs, n_id: np.ndarray, n_ood: np.ndarray, *, coverage: float
) -> np.ndarray:
    """Selective risk at the highest threshold that accepts at least ``coverage`` of the ID
    samples (coverage computed as k / P in float64)."""
    accepted, risk = _accepted_risk(runs)
    reached = _row_sum((accepted / runs.n_id >= coverage).astype(np.int32), runs)
    return risk[runs.starts + reached - 1]


def _eaurc_runs(runs: _Runs, n_id: np.ndarray, n_ood: np.ndarray) -> np.ndarray:
    """AURC less the AURC of the best ranking of the same predictions, never below 0 (no
    ranking beats the best one: a ranking that is the best one differs from it by rounding
    alone, which must not read as a negative E-AURC)."""
    oracle = _oracle_aurc(n_id, runs.n_correct[runs.starts])
    return np.maximum(_shared_aurc(runs, n_id, n_ood) - oracle, 0.0)


def _shared_aurc(runs: _Runs, n_id: np.ndarray, n_ood: np.ndarray) -> np.ndarray:
    """:func:`_aurc_runs` once per block: ``aurc`` and ``eaurc`` of one block share it."""
    if "aurc" not in runs.shared:
        runs.shared["aurc"] = _aurc_runs(runs, n_id, n_ood)
    return runs.shared["aurc"]


@attrs.frozen
class Kernel:
    """A metric computed from the runs of tied κ of a block of rows (:func:`compute_metrics`):
    ``compute(runs, n_id, n_ood)`` gives each row's value from its runs and its ID and OOD
    counts. ``counts_correct``: the runs must also count the correctly classified ID samples
    (the caller passes ``correct``); ``id_only``: a metric of the ID samples alone, so a row
    needs no OOD sample. ``name`` tells kernels apart, their parameters included."""

    name: str
    compute: Callable[[_Runs, np.ndarray, np.ndarray], np.ndarray] = attrs.field(
        eq=False, repr=False
    )
    counts_correct: bool = False
    id_only: bool = False


def aupr_in_kernel(method: str) -> Kernel:
    """PR area with ID positive, ranked by κ: ``method`` "trapezoid" or "step" (AP)."""
    return Kernel(f"aupr_in[{method}]", functools.partial(_aupr_in_runs, method=method))


def aupr_out_kernel(method: str) -> Kernel:
    """PR area with OOD positive, ranked by -κ: ``method`` "trapezoid" or "step" (AP)."""
    return Kernel(f"aupr_out[{method}]", functools.partial(_aupr_out_runs, method=method))


def fpr_kernel(tpr: float) -> Kernel:
    """FP rate, ID positive, at the highest threshold that keeps ``tpr`` of the ID samples."""
    return Kernel(f"fpr[{tpr}]", functools.partial(_fpr_runs, tpr=tpr))


def fpr_ood_kernel(tpr: float) -> Kernel:
    """FP rate, OOD positive, at the first threshold on -κ that catches ``tpr`` of the OOD."""
    return Kernel(f"fpr_ood[{tpr}]", functools.partial(_fpr_ood_runs, tpr=tpr))


def selective_risk_kernel(coverage: float) -> Kernel:
    """Selective risk at the highest threshold that accepts ``coverage`` of the ID samples."""
    compute = functools.partial(_selective_risk_runs, coverage=coverage)
    return Kernel(f"selective_risk[{coverage}]", compute, counts_correct=True, id_only=True)


AUROC = Kernel("auroc", _auroc_runs)
OSCR = Kernel("oscr", _oscr_runs, counts_correct=True)
OSCR_DIAGONAL = Kernel("oscr_diagonal", _oscr_diagonal_runs, counts_correct=True)
AURC = Kernel("aurc", _shared_aurc, counts_correct=True, id_only=True)
AURC_THRESHOLDS = Kernel(
    "aurc_thresholds", _aurc_thresholds_runs, counts_correct=True, id_only=True
)
EAURC = Kernel("eaurc", _eaurc_runs, counts_correct=True, id_only=True)


def compute_metrics(
    kappa: Any,
    is_ood: Any,
    kernels: Sequence[Kernel],
    context: str,
    correct: Any = None,
) -> list[Any]:
    """Validate once, then evaluate every kernel block by block; results shaped like κ[..., 0].

    ``correct`` (the ID samples' prediction correctness) is needed by the kernels that count
    it (``counts_correct``) only; the caller checks it is given.
    """
    scores = as_kappa(kappa, context)
    labels = as_is_ood(is_ood, scores.shape, context)
    flags = None if correct is None else as_mask(correct, "correct", scores.shape, context)
    check_finite(scores, context)
    batch_shape, n = scores.shape[:-1], scores.shape[-1]
    need_ood = not all(kernel.id_only for kernel in kernels)
    n_id, n_ood = class_counts(labels, batch_shape, context, need_ood=need_ood)
    use_correct = flags is not None and any(kernel.counts_correct for kernel in kernels)
    rows = scores.reshape(-1, n)
    results = [np.empty(rows.shape[0], dtype=np.float64) for _ in kernels]
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
        for result, kernel in zip(results, kernels):
            result[block] = kernel.compute(runs, n_id[block], n_ood[block])
    return [result.reshape(batch_shape)[()] for result in results]
