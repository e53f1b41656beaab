"""Adding detectors to a finished experiment reads the cache: no training, no logit inference."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import oodsim
from oodsim.results import store_counts
from tests.conftest import ROOT, small_digits


def test_adding_all_detectors_never_retrains_or_reinfers(cluster_address: str, cache: Path) -> None:
    first = oodsim.run(small_digits(2), address=cluster_address, cache=cache, progress=False)
    assert store_counts(first)["computed"] == {"checkpoint": 2, "outputs": 2}

    shipped = oodsim.load_spec(ROOT / "specs" / "digits.toml")
    everything = small_digits(2, detectors=shipped.detectors, metrics=shipped.metrics)
    second = oodsim.run(everything, address=cluster_address, cache=cache, progress=False)
    counts = store_counts(second)
    # only the model-based detectors (ODIN, MC dropout x2) run their own passes, on the
    # in-distribution and OOD test sets of each seed, from the reloaded checkpoint
    assert counts["computed"] == {"kappa": 2 * 3 * 2}
    assert counts["loaded"]["checkpoint"] == 2
    assert set(second.method.values) == {d.label for d in shipped.detectors}
    assert np.isfinite(second.score.values).all()
    np.testing.assert_array_equal(
        second.score.sel({"method": "msp", "metric": "auroc"}).values,
        first.score.sel({"method": "msp", "metric": "auroc"}).values,
    )

    third = oodsim.run(everything, address=cluster_address, cache=cache, progress=False)
    assert store_counts(third)["computed"] == {}  # model-based κ are cached in turn
    np.testing.assert_array_equal(third.score.values, second.score.values)
