"""Which backend keeps the store at a location: a path is the local file system's
(:class:`~oodsim.store.local.LocalBackend`); a URL's scheme (``s3://bucket/prefix``) names a
backend registered under it (``file://`` is the local one).

A backend is registered as a factory that takes the whole location text and returns a
:class:`~oodsim.store.backend.Backend`: :func:`register_backend` in a script (the engine ships
it to the workers, which open the store by its location), or the entry-point group
``oodsim.store_backends`` of an installed package.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from oodsim.environment import URL_SCHEME
from oodsim.errors import StoreError
from oodsim.plugins import Registry
from oodsim.store.backend import Backend
from oodsim.store.local import LocalBackend

ENTRY_POINT_GROUP = "oodsim.store_backends"

BackendFactory = Callable[[str], Backend]
#: the schemes of object stores fsspec opens (each needs its package: s3fs, gcsfs, adlfs;
#: ``memory://`` is fsspec's own, one per process)
OBJECT_SCHEMES = ("s3", "gs", "gcs", "az", "abfs", "memory")

REGISTRY: Registry[BackendFactory] = Registry(
    "store_backend",
    field="cache",
    group=ENTRY_POINT_GROUP,
    builtins={
        "file": "oodsim.store.schemes:local_at",
        **{scheme: "oodsim.store.objects:ObjectBackend" for scheme in OBJECT_SCHEMES},
    },
    from_entry_point=lambda name, loaded: loaded,
)


def scheme_of(location: str | Path) -> str | None:
    """The URL scheme of ``location`` (lower case), or None for a path."""
    if isinstance(location, Path):
        return None
    found = URL_SCHEME.match(location)
    return found.group(1).lower() if found else None


def local_at(location: str) -> LocalBackend:
    """The local backend of a ``file://`` URL."""
    return LocalBackend(location[len("file://") :])


def backend_at(location: str | Path) -> Backend:
    """The backend of the store at ``location``: a path's is the local file system's, a URL's
    the one registered under its scheme (an unknown scheme raises
    :class:`~oodsim.errors.UnknownNameError`, naming the ones there are)."""
    scheme = scheme_of(location)
    if scheme is None:
        return LocalBackend(location)
    if scheme not in REGISTRY:
        known = ", ".join(f"{name}://" for name in REGISTRY.available())
        raise StoreError(
            f"no store backend opens {scheme}:// locations (cache {location}); there are "
            f"{known} and paths. A package adds one through the entry-point group "
            f"{ENTRY_POINT_GROUP}, a script with oodsim.store.register_backend"
        )
    return REGISTRY.get(scheme)(str(location))


def register_backend(scheme: str, factory: BackendFactory, *, replace: bool = False) -> None:
    """Open stores at ``scheme://...`` locations with ``factory(location)``."""
    REGISTRY.register(scheme, factory, replace=replace)
