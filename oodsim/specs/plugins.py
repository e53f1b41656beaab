"""Which registered plug-ins a spec names: read from its fields, for shipping to workers.

A field that holds a registry name, or a list of them (a dataset, an architecture, a detector,
metrics) says so in its
attrs metadata (:func:`plugin`). :func:`plugin_names` walks a spec of any protocol, nested
specs included, and collects those names. The engine ships the driver-registered plug-ins
among them to the workers (a worker never ran the script that registered them), so a protocol
does not list them itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

#: the kinds of registry a spec field can name
PLUGIN_KINDS = ("detector", "dataset", "architecture", "metric")
_METADATA = "oodsim_plugin"


def plugin(kind: str, **metadata: Any) -> dict[str, Any]:
    """attrs field metadata: the field's value is a name in the ``kind`` registry."""
    if kind not in PLUGIN_KINDS:
        raise ValueError(f"plugin kind {kind!r} is not one of {PLUGIN_KINDS}")
    return {**metadata, _METADATA: kind}


def plugin_names(spec: Any) -> dict[str, tuple[str, ...]]:
    """The registry names ``spec`` holds, by kind (each once, in the order met)."""
    found: dict[str, dict[str, None]] = {kind: {} for kind in PLUGIN_KINDS}
    _collect(spec, found)
    return {kind: tuple(names) for kind, names in found.items()}


def _collect(value: Any, found: dict[str, dict[str, None]]) -> None:
    if attrs.has(type(value)):
        for field in attrs.fields(type(value)):
            item = getattr(value, field.name)
            kind = field.metadata.get(_METADATA)
            if kind is not None and isinstance(item, str) and item:
                found[kind][item] = None
            elif kind is not None and isinstance(item, list | tuple):  # a list of names
                found[kind].update(dict.fromkeys(x for x in item if isinstance(x, str) and x))
            else:
                _collect(item, found)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, found)
    elif isinstance(value, Mapping):
        for item in value.values():
            _collect(item, found)
