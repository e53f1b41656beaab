"""OOD test sets beyond the held-out classes: another dataset, uniform or Gaussian noise."""

from __future__ import annotations

import numpy as np

from oodsim.data.registry import ImageData, load_dataset
from oodsim.seeds import SeedStreams
from oodsim.specs import OODSetSpec


def conform(images: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """Resize (bilinear) and convert channels (gray ↔ RGB) to the in-distribution shape."""
    import torch
    import torch.nn.functional as F

    height, width, channels = shape
    if images.shape[3] != channels:
        if channels == 1:
            images = images.mean(axis=3, keepdims=True)
        else:
            images = np.repeat(images[..., :1], channels, axis=3)
    if images.shape[1:3] != (height, width):
        tensor = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32))
        tensor = F.interpolate(
            tensor.permute(0, 3, 1, 2),
            size=(height, width),
            mode="bilinear",
            align_corners=False,
            antialias=True,
        )
        images = tensor.permute(0, 2, 3, 1).numpy()
    return np.clip(np.rint(images), 0, 255).astype(np.uint8)


def ood_images(spec: OODSetSpec, shape: tuple[int, int, int], streams: SeedStreams) -> np.ndarray:
    """The uint8 images of a non-held-out OOD set, drawn from the ``ood_sampling`` stream."""
    rng = streams.rng("ood_sampling")
    if spec.kind == "uniform_noise":
        return rng.integers(0, 256, size=(spec.size, *shape), dtype=np.uint8)
    if spec.kind == "gaussian_noise":
        noise = rng.normal(128.0, 128.0, size=(spec.size, *shape))
        return np.clip(np.rint(noise), 0, 255).astype(np.uint8)
    if spec.kind == "dataset":
        assert spec.dataset is not None
        data: ImageData = load_dataset(
            spec.dataset.name, spec.dataset.root, spec.dataset.download, spec.dataset.image_size
        )
        index = np.arange(len(data.images))
        if spec.size is not None and spec.size < len(index):
            index = np.sort(rng.choice(index, size=spec.size, replace=False))
        return conform(data.images[index], shape)
    raise ValueError(f"OOD set kind {spec.kind!r} has no images of its own")
