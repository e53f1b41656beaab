"""Where a run keeps its store and writes its results unless told: the project's own
``cache/`` and ``results/``, so that the same spec run from any folder of a project reuses
the same entries, from the command line and from Python alike (docs/caching.md).

A run's defaults are found from one folder (:func:`run_folder`): the spec file's, else the
running script's, else the working folder; its project (:func:`project_folder`) holds the cache
and the results, and outside any project the user cache holds the store (:func:`cache_root`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import attrs

from oodsim.environment import read
from oodsim.store.layout import is_cache
from oodsim.store.schemes import scheme_of

#: Environment variables that move the default store and the default results folder.
PROJECT_DEFAULTS_ENV = ("OODSIM_CACHE", "OODSIM_RESULTS")


def project_folder(start: str | Path | None = None) -> Path | None:
    """The project ``start`` (a folder, default the current one) belongs to: its nearest
    ancestor (itself included) that holds a ``pyproject.toml`` or a ``cache/`` made by oodsim;
    None outside any project."""
    here = Path(start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file() or is_cache(folder / "cache"):
            return folder
    return None


def user_cache() -> Path:
    """The user's cache folder for oodsim: ``$XDG_CACHE_HOME/oodsim`` or ``~/.cache/oodsim``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "oodsim"


def default_root(near: str | Path | None = None) -> Path:
    """Where a run keeps its store unless told: ``$OODSIM_CACHE``, else the ``cache/`` of the
    project ``near`` belongs to (the spec file's folder; default the current folder, see
    :func:`project_folder`), else :func:`user_cache`. The same spec run from any folder of a
    project therefore reuses the same entries."""
    if (cache := read("OODSIM_CACHE")) is not None:
        return cache
    project = project_folder(near)
    return project / "cache" if project is not None else user_cache()


def default_results(name: str, near: str | Path | None = None) -> Path:
    """Where ``oodsim run`` writes results unless told: ``$OODSIM_RESULTS/<name>.zarr``, else the
    ``results/`` folder of the project ``near`` belongs to (else of the current folder)."""
    if (results := read("OODSIM_RESULTS")) is not None:
        return results / f"{name}.zarr"
    project = project_folder(near)
    return (project if project is not None else Path.cwd()) / "results" / f"{name}.zarr"


def as_location(where: str | Path) -> str | Path:
    """A store's location as given: an object store's URL (``s3://...``) stays text, anything
    else is a path."""
    return where if scheme_of(where) else Path(where)


@attrs.frozen
class CacheRoot:
    """A run's store location (a folder, or an object store's URL) and why it is that one, in
    words (the opening line says both): ``"--cache"``, ``"$OODSIM_CACHE"``, ``"the project of
    specs/digits.toml"``, ..."""

    location: str | Path = attrs.field(converter=as_location)
    why: str


def main_script() -> Path | None:
    """The script this process runs (``python script.py``), or None: an interactive session,
    a notebook, ``python -c``, or oodsim's own command."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and (spec.name or "").startswith("oodsim"):  # python -m oodsim
        return None
    file = getattr(main, "__file__", None)
    return Path(file).resolve() if file else None


def run_folder(source: str | Path | None, script: Path | None) -> tuple[Path, str]:
    """The folder a run's defaults are found from, and what it is in words: the folder of
    the spec file ``source`` (a spec read from a file), else the folder of ``script`` (a spec
    built in Python, or a shipped spec loaded by name, in a script), else the working folder."""
    if source is not None:
        return Path(source).parent, f"the spec file {shown(source)}"
    if script is not None:
        return script.parent, f"the script {shown(script)}"
    return Path.cwd(), "the working folder"


def cache_root(
    source: str | Path | None, script: Path | None, spec_cache: str | None = None
) -> CacheRoot:
    """The default store of a run (:func:`run_folder` says where it is found from): the
    spec's ``cache`` (a folder relative to the spec file's, or a URL), else ``$OODSIM_CACHE``,
    else the ``cache/`` of that folder's project, else :func:`user_cache`."""
    folder, what = run_folder(source, script)
    if spec_cache is not None:
        location = as_location(spec_cache)
        if isinstance(location, Path):
            location = folder / location.expanduser()
        return CacheRoot(location, f"the cache of {what}")
    if (cache := read("OODSIM_CACHE")) is not None:
        return CacheRoot(cache, "$OODSIM_CACHE")
    project = project_folder(folder)
    if project is None:
        return CacheRoot(user_cache(), f"the user cache: {what} is in no project")
    return CacheRoot(project / "cache", f"the project of {what}")


def shown(path: str | Path) -> str:
    """``path`` as a user reads it in a message: relative to the working folder where it lies
    inside it, else absolute; an object store's URL as it is."""
    if scheme_of(path):
        return str(path)
    path = Path(path).absolute()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
