"""Reopening results: every file is checked against the manifest first, and a store replaced
while it is read is read again, so a reader gets the old or the new results, whole."""

from __future__ import annotations

import itertools
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from oodsim.errors import OodsimError
from oodsim.results.manifest import MANIFEST, read_manifest, some_names
from oodsim.store.digests import file_checksums


class ResultsNotFound(OodsimError, FileNotFoundError):
    """A path that holds no results written by oodsim."""


class ResultsCorrupt(OodsimError, ValueError):
    """Results whose files no longer match the checksums recorded when oodsim wrote them."""


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
        manifest = read_manifest(path) if path.is_dir() else None
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
    manifest = read_manifest(path) if path.is_dir() else None
    return manifest.get("written") if isinstance(manifest, dict) else None


#: How to get intact results back (what the run computed is in its cache).
REWRITE = (
    "; run the spec again with this output path to rewrite them (what it computed is in the cache)"
)


def _verify(path: Path, manifest: Mapping[str, Any]) -> None:
    expected = manifest["files"]
    actual = file_checksums(path, skip=MANIFEST)
    missing = sorted(set(expected) - set(actual))
    if missing:
        raise ResultsCorrupt(
            f"results at {path} are damaged: missing {some_names(missing)}{REWRITE}"
        )
    added = sorted(set(actual) - set(expected))
    if added:
        raise ResultsCorrupt(
            f"results at {path} were changed: files oodsim did not write were added "
            f"({some_names(added)}); move them out"
        )
    bad = [name for name, digest in expected.items() if actual[name] != digest]
    if bad:
        raise ResultsCorrupt(
            f"results at {path} are corrupt: checksum mismatch in {some_names(bad)} (against "
            f"{MANIFEST}){REWRITE}"
        )


def _load(path: Path) -> xr.Dataset:
    try:
        with warnings.catch_warnings():
            # zarr notes every file that is not part of its hierarchy: the manifest is ours
            warnings.filterwarnings("ignore", f"Object at {MANIFEST} is not recognized")
            # chunks=None: numpy arrays read at once, without importing dask and
            # distributed (0.5 s of a report's start) for arrays this small
            with xr.open_zarr(path, consolidated=False, chunks=None) as opened:
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
