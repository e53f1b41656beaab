"""A notice for plug-ins edited under the same version.

A script's architecture or dataset loader enters keys by its name and ``version`` only: the
docs say "bump the version when it returns other data", but nothing noticed when a builder or
loader was edited and the version was not bumped, and the cache silently served results of
the old code. The store now keeps, for each plug-in name and version, the fingerprint of its
source as it was when the cache first ran it (``<cache>/.plugin-sources/``). A run whose
plug-in source differs from the recorded one warns (:class:`PluginChangedWarning`) with the
fix; keys do not change, so a harmless edit (a comment, a rename) costs nothing.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import marshal
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from oodsim.store.fs import read_json, write_replacing

#: the folder of the records in a cache root (a dot name: not one of the store's kinds)
FOLDER = ".plugin-sources"
#: the largest record read
RECORD_LIMIT = 1 << 12


class PluginChangedWarning(UserWarning):
    """A registered builder or loader whose source changed under the same version."""


def source_fingerprint(function: Callable[..., Any]) -> str | None:
    """A sha256 (16 hex characters) of ``function``'s source text, or of its compiled code
    where the source is not available (a notebook cell); None when it has neither."""
    try:
        text = inspect.getsource(function).encode()
    except (OSError, TypeError):
        code = getattr(function, "__code__", None)
        if code is None:
            return None
        text = marshal.dumps(code)
    return hashlib.sha256(text).hexdigest()[:16]


def check_sources(root: Path, plugins: Iterable[tuple[str, str, str, Callable[..., Any]]]) -> None:
    """For each ``(kind, name, version, function)``: record its source fingerprint in the
    cache at ``root`` when none is recorded for that version, else warn if it differs."""
    for kind, name, version, function in plugins:
        current = source_fingerprint(function)
        if current is None:
            continue
        path = root / FOLDER / f"{kind}-{name}-{version}.json"
        try:
            recorded = read_json(path, RECORD_LIMIT).get("source")
        except FileNotFoundError:
            _record(path, current)
            continue
        except (OSError, ValueError, AttributeError):
            continue  # an unreadable record: no notice rather than a wrong one
        if recorded != current:
            warnings.warn(
                f"the {kind} {name!r} (version {version!r}) has changed since this cache "
                f"first computed with it: its cached entries are reused as they are. If the "
                f"change alters what it returns, register it with another version (e.g. "
                f'version="{_next(version)}") to compute them again; if it does not, ignore '
                f"this (remove {path} to silence it)",
                PluginChangedWarning,
                stacklevel=3,
            )


def _record(path: Path, fingerprint: str) -> None:
    """Write the record atomically; a cache that cannot take it just gets no notice later."""
    text = json.dumps({"source": fingerprint})
    try:
        path.parent.mkdir(exist_ok=True)
        write_replacing(path, lambda tmp: tmp.write_text(text))
    except OSError:
        pass


def _next(version: str) -> str:
    return str(int(version) + 1) if version.isdigit() else f"{version}.1"
