"""Where pretrained weights are found: only local files (a ``weights=`` file, the torch hub
checkpoints, the Hugging Face cache); with none, the error lists every place looked."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from oodsim.errors import DataNotFoundError
from oodsim.zoo.names import torchvision_weights_enum


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache, resolved from the environment at call time."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "huggingface" / "hub"


def torch_checkpoint_dir() -> Path:
    """torch hub's checkpoint folder (``$TORCH_HOME/hub/checkpoints``)."""
    return Path(torch.hub.get_dir()) / "checkpoints"


def _hf_cached(repo_id: str, filenames: Sequence[str]) -> tuple[Path | None, list[str]]:
    """A file of ``repo_id`` in the HF cache (no network), and the places looked at."""
    cache = hf_cache_dir()
    looked = [f"{cache}/models--{repo_id.replace('/', '--')}/snapshots/*/{f}" for f in filenames]
    try:
        # huggingface_hub is optional: without it the HF cache is not searched
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None, looked
    for filename in filenames:
        found = try_to_load_from_cache(repo_id, filename, cache_dir=cache)
        if isinstance(found, str) and Path(found).is_file():
            return Path(found), looked
    return None, looked


def find_timm_weights(arch: str, tag: str) -> tuple[Path | None, list[str]]:
    """Cached pretrained weights of a timm model: HF cache first, then torch hub checkpoints."""
    # timm is optional (the zoo extra): imported only for timm: names
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(f"{arch}.{tag}" if tag else arch)
    if cfg is None:
        raise DataNotFoundError(
            f"timm has no pretrained weights for {arch}{'.' + tag if tag else ''}"
        )
    looked: list[str] = []
    if cfg.hf_hub_id:
        names = [cfg.hf_hub_filename] if cfg.hf_hub_filename else []
        found, looked = _hf_cached(
            cfg.hf_hub_id, names or ["model.safetensors", "pytorch_model.bin"]
        )
        if found:
            return found, looked
    if cfg.url:
        path = torch_checkpoint_dir() / Path(cfg.url.split("?")[0]).name
        looked.append(str(path))
        if path.is_file():
            return path, looked
    return None, looked


def find_torchvision_weights(arch: str, tag: str) -> tuple[Any, Path | None, list[str]]:
    """(weights enum value, cached checkpoint or None, places looked at)."""
    enum = torchvision_weights_enum(arch)
    weights = enum[tag] if tag else enum.DEFAULT
    path = torch_checkpoint_dir() / Path(weights.url.split("?")[0]).name
    return weights, (path if path.is_file() else None), [str(path)]


def missing_weights(name: str, looked: Sequence[str]) -> DataNotFoundError:
    """The error for pretrained weights that are not on disk, listing where oodsim looked."""
    return DataNotFoundError(
        f"no local pretrained weights for {name!r}; looked in: "
        + "; ".join(looked)
        + ". oodsim never downloads: fetch the weights on a machine with internet access (e.g. "
        "`timm.create_model(..., pretrained=True)` / torchvision `weights=`), copy the cache "
        "($TORCH_HOME, $HF_HOME) here, or pass weights=<file>; pretrained=false for random weights"
    )
