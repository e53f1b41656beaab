"""The checksum manifest of a results store: how oodsim recognises results it wrote, and the
files it may therefore replace or delete (only those)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oodsim.store.digests import file_paths, meta_digest
from oodsim.store.fs import owned, read_json, what_is
from oodsim.store.layout import META_DIGEST

#: The checksum manifest of a results store, written last: its presence and intact content
#: are how oodsim recognises results it wrote (and may replace).
MANIFEST = "oodsim-results.json"
MANIFEST_FORMAT = "oodsim-results"
MANIFEST_VERSION = 1
#: The largest manifest (or zarr group record) read: it lists every file of the results.
MANIFEST_LIMIT = 64 << 20


def read_manifest(folder: Path) -> dict[str, Any] | str | None:
    """The manifest of a results store, None when there is none, or why it cannot be trusted."""
    try:
        record = read_json(folder / MANIFEST, MANIFEST_LIMIT)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        return f"{MANIFEST} cannot be read ({error})"
    if (
        not isinstance(record, dict)
        or record.get("format") != MANIFEST_FORMAT
        or not isinstance(record.get("files"), dict)
    ):
        return f"{MANIFEST} is not an oodsim results manifest"
    if record.get(META_DIGEST) != meta_digest(record):
        return f"{MANIFEST} was altered (its own checksum does not match)"
    return record


def legacy_key(folder: Path) -> str | None:
    """The spec key of results written before manifests (a zarr group whose attributes oodsim
    wrote, holding only zarr files and a ``score`` array), or None when ``folder`` is not one."""
    try:
        group = read_json(folder / "zarr.json", MANIFEST_LIMIT)
        attributes = group.get("attributes", {})
        key = attributes.get("spec_key")
        protocol = attributes.get("protocol")
    except (OSError, ValueError, AttributeError):
        return None
    if not (isinstance(key, str) and key and protocol and (folder / "score/zarr.json").is_file()):
        return None
    if any(not is_zarr_file(p.relative_to(folder)) for p in file_paths(folder, skip="")):
        return None
    return key


def is_zarr_file(relative: Path) -> bool:
    """Whether a file of a (flat, xarray-written) zarr v3 store is one of its own: a
    ``zarr.json`` of the group or of an array, or a chunk under ``<array>/c/``."""
    parts = relative.parts
    if parts[-1] == "zarr.json" and len(parts) <= 2:
        return True
    return len(parts) >= 3 and parts[1] == "c"


def written_files(folder: Path) -> list[Path]:
    """The files of a results store (or of an empty folder) that oodsim wrote: those its
    manifest lists and the manifest itself, or, in results written before manifests, the zarr
    metadata and chunk files."""
    manifest = read_manifest(folder)
    if isinstance(manifest, dict):
        paths = [owned(folder, name) for name in [*manifest.get("files", {}), MANIFEST]]
        return [path for path in paths if path is not None and _regular(path)]
    return [p for p in file_paths(folder, skip="") if is_zarr_file(p.relative_to(folder))]


def _regular(path: Path) -> bool:
    """Whether ``path`` is a regular file itself (not a link to one)."""
    return what_is(path) == "file"


def some_names(names: Sequence[str], shown: int = 3) -> str:
    """``a, b, c and 4 more``."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
