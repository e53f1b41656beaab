"""The training recipe of the study: SGD, cosine annealing, early stopping on D_in_val loss."""

from __future__ import annotations

import math
import time

import attrs
import numpy as np
import torch
import torch.nn.functional as F

from oodsim.errors import OodsimError
from oodsim.models.classifier import Classifier
from oodsim.models.optimizer import SGD, cosine_lr
from oodsim.models.tensors import to_tensor
from oodsim.progress_notes import note_progress
from oodsim.seeds import SeedStreams
from oodsim.simulation.augment import augment_batch
from oodsim.specs import TrainingSpec


class TrainingDiverged(OodsimError):
    """The loss became NaN/inf: the seed is recorded as failed, not averaged."""


@attrs.frozen
class TrainingLog:
    """What happened during training, stored in the checkpoint's meta data."""

    epochs: int
    best_epoch: int
    train_loss: tuple[float, ...]
    val_loss: tuple[float, ...]
    seconds: float


def _mean_loss(model: Classifier, x: torch.Tensor, y: torch.Tensor, batch: int) -> float:
    model.eval()
    total = 0.0
    with torch.no_grad():
        for start in range(0, len(x), batch):
            logits = model(x[start : start + batch])
            total += F.cross_entropy(logits, y[start : start + batch], reduction="sum").item()
    return total / max(len(x), 1)


def train(
    model: Classifier,
    train_images: np.ndarray,
    train_labels: np.ndarray,
    val_images: np.ndarray,
    val_labels: np.ndarray,
    *,
    mean: np.ndarray,
    std: np.ndarray,
    spec: TrainingSpec,
    hflip: bool,
    streams: SeedStreams,
    device: str = "cpu",
) -> TrainingLog:
    """Train ``model`` in place and leave it holding the weights of the best val-loss epoch."""
    started = time.perf_counter()
    model.to(device)
    x_train = to_tensor(train_images, mean, std, device)
    y_train = torch.as_tensor(train_labels, device=device)
    x_val = to_tensor(val_images, mean, std, device)
    y_val = torch.as_tensor(val_labels, device=device)
    order = torch.Generator().manual_seed(streams.torch_seed("data_order"))
    augmentation = torch.Generator().manual_seed(streams.torch_seed("augmentation"))
    optimizer = SGD(model.parameters(), spec.lr, spec.momentum, spec.weight_decay)
    best = (math.inf, 0, {k: v.clone() for k, v in model.state_dict().items()})
    train_losses, val_losses = [], []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(streams.torch_seed("dropout"))  # training-time dropout masks
        for epoch in range(spec.max_epochs):
            note_progress("training, epoch", epoch + 1, spec.max_epochs)
            model.train()
            permutation = torch.randperm(len(x_train), generator=order).to(device)
            total = 0.0
            for start in range(0, len(x_train), spec.batch_size):
                index = permutation[start : start + spec.batch_size]
                batch = augment_batch(x_train[index], spec.augment, hflip, augmentation)
                loss = F.cross_entropy(model(batch), y_train[index])
                if not torch.isfinite(loss):
                    raise TrainingDiverged(f"training loss became {loss.item()} in epoch {epoch}")
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total += loss.item() * len(index)
            optimizer.lr = cosine_lr(optimizer.lr, epoch + 1, spec.max_epochs)
            train_losses.append(total / len(x_train))
            val_loss = _mean_loss(model, x_val, y_val, 4 * spec.batch_size)
            if not math.isfinite(val_loss):
                raise TrainingDiverged(f"validation loss became {val_loss} in epoch {epoch}")
            val_losses.append(val_loss)
            if val_loss < best[0]:
                best = (val_loss, epoch, {k: v.clone() for k, v in model.state_dict().items()})
            elif epoch - best[1] >= spec.patience:
                break
    model.load_state_dict(best[2])
    model.eval()
    return TrainingLog(
        len(train_losses),
        best[1],
        tuple(train_losses),
        tuple(val_losses),
        time.perf_counter() - started,
    )
