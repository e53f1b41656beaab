"""Shared fixtures: small real experiments and one real Dask cluster per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from oodsim.specs import ExperimentSpec, load_spec

ROOT = Path(__file__).resolve().parents[1]


def small_digits(n_seeds: int = 4, **changes) -> ExperimentSpec:
    """The shipped digits spec, shrunk so one simulation trains in about a second (MSP only)."""
    spec = load_spec(ROOT / "specs" / "digits.toml")
    spec = attrs.evolve(
        spec,
        model=attrs.evolve(spec.model, width=8),
        training=attrs.evolve(spec.training, max_epochs=6, patience=2),
        seeds=attrs.evolve(spec.seeds, n=n_seeds),
        detectors=("msp",),
        metrics=("auroc", "accuracy"),
    )
    return attrs.evolve(spec, **changes)


@pytest.fixture(scope="session")
def cluster_address() -> Iterator[str]:
    """A real LocalCluster with two worker processes, shared by the tests that need one."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture(autouse=True, scope="session")
def _quiet_env() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
