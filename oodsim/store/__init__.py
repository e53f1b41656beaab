"""The content-addressed store of artifacts that heals itself: :class:`Store`
(:mod:`~oodsim.store.entries`) over a :class:`Backend` (:mod:`~oodsim.store.backend`; the local
file system's, ``<root>/<kind>/<key[:2]>/<key>/``: :class:`LocalBackend`), where it lives by
default (:mod:`~oodsim.store.defaults`), its layout, arrays files, file-system helpers, locks,
maintenance (``ls``, ``verify``, ``gc``) and the digests that make entries trustworthy."""

from oodsim.store.backend import Backend, CorruptEntryWarning
from oodsim.store.defaults import (
    PROJECT_DEFAULTS_ENV,
    CacheRoot,
    cache_root,
    default_results,
    default_root,
    main_script,
    project_folder,
    run_folder,
    shown,
    user_cache,
)
from oodsim.store.entries import Store, StoreError, summarize_events
from oodsim.store.layout import (
    LOCKS,
    META,
    META_DIGEST,
    QUARANTINE_PREFIX,
    TMP_PREFIX,
    Entry,
)
from oodsim.store.local import LocalBackend
from oodsim.store.schemes import register_backend

__all__ = [
    "LOCKS",
    "META",
    "META_DIGEST",
    "PROJECT_DEFAULTS_ENV",
    "Backend",
    "QUARANTINE_PREFIX",
    "TMP_PREFIX",
    "CacheRoot",
    "CorruptEntryWarning",
    "Entry",
    "LocalBackend",
    "Store",
    "StoreError",
    "cache_root",
    "default_results",
    "default_root",
    "main_script",
    "register_backend",
    "project_folder",
    "run_folder",
    "shown",
    "summarize_events",
    "user_cache",
]
