"""ODIN (Liang et al., ICLR 2018): temperature scaling plus a small input perturbation."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from oodsim.detectors._checks import DetectorInputError, at_least, greater_than, positive
from oodsim.detectors._registry import builtin
from oodsim.detectors._torch import check_model_inputs, device_of, eval_mode, row_batches
from oodsim.detectors.logits import max_softmax_log_odds
from oodsim.outputs import Outputs

if TYPE_CHECKING:
    import torch


def perturb(
    model: torch.nn.Module, x: torch.Tensor, temperature: float, epsilon: float
) -> torch.Tensor:
    """x̃ = x − ε·sign(−∇ₓ log S_ŷ(x; T)), ŷ the predicted class, one batch.

    Only the input gradient is taken (``torch.autograd.grad``), so no parameter gathers ``.grad``.
    The loss is the per-sample sum, so the sign is that of each sample's own gradient.
    The gradient taken is that of the log-odds −logsumexp_{j≠ŷ}((z_j − z_ŷ)/T) of S_ŷ, which is
    ∇ log S_ŷ / (1 − S_ŷ): the same sign, but it does not lose its ∇z_ŷ term when S_ŷ rounds
    to 1 (∇ log S_ŷ = (1 − S_ŷ)∇z_ŷ − Σ_{j≠ŷ} S_j ∇z_j, and 1 − S_ŷ rounds to 0 first).
    """
    # detectors stay importable without torch: logit κ need none
    import torch

    with torch.inference_mode(False), torch.enable_grad():
        x = x.detach().clone().requires_grad_(True)  # clone: inference tensors cannot take grad
        z = model(x) / temperature
        top = z.argmax(dim=1, keepdim=True)  # ŷ
        gaps = (z - z.gather(1, top)).scatter(1, top, float("-inf"))
        log_odds = -torch.logsumexp(gaps, dim=1)
        (gradient,) = torch.autograd.grad(log_odds.sum(), x)
    return x.detach() - epsilon * torch.sign(-gradient)


def odin_confidence(
    model: torch.nn.Module,
    inputs: torch.Tensor,
    *,
    temperature: float = 1000.0,
    epsilon: float = 0.0014,
    batch_size: int = 256,
) -> np.ndarray:
    """Log-odds of max_c S_c(x̃; T) per sample, model in eval mode (its modes restored afterwards).

    The perturbed logits are divided by T in float64 and scored by
    :func:`~oodsim.detectors.logits.max_softmax_log_odds`: ``expit(κ)`` = max_c S_c(x̃; T).
    """
    # detectors stay importable without torch: logit κ need none
    import torch

    device = device_of(model)
    parts = []
    with eval_mode(model):
        for rows in row_batches(len(inputs), batch_size):
            x_tilde = perturb(model, inputs[rows].to(device), temperature, epsilon)
            with torch.no_grad():
                z = model(x_tilde).double() / temperature
            parts.append(max_softmax_log_odds(z.cpu().numpy()))
    return np.concatenate(parts) if parts else np.zeros(0)


@builtin(
    "odin",
    family="softmax / logit",
    needs={"model"},
    version="2",
    limits={
        "temperature": greater_than(0),
        "epsilon": at_least(0),
        "batch_size": at_least(1),
    },
    confidence_scale="probability",
)
def odin(
    outputs: Outputs | None,
    *,
    fit: Outputs | None = None,
    model: torch.nn.Module,
    inputs: torch.Tensor,
    temperature: float = 1000.0,
    epsilon: float = 0.0014,
    batch_size: int = 256,
) -> np.ndarray:
    """Max softmax at temperature T of the input perturbed by ε·sign of the gradient, as log-odds.

    κ = log S − log(1 − S) with S = max_c S_c(x̃; T), the same ranking as S (``expit(κ)`` = S).
    ε is in units of the normalized input the model sees (the original code divides the step by
    the per-channel std, i.e. measures ε in [0, 1] pixel units).
    """
    batch_size = check_model_inputs("odin", model, inputs, batch_size)
    temperature = positive("odin", "temperature", temperature)
    if not (isinstance(epsilon, int | float) and np.isfinite(epsilon) and epsilon >= 0):
        raise DetectorInputError(
            f"detector 'odin': epsilon must be a finite number >= 0, got {epsilon!r}"
        )
    return odin_confidence(
        model, inputs, temperature=temperature, epsilon=float(epsilon), batch_size=batch_size
    )
