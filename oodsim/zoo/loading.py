"""Loading a zoo model with its preprocessing (:func:`load_model`): logits and penultimate
features in one pass, from local weights or seeded random ones."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import torch
from torch import nn

from oodsim.data.imagenet_classes import imagenet1k_wnids
from oodsim.errors import DataNotFoundError, SpecError
from oodsim.zoo.checkpoint_files import read_state_dict, reading_weights
from oodsim.zoo.names import ModelRef, split_name
from oodsim.zoo.preprocessing import (
    Preprocessing,
    timm_preprocessing,
    torchvision_preprocessing,
)
from oodsim.zoo.weights import find_timm_weights, find_torchvision_weights, missing_weights


class TimmFeatures(nn.Module):
    """A timm model: ``forward_features`` once, then the head with and without pre-logits."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def forward_with_features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.net.forward_features(x)
        features = self.net.forward_head(hidden, pre_logits=True).flatten(1)
        return self.net.forward_head(hidden), features


class SplitHead(nn.Module):
    """A torchvision model with its final linear layer taken out: ``classifier(body(x))``."""

    def __init__(self, body: nn.Module, classifier: nn.Linear) -> None:
        super().__init__()
        self.body, self.classifier = body, classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.body(x).flatten(1))

    def forward_with_features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.body(x).flatten(1)
        return self.classifier(features), features


def split_final_linear(net: nn.Module) -> nn.Module:
    """Replace a torchvision model's last ``nn.Linear`` by identity; return the split model."""
    linear = [(name, m) for name, m in net.named_modules() if isinstance(m, nn.Linear)]
    if not linear:
        raise SpecError("model", type(net).__name__, "a classifier whose last layer is nn.Linear")
    name, classifier = linear[-1]
    parent_name, _, child = name.rpartition(".")
    parent = net.get_submodule(parent_name) if parent_name else net
    parent._modules[child] = nn.Identity()
    return SplitHead(net, classifier)


@attrs.frozen(eq=False)
class LoadedModel:
    """A classifier in eval mode with ``forward_with_features``, and its preprocessing.

    Unpacks as ``model, preprocessing = load_model(...)``.
    """

    model: Any
    preprocessing: Preprocessing
    n_classes: int
    class_wnids: tuple[str, ...] | None
    source: str  # where the weights came from
    split: Any = None  # ``trained`` models: the open set split (OpenSetSplit) of its seed

    def __iter__(self) -> Iterator[Any]:
        return iter((self.model, self.preprocessing))


def _imagenet_wnids(n_classes: int) -> tuple[str, ...] | None:
    if n_classes != 1000:
        return None
    return imagenet1k_wnids()


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Random weights drawn from ``seed`` without touching the caller's global torch RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _load_timm(ref: ModelRef) -> LoadedModel:
    # timm is optional (the zoo extra): imported only for timm: names
    import timm

    _, arch, tag = split_name(ref.name)
    full = f"{arch}.{tag}" if tag else arch
    kwargs: dict[str, Any] = {}
    if ref.num_classes:
        kwargs["num_classes"] = ref.num_classes
    cfg = timm.models.get_pretrained_cfg(full)
    if ref.image_size and cfg is not None and cfg.fixed_input_size:
        kwargs["img_size"] = ref.image_size
    source = "random init"
    file = Path(ref.weights).expanduser() if ref.weights else None
    if file is None and ref.pretrained:
        file, looked = find_timm_weights(arch, tag)
        if file is None:
            raise missing_weights(ref.name, looked)
    with _seeded(ref.init_seed):
        if file is not None:
            if not file.is_file():
                raise DataNotFoundError(f"weights file {file} does not exist")
            with reading_weights(file, full):
                net = timm.create_model(
                    full, pretrained=True, pretrained_cfg_overlay={"file": str(file)}, **kwargs
                )
            source = str(file)
        else:
            net = timm.create_model(full, pretrained=False, **kwargs)
    net.eval()
    preprocessing = timm_preprocessing(net, ref.image_size)
    return LoadedModel(
        TimmFeatures(net).eval(),
        preprocessing,
        net.num_classes,
        _imagenet_wnids(net.num_classes),
        source,
    )


def _load_torchvision(ref: ModelRef) -> LoadedModel:
    # torchvision loads only for torchvision: names
    from torchvision.models import get_model

    _, arch, tag = split_name(ref.name)
    weights, cached, looked = find_torchvision_weights(arch, tag)
    source = "random init"
    with _seeded(ref.init_seed):
        if ref.weights:
            path = Path(ref.weights).expanduser()
            if not path.is_file():
                raise DataNotFoundError(f"weights file {path} does not exist")
            with reading_weights(path, arch):
                state = read_state_dict(path)
                net = get_model(arch, weights=None, num_classes=ref.num_classes or 1000)
                last = [n for n, m in net.named_modules() if isinstance(m, nn.Linear)][-1]
                rows = state.get(f"{last}.weight")
                if rows is not None and rows.shape[0] != (ref.num_classes or 1000):
                    net = get_model(arch, weights=None, num_classes=int(rows.shape[0]))
                net.load_state_dict(state)
            source = str(path)
        elif ref.pretrained:
            if cached is None:
                raise missing_weights(ref.name, looked)
            if ref.num_classes and ref.num_classes != len(weights.meta["categories"]):
                raise SpecError(
                    "num_classes", ref.num_classes, "the weights' classes, or pretrained = false"
                )
            net = get_model(arch, weights=weights)  # the file is cached: torchvision reads it
            source = str(cached)
        else:
            net = get_model(arch, weights=None, num_classes=ref.num_classes or 1000)
    split = split_final_linear(net.eval()).eval()
    n_classes = split.classifier.out_features
    return LoadedModel(
        split,
        torchvision_preprocessing(weights, ref.image_size),
        n_classes,
        _imagenet_wnids(n_classes),
        source,
    )


def load_model(ref: ModelRef | str, **options: Any) -> LoadedModel:
    """Load a zoo classifier and its preprocessing; ``options`` are :class:`ModelRef` fields.

    Raises :class:`~oodsim.errors.DataNotFoundError` when pretrained weights are not on disk.
    ``trained`` CNNs belong to one seed of an open set experiment: the severity protocol loads
    them (:func:`oodsim.protocols.severity.compute.load_model`).
    """
    if not isinstance(ref, ModelRef):
        ref = ModelRef(name=ref, **options)
    elif options:
        ref = attrs.evolve(ref, **options)
    loader = {"timm": _load_timm, "torchvision": _load_torchvision}.get(ref.prefix)
    if loader is None:
        raise SpecError(
            "model",
            ref.name,
            "a timm: or torchvision: name",
            "a 'trained' CNN belongs to one seed of its open set experiment: load it with "
            "oodsim.protocols.severity.compute.load_model(ref, seed, store)",
        )
    loaded = loader(ref)
    loaded.model.eval()
    return loaded


def create_model(
    name: str, *, pretrained: bool = True, **options: Any
) -> tuple[Any, Preprocessing]:
    """``(model, preprocessing)`` for a ``timm:``/``torchvision:`` name (see :func:`load_model`)."""
    loaded = load_model(ModelRef(name=name, pretrained=pretrained, **options))
    return loaded.model, loaded.preprocessing
