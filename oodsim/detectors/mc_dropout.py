"""Monte Carlo dropout (Gal & Ghahramani, ICML 2016): dropout kept on at test time.

The dropout masks are drawn by oodsim, not by the ``nn.Dropout`` modules: every module runs in
eval mode (identity; BatchNorm uses its running statistics) and a forward hook multiplies its
output by a mask drawn from a ``torch.Generator`` seeded by (seed, pass, module, block of 64
rows). A sample's masks therefore depend only on the seed and its row, never on the batch size,
the device or the global torch RNG: results are reproducible and batch-size invariant.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from oodsim.detectors._checks import DetectorInputError, at_least, integer
from oodsim.detectors._registry import builtin
from oodsim.detectors._torch import check_model_inputs, device_of, eval_mode, row_batches
from oodsim.detectors.logits import log_odds_of_top, negative_log_entropy_of_log_probs
from oodsim.outputs import Outputs

if TYPE_CHECKING:
    import torch

#: Rows that share one generator seed; a constant so that masks never depend on the batch size.
BLOCK_ROWS = 64


class _Masks:
    """Draws the mask of one dropout module for the rows and pass being computed."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rows = slice(0, 0)
        self.pass_index = 0

    def _uniform(self, module_index: int, per_row: tuple[int, ...]) -> torch.Tensor:
        # detectors stay importable without torch: logit κ need none
        import torch

        first, last = self.rows.start // BLOCK_ROWS, (self.rows.stop - 1) // BLOCK_ROWS
        blocks = []
        for block in range(first, last + 1):
            entropy = [self.seed, self.pass_index, module_index, block]
            state = np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0]
            generator = torch.Generator().manual_seed(int(state >> np.uint64(1)))
            blocks.append(torch.rand((BLOCK_ROWS, *per_row), generator=generator))
        offset = first * BLOCK_ROWS
        return torch.cat(blocks)[self.rows.start - offset : self.rows.stop - offset]

    def hook(self, module_index: int):
        """A forward hook that multiplies the module's output by its dropout mask."""

        def apply(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
            # detectors stay importable without torch: logit κ need none
            import torch

            n_rows = self.rows.stop - self.rows.start
            if output.shape[0] != n_rows:
                raise DetectorInputError(
                    f"mc_dropout: a dropout module saw {output.shape[0]} "
                    f"rows in a batch of {n_rows}; the batch axis must be 0"
                )
            if isinstance(module, torch.nn.Dropout):
                per_row = tuple(output.shape[1:])  # element-wise dropout
            else:  # Dropout1d/2d/3d drop whole channels
                per_row = (output.shape[1],) + (1,) * (output.ndim - 2)
            if module.p >= 1:
                return torch.zeros_like(output)
            keep = self._uniform(module_index, per_row) >= module.p
            mask = keep.to(output.dtype).to(output.device) / (1 - module.p)
            return output * mask

        return apply


def _dropout_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    # detectors stay importable without torch: logit κ need none
    from torch import nn

    found = [m for m in model.modules() if isinstance(m, nn.modules.dropout._DropoutNd)]
    alpha_kinds = nn.AlphaDropout | nn.FeatureAlphaDropout
    alpha = [type(m).__name__ for m in found if isinstance(m, alpha_kinds)]
    if alpha:
        raise DetectorInputError(f"mc_dropout does not support {alpha[0]}")
    if not found:
        raise DetectorInputError(
            "mc_dropout needs a model with nn.Dropout modules; this one has "
            "none, so every pass would be identical"
        )
    return found


def mean_log_softmax(
    model: torch.nn.Module,
    inputs: torch.Tensor,
    *,
    n_passes: int = 30,
    seed: int = 0,
    batch_size: int = 256,
) -> np.ndarray:
    """(n, C) log of the mean over ``n_passes`` dropout passes of the softmax, float64.

    The mean is formed in log space (``logaddexp`` of the passes' log-softmax, minus
    log n_passes), so a class's small mean probability keeps its relative precision however
    confident the top class is: the κ computed from it never round to a constant.

    When every dropout module sits in ``model.head`` the features ``model.embed(x)`` are computed
    once per batch and only the head runs ``n_passes`` times.
    """
    # detectors stay importable without torch: logit κ need none
    import torch

    dropouts = _dropout_modules(model)
    head = getattr(model, "head", None)
    head_only = (
        isinstance(head, torch.nn.Module)
        and callable(getattr(model, "embed", None))
        and all(any(m is h for h in head.modules()) for m in dropouts)
    )
    masks = _Masks(seed)
    handles = [m.register_forward_hook(masks.hook(i)) for i, m in enumerate(dropouts)]
    device = device_of(model)
    parts = []
    try:
        with eval_mode(model), torch.no_grad():
            for rows in row_batches(len(inputs), batch_size):
                masks.rows = rows
                x = inputs[rows].to(device)
                z = model.embed(x) if head_only else x
                total = None
                for pass_index in range(n_passes):
                    masks.pass_index = pass_index
                    logits = head(z) if head_only else model(z)
                    log_p = torch.log_softmax(logits.double(), dim=1)
                    total = log_p if total is None else torch.logaddexp(total, log_p)
                parts.append((total - math.log(n_passes)).cpu().numpy())
    finally:
        for handle in handles:
            handle.remove()
    return np.concatenate(parts) if parts else np.zeros((0, 1))


def _mean_log_softmax_checked(name: str, model, inputs, n_passes, seed, batch_size) -> np.ndarray:
    batch_size = check_model_inputs(name, model, inputs, batch_size)
    n_passes = integer(name, "n_passes", n_passes, 1)
    seed = integer(name, "seed", seed, 0)
    return mean_log_softmax(model, inputs, n_passes=n_passes, seed=seed, batch_size=batch_size)


#: Shared by both MC dropout detectors (they take the same parameters).
LIMITS = {"n_passes": at_least(1), "seed": at_least(0), "batch_size": at_least(1)}


@builtin(
    "mc_dropout",
    family="sampling (MC dropout)",
    needs={"model"},
    stochastic=True,
    version="2",
    limits=LIMITS,
    confidence_scale="probability",
)
def mc_dropout(
    outputs: Outputs | None,
    *,
    fit: Outputs | None = None,
    model: torch.nn.Module,
    inputs: torch.Tensor,
    n_passes: int = 30,
    seed: int = 0,
    batch_size: int = 256,
) -> np.ndarray:
    """Max over classes of the mean softmax of ``n_passes`` dropout passes, as its log-odds.

    κ = log p̄_top − log Σ_{j≠top} p̄_j, the same ranking as p̄_top = max_c p̄_c (``expit(κ)``).
    """
    log_p = _mean_log_softmax_checked("mc_dropout", model, inputs, n_passes, seed, batch_size)
    return log_odds_of_top(log_p)


@builtin(
    "mc_dropout_entropy",
    family="sampling (MC dropout)",
    needs={"model"},
    stochastic=True,
    version="2",
    limits=LIMITS,
    confidence_scale="negative_entropy",
)
def mc_dropout_entropy(
    outputs: Outputs | None,
    *,
    fit: Outputs | None = None,
    model: torch.nn.Module,
    inputs: torch.Tensor,
    n_passes: int = 30,
    seed: int = 0,
    batch_size: int = 256,
) -> np.ndarray:
    """Entropy H of the mean softmax of ``n_passes`` dropout passes, as κ = −log H.

    The ranking of −H, never rounded to 0 for confident rows; ``exp(−κ)`` = H in nats.
    """
    log_p = _mean_log_softmax_checked(
        "mc_dropout_entropy", model, inputs, n_passes, seed, batch_size
    )
    return negative_log_entropy_of_log_probs(log_p)
