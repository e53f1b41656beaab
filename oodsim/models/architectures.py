"""Classifier architectures with the contract the detectors rely on.

Every model has ``embed(x)`` → penultimate features, ``head`` = dropout then the final linear
layer, and ``forward(x) == head(embed(x))`` → logits. Inference gets logits and features in one
pass through :meth:`Classifier.forward_with_features`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class Classifier(nn.Module):
    """A feature encoder followed by dropout and a linear layer."""

    def __init__(self, encoder: nn.Module, n_features: int, n_classes: int, dropout: float):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(n_features, n_classes))

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(x))

    def forward_with_features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.embed(x)
        return self.head(features), features


def small_cnn(
    in_channels: int, n_classes: int, image_size: int, dropout: float, width: int
) -> Classifier:
    """Three conv blocks and global average pooling: trains in seconds on a CPU."""

    def block(cin: int, cout: int) -> list[nn.Module]:
        return [
            nn.Conv2d(cin, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        ]

    layers: list[nn.Module] = [*block(in_channels, width), *block(width, width)]
    if image_size >= 16:
        layers.append(nn.MaxPool2d(2))
    layers += [
        *block(width, 2 * width),
        nn.MaxPool2d(2),
        *block(2 * width, 2 * width),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    ]
    return Classifier(nn.Sequential(*layers), 2 * width, n_classes, dropout)


def resnet18(
    in_channels: int, n_classes: int, image_size: int, dropout: float, width: int
) -> Classifier:
    """torchvision ResNet-18 as in the study; a 3x3 stem without max-pool for small images."""
    # torchvision loads only for ResNet-18
    from torchvision.models import resnet18 as tv_resnet18

    net = tv_resnet18(weights=None)
    if image_size <= 64:
        net.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
        net.maxpool = nn.Identity()
    elif in_channels != 3:
        net.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
    net.fc = nn.Identity()
    return Classifier(net, 512, n_classes, dropout)


#: name → (builder, version). Bump a version when the architecture changes: it enters keys.
ARCHITECTURES: dict[str, tuple[Callable[..., Classifier], str]] = {
    "small_cnn": (small_cnn, "1"),
    "resnet18": (resnet18, "1"),
}


def build_model(
    arch: str,
    *,
    in_channels: int,
    n_classes: int,
    image_size: int,
    dropout: float,
    width: int,
    init_seed: int,
) -> Classifier:
    """Instantiate an architecture with weights drawn from the ``init`` stream."""
    builder, _ = ARCHITECTURES[arch]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        return builder(in_channels, n_classes, image_size, dropout, width)
