"""Temperature scaling (Guo et al., ICML 2017): MSP of logits / T, T fitted on validation NLL."""

from __future__ import annotations

import math

import numpy as np

from oodsim.detectors._checks import (
    DetectorInputError,
    as_float,
    fit_arrays,
    fit_hint,
    greater_than,
    positive,
)
from oodsim.detectors._registry import builtin
from oodsim.detectors._scipy import logsumexp, minimize_scalar
from oodsim.detectors.logits import max_softmax_log_odds
from oodsim.outputs import Outputs

#: The fitted temperature lies in [T_MIN, T_MAX]. The NLL is unimodal in log T, so the bounded
#: minimum is the global one inside it. The bounds matter only where the NLL has no minimum:
#: on a validation split that is classified perfectly it keeps falling as T → 0 (a fit would
#: run off to T ≈ 0.003 and below), on one at chance it keeps falling as T → ∞. There the fit
#: returns the bound itself, so ``fit_temperature(...) in T_BOUNDS`` flags such a split.
#: T_MIN = 0.05 sharpens the softmax 20-fold; T_MAX = 100 makes it nearly uniform.
T_MIN = 0.05
T_MAX = 100.0
T_BOUNDS = (T_MIN, T_MAX)


def nll(logits: np.ndarray, labels: np.ndarray, temperature: float) -> float:
    """Mean negative log-likelihood of ``labels`` under softmax(logits / T).

    Per row −log p_y = log1p(Σ_{j≠y} e^{(z_j − z_y)/T}) (np.logaddexp), exact to relative
    rounding even when it is far below 1e-16: on a separable split the NLL keeps decreasing
    towards T → 0 instead of flattening to exactly 0, so the search sees its true slope.
    """
    z = as_float(logits)
    y = np.asarray(labels, dtype=np.int64)
    rows = np.arange(len(z))
    gaps = (z - z[rows, y][:, None]) / temperature
    gaps[rows, y] = -np.inf
    return float(np.mean(np.logaddexp(0.0, logsumexp(gaps, axis=1))))


def fit_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """The T in ``T_BOUNDS`` that minimizes the NLL, found by bounded Brent search on log T.

    The NLL is convex in 1/T, hence unimodal in log T: the search finds the global minimum.
    Where the NLL is monotone over the bounds (a perfectly classified or a chance-level split)
    the result is exactly ``T_MIN`` or ``T_MAX``.
    """
    z = as_float(logits)
    y = np.asarray(labels, dtype=np.int64)
    result = minimize_scalar(
        lambda log_t: nll(z, y, math.exp(log_t)),
        bounds=(math.log(T_MIN), math.log(T_MAX)),
        method="bounded",
        options={"xatol": 1e-10, "maxiter": 500},
    )
    candidates = (T_MIN, math.exp(result.x), T_MAX)  # Brent never evaluates the bounds
    return min(candidates, key=lambda t: nll(z, y, t))


def fitted_temperature(fit: Outputs, *, temperature: float | None = None) -> dict[str, float]:
    """The T :func:`temperature` fits on ``fit`` when none is given (nothing to fit otherwise):
    the engine records it per seed and scores with it fixed, which gives the same κ."""
    if temperature is not None:
        return {}
    val = fit_arrays("temperature", fit, "val", labels=True)
    return {"temperature": fit_temperature(val.logits, val.labels)}


@builtin(
    "temperature",
    family="softmax / logit",
    needs={"logits"},
    fit_on="val",
    version="2",
    fit_params=fitted_temperature,
    limits={"temperature": greater_than(0)},
    confidence_scale="probability",
)
def temperature(
    outputs: Outputs, *, fit: Outputs | None = None, temperature: float | None = None
) -> np.ndarray:
    """Max softmax of logits / T as its log-odds; T fitted by NLL on the validation split.

    κ = log p − log(1 − p) with p = max_c softmax(z/T)_c (``expit(κ)`` = p). ``temperature=None``
    fits T in ``T_BOUNDS`` on ``fit`` (logits and labels of the in-distribution validation split;
    :func:`fit_temperature` returns it); a number fixes T and needs no fit.
    """
    if temperature is None:
        if fit is None:
            raise DetectorInputError(
                fit_hint("temperature", "val", "logits=..., labels=...")
                + ", or a fixed temperature=T"
            )
        t = fitted_temperature(fit)["temperature"]
    else:
        t = positive("temperature", "temperature", temperature)
    return max_softmax_log_odds(outputs.logits, t)
