"""Restricted maximum likelihood for crossed random effects with dense matrices: the
estimator :mod:`oodsim.stats.crossed` uses when a design is unbalanced (a failed seed leaves a
hole in the grid).

V = sum_T sigma2_T Z_T Z_T' + sigma2_residual I is maximized over the log-variances by L-BFGS-B
with an analytic gradient, on the contrasts orthogonal to the intercept. A term enters when its
columns add rank to those before it and leave the residual a degree of freedom.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np
from scipy import linalg, optimize

Subset = tuple[int, ...]

try:  # installed with scikit-learn; small dense solves run fastest on one BLAS thread
    from threadpoolctl import ThreadpoolController
except ImportError:  # pragma: no cover
    ThreadpoolController = None

_CONTROLLER: list[Any] = []


def one_blas_thread() -> contextlib.AbstractContextManager[Any]:
    """Limit BLAS to one thread (many small Cholesky solves: a multi-threaded BLAS only
    contends, tens of times slower on a busy machine); the controller is made once."""
    if ThreadpoolController is None:  # pragma: no cover
        return contextlib.nullcontext()
    if not _CONTROLLER:
        _CONTROLLER.append(ThreadpoolController())
    return _CONTROLLER[0].limit(limits=1, user_api="blas")


def _indicator(ids: np.ndarray) -> np.ndarray:
    """One-hot (n, n_cells) matrix of the observed cells of ``ids``."""
    _, inverse = np.unique(ids, return_inverse=True)
    z = np.zeros((len(ids), inverse.max() + 1))
    z[np.arange(len(ids)), inverse] = 1.0
    return z


def _rank(columns: Sequence[np.ndarray]) -> int:
    return int(np.linalg.matrix_rank(np.column_stack(columns)))


@attrs.frozen(eq=False)
class RemlModel:
    """The fixed parts of a REML fit: design of every random effect, projected Grams."""

    terms: list[Subset]
    df: np.ndarray  # per term, then the residual
    inverse: list[np.ndarray]  # observed-cell index of every observation, per term
    n_cells: list[int]
    basis: np.ndarray  # (n, n - 1) orthonormal complement of the intercept
    grams: np.ndarray  # (m, n - 1, n - 1): K' Z_T Z_T' K per term, then the identity


def reml_model(
    codes: np.ndarray, levels: tuple[int, ...], candidates: Sequence[Subset]
) -> RemlModel | None:
    """Pick the estimable terms; None when no residual degree of freedom is left."""
    n, k = codes.shape
    ones = np.ones(n)
    z = {}
    for t in candidates:
        ids = np.ravel_multi_index(tuple(codes[:, list(t)].T), tuple(levels[i] for i in t))
        z[t] = _indicator(np.asarray(ids))
    terms: list[Subset] = []
    dfs: list[int] = []
    rank = 1
    for t in candidates:
        with_t = _rank([ones, *(z[s] for s in terms), z[t]])
        if with_t == rank:
            continue  # aliased with the terms already in (e.g. two factors moving together)
        if n - with_t < 1:
            if len(t) == 1:
                return None  # a main effect uses up the residual: nothing to estimate
            continue  # confounded with the residual: folded into it
        below = [ones] + [
            z[s] for size in range(1, len(t)) for s in itertools.combinations(t, size)
        ]
        terms.append(t)
        dfs.append(_rank([*below, z[t]]) - _rank(below))  # its rank beyond its marginals
        rank = with_t
    df_res = n - rank
    if df_res < 1:
        return None
    basis = linalg.null_space(ones[None, :])
    grams = []
    inverse = []
    for t in terms:
        kz = basis.T @ z[t]
        grams.append(kz @ kz.T)
        inverse.append(np.argmax(z[t], axis=1))
    grams.append(np.eye(n - 1))
    return RemlModel(
        terms=terms,
        df=np.array([*dfs, df_res], dtype=float),
        inverse=inverse,
        n_cells=[z[t].shape[1] for t in terms],
        basis=basis,
        grams=np.asarray(grams),
    )


def _negative_reml(theta: np.ndarray, yt: np.ndarray, grams: np.ndarray) -> tuple[float, Any]:
    """Minus the REML log-likelihood (no constant) of the projected data and its gradient
    in the log-variances ``theta``."""
    s = np.exp(theta)
    v = np.tensordot(s, grams, axes=1)
    try:
        factor = linalg.cho_factor(v, lower=True, check_finite=False)
    except linalg.LinAlgError:
        return 1e300, np.zeros_like(theta)
    alpha = linalg.cho_solve(factor, yt, check_finite=False)
    vinv = linalg.cho_solve(factor, np.eye(len(yt)), check_finite=False)
    logdet = 2.0 * np.sum(np.log(np.diag(factor[0])))
    value = 0.5 * (logdet + yt @ alpha)
    trace = np.einsum("ij,kij->k", vinv, grams)
    quad = np.einsum("i,kij,j->k", alpha, grams, alpha)
    return float(value), 0.5 * s * (trace - quad)


#: Bounds of the standardized log-variances (the data are scaled to unit variance).
_LOG_BOUNDS = (math.log(1e-10), math.log(1e4))


def reml_fit(y: np.ndarray, model: RemlModel, starts: Sequence[np.ndarray]) -> np.ndarray:
    """REML variances (terms, then residual) of ``y``, from the best of ``starts`` (given
    in the units of ``y``); components that end at the lower bound are set to zero."""
    scale = float(np.var(y))
    if not scale > 0:
        return np.zeros(model.grams.shape[0])
    yt = model.basis.T @ (y - y.mean()) / math.sqrt(scale)
    best = None
    for start in starts:
        theta0 = np.log(np.clip(np.asarray(start) / scale, 1e-6, 1e3))
        fit = optimize.minimize(
            _negative_reml,
            theta0,
            args=(yt, model.grams),
            jac=True,
            method="L-BFGS-B",
            bounds=[_LOG_BOUNDS] * len(theta0),
            options={"ftol": 1e-15, "gtol": 1e-10, "maxiter": 500},
        )
        if best is None or fit.fun < best.fun:
            best = fit
    assert best is not None
    variance = np.exp(best.x)
    variance[best.x <= _LOG_BOUNDS[0] + 1e-3] = 0.0
    return variance * scale


def moment_start(y: np.ndarray, model: RemlModel) -> np.ndarray:
    """ANOVA-ish starting values: per term a one-way moment estimate between its cells
    (floored at 5% of the variance), the residual from within the finest cells."""
    total = float(np.var(y, ddof=1))
    floor = 0.05 * total
    start = []
    within = total
    for inverse, n_cells in zip(model.inverse, model.n_cells, strict=True):
        sizes = np.bincount(inverse, minlength=n_cells).astype(float)
        means = np.bincount(inverse, weights=y, minlength=n_cells) / sizes
        ssw = float(np.sum((y - means[inverse]) ** 2))
        dfw = len(y) - n_cells
        msw = ssw / dfw if dfw > 0 else total
        msb = float(np.sum(sizes * (means - y.mean()) ** 2)) / max(n_cells - 1, 1)
        n0 = (len(y) - np.sum(sizes**2) / len(y)) / max(n_cells - 1, 1)
        start.append(max((msb - msw) / n0, floor))
        if dfw > 0:
            within = min(within, msw)
    start.append(max(within, floor))
    return np.array(start)


def simulate(
    model: RemlModel, mean: float, variance: np.ndarray, n: int, rng: np.random.Generator
) -> np.ndarray:
    y = mean + math.sqrt(variance[-1]) * rng.standard_normal(n)
    for inverse, n_cells, var in zip(model.inverse, model.n_cells, variance, strict=False):
        y = y + math.sqrt(var) * rng.standard_normal(n_cells)[inverse]
    return y
