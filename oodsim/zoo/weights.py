"""Where pretrained weights are found: only local files (a ``weights=`` file, the torch hub
checkpoints, the Hugging Face cache); with none, the error lists every place looked."""

from __future__ import annotations

import contextlib
import functools
import os
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from oodsim.errors import DataNotFoundError, SpecError
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


def check_weights_file(path: str | os.PathLike[str], model: str) -> None:
    """Before any compute: that ``path`` (an existing file) loads as a state dict of tensors
    (a .pth, .pt or .safetensors checkpoint); one :class:`SpecError` about ``weights``
    otherwise (:func:`reading_weights`). A missing file is left to the key's digest. Whether
    the tensors fit ``model`` is known only when it is built (at load). Remembered per path,
    size and mtime within a process; torch checkpoints are memory-mapped, not read whole."""
    file = Path(path).expanduser()
    if file.is_file():
        stat = file.stat()
        _check_weights(str(file.resolve()), stat.st_size, stat.st_mtime_ns, model)


@functools.lru_cache(maxsize=64)
def _check_weights(path: str, size: int, mtime_ns: int, model: str) -> None:
    with reading_weights(Path(path), model):
        state = read_state_dict(Path(path), mmap=True)
        if not any(isinstance(value, torch.Tensor) for value in state.values()):
            raise ValueError("it holds no tensors")


def read_state_dict(path: Path, mmap: bool = False) -> dict[str, Any]:
    """A state dict from a .safetensors/.pth/.pt file, unwrapping common checkpoint layouts;
    ``mmap``: a torch checkpoint of the zip format is memory-mapped, not read whole."""
    if path.suffix == ".safetensors":
        # safetensors is optional: needed only for .safetensors weights files
        from safetensors.torch import load_file

        return load_file(str(path))
    mapped = mmap and zipfile.is_zipfile(path)  # the legacy format cannot be mapped
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=mapped)
    for key in ("state_dict", "model", "model_state_dict"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    return {k.removeprefix("module."): v for k, v in state.items()}


@contextlib.contextmanager
def reading_weights(path: Path, arch: str) -> Iterator[None]:
    """Turn any failure to read ``path`` as ``arch``'s weights into one :class:`SpecError`: a
    file that is no checkpoint (``/etc/passwd``) used to end in ``IndexError: list index out
    of range`` deep inside torch or timm."""
    try:
        yield
    except (SpecError, DataNotFoundError):
        raise
    except Exception as error:  # torch, safetensors and timm raise many kinds on a bad file
        raise SpecError(
            "weights",
            str(path),
            f"a checkpoint of {arch} (a .pth, .pt or .safetensors state dict)",
            f"Reading it failed: {type(error).__name__}: {str(error)[:200]}",
        ) from error
