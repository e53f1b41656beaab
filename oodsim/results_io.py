"""Saving and reopening results: only results oodsim wrote are ever replaced, and any later
change to them is found.

:func:`save_results` writes a zarr store with a checksum manifest (:data:`MANIFEST`) written
last, and swaps it into place in one step; :func:`check_output` says, before any compute,
whether a path may take results; :func:`open_results` verifies the manifest. The schema of
what is saved is :mod:`oodsim.results`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import itertools
import json
import os
import shutil
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from oodsim.errors import OodsimError
from oodsim.store import META_DIGEST, _checksums, _files, _meta_digest
from oodsim.store_fs import described, owned, read_json, what_is


class ResultsNotFound(OodsimError, FileNotFoundError):
    """A path that holds no results written by oodsim."""


class ResultsCorrupt(OodsimError, ValueError):
    """Results whose files no longer match the checksums recorded when oodsim wrote them."""


class OutputError(OodsimError):
    """Results cannot be written to a path (not writable, full, or in the way)."""


class ForeignOutput(OutputError):
    """The output path holds something oodsim did not write; it is never replaced."""


#: The checksum manifest of a results store, written last: its presence and intact content
#: are how oodsim recognises results it wrote (and may replace).
MANIFEST = "oodsim-results.json"
MANIFEST_FORMAT = "oodsim-results"
MANIFEST_VERSION = 1
#: The largest manifest (or zarr group record) read: it lists every file of the results.
MANIFEST_LIMIT = 64 << 20


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
            _discard(tmp)
        elif tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)  # our own unfinished store
    return path


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
        "spec_key": str(results.attrs.get("spec_key", "")),
        "written": uuid.uuid4().hex,
        "files": _checksums(folder, skip=MANIFEST),
    }
    record[META_DIGEST] = _meta_digest(record)
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


def _written_files(folder: Path) -> list[Path]:
    """The files of a results store (or of an empty folder) that oodsim wrote: those its
    manifest lists and the manifest itself, or, in results written before manifests, the zarr
    metadata and chunk files."""
    manifest = _manifest(folder)
    if isinstance(manifest, dict):
        paths = [owned(folder, name) for name in [*manifest.get("files", {}), MANIFEST]]
        return [path for path in paths if path is not None and _regular(path)]
    return [p for p in _files(folder, skip="") if _is_zarr_file(p.relative_to(folder))]


def _regular(path: Path) -> bool:
    """Whether ``path`` is a regular file itself (not a link to one)."""
    return what_is(path) == "file"


def _discard(folder: Path) -> None:
    """Delete a replaced results store: only the files oodsim wrote, then the folders they
    leave empty. Anything else stays (with a warning), so nothing oodsim did not write is lost."""
    for file in _written_files(folder):
        file.unlink(missing_ok=True)
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


def _is_zarr_file(relative: Path) -> bool:
    """Whether a file of a (flat, xarray-written) zarr v3 store is one of its own: a
    ``zarr.json`` of the group or of an array, or a chunk under ``<array>/c/``."""
    parts = relative.parts
    if parts[-1] == "zarr.json" and len(parts) <= 2:
        return True
    return len(parts) >= 3 and parts[1] == "c"


def _manifest(folder: Path) -> dict[str, Any] | str | None:
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
    if record.get(META_DIGEST) != _meta_digest(record):
        return f"{MANIFEST} was altered (its own checksum does not match)"
    return record


def _legacy_key(folder: Path) -> str | None:
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
    if any(not _is_zarr_file(p.relative_to(folder)) for p in _files(folder, skip="")):
        return None
    return key


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


def _existing_output(path: Path) -> str | None:
    """The spec key of oodsim results at ``path`` (None if absent or empty), or refusal."""
    refuse = f"{path} is not oodsim results"
    advice = "oodsim replaces only results it wrote: choose another output path"
    found = what_is(path)  # a link is what it is, never what it points to
    if found == "missing":
        return None
    if found != "folder":
        raise ForeignOutput(f"{refuse}: it is {described(found)}; {advice}")
    manifest = _manifest(path)
    if isinstance(manifest, str):
        raise ForeignOutput(
            f"{refuse} that oodsim can replace: {manifest}; choose another output path, or "
            "remove it yourself if nothing in it is needed"
        )
    if isinstance(manifest, dict):
        listed = {*manifest["files"], MANIFEST}
        extra = [str(p.relative_to(path)) for p in _files(path, skip="")]
        extra = [name for name in extra if name not in listed]
        if extra:
            raise ForeignOutput(
                f"{path} holds oodsim results and also what oodsim did not write "
                f"({_some(extra)}); move that out, or choose another output path"
            )
        return str(manifest.get("spec_key") or "") or None
    key = _legacy_key(path)
    if key is not None:
        return key
    content = sorted(str(p.relative_to(path)) for p in path.iterdir())
    if not content:
        return None  # an empty folder: nothing to lose
    raise ForeignOutput(
        f"{refuse}: it is a folder holding other things ({_some(content)}); {advice}"
    )


def _some(names: Sequence[str], shown: int = 3) -> str:
    """``a, b, c and 4 more``."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


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


#: Seconds a reader keeps reading again a store that is replaced under it.
REPLACED_PATIENCE = 60.0


def open_results(path: str | Path, *, trust: bool = False) -> xr.Dataset:
    """Reopen results written by :func:`save_results` (or ``oodsim run --out``), in memory.

    Every file is checked against the store's :data:`MANIFEST` first: a changed, missing or
    added file raises :class:`ResultsCorrupt` naming it. Results without a manifest are refused
    too (:class:`ResultsCorrupt`): a deleted manifest would hide any change. ``trust=True``
    (``oodsim report --trust``) opens them unchecked: for results written before oodsim wrote
    manifests, or ones you vouch for. A store replaced while it is being read is read again,
    for as long as replacements keep coming (up to :data:`REPLACED_PATIENCE` seconds): a reader
    gets the old or the new results, whole, never an error because of a replacement.
    """
    path = Path(path)
    if not path.exists():
        raise ResultsNotFound(f"no results at {path}")
    deadline = time.monotonic() + REPLACED_PATIENCE
    for attempt in itertools.count():
        manifest = _manifest(path) if path.is_dir() else None
        if isinstance(manifest, str):
            raise ResultsCorrupt(f"results at {path} cannot be trusted: {manifest}{REWRITE}")
        if manifest is None and not trust and (path / "zarr.json").is_file():
            _refuse_unchecked(path)  # results without a manifest (anything else: not results)
        written = manifest.get("written") if manifest is not None else None
        try:
            if manifest is not None:
                _verify(path, manifest)
            results = _load(path)
        except (ResultsCorrupt, ResultsNotFound, FileNotFoundError) as error:
            # a file listed a moment ago can vanish when the store is replaced meanwhile
            if written is None or _written(path) == written:
                if not isinstance(error, ResultsCorrupt | ResultsNotFound):  # a raw OS error
                    raise ResultsCorrupt(
                        f"results at {path} are damaged: {error.filename} is missing{REWRITE}"
                    ) from None
                raise
        else:
            if written is None or _written(path) == written:
                return results
        if time.monotonic() > deadline:  # replaced while read, again and again
            raise ResultsCorrupt(
                f"results at {path} kept being replaced while they were read "
                f"(for {REPLACED_PATIENCE:.0f} s); read them once the run that writes them ends"
            )
        time.sleep(min(0.01 * 2**attempt, 0.5))  # then read the new store


def _refuse_unchecked(path: Path) -> None:
    """Results without a manifest: nothing tells whether a file was changed."""
    raise ResultsCorrupt(
        f"results at {path} have no {MANIFEST}, so oodsim cannot check them (a deleted manifest "
        "hides any change to the scores); rerun the spec with this output path to rewrite them "
        "(what it computed is in the cache), or open them unchecked if you trust them: "
        "`oodsim report --trust`, open_results(path, trust=True)"
    )


def _written(path: Path) -> str | None:
    """The id of the write that made the results at ``path`` (None if there is none)."""
    manifest = _manifest(path) if path.is_dir() else None
    return manifest.get("written") if isinstance(manifest, dict) else None


#: How to get intact results back (what the run computed is in its cache).
REWRITE = (
    "; run the spec again with this output path to rewrite them (what it computed is in the cache)"
)


def _verify(path: Path, manifest: Mapping[str, Any]) -> None:
    expected = manifest["files"]
    actual = _checksums(path, skip=MANIFEST)
    missing = sorted(set(expected) - set(actual))
    if missing:
        raise ResultsCorrupt(f"results at {path} are damaged: missing {_some(missing)}{REWRITE}")
    added = sorted(set(actual) - set(expected))
    if added:
        raise ResultsCorrupt(
            f"results at {path} were changed: files oodsim did not write were added "
            f"({_some(added)}); move them out"
        )
    bad = [name for name, digest in expected.items() if actual[name] != digest]
    if bad:
        raise ResultsCorrupt(
            f"results at {path} are corrupt: checksum mismatch in {_some(bad)} (against "
            f"{MANIFEST}){REWRITE}"
        )


def _load(path: Path) -> xr.Dataset:
    try:
        with warnings.catch_warnings():
            # zarr notes every file that is not part of its hierarchy: the manifest is ours
            warnings.filterwarnings("ignore", f"Object at {MANIFEST} is not recognized")
            with xr.open_zarr(path, consolidated=False) as opened:
                results = opened.load()
    except Exception as error:  # a spec file, a folder of other things: say what it is not
        raise ResultsNotFound(
            f"{path} is not a results store written by oodsim (`oodsim run --out`, "
            f"save_results): {type(error).__name__}"
        ) from None
    if "score" not in results.data_vars:
        raise ResultsNotFound(f"{path} is a zarr store but holds no oodsim results (no 'score')")
    for name in list(results.variables):
        variable = results[name]
        if variable.dtype.kind in "OT":  # object or numpy StringDType: back to numpy unicode
            values = np.array(variable.values.tolist(), dtype=str)
            if name in results.coords:
                results = results.assign_coords({name: (variable.dims, values)})
            else:
                results[name] = (variable.dims, values)
    return results
