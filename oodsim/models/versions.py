"""Versions of the training and inference code, as they enter store keys.

They live apart from the code they version so that a driver computes keys (and finds what
is cached) without importing torch. Bump one when its code changes the stored numbers: every
entry that depends on it is computed again, nothing else.
"""

from __future__ import annotations

#: :mod:`oodsim.simulation.training` (the recipe): enters checkpoint keys.
TRAINING = "1"
#: :mod:`oodsim.models.inference` (logits and features of a checkpoint): enters output keys.
INFERENCE = "1"
