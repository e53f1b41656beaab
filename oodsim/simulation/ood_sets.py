"""OOD test sets beyond the held-out classes: another dataset, uniform or Gaussian noise.

:func:`noise_images` is oodsim's one noise generator: open set noise sets (:func:`ood_images`)
and severity noise sources draw from it, each with its own random stream.
"""

from __future__ import annotations

import numpy as np

from oodsim.seeds import SeedStreams
from oodsim.specs import OODSetSpec


def conform(images: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """Resize (bilinear) and convert channels (gray ↔ RGB) to the in-distribution shape."""
    # torch loads only when images are resized: reading specs and noise needs none
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


NOISE_KINDS = ("uniform_noise", "gaussian_noise")


def noise_images(
    kind: str,
    n: int,
    shape: tuple[int, int, int],
    rng: np.random.Generator,
    *,
    low: int = 0,
    high: int = 255,
    mean: float = 128.0,
    std: float = 128.0,
) -> np.ndarray:
    """``n`` uint8 noise images of ``shape`` (H, W, C) drawn from ``rng``.

    ``uniform_noise``: every pixel uniform on the integers ``low..high`` (inclusive);
    ``gaussian_noise``: N(mean, std²) rounded and clipped to [0, 255]. The defaults are the
    study's U(0, 255) and N(128, 128).
    """
    size = (n, *shape)
    if kind == "uniform_noise":
        return rng.integers(int(low), int(high) + 1, size=size, dtype=np.uint8)
    if kind == "gaussian_noise":
        return np.clip(np.rint(rng.normal(mean, std, size=size)), 0, 255).astype(np.uint8)
    raise ValueError(f"noise kind {kind!r} is not one of {NOISE_KINDS}")


def ood_images(spec: OODSetSpec, shape: tuple[int, int, int], streams: SeedStreams) -> np.ndarray:
    """The uint8 images of a non-held-out OOD set, drawn from the ``ood_sampling`` stream."""
    rng = streams.rng("ood_sampling")
    if spec.kind in NOISE_KINDS:
        assert spec.size is not None
        return noise_images(spec.kind, spec.size, shape, rng)
    if spec.kind == "dataset":
        assert spec.dataset is not None
        data = spec.dataset.load()
        index = np.arange(len(data.images))
        if spec.size is not None and spec.size < len(index):
            index = np.sort(rng.choice(index, size=spec.size, replace=False))
        return conform(data.images[index], shape)
    raise ValueError(f"OOD set kind {spec.kind!r} has no images of its own")
