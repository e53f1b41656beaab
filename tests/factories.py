"""Result fixtures built with the project's own constructor (:func:`oodsim.results.build`).

Scores are synthetic (known means, a class-split effect, one failed seed) but the Dataset is
exactly what a run returns: the layouts are those of the open set protocol (``severity`` =
"all", optional ``ood``) and of the severity protocol (levels × ``model``).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from oodsim.protocols.open_set import PROTOCOL as OPEN_SET
from oodsim.results import NO_SEVERITY, Layout, SeedResult, build
from oodsim.specs import DatasetSpec, ExperimentSpec, OODSetSpec

METRICS = ("auroc", "aupr_in", "aupr_out", "fpr95", "accuracy")


def _spec(methods: tuple[str, ...], oods: tuple[str, ...] | None) -> ExperimentSpec:
    ood = [OODSetSpec(kind="uniform_noise", label=o) for o in oods] if oods else ["held_out"]
    return ExperimentSpec(
        dataset=DatasetSpec(name="digits"), detectors=methods, metrics=METRICS, ood=ood
    )


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
) -> xr.Dataset:
    """Results of ``n_seeds`` seeds: open set shaped (``levels=None``, optional ``oods``) or
    severity shaped (``levels`` × ``models``); method means rise linearly from 0.80 to 0.83."""
    rng = np.random.default_rng(seed)
    spec = _spec(methods, oods)
    if levels is None:
        layout, protocol = OPEN_SET.layout(spec), "open_set"
    else:
        coords = {
            "method": list(methods),
            "metric": list(METRICS),
            "severity": list(levels),
            "model": list(models),
        }
        layout = Layout(coords, {"score": ("method", "metric", "severity", "model")})
        protocol = "severity"
    shape = layout.shape("score")
    splits = np.arange(n_seeds) % n_splits
    split_effect = rng.normal(0, 0.02, n_splits)[splits]
    base = np.linspace(0.80, 0.83, len(methods)).reshape(-1, *([1] * (len(shape) - 1)))
    results = []
    for i in range(n_seeds):
        score = np.clip(base + split_effect[i] + rng.normal(0, 0.01, shape), 0, 1)
        score[:, METRICS.index("fpr95")] = 1 - score[:, METRICS.index("fpr95")]
        results.append(
            SeedResult(
                first_seed + i,
                {} if i in failed else {"score": score},
                {"class_split": f"split{splits[i]}"},
                failure="training diverged" if i in failed else "",
            )
        )
    return build(spec, protocol, layout, results)


__all__ = ["METRICS", "NO_SEVERITY", "synthetic_results"]
