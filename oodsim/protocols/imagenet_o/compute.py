"""The engine's task of the ImageNet-O protocol: the 1000-way logits of the ID and OOD files
per model, stored as ``outputs`` entries keyed in the namespace ``imagenet_o_logits``
(:func:`infer_logits`)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import attrs
import numpy as np

from oodsim import zoo
from oodsim.artifacts.outputs import OUTPUTS, put_outputs
from oodsim.data.imagenet_classes import imagenet_o_wnids
from oodsim.errors import SpecError
from oodsim.keys import digest
from oodsim.models.tensors import device as model_device
from oodsim.protocols.base import SeedFailed
from oodsim.protocols.imagenet_o.folders import (
    id_files,
    imagenet_classifier,
    infer_files,
    ood_files,
)
from oodsim.protocols.imagenet_o.recipe import FILES, LOGITS, LOGITS_VERSION
from oodsim.protocols.imagenet_o.spec import ImageNetOSpec
from oodsim.store import Store
from oodsim.zoo import ModelRef


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
                    loaded.append(imagenet_classifier(ref))
                except SpecError as error:
                    raise SeedFailed(f"model {ref.label}: {error}") from None
            logits = infer_files(loaded[0], files.files, batch_size, model_device())
            if logits.shape != (len(files.files), 1000) or not np.isfinite(logits).all():
                raise SeedFailed(
                    f"model {ref.label} gave non-finite or misshapen logits {logits.shape} on "
                    f"the {files.side} images"
                )
            put_outputs(
                store,
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

        store.ensure(OUTPUTS, key, compute)


def check_weights(ref: ModelRef) -> None:
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
