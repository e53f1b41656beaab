"""Logits and penultimate features in one pass, in batches."""

from __future__ import annotations

import numpy as np
import torch

from oodsim.models.architectures import Classifier
from oodsim.models.tensors import to_tensor

VERSION = "1"  # bump when inference changes: it enters output keys


def infer(
    model: Classifier,
    images: np.ndarray,
    *,
    mean: np.ndarray,
    std: np.ndarray,
    batch_size: int = 512,
    device: str = "cpu",
) -> tuple[np.ndarray, np.ndarray]:
    """(logits, features) as float32 arrays for uint8 images (N, H, W, C), model in eval mode."""
    model.eval().to(device)
    logits, features = [], []
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            x = to_tensor(images[start : start + batch_size], mean, std, device)
            z, h = model.forward_with_features(x)
            logits.append(z.float().cpu().numpy())
            features.append(h.float().cpu().numpy())
    n_classes = model.head[-1].out_features
    n_features = model.head[-1].in_features
    if not logits:
        return np.zeros((0, n_classes), np.float32), np.zeros((0, n_features), np.float32)
    return np.concatenate(logits), np.concatenate(features)
