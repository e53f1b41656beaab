"""Logits and penultimate features in one pass, in batches."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

from oodsim.models.classifier import Classifier
from oodsim.models.tensors import to_tensor
from oodsim.progress_notes import note_progress


def infer_batches(
    model: torch.nn.Module,
    batches: Iterable[torch.Tensor],
    device: str = "cpu",
    total: int | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The one inference loop: (logits, features) float32 blocks of preprocessed batches, in
    one forward pass per batch (``model.forward_with_features``), model in eval mode.
    ``total``: how many batches there are, for the progress note (when known)."""
    logits, features = [], []
    model.eval().to(device)
    with torch.no_grad():
        for number, batch in enumerate(batches, start=1):
            note_progress("inference, batch", number, total)
            z, h = model.forward_with_features(batch.to(device))
            logits.append(z.float().cpu().numpy())
            features.append(h.float().cpu().numpy())
    return logits, features


def infer(
    model: Classifier,
    images: np.ndarray,
    *,
    mean: np.ndarray,
    std: np.ndarray,
    batch_size: int = 512,
    device: str = "cpu",
) -> tuple[np.ndarray, np.ndarray]:
    """(logits, features) as float32 arrays for uint8 images (N, H, W, C)."""
    batches = (
        to_tensor(images[start : start + batch_size], mean, std, device)
        for start in range(0, len(images), batch_size)
    )
    logits, features = infer_batches(model, batches, device, -(-len(images) // batch_size))
    if not logits:
        last = [m for m in model.head.modules() if isinstance(m, torch.nn.Linear)][-1]
        n_classes, n_features = last.out_features, last.in_features
        return np.zeros((0, n_classes), np.float32), np.zeros((0, n_features), np.float32)
    return np.concatenate(logits), np.concatenate(features)
