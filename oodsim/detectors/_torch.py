"""Helpers for the detectors that run the network (ODIN, MC dropout); torch is imported lazily."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from oodsim.detectors._checks import DetectorInputError, integer

if TYPE_CHECKING:
    import torch


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Put every module in eval mode and restore each module's own flag afterwards."""
    flags = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for module, training in flags:
            module.training = training


def device_of(model: torch.nn.Module) -> torch.device:
    """Where the model's parameters live (CPU for a parameter-free module)."""
    # detectors stay importable without torch: logit κ need none
    import torch

    for tensor in model.parameters():
        return tensor.device
    return torch.device("cpu")


def check_model_inputs(name: str, model: object, inputs: object, batch_size: object) -> int:
    """Validate the model contract's inputs; return the batch size."""
    # detectors stay importable without torch: logit κ need none
    import torch

    if not isinstance(model, torch.nn.Module):
        raise DetectorInputError(
            f"detector {name!r} needs model=torch.nn.Module returning logits, "
            f"got {type(model).__name__}"
        )
    if not (isinstance(inputs, torch.Tensor) and inputs.is_floating_point() and inputs.ndim >= 2):
        raise DetectorInputError(
            f"detector {name!r} needs inputs= a normalized float tensor (N, C, H, W)"
        )
    return integer(name, "batch_size", batch_size, 1)


def row_batches(n: int, batch_size: int) -> Iterator[slice]:
    """Consecutive row slices of at most ``batch_size`` rows."""
    for start in range(0, n, batch_size):
        yield slice(start, min(start + batch_size, n))
