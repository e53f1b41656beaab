"""Torch modules named by ``oodsim.models`` and ``oodsim.models.architectures``, imported on
first use: a driver that only validates a spec names architectures without loading torch."""

from __future__ import annotations

from typing import Any


def torch_attribute(module: str, name: str) -> Any:
    """``Classifier`` or ``ContractModel`` for a module's ``__getattr__``: imported (with
    torch) on first use, not when a spec names an architecture."""
    if name in ("Classifier", "ContractModel"):
        # torch loads when a classifier is first needed, not when a spec names one
        from oodsim.models import classifier

        return getattr(classifier, name)
    raise AttributeError(f"module {module!r} has no attribute {name!r}")
