"""Classifier architectures with the contract the detectors rely on.

Every model has ``embed(x)`` → penultimate features, ``head`` = dropout then the final linear
layer, and ``forward(x) == head(embed(x))`` → logits (:mod:`oodsim.models.classifier`).
Importing this module registers the built-ins and the ``timm:`` family in
:mod:`oodsim.models.registry` without importing torch (a driver that validates a spec needs
their names and signatures only: torch costs ~1 s and 600 MB); torch loads when a model is
built. :func:`build_model` builds any registered architecture and checks the contract.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from oodsim.models.lazy import torch_attribute
from oodsim.models.registry import (
    BUILTINS,
    TIMM_PREFIX,
    ArchitectureError,
    builtin_architecture,
    get_architecture,
    register_prefix,
)
from oodsim.models.timm_backbone import timm_architecture

if TYPE_CHECKING:
    from torch import nn

    from oodsim.models.classifier import Classifier, ContractModel

__all__ = [
    "BUILTINS",
    "Classifier",
    "ContractModel",
    "build_model",
    "check_contract",
    "resnet18",
    "small_cnn",
    "wrn40_2",
]

register_prefix(TIMM_PREFIX, timm_architecture)


def __getattr__(name: str) -> Any:
    return torch_attribute(__name__, name)


@builtin_architecture("small_cnn")
def small_cnn(
    in_channels: int, n_classes: int, image_size: int, dropout: float, width: int
) -> Classifier:
    """Three conv blocks and global average pooling: trains in seconds on a CPU."""
    # torch loads when a model is built
    from torch import nn

    from oodsim.models.classifier import Classifier

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


@builtin_architecture("resnet18")
def resnet18(in_channels: int, n_classes: int, image_size: int, dropout: float) -> Classifier:
    """torchvision ResNet-18 as in the study; a 3x3 stem without max-pool for small images."""
    # torch and torchvision load when a model is built (torchvision only for ResNet-18)
    from torch import nn
    from torchvision.models import resnet18 as tv_resnet18

    from oodsim.models.classifier import Classifier

    net = tv_resnet18(weights=None)
    if image_size <= 64:
        net.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
        net.maxpool = nn.Identity()
    elif in_channels != 3:
        net.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
    net.fc = nn.Identity()
    return Classifier(net, 512, n_classes, dropout)


@builtin_architecture("wrn40_2")
def wrn40_2(
    in_channels: int, n_classes: int, dropout: float, depth: int = 40, widen: int = 2
) -> Classifier:
    """Wide ResNet-40-2 (Zagoruyko & Komodakis), OpenOOD's CIFAR backbone: three groups of
    (depth − 4) / 6 pre-activation blocks of 16k, 32k, 64k channels; dropout before the head."""
    if depth < 10 or (depth - 4) % 6:
        raise ArchitectureError(f"wrn40_2: depth must be 6n + 4 >= 10, got {depth}")
    if widen < 1:
        raise ArchitectureError(f"wrn40_2: widen must be >= 1, got {widen}")
    # torch loads when a model is built
    from torch import nn

    from oodsim.models.classifier import Classifier
    from oodsim.models.wide_block import WideBlock

    n = (depth - 4) // 6
    widths = [16, 16 * widen, 32 * widen, 64 * widen]
    layers: list[nn.Module] = [nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False)]
    for group, stride in zip(range(3), (1, 2, 2), strict=True):
        for i in range(n):
            cin = widths[group] if i == 0 else widths[group + 1]
            layers.append(WideBlock(cin, widths[group + 1], stride if i == 0 else 1))
    layers += [
        nn.BatchNorm2d(widths[3]),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    ]
    return Classifier(nn.Sequential(*layers), widths[3], n_classes, dropout)


def build_model(
    arch: str,
    *,
    in_channels: int,
    n_classes: int,
    image_size: int,
    dropout: float,
    width: int,
    init_seed: int,
    params: Mapping[str, Any] | None = None,
) -> nn.Module:
    """Instantiate a registered architecture with weights drawn from the ``init`` stream; a
    model without ``forward_with_features`` is wrapped in :class:`ContractModel`."""
    # torch loads when a model is built
    import torch
    from torch import nn

    from oodsim.models.classifier import ContractModel

    architecture = get_architecture(arch)
    standard = {
        "in_channels": in_channels,
        "n_classes": n_classes,
        "image_size": image_size,
        "dropout": dropout,
        "width": width,
    }
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        model = architecture.call(standard, dict(params or {}))
    if not isinstance(model, nn.Module):
        raise ArchitectureError(
            f"architecture {arch!r}: the builder returned {type(model).__name__}, not a "
            "torch.nn.Module"
        )
    missing = [
        name
        for name, ok in (
            ("embed(x)", callable(getattr(model, "embed", None))),
            ("head", isinstance(getattr(model, "head", None), nn.Module)),
        )
        if not ok
    ]
    if missing:
        raise ArchitectureError(
            f"architecture {arch!r}: the model has no {' and no '.join(missing)}; return "
            "oodsim.models.architectures.Classifier(encoder, n_features, n_classes, dropout) "
            "or a module with embed(x) -> features and head: features -> logits"
        )
    if not callable(getattr(model, "forward_with_features", None)):
        model = ContractModel(model)
    return model


def check_contract(
    model: nn.Module, arch: str, shape: tuple[int, int, int], n_classes: int
) -> None:
    """Run two blank images (C, H, W = ``shape``) through ``model`` in eval mode: logits of
    ``n_classes`` columns, 2-D features, and ``forward(x) == head(embed(x))``, or one clear
    :class:`ArchitectureError` (before any training, in the driver)."""
    # torch loads when a model is checked
    import torch

    x = torch.zeros((2, *shape))
    model.eval()
    try:
        with torch.no_grad():
            logits, features = model.forward_with_features(x)
            plain = model(x)
    except Exception as error:  # a user's model: any failure is reported as the contract's
        raise ArchitectureError(
            f"architecture {arch!r} fails on inputs of shape {tuple(x.shape)}: "
            f"{type(error).__name__}: {error}"
        ) from error
    if tuple(logits.shape) != (2, n_classes) or features.ndim != 2 or len(features) != 2:
        raise ArchitectureError(
            f"architecture {arch!r}: for 2 inputs it gives logits of shape "
            f"{tuple(logits.shape)} and features of shape {tuple(features.shape)}; expected "
            f"(2, {n_classes}) and (2, n_features)"
        )
    if not torch.allclose(plain, logits, atol=1e-5, rtol=1e-4):
        raise ArchitectureError(
            f"architecture {arch!r}: forward(x) differs from head(embed(x)); the detectors "
            "read logits and features as one pass of the same network"
        )
