"""The ImageNet-O evaluation (Hendrycks et al., "Natural Adversarial Examples").

Restrict a 1000-way ImageNet classifier to the 200 ImageNet-O classes, take the softmax over
those 200 logits, score each image by −max softmax (the anomaly score) and report the area
under the precision-recall curve with ImageNet-O images as positives (trapezoidal
``auc(recall, precision)`` over ``precision_recall_curve``). The ID set is the ImageNet
validation images of the 200 classes (10,000), the OOD set ImageNet-O's 2,000 images; chance
AUPR is the OOD share, 2,000 / 12,000 ≈ 16.7 %.

Inputs: logits (:func:`evaluate_logits`, or ``.npy`` files), or the two image folders and a
zoo model name (:func:`evaluate_folders`), or a spec of several models (:func:`run_imagenet_o`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import xarray as xr

from oodsim import metrics as _metrics
from oodsim.data.imagenet_classes import imagenet1k_wnids, imagenet_o_wnids
from oodsim.errors import DataNotFoundError, SpecError, UnknownNameError
from oodsim.models.zoo import ModelRef
from oodsim.specs import read_toml


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
    """Maximum softmax probability per row, computed stably in float64."""
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return 1.0 / np.exp(shifted).sum(axis=-1)


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


def evaluate_logits(
    id_logits: np.ndarray,
    ood_logits: np.ndarray,
    *,
    id_classes: Sequence[str] | None = None,
    class_wnids: Sequence[str] | None = None,
) -> dict[str, float]:
    """ImageNet-O metrics from ID and OOD logits.

    Logits are ``(n, 1000)`` ImageNet-1k outputs in the sorted-wnid order of timm's list
    (pass ``class_wnids`` for another order or label space), or ``(n, 200)`` already
    restricted. ``id_classes`` defaults to the bundled 200 ImageNet-O classes. Returns
    ``aupr`` (OOD positive, score −max softmax, trapezoid; the paper's metric), ``auroc``
    (ID positive), ``fpr95``, ``chance`` (the OOD share: the AUPR of a random detector),
    ``n_id`` and ``n_ood``.
    """
    classes = imagenet_o_wnids() if id_classes is None else tuple(sorted(set(id_classes)))
    id_kappa = max_softmax(_as_subset_logits(id_logits, classes, class_wnids, "id_logits"))
    ood_kappa = max_softmax(_as_subset_logits(ood_logits, classes, class_wnids, "ood_logits"))
    kappa = np.concatenate([id_kappa, ood_kappa])
    is_ood = np.r_[np.zeros(id_kappa.size, bool), np.ones(ood_kappa.size, bool)]
    values = _metrics.evaluate(kappa, is_ood, ("aupr_out", "auroc", "fpr95"), context="ImageNet-O")
    return {
        "aupr": float(values["aupr_out"]),
        "auroc": float(values["auroc"]),
        "fpr95": float(values["fpr95"]),
        "chance": ood_kappa.size / kappa.size,
        "n_id": int(id_kappa.size),
        "n_ood": int(ood_kappa.size),
    }


# --------------------------------------------------------------------------- from image folders


def _image_files(folder: Path) -> list[Path]:
    from oodsim.data.builtin import IMAGE_SUFFIXES

    return sorted(
        p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
    )


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
) -> dict[str, Any]:
    """ImageNet-O metrics of a zoo model from the two image folders.

    ``model`` is a ``timm:``/``torchvision:`` name (or a :class:`ModelRef`); its own
    preprocessing reads every image. Returns :func:`evaluate_logits`'s dict plus ``model``,
    ``n_id_classes`` and ``weights`` (where they came from). ``save_logits``: a folder for
    ``id_logits.npy`` / ``ood_logits.npy`` (re-evaluate later with :func:`evaluate_logits`).
    """
    import torch

    from oodsim.models.zoo import file_batches, infer_tensors, load_model

    classes = imagenet_o_wnids() if id_classes is None else tuple(sorted(set(id_classes)))
    in_files, present = id_files(id_root, classes)
    out_files = ood_files(ood_root)
    if isinstance(model, ModelRef):
        ref = model
    else:
        ref = ModelRef(name=model, pretrained=pretrained, weights=weights, image_size=image_size)
    loaded = load_model(ref)
    if loaded.class_wnids is None:
        raise SpecError(
            "model", ref.name, "an ImageNet-1k classifier (1,000 outputs in sorted-wnid order)"
        )
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    logits = [
        infer_tensors(loaded.model, file_batches(files, loaded.preprocessing, batch_size), device)[
            0
        ]
        for files in (in_files, out_files)
    ]
    if save_logits is not None:
        folder = Path(save_logits)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "id_logits.npy", logits[0])
        np.save(folder / "ood_logits.npy", logits[1])
    result: dict[str, Any] = evaluate_logits(
        logits[0], logits[1], id_classes=classes, class_wnids=loaded.class_wnids
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


def _models(value: Any) -> tuple[ModelRef, ...]:
    return tuple(ModelRef(name=v) if isinstance(v, str) else v for v in value)


@attrs.frozen(kw_only=True)
class ImageNetOSpec:
    """Several zoo models evaluated on ImageNet-O (``specs/imagenet_o.toml``)."""

    name: str = "imagenet_o"
    id_root: str
    ood_root: str
    models: tuple[ModelRef, ...] = attrs.field(converter=_models)
    batch_size: int = 64

    def __attrs_post_init__(self) -> None:
        labels = [m.label for m in self.models]
        if not labels or len(set(labels)) != len(labels):
            raise SpecError("models", labels, "a non-empty list with distinct labels")
        for ref in self.models:
            if ref.prefix == "trained":
                raise SpecError("models", ref.name, "timm: or torchvision: ImageNet classifiers")


def load_imagenet_o_spec(path: str | Path, *, check_roots: bool = True) -> ImageNetOSpec:
    """Read ``specs/imagenet_o.toml``-style TOML; ``check_roots`` requires both folders."""
    path = Path(path)
    data = read_toml(path)
    allowed = {f.name for f in attrs.fields(ImageNetOSpec)}
    for key in data:
        if key not in allowed:
            raise UnknownNameError("imagenet_o spec field", key, allowed)
    models = []
    for value in data.pop("models", ()):
        table = {"name": value} if isinstance(value, str) else dict(value)
        fields = {f.name for f in attrs.fields(ModelRef)}
        for key in table:
            if key not in fields:
                raise UnknownNameError("models field", key, fields)
        models.append(ModelRef(**table))
    for key in ("id_root", "ood_root"):
        if key in data:
            root = Path(str(data[key])).expanduser()
            data[key] = str(root if root.is_absolute() else path.parent / root)
    try:
        spec = ImageNetOSpec(models=models, **data)
    except TypeError as error:
        raise SpecError("imagenet_o spec", str(error), "id_root, ood_root and models") from None
    if check_roots:
        for key in ("id_root", "ood_root"):
            if not Path(getattr(spec, key)).is_dir():
                raise DataNotFoundError(f"{key} = {getattr(spec, key)!r} does not exist")
    return spec


def run_imagenet_o(spec: ImageNetOSpec, *, device: str | None = None) -> xr.Dataset:
    """Evaluate every model of a spec; ``score`` over (model, metric) with chance beside AUPR."""
    rows = [
        evaluate_folders(
            spec.id_root, spec.ood_root, ref, batch_size=spec.batch_size, device=device
        )
        for ref in spec.models
    ]
    metrics = ["aupr", "chance", "auroc", "fpr95"]
    return xr.Dataset(
        {
            "score": (("model", "metric"), np.array([[r[m] for m in metrics] for r in rows])),
            "n_id": ("model", np.array([r["n_id"] for r in rows])),
            "n_ood": ("model", np.array([r["n_ood"] for r in rows])),
        },
        coords={"model": [r["model"] for r in rows], "metric": metrics},
        attrs={
            "protocol": "imagenet_o",
            "experiment": spec.name,
            "n_id_classes": int(rows[0]["n_id_classes"]) if rows else 0,
        },
    )
