"""Results on object storage (``--out s3://bucket/results/digits.zarr``).

Under the location, results are the zarr store :func:`~oodsim.results.save.save_results`
writes on a disk (the same files, the same manifest of checksums), uploaded as a folder of
objects ``v-<write id>/``, and a pointer object :data:`POINTER` written last that names it (and
the spec's key and name): one PUT, so a reader, which reads the pointer first, gets the old or
the new results, whole. The folder the pointer named before stays until the next write (a
reader that read the old pointer still finds its files); older ones are removed. A location
holding objects but no pointer is not oodsim's results and is never written to. Reading
downloads the folder the pointer names and checks it as :func:`~oodsim.results.open_results`
checks results on a disk. Credentials come from the environment or fsspec's configuration.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import xarray as xr

from oodsim.results.manifest import MANIFEST
from oodsim.results.read import REPLACED_PATIENCE, ResultsNotFound
from oodsim.results.read import open_results as open_folder
from oodsim.results.save import ForeignOutput, OutputError
from oodsim.results.save import save_results as save_folder
from oodsim.store.object_errors import plain_error
from oodsim.store.schemes import scheme_of

#: the object that names the current results under a location
POINTER = "oodsim-current.json"


def save_results(results: xr.Dataset, path: str | Path) -> str | Path:
    """Write results at a folder (:func:`~oodsim.results.save.save_results`) or under an object
    store's URL (:func:`save_remote`); where they are."""
    return save_remote(results, path) if is_remote(path) else save_folder(results, path)


def open_results(path: str | Path, *, trust: bool = False) -> xr.Dataset:
    """Reopen results from a folder (:func:`~oodsim.results.read.open_results`, whose checks
    and ``trust`` hold for both) or from under an object store's URL (:func:`open_remote`)."""
    return open_remote(path, trust=trust) if is_remote(path) else open_folder(path, trust=trust)


def is_remote(path: str | Path) -> bool:
    """Whether ``path`` is an object store's URL rather than a path."""
    return scheme_of(path) is not None


def _fs(url: str) -> tuple[Any, str]:
    # fsspec and the service's package load with the first remote results
    import fsspec

    return fsspec.core.url_to_fs(url.rstrip("/"), use_listings_cache=False)


def read_pointer(url: str) -> dict[str, Any] | None:
    """What the pointer of the results at ``url`` says (None: no results there). Raises
    :class:`~oodsim.results.save.ForeignOutput` for objects that are not oodsim's results,
    and :class:`~oodsim.results.save.OutputError` when the location cannot be read."""
    fs, root = _fs(url)
    try:
        pointer = json.loads(fs.cat_file(f"{root}/{POINTER}"))
    except FileNotFoundError:
        try:
            held = fs.ls(root, detail=False)
        except FileNotFoundError:
            held = []
        except Exception as error:  # the service's own errors: said in one line
            raise OutputError(f"cannot read {url}: {plain_error(error, url)}") from None
        if held:
            raise ForeignOutput(
                f"{url} is not oodsim results: it holds objects but no {POINTER}; oodsim "
                "replaces only results it wrote: choose another output location"
            ) from None
        return None
    except ValueError:
        raise ForeignOutput(f"{url} is not oodsim results: its {POINTER} is damaged") from None
    except Exception as error:
        raise OutputError(f"cannot read {url}: {plain_error(error, url)}") from None
    if not isinstance(pointer, dict) or not isinstance(pointer.get("version"), str):
        raise ForeignOutput(f"{url} is not oodsim results: its {POINTER} names no results")
    return pointer


def save_remote(results: xr.Dataset, url: str | Path) -> str:
    """Write ``results`` under ``url`` (see the module docstring); the location."""
    before = read_pointer(url)
    fs, root = _fs(url)
    with tempfile.TemporaryDirectory(prefix="oodsim-results-") as folder:
        local = save_folder(results, Path(folder) / "results.zarr")
        manifest = json.loads((local / MANIFEST).read_text())
        version = f"v-{manifest['written']}"
        try:
            fs.put(str(local), f"{root}/{version}", recursive=True)
            spec = json.loads(str(results.attrs.get("spec") or "{}"))
            name = spec.get("name") if isinstance(spec, dict) else None
            pointer = {"version": version, "key": manifest["spec_key"], "name": name}
            fs.pipe_file(f"{root}/{POINTER}", json.dumps(pointer).encode())
        except Exception as error:
            raise OutputError(
                f"could not write results to {url}: {plain_error(error, url)}"
            ) from None
    keep = {version, before["version"] if before else version}
    for path in fs.ls(root, detail=False):
        name = path.rstrip("/").rsplit("/", 1)[1]
        if name.startswith("v-") and name not in keep:
            fs.rm(path, recursive=True)
    return url


def open_remote(url: str | Path, *, trust: bool = False) -> xr.Dataset:
    """The results under ``url``, in memory, checked like results on a disk."""
    deadline = time.monotonic() + REPLACED_PATIENCE
    while True:
        try:
            pointer = read_pointer(url)
        except (ForeignOutput, OutputError) as error:
            raise ResultsNotFound(str(error)) from None
        if pointer is None:
            raise ResultsNotFound(f"no results at {url}")
        fs, root = _fs(url)
        with tempfile.TemporaryDirectory(prefix="oodsim-results-") as folder:
            local = Path(folder) / "results.zarr"
            try:
                fs.get(f"{root}/{pointer['version']}", str(local), recursive=True)
            except FileNotFoundError:  # replaced and removed while read: read the new ones
                if time.monotonic() > deadline:
                    raise
                continue
            return open_folder(local, trust=trust)
