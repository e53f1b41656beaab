"""Content keys: sha256 over a canonical JSON encoding (a Merkle DAG over specs and artifacts).

A key is ``sha256(json([tag, schema_version, component_version, fields]))`` with sorted keys, no
NaN and no whitespace. Nested specs enter their parent by their own key, so a parent's key changes
exactly when one of its inputs does. Fields marked ``key=False`` in attrs metadata (execution
settings such as data roots) never enter a key. Python's ``hash()`` is never used: it changes with
``PYTHONHASHSEED``.

:func:`digest` returns a :class:`Key`: the hex digest, carrying the JSON text it is the sha256 of.
A store entry records those inputs, so that anyone can check, without the spec, that the entry's
key derives from them (:func:`derived_key`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

import attrs

SCHEMA_VERSION = 1


def no_key(**kwargs: Any) -> dict[str, Any]:
    """attrs field metadata marking an execution setting that must not enter the key."""
    return {"key": False, **kwargs}


def canonical(value: Any) -> Any:
    """Convert a value into plain JSON types, replacing nested specs by their keys."""
    if attrs.has(type(value)):
        return {"$key": content_key(value)}
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot key a non-finite float: {value!r}")
        return value
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    if hasattr(value, "item") and getattr(value, "shape", None) == ():  # numpy scalar
        return canonical(value.item())
    raise TypeError(f"cannot key a value of type {type(value).__name__}: {value!r}")


def key_fields(obj: Any) -> dict[str, Any]:
    """The fields of an attrs object that enter its key, canonicalized."""
    return {
        f.name: canonical(getattr(obj, f.name))
        for f in attrs.fields(type(obj))
        if f.metadata.get("key", True)
    }


class Key(str):
    """A content key (a sha256 hex digest, equal to and usable as that ``str``) that carries
    :attr:`payload`, the canonical JSON text it is the digest of. Pickles with its payload;
    whatever builds a new string from it (slicing, formatting) gets a plain ``str``."""

    payload: str

    def __new__(cls, payload: str) -> Key:
        key = super().__new__(cls, hashlib.sha256(payload.encode("utf-8")).hexdigest())
        key.payload = payload
        return key

    def __reduce__(self) -> tuple[type[Key], tuple[str]]:
        return Key, (self.payload,)

    @property
    def inputs(self) -> list[Any]:
        """``[tag, schema_version, component_version, fields]``: what the key is derived from,
        as plain JSON values (nested specs by their keys)."""
        return json.loads(self.payload)


def _encoded(record: Any) -> str:
    """The canonical JSON text of a key's inputs: sorted keys, no whitespace, no NaN."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=False)


def digest(tag: str, version: str | int, fields: Mapping[str, Any]) -> Key:
    """The sha256 hex digest of a tagged, versioned record, as a :class:`Key`."""
    return Key(_encoded([tag, SCHEMA_VERSION, str(version), canonical(fields)]))


def derived_key(inputs: Any) -> Key:
    """The key that ``inputs`` (a :attr:`Key.inputs`, e.g. read back from JSON) derive:
    ``digest(*inputs)`` for the inputs of a key :func:`digest` made. Raises ``ValueError``
    (or ``TypeError``) for what is not the inputs of a key: not a list of a tag, an integer
    schema version, a version string and a mapping of fields, or not plain JSON values."""
    if not (
        isinstance(inputs, list)
        and len(inputs) == 4
        and isinstance(inputs[0], str)
        and type(inputs[1]) is int
        and isinstance(inputs[2], str)
        and isinstance(inputs[3], dict)
    ):
        raise ValueError("not [tag, schema version, version, fields]")
    return Key(_encoded(inputs))


def content_key(obj: Any) -> str:
    """Key of an attrs spec: tagged by its class's ``TAG`` and ``VERSION`` class attributes.

    A spec class may add fields with a ``key_extra()`` method (e.g. a registered loader's
    version, or parameters that enter the key only when there are any, so specs written before
    they existed keep their keys); it applies wherever the spec is keyed, nested ones too."""
    cls = type(obj)
    tag = getattr(cls, "TAG", cls.__name__)
    version = getattr(cls, "VERSION", "1")
    fields = key_fields(obj)
    extra = getattr(obj, "key_extra", None)
    if extra is not None:
        fields.update(extra())
    return digest(tag, version, fields)
