"""C-OOD severity levels (Galil, Dabbah, El-Yaniv, Algorithm 1) as small pure functions.

Per (model, κ): split each OOD class's samples into estimation and test parts; the severity of a
class is its mean *confidence* over the estimation part (high = hard to detect), the confidence
being κ on the paper's scale (the detector's ``confidence_scale``: probability for softmax
response, −H for entropy, κ itself otherwise; see :mod:`oodsim.detectors.scales`); sort the
classes by severity, slide a window of G classes over them, and pick the windows at the percentiles
0, 10, ..., 100 %. Level i's benchmark is the test samples of its G classes plus all ID test
samples. Level 0 is the easiest, level L−1 the hardest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from oodsim import metrics as _metrics
from oodsim.detectors.scales import to_confidence
from oodsim.errors import SpecError, UnknownNameError

DEFAULT_METRICS = ("auroc", "aupr_in", "aupr_out", "fpr95")

RngLike = int | np.random.SeedSequence | np.random.Generator


@dataclass(frozen=True)
class EstimationTestSplit:
    """Per-class split of OOD samples; classes too small for it are reported in ``dropped``.

    ``classes`` are the kept labels (sorted); ``est_class``/``test_class`` give each selected
    sample's class as a position in ``classes``.
    """

    classes: np.ndarray
    est_index: np.ndarray
    est_class: np.ndarray
    test_index: np.ndarray
    test_class: np.ndarray
    dropped: Mapping[object, int]


def _positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise SpecError(name, value, f"an integer >= {minimum}")
    return int(value)


def split_estimation_test(
    labels: np.ndarray | Sequence[object],
    n_est: int = 150,
    n_test: int = 50,
    *,
    rng: RngLike,
) -> EstimationTestSplit:
    """Randomly pick ``n_est`` estimation and ``n_test`` test samples of every OOD class.

    Classes with fewer than ``n_est + n_test`` samples are dropped (label → sample count in
    ``dropped``); larger ones are subsampled. Indices are into ``labels``, ascending.
    Reproducible for the same labels and ``rng`` seed.
    """
    n_est = _positive_int("n_est", n_est)
    n_test = _positive_int("n_test", n_test)
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise SpecError("labels", labels.shape, "a 1-d array of OOD class labels")
    need = n_est + n_test
    uniq, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    keys = np.random.default_rng(rng).random(labels.size)
    order = np.lexsort((keys, inverse))  # by class, random within class
    starts = np.cumsum(counts) - counts
    rank = np.empty(labels.size, dtype=np.int64)
    rank[order] = np.arange(labels.size) - starts[inverse[order]]
    keep = counts >= need
    position = np.cumsum(keep) - 1  # old class index -> index among kept classes
    chosen = keep[inverse]
    est_index = np.flatnonzero(chosen & (rank < n_est))
    test_index = np.flatnonzero(chosen & (rank >= n_est) & (rank < need))
    dropped = {uniq[i].item(): int(counts[i]) for i in np.flatnonzero(~keep)}
    return EstimationTestSplit(
        classes=uniq[keep],
        est_index=est_index,
        est_class=position[inverse[est_index]],
        test_index=test_index,
        test_class=position[inverse[test_index]],
        dropped=dropped,
    )


def class_severity(kappa: np.ndarray, class_index: np.ndarray, n_classes: int) -> np.ndarray:
    """Mean confidence per class: shape ``(..., n_classes)`` for ``kappa`` of shape ``(..., n)``
    (κ already mapped to the paper's scale: :func:`oodsim.detectors.scales.to_confidence`).

    ``class_index`` (n,) holds each sample's class in ``[0, n_classes)``; a class without
    samples gets NaN (which :func:`severity_levels` refuses).
    """
    kappa = np.asarray(kappa, dtype=np.float64)
    class_index = np.asarray(class_index)
    n_classes = _positive_int("n_classes", n_classes)
    if class_index.dtype.kind not in "iu":
        raise SpecError("class_index", str(class_index.dtype), "integer class positions")
    if kappa.ndim == 0 or class_index.shape != kappa.shape[-1:]:
        raise SpecError("class_index", class_index.shape, f"shape {kappa.shape[-1:]} like kappa")
    if class_index.size and (class_index.min() < 0 or class_index.max() >= n_classes):
        raise SpecError("class_index", "out of range", f"integers in [0, {n_classes})")
    rows = kappa.reshape(-1, kappa.shape[-1])
    flat = class_index  # one bincount for all rows: row r's classes are offset by r·K
    if rows.shape[0] > 1:
        flat = (class_index[None, :] + n_classes * np.arange(rows.shape[0])[:, None]).ravel()
    sums = np.bincount(flat, weights=rows.ravel(), minlength=rows.shape[0] * n_classes)
    counts = np.bincount(class_index, minlength=n_classes)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums.reshape(rows.shape[0], n_classes) / counts
    return means.reshape(*kappa.shape[:-1], n_classes)


def window_starts(n_classes: int, group_size: int, n_levels: int = 11) -> np.ndarray:
    """Start of each level's window among the ``M = K − G + 1`` sorted windows.

    Level i starts at ``int(i / (L − 1) · M)``, clipped to ``M − 1`` (so the last level is the
    hardest window). Computed as ``i · M // (L − 1)`` in integers: no float rounding.
    """
    n_classes = _positive_int("n_classes", n_classes)
    group_size = _positive_int("group_size", group_size)
    n_levels = _positive_int("n_levels", n_levels, minimum=2)
    if group_size > n_classes:
        raise SpecError(
            "group_size", group_size, f"at most the number of OOD classes ({n_classes})"
        )
    n_windows = n_classes - group_size + 1
    starts = np.arange(n_levels) * n_windows // (n_levels - 1)
    return np.minimum(starts, n_windows - 1)


def severity_levels(
    class_severity: np.ndarray, group_size: int, n_levels: int = 11
) -> list[np.ndarray]:
    """Classes of each severity level, as positions in ``class_severity``.

    Classes are sorted by severity ascending (stable); level i holds the G consecutive sorted
    classes starting at :func:`window_starts`. Level 0 is the easiest, level L−1 the hardest.
    """
    severity = np.asarray(class_severity, dtype=np.float64)
    if severity.ndim != 1:
        raise SpecError("class_severity", severity.shape, "a 1-d array (one value per class)")
    bad = np.flatnonzero(~np.isfinite(severity))
    if bad.size:
        raise SpecError(
            "class_severity",
            f"{bad.size} non-finite value(s) at positions {bad[:5].tolist()}",
            "finite values (does every class have estimation samples?)",
        )
    starts = window_starts(severity.size, group_size, n_levels)
    order = np.argsort(severity, kind="stable")
    return [order[start : start + group_size] for start in starts]


def level_severity(class_severity: np.ndarray, levels: Sequence[np.ndarray]) -> np.ndarray:
    """Mean severity of each level's classes, shape (L,)."""
    severity = np.asarray(class_severity, dtype=np.float64)
    return np.array([severity[np.asarray(level)].mean() for level in levels])


def _flat_ood(ood_kappa: np.ndarray, ood_class: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """OOD κ as a flat array with each sample's class position; (K, n) means row = class."""
    ood_kappa = np.asarray(ood_kappa)
    if ood_class is None:
        if ood_kappa.ndim != 2:
            raise SpecError(
                "ood_kappa", ood_kappa.shape, "(n_classes, n_per_class), or pass ood_class="
            )
        rows = np.repeat(np.arange(ood_kappa.shape[0]), ood_kappa.shape[1])
        return ood_kappa.ravel(), rows
    ood_class = np.asarray(ood_class)
    if ood_kappa.ndim != 1 or ood_class.shape != ood_kappa.shape:
        raise SpecError("ood_class", ood_class.shape, f"shape {ood_kappa.shape} like ood_kappa")
    return ood_kappa, ood_class


def level_auroc(
    id_kappa: np.ndarray,
    ood_kappa: np.ndarray,
    levels: Sequence[np.ndarray],
    *,
    ood_class: np.ndarray | None = None,
) -> np.ndarray:
    """AUROC of every level (ID positive), exact, in O(n log n) for all levels together.

    Each OOD sample's count of ID κ above it (+ ½ per tie) comes from one sort of the OOD κ
    and binary searches of the sorted ID κ (:func:`_id_above`); summing those per class and
    then per level gives P(κ_ID > κ_OOD) + ½·P(tie) = sklearn ``roc_auc_score`` on the level's
    benchmark. Classes in no level are skipped.
    """
    ood_kappa, ood_class = _flat_ood(ood_kappa, ood_class)
    id_sorted = np.sort(np.asarray(id_kappa).ravel())
    _check_finite(id_sorted, "id_kappa")
    _check_finite(ood_kappa, "ood_kappa")
    n_id = id_sorted.size
    if n_id == 0:
        raise SpecError("id_kappa", "empty", "at least one ID sample")
    n_classes = _n_classes(ood_class, levels)
    class_n = np.bincount(ood_class, minlength=n_classes)
    used = np.zeros(n_classes, dtype=bool)
    used[np.concatenate([np.asarray(level, dtype=np.intp) for level in levels])] = True
    if not used[ood_class].all():  # skip classes that are in no level
        keep = used[ood_class]
        ood_kappa, ood_class = ood_kappa[keep], ood_class[keep]
    order = np.argsort(ood_kappa)
    above = _id_above(id_sorted, ood_kappa[order])
    class_sum = np.bincount(ood_class[order], weights=above, minlength=n_classes)
    out = np.empty(len(levels))
    for i, level in enumerate(levels):
        n_ood = class_n[level].sum()
        if n_ood == 0:
            raise SpecError(f"levels[{i}]", "no OOD test samples", "classes with test samples")
        out[i] = class_sum[level].sum() / (n_id * n_ood)
    return out


def _id_above(id_sorted: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """For sorted OOD κ: the number of ID κ above each one, plus ½ per tie.

    Searching the (smaller) ID array into the queries is cheaper than the other way round:
    ID value i lies above query j iff j < #(queries < value i), so counting those positions
    and summing from the right gives every query's count at once. Half-integers: exact.
    """
    m = queries.size
    below = np.searchsorted(queries, id_sorted, side="left")  # queries strictly below ID i
    below_eq = np.searchsorted(queries, id_sorted, side="right")
    greater = np.cumsum(np.bincount(below, minlength=m + 1)[::-1])[::-1][1:]
    greater_eq = np.cumsum(np.bincount(below_eq, minlength=m + 1)[::-1])[::-1][1:]
    return 0.5 * (greater + greater_eq)


def _n_classes(ood_class: np.ndarray, levels: Sequence[np.ndarray]) -> int:
    """Number of class positions that the OOD samples and the levels refer to."""
    if not len(levels) or any(np.asarray(level).dtype.kind not in "iu" for level in levels):
        raise SpecError(
            "levels", f"{len(levels)} level(s)", "a non-empty list of integer class positions"
        )
    if ood_class.dtype.kind not in "iu":
        raise SpecError("ood_class", str(ood_class.dtype), "integer class positions")
    if ood_class.size and ood_class.min() < 0:
        raise SpecError("ood_class", int(ood_class.min()), "class positions >= 0")
    biggest = [int(np.max(level)) for level in levels if len(level)]
    return max([int(ood_class.max()) if ood_class.size else -1, *biggest]) + 1


def _check_finite(values: np.ndarray, name: str) -> None:
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        count = int(np.count_nonzero(~np.isfinite(values)))
        raise SpecError(name, f"{count} non-finite value(s)", "finite confidences κ")


def level_metrics(
    id_kappa: np.ndarray,
    ood_kappa: np.ndarray,
    levels: Sequence[np.ndarray],
    *,
    ood_class: np.ndarray | None = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    id_correct: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Metrics of every severity level: ``{name: array of shape (L,)}``.

    ``id_correct`` (whether the model classified each ID sample right) is needed by the
    metrics that use it (``oscr``, ``aurc``; see :data:`oodsim.metrics.METRIC_INFO`).

    A level's benchmark is all of ``id_kappa`` plus the OOD samples of its classes.
    ``ood_kappa`` is flat with ``ood_class`` (class position per sample) or (K, n) with one
    row per class. AUROC uses :func:`level_auroc`; the other metrics (names of
    :func:`oodsim.metrics.kappa_metric_names`, registered ones too) are computed by
    :func:`oodsim.metrics.evaluate` on all levels stacked into one batch when levels have equal
    sizes (the usual case).
    """
    metrics = tuple(metrics)
    known = _metrics.kappa_metric_names()
    for name in metrics:
        if name not in known:
            raise UnknownNameError("metric", name, known)
    ood_kappa, ood_class = _flat_ood(ood_kappa, ood_class)
    id_kappa = np.asarray(id_kappa).ravel()
    out: dict[str, np.ndarray] = {}
    if "auroc" in metrics:
        out["auroc"] = level_auroc(id_kappa, ood_kappa, levels, ood_class=ood_class)
    others = tuple(name for name in metrics if name != "auroc")
    if others:
        out.update(_other_metrics(id_kappa, ood_kappa, ood_class, levels, others, id_correct))
    return {name: out[name] for name in metrics}


def _other_metrics(
    id_kappa: np.ndarray,
    ood_kappa: np.ndarray,
    ood_class: np.ndarray,
    levels: Sequence[np.ndarray],
    names: tuple[str, ...],
    id_correct: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Per-level metrics via oodsim.metrics, batching levels of equal size into one call."""

    def correct(n_ood: int) -> np.ndarray | None:
        return (
            None
            if id_correct is None
            else np.r_[np.asarray(id_correct, bool), np.ones(n_ood, bool)]
        )

    order = np.argsort(ood_class, kind="stable")
    n_classes = _n_classes(ood_class, levels)
    bounds = np.searchsorted(ood_class[order], np.arange(n_classes + 1))
    samples = [
        np.concatenate([order[bounds[c] : bounds[c + 1]] for c in np.asarray(level)])
        for level in levels
    ]
    sizes = {s.size for s in samples}
    if len(sizes) == 1:
        n_ood = sizes.pop()
        kappa = np.concatenate(
            [np.broadcast_to(id_kappa, (len(levels), id_kappa.size)), ood_kappa[np.stack(samples)]],
            axis=1,
        )
        is_ood = np.r_[np.zeros(id_kappa.size, bool), np.ones(n_ood, bool)]
        return _metrics.evaluate(
            kappa, is_ood, names, correct=correct(n_ood), context="severity levels"
        )
    per_level = [
        _metrics.evaluate(
            np.r_[id_kappa, ood_kappa[s]],
            np.r_[np.zeros(id_kappa.size, bool), np.ones(s.size, bool)],
            names,
            correct=correct(s.size),
            context=f"severity level {i}",
        )
        for i, s in enumerate(samples)
    ]
    return {name: np.array([values[name] for values in per_level]) for name in names}


def id_auroc(kappa: np.ndarray, correct: np.ndarray) -> float | np.ndarray:
    """In-distribution ranking AUROC: how well κ separates correct from wrong predictions.

    Correct predictions are the positives: ``roc_auc_score(correct, kappa)``. NaN when every
    prediction is right (or every one wrong): then there is nothing to rank.
    """
    correct = np.asarray(correct, dtype=bool)
    if correct.ndim == 1 and (correct.all() or not correct.any()):
        return float("nan")
    return _metrics.auroc(kappa, ~correct, context="ID AUROC (correct vs. wrong)")


@dataclass(frozen=True)
class SeverityBenchmark:
    """Everything one severity run produced, for inspection and reporting."""

    split: EstimationTestSplit
    class_severity: np.ndarray  # (kept classes,), on ``scale``
    levels: list[np.ndarray]
    level_severity: np.ndarray  # (L,), on ``scale``
    metrics: dict[str, np.ndarray]
    scale: str = "kappa"

    def level_classes(self, i: int) -> np.ndarray:
        """OOD class labels of level ``i``."""
        return self.split.classes[self.levels[i]]


def severity_benchmark(
    id_kappa: np.ndarray,
    ood_kappa: np.ndarray,
    ood_labels: np.ndarray | Sequence[object],
    *,
    group_size: int,
    rng: RngLike,
    n_levels: int = 11,
    n_est: int = 150,
    n_test: int = 50,
    metrics: Sequence[str] = DEFAULT_METRICS,
    scale: str = "kappa",
    id_correct: np.ndarray | None = None,
) -> SeverityBenchmark:
    """Algorithm 1 end to end for one (model, κ): split, severities, levels, metrics.

    ``id_kappa`` are the ID test samples (e.g. the ImageNet validation set); ``ood_kappa``
    and ``ood_labels`` all OOD samples with their class labels. ``group_size`` is usually
    the number of ID classes. Class severity is the mean of ``to_confidence(κ, scale)`` (the
    detector's ``confidence_scale``); the metrics use κ itself (a ranking: the same either way).
    """
    ood_kappa = np.asarray(ood_kappa)
    if ood_kappa.shape != (len(ood_labels),):
        raise SpecError("ood_kappa", ood_kappa.shape, f"shape ({len(ood_labels)},) like labels")
    split = split_estimation_test(ood_labels, n_est, n_test, rng=rng)
    if split.classes.size < group_size:
        raise SpecError(
            "group_size",
            group_size,
            f"at most the {split.classes.size} OOD classes with >= {n_est + n_test} samples "
            f"({len(split.dropped)} smaller classes dropped)",
        )
    confidence = to_confidence(ood_kappa[split.est_index], scale)
    severity = class_severity(confidence, split.est_class, split.classes.size)
    levels = severity_levels(severity, group_size, n_levels)
    values = level_metrics(
        id_kappa,
        ood_kappa[split.test_index],
        levels,
        ood_class=split.test_class,
        metrics=metrics,
        id_correct=id_correct,
    )
    return SeverityBenchmark(
        split, severity, levels, level_severity(severity, levels), values, scale
    )
