"""The ImageNet-O recipe on logits: restrict to the 200 classes, −max softmax, AUPR with
ImageNet-O as positives (:func:`evaluate_logits`), and bootstrap replicates of the test set."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from oodsim import limits
from oodsim import metrics as _metrics
from oodsim.data.imagenet_classes import imagenet1k_wnids, imagenet_o_wnids
from oodsim.detectors.logits import max_softmax_log_odds
from oodsim.errors import SpecError
from oodsim.seeds import SeedStreams
from oodsim.specs.types import INT64_MAX

#: the protocols name (``protocol = "imagenet_o"`` in a spec and in results)
NAME = "imagenet_o"
#: tag of the keys of the (n, 1000) logits of one model on one file set (``outputs`` entries;
#: older versions stored them under a kind of this name: ``oodsim cache migrate`` moves them)
LOGITS = "imagenet_o_logits"


LOGITS_VERSION = "1"  # bump when the stored arrays change: it enters their keys


FILES = "imagenet_o_files"  # tag of a file listing's identity


#: metric names of this protocol: the card's ``aupr`` (trapezoid ``auc(recall, precision)``,
#: OOD positive; = ``aupr_out``), the authors' code's ``ap`` (sklearn's step
#: ``average_precision_score``, OOD positive) and every κ metric of :mod:`oodsim.metrics` that
#: needs only κ and is_ood (ImageNet-O carries no per-image prediction correctness)
AUPR = "aupr"


AP = "ap"


def _kappa_only(name: str) -> bool:
    info = getattr(_metrics, "METRIC_INFO", {}).get(name)
    return not getattr(info, "needs_correct", False)


METRIC_NAMES = (
    AUPR,
    AP,
    *(m for m in _metrics.KAPPA_METRICS if m not in (AUPR, AP) and _kappa_only(m)),
)


DEFAULT_METRICS = (AUPR, "auroc", "fpr95")


BOOTSTRAP_STREAM = "bootstrap"


#: what a seed of an ImageNet-O run is (``seed_meaning`` of its results)
SEED_MEANING = {
    True: "bootstrap replicate of the fixed test set",
    False: "the full fixed test set (every seed scores the same images: identical numbers)",
}


#: what the spread over bootstrap seeds measures
UNCERTAINTY = "test-set sampling"


STOPPING_REFUSED = (
    "a stopping rule over bootstrap replicates measures the resampling error of one fixed "
    "test set, not uncertainty about the population; run a fixed number of replicates instead "
    "(e.g. [seeds] n = 1000 and no [stopping] table)"
)


def subset_columns(class_wnids: Sequence[str], subset_wnids: Sequence[str]) -> np.ndarray:
    """Column of each subset class in a classifier's output, in sorted-wnid order."""
    class_wnids = list(class_wnids)
    position = {wnid: i for i, wnid in enumerate(class_wnids)}
    if len(position) != len(class_wnids):
        raise SpecError("class_wnids", "duplicates", "one wnid per output column")
    subset = sorted(set(subset_wnids))
    missing = [w for w in subset if w not in position]
    if missing:
        raise SpecError(
            "subset_wnids",
            missing[:5] + (["..."] if len(missing) > 5 else []),
            f"classes of the classifier ({len(missing)} not among its {len(class_wnids)})",
        )
    return np.array([position[w] for w in subset], dtype=np.intp)


def restrict_logits(
    logits: np.ndarray, class_wnids: Sequence[str], subset_wnids: Sequence[str]
) -> np.ndarray:
    """Keep the logit columns of ``subset_wnids`` (sorted-wnid order) from ``(..., C)`` logits."""
    logits = np.asarray(logits)
    if logits.ndim == 0 or logits.shape[-1] != len(class_wnids):
        raise SpecError(
            "logits", logits.shape, f"(..., {len(class_wnids)}): one column per class wnid"
        )
    return logits[..., subset_columns(class_wnids, subset_wnids)]


def max_softmax(logits: np.ndarray) -> np.ndarray:
    """The κ of the registered ``msp`` detector per row, float64: the log-odds
    log p − log(1 − p) of the maximum softmax probability p (``scipy.special.expit(κ)`` = p).

    One implementation, so the protocol's MSP scores equal :func:`evaluate_logits`; log-odds
    rank exactly as p does but never round to 1.0, so confident images do not tie.
    """
    logits = np.asarray(logits)
    flat = logits.reshape(-1, logits.shape[-1])
    return max_softmax_log_odds(flat).reshape(logits.shape[:-1])


def _as_subset_logits(
    logits: np.ndarray, id_classes: Sequence[str], class_wnids: Sequence[str] | None, name: str
) -> np.ndarray:
    """Logits over the ImageNet-O classes: full-classifier logits get restricted first."""
    logits = np.asarray(logits)
    if logits.dtype.kind not in "iuf":
        raise SpecError(
            name,
            f"an array of {logits.dtype}",
            "real-valued logits (floats or integers)",
            "Complex logits have no order: oodsim never drops their imaginary part"
            if logits.dtype.kind == "c"
            else "",
        )
    if logits.ndim != 2:
        raise SpecError(name, logits.shape, "(n_images, n_classes)")
    n = logits.shape[1]
    if n == len(id_classes) and class_wnids is None:
        return logits
    wnids = imagenet1k_wnids() if class_wnids is None else tuple(class_wnids)
    if n != len(wnids):
        raise SpecError(
            name,
            logits.shape,
            f"(n, {len(wnids)}) classifier logits or (n, {len(id_classes)}) logits already "
            "restricted to the ImageNet-O classes",
        )
    return restrict_logits(logits, wnids, id_classes)


def ood_metrics(
    id_kappa: np.ndarray, ood_kappa: np.ndarray, names: Sequence[str], context: str = "ImageNet-O"
) -> dict[str, np.ndarray]:
    """Metrics of κ ``(..., n_id)`` vs ``(..., n_ood)``, each of shape ``(...)``.

    ``aupr`` is the card's metric: :func:`oodsim.metrics.aupr_out` (OOD positive, ranked by
    −κ, trapezoid ``auc(recall, precision)`` over ``precision_recall_curve``). ``ap`` is the
    number of the authors' code (``calibration_tools.get_measures``): sklearn's
    ``average_precision_score(is_ood, -κ)``, i.e. ``aupr_out(..., method="step")``.
    """
    kappa = np.concatenate([id_kappa, ood_kappa], axis=-1)
    is_ood = np.r_[np.zeros(id_kappa.shape[-1], bool), np.ones(ood_kappa.shape[-1], bool)]
    return _metrics.evaluate(kappa, is_ood, tuple(dict.fromkeys(names)), context=context)


#: the metrics :func:`evaluate_logits` returns
EVALUATE_METRICS = (AUPR, AP, "auroc", "fpr95")


_REPLICATE_BLOCK = 256  # bootstrap replicates scored at once (bounds the index arrays)


def interval_label(confidence: float = 0.95) -> str:
    """The name of the percentile interval over bootstrap seeds, e.g.
    ``"95% bootstrap interval (test-set sampling)"``."""
    return f"{confidence:.0%} bootstrap interval ({UNCERTAINTY})"


def result_labels(bootstrap: bool, confidence: float = 0.95) -> dict[str, str]:
    """What the numbers of an ImageNet-O run are, for results ``attrs`` and printed tables:
    ``seed_meaning``, ``point_estimate`` and ``interval``."""
    return {
        "seed_meaning": SEED_MEANING[bool(bootstrap)],
        "point_estimate": "the metric on the full test set",
        "interval": interval_label(confidence)
        if bootstrap
        else "none: without bootstrap = true there is no test-set sampling interval",
    }


def check_confidence(confidence: float) -> None:
    if isinstance(confidence, bool) or not 0.0 < confidence < 1.0:
        raise SpecError("confidence", confidence, "a number in (0, 1), e.g. 0.95")


def check_bootstrap(n_bootstrap: int, field: str = "n_bootstrap") -> None:
    """``n_bootstrap`` is 0 (no interval) or 2 replicates up to the limit
    ``bootstrap_replicates`` (:mod:`oodsim.limits`); else a :class:`SpecError` naming ``field``.
    Checked before any logits are read or inferred."""
    if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, int) or n_bootstrap < 0:
        raise SpecError(field, n_bootstrap, "0 (no interval) or a number of replicates")
    if n_bootstrap == 1:
        raise SpecError(field, n_bootstrap, "0 (no interval) or at least 2 replicates")
    if problem := limits.over(n_bootstrap, "bootstrap_replicates"):
        raise SpecError(field, n_bootstrap, *problem)


def check_seed(seed: int, n_bootstrap: int = 0, field: str = "seed") -> None:
    """``seed`` is the first of the replicates' seeds ``seed … seed + n_bootstrap − 1``, each
    in 0 … 2**63 − 1 like a spec's seeds; else a :class:`SpecError` naming ``field``."""
    last = INT64_MAX - max(n_bootstrap - 1, 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= last:
        flag = "--bootstrap N" if field.startswith("--") else "n_bootstrap = N"
        raise SpecError(
            field,
            seed,
            f"an integer >= 0 with SEED + N - 1 <= 2**63 - 1 (replicate k of {flag} is seed "
            "SEED + k, as in a spec)",
        )


def bootstrap_replicates(
    id_kappa: np.ndarray, ood_kappa: np.ndarray, names: Sequence[str], seeds: Sequence[int]
) -> dict[str, np.ndarray]:
    """Metrics of κ ``(..., n_id)`` / ``(..., n_ood)`` on the bootstrap resample of each seed,
    each of shape ``(len(seeds), ...)``: seed *s* draws :func:`bootstrap_indices` from
    ``SeedStreams(s)``, exactly as seed *s* of a spec with ``bootstrap = true`` does."""
    id_kappa, ood_kappa = np.asarray(id_kappa), np.asarray(ood_kappa)
    n_id, n_ood = id_kappa.shape[-1], ood_kappa.shape[-1]
    seeds = list(seeds)
    blocks: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for start in range(0, len(seeds), _REPLICATE_BLOCK):
        drawn = [
            bootstrap_indices(SeedStreams(s), n_id, n_ood) for s in seeds[start:][:_REPLICATE_BLOCK]
        ]
        id_index = np.stack([i for i, _ in drawn])  # (replicates, n_id)
        ood_index = np.stack([o for _, o in drawn])
        values = ood_metrics(
            np.moveaxis(id_kappa[..., id_index], -2, 0),
            np.moveaxis(ood_kappa[..., ood_index], -2, 0),
            names,
        )
        for name in names:
            blocks[name].append(np.asarray(values[name]))
    return {name: np.concatenate(parts) for name, parts in blocks.items()}


def evaluate_logits(
    id_logits: np.ndarray,
    ood_logits: np.ndarray,
    *,
    id_classes: Sequence[str] | None = None,
    class_wnids: Sequence[str] | None = None,
    n_bootstrap: int = 0,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """ImageNet-O metrics from ID and OOD logits.

    Logits are ``(n, 1000)`` ImageNet-1k outputs in the sorted-wnid order of timm's list
    (pass ``class_wnids`` for another order or label space), or ``(n, 200)`` already
    restricted. ``id_classes`` defaults to the bundled 200 ImageNet-O classes. Returns
    ``aupr`` (the card's metric: OOD positive, score −max softmax ranked by its log-odds,
    trapezoid ``auc(recall, precision)``), ``ap`` (the authors' code: sklearn's
    ``average_precision_score``, OOD positive), ``auroc`` (ID positive), ``fpr95``,
    ``chance`` (the OOD share: the AUPR of a random detector), ``n_id`` and ``n_ood``.

    ``n_bootstrap`` > 0 adds the percentile interval of every metric over that many bootstrap
    replicates of the test set (seeds ``seed``, ``seed + 1``, ...: the same resamples as a spec
    with ``bootstrap = true`` and those seeds): ``intervals`` ({metric: [lower, upper]}),
    ``n_bootstrap``, ``confidence`` and the labels of :func:`result_labels` (``interval``
    names it: ``"95% bootstrap interval (test-set sampling)"``). The interval is
    test-set sampling uncertainty of these numbers; the numbers themselves stay those of the
    full test set.
    """
    check_bootstrap(n_bootstrap)
    check_seed(seed, n_bootstrap)
    classes = imagenet_o_wnids() if id_classes is None else tuple(sorted(set(id_classes)))
    id_kappa = max_softmax(_as_subset_logits(id_logits, classes, class_wnids, "id_logits"))
    ood_kappa = max_softmax(_as_subset_logits(ood_logits, classes, class_wnids, "ood_logits"))
    values = ood_metrics(id_kappa, ood_kappa, EVALUATE_METRICS)
    result: dict[str, Any] = {
        **{name: float(value) for name, value in values.items()},
        "chance": ood_kappa.size / (id_kappa.size + ood_kappa.size),
        "n_id": int(id_kappa.size),
        "n_ood": int(ood_kappa.size),
    }
    if n_bootstrap:
        # the statistics floor: only an evaluation with an interval needs it
        from oodsim.stats.intervals import percentile_interval

        check_confidence(confidence)
        replicates = bootstrap_replicates(
            id_kappa, ood_kappa, EVALUATE_METRICS, range(seed, seed + n_bootstrap)
        )
        bounds = {name: percentile_interval(v, confidence) for name, v in replicates.items()}
        result |= {
            "intervals": {name: [float(lo), float(hi)] for name, (lo, hi) in bounds.items()},
            "n_bootstrap": n_bootstrap,
            "confidence": confidence,
            **result_labels(True, confidence),
        }
    return result


def bootstrap_indices(seed_streams: SeedStreams, n_id: int, n_ood: int) -> tuple[Any, Any]:
    """A seed's bootstrap resample: ``n_id`` ID and ``n_ood`` OOD indices drawn with
    replacement from the ``bootstrap`` stream (ID first, then OOD)."""
    rng = seed_streams.rng(BOOTSTRAP_STREAM)
    return rng.integers(0, n_id, size=n_id), rng.integers(0, n_ood, size=n_ood)
