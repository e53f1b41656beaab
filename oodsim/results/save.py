"""Saving results: a zarr store with its manifest written last, swapped into place in one
step; only results oodsim wrote are ever replaced, and :func:`check_output` says before any
compute whether a path may take results."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
import uuid
import warnings
from datetime import UTC, datetime
from pathlib import Path

import xarray as xr

from oodsim.errors import OodsimError
from oodsim.results.history import kept_path, read_saved
from oodsim.results.manifest import (
    MANIFEST,
    MANIFEST_FORMAT,
    MANIFEST_VERSION,
    legacy_key,
    read_manifest,
    some_names,
    written_files,
)
from oodsim.store.digests import file_checksums, file_paths, meta_digest
from oodsim.store.fs import described, what_is
from oodsim.store.layout import META_DIGEST


class OutputError(OodsimError):
    """Results cannot be written to a path (not writable, full, or in the way)."""


class ForeignOutput(OutputError):
    """The output path holds something oodsim did not write; it is never replaced."""


def save_results(results: xr.Dataset, path: str | Path) -> Path:
    """Write results as a zarr store at ``path`` with a checksum manifest, atomically.

    ``path`` must be absent, an empty folder, or results that oodsim wrote (see
    :func:`check_output`); anything else raises :class:`ForeignOutput` and is left untouched.
    The new store is written beside ``path``, its manifest (:data:`MANIFEST`: the sha256 of
    every file) last, then swapped into place in one step; of the old store, only the files
    oodsim wrote are deleted. A failing write raises :class:`OutputError` and leaves ``path``
    as it was.
    """
    path = Path(path)
    check_output(path)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    swapped = False  # once swapped, ``tmp`` holds the old store
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
        _write_store(results, tmp)
        swapped = _replace(tmp, path)
    except OSError as error:
        raise OutputError(
            f"results were not written to {path}: {error}. Nothing there changed, and "
            "everything computed is in the cache: run the same spec again with a writable "
            "output path to write them without computing anything"
        ) from None
    finally:
        if swapped:
            _retire(tmp, path, _spec_key(results), _spec_name(results))
        elif tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)  # our own unfinished store
    _forget_kept(path, _spec_key(results))
    return path


def _spec_key(results: xr.Dataset) -> str:
    return str(results.attrs.get("spec_key", ""))


def _spec_name(results: xr.Dataset) -> str | None:
    """The spec name the results carry (in their spec JSON), None where they carry none."""
    try:
        name = json.loads(str(results.attrs.get("spec") or "null")).get("name")
    except (ValueError, AttributeError):
        return None
    return name if isinstance(name, str) else None


def _retire(old: Path, path: Path, key: str, name: str | None) -> None:
    """The store that new results of spec ``key`` (named ``name``) replaced at ``path``, now
    at ``old``: results of an earlier spec of the same name are kept by their key beside
    ``path`` (:func:`~oodsim.results.history.kept_path`); others (the same spec's, or another
    name's replaced with ``overwrite``) are deleted."""
    before = read_saved(old)
    if before is None or before.key == key or name is None or before.name != name:
        _discard(old)
        return
    kept = kept_path(path, before.key)
    try:
        kept.parent.mkdir(exist_ok=True)
        if _replace(old, kept):  # an older copy of the same spec's results was kept there
            _discard(old)
    except OSError as error:
        warnings.warn(
            f"kept {old}, the results of spec {before.key[:12]} these replaced: they could not "
            f"move to {kept} ({error.strerror or error}); move or delete them yourself",
            stacklevel=3,
        )


def _forget_kept(path: Path, key: str) -> None:
    """Results of spec ``key`` are now the latest at ``path``: a copy of its earlier results
    kept in the history goes, so that each spec has one place."""
    kept = kept_path(path, key)
    if key and what_is(kept) == "folder" and read_saved(kept) is not None:
        _discard(kept)


def _write_store(results: xr.Dataset, folder: Path) -> None:
    """The zarr store, then its manifest (written last and fsynced: its presence means the
    store is complete)."""
    # Variable-length strings have a zarr v3 data type; fixed-width numpy unicode does not.
    strings = {
        name: results[name].astype(object)
        for name in results.variables
        if results[name].dtype.kind == "U"
    }
    results.assign(strings).assign_coords(
        {n: v for n, v in strings.items() if n in results.coords}
    ).to_zarr(folder, mode="w", consolidated=False)
    record = {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "spec_key": _spec_key(results),
        "saved": datetime.now(UTC).isoformat(timespec="seconds"),
        "written": uuid.uuid4().hex,
        "files": file_checksums(folder, skip=MANIFEST),
    }
    record[META_DIGEST] = meta_digest(record)
    with (folder / MANIFEST).open("w") as handle:
        json.dump(record, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())


def _replace(tmp: Path, path: Path) -> bool:
    """Put the complete store ``tmp`` at ``path``; whether an old one was swapped into ``tmp``.

    ``path`` is checked again first (it may have changed since the check before compute). An
    absent ``path`` is a plain rename, which fails rather than replace anything that appeared
    meanwhile (a file, a non-empty folder). An existing one is exchanged with ``tmp`` in one
    step where the file system can (Linux ``renameat2``); elsewhere it is renamed aside first
    and put back if the second rename fails.
    """
    check_output(path)
    if not os.path.lexists(path):
        os.rename(tmp, path)
        return False
    if _exchange(tmp, path):
        return True
    aside = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}")
    os.rename(path, aside)
    try:
        os.rename(tmp, path)
    except OSError:
        os.rename(aside, path)
        raise
    try:
        os.rename(aside, tmp)  # where the caller discards it
    except OSError:
        _discard(aside)
        return False
    return True


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where the
    system or file system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError, TypeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p] * 2 + [ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _discard(folder: Path) -> None:
    """Delete a replaced results store: only the files oodsim wrote, then the folders they
    leave empty. Anything else stays (with a warning), so nothing oodsim did not write is lost;
    so does a store that cannot be deleted (made read-only): the new results are in place, and
    the run ended with a PermissionError after writing them."""
    try:
        for file in written_files(folder):
            file.unlink(missing_ok=True)
    except OSError as error:
        warnings.warn(
            f"kept {folder}, the results these replaced: they cannot be deleted "
            f"({error.strerror or error}); delete the folder yourself",
            stacklevel=3,
        )
        return
    for sub in sorted((p for p in folder.rglob("*") if p.is_dir()), reverse=True):
        with contextlib.suppress(OSError):
            sub.rmdir()
    try:
        folder.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        warnings.warn(
            f"kept {folder}: the results it replaced held files oodsim did not write",
            stacklevel=3,
        )


def check_output(path: str | Path, *, cache: str | Path | None = None) -> str | None:
    """Check, before any compute, that results can be written to ``path``; return the spec key
    of the oodsim results there (None when ``path`` is absent or an empty folder).

    Allowed: an absent path whose nearest existing parent folder takes a new file (tried by
    creating and removing one), an empty folder, or a results store oodsim wrote (its
    :data:`MANIFEST` intact, no file it does not list; or results written before manifests:
    only zarr files, with oodsim's attributes). Anything else raises :class:`ForeignOutput`
    naming what is there: a folder or file of other things, a symbolic link, a damaged
    manifest, the current folder or one above it, the cache root ``cache``, anything inside it
    or anything that holds it. A path that cannot be written raises :class:`OutputError`.
    """
    path = Path(path)
    resolved = path.resolve()
    if resolved == Path.cwd() or resolved in Path.cwd().parents:
        raise ForeignOutput(
            f"{path} is not oodsim results: it is the current folder or one above it; "
            "choose a new path for the results (e.g. results/<name>.zarr)"
        )
    root = Path(cache).expanduser().resolve() if cache is not None else None
    where = ""
    if root is not None and resolved == root:
        where = "the cache root"
    elif root is not None and root in resolved.parents:
        where = "inside the cache root"
    elif root is not None and resolved in root.parents:
        where = "a folder holding the cache root"
    if where:
        raise ForeignOutput(
            f"{path} is not oodsim results: it is {where} {root}; results go outside the "
            "cache: choose another output path"
        )
    key = _existing_output(path)
    check_writable(path)
    return key


def check_not_results(cache: str | Path) -> None:
    """Refuse a cache root that is oodsim results or lies inside them (it holds, or a folder
    above it holds, their :data:`MANIFEST`): the store's entries written there left the
    results "changed: files oodsim did not write were added", refused by every reader."""
    resolved = Path(cache).expanduser().resolve()
    for folder in (resolved, *resolved.parents):
        if what_is(folder / MANIFEST) == "file":
            where = "is" if folder == resolved else f"is inside {folder}, which is"
            raise ForeignOutput(
                f"the cache {cache} {where} oodsim results, not a cache: the cache's entries "
                "would change them. Give runs a cache of its own (e.g. --cache cache)"
            )


def _existing_output(path: Path) -> str | None:
    """The spec key of oodsim results at ``path`` (None if absent or empty), or refusal."""
    refuse = f"{path} is not oodsim results"
    advice = "oodsim replaces only results it wrote: choose another output path"
    found = what_is(path)  # a link is what it is, never what it points to
    if found == "missing":
        return None
    if found != "folder":
        raise ForeignOutput(f"{refuse}: it is {described(found)}; {advice}")
    manifest = read_manifest(path)
    if isinstance(manifest, str):
        raise ForeignOutput(
            f"{refuse} that oodsim can replace: {manifest}; choose another output path, or "
            "remove it yourself if nothing in it is needed"
        )
    if isinstance(manifest, dict):
        listed = {*manifest["files"], MANIFEST}
        extra = [str(p.relative_to(path)) for p in file_paths(path, skip="")]
        extra = [name for name in extra if name not in listed]
        if extra:
            raise ForeignOutput(
                f"{path} holds oodsim results and also what oodsim did not write "
                f"({some_names(extra)}); move that out, or choose another output path"
            )
        return str(manifest.get("spec_key") or "") or None
    key = legacy_key(path)
    if key is not None:
        return key
    content = sorted(str(p.relative_to(path)) for p in path.iterdir())
    if not content:
        return None  # an empty folder: nothing to lose
    raise ForeignOutput(
        f"{refuse}: it is a folder holding other things ({some_names(content)}); {advice}"
    )


def check_writable(path: str | Path, what: str = "results") -> None:
    """Create and remove a file in the nearest existing folder on the way to ``path``'s
    parent, where ``what`` will be written; :class:`OutputError` if that fails, so a run or a
    long command fails before its compute rather than after it."""
    path = Path(path)
    folder = path.parent
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise OutputError(
            f"cannot write {what} to {path}: {folder} is a file, not a folder; "
            "choose another output path"
        )
    probe = folder / f".oodsim-probe-{uuid.uuid4().hex}"
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        probe.unlink()
    except OSError as error:
        raise OutputError(
            f"cannot write {what} to {path}: cannot create files in {folder} "
            f"({error.strerror or error}); choose a writable output path"
        ) from None
