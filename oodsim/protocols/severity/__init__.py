"""The C-OOD severity benchmark (Galil, Dabbah, El-Yaniv) as a plug-in of the engine.

Models × κ × datasets, repeated over seeds: per (model, κ) the OOD classes are sorted by how
ID-like κ finds them and grouped into severity levels (0 = easiest). The modules follow the flow:

- :mod:`.levels`: Algorithm 1 as pure functions of κ arrays;
- :mod:`.spec`: :class:`~.spec.SeveritySpec` and its sources; :mod:`.reading`: TOML loading;
- :mod:`.sources`: the samples (images or files, labels) of each source;
- :mod:`.plan`: what a seed needs (units of work) and the content keys of their entries;
- :mod:`.compute`: the engine tasks of a seed and what they run on a worker;
- :mod:`.scoring`: κ, levels and metrics of a seed from the store; the result layout;
- :mod:`.analysis`: correlations and improvements across models of finished results.

:data:`PROTOCOL` is what ``oodsim.load`` / ``oodsim.run`` use for ``protocol = "severity"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oodsim.protocols.base import Protocol, Task
from oodsim.protocols.severity import compute, plan, scoring
from oodsim.protocols.severity.reading import severity_spec_from_dict
from oodsim.protocols.severity.spec import SeveritySpec
from oodsim.results import Layout, SeedResult
from oodsim.store import Store


class SeverityProtocol(Protocol):
    """Severity levels of every (model, κ[, dataset]) per seed."""

    name = "severity"
    spec_type = SeveritySpec
    unit = "seeds"

    spec: SeveritySpec

    @classmethod
    def from_data(cls, data: Mapping[str, Any], base: Path | None) -> SeveritySpec:
        return severity_spec_from_dict(data, base)

    def preflight(self, store: Store) -> None:
        plan.preflight(self.spec, store, self.spec.seeds.all()[: self.spec.max_seeds])

    def plan(self, seed: int) -> list[Task]:
        return compute.tasks(self.spec, seed)

    def score(self, seed: int, store: Store) -> SeedResult:
        return scoring.score(self.spec, seed, store)

    def layout(self) -> Layout:
        return scoring.layout(self.spec)


PROTOCOL = SeverityProtocol
