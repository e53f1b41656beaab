"""Verdicts of the degenerate rule that took its permutation test: one store kind,
``degenerate_verdict``, read (or computed and written) where a seed is scored.

The rule (:mod:`oodsim.protocols.degenerate`) decides most classifiers in microseconds from
their validation outputs: one clearly above chance, or one with no spread (a single class
predicted). The others take a permutation test of 9,999 shuffles (tens of milliseconds a
seed); its outcome is stored here, so that a rerun loads it instead of shuffling again. An
entry holds the rule's record as 0-d arrays (the verdict, its p-value and its statistic, see
:meth:`oodsim.protocols.degenerate.Verdict.arrays`); its key binds it to exactly what it was
computed from: the key of the outputs entry whose subset it judged, that subset, and the rule's
parameters (alpha, the number of permutations, the rule's version). Changing any of them gives
another key, so another entry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from oodsim.artifacts.tasks import ensured
from oodsim.keys import digest
from oodsim.store import Store

DEGENERATE_VERDICT = "degenerate_verdict"


def verdict_key(outputs: str, subset: str, alpha: float, n_permutations: int, version: str) -> str:
    """The key of the verdict on ``subset`` of the outputs entry ``outputs`` at level
    ``alpha`` by ``n_permutations`` shuffles of version ``version`` of the rule."""
    return digest(
        DEGENERATE_VERDICT,
        version,
        {"outputs": outputs, "subset": subset, "alpha": alpha, "permutations": n_permutations},
    )


def stored_verdict(
    store: Store, key: str, compute: Callable[[], Mapping[str, np.ndarray]], describe: str
) -> dict[str, np.ndarray]:
    """The arrays of verdict ``key``: read from the store, else ``compute()``-d here and
    stored first (once across processes sharing the cache; a corrupt entry is computed
    again, see :func:`~oodsim.artifacts.tasks.ensured`)."""

    def put() -> None:
        arrays = {name: np.asarray(value) for name, value in compute().items()}
        shapes = {name: value.shape for name, value in arrays.items() if value.ndim}
        if shapes:
            raise ValueError(f"a verdict holds one number per array; got shapes {shapes}")
        store.put(DEGENERATE_VERDICT, key, arrays, {"describe": describe})

    return ensured(store, DEGENERATE_VERDICT, key, put, f"verdict {describe}").arrays
