"""Batch augmentation (horizontal flip, rotation, scaling) driven by an explicit generator."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from oodsim.specs import AugmentSpec


def augment_batch(
    x: torch.Tensor, spec: AugmentSpec, hflip: bool, generator: torch.Generator
) -> torch.Tensor:
    """Randomly flip, rotate (± ``spec.rotation`` degrees) and scale a normalized batch."""
    if not spec.enabled:
        return x
    n = x.shape[0]
    draws = torch.rand(n, 3, generator=generator).to(x.device)
    angle = (draws[:, 0] * 2 - 1) * math.radians(spec.rotation)
    low, high = spec.scale
    scale = low + draws[:, 1] * (high - low)
    flip = torch.where((draws[:, 2] < 0.5) & hflip, -1.0, 1.0)
    cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
    theta = torch.stack(
        [
            torch.stack([cos * flip, -sin, torch.zeros_like(cos)], 1),
            torch.stack([sin * flip, cos, torch.zeros_like(cos)], 1),
        ],
        1,
    )
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    # Padding with the per-batch minimum keeps the background of dark-background images.
    background = x.amin(dim=(0, 2, 3), keepdim=True)
    return (
        F.grid_sample(x - background, grid, align_corners=False, padding_mode="zeros") + background
    )
