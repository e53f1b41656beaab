"""The residual block of a wide ResNet (:func:`oodsim.models.architectures.wrn40_2`)."""

from __future__ import annotations

import torch
from torch import nn


class WideBlock(nn.Module):
    """Pre-activation residual block of a wide ResNet (BN-ReLU-conv twice, 1x1 shortcut when
    the shape changes)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.bn1, self.bn2 = nn.BatchNorm2d(cin), nn.BatchNorm2d(cout)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.shortcut = (
            None
            if cin == cout and stride == 1
            else nn.Conv2d(cin, cout, 1, stride=stride, bias=False)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(x))
        skip = x if self.shortcut is None else self.shortcut(out)
        out = self.conv1(out)
        out = self.conv2(torch.relu(self.bn2(out)))
        return out + skip
