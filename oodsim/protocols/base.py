"""The contract between the engine and a protocol: :class:`Protocol`, with :class:`Task` and
the failures of a seed (defined in :mod:`oodsim.artifacts.tasks`, below the protocols, whose
artifacts use them; named here too).

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

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs

from oodsim.artifacts.tasks import (
    Entry,
    SeedFailed,
    Task,
    checked_kappa,
    first_failure,
    stored,
)
from oodsim.results import Layout, SeedResult
from oodsim.specs.converter import structure
from oodsim.store import Store

__all__ = [
    "Bound",
    "Entry",
    "Protocol",
    "SeedFailed",
    "Task",
    "checked_kappa",
    "first_failure",
    "stored",
]


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
        """Score one seed from the store; raise :class:`SeedFailed` for a failed seed. The
        engine adds the seed's :meth:`seed_coords` to the result."""
        raise NotImplementedError

    def seed_coords(self, spec: Any, seed: int, store: Store) -> Mapping[str, str]:
        """Per-seed coordinates (what is known without scores, e.g. the class split): asked
        by the engine once per seed, scored or failed."""
        return {}

    def layout(self, spec: Any) -> Layout:
        """Dimensions and coordinates of this spec's result."""
        raise NotImplementedError

    def result_attrs(self, spec: Any) -> Mapping[str, str]:
        """Labels the results carry in ``attrs`` beyond the engine's provenance (e.g. what a
        seed of ImageNet-O is, and which interval its seeds give)."""
        return {}

    def bind(self, spec: Any) -> Bound:
        """This protocol bound to ``spec``: the one object a run of it holds."""
        return Bound(self, spec)


@attrs.frozen
class Bound:
    """A protocol bound to one spec: what the engine runs, built once per run
    (:func:`oodsim.protocols.bind`) and shipped whole to the workers, which therefore need no
    protocol registry (a protocol a script registered travels inside it)."""

    protocol: Protocol
    spec: Any

    @property
    def name(self) -> str:
        return self.protocol.name

    @property
    def unit(self) -> str:
        return self.protocol.unit

    def preflight(self, store: Store) -> None:
        self.protocol.preflight(self.spec, store)

    def plan(self, seed: int) -> Sequence[Task]:
        return self.protocol.plan(self.spec, seed)

    def score(self, seed: int, store: Store) -> SeedResult:
        return self.protocol.score(self.spec, seed, store)

    def seed_coords(self, seed: int, store: Store) -> Mapping[str, str]:
        return self.protocol.seed_coords(self.spec, seed, store)

    def layout(self) -> Layout:
        return self.protocol.layout(self.spec)

    def result_attrs(self) -> Mapping[str, str]:
        return self.protocol.result_attrs(self.spec)
