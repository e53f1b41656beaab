"""What the store may move out of its way, and in which roots.

The store heals itself by moving aside whatever stands where its layout needs a folder (a file
where a kind folder belongs, a link in place of ``locks/``). In a root oodsim made (it holds
oodsim's ``.gitignore``, :func:`~oodsim.store.layout.is_cache`) all of that is oodsim's own.
A run may also be given a folder that held other files when runs began to use it
(``--cache ~``, ``--cache .``): there, a kind folder's or ``locks``' name may be a file of the
user's (TensorFlow writes a file named ``checkpoint`` beside its weights), which moving it
aside would delete. In such a root the store moves only its own entries (folders named by a
full key); anything else in its way stops the run with one line that names it, before any
compute where the first seed's plan shows it (:func:`check_obstacles`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from oodsim.errors import StoreError
from oodsim.store.fs import described, what_is
from oodsim.store.layout import LOCKS, is_cache

#: depth below the root of an entry folder (kind / key prefix / key): always the store's own
ENTRY_DEPTH = 3


def refuse_to_move(root: Path, path: Path, what: str) -> None:
    """Raise :class:`~oodsim.errors.StoreError` when ``path``, in the way of the cache's
    ``what``, may be the user's: a kind, key-prefix or ``locks`` object in a root oodsim did
    not make. An entry folder, or anything in a root oodsim made, may be moved."""
    depth = len(path.relative_to(root).parts)
    if depth >= ENTRY_DEPTH or is_cache(root):
        return
    raise StoreError(
        f"{path} ({described(what_is(path))}) is where the cache needs its {what}, and it may "
        f"be yours: {root} is not a folder oodsim made (it held other files when runs began "
        "to use it as a cache), so oodsim moves nothing of it. Move it away, or give runs a "
        f"new folder of their own (--cache {root / 'oodsim-cache'}); nothing was computed "
        "into it"
    )


def check_obstacles(root: Path, kinds: Iterable[str]) -> None:
    """Before any compute: in a root oodsim did not make, nothing but a folder may stand
    where the store keeps ``kinds`` and its locks (see :func:`refuse_to_move`)."""
    for name in (LOCKS, *sorted(set(kinds))):
        path = root / name
        found = what_is(path)
        if found not in ("folder", "missing"):
            refuse_to_move(root, path, f"folder {name}/")
