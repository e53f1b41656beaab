"""AUROC per unknown class (``class_auroc``): scikit-learn's AUROC of the stored outputs as the
oracle, the estimate over the seeds where a class was unknown, and the report's table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from scipy.special import softmax
from sklearn.metrics import roc_auc_score

import oodsim
from oodsim import stats
from oodsim.artifacts.keys import OUTPUTS, simulation_keys
from oodsim.report import write_report
from oodsim.specs import OODSetSpec
from oodsim.store import Store
from tests.conftest import small_digits


def results_of(values: np.ndarray, failure: tuple[str, ...] | None = None) -> xr.Dataset:
    """Open set shaped results holding only ``class_auroc`` (seed, method, ood_class)."""
    n_seeds, n_methods, n_classes = values.shape
    return xr.Dataset(
        {
            "class_auroc": (("seed", "method", "ood_class"), values),
            "failure": ("seed", np.array(failure or ("",) * n_seeds)),
        },
        coords={
            "seed": np.arange(n_seeds),
            "method": ["msp", "energy"][:n_methods],
            "ood_class": [f"c{i}" for i in range(n_classes)],
        },
    )


def test_class_scores_estimate_each_class_over_the_seeds_it_was_unknown() -> None:
    nan = np.nan
    values = np.array(
        [
            [[0.9, nan, 0.7], [0.8, nan, 0.6]],
            [[0.92, 0.5, nan], [0.85, 0.55, nan]],
            [[nan, 0.6, 0.75], [nan, 0.65, 0.7]],
            [[0.1, 0.1, 0.1], [0.1, 0.1, 0.1]],  # an excluded seed enters no estimate
        ]
    )
    results = results_of(values, failure=("", "", "", "degenerate: not above chance"))
    scores = stats.class_scores(results)
    assert scores["mean"].dims == ("method", "ood_class")
    assert scores["n"].sel({"method": "msp"}).values.tolist() == [2, 2, 2]
    np.testing.assert_allclose(scores["mean"].sel({"method": "msp"}), [0.91, 0.55, 0.725])
    want = stats.estimate(results["class_auroc"][:3], value_range=(0.0, 1.0))
    xr.testing.assert_allclose(scores["lower"], want["lower"])
    assert stats.hardest_classes(scores, "msp", 2) == ["c1", "c2"]
    assert stats.hardest_classes(scores, "energy") == ["c1", "c2", "c0"]
    with pytest.raises(KeyError, match="held-out classes"):
        stats.class_scores(results.drop_vars("class_auroc"))


def test_the_report_names_each_methods_hardest_classes(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    values = rng.uniform(0.6, 0.99, size=(6, 2, 4))
    values[:, :, 3] = np.nan  # a class no seed left unknown: never named
    results = results_of(values)
    results["score"] = (
        ("seed", "method", "metric", "severity"),
        rng.uniform(0.7, 0.9, size=(6, 2, 1, 1)),
    )
    results = results.assign_coords(metric=["auroc"], severity=["all"])
    text = write_report(results, tmp_path, figures=False, n_draws=50).read_text()
    section = text[text.index("## Hardest unknown classes") :].split("\n## ")[0]
    scores = stats.class_scores(results)
    for method in ("msp", "energy"):
        row = next(line for line in section.splitlines() if line.startswith(f"| {method} |"))
        named = [cell.split(":")[0].strip() for cell in row.split("|")[2:-1]]
        assert named == stats.hardest_classes(scores, method)
        first = scores.sel({"method": method, "ood_class": named[0]})
        assert f"{named[0]}: {float(first['mean']):.3f} [{float(first['lower']):.3f}, " in row
    assert "c3" not in section and "n = 6 seeds per class" in section


@pytest.mark.slow  # trains a model
def test_an_open_set_run_scores_each_unknown_class_as_sklearn_does(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    spec = small_digits(1, detectors=("msp", "energy"))
    results = oodsim.run(spec, cache=cache, progress=False)  # one seed: in-process
    per_class = results["class_auroc"].isel(seed=0)
    assert per_class.dims == ("method", "ood_class")
    assert per_class["ood_class"].values.tolist() == [str(d) for d in range(10)]
    known = {int(c) for c in str(results["class_split"].values[0]).split("-")}
    unknown = sorted(set(range(10)) - known)
    finite = np.isfinite(per_class.oodsim.sel(method="msp").values)
    assert np.flatnonzero(finite).tolist() == unknown

    arrays = Store(cache).get(OUTPUTS, simulation_keys(spec, 0).outputs).arrays
    classes = spec.dataset.load().labels[arrays["out_test.index"]]
    id_msp = softmax(arrays["in_test.logits"], axis=1).max(axis=1)
    ood_msp = softmax(arrays["out_test.logits"], axis=1).max(axis=1)
    for label in unknown:
        of_class = ood_msp[classes == label]
        kappa = np.r_[id_msp, of_class]
        is_id = np.r_[np.ones(id_msp.size, bool), np.zeros(of_class.size, bool)]
        got = float(per_class.oodsim.sel(method="msp", ood_class=str(label)))
        assert got == pytest.approx(roc_auc_score(is_id, kappa), abs=1e-12)

    noise_only = small_digits(1, ood=(OODSetSpec(kind="uniform_noise"),))
    assert "class_auroc" not in oodsim.run(noise_only, cache=cache, progress=False)
