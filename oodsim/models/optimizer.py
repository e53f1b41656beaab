"""The recipe's optimizer in plain tensor operations: SGD with momentum and weight decay, and
the cosine-annealed learning rate.

``torch.optim`` imports torch's compiler (``torch._dynamo``) the first time an optimizer is
built or stepped: about 2.2 s of CPU in every process that trains, more than a digits model
takes to train. These two pieces do what ``torch.optim.SGD`` (``dampening=0``,
``nesterov=False``, its single-tensor update) and ``torch.optim.lr_scheduler.CosineAnnealingLR``
(``eta_min=0``, its recursive form) do, operation for operation, so the trained weights are
bit-identical to theirs (``tests/test_optimizer.py`` checks it against torch).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch


class SGD:
    """Stochastic gradient descent with momentum and (L2) weight decay, as ``torch.optim.SGD``
    computes it: ``g = grad + wd·p``; ``b = g`` at the first step, else ``b = m·b + g``;
    ``p -= lr·b``."""

    def __init__(
        self, params: Iterable[torch.Tensor], lr: float, momentum: float, weight_decay: float
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)

    def zero_grad(self) -> None:
        """Drop the gradients (``set_to_none=True``): the next backward pass writes new ones."""
        for param in self.params:
            param.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter that has a gradient."""
        for index, param in enumerate(self.params):
            if param.grad is None:
                continue
            grad = param.grad
            if self.weight_decay != 0:
                grad = grad.add(param, alpha=self.weight_decay)
            if self.momentum != 0:
                buffer = self.buffers[index]
                if buffer is None:
                    buffer = self.buffers[index] = grad.detach().clone()
                else:
                    buffer.mul_(self.momentum).add_(grad, alpha=1)
                grad = buffer
            param.add_(grad, alpha=-self.lr)


def cosine_lr(lr: float, epoch: int, t_max: int) -> float:
    """The learning rate of ``epoch`` (1 to ``t_max``) from that of the epoch before, ``lr``:
    cosine annealing to 0 over ``t_max`` epochs, in the recursive form ``CosineAnnealingLR``
    uses (its rounding, not that of the closed form)."""
    if not 1 <= epoch <= t_max:
        raise ValueError(f"epoch {epoch} outside 1..{t_max}")
    return (
        (1 + math.cos(math.pi * epoch / t_max)) / (1 + math.cos(math.pi * (epoch - 1) / t_max)) * lr
    )
