"""The classifier contract the detectors rely on, as modules.

``embed(x)`` → penultimate features, ``head`` = dropout then the final linear layer, and
``forward(x) == head(embed(x))`` → logits; :meth:`Classifier.forward_with_features` gives both
in one pass (what inference uses).
"""

from __future__ import annotations

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


class ContractModel(nn.Module):
    """A user's module with ``embed`` and ``head`` seen as a :class:`Classifier`: forward is
    ``head(embed(x))`` and :meth:`forward_with_features` gives both in one pass."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    @property
    def head(self) -> nn.Module:
        return self.model.head

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.embed(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(x))

    def forward_with_features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.embed(x)
        return self.head(features), features
