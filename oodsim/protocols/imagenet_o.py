"""The ImageNet-O evaluation (Hendrycks et al., "Natural Adversarial Examples", 2019).

Restrict a 1000-way ImageNet classifier to the 200 ImageNet-O classes, take the softmax over
those 200 logits, score each image by −max softmax (the anomaly score) and report the area
under the precision-recall curve with ImageNet-O images as positives (trapezoidal
``auc(recall, precision)`` over ``precision_recall_curve``). The ID set is the ImageNet
validation images of the 200 classes (10,000), the OOD set ImageNet-O's 2,000 images; chance
AUPR is the OOD share, 2,000 / 12,000 ≈ 16.7 %.

Three ways in:

- the recipe on logits: :func:`evaluate_logits` (or ``.npy`` files, :func:`evaluate_logit_files`);
- one model on the two image folders, in this process: :func:`evaluate_folders`;
- a spec of several models (:class:`ImageNetOSpec`, ``specs/imagenet_o.toml``) run by the
  engine, ``oodsim.run(spec)``: :data:`PROTOCOL` plans one task per model that infers the
  1000-way logits of the ID and OOD files and stores them (kind ``imagenet_o_logits``, keyed by
  the model, the file listing and the inference version; the same for every seed), and scores
  each seed from the store. With ``bootstrap = true`` a seed scores a bootstrap resample of the
  ID and the OOD images (stream ``bootstrap``): a replicate of the one fixed test set; without
  it every seed scores the full sets. :func:`bootstrap_interval` turns the replicates into the
  point estimate on the full test set and its percentile interval (test-set sampling
  uncertainty). Stopping rules are refused when the spec is made (:data:`STOPPING_REFUSED`).

Two AUPRs: ``aupr`` is the card's trapezoid ``auc(recall, precision)``, ``ap`` the authors'
code's ``average_precision_score``; both with ImageNet-O as positives and score −max softmax.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from oodsim import metrics as _metrics
from oodsim.data.builtin import IMAGE_SUFFIXES
from oodsim.data.imagenet_classes import imagenet1k_wnids, imagenet_o_wnids
from oodsim.detectors import NonFiniteKappaError, confidence, get_detector
from oodsim.detectors.logits import max_softmax_log_odds
from oodsim.errors import DataNotFoundError, SpecError, UnknownNameError
from oodsim.keys import digest, no_key
from oodsim.models import zoo
from oodsim.models.tensors import device as model_device
from oodsim.models.zoo import ModelRef
from oodsim.outputs import Outputs
from oodsim.protocols.base import Protocol, SeedFailed, Task, stored
from oodsim.results import NO_SEVERITY, Layout, SeedResult
from oodsim.seeds import SeedStreams
from oodsim.specs import (
    DetectorSpec,
    KeyedSpec,
    Seeded,
    SeedsSpec,
    StoppingSpec,
    detector_specs,
    detector_to_data,
)
from oodsim.specs.cluster import ClusterSpec
from oodsim.specs.converter import structure, unstructure
from oodsim.specs.params import is_grid
from oodsim.specs.types import (
    check_fields,
    one_of,
    path_string,
    positive,
    register_table,
    safe_name,
    spec_class,
)
from oodsim.store import Store

LOGITS = "imagenet_o_logits"  # store kind: (n, 1000) logits of one model on one file set
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

# --------------------------------------------------------------------------- the recipe


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
    requests = tuple(dict.fromkeys("aupr_out" if n == AUPR else n for n in names if n != AP))
    values = _metrics.evaluate(kappa, is_ood, requests, context=context) if requests else {}
    if AP in names:
        values[AP] = _metrics.aupr_out(kappa, is_ood, method="step", context=context)
    return {n: values["aupr_out" if n == AUPR else n] for n in names}


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


def _check_confidence(confidence: float) -> None:
    if isinstance(confidence, bool) or not 0.0 < confidence < 1.0:
        raise SpecError("confidence", confidence, "a number in (0, 1), e.g. 0.95")


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
    if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, int) or n_bootstrap < 0:
        raise SpecError("n_bootstrap", n_bootstrap, "0 (no interval) or a number of replicates")
    if n_bootstrap == 1:
        raise SpecError("n_bootstrap", n_bootstrap, "0 (no interval) or at least 2 replicates")
    if n_bootstrap:
        # the statistics floor: only an evaluation with an interval needs it
        from oodsim.stats.estimates import percentile_interval

        _check_confidence(confidence)
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


# --------------------------------------------------------------------------- image folders


def _image_files(folder: Path) -> list[Path]:
    """Image files below ``folder`` (recursive), sorted by path (``os.scandir``: a listing of
    ImageNet's 10,000 validation images of the 200 classes takes tens of milliseconds)."""
    found, pending = [], [os.fspath(folder)]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_dir():
                    pending.append(entry.path)
                elif entry.is_file() and os.path.splitext(entry.name)[1].lower() in IMAGE_SUFFIXES:
                    found.append(entry.path)
    return [Path(f) for f in sorted(found)]


def id_files(id_root: str | Path, id_classes: Sequence[str]) -> tuple[list[Path], list[str]]:
    """Images of the ImageNet-O classes under ``id_root/<wnid>/`` and the classes found.

    Other class folders (the rest of the 1,000) are ignored; a missing class is skipped (the
    result reports how many were found), no class at all is an error.
    """
    root = Path(id_root)
    if not root.is_dir():
        raise DataNotFoundError(
            f"ImageNet validation folder {root} does not exist; it must hold one folder per "
            "wnid (e.g. val/n01443537/*.JPEG)"
        )
    present = [w for w in sorted(set(id_classes)) if (root / w).is_dir()]
    if not present:
        raise DataNotFoundError(
            f"none of the {len(set(id_classes))} ImageNet-O class folders (e.g. "
            f"{sorted(id_classes)[0]}) found under {root}"
        )
    files = [f for wnid in present for f in _image_files(root / wnid)]
    if not files:
        raise DataNotFoundError(f"no images in the ImageNet-O class folders under {root}")
    return files, present


def ood_files(ood_root: str | Path) -> list[Path]:
    """Every image under ``ood_root`` (ImageNet-O keeps them in wnid folders; all are OOD)."""
    root = Path(ood_root)
    files = _image_files(root) if root.is_dir() else []
    if not files:
        raise DataNotFoundError(f"no ImageNet-O images found under {root}")
    return files


def _imagenet_classifier(ref: ModelRef) -> zoo.LoadedModel:
    """A zoo model that must be an ImageNet-1k classifier (1,000 outputs, sorted wnids)."""
    loaded = zoo.load_model(ref)
    if loaded.class_wnids is None:
        raise SpecError(
            "model", ref.name, "an ImageNet-1k classifier (1,000 outputs in sorted-wnid order)"
        )
    return loaded


def _infer_files(
    loaded: zoo.LoadedModel, files: Sequence[str | Path], batch_size: int, device: str
) -> np.ndarray:
    """Logits of image files, each read with the model's own preprocessing."""
    batches = zoo.file_batches(list(files), loaded.preprocessing, batch_size)
    return zoo.infer_tensors(loaded.model, batches, device)[0]


def evaluate_folders(
    id_root: str | Path,
    ood_root: str | Path,
    model: str | ModelRef,
    *,
    pretrained: bool = True,
    weights: str | None = None,
    image_size: int | None = None,
    id_classes: Sequence[str] | None = None,
    batch_size: int = 64,
    device: str | None = None,
    save_logits: str | Path | None = None,
    n_bootstrap: int = 0,
    seed: int = 0,
) -> dict[str, Any]:
    """ImageNet-O metrics of one zoo model from the two image folders, in this process.

    ``model`` is a ``timm:``/``torchvision:`` name (or a :class:`ModelRef`); its own
    preprocessing reads every image. Returns :func:`evaluate_logits`'s dict plus ``model``,
    ``n_id_classes`` and ``weights`` (where they came from). ``save_logits``: a folder for
    ``id_logits.npy`` / ``ood_logits.npy`` (re-evaluate later with :func:`evaluate_logits`).
    ``n_bootstrap``, ``seed``: the test-set sampling interval of :func:`evaluate_logits`.
    Several models, seeds and a cache: run an :class:`ImageNetOSpec` with ``oodsim.run``.
    """
    classes = imagenet_o_wnids() if id_classes is None else tuple(sorted(set(id_classes)))
    in_files, present = id_files(id_root, classes)
    out_files = ood_files(ood_root)
    if isinstance(model, ModelRef):
        ref = model
    else:
        ref = ModelRef(name=model, pretrained=pretrained, weights=weights, image_size=image_size)
    loaded = _imagenet_classifier(ref)
    device = device or model_device()
    logits = [_infer_files(loaded, files, batch_size, device) for files in (in_files, out_files)]
    if save_logits is not None:
        folder = Path(save_logits)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "id_logits.npy", logits[0])
        np.save(folder / "ood_logits.npy", logits[1])
    result: dict[str, Any] = evaluate_logits(
        logits[0],
        logits[1],
        id_classes=classes,
        class_wnids=loaded.class_wnids,
        n_bootstrap=n_bootstrap,
        seed=seed,
    )
    return {**result, "model": ref.label, "n_id_classes": len(present), "weights": loaded.source}


def evaluate_logit_files(
    id_logits: str | Path, ood_logits: str | Path, **options: Any
) -> dict[str, Any]:
    """:func:`evaluate_logits` on two ``.npy`` files of saved logits."""
    arrays = []
    for path in (Path(id_logits), Path(ood_logits)):
        if not path.is_file():
            raise DataNotFoundError(f"logits file {path} does not exist")
        arrays.append(np.load(path))
    return evaluate_logits(arrays[0], arrays[1], **options)


# --------------------------------------------------------------------------- spec


def _models(value: Any) -> Any:
    if not isinstance(value, list | tuple):
        return value
    return tuple(ModelRef(name=v) if isinstance(v, str) else v for v in value)


register_table(ModelRef, shorthand="name", nouns=("a model (a name or a table)", "models"))


@spec_class
class ImageNetOSpec(Seeded, KeyedSpec):
    """Zoo models × κ on ImageNet-O (``specs/imagenet_o.toml``), run with ``oodsim.run``.

    ``id_root`` (ImageNet val, one folder per wnid; only the 200 ImageNet-O classes are read)
    and ``ood_root`` (every image below it is OOD) are where the data lies, not what it is:
    they stay out of the key, and the cached logits are keyed by the listing of the files
    actually read (relative path and byte size of each). ``detectors`` are logit detectors
    applied to the 200 restricted logits (default ``msp``: the paper's −max softmax);
    ``metrics`` are ``aupr`` (the card's: OOD positive, trapezoid ``auc(recall, precision)``),
    ``ap`` (the authors' code: sklearn's ``average_precision_score``, OOD positive) and the κ
    metrics of :mod:`oodsim.metrics`. ``bootstrap``: each seed scores a bootstrap resample of
    the ID and the OOD images (stream ``bootstrap``), a replicate of the one fixed test set
    whose spread is its sampling uncertainty (:func:`bootstrap_interval`); without it every
    seed scores the full sets, so seeds differ only with ``bootstrap = true``. Stopping rules
    are refused either way (:data:`STOPPING_REFUSED`): run a fixed number of replicates.
    ``batch_size`` is an execution setting.
    """

    TAG = "imagenet_o"
    VERSION = "1"

    name: str = attrs.field(default="imagenet_o", validator=safe_name, metadata=no_key())
    id_root: str = attrs.field(converter=path_string, metadata=no_key())
    ood_root: str = attrs.field(converter=path_string, metadata=no_key())
    models: tuple[ModelRef, ...] = attrs.field(converter=_models)
    detectors: tuple[DetectorSpec, ...] = attrs.field(default=("msp",), converter=detector_specs)
    metrics: tuple[str, ...] = DEFAULT_METRICS
    batch_size: int = attrs.field(default=64, validator=positive, metadata=no_key())
    bootstrap: bool = False
    seeds: SeedsSpec = attrs.field(factory=lambda: SeedsSpec(n=1))
    stopping: StoppingSpec = attrs.field(factory=StoppingSpec)
    on_failure: str = attrs.field(default="record", validator=one_of("record", "abort"))
    cluster: ClusterSpec | None = attrs.field(default=None, metadata=no_key())

    def __attrs_post_init__(self) -> None:
        for i, ref in enumerate(self.models):
            check_fields(ref, f"models[{i}]")
        for field, labels in (
            ("models", [m.label for m in self.models]),
            ("detectors", [d.label for d in self.detectors]),
        ):
            if not labels or len(set(labels)) != len(labels):
                raise SpecError(field, labels, "a non-empty list with distinct labels")
        for ref in self.models:
            if ref.prefix == "trained" or ref.num_classes not in (None, 1000):
                raise SpecError(
                    f"models[{ref.label}]",
                    ref.name if ref.prefix == "trained" else f"num_classes={ref.num_classes}",
                    "timm: or torchvision: ImageNet-1k classifiers (1,000 outputs)",
                )
        for detector in self.detectors:
            info = get_detector(detector.name)
            if not info.needs <= {"logits"} or info.fit_required or is_grid(detector.kwargs):
                raise SpecError(
                    f"detectors[{detector.label}]",
                    detector.name,
                    "a detector of the logits alone, without a fit split or a parameter grid "
                    "(ImageNet-O has no training or validation split)",
                )
        for metric in self.metrics:
            if metric not in METRIC_NAMES:
                raise UnknownNameError("metrics", metric, METRIC_NAMES)
        if not self.metrics or len(set(self.metrics)) != len(self.metrics):
            raise SpecError("metrics", self.metrics, "a non-empty list of distinct metric names")
        if self.stopping.rule != "fixed":
            if self.bootstrap:
                raise SpecError(
                    "stopping.rule",
                    self.stopping.rule,
                    "'fixed' with bootstrap = true",
                    STOPPING_REFUSED[0].upper() + STOPPING_REFUSED[1:],
                )
            raise SpecError(
                "stopping.rule",
                self.stopping.rule,
                "'fixed': without bootstrap every ImageNet-O seed scores the same fixed test "
                "set (identical numbers, nothing for a rule to watch)",
                "Run one seed, or bootstrap = true with a fixed number of replicates for a "
                "test-set sampling interval",
            )
        self.refuse_design()
        self.check_stopping((NO_SEVERITY,))

    def to_dict(self) -> dict[str, Any]:
        """Plain data (round-trips through ``PROTOCOL.from_data``)."""
        return {
            "name": self.name,
            "id_root": self.id_root,
            "ood_root": self.ood_root,
            "models": [_model_to_data(m) for m in self.models],
            "detectors": [detector_to_data(d) for d in self.detectors],
            "metrics": list(self.metrics),
            "batch_size": self.batch_size,
            "bootstrap": self.bootstrap,
            "seeds": {**attrs.asdict(self.seeds), "pinned": dict(self.seeds.pinned)},
            "stopping": attrs.asdict(self.stopping),
            "on_failure": self.on_failure,
            **({"cluster": unstructure(self.cluster)} if self.cluster is not None else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


_MODEL_FIELDS = ("name", "pretrained", "weights", "image_size", "num_classes", "init_seed", "label")


def _model_to_data(ref: ModelRef) -> dict[str, Any]:
    return {name: getattr(ref, name) for name in _MODEL_FIELDS}


def spec_from_data(data: Mapping[str, Any], base: str | Path | None = None) -> ImageNetOSpec:
    """An :class:`ImageNetOSpec` from plain (TOML) data; relative roots resolve against ``base``.

    Types and unknown keys are checked by the one strict converter
    (:func:`oodsim.specs.converter.structure`). A ``[seeds]`` table without ``n`` or ``values``
    means one seed, as without the table.
    """
    if not isinstance(data, Mapping):
        raise SpecError("imagenet_o spec", data, "a table of ImageNet-O spec fields")
    data = dict(data)
    for key in ("id_root", "ood_root"):
        if key not in data:
            raise SpecError(key, None, "a folder (the spec says where the images are)")
        if isinstance(data[key], str):
            root = Path(data[key]).expanduser()
            data[key] = str(root if root.is_absolute() or base is None else Path(base) / root)
    models = data.get("models")
    for model in models if isinstance(models, list | tuple) else ():
        name = model.get("name") if isinstance(model, Mapping) else model
        if isinstance(name, str) and name.partition(":")[0] == "trained":
            raise SpecError("models", name, "timm: or torchvision: ImageNet-1k classifiers")
    seeds = data.get("seeds")
    if isinstance(seeds, Mapping) and "n" not in seeds and "values" not in seeds:
        data["seeds"] = {**seeds, "n": 1}
    return structure(data, ImageNetOSpec, "imagenet_o spec")


# --------------------------------------------------------------------------- plan


@attrs.frozen(eq=False)
class FileSet:
    """The image files of one side of the evaluation and their identity.

    ``identity`` is a digest of the sorted (path relative to ``root``, byte size) lines: moving
    the data to another disk keeps the cache, adding, removing, renaming or re-encoding an
    image changes it.
    """

    side: str  # "id" or "ood"
    root: str
    files: tuple[str, ...]
    identity: str
    n_classes: int  # ImageNet-O class folders found (ID), or 0

    @classmethod
    def listing(cls, side: str, root: str, files: Sequence[Path], n_classes: int = 0) -> FileSet:
        paths = [os.fspath(f) for f in files]
        prefix = os.path.join(root, "")
        lines = hashlib.sha256()
        for path in paths:  # every file was found below root, so its path starts with it
            relative = path.removeprefix(prefix).replace(os.sep, "/")
            lines.update(f"{relative}\t{os.stat(path).st_size}\n".encode())
        identity = digest(FILES, "1", {"n": len(paths), "sha256": lines.hexdigest()})
        return cls(side, root, tuple(paths), identity, n_classes)


def file_sets(spec: ImageNetOSpec) -> tuple[FileSet, FileSet]:
    """The ID files (the 200 ImageNet-O class folders of ``id_root``) and the OOD files."""
    in_files, present = id_files(spec.id_root, imagenet_o_wnids())
    return (
        FileSet.listing("id", spec.id_root, in_files, len(present)),
        FileSet.listing("ood", spec.ood_root, ood_files(spec.ood_root)),
    )


def logits_key(ref: ModelRef, files: FileSet) -> str:
    """Key of one model's logits on one file set (seed-independent)."""
    return digest(
        LOGITS,
        f"{LOGITS_VERSION}/{zoo.VERSION}",
        {"model": ref.key, "files": files.identity},
    )


def infer_logits(ref: ModelRef, sets: tuple[FileSet, ...], batch_size: int, store: Store) -> None:
    """The task of one model: infer and store its logits on every file set not yet stored
    (run on a Dask worker by the engine; the model is loaded once, only when needed)."""
    loaded: list[zoo.LoadedModel] = []
    for files in sets:
        key = logits_key(ref, files)

        def compute(files: FileSet = files, key: str = key) -> None:
            if not loaded:
                try:
                    loaded.append(_imagenet_classifier(ref))
                except SpecError as error:
                    raise SeedFailed(f"model {ref.label}: {error}") from None
            logits = _infer_files(loaded[0], files.files, batch_size, model_device())
            if logits.shape != (len(files.files), 1000) or not np.isfinite(logits).all():
                raise SeedFailed(
                    f"model {ref.label} gave non-finite or misshapen logits {logits.shape} on "
                    f"the {files.side} images"
                )
            store.put(
                LOGITS,
                key,
                {"logits": logits},
                {
                    "describe": f"{ref.label} logits of {len(files.files)} {files.side} images "
                    f"under {files.root}",
                    "model": ref.label,
                    "weights": loaded[0].source,
                    "files": files.identity,
                    "preprocessing": loaded[0].preprocessing.describe(),
                },
            )

        store.ensure(LOGITS, key, compute)


def _check_weights(ref: ModelRef) -> None:
    """Pretrained weights on disk (looked up, not loaded): fails before any compute."""
    if ref.weights:
        zoo.file_digest(ref.weights)
    elif ref.pretrained:
        _, arch, tag = zoo.split_name(ref.name)
        if ref.prefix == "timm":
            found, looked = zoo.find_timm_weights(arch, tag)
        else:
            _, found, looked = zoo.find_torchvision_weights(arch, tag)
        if found is None:
            raise zoo.missing_weights(ref.name, looked)


# --------------------------------------------------------------------------- score


def bootstrap_indices(seed_streams: SeedStreams, n_id: int, n_ood: int) -> tuple[Any, Any]:
    """A seed's bootstrap resample: ``n_id`` ID and ``n_ood`` OOD indices drawn with
    replacement from the ``bootstrap`` stream (ID first, then OOD)."""
    rng = seed_streams.rng(BOOTSTRAP_STREAM)
    return rng.integers(0, n_id, size=n_id), rng.integers(0, n_ood, size=n_ood)


def score_logits(
    spec: ImageNetOSpec,
    seed: int,
    logits: Sequence[tuple[np.ndarray, np.ndarray]],
) -> np.ndarray:
    """Scores ``(method, metric, model)`` of one seed from each model's (ID, OOD) logits: of
    the seed's bootstrap resample with ``bootstrap = true``, else of the full test set."""
    id_kappa, ood_kappa = logits_kappa(spec, logits)
    if spec.bootstrap:
        id_kappa, ood_kappa = resample(spec, seed, id_kappa, ood_kappa)
    return metric_array(spec, id_kappa, ood_kappa)


def resample(
    spec: ImageNetOSpec, seed: int, id_kappa: np.ndarray, ood_kappa: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """κ ``(..., n_id)`` / ``(..., n_ood)`` of the seed's bootstrap resample (the same images
    for every model and detector: comparisons are paired)."""
    streams = spec.seeds.streams(seed)
    id_index, ood_index = bootstrap_indices(streams, id_kappa.shape[-1], ood_kappa.shape[-1])
    return id_kappa[..., id_index], ood_kappa[..., ood_index]


def metric_array(spec: ImageNetOSpec, id_kappa: np.ndarray, ood_kappa: np.ndarray) -> np.ndarray:
    """The spec's metrics of κ ``(model, method, n)`` as ``(method, metric, model)``."""
    values = ood_metrics(id_kappa, ood_kappa, spec.metrics)  # each (model, method)
    return np.stack([values[name].T for name in spec.metrics], axis=1)


def logits_kappa(
    spec: ImageNetOSpec, logits: Sequence[tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """κ ``(model, method, n_id)`` and ``(model, method, n_ood)`` of every detector on the
    logits restricted to the 200 classes."""
    columns = subset_columns(imagenet1k_wnids(), imagenet_o_wnids())
    n_id, n_ood = len(logits[0][0]), len(logits[0][1])
    kappa = np.empty((len(spec.models), len(spec.detectors), n_id + n_ood))
    for m, (id_logits, ood_logits) in enumerate(logits):
        outputs = Outputs(logits=np.concatenate([id_logits, ood_logits])[:, columns])
        for d, detector in enumerate(spec.detectors):
            try:
                kappa[m, d] = confidence(detector.name, outputs, **detector.kwargs)
            except NonFiniteKappaError as error:
                raise SeedFailed(
                    f"detector {detector.label} on {spec.models[m].label}: {error}"
                ) from None
    return kappa[..., :n_id], kappa[..., n_id:]


#: κ and scores of the full test set of the specs a process scored last, by (spec key, store
#: root): every bootstrap seed of a run resamples the same κ, so a worker reads the logits
#: and scores the full set once per run, not once per seed (1,000 seeds: 1,000 reads).
_FULL_SETS: dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
_KEEP_FULL_SETS = 2


def _full_test_set(spec: ImageNetOSpec, store: Store) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """κ ``(model, method, n_id)``, ``(model, method, n_ood)`` and the full set's scores
    ``(method, metric, severity, model)`` of ``spec``, read from ``store`` once per process."""
    cache_key = (spec.key, str(store.root))
    if cache_key not in _FULL_SETS:
        id_set, ood_set = file_sets(spec)
        logits = [
            tuple(
                stored(
                    store,
                    LOGITS,
                    logits_key(ref, files),
                    f"logits of {ref.label} on the {files.side} images",
                ).arrays["logits"]
                for files in (id_set, ood_set)
            )
            for ref in spec.models
        ]
        id_kappa, ood_kappa = logits_kappa(spec, logits)
        full = metric_array(spec, id_kappa, ood_kappa)[:, :, None, :]  # severity axis
        while len(_FULL_SETS) >= _KEEP_FULL_SETS:
            _FULL_SETS.pop(next(iter(_FULL_SETS)))
        _FULL_SETS[cache_key] = (id_kappa, ood_kappa, full)
    return _FULL_SETS[cache_key]


def bootstrap_interval(results: Any, confidence: float = 0.95) -> Any:
    """Point estimate and test-set sampling interval of every score of an ImageNet-O run.

    ``estimate``: the metric on the full test set (``full_score``; every seed holds the same
    value). ``lower``/``upper``: the percentile interval of the seeds' scores, each seed a
    bootstrap replicate of the fixed test set (NaN without ``bootstrap = true``); ``n``: the
    replicates used (failed seeds are left out). ``attrs`` say what the numbers are
    (:func:`result_labels`) and ``confidence``.

    The interval is the sampling uncertainty of the test-set numbers (how much they would
    move with another test set drawn like this one), not the Monte Carlo error of a mean over
    seeds, and not a statement about other models or data: more seeds make its ends more
    precise, never narrower.
    """
    import xarray as xr  # only analyses of finished results need these, never a worker's task

    from oodsim.stats.estimates import percentile_interval

    _check_confidence(confidence)
    if results.attrs.get("protocol") != PROTOCOL.name:
        raise SpecError("results", results.attrs.get("protocol"), "results of an ImageNet-O run")
    boot = bool(json.loads(results.attrs["spec"])["bootstrap"])
    ok = results["failure"].astype(str) == ""
    score = results["score"].where(ok)
    if "full_score" in results.data_vars:
        full = results["full_score"].where(ok).max("seed", skipna=True)
    elif not boot:  # results of an older version: every seed scored the full sets
        full = score.max("seed", skipna=True)
    else:
        raise SpecError(
            "results",
            "no full_score",
            "results of this version (run the spec again: the logits are cached, "
            "only the cheap scoring is redone)",
        )
    if boot:
        lower, upper = percentile_interval(score.values, confidence, axis=0)
    else:
        lower = upper = np.full(full.shape, np.nan)
    dims = full.dims
    return xr.Dataset(
        {
            "estimate": full,
            "lower": (dims, lower),
            "upper": (dims, upper),
            "n": score.count("seed"),
        },
        attrs={**result_labels(boot, confidence), "confidence": confidence},
    )


# --------------------------------------------------------------------------- the plug-in


class ImageNetOProtocol(Protocol):
    """ImageNet-O: one logits task per model (shared by all seeds), scored per seed."""

    name = "imagenet_o"
    spec_type = ImageNetOSpec

    def from_data(self, data: Mapping[str, Any], base: Path | None) -> ImageNetOSpec:
        return spec_from_data(data, base)

    def preflight(self, spec: ImageNetOSpec, store: Store) -> None:
        """Both image folders readable and non-empty, every model's weights on disk, the cache
        writable; the reads come first, so bad input leaves the cache untouched."""
        file_sets(spec)
        for ref in spec.models:
            _check_weights(ref)
        store.ensure_writable()

    def plan(self, spec: ImageNetOSpec, seed: int) -> list[Task]:
        sets = file_sets(spec)
        tasks = []
        for ref in spec.models:
            entries = tuple((LOGITS, logits_key(ref, files)) for files in sets)
            tasks.append(
                Task(
                    key=digest("imagenet_o_task", "1", {"entries": [k for _, k in entries]}),
                    entries=entries,
                    compute=partial(infer_logits, ref, sets, spec.batch_size),
                    label=f"logits of {ref.label}",
                )
            )
        return tasks

    def score(self, spec: ImageNetOSpec, seed: int, store: Store) -> SeedResult:
        id_set, ood_set = file_sets(spec)
        id_kappa, ood_kappa, full = _full_test_set(spec, store)
        scores = full
        if spec.bootstrap:
            scores = metric_array(spec, *resample(spec, seed, id_kappa, ood_kappa))[:, :, None, :]
        n_id, n_ood = len(id_set.files), len(ood_set.files)
        return SeedResult(
            seed,
            {
                "score": scores,
                "full_score": full,
                "n_id": n_id,
                "n_ood": n_ood,
                "chance": n_ood / (n_id + n_ood),
                "n_id_classes": id_set.n_classes,
            },
        )

    def layout(self, spec: ImageNetOSpec) -> Layout:
        coords = {
            "method": [d.label for d in spec.detectors],
            "metric": list(spec.metrics),
            "severity": [NO_SEVERITY],
            "model": [m.label for m in spec.models],
        }
        variables = {
            "score": ("method", "metric", "severity", "model"),
            "full_score": ("method", "metric", "severity", "model"),
            "n_id": (),
            "n_ood": (),
            "chance": (),
            "n_id_classes": (),
        }
        # what a seed is, in the results themselves (see result_attrs for the attrs)
        static = {"seed_meaning": ((), np.array(SEED_MEANING[spec.bootstrap]))}
        return Layout(coords, variables, static=static)

    def result_attrs(self, spec: ImageNetOSpec) -> dict[str, str]:
        """Labels for the results' ``attrs`` (:func:`result_labels`): what a seed is, what the
        point estimate is and which interval the seeds give."""
        return result_labels(spec.bootstrap)


PROTOCOL = ImageNetOProtocol()
