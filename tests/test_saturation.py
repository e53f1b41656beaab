"""Softmax κ never tie because of floating point (issue 10): ranks equal the exact ranks.

Rows with top-1 margins of 20–60 have a max softmax p that rounds to exactly 1.0 in float64
(1 − p < 1.1e-16) and an entropy that rounds to ~0: compared on the probability scale most of
them tie. The κ of every softmax-based detector (log-odds of p, −log of the entropy) must keep
them apart and rank them exactly as the values computed with 60-digit mpmath do.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from torch import nn

from oodsim import metrics
from oodsim.detectors import confidence, odin, temperature
from oodsim.outputs import Outputs
from oodsim.protocols import imagenet_o

mpmath = pytest.importorskip("mpmath")

N_ROWS, N_CLASSES = 1000, 10


def margin_logits(seed: int = 0, low: float = 20.0, high: float = 60.0) -> np.ndarray:
    """1,000 rows of 10 logits whose top-1 margins are distinct values in [low, high]."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 3.0, (N_ROWS, N_CLASSES))
    margins = rng.permutation(np.linspace(low, high, N_ROWS))
    top = rng.integers(0, N_CLASSES, N_ROWS)
    rows = np.arange(N_ROWS)
    z[rows, top] = -np.inf
    z[rows, top] = z.max(axis=1) + margins
    return z


def exact(logits: np.ndarray, t: float = 1.0) -> tuple[list, list]:
    """(1 − p, H) per row of softmax(z / T): p the max softmax, H the entropy, in 60 digits.

    With s = Σ_{j≠top} e^{(z_j − z_top)/T}: 1 − p = s / (1 + s) and −log p_top = log1p(s), both
    to 60 significant digits however small s is (mpmath's exponent is unbounded, and p itself
    would round to 1 at 60 digits once s < 1e-60).
    """
    one_minus_p, entropy = [], []
    with mpmath.workdps(60):
        for row in logits:
            z = [mpmath.mpf(float(v)) / t for v in row]
            top = int(np.argmax(row))
            gaps = [v - z[top] for v in z]
            rest = mpmath.fsum(mpmath.exp(g) for j, g in enumerate(gaps) if j != top)
            log_norm = mpmath.log1p(rest)  # −log p_top
            one_minus_p.append(rest / (1 + rest))
            entropy.append(
                log_norm / (1 + rest)
                + mpmath.fsum(
                    mpmath.exp(g - log_norm) * (log_norm - g)
                    for j, g in enumerate(gaps)
                    if j != top
                )
            )
    return one_minus_p, entropy


def assert_ranks_exactly(kappa: np.ndarray, exact_values: list) -> None:
    """κ has no ties and sorts the rows in the strictly decreasing order of the exact values
    (1 − p or H: the higher κ, the more confident the row)."""
    assert len(np.unique(kappa)) == len(kappa)
    ordered = [exact_values[i] for i in np.argsort(kappa)]
    assert all(a > b for a, b in zip(ordered, ordered[1:], strict=False))


class Passthrough(nn.Module):
    """A "network" whose logits are its inputs, with a dropout module for MC dropout."""

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(x)


@pytest.fixture(scope="module")
def rows() -> tuple[np.ndarray, list, list]:
    z = margin_logits()
    return (z, *exact(z))


def test_the_probability_scale_ties_most_of_these_rows(rows) -> None:
    z, _, _ = rows
    p = np.exp(z.max(axis=1) - logsumexp(z, axis=1))  # the former msp κ
    assert len(np.unique(p)) < 0.5 * N_ROWS and (p == 1.0).sum() > 0.5 * N_ROWS


def test_logit_detectors_rank_exactly(rows) -> None:
    z, one_minus_p, entropy = rows
    outputs = Outputs(logits=z)
    msp = confidence("msp", outputs)
    assert_ranks_exactly(msp, one_minus_p)
    assert_ranks_exactly(confidence("entropy", outputs), entropy)
    np.testing.assert_array_equal(imagenet_o.max_softmax(z), msp)
    # κ keeps its meaning: p = expit(κ), H = exp(−κ), to float64 precision
    with mpmath.workdps(60):
        odds = [float(mpmath.log((1 - q) / q)) for q in one_minus_p[:50]]
        minus_log_h = [float(-mpmath.log(h)) for h in entropy[:50]]
    np.testing.assert_allclose(msp[:50], odds, rtol=1e-14)
    np.testing.assert_allclose(confidence("entropy", outputs)[:50], minus_log_h, rtol=1e-14)


@pytest.mark.parametrize("t", [0.05, 2.5])
def test_temperature_ranks_exactly(rows, t: float) -> None:
    z = rows[0]
    one_minus_p, _ = exact(z, t)
    kappa = confidence("temperature", Outputs(logits=z), temperature=t)
    assert_ranks_exactly(kappa, one_minus_p)


def test_model_detectors_rank_exactly(rows) -> None:
    z, one_minus_p, entropy = rows
    inputs = torch.from_numpy(z)
    model = Passthrough()
    msp = confidence("msp", Outputs(logits=z))
    mc = confidence("mc_dropout", None, model=model, inputs=inputs, n_passes=3)
    mc_entropy = confidence("mc_dropout_entropy", None, model=model, inputs=inputs, n_passes=3)
    odin = confidence("odin", None, model=model, inputs=inputs, temperature=1.0, epsilon=0.0)
    assert_ranks_exactly(mc, one_minus_p)  # dropout p = 0: the mean softmax is the softmax
    assert_ranks_exactly(mc_entropy, entropy)
    assert_ranks_exactly(odin, one_minus_p)  # ε = 0, T = 1: ODIN is the MSP
    np.testing.assert_allclose(mc, msp, rtol=1e-13)
    np.testing.assert_array_equal(odin, msp)
    # with real dropout and ODIN's defaults the κ stay distinct too
    noisy = Passthrough(0.1)
    kwargs = {"model": noisy, "inputs": inputs, "n_passes": 4}
    assert len(np.unique(confidence("mc_dropout", None, **kwargs))) == N_ROWS
    assert len(np.unique(confidence("mc_dropout_entropy", None, **kwargs))) == N_ROWS
    assert len(np.unique(confidence("odin", None, model=model, inputs=inputs))) == N_ROWS


def test_auroc_is_unchanged_where_nothing_was_tied() -> None:
    rng = np.random.default_rng(1)
    z = rng.normal(0.0, 2.0, (2000, 10))
    is_ood = rng.random(2000) < 0.4
    z[~is_ood, 0] += 2.0
    p = np.exp(z.max(axis=1) - logsumexp(z, axis=1))
    assert len(np.unique(p)) == len(p)
    outputs = Outputs(logits=z)
    assert metrics.auroc(confidence("msp", outputs), is_ood) == metrics.auroc(p, is_ood)
    log_p = z - logsumexp(z, axis=1, keepdims=True)
    neg_entropy = np.sum(np.exp(log_p) * log_p, axis=1)
    assert len(np.unique(neg_entropy)) == len(neg_entropy)
    assert metrics.auroc(confidence("entropy", outputs), is_ood) == metrics.auroc(
        neg_entropy, is_ood
    )


def test_saturated_auroc_counts_no_false_ties() -> None:
    # ID rows with margins 20–60 (κ distinct) against OOD rows of margin 15–40: AUROC ranks
    # every pair by its exact order; the probability scale scores most ID–OOD pairs as ties.
    z_id = margin_logits(2)
    z = np.vstack([z_id, margin_logits(3, 15.0, 40.0)])
    is_ood = np.r_[np.zeros(N_ROWS, bool), np.ones(N_ROWS, bool)]
    kappa = confidence("msp", Outputs(logits=z))
    one_minus_p, _ = exact(z)
    assert_ranks_exactly(kappa, one_minus_p)
    # exact AUROC: the share of (ID, OOD) pairs in which the ID row is the more confident
    rank = np.empty(2 * N_ROWS)
    rank[sorted(range(2 * N_ROWS), key=lambda i: one_minus_p[i], reverse=True)] = np.arange(
        2 * N_ROWS
    )
    exact_auroc = float(np.mean(rank[:N_ROWS, None] > rank[None, N_ROWS:]))
    assert metrics.auroc(kappa, is_ood) == pytest.approx(exact_auroc, abs=1e-12)
    p = np.exp(z.max(axis=1) - logsumexp(z, axis=1))
    assert metrics.auroc(p, is_ood) < exact_auroc - 0.02


# --- temperature fit bounds -------------------------------------------------------------------


def test_temperature_fit_stops_at_its_bounds() -> None:
    z = margin_logits(5)
    separable = z.argmax(axis=1)  # every validation row classified correctly
    assert temperature.fit_temperature(z, separable) == temperature.T_MIN
    wrong = z.argmin(axis=1)  # every row confidently wrong: flatter is always better
    assert temperature.fit_temperature(z, wrong) == temperature.T_MAX
    assert temperature.T_BOUNDS == (temperature.T_MIN, temperature.T_MAX)


def test_temperature_on_a_separable_split_keeps_every_rank() -> None:
    rng = np.random.default_rng(6)
    val = rng.normal(0.0, 1.0, (300, 5))
    labels = rng.integers(0, 5, 300)
    val[np.arange(300), labels] += 12.0  # perfectly classified, as on easy digits seeds
    fit = Outputs(logits=val, labels=labels)
    test = Outputs(logits=margin_logits(7)[:, :5] / 4)
    kappa = confidence("temperature", test, fit=fit)
    assert len(np.unique(kappa)) == len(kappa)
    t = temperature.fit_temperature(val, labels)
    assert t == temperature.T_MIN
    one_minus_p, _ = exact(test.logits, t)
    assert_ranks_exactly(kappa, one_minus_p)


def test_nll_does_not_flatten_on_a_separable_split() -> None:
    z = margin_logits(8)
    y = z.argmax(axis=1)
    values = [temperature.nll(z, y, t) for t in (0.5, 1.0, 2.0, 4.0)]
    assert 0 < values[0] < values[1] < values[2] < values[3]


def test_odin_perturbation_keeps_its_direction_on_saturated_rows() -> None:
    # A linear "network" z = W x with top-1 margins of ~35–55: S_ŷ is exactly 1.0 in float32,
    # so ∇ log S_ŷ would lose its ∇z_ŷ term; the step must still follow the exact gradient sign.
    rng = np.random.default_rng(9)
    weight = np.linalg.qr(rng.normal(0.0, 1.0, (6, 6)))[0][:4]  # orthonormal rows
    x = rng.normal(0.0, 1.0, (200, 6)) + 45.0 * weight[rng.integers(0, 4, 200)]
    model = nn.Linear(6, 4, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(weight))
    z = x @ weight.T
    assert np.all(np.diff(np.sort(z, axis=1)[:, -2:], axis=1) > 30)
    eps = 1e-3
    x_tilde = odin.perturb(model, torch.from_numpy(x).float(), 1.0, eps).double().numpy()
    # exact: ∇ logit(S_ŷ) = W_ŷ − Σ_{j≠ŷ} q_j W_j, q the softmax of the other logits
    y = z.argmax(axis=1)
    others = np.where(np.arange(4) == y[:, None], -np.inf, z)
    q = np.exp(others - logsumexp(others, axis=1, keepdims=True))
    gradient = weight[y] - q @ weight
    clear = np.abs(gradient) > 1e-3  # components whose sign float32 rounding cannot flip
    assert clear.mean() > 0.95
    step = np.sign(x_tilde - x.astype(np.float32))
    np.testing.assert_array_equal(step[clear], np.sign(gradient)[clear])
    # the gradient of log S_ŷ itself, in float32, points elsewhere on these rows
    x32 = torch.from_numpy(x).float().requires_grad_(True)
    log_top = torch.log_softmax(model(x32), dim=1).max(dim=1).values
    (naive,) = torch.autograd.grad(log_top.sum(), x32)
    assert (np.sign(naive.numpy()) != np.sign(gradient))[clear].mean() > 0.1
