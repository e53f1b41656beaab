"""Choosing detector parameters on validation data.

A detector parameter given as a list in a spec (``{name = "odin", temperature = [1, 10, 1000],
epsilon = [0.0, 0.0014]}``) is a grid. Per simulation, every combination is scored by AUROC on
D_in_val vs D_out_val (the split's OOD validation classes: ``split.n_ood_val >= 1``), and the best
one (the first on ties) is used on the test sets. Test data never choose parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from oodsim.metrics import auroc
from oodsim.specs.params import grid


def choose(
    params: Mapping[str, Any], kappa_of: Callable[[dict[str, Any]], np.ndarray], is_ood: np.ndarray
) -> dict[str, Any]:
    """The combination whose κ on the validation samples has the highest AUROC."""
    candidates = grid(params)
    if len(candidates) == 1:
        return candidates[0]
    scores = [float(auroc(np.asarray(kappa_of(c), dtype=np.float64), is_ood)) for c in candidates]
    return candidates[int(np.argmax(scores))]
