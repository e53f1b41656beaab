"""Scoring one simulation from the store: every detector's κ and every metric (:func:`score`)."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import attrs
import numpy as np

from oodsim.artifacts.kappa import Prepared
from oodsim.artifacts.keys import HELD_OUT
from oodsim.artifacts.simulation import Simulation, SimulationFailed
from oodsim.metrics import METRIC_INFO, NonFiniteScoreError, evaluate, risk_coverage_curve
from oodsim.outputs import Outputs
from oodsim.protocols.base import checked_kappa
from oodsim.protocols.degenerate import stored_judgement


@attrs.frozen(eq=False)
class _Scored:
    """What scoring one simulation gives: metric values, the degenerate-training verdict and
    the parameters every detector was scored with."""

    score: np.ndarray  # (method, metric, ood)
    degenerate: str  # "" or why the classifier is not above chance
    params: list[str]  # JSON per method
    class_auroc: np.ndarray | None  # (method, dataset class): NaN but the seed's unknown ones
    risk_coverage: np.ndarray | None  # (method, coverage) where selective metrics are asked


def scores_selective(metrics: tuple[str, ...]) -> bool:
    """Whether a spec's ``metrics`` judge selective classification (AURC and the like, from κ
    and the ID samples' correctness): its results then carry the risk–coverage curve."""
    return any(METRIC_INFO[name].inputs == "kappa+correct" for name in metrics)


def score(sim: Simulation) -> _Scored:
    """Metric values of shape (method, metric, ood) from cached outputs, and per-seed facts.

    Every κ metric of a test set is computed in one :func:`oodsim.metrics.evaluate` call on
    the ID test samples followed by that set's OOD samples (``correct``: whether the classifier
    got each ID sample right, for OSCR and AURC; ``val_kappa``: κ of the ID validation
    samples, for the rates at a threshold fixed on them); the degenerate verdict is taken on the
    validation split, never on the test samples the metrics use (a permutation test's verdict
    is read from the store, or computed here and stored)."""
    spec = sim.spec
    prepared = Prepared.load(sim)
    scored = [
        checked_kappa(d.label, sim.seed, partial(prepared.kappa, sim, d)) for d in spec.detectors
    ]
    kappa = np.stack([k for k, _ in scored])  # (method, samples)
    sizes = np.cumsum([0] + [len(o) for o in prepared.outputs])
    id_part = slice(sizes[0], sizes[1])
    predicted = prepared.id_test.logits.argmax(axis=1)
    correct = predicted == prepared.id_test.labels
    kappa_metrics = [m for m in spec.metrics if METRIC_INFO[m].scores_detector]
    val_kappa = kappa[:, sizes[-2] : sizes[-1]] if sim.keys.validation else None
    classifier = _classifier_metrics(spec.metrics, prepared.id_test, predicted)
    result = np.empty((len(spec.detectors), len(spec.metrics), len(spec.ood)))
    for j in range(len(spec.ood)):
        ood_part = slice(sizes[j + 1], sizes[j + 2])
        both = np.concatenate([kappa[:, id_part], kappa[:, ood_part]], axis=1)
        n_ood = ood_part.stop - ood_part.start
        is_ood = np.r_[np.zeros(correct.size, bool), np.ones(n_ood, bool)]
        try:
            values = kappa_metrics and evaluate(
                both,
                is_ood,
                kappa_metrics,
                correct=np.r_[correct, np.ones(n_ood, bool)],
                val_kappa=val_kappa,
            )
        except NonFiniteScoreError as error:
            bad = [d.label for d, k in zip(spec.detectors, both) if not np.isfinite(k).all()]
            raise SimulationFailed(
                f"detector {', '.join(bad)} gave non-finite κ on seed {sim.seed}: {error}"
            ) from None
        for m, metric in enumerate(spec.metrics):
            result[:, m, j] = classifier[metric] if metric in classifier else values[metric]
    verdict = stored_judgement(
        sim.store,
        sim.keys.outputs,
        prepared.split_arrays,
        spec.degenerate.alpha,
        f"seed {sim.seed}'s classifier",
    )
    return _Scored(
        result,
        verdict.reason,
        [json.dumps(used, sort_keys=True, default=_plain) for _, used in scored],
        _class_auroc(sim, prepared, kappa, sizes),
        risk_coverage_curve(kappa[:, id_part], correct) if scores_selective(spec.metrics) else None,
    )


def _class_auroc(
    sim: Simulation, prepared: Prepared, kappa: np.ndarray, sizes: np.ndarray
) -> np.ndarray | None:
    """AUROC of every detector against each unknown class of the held-out OOD set alone (the
    ID test samples against that class's test samples), shape (method, dataset classes);
    NaN for the classes this seed knows (or trains its OOD part on). None without a held-out
    set."""
    held = [j for j, ood in enumerate(sim.spec.ood) if ood.kind == HELD_OUT]
    if not held:
        return None
    part = slice(sizes[held[0] + 1], sizes[held[0] + 2])
    prefix = prepared.sets[held[0] + 1].prefix
    classes = sim.data.labels[prepared.split_arrays[f"{prefix}.index"]]
    id_kappa, held_kappa = kappa[:, sizes[0] : sizes[1]], kappa[:, part]
    out = np.full((kappa.shape[0], sim.data.n_classes), np.nan)
    for label in np.unique(classes):
        of_class = held_kappa[:, classes == label]
        is_ood = np.r_[np.zeros(id_kappa.shape[1], bool), np.ones(of_class.shape[1], bool)]
        both = np.concatenate([id_kappa, of_class], axis=1)
        out[:, label] = evaluate(both, is_ood, ["auroc"])["auroc"]
    return out


def _classifier_metrics(
    names: tuple[str, ...], id_test: Outputs, predicted: np.ndarray
) -> dict[str, float]:
    """The metrics of the classifier on the ID test samples, the same for every detector:
    ``accuracy`` of its ``predicted`` classes and the calibration metrics of its softmax
    probabilities (computed once for all of them)."""
    infos = [METRIC_INFO[name] for name in names]
    probabilities = None
    if any(info.inputs == "probabilities+labels" for info in infos):
        # scipy loads with the first calibration metric (binding a spec does not need it)
        from scipy.special import softmax

        probabilities = softmax(id_test.logits, axis=1)
    out = {}
    for info in infos:
        if info.inputs == "predictions+labels":
            out[info.name] = float(info.function(predicted, id_test.labels))
        elif info.inputs == "probabilities+labels":
            out[info.name] = float(info.function(probabilities, id_test.labels))
    return out


def _plain(value: Any) -> Any:
    """JSON form of a parameter value numpy or a detector handed over (e.g. ``np.float64``)."""
    return value.item() if isinstance(value, np.generic) else str(value)
