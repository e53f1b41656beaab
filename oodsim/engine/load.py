"""The front door for spec files: :func:`load` reads any spec and returns its protocol's type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oodsim.errors import SpecError
from oodsim.protocols import DEFAULT_PROTOCOL, available, get_protocol
from oodsim.specs.converter import read_toml


def load(path: str | Path) -> Any:
    """Read a spec file (TOML) of any protocol.

    The top-level key ``protocol = "open_set" | "severity" | "imagenet_o"`` (or the name of a
    registered or installed protocol) picks the spec type (default ``"open_set"``, so older
    experiment files keep working); relative paths in the file resolve against its folder.
    """
    path = Path(path)
    data = read_toml(path)
    name = data.pop("protocol", DEFAULT_PROTOCOL)
    names = available()
    if not isinstance(name, str) or name not in names:
        raise SpecError("protocol", name, "one of " + ", ".join(map(repr, names)))
    return get_protocol(name).from_data(data, path.parent)


def as_spec(spec: Any) -> Any:
    """A spec object as it is, or the spec of a file path."""
    return load(spec) if isinstance(spec, str | Path) else spec
