"""Every named metric convention in an open set run equals its anchor's own function, computed
here from the outputs the run stored (sklearn, pytorch-ood): what a user lays beside a table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

import oodsim
from oodsim.detectors import confidence
from oodsim.outputs import Outputs
from oodsim.protocols.open_set import checkpoint_key, outputs_key
from oodsim.seeds import SeedStreams
from oodsim.store import Store
from tests.conftest import small_digits
from tests.oscr_oracles import arpl_oscr, strict_oscr_loop

METRICS = (
    "auroc",
    "fpr95",
    "fpr95_ood",
    "aupr_in",
    "ap_in",
    "ap_out",
    "oscr",
    "oscr_pytorch_ood",
    "aurc",
)


def _oscr_pytorch_ood(kappa: np.ndarray, is_ood: np.ndarray, correct: np.ndarray) -> float:
    """pytorch-ood's OSCR written out: CCR vs FPR, both κ >= t, over every threshold, trapezoid."""
    points = [(0.0, 0.0)]
    for t in np.unique(kappa)[::-1]:
        fpr = np.mean(kappa[is_ood] >= t)
        ccr = np.sum((kappa[~is_ood] >= t) & correct) / np.sum(~is_ood)
        points.append((fpr, ccr))
    x, y = np.array(points).T
    return float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2))


def test_open_set_metrics_match_their_anchors(tmp_path: Path) -> None:
    spec = small_digits(1, detectors=("msp", "energy"), metrics=(*METRICS, "accuracy"))
    results = oodsim.run(spec, cache=tmp_path / "cache", progress=False)  # one seed: in-process
    arrays = Store(tmp_path / "cache").get(
        "outputs", outputs_key(checkpoint_key(spec, SeedStreams(0)))
    )
    a = arrays.arrays
    id_test = Outputs(logits=a["in_test.logits"], labels=a["in_test.labels"])
    ood = Outputs(logits=a["out_test.logits"])
    is_ood = np.r_[np.zeros(len(id_test), bool), np.ones(len(ood), bool)]
    correct = id_test.logits.argmax(axis=1) == id_test.labels
    for method in ("msp", "energy"):
        kappa = confidence(method, Outputs.concat([Outputs(logits=id_test.logits), ood]))
        score = results.score.sel({"seed": 0, "method": method}).squeeze()

        def got(metric: str, score=score) -> float:
            return float(score.sel({"metric": metric}))

        assert got("auroc") == pytest.approx(roc_auc_score(~is_ood, kappa), abs=1e-12)
        fpr, tpr, _ = roc_curve(is_ood, -kappa, drop_intermediate=False)
        assert got("fpr95_ood") == pytest.approx(fpr[np.argmax(tpr >= 0.95)], abs=1e-12)
        fpr, tpr, _ = roc_curve(~is_ood, kappa, drop_intermediate=False)
        assert got("fpr95") == pytest.approx(fpr[np.argmax(tpr >= 0.95)], abs=1e-12)
        # pytorch-ood's metrics take about 2 s to import, which every collection would pay
        from pytorch_ood.metrics import OODMetrics

        metrics = OODMetrics()
        metrics.update(torch.as_tensor(-kappa), torch.as_tensor(np.where(is_ood, -1, 0)))
        assert got("fpr95_ood") == pytest.approx(metrics.compute()["FPR95TPR"], abs=1e-6)
        assert got("ap_in") == pytest.approx(average_precision_score(~is_ood, kappa), abs=1e-12)
        assert got("ap_out") == pytest.approx(average_precision_score(is_ood, -kappa), abs=1e-12)
        if np.unique(kappa).size == kappa.size:  # the ARPL procedure, for tie-free κ
            want = arpl_oscr(kappa[~is_ood], kappa[is_ood], correct)
        else:  # its counts at the distinct thresholds
            want = strict_oscr_loop(kappa, is_ood, np.r_[correct, np.zeros(len(ood), bool)])
        assert got("oscr") == pytest.approx(want, abs=1e-12)
        want = _oscr_pytorch_ood(kappa, is_ood, correct)
        assert got("oscr_pytorch_ood") == pytest.approx(want, abs=1e-12)
        order = np.argsort(-kappa[~is_ood], kind="stable")
        wrong = np.cumsum(~correct[order])
        risk = np.mean(wrong / np.arange(1, wrong.size + 1))  # no ties in these κ
        assert got("aurc") == pytest.approx(risk, abs=1e-12)
        assert got("accuracy") == pytest.approx(correct.mean())
