"""What an entry's ``meta.json`` (and a results manifest) records of its files, and the checks
that a record can be trusted: a sha256 and size per file, the record's own sha256, and the
entry's kind, key and the inputs that key derives from (:data:`KEY_INPUTS`)."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

from oodsim.keys import derived_key
from oodsim.store.fs import plain_relative
from oodsim.store.layout import KEY_INPUTS, META, META_DIGEST


def sha256_of(handle: IO[bytes]) -> str:
    """The sha256 of what is left to read in ``handle``, read in blocks of 1 MiB."""
    digest = hashlib.sha256()
    for block in iter(lambda: handle.read(1 << 20), b""):
        digest.update(block)
    return digest.hexdigest()


def file_paths(folder: Path, skip: str = META) -> Iterator[Path]:
    """Every file under ``folder`` except the record named ``skip`` that lists them."""
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name != skip:
            yield path


def file_checksums(folder: Path, skip: str = META) -> dict[str, str]:
    """sha256 by relative path of every file under ``folder`` (store entries and results)."""
    checksums = {}
    for path in file_paths(folder, skip):
        with path.open("rb") as handle:
            checksums[str(path.relative_to(folder))] = sha256_of(handle)
    return checksums


def file_sizes(folder: Path) -> dict[str, int]:
    """Byte size by relative path of every file under ``folder`` but its meta file."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in file_paths(folder)}


def meta_digest(meta: Mapping[str, Any]) -> str:
    """sha256 of a meta record without its own ``meta_sha256`` field, over the JSON form it has
    once written and read back (so tuples, paths and integer keys hash the same both ways)."""
    record = {k: v for k, v in meta.items() if k != META_DIGEST}
    text = json.dumps(json.loads(json.dumps(record, default=str)), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def write_meta(folder: Path, record: dict[str, Any]) -> None:
    """Seal ``record`` with its own checksum and write it as ``folder``'s ``meta.json``,
    fsynced, through a sibling file renamed over it: a reader finds the old record or the new
    one, never half of one."""
    record[META_DIGEST] = meta_digest(record)
    fresh = folder / f"{META}.{uuid.uuid4().hex[:8]}"
    with fresh.open("w") as handle:
        json.dump(record, handle, sort_keys=True, default=str)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(fresh, folder / META)


def _inside(name: object) -> bool:
    """Whether ``name`` is a relative path of a file inside an entry (not its meta file)."""
    return name != META and plain_relative(name) is not None


def meta_problem(meta: Any, kind: str | None = None, key: str | None = None) -> str:
    """Why a meta record cannot be trusted ("" when it can): edited (its own checksum), without
    a sha256 and size for each of its files, or not bound to its entry. A bound record names
    its ``kind`` and ``key`` (``kind`` and ``key``, where given: the entry's folder names) and
    the inputs its key derives from (:data:`KEY_INPUTS`, see :func:`oodsim.keys.derived_key`),
    and those inputs derive that key. A record of an older layout (no own checksum, no sizes,
    no key inputs) is never trusted: the entry is computed again."""
    if not isinstance(meta, dict):
        return "meta.json does not hold a record"
    expected = meta.get(META_DIGEST)
    if expected is not None and expected != meta_digest(meta):
        return "meta.json was altered (its own checksum does not match)"
    files = meta.get("files")
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        return "meta.json is not an entry record (no checksum per file)"
    outside = [name for name in files if not _inside(name)]
    if outside:
        return f"meta.json lists files outside the entry: {outside[:3]}"
    sizes = meta.get("sizes")
    if not isinstance(sizes, dict) or set(sizes) != set(files):
        return "meta.json is not an entry record (its sizes do not match its files)"
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in sizes.values()):
        return "meta.json is not an entry record (a size is not a byte count)"
    if expected is None:
        return "meta.json has no checksum of its own (an older layout: computed again)"
    return binding_problem(meta, kind, key)


def binding_problem(meta: Mapping[str, Any], kind: str | None, key: str | None) -> str:
    """Why a record is not bound to the entry (``kind``, ``key``) ("" when it is): it lacks
    its kind, its key or its key's inputs, names another kind or key, or its inputs derive
    another key (an entry copied or moved into another key's folder, its record edited)."""
    for field, value in (("kind", kind), ("key", key)):
        if not isinstance(meta.get(field), str):
            return f"meta.json names no {field} (an older layout, or edited: computed again)"
        if value is not None and meta[field] != value:
            return f"meta.json belongs to another entry ({field} {meta[field][:12]!r})"
    if KEY_INPUTS not in meta:
        return "meta.json names no inputs of its key (an older layout, or edited: computed again)"
    try:
        derived = derived_key(meta[KEY_INPUTS])
    except (TypeError, ValueError):
        return "meta.json's key inputs are not the inputs of a key"
    if derived != meta["key"]:
        return f"meta.json's key inputs derive another key ({derived[:12]!r})"
    return ""


def arrays_problem(arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> str:
    """What differs between the arrays read and the names and shapes recorded at the write."""
    shapes = meta.get("shapes")
    if not isinstance(shapes, dict):
        return ""
    read = {name: list(np.shape(value)) for name, value in arrays.items()}
    if read != shapes:
        return f"the arrays read differ from meta.json: {sorted(read)[:5]}, {sorted(shapes)[:5]}"
    return ""
