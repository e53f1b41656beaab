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
    "Entry",
    "Protocol",
    "SeedFailed",
    "Task",
    "checked_kappa",
    "first_failure",
    "stored",
]


class Protocol:
    """Base class of a protocol plug-in, built once per run from its spec (:func:`bind`):
    ``protocol = OpenSetProtocol(spec)``. Subclasses set :attr:`name` and :attr:`spec_type`
    and write :meth:`plan`, :meth:`score` and :meth:`layout`, which read :attr:`spec`
    (register one with :func:`oodsim.protocols.register_protocol`). The engine holds that one
    object and ships it whole to the workers, which therefore need no protocol registry (a
    protocol a script registered travels inside it).

    The plug-ins a spec names (detectors, datasets, architectures) are found in its fields
    (:mod:`oodsim.specs.plugins`): a protocol does not list them.
    """

    name: ClassVar[str]
    spec_type: ClassVar[type]
    #: what one seed is called in progress lines ("simulations", "seeds")
    unit: ClassVar[str] = "seeds"
    #: ``"module:attribute"`` of the :class:`~oodsim.report.ReportHooks` of this protocol's
    #: results (its printed table, whether its seeds compare methods, its report files),
    #: imported only when a report needs it; None: the generic report
    report: ClassVar[str | None] = None

    def __init__(self, spec: Any) -> None:
        if not isinstance(spec, self.spec_type):
            raise TypeError(
                f"{type(self).__name__} runs specs of type {self.spec_type.__name__}, "
                f"not {type(spec).__name__}"
            )
        self.spec = spec

    @classmethod
    def from_data(cls, data: Mapping[str, Any], base: Path | None) -> Any:
        """A spec of this protocol from TOML data (without its ``protocol`` key); relative
        paths resolve against ``base``. By default the one converter builds
        :attr:`spec_type` from the data, with field-path errors."""
        return structure(data, cls.spec_type, f"{cls.name} spec")

    def preflight(self, store: Store) -> None:
        """Checks that can fail before any compute (data present, weights on disk)."""

    def plan(self, seed: int) -> Sequence[Task]:
        """The tasks whose entries ``score(seed, ...)`` reads."""
        raise NotImplementedError

    def score(self, seed: int, store: Store) -> SeedResult:
        """Score one seed from the store; raise :class:`SeedFailed` for a failed seed. The
        engine adds the seed's :meth:`seed_coords` to the result."""
        raise NotImplementedError

    def seed_coords(self, seed: int, store: Store) -> Mapping[str, str]:
        """Per-seed coordinates (what is known without scores, e.g. the class split): asked
        by the engine once per seed, scored or failed."""
        return {}

    def layout(self) -> Layout:
        """Dimensions and coordinates of this spec's result."""
        raise NotImplementedError
