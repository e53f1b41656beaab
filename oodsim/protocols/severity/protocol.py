"""The severity protocol's plug-in object (:class:`SeverityProtocol`): what the engine asks of
a severity spec, answered by :mod:`.plan`, :mod:`.compute` and :mod:`.scoring`."""

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
    report = "oodsim.report.severity:REPORT"
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
