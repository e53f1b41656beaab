"""The contract between the engine and a protocol: :class:`Protocol`, :class:`Task`, failures.

A protocol (open set, severity, ImageNet-O) says *what* a seed needs and *how to score* it:

- :meth:`Protocol.plan` lists the content-keyed :class:`Task` objects that fill the store
  entries of one seed (training a checkpoint, inferring outputs on a source, model-based κ);
- :meth:`Protocol.score` reads those entries and returns one
  :class:`~oodsim.results.SeedResult`;
- :meth:`Protocol.layout` names the result's dimensions and coordinates.

The engine (:mod:`oodsim.engine`) does everything else: skipping cached tasks, the cluster,
batches, progress, timeouts, stopping rules, failures and assembling the result. Nothing in a
protocol talks to Dask.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import attrs

from oodsim.detectors import NonFiniteKappaError
from oodsim.errors import OodsimError
from oodsim.metrics import NonFiniteScoreError
from oodsim.results import Layout, SeedResult
from oodsim.specs.converter import structure
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


class Protocol:
    """Base class of a protocol plug-in; subclasses set :attr:`name` and :attr:`spec_type` and
    write :meth:`plan`, :meth:`score` and :meth:`layout` (register one with
    :func:`oodsim.protocols.register_protocol`).

    The plug-ins a spec names (detectors, datasets, architectures) are found in its fields
    (:mod:`oodsim.specs.plugins`): a protocol does not list them.
    """

    name: ClassVar[str]
    spec_type: ClassVar[type]
    #: what one seed is called in progress lines ("simulations", "seeds")
    unit: ClassVar[str] = "seeds"

    def from_data(self, data: Mapping[str, Any], base: Path | None) -> Any:
        """A spec of this protocol from TOML data (without its ``protocol`` key); relative
        paths resolve against ``base``. By default the one converter builds
        :attr:`spec_type` from the data, with field-path errors."""
        return structure(data, self.spec_type, f"{self.name} spec")

    def preflight(self, spec: Any, store: Store) -> None:
        """Checks that can fail before any compute (data present, weights on disk)."""

    def plan(self, spec: Any, seed: int) -> Sequence[Task]:
        """The tasks whose entries ``score(spec, seed, ...)`` reads."""
        raise NotImplementedError

    def score(self, spec: Any, seed: int, store: Store) -> SeedResult:
        """Score one seed from the store; raise :class:`SeedFailed` for a failed seed."""
        raise NotImplementedError

    def seed_coords(self, spec: Any, seed: int, store: Store) -> Mapping[str, str]:
        """Per-seed coordinates of a failed seed (what is known without scores)."""
        return {}

    def layout(self, spec: Any) -> Layout:
        """Dimensions and coordinates of this spec's result."""
        raise NotImplementedError

    def result_attrs(self, spec: Any) -> Mapping[str, str]:
        """Labels the results carry in ``attrs`` beyond the engine's provenance (e.g. what a
        seed of ImageNet-O is, and which interval its seeds give)."""
        return {}


#: The end of the failure of a seed whose entry vanished or was corrupt when read.
LOST_ENTRY = "is missing or corrupt in the store; run again to recompute it"


def is_lost_entry(failure: str) -> bool:
    """Whether a seed failed because an entry it read had vanished or was corrupt (the
    engine computes such a seed once more in the same run), not for a reason of its own."""
    return failure.endswith(LOST_ENTRY)


def stored(store: Store, kind: str, key: str, what: str) -> StoreEntry:
    """An entry a seed's tasks wrote. One that vanished or is corrupt (moved aside on read)
    fails the seed with :data:`LOST_ENTRY`; the engine computes it once more in the run."""
    entry = store.get(kind, key)
    if entry is None:
        raise SeedFailed(f"{what} ({kind} {key[:12]}) {LOST_ENTRY}")
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
