"""One model on the two image folders, in this process (:func:`evaluate_folders`), or the
recipe on ``.npy`` logit files (:func:`evaluate_logit_files`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from oodsim import zoo
from oodsim.data.builtin import IMAGE_SUFFIXES
from oodsim.data.imagenet_classes import imagenet_o_wnids
from oodsim.errors import DataNotFoundError, SpecError
from oodsim.models.tensors import device as model_device
from oodsim.protocols.imagenet_o.recipe import check_bootstrap, check_seed, evaluate_logits
from oodsim.results import OutputError, check_writable
from oodsim.store.fs import described, what_is, write_replacing
from oodsim.zoo import ModelRef


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


def imagenet_classifier(ref: ModelRef) -> zoo.LoadedModel:
    """A zoo model that must be an ImageNet-1k classifier (1,000 outputs, sorted wnids)."""
    loaded = zoo.load_model(ref)
    if loaded.class_wnids is None:
        raise SpecError(
            "model", ref.name, "an ImageNet-1k classifier (1,000 outputs in sorted-wnid order)"
        )
    return loaded


def infer_files(
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
    check_options(
        batch_size=batch_size, save_logits=save_logits, n_bootstrap=n_bootstrap, seed=seed
    )
    classes = imagenet_o_wnids() if id_classes is None else tuple(sorted(set(id_classes)))
    in_files, present = id_files(id_root, classes)
    out_files = ood_files(ood_root)
    if isinstance(model, ModelRef):
        ref = model
    else:
        ref = ModelRef(name=model, pretrained=pretrained, weights=weights, image_size=image_size)
    loaded = imagenet_classifier(ref)
    device = device or model_device()
    logits = [infer_files(loaded, files, batch_size, device) for files in (in_files, out_files)]
    if save_logits is not None:
        save_logit_files(save_logits, logits[0], logits[1])
    result: dict[str, Any] = evaluate_logits(
        logits[0],
        logits[1],
        id_classes=classes,
        class_wnids=loaded.class_wnids,
        n_bootstrap=n_bootstrap,
        seed=seed,
    )
    return {**result, "model": ref.label, "n_id_classes": len(present), "weights": loaded.source}


#: the files of ``save_logits`` (``--save-logits``): ID, then ImageNet-O logits
LOGIT_FILES = ("id_logits.npy", "ood_logits.npy")


def check_options(
    *,
    batch_size: int = 64,
    save_logits: str | Path | None = None,
    n_bootstrap: int = 0,
    seed: int = 0,
    fields: Mapping[str, str] | None = None,
) -> None:
    """The options of :func:`evaluate_folders`, checked before any file is listed or any model
    loaded; an error names the option as ``fields`` calls it (the command line: its flags)."""
    fields = fields or {}
    check_bootstrap(n_bootstrap, fields.get("n_bootstrap", "n_bootstrap"))
    check_seed(seed, n_bootstrap, fields.get("seed", "seed"))
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise SpecError(
            fields.get("batch_size", "batch_size"), batch_size, "a number of images >= 1"
        )
    if save_logits is not None:
        check_logits_folder(save_logits, fields.get("save_logits", "save_logits"))


def check_logits_folder(folder: str | Path, option: str = "save_logits") -> None:
    """``folder`` can take :data:`LOGIT_FILES`: a folder, or a path where one can be made, in
    which files can be created and neither name is a folder (:class:`OutputError` if not)."""
    folder = Path(folder)
    found = what_is(folder)
    if found not in ("folder", "missing") and not folder.is_dir():  # a link to a folder is one
        raise OutputError(
            f"cannot write the logits of {option} to {folder}: it is {described(found)}, not a "
            "folder; choose another folder"
        )
    for name in LOGIT_FILES:
        if what_is(folder / name) == "folder":
            raise OutputError(
                f"cannot write the logits of {option} to {folder / name}: it is a folder"
            )
    check_writable(folder / LOGIT_FILES[0], f"the logits of {option}")


def save_logit_files(folder: str | Path, id_logits: np.ndarray, ood_logits: np.ndarray) -> None:
    """Write :data:`LOGIT_FILES` into ``folder``, each into a temporary file renamed into place:
    a link at either name is replaced, never written through."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, array in zip(LOGIT_FILES, (id_logits, ood_logits), strict=True):
        write_replacing(folder / name, partial(_write_npy, array))


def _write_npy(array: np.ndarray, path: Path) -> None:
    """``np.save`` into a new file (``np.save`` of a path would append ``.npy`` to its name)."""
    with open(path, "xb") as handle:
        np.save(handle, array)


def evaluate_logit_files(
    id_logits: str | Path, ood_logits: str | Path, **options: Any
) -> dict[str, Any]:
    """:func:`evaluate_logits` on two ``.npy`` files of saved logits."""
    check_options(n_bootstrap=options.get("n_bootstrap", 0), seed=options.get("seed", 0))
    arrays = [
        _read_logits(Path(path), name)
        for path, name in ((id_logits, "id_logits"), (ood_logits, "ood_logits"))
    ]
    return evaluate_logits(arrays[0], arrays[1], **options)


def _read_logits(path: Path, name: str) -> np.ndarray:
    """The array of a ``.npy`` file (never unpickled); a :class:`SpecError` naming ``name`` for
    a file that is not a ``.npy`` file of numbers."""
    if not path.is_file():  # (a link to a file is one)
        if not path.exists():
            raise DataNotFoundError(f"logits file {path} does not exist")
        found = described(what_is(path.resolve()))  # a folder, a FIFO (never opened: it waits)
        raise SpecError(name, str(path), "a .npy array file (numpy.save)", f"It is {found}")
    with open(path, "rb") as handle:
        if handle.read(len(np.lib.format.MAGIC_PREFIX)) != np.lib.format.MAGIC_PREFIX:
            raise SpecError(
                name,
                str(path),
                "a .npy array file (numpy.save)",
                "It is not one: it does not start with the .npy header",
            )
        handle.seek(0)
        try:
            return np.load(handle, allow_pickle=False)
        except ValueError as error:
            if "Object arrays" in str(error):
                hint = "It holds Python objects, which oodsim never unpickles"
            else:
                hint = f"It cannot be read: {error}"
            raise SpecError(name, str(path), "a .npy array of numbers", hint) from None
