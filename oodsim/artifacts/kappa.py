"""What scoring needs besides the stored outputs: κ of model-based detectors (ODIN, MC
dropout; stored per evaluated subset, computed by :func:`model_kappa`, the one path every
protocol takes) and parameters tuned on validation data (:class:`Prepared`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from functools import partial
from typing import Any

import attrs
import numpy as np

from oodsim.artifacts.keys import KAPPA, OUTPUTS, EvalSet, kappa_key
from oodsim.artifacts.simulation import Simulation, subset_outputs
from oodsim.artifacts.tasks import ensured, stored
from oodsim.artifacts.tuning import choose
from oodsim.detectors import confidence, get_detector
from oodsim.outputs import Outputs
from oodsim.specs import DetectorSpec
from oodsim.specs.params import is_grid
from oodsim.store import Store


def model_kappa(
    name: str,
    outputs: Outputs,
    model: Any,
    inputs_of: Callable[[slice], Any],
    chunk: int | None,
    fit: Outputs | None = None,
    **params: Any,
) -> np.ndarray:
    """κ of detector ``name``, which runs the network on the inputs of ``outputs``' rows, in
    chunks of ``chunk`` rows (``inputs_of(rows)`` builds a chunk's input tensor, so inputs
    never fill the memory), or all at once (None). A stochastic κ (MC dropout) depends on the
    chunking, so the chunk size enters the keys of whoever chunks: open set κ (keyed without
    one) runs whole subsets, severity κ 1,024 rows at a time."""
    n = len(outputs)
    step = max(n, 1) if chunk is None else chunk
    parts = [
        confidence(name, outputs.take(rows), fit=fit, model=model, inputs=inputs_of(rows), **params)
        for rows in (slice(start, start + step) for start in range(0, max(n, 1), step))
    ]
    return np.concatenate(parts).astype(np.float64)


def put_kappa(store: Store, key: str, values: np.ndarray, describe: str, kind: str = KAPPA) -> None:
    """Write one detector's κ on one evaluated set: one value per sample (what every reader
    of κ relies on), with what it is. Every protocol's model-based κ is written here;
    ``kind`` is :data:`KAPPA` but for severity's, whose ``severity_kappa`` entries keep the
    kind they were written under."""
    if np.ndim(values) != 1:
        raise ValueError(f"κ has one value per sample; got an array of shape {np.shape(values)}")
    store.put(kind, key, {"kappa": values}, {"describe": describe})


def _stored_kappa(
    sim: Simulation,
    detector: DetectorSpec,
    eval_set: EvalSet,
    fit: Outputs | None,
    outputs: Outputs,
    choose_params: Callable[[], dict[str, Any]],
) -> np.ndarray:
    """κ of a model-based detector on one subset: cached, else computed and stored."""
    key = kappa_key(eval_set.entry[1], eval_set.prefix, detector, sim.streams)

    def compute() -> None:
        model, _, _ = sim.model()
        inputs = sim.inputs(eval_set)
        kappa = model_kappa(
            detector.name, outputs, model, inputs.__getitem__, None, fit, **choose_params()
        )
        put_kappa(sim.store, key, kappa, f"seed={sim.seed} {detector.label} on {eval_set.label}")

    what = f"κ of {detector.label} on {eval_set.label}"
    return ensured(sim.store, KAPPA, key, compute, what).arrays["kappa"]


def _model_params(
    sim: Simulation,
    detector: DetectorSpec,
    fit: Outputs | None,
    split_arrays: dict[str, np.ndarray],
) -> dict[str, Any]:
    """A model-based detector's parameters: its seed from the ``inference`` stream, and grids
    chosen on D_in_val vs D_out_val (see :mod:`oodsim.artifacts.tuning`)."""
    params = detector.kwargs
    if "seed" in get_detector(detector.name).defaults:
        params.setdefault("seed", sim.streams.torch_seed("inference"))
    if not is_grid(params):
        return params
    sets = [
        EvalSet(prefix, (OUTPUTS, sim.keys.outputs), prefix) for prefix in ("in_val", "out_val")
    ]

    def kappa_of(candidate: dict[str, Any]) -> np.ndarray:
        model, _, _ = sim.model()
        return np.concatenate(
            [
                confidence(
                    detector.name,
                    subset_outputs(split_arrays, s.prefix),
                    fit=fit,
                    model=model,
                    inputs=sim.inputs(s),
                    **candidate,
                )
                for s in sets
            ]
        )

    return choose(params, kappa_of, _validation_is_ood(split_arrays))


def _logit_params(
    detector: DetectorSpec, fit: Outputs | None, split_arrays: dict[str, np.ndarray]
) -> dict[str, Any]:
    """A logit/feature detector's parameters, grids chosen on D_in_val vs D_out_val."""
    if not is_grid(detector.kwargs):
        return detector.kwargs
    validation = Outputs.concat(
        [subset_outputs(split_arrays, "in_val"), subset_outputs(split_arrays, "out_val")]
    )
    return choose(
        detector.kwargs,
        lambda candidate: confidence(detector.name, validation, fit=fit, **candidate),
        _validation_is_ood(split_arrays),
    )


def _validation_is_ood(split_arrays: dict[str, np.ndarray]) -> np.ndarray:
    n_in, n_out = len(split_arrays["in_val.labels"]), len(split_arrays["out_val.labels"])
    return np.r_[np.zeros(n_in, bool), np.ones(n_out, bool)]


@attrs.frozen(eq=False)
class Prepared:
    """The cached outputs one seed is scored from: the sets κ is computed on (the test sets,
    then the ID validation set where a metric needs it), fit splits, validation."""

    sets: list[EvalSet]
    outputs: list[Outputs]
    pooled: Outputs
    fits: dict[str, Outputs]
    split_arrays: dict[str, np.ndarray]

    @classmethod
    def load(cls, sim: Simulation) -> Prepared:
        """The scored sets of ``sim`` read from the store (each outputs entry once)."""
        sets = list(sim.keys.scored)
        found = {
            entry: stored(sim.store, *entry, f"outputs of seed {sim.seed}").arrays
            for entry in sorted({s.entry for s in sets})
        }
        split_arrays = found[(OUTPUTS, sim.keys.outputs)]
        outputs = [subset_outputs(found[s.entry], s.prefix) for s in sets]
        fits = {
            "train": subset_outputs(split_arrays, "in_train"),
            "val": subset_outputs(split_arrays, "in_val"),
        }
        return cls(sets, outputs, Outputs.concat(outputs), fits, split_arrays)

    def kappa(self, sim: Simulation, detector: DetectorSpec) -> tuple[np.ndarray, dict]:
        """κ of one detector on the ID test set followed by every OOD test set (and the ID
        validation set where a metric needs it: :attr:`SimulationKeys.scored`), and the
        parameters it was scored with (grid choices, fitted values such as temperature
        scaling's T); a detector with a fit split is fitted once and applied to all of them."""
        info = get_detector(detector.name)
        fit = self.fits.get(info.fit_on) if info.fit_on else None
        if "model" in info.needs:
            params = functools.cache(partial(_model_params, sim, detector, fit, self.split_arrays))
            kappa = np.concatenate(
                [
                    _stored_kappa(sim, detector, s, fit, o, params)
                    for s, o in zip(self.sets, self.outputs)
                ]
            )
            used = params()
        else:
            used = info.fitted(fit, _logit_params(detector, fit, self.split_arrays))
            kappa = confidence(detector.name, self.pooled, fit=fit, **used)
        return np.asarray(kappa, dtype=np.float64), used

    @property
    def id_test(self) -> Outputs:
        return self.outputs[0]
