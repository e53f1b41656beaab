"""Where a run keeps its store and writes its results unless told: the project's own
``cache/`` and ``results/``, so that the same spec run from any folder of a project reuses
the same entries (docs/caching.md)."""

from __future__ import annotations

import os
from pathlib import Path

from oodsim.store.layout import is_cache

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
    if os.environ.get("OODSIM_CACHE"):
        return Path(os.environ["OODSIM_CACHE"])
    project = project_folder(near)
    return project / "cache" if project is not None else user_cache()


def default_results(name: str, near: str | Path | None = None) -> Path:
    """Where ``oodsim run`` writes results unless told: ``$OODSIM_RESULTS/<name>.zarr``, else the
    ``results/`` folder of the project ``near`` belongs to (else of the current folder)."""
    if os.environ.get("OODSIM_RESULTS"):
        return Path(os.environ["OODSIM_RESULTS"]) / f"{name}.zarr"
    project = project_folder(near)
    return (project if project is not None else Path.cwd()) / "results" / f"{name}.zarr"
