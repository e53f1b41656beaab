"""``confidence``: call a detector by name after checking that it gets what it needs."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from oodsim.detectors._checks import DetectorInputError, fit_hint
from oodsim.detectors._model_guard import unchanged_model
from oodsim.detectors._registry import Detector, get_detector
from oodsim.outputs import Outputs


def _check_inputs(
    det: Detector, outputs: Outputs | None, fit: Outputs | None, model: Any, inputs: Any
) -> int:
    """Raise a message that says what to pass; return the number of samples to score."""
    name = det.name
    if outputs is not None and not isinstance(outputs, Outputs):
        raise DetectorInputError(
            f"detector {name!r} scores an Outputs(...), got {type(outputs).__name__}"
        )
    if "model" in det.needs:
        if model is None or inputs is None:
            raise DetectorInputError(
                f"detector {name!r} needs model= (a torch.nn.Module that "
                "returns logits) and inputs= (a normalized float tensor)"
            )
        if outputs is not None and len(outputs) != len(inputs):
            raise DetectorInputError(
                f"detector {name!r}: outputs have {len(outputs)} rows but inputs have {len(inputs)}"
            )
    for field in ("logits", "features"):
        if field in det.needs and (outputs is None or getattr(outputs, field) is None):
            raise DetectorInputError(f"detector {name!r} needs {field}: pass Outputs({field}=...)")
    if fit is not None and not isinstance(fit, Outputs):
        raise DetectorInputError(fit_hint(name, det.fit_on) + f"; got {type(fit).__name__}")
    if det.fit_required:
        arrays = [f for f in ("logits", "features") if f in det.needs] or ["logits"]
        wanted = ", ".join(f"{f}=..." for f in arrays)
        if fit is None:
            raise DetectorInputError(fit_hint(name, det.fit_on, wanted))
        for field in arrays:
            if getattr(fit, field) is None:
                raise DetectorInputError(
                    fit_hint(name, det.fit_on, wanted) + f"; fit.{field} is missing"
                )
    return len(outputs) if outputs is not None else len(inputs)


class DetectorWroteInputs(DetectorInputError):
    """A detector tried to change the :class:`~oodsim.outputs.Outputs` it scores (read-only)."""


class NonFiniteKappaError(DetectorInputError):
    """A detector produced NaN or ±inf: no ranking is defined, so the caller must not score it."""


def confidence(
    name: str,
    outputs: Outputs | None,
    *,
    fit: Outputs | None = None,
    model: Any = None,
    inputs: Any = None,
    **params: Any,
) -> np.ndarray:
    """κ of detector ``name`` for every sample: float64, shape (n,), higher = more in-distribution.

    ``fit`` is the in-distribution split named by the detector's ``fit_on``; ``model`` and
    ``inputs`` are needed by detectors that run the network (``needs`` contains "model"), for
    which ``outputs`` may be None. Unknown parameters, missing inputs and non-finite results
    raise errors that name the detector.
    """
    det = get_detector(name)
    det.resolve(params)  # rejects unknown names; the function applies its own defaults
    det.check_limits(params)
    n = _check_inputs(det, outputs, fit, model, inputs)
    call: dict[str, Any] = {"fit": fit, **params} if det.takes_fit else dict(params)
    guard: contextlib.AbstractContextManager = contextlib.nullcontext()
    if "model" in det.needs:
        call.update(model=model, inputs=inputs)
        guard = unchanged_model(name, model)  # the next detector runs the same network
    try:
        with guard:
            kappa = np.asarray(det.func(outputs, **call), dtype=np.float64)
    except ValueError as error:  # numpy's words for a write into a read-only array
        if "read-only" not in str(error) or isinstance(error, DetectorInputError):
            raise
        raise DetectorWroteInputs(
            f"detector {name!r} changed its inputs in place ({error}): every detector of a "
            "seed reads the same cached outputs, which are read-only so that one cannot change "
            "the scores of the others; work on a copy (z = outputs.logits.copy())"
        ) from error
    if kappa.shape != (n,):
        raise ValueError(f"detector {name!r} returned shape {kappa.shape}, expected ({n},)")
    bad = ~np.isfinite(kappa)
    if bad.any():
        raise NonFiniteKappaError(
            f"detector {name!r} returned {int(bad.sum())} non-finite values of {n} "
            f"(first at row {int(np.argmax(bad))})"
        )
    return kappa
