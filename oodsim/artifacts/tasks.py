"""The unit of work that fills store entries (:class:`Task`), and how a seed fails.

A task is what the engine runs on a worker: content-keyed, so that two seeds (or two
protocols) that need the same entries run it once. :class:`SeedFailed` is how a task or
scoring says that a seed cannot be scored; :func:`stored` reads an entry a seed's tasks wrote
(a lost one fails the seed with the failure kind :data:`~oodsim.results.failures.LOST_ENTRY`,
which the engine heals), :func:`ensured` one that whoever reads it computes where missing;
:func:`checked_kappa` turns non-finite κ into such a failure. The protocols' contract
(:mod:`oodsim.protocols.base`) plans and scores with these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs

from oodsim.detectors import NonFiniteKappaError
from oodsim.errors import OodsimError
from oodsim.metrics import NonFiniteScoreError
from oodsim.results.failures import LOST_ENTRY
from oodsim.store import Entry as StoreEntry
from oodsim.store import Store

_T = TypeVar("_T")

Entry = tuple[str, str]  # (kind, key) of a store entry


class SeedFailed(OodsimError):
    """A seed that cannot produce scores (diverged training, non-finite outputs or κ).

    Raised by a task or by scoring; the engine records the message as the seed's ``failure``
    (or stops the run when the spec says ``on_failure = "abort"``).
    """


@attrs.frozen(eq=False)
class Task:
    """One content-keyed unit of work that fills store ``entries``.

    ``compute(store)`` must :meth:`~oodsim.store.Store.put` every entry (it runs on a Dask
    worker); ``after`` names the keys of tasks that must finish first (e.g. the training of the
    model a task infers with). ``verify`` lists entries that scoring does not read but whose
    bytes must be checked before the task counts as done (a checkpoint). Two seeds that plan a
    task with the same ``key`` share it: it runs once.
    """

    key: str
    entries: tuple[Entry, ...]
    compute: Callable[[Store], Any]
    after: tuple[str, ...] = ()
    verify: tuple[Entry, ...] = ()
    label: str = ""

    def present(self, store: Store) -> bool:
        """Whether every entry (``verify`` ones included) is in the store at its recorded
        sizes, without checksums: the cheap look of a plan count (:meth:`done` checks more)."""
        return all(store.has(*entry) for entry in self.entries + self.verify)

    def done(self, store: Store) -> bool:
        """Whether every entry is in the store (and the ``verify`` entries are intact)."""
        return all(store.has(*entry) for entry in self.entries) and all(
            store.verify_entry(*entry) for entry in self.verify
        )


def stored(store: Store, kind: str, key: str, what: str) -> StoreEntry:
    """An entry a seed's tasks wrote. One that vanished or is corrupt (moved aside on read)
    fails the seed with :data:`LOST_ENTRY`; the engine computes it once more in the run."""
    entry = store.get(kind, key)
    if entry is None:
        raise SeedFailed(LOST_ENTRY.message(f"{what} ({kind} {key[:12]})"))
    return entry


def ensured(
    store: Store, kind: str, key: str, compute: Callable[[], object], what: str
) -> StoreEntry:
    """An entry read from the store, computed first where it is missing: ``compute()`` must
    :meth:`~oodsim.store.Store.put` it (under the key's lock, so processes sharing the cache
    compute it once). A corrupt entry is dropped on read and computed once more; one that
    still cannot be read fails the seed. A stored entry costs one read (no lock, no
    separate look)."""
    entry = store.get(kind, key)
    for _ in range(2):  # missing, or corrupt and dropped on read: computed (once more)
        if entry is not None:
            break
        store.ensure(kind, key, compute)
        entry = store.get(kind, key)
    if entry is None:
        raise SeedFailed(f"{what} could not be stored ({kind} {key[:12]})")
    return entry


def checked_kappa(label: str, seed: int, compute: Callable[[], _T]) -> _T:
    """``compute()`` (κ of detector ``label``, or κ with what it was scored with); non-finite
    κ fails the seed, naming the detector."""
    try:
        return compute()
    except (NonFiniteKappaError, NonFiniteScoreError) as error:
        raise SeedFailed(f"detector {label} gave non-finite κ on seed {seed}: {error}") from None


def first_failure(failures: Sequence[str]) -> str:
    """The first non-empty failure message of a seed's tasks, else ""."""
    return next((f for f in failures if f), "")
