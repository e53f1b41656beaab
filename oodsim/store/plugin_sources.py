"""A notice for plug-ins edited under the same version.

A script's architecture, dataset loader or detector enters keys by its name and ``version``
only, never by its source. The store keeps, for each plug-in kind, name and version, the
fingerprint of its function's source as it was when the cache first ran it
(``<cache>/.plugin-sources/``, written once a run has finished its seeds). A
run whose plug-in source differs from the recorded one reuses the cached results and warns
(:class:`PluginChangedWarning`): one notice that names the function and where it is defined,
and says how to choose (another version to compute again, or nothing to keep the cached
results). Keys do not change, so a harmless edit (a comment, a rename) costs nothing. The
engine passes every plug-in it ships (:meth:`oodsim.engine.work.Shipped.sources`); the kind
is only a word of the notice.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import marshal
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from oodsim.store.entries import Store

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


def check_sources(
    store: Store, plugins: Iterable[tuple[str, str, str, Callable[..., Any]]]
) -> dict[str, str]:
    """For each ``(kind, name, version, function)``: warn if the source fingerprint recorded
    in ``store`` for that version differs. The fingerprints that no record holds
    yet, by the record's name: the run writes them (:func:`record_sources`) once it has
    computed with them, so that a run that fails first writes nothing."""
    unrecorded: dict[str, str] = {}
    for kind, name, version, function in plugins:
        current = source_fingerprint(function)
        if current is None:
            continue
        record = f"{FOLDER}/{kind}-{name}-{version}.json"
        try:
            recorded = store.backend.read_record(record, RECORD_LIMIT).get("source")
        except FileNotFoundError:
            unrecorded[record] = current
            continue
        except (OSError, ValueError, AttributeError):
            continue  # an unreadable record: no notice rather than a wrong one
        if recorded != current:
            warnings.warn(
                f"the {kind} {name!r} (version {version!r}) has changed since this cache "
                f"first computed with it: the body of {describe(function)} is not the one "
                f"this cache's entries were computed with under the same name and version, "
                f"and they are reused as they are (keys do not change). To compute them again "
                f'with the new body, register it with another version (e.g. version="'
                f'{_next(version)}"); to keep using the cached results, change nothing '
                f"(remove {store.location}/{record} to silence this notice)",
                PluginChangedWarning,
                stacklevel=3,
            )
    return unrecorded


def record_sources(store: Store, unrecorded: dict[str, str]) -> None:
    """Write the fingerprints :func:`check_sources` found unrecorded (a store that cannot take
    them just gives no notice later)."""
    for record, fingerprint in unrecorded.items():
        with contextlib.suppress(OSError):
            store.backend.write_record(record, {"source": fingerprint})


def describe(function: Callable[..., Any]) -> str:
    """``function``'s qualified name and where it is defined (``f (script.py, line 12)``;
    the line of its first decorator, if any), as a notice names it."""
    name = getattr(function, "__qualname__", None) or repr(function)
    code = getattr(function, "__code__", None)
    if code is None:
        return name
    return f"{name} ({code.co_filename}, line {code.co_firstlineno})"


def _next(version: str) -> str:
    return str(int(version) + 1) if version.isdigit() else f"{version}.1"
