"""Packages whose names live in their submodules, each imported on first use: a spec that
names a protocol's or the zoo's things loads what it reads, not torch with them."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(
    package: str, homes: Mapping[str, str], own: Mapping[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` of ``package``: a name of ``homes`` is read from the
    submodule it maps to (imported on first use); ``own`` is the package's ``globals()``."""

    def getattr_(name: str) -> Any:
        if name in homes:
            return getattr(importlib.import_module(f"{package}.{homes[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def dir_() -> list[str]:
        return sorted({*own, *homes})

    return getattr_, dir_
