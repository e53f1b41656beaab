"""Weights files on disk: reading a state dict from a .pth, .pt or .safetensors file, and
checking, before any compute, that a spec's ``weights`` file is one."""

from __future__ import annotations

import contextlib
import functools
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from oodsim.errors import DataNotFoundError, SpecError


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
    file that is no checkpoint (``/etc/passwd``) names the file and the architecture, not an
    ``IndexError`` from deep inside torch or timm."""
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
