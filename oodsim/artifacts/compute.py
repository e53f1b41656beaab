"""The engine's task of one simulation (:func:`simulation_task`, running :func:`compute_seed` on
a Dask worker): what the open set protocol plans for each seed, and the severity protocol for
each ``trained`` model it reads."""

from __future__ import annotations

from functools import partial

from oodsim.artifacts.kappa import Prepared
from oodsim.artifacts.keys import (
    CHECKPOINT,
    HELD_OUT,
    KAPPA,
    PartKeys,
    needs_model,
    simulation_keys,
)
from oodsim.artifacts.simulation import simulation
from oodsim.artifacts.tasks import Task, checked_kappa
from oodsim.keys import digest
from oodsim.specs import ExperimentSpec
from oodsim.store import Store


def compute_seed(spec: ExperimentSpec, seed: int, store: Store) -> None:
    """The task of one simulation (run on a Dask worker by the engine): train (or load) its
    model and store every missing output and model-based κ of its
    :class:`~oodsim.artifacts.keys.SimulationKeys`."""
    sim = simulation(spec, seed, store)
    missing = [entry for entry in sim.keys.entries if not store.has(*entry)]
    if any(kind != KAPPA for kind, _ in missing):
        if not store.has(CHECKPOINT, sim.checkpoint):
            sim.model()
        sim.ensure_outputs()
        for ood in spec.ood:
            if ood.kind != HELD_OUT:
                sim.ensure_ood_outputs(ood)
    model_based = [d for d in spec.detectors if needs_model(d)]
    if any(kind == KAPPA for kind, _ in missing) and model_based:
        prepared = Prepared.load(sim)
        for detector in model_based:
            checked_kappa(detector.label, sim.seed, partial(prepared.kappa, sim, detector))


def simulation_task(spec: ExperimentSpec, seed: int, parts: PartKeys | None = None) -> Task:
    """The one task that fills every entry of simulation ``seed`` of ``spec`` (the checkpoint
    is verified before the task counts as done: scoring never reads it); ``parts``: the
    spec's :class:`~oodsim.artifacts.keys.PartKeys`, hashed once for a run."""
    parts = parts or PartKeys.of(spec)
    needed = simulation_keys(spec, seed, parts).entries
    return Task(
        key=digest("simulation", "1", {"spec": parts.spec, "seed": seed}),
        entries=tuple(needed),
        compute=partial(compute_seed, spec, seed),
        verify=(needed[0],),
        label=f"simulation {seed}",
    )
