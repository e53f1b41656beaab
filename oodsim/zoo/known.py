"""The model names timm and torchvision know, for checking a spec's models without importing
either library: each imports torch, seconds before a spec's error could be reported.

A library is asked itself the first time its names are needed for its installed version; its
answer is then recorded (a JSON file per library and version, :func:`record_folder`) and read
by later checks. A record is the library's own answer, so a spec is checked as the library
would check it: a library already imported in this process (a script may have registered a
model) is always asked itself, and a record is written only from a library imported fresh. A
record that cannot be read or written is no error: the library is asked instead.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from oodsim.store.defaults import user_cache
from oodsim.store.fs import read_json, write_replacing

#: the libraries whose names are known here (the zoo's prefixes that name a library)
LIBRARIES = ("timm", "torchvision")
#: bump when what a record holds changes: it is part of the record's file name
RECORD_FORMAT = "1"
#: the largest record read (timm 1.0 accepts ~1,600 names with ~1,800 tags: ~60 kB)
RECORD_LIMIT = 8 << 20


@attrs.frozen
class KnownNames:
    """What a library knows: ``listed``, the model names it lists (the names a close match
    is drawn from), and ``tags``, every model name it accepts (deprecated aliases too) →
    that model's pretrained tags (timm) or weights (torchvision), in the library's order."""

    listed: tuple[str, ...]
    tags: Mapping[str, tuple[str, ...]]


_RECORDS: dict[Path, KnownNames] = {}  # records read in this process (a record never changes)


def record_folder() -> Path:
    """Where records are kept: ``oodsim-model-names`` beside the user cache (not inside it:
    that folder may be a store, :func:`oodsim.store.user_cache`)."""
    return user_cache().with_name("oodsim-model-names")


def known_names(library: str) -> KnownNames:
    """The model names ``library`` (one of :data:`LIBRARIES`) knows: from the record of its
    installed version when it is not imported yet and one was recorded, else from the library
    (which is then imported; a fresh import's answer is recorded)."""
    if library not in LIBRARIES:
        raise ValueError(f"no names of {library!r}; known libraries: {', '.join(LIBRARIES)}")
    fresh = library not in sys.modules
    path = _record_path(library)
    if fresh and path is not None:
        recorded = _read(path)
        if recorded is not None:
            return recorded
    names = _ask(library)
    if fresh and path is not None:
        _write(path, library, names)
    return names


def _record_path(library: str) -> Path | None:
    """The record of the installed version of ``library``; None when it is not installed
    (asking it then fails as an import would)."""
    try:
        version = importlib.metadata.version(library)
    except importlib.metadata.PackageNotFoundError:
        return None
    return record_folder() / f"{library}-{version}-v{RECORD_FORMAT}.json"


def _ask(library: str) -> KnownNames:
    if library == "timm":
        # timm (and with it torch) loads only when no record answers
        import timm
        from timm.models import get_deprecated_models

        listed = tuple(timm.list_models())
        tags: dict[str, list[str]] = {name: [] for name in (*listed, *get_deprecated_models())}
        for name in timm.list_pretrained():  # "<model>.<tag>", in the library's order
            model, _, tag = name.partition(".")
            tags.setdefault(model, []).append(tag)
        return KnownNames(listed, {name: tuple(found) for name, found in tags.items()})
    # torchvision (and with it torch) loads only when no record answers
    import torchvision.models as tvm

    listed = tuple(tvm.list_models(module=tvm))
    weights = {name: tuple(tvm.get_model_weights(name).__members__) for name in listed}
    return KnownNames(listed, weights)


def _read(path: Path) -> KnownNames | None:
    if path in _RECORDS:
        return _RECORDS[path]
    try:
        data = read_json(path, RECORD_LIMIT)
    except (OSError, ValueError):
        return None
    names = _from_data(data)
    if names is not None:
        _RECORDS[path] = names
    return names


def _from_data(data: Any) -> KnownNames | None:
    """The names of a record's data; None for data of any other shape."""
    if not isinstance(data, dict):
        return None
    listed, tags = data.get("listed"), data.get("tags")
    if not (isinstance(listed, list) and all(isinstance(n, str) for n in listed)):
        return None
    if not isinstance(tags, dict) or not all(
        isinstance(found, list) and all(isinstance(t, str) for t in found)
        for found in tags.values()
    ):
        return None
    return KnownNames(tuple(listed), {name: tuple(found) for name, found in tags.items()})


def _write(path: Path, library: str, names: KnownNames) -> None:
    data = {
        "library": library,
        "listed": list(names.listed),
        "tags": {name: list(found) for name, found in names.tags.items()},
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_replacing(path, lambda tmp: tmp.write_text(json.dumps(data), encoding="utf-8"))
    except OSError:  # a read-only home: every check asks the library, as before
        return
    _RECORDS[path] = names


__all__ = ["LIBRARIES", "RECORD_FORMAT", "KnownNames", "known_names", "record_folder"]
