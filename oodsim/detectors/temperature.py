"""Temperature scaling (Guo et al., ICML 2017): MSP of logits / T, T fitted on validation NLL."""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import logsumexp

from oodsim.detectors._checks import DetectorInputError, as_float, fit_arrays, fit_hint, positive
from oodsim.detectors._registry import builtin
from oodsim.detectors.logits import max_softmax
from oodsim.outputs import Outputs

#: Search interval of the fitted temperature; the NLL is unimodal in log T, so the bounded
#: minimum is the global one inside it.
T_BOUNDS = (1e-3, 1e3)


def nll(logits: np.ndarray, labels: np.ndarray, temperature: float) -> float:
    """Mean negative log-likelihood of ``labels`` under softmax(logits / T)."""
    z = as_float(logits) / temperature
    picked = z[np.arange(len(z)), labels]
    return float(np.mean(logsumexp(z, axis=1) - picked))


def fit_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """The T in ``T_BOUNDS`` that minimizes the NLL, found by bounded Brent search on log T.

    The NLL is convex in 1/T, hence unimodal in log T: the search finds the global minimum.
    """
    z = as_float(logits)
    y = np.asarray(labels, dtype=np.int64)
    result = minimize_scalar(
        lambda log_t: nll(z, y, math.exp(log_t)),
        bounds=(math.log(T_BOUNDS[0]), math.log(T_BOUNDS[1])),
        method="bounded",
        options={"xatol": 1e-10, "maxiter": 500},
    )
    return math.exp(result.x)


@builtin("temperature", needs={"logits"}, fit_on="val")
def temperature(
    outputs: Outputs, *, fit: Outputs | None = None, temperature: float | None = None
) -> np.ndarray:
    """Max softmax of logits / T; T fitted by NLL on the validation split unless given.

    ``temperature=None`` fits T on ``fit`` (logits and labels of the in-distribution validation
    split); a number fixes T and needs no fit.
    """
    if temperature is None:
        if fit is None:
            raise DetectorInputError(
                fit_hint("temperature", "val", "logits=..., labels=...")
                + ", or a fixed temperature=T"
            )
        val = fit_arrays("temperature", fit, "val", labels=True)
        t = fit_temperature(val.logits, val.labels)
    else:
        t = positive("temperature", "temperature", temperature)
    return max_softmax(outputs.logits, t)
