"""A metric of one's own (``oodsim.metrics.register_metric``): computed in a run on a real
cluster for every detector (shipped to the workers), equal to its function on the stored κ,
and its direction and range read by ``stats`` (a lower-is-better metric reverses who wins)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

import oodsim
from oodsim import metrics, stats
from oodsim.metrics import facts, higher_is_better, metric_range, register_metric
from oodsim.protocols.severity import levels as severity_levels
from oodsim.specs import RunSpec
from tests.conftest import small_digits

pytestmark = pytest.mark.slow  # trains on the shared cluster


def one_minus_auroc(kappa: np.ndarray, is_ood: np.ndarray) -> float:
    """AUROC's complement: lower is better (an error rate of the ranking)."""
    return 1.0 - roc_auc_score(~is_ood, kappa)


@pytest.fixture
def registered() -> Iterator[None]:
    register_metric(
        "ranking_error", higher_is_better=False, reproduces="1 - sklearn roc_auc_score"
    )(one_minus_auroc)
    yield
    facts.REGISTRY.user.pop("ranking_error", None)


def test_a_registered_metric_is_computed_in_a_run_and_read_with_its_direction(
    registered, cluster_address: str, tmp_path
) -> None:
    assert not higher_is_better("ranking_error") and metric_range("ranking_error") == (0, 1)
    assert "ranking_error" in oodsim.plugins.available("metric")
    spec = small_digits(3, detectors=("msp", "energy"), metrics=("auroc", "ranking_error"))
    results = oodsim.run(spec, address=cluster_address, cache=tmp_path / "c", progress=False)
    score = results.score.squeeze(drop=True)
    np.testing.assert_allclose(
        score.sel(metric="ranking_error").values, 1 - score.sel(metric="auroc").values
    )
    by_auroc = stats.compare(results, "auroc")
    by_error = stats.compare(results, "ranking_error")
    pair = {"method": "msp", "other": "energy"}
    np.testing.assert_allclose(
        by_error.prob_superiority.sel(pair).values, by_auroc.prob_superiority.sel(pair).values
    )  # the same winner: a lower error is better


def test_a_metric_name_in_use_is_refused_and_an_empty_range_too(registered) -> None:
    with pytest.raises(ValueError, match="'auroc' is already registered"):
        register_metric("auroc", higher_is_better=True)(one_minus_auroc)
    with pytest.raises(ValueError, match="already registered"):
        register_metric("ranking_error", higher_is_better=False)(one_minus_auroc)
    with pytest.raises(ValueError, match="range"):
        register_metric("flat", higher_is_better=True, range=(1, 1))(one_minus_auroc)


def test_a_registered_metric_is_offered_to_every_protocol_and_scored_per_severity_level(
    registered,
) -> None:
    """A spec of any protocol may name it (open set, severity, a plug-in's), and a severity
    level scores it as its other metrics, from κ and the OOD flags."""
    assert "ranking_error" in metrics.kappa_metric_names()
    assert "ranking_error" in RunSpec.metric_names() and "aupr" not in RunSpec.metric_names()
    rng = np.random.default_rng(0)
    id_kappa, ood_kappa = rng.normal(1, 1, 40), rng.normal(0, 1, (4, 10))
    levels = [np.array([0, 1]), np.array([2, 3])]
    got = severity_levels.level_metrics(
        id_kappa, ood_kappa, levels, metrics=("auroc", "ranking_error")
    )
    np.testing.assert_allclose(got["ranking_error"], 1 - got["auroc"])
