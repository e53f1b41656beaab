"""Why a seed has no scores, as data: one :class:`FailureKind` record per kind of failure.

A seed's ``failure`` stays a message (the results keep the same strings as ever); which kind
it is, and what the engine and the reports do about it, is read from these records, never
from prefixes scattered over the code:

- ``degenerate``: the seed was scored, but its classifier is not above chance
  (:mod:`oodsim.protocols.degenerate`): an *exclusion* by the spec's rule, not a crash, so
  ``on_failure = "abort"`` goes on and reports show its effect;
- ``lost_entry``: an entry the seed read had vanished or was corrupt (moved aside on read):
  nothing about the seed itself, so the engine computes it once more in the same run;
- ``worker_died``: the seed's work killed every worker process that ran it (the system's
  out-of-memory killer, a crash in native code): a crash, which the engine also reads as the
  environment's fault when it befalls every seed of a run;
- ``crash``: anything else (diverged training, non-finite κ, an error of a plug-in).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs
import numpy as np


@attrs.frozen
class FailureKind:
    """One kind of failure: how its message begins or ends, what it means to a reader, and
    what the engine does with it."""

    name: str
    #: what a report says of such seeds
    meaning: str
    #: the start and end of every message of this kind ("" where the kind does not fix one)
    prefix: str = ""
    suffix: str = ""
    #: scored but left out by a rule of the spec (not a failure of the run)
    excluded: bool = False
    #: computed once more in the same run (the fault was the store's, not the seed's)
    heals: bool = False

    def matches(self, failure: str) -> bool:
        return bool(self.prefix or self.suffix) and (
            failure.startswith(self.prefix) and failure.endswith(self.suffix)
        )

    def message(self, detail: str) -> str:
        """The failure of a seed of this kind, with ``detail`` (what happened)."""
        return f"{self.prefix}{detail}{self.suffix}"

    def detail(self, failure: str) -> str:
        """``failure`` without the prefix and suffix this kind adds."""
        return failure[len(self.prefix) : len(failure) - len(self.suffix)]


DEGENERATE = FailureKind(
    "degenerate",
    "degenerate (the classifier is not above chance)",
    prefix="degenerate: ",
    excluded=True,
)
LOST_ENTRY = FailureKind(
    "lost_entry",
    "an entry it read was missing or corrupt",
    suffix=" is missing or corrupt in the store; run again to recompute it",
    heals=True,
)
WORKER_DIED = FailureKind("worker_died", "failed", prefix="its worker process died ")
CRASH = FailureKind("crash", "failed")

#: every kind, the one a message matches first; :data:`CRASH` takes the rest
FAILURE_KINDS: tuple[FailureKind, ...] = (DEGENERATE, LOST_ENTRY, WORKER_DIED, CRASH)


def failure_kind(failure: str) -> FailureKind | None:
    """The kind of a seed's ``failure``; None for a seed that did not fail (``""``)."""
    failure = str(failure)
    if not failure:
        return None
    return next((kind for kind in FAILURE_KINDS if kind.matches(failure)), CRASH)


def excluded_seeds(failures: Iterable[str]) -> np.ndarray:
    """Per seed, whether its failure is an exclusion (scored, left out by the spec's rule)."""
    return np.array(
        [(kind := failure_kind(f)) is not None and kind.excluded for f in failures], dtype=bool
    )
