"""The content-addressed store of artifacts on disk (``<root>/<kind>/<key[:2]>/<key>/``) that
heals itself: :class:`Store` (:mod:`~oodsim.store.entries`), where it lives by default
(:mod:`~oodsim.store.defaults`), its folder layout, arrays files, file-system helpers, locks,
maintenance (``ls``, ``verify``, ``gc``) and the digests that make entries trustworthy."""

from oodsim.store.defaults import (
    PROJECT_DEFAULTS_ENV,
    default_results,
    default_root,
    project_folder,
    user_cache,
)
from oodsim.store.entries import (
    CorruptEntryWarning,
    Store,
    StoreError,
    summarize_events,
)
from oodsim.store.layout import (
    LOCKS,
    META,
    META_DIGEST,
    QUARANTINE_PREFIX,
    TMP_PREFIX,
    Entry,
)

__all__ = [
    "LOCKS",
    "META",
    "META_DIGEST",
    "PROJECT_DEFAULTS_ENV",
    "QUARANTINE_PREFIX",
    "TMP_PREFIX",
    "CorruptEntryWarning",
    "Entry",
    "Store",
    "StoreError",
    "default_results",
    "default_root",
    "project_folder",
    "summarize_events",
    "user_cache",
]
