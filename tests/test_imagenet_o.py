"""ImageNet-O recipe: restriction to the 200 classes and AUPR as the paper computes it."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import auc, precision_recall_curve, roc_auc_score

from oodsim.data.imagenet_classes import imagenet1k_wnids, imagenet_o_wnids
from oodsim.errors import SpecError
from oodsim.protocols import imagenet_o


def _softmax(logits: np.ndarray) -> np.ndarray:
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


def _sklearn_aupr(id_logits: np.ndarray, ood_logits: np.ndarray) -> float:
    """The recipe verbatim: anomaly = -max softmax; auc(recall, precision)."""
    anomaly = -np.r_[_softmax(id_logits).max(axis=1), _softmax(ood_logits).max(axis=1)]
    gold = np.r_[np.zeros(len(id_logits)), np.ones(len(ood_logits))]
    precision, recall, _ = precision_recall_curve(gold, anomaly)
    return auc(recall, precision)


def test_restriction_picks_the_200_columns_in_sorted_order() -> None:
    wnids, subset = imagenet1k_wnids(), imagenet_o_wnids()
    logits = np.tile(np.arange(1000.0), (3, 1))  # column j holds j
    restricted = imagenet_o.restrict_logits(logits, wnids, subset)
    assert restricted.shape == (3, 200)
    want = [wnids.index(w) for w in sorted(subset)]
    assert restricted[0].tolist() == want
    assert want == sorted(want)  # sorted wnids keep their order inside the sorted 1k list
    shuffled = list(reversed(subset))  # the subset's own order does not matter
    assert np.array_equal(imagenet_o.restrict_logits(logits, wnids, shuffled), restricted)


def test_restriction_rejects_unknown_classes_and_bad_shapes() -> None:
    with pytest.raises(SpecError, match="subset_wnids"):
        imagenet_o.restrict_logits(np.zeros((1, 2)), ["n00000001", "n00000002"], ["n00000003"])
    with pytest.raises(SpecError, match="logits"):
        imagenet_o.restrict_logits(np.zeros((1, 3)), ["n00000001", "n00000002"], ["n00000001"])


def test_evaluate_1000_class_logits_matches_sklearn() -> None:
    rng = np.random.default_rng(0)
    id_logits = rng.normal(0, 3, (300, 1000))
    id_logits[np.arange(300), rng.integers(0, 1000, 300)] += 6  # confident ID
    ood_logits = rng.normal(0, 3, (60, 1000))
    got = imagenet_o.evaluate_logits(id_logits, ood_logits)
    columns = imagenet_o.subset_columns(imagenet1k_wnids(), imagenet_o_wnids())
    id_200, ood_200 = id_logits[:, columns], ood_logits[:, columns]
    assert got["aupr"] == pytest.approx(_sklearn_aupr(id_200, ood_200), abs=1e-12)
    kappa = np.r_[_softmax(id_200).max(axis=1), _softmax(ood_200).max(axis=1)]
    is_id = np.r_[np.ones(300, bool), np.zeros(60, bool)]
    assert got["auroc"] == pytest.approx(roc_auc_score(is_id, kappa), abs=1e-12)
    assert got["chance"] == pytest.approx(60 / 360)
    assert (got["n_id"], got["n_ood"]) == (300, 60)
    assert 0.0 <= got["fpr95"] <= 1.0
    already = imagenet_o.evaluate_logits(id_200, ood_200)  # (n, 200) input: no restriction
    assert already == pytest.approx(got, abs=1e-12)


def test_chance_level_of_a_random_detector() -> None:
    rng = np.random.default_rng(1)
    got = imagenet_o.evaluate_logits(rng.normal(size=(10_000, 200)), rng.normal(size=(2000, 200)))
    assert got["chance"] == pytest.approx(2000 / 12000)
    assert got["aupr"] == pytest.approx(got["chance"], abs=0.02)
    assert got["auroc"] == pytest.approx(0.5, abs=0.03)


def test_evaluate_rejects_wrong_width() -> None:
    with pytest.raises(SpecError, match="1000"):
        imagenet_o.evaluate_logits(np.zeros((2, 999)), np.zeros((2, 999)))


def test_max_softmax_is_stable_for_huge_logits() -> None:
    logits = np.array([[1000.0, 0.0], [5.0, 5.0]])
    np.testing.assert_allclose(imagenet_o.max_softmax(logits), [1.0, 0.5])
