"""The preprocessing each model was trained with (:class:`Preprocessing`: timm's data
config, torchvision's transforms, the open set normalization) and batches of images through it."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import numpy as np
import torch
from torch import nn

from oodsim.data.image_files import opened_image
from oodsim.models.inference import infer_batches
from oodsim.models.tensors import to_tensor
from oodsim.simulation.ood_sets import conform

INTERPOLATIONS = ("nearest", "bilinear", "bicubic")


@attrs.frozen(kw_only=True, eq=False)
class Preprocessing:
    """From uint8 images to the normalized float tensors a model expects.

    ``kind="resize_crop"`` (zoo models): resize (an int = shorter side, keeping the aspect
    ratio; a pair = exact size), centre-crop to ``crop_size``, scale to [0, 1], normalize.
    ``kind="conform"`` (open set CNNs): :func:`oodsim.simulation.ood_sets.conform` to the training
    shape (bilinear, gray ↔ RGB), then the training normalization. ``pil_transform`` is the
    library's own PIL pipeline, used for image files so they match its evaluation exactly.
    """

    kind: str = attrs.field(validator=attrs.validators.in_(("resize_crop", "conform")))
    crop_size: tuple[int, int] = attrs.field(converter=lambda v: (int(v[0]), int(v[1])))
    resize_size: int | tuple[int, int] | None = None
    interpolation: str = attrs.field(
        default="bilinear", validator=attrs.validators.in_(INTERPOLATIONS)
    )
    mean: tuple[float, ...] = attrs.field(converter=lambda v: tuple(float(x) for x in v))
    std: tuple[float, ...] = attrs.field(converter=lambda v: tuple(float(x) for x in v))
    channels: int = 3
    pil_transform: Callable[[Any], Any] | None = None

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """(H, W, C) of the tensors the model sees."""
        return (*self.crop_size, self.channels)

    def describe(self) -> dict[str, Any]:
        """Plain-data form for meta data and docs."""
        return {
            "kind": self.kind,
            "crop_size": list(self.crop_size),
            "resize_size": self.resize_size,
            "interpolation": self.interpolation,
            "mean": list(self.mean),
            "std": list(self.std),
            "channels": self.channels,
        }

    def arrays(self, images: np.ndarray) -> torch.Tensor:
        """uint8 images (N, H, W, C) → float32 tensor (N, C, H', W'), normalized."""
        images = np.asarray(images)
        if images.ndim != 4 or images.dtype != np.uint8:
            raise ValueError(
                f"expected uint8 images (N, H, W, C), got {images.dtype} {images.shape}"
            )
        if self.kind == "conform":
            return to_tensor(conform(images, self.input_shape), self.mean, self.std)
        # torchvision loads only for zoo preprocessing
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms import functional as TF

        if images.shape[3] != self.channels:
            images = conform(images, (*images.shape[1:3], self.channels))
        tensor = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2)
        if self.resize_size is not None:
            size = (
                [self.resize_size] if isinstance(self.resize_size, int) else list(self.resize_size)
            )
            mode = InterpolationMode(self.interpolation)
            tensor = TF.resize(tensor, size, interpolation=mode, antialias=True)
        tensor = TF.center_crop(tensor, list(self.crop_size)).float().div_(255.0)
        mean = torch.tensor(self.mean).view(1, -1, 1, 1)
        std = torch.tensor(self.std).view(1, -1, 1, 1)
        return (tensor - mean) / std

    def image(self, image: Any) -> torch.Tensor:
        """One PIL image → float32 tensor (C, H, W), with the library's pipeline when known."""
        mode = "L" if self.channels == 1 else "RGB"
        image = image.convert(mode)
        if self.pil_transform is not None:
            return self.pil_transform(image)
        pixels = np.asarray(image, dtype=np.uint8)
        return self.arrays(pixels.reshape(1, *pixels.shape[:2], self.channels))[0]


def timm_preprocessing(net: Any, image_size: int | None) -> Preprocessing:
    # timm is optional (the zoo extra): imported only for timm: names
    from timm.data import create_transform, resolve_data_config

    config = resolve_data_config({}, model=net)
    if image_size:
        config["input_size"] = (3, image_size, image_size)
    _, height, width = config["input_size"]
    crop_pct = config.get("crop_pct") or 1.0
    mode = config.get("crop_mode", "center")
    if height == width and mode == "center":
        resize: int | tuple[int, int] = math.floor(height / crop_pct)
    else:  # timm resizes both sides for non-square inputs and for "squash"
        resize = (math.floor(height / crop_pct), math.floor(width / crop_pct))
    if mode == "squash":
        resize = (height, width)
    interpolation = config.get("interpolation", "bilinear")
    return Preprocessing(
        kind="resize_crop",
        crop_size=(height, width),
        resize_size=resize,
        interpolation=interpolation if interpolation in INTERPOLATIONS else "bilinear",
        mean=config["mean"],
        std=config["std"],
        pil_transform=create_transform(**config),
    )


def torchvision_preprocessing(weights: Any, image_size: int | None) -> Preprocessing:
    # torchvision loads only for torchvision: names
    from torchvision.transforms._presets import ImageClassification

    preset = weights.transforms()
    crop, resize = int(preset.crop_size[0]), int(preset.resize_size[0])
    if image_size:
        crop, resize = image_size, round(image_size * resize / crop)
        preset = ImageClassification(
            crop_size=crop,
            resize_size=resize,
            mean=preset.mean,
            std=preset.std,
            interpolation=preset.interpolation,
        )
    return Preprocessing(
        kind="resize_crop",
        crop_size=(crop, crop),
        resize_size=resize,
        interpolation=preset.interpolation.value,
        mean=preset.mean,
        std=preset.std,
        pil_transform=preset,
    )


def infer_tensors(
    model: nn.Module, batches: Iterator[torch.Tensor], device: str = "cpu"
) -> tuple[np.ndarray, np.ndarray]:
    """(logits, features) float32 for preprocessed batches (the one inference loop of
    :func:`oodsim.models.inference.infer_batches`); empty input gives (0, 0) arrays."""
    logits, features = infer_batches(model, batches, device)
    if not logits:
        return np.zeros((0, 0), np.float32), np.zeros((0, 0), np.float32)
    return np.concatenate(logits), np.concatenate(features)


def array_batches(
    images: np.ndarray, preprocessing: Preprocessing, batch_size: int = 256
) -> Iterator[torch.Tensor]:
    """Preprocessed batches of uint8 images (N, H, W, C) held in memory."""
    for start in range(0, len(images), batch_size):
        yield preprocessing.arrays(images[start : start + batch_size])


def file_batches(
    files: Sequence[str | os.PathLike[str]], preprocessing: Preprocessing, batch_size: int = 64
) -> Iterator[torch.Tensor]:
    """Preprocessed batches of image files, each read with the model's own PIL pipeline."""
    for start in range(0, len(files), batch_size):
        tensors = []
        for path in files[start : start + batch_size]:
            with opened_image(path) as image:
                tensors.append(preprocessing.image(image))
        yield torch.stack(tensors)
