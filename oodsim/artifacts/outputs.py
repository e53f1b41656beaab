"""Model outputs: one store kind, one writer, for every protocol.

An ``outputs`` entry holds what one model gave on one source: its ``logits`` (and, where kept,
``features``, ``labels``, sample ``index`` ...), rows aligned. An open set simulation writes the
subsets of its split in one entry (arrays named ``in_test.logits`` ...), the severity benchmark
one entry per (model, source[, class shard]), the ImageNet-O evaluation one per (model, image
list). Each protocol keys its entries in its own namespace (the key's tag), so they never
collide, and :func:`put_outputs` is the one place that writes them.

Older versions kept severity and ImageNet-O outputs under kinds of their own
(:data:`LEGACY_KINDS`); ``oodsim cache migrate`` moves them here, keys unchanged
(:func:`migrate_outputs`), and a run that finds them says so (:func:`warn_legacy_outputs`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from oodsim.store import Store
from oodsim.store.migrate import Moved

OUTPUTS = "outputs"
#: kinds older versions wrote model outputs under, each now :data:`OUTPUTS`
LEGACY_KINDS: tuple[str, ...] = ("severity_outputs", "imagenet_o_logits")


class LegacyOutputsWarning(UserWarning):
    """The store holds model outputs under a kind an older oodsim wrote."""


def check_outputs(arrays: Mapping[str, Any]) -> None:
    """Every group of arrays (``<subset>.<name>``, or plain names) has 2-D ``logits`` and the
    same number of rows in each of its arrays: what every reader of outputs relies on."""
    groups: dict[str, dict[str, Any]] = {}
    for name, array in arrays.items():
        prefix, _, short = name.rpartition(".")
        groups.setdefault(prefix, {})[short] = array
    for prefix, group in groups.items():
        where = f"{prefix}." if prefix else ""
        logits = group.get("logits")
        if logits is None or np.ndim(logits) != 2:
            raise ValueError(f"outputs need a 2-D {where}logits array, got {sorted(group)}")
        rows = {short: np.shape(a)[0] for short, a in group.items() if np.ndim(a)}
        if len(set(rows.values())) > 1:
            raise ValueError(f"outputs arrays {where}* have different numbers of rows: {rows}")


def put_outputs(
    store: Store, key: str, arrays: Mapping[str, Any], about: Mapping[str, Any], kind: str = OUTPUTS
) -> None:
    """Write one model's outputs (checked by :func:`check_outputs`) with what they are
    (``about``: at least ``describe``). ``kind`` is :data:`OUTPUTS` but for an open set
    simulation's extra OOD sets, whose ``ood_outputs`` entries keep their kind."""
    check_outputs(arrays)
    store.put(kind, key, dict(arrays), dict(about))


def legacy_kinds(store: Store) -> list[str]:
    """The legacy kinds that hold entries in ``store``."""
    return [kind for kind in LEGACY_KINDS if store.holds_kind(kind)]


def warn_legacy_outputs(store: Store) -> None:
    """Say, once per run, that outputs an older oodsim wrote are not read until migrated."""
    found = legacy_kinds(store)
    if found:
        warnings.warn(
            f"the cache {store.location} holds model outputs of an older layout "
            f"({', '.join(found)}); this run computes them again unless you first move them: "
            f"oodsim cache migrate --cache {store.location}",
            LegacyOutputsWarning,
            stacklevel=2,
        )


def migrate_outputs(store: Store) -> dict[str, Moved]:
    """Move every legacy outputs entry to :data:`OUTPUTS` (keys unchanged), by old kind."""
    return {kind: store.move_kind(kind, OUTPUTS) for kind in LEGACY_KINDS}
