"""Which unknown classes are hard: each detector's AUROC against one unknown class at a time
(``class_auroc`` of open set results), estimated over the seeds where that class was unknown."""

from __future__ import annotations

import xarray as xr

from oodsim.results.access import scored
from oodsim.stats.checks import check_count
from oodsim.stats.estimates import estimate

#: The per-seed variable of open set results that :func:`class_scores` reads.
CLASS_AUROC = "class_auroc"


def class_scores(results: xr.Dataset, *, confidence: float = 0.95) -> xr.Dataset:
    """Mean AUROC of every method against every unknown class alone, with its interval, over
    the seeds where the class was unknown (a class split draws different unknown classes per
    seed, so ``n`` differs by class; excluded and failed seeds enter no estimate).

    Returns :func:`~oodsim.stats.estimate`'s Dataset over ``(method, ood_class)``. A class
    no seed left unknown has ``n = 0`` and NaN values. Open set results of a spec with the
    held-out OOD set carry ``class_auroc``; others raise ``KeyError``."""
    if not isinstance(results, xr.Dataset) or CLASS_AUROC not in results:
        raise KeyError(
            f"{CLASS_AUROC!r} is not in these results: per-class AUROC comes from open set "
            "runs whose OOD sets include the held-out classes"
        )
    return estimate(scored(results, CLASS_AUROC), confidence=confidence, value_range=(0.0, 1.0))


def hardest_classes(scores: xr.Dataset, method: str, k: int = 3) -> list[str]:
    """The ``k`` classes with the lowest mean AUROC for ``method`` in :func:`class_scores`'s
    output (hardest first; classes no seed scored are left out). ``k`` must be an integer
    >= 1 (ValueError naming it otherwise)."""
    k = check_count(k, "k")
    means = scores["mean"].sel({"method": method}).to_series().dropna()
    return [str(name) for name in means.sort_values(kind="stable").index[:k]]
