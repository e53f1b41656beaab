"""Result fixtures built with the project's own constructor (:func:`oodsim.results.build`).

Scores are synthetic (known means, a class-split effect, one failed seed) but the Dataset is
exactly what a run returns: the layouts are those of the open set protocol (``severity`` =
"all", optional ``ood``) and of the severity protocol (levels × ``model``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import xarray as xr

from oodsim.engine import load
from oodsim.protocols import get_protocol
from oodsim.protocols.open_set import PROTOCOL as OPEN_SET
from oodsim.results import NO_SEVERITY, SeedResult, build, design_coord
from oodsim.specs import DatasetSpec, ExperimentSpec, OODSetSpec, SeedsSpec
from tests.conftest import ROOT

METRICS = ("auroc", "aupr_in", "aupr_out", "fpr95", "accuracy")


def _spec(
    methods: tuple[str, ...], oods: tuple[str, ...] | None, seeds: SeedsSpec
) -> ExperimentSpec:
    ood = [OODSetSpec(kind="uniform_noise", label=o) for o in oods] if oods else ["held_out"]
    return ExperimentSpec(
        dataset=DatasetSpec(name="digits"), detectors=methods, metrics=METRICS, ood=ood, seeds=seeds
    )


def _severity_spec(methods: tuple[str, ...], n_levels: int, models: tuple[str, ...]) -> Any:
    """The shipped severity spec with these κ, levels and (relabelled) models."""
    spec = load(ROOT / "specs" / "severity_fashion_mnist.toml")
    ref = spec.models[0]
    return attrs.evolve(
        spec,
        models=tuple(attrs.evolve(ref, label=label) for label in models),
        detectors=methods,
        n_levels=n_levels,
    )


#: Per-seed variables added to the open set layout after the tests that read synthetic scores.
LATER = frozenset({"class_auroc", "risk_coverage"})


def _fill(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Values of a per-seed variable other than ``score``: JSON strings or numbers."""
    if name.endswith("classes"):
        return np.full(shape, "[]")
    return rng.uniform(0.5, 1.0, shape)


def synthetic_results(
    n_seeds: int = 40,
    methods: tuple[str, ...] = ("msp", "odin", "energy"),
    levels: tuple[str, ...] | None = None,
    oods: tuple[str, ...] | None = None,
    models: tuple[str, ...] = ("model_a",),
    n_splits: int = 4,
    failed: tuple[int, ...] = (3,),
    seed: int = 0,
    first_seed: int = 100,
    design: Mapping[str, int] | None = None,
) -> xr.Dataset:
    """Results of ``n_seeds`` seeds with the layout of a real protocol: open set
    (``levels=None``, optional ``oods``) or severity (``levels`` "0".."L-1" × ``models``); method
    means rise linearly from 0.80 to 0.83, and a class-split effect shifts whole seeds.
    ``design`` (open set only): a ``[seeds.design]`` table; the seeds then carry its
    ``stream_*`` levels, as a designed run's results do."""
    rng = np.random.default_rng(seed)
    # the default seeds unless designed: results of any n share one spec (and key)
    seeds = SeedsSpec(n=n_seeds, start=first_seed, design=design) if design else SeedsSpec()
    if levels is None:
        spec = _spec(methods, oods, seeds)
        protocol = OPEN_SET
    else:
        assert list(levels) == [str(i) for i in range(len(levels))], "levels are 0..L-1"
        spec = _severity_spec(methods, len(levels), models)
        protocol = get_protocol("severity")
    layout = protocol(spec).layout()
    metrics = list(layout.coords["metric"])
    shape = layout.shape("score")
    splits = np.arange(n_seeds) % n_splits
    split_effect = rng.normal(0, 0.02, n_splits)[splits]
    base = np.linspace(0.80, 0.83, len(methods)).reshape(-1, *([1] * (len(shape) - 1)))
    results = []
    # variables results gained later draw from a stream of their own: the scores of a given
    # seed stay the numbers every test was written against
    later = np.random.default_rng([seed, 1])
    for i in range(n_seeds):
        score = np.clip(base + split_effect[i] + rng.normal(0, 0.01, shape), 0, 1)
        score[:, metrics.index("fpr95")] = 1 - score[:, metrics.index("fpr95")]
        variables = {"score": score} | {
            name: _fill(name, layout.shape(name), later if name in LATER else rng)
            for name in layout.variables
            if name != "score"
        }
        results.append(
            SeedResult(
                first_seed + i,
                {} if i in failed else variables,
                {"class_split": f"split{splits[i]}"} | design_coords(spec, first_seed + i),
                failure="training diverged" if i in failed else "",
            )
        )
    return build(spec, protocol.name, layout, results)


def design_coords(spec: ExperimentSpec, seed: int) -> dict[str, int]:
    """The ``stream_*`` coordinates of one seed, from the spec's design (none without one)."""
    return {design_coord(s): level for s, level in spec.seeds.design_levels(seed).items()}


__all__ = ["METRICS", "NO_SEVERITY", "synthetic_results"]
