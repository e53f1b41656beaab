"""Detector parameters chosen on validation data (D_in_val vs D_out_val), never on test data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

import oodsim
from oodsim.detectors import confidence
from oodsim.errors import SpecError
from oodsim.outputs import Outputs
from oodsim.protocols.open_set import checkpoint_key, outputs_key
from oodsim.seeds import SeedStreams
from oodsim.specs import DetectorSpec, SplitSpec
from oodsim.specs.params import grid
from oodsim.store import Store
from tests.conftest import small_digits

TEMPERATURES = (0.2, 1.0, 50.0)


def test_grid_is_the_cartesian_product_of_listed_values() -> None:
    combos = grid({"temperature": (1, 1000), "epsilon": (0.0, 0.001), "batch_size": 8})
    assert len(combos) == 4 and all(c["batch_size"] == 8 for c in combos)


def test_grid_needs_ood_validation_classes() -> None:
    with pytest.raises(SpecError, match="n_ood_val"):
        small_digits(
            1, detectors=(DetectorSpec(name="energy", params={"temperature": [1.0, 2.0]}),)
        )


def test_logit_and_model_detectors_tuned_on_validation(cluster_address: str, cache: Path) -> None:
    split = SplitSpec(n_known=6, n_ood_val=1)
    tuned = (
        DetectorSpec(name="energy", params={"temperature": list(TEMPERATURES)}),
        DetectorSpec(name="odin", params={"temperature": [1.0, 1000.0], "epsilon": [0.0, 0.002]}),
    )
    spec = small_digits(3, split=split, detectors=tuned, metrics=("auroc",))
    results = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    assert np.isfinite(results.score.values).all()

    # energy: the test AUROC is that of the temperature with the best validation AUROC
    store = Store(cache)
    for seed in results.seed.values:
        arrays = store.get("outputs", outputs_key(checkpoint_key(spec, SeedStreams(int(seed)))))
        assert arrays is not None
        a = arrays.arrays

        def auc(t: float, first: str, second: str, a: dict = a) -> float:
            x, y = (
                Outputs(logits=a[f"{p}.logits"], labels=a[f"{p}.labels"]) for p in (first, second)
            )
            kappa = confidence("energy", Outputs.concat([x, y]), temperature=t)
            return roc_auc_score(np.r_[np.ones(len(x)), np.zeros(len(y))], kappa)

        best = max(TEMPERATURES, key=lambda t: auc(t, "in_val", "out_val"))
        expected = auc(best, "in_test", "out_test")
        got = float(
            results.score.sel({"seed": seed, "method": tuned[0].label, "metric": "auroc"}).squeeze()
        )
        assert got == pytest.approx(expected, abs=1e-12)


def test_non_finite_kappa_fails_the_seed_naming_detector_and_seed(
    cluster_address: str, cache: Path
) -> None:
    from oodsim.detectors import register

    @register("nan_after_first", needs={"logits"}, replace=True)
    def nan_after_first(outputs: Outputs) -> np.ndarray:
        kappa = outputs.logits.max(axis=1).astype(np.float64)
        kappa[1:] = np.nan
        return kappa

    spec = small_digits(1, detectors=("msp", "nan_after_first"))
    results = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    assert results.attrs["n_failed"] == 1
    reason = str(results.failure.values[0])
    assert "nan_after_first" in reason and "seed 0" in reason and "non-finite" in reason
    assert np.isnan(results.score.values).all()
