"""Deep nearest neighbors (Sun et al., ICML 2022): distance to the k-th nearest train feature."""

from __future__ import annotations

import numpy as np

from oodsim.detectors._checks import as_float, at_least, fit_arrays, integer, same_width
from oodsim.detectors._registry import builtin
from oodsim.outputs import Outputs

#: Elements of one (queries × train) distance block: 2**22 float64 = 32 MiB.
BLOCK_ELEMENTS = 2**22


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; an all-zero row stays zero (norm clamped at 1e-12)."""
    x = as_float(x)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def kth_neighbor_distance(queries: np.ndarray, reference: np.ndarray, k: int) -> np.ndarray:
    """Euclidean distance of each query row to its k-th nearest reference row (k ≥ 1).

    Squared distances |q|² + |r|² − 2 q·r come from one matrix product per block of queries;
    the k-th smallest is selected with ``np.partition`` (linear time), never a Python loop.
    """
    q, r = as_float(queries), as_float(reference)
    q_sq, r_sq = (q * q).sum(1), (r * r).sum(1)
    rows = max(1, BLOCK_ELEMENTS // max(len(r), 1))
    out = np.empty(len(q))
    for start in range(0, len(q), rows):
        block = slice(start, start + rows)
        squared = q_sq[block, None] + r_sq[None, :] - 2.0 * (q[block] @ r.T)
        out[block] = np.partition(squared, k - 1, axis=1)[:, k - 1]
    return np.sqrt(np.clip(out, 0.0, None))


@builtin("knn", family="feature", needs={"features"}, fit_on="train", limits={"k": at_least(1)})
def knn(outputs: Outputs, *, fit: Outputs, k: int = 50) -> np.ndarray:
    """Negative distance to the k-th nearest L2-normalized train feature (k clipped to N)."""
    train = fit_arrays("knn", fit, "train", features=True)
    same_width("knn", "features", outputs.features, train.features)
    k = min(integer("knn", "k", k, 1), len(train.features))
    return -kth_neighbor_distance(l2_normalize(outputs.features), l2_normalize(train.features), k)
