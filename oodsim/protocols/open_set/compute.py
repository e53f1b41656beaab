"""The engine's task of one simulation (:func:`compute_seed`), run on a Dask worker."""

from __future__ import annotations

from functools import partial

from oodsim.protocols.base import checked_kappa
from oodsim.protocols.open_set.kappa import Prepared
from oodsim.protocols.open_set.keys import CHECKPOINT, HELD_OUT, KAPPA, entries, needs_model
from oodsim.protocols.open_set.simulation import simulation
from oodsim.specs import ExperimentSpec
from oodsim.store import Store


def compute_seed(spec: ExperimentSpec, seed: int, store: Store) -> None:
    """The task of one simulation: train (or load) its model and store every missing output
    and model-based κ of :func:`entries` (run on a Dask worker by the engine)."""
    sim = simulation(spec, seed, store)
    missing = [entry for entry in entries(spec, seed) if not store.has(*entry)]
    if any(kind != KAPPA for kind, _ in missing):
        if not store.has(CHECKPOINT, sim.checkpoint):
            sim.model()
        sim.ensure_outputs()
        for ood in spec.ood:
            if ood.kind != HELD_OUT:
                sim.ensure_ood_outputs(ood)
    model_based = [d for d in spec.detectors if needs_model(d)]
    if any(kind == KAPPA for kind, _ in missing) and model_based:
        prepared = Prepared.load(spec, sim)
        for detector in model_based:
            checked_kappa(detector.label, sim.seed, partial(prepared.kappa, sim, detector))
