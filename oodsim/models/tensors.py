"""From uint8 images to normalized float tensors, in batches."""

from __future__ import annotations

import numpy as np
import torch


def device() -> str:
    """Where models run: ``"cuda"`` when torch sees a GPU, else ``"cpu"``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def channel_stats(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std of uint8 images (N, H, W, C) scaled to [0, 1]."""
    scaled = images.reshape(-1, images.shape[-1]).astype(np.float64) / 255.0
    return scaled.mean(axis=0).astype(np.float32), np.maximum(scaled.std(axis=0), 1e-3).astype(
        np.float32
    )


def to_tensor(
    images: np.ndarray, mean: np.ndarray, std: np.ndarray, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Normalized float32 tensor (N, C, H, W)."""
    array = np.ascontiguousarray(images)
    if not array.flags.writeable:  # a loaded dataset's rows are read-only: torch shares none
        array = array.copy()
    tensor = torch.from_numpy(array).to(device)
    tensor = tensor.permute(0, 3, 1, 2).float().div_(255.0)
    mean_t = torch.as_tensor(mean, device=device).view(1, -1, 1, 1)
    std_t = torch.as_tensor(std, device=device).view(1, -1, 1, 1)
    return (tensor - mean_t) / std_t
