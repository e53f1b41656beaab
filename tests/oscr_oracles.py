"""Two written-out OSCR procedures the tests hold ``oodsim.metrics.oscr`` to.

:func:`arpl_oscr` is the procedure of ``compute_oscr`` in the ARPL code (Chen et al.,
github.com/iCGY96/ARPL, ``core/evaluation.py``), which Vaze et al.'s "Open-Set Recognition:
a Good Closed-Set Classifier is All You Need?" reuses and open-set papers copy: one point per
sample in ascending order of score, correct-and-accepted counted strictly above it, OOD
accepted at or above it, plus (0, 0) and (1, 1), joined by trapezoids. On tied scores its
points depend on the order ``argsort`` gives the tied samples; :func:`strict_oscr_loop` is
oodsim's written rule for ties: the same counts at each distinct threshold."""

from __future__ import annotations

import numpy as np


def arpl_oscr(kappa_id: np.ndarray, kappa_ood: np.ndarray, correct_id: np.ndarray) -> float:
    """The ARPL ``compute_oscr`` procedure on the ID samples' and OOD samples' scores."""
    scores = np.concatenate([kappa_id, kappa_ood])
    known = np.concatenate([correct_id, np.zeros(len(kappa_ood), dtype=bool)])
    unknown = np.concatenate([np.zeros(len(kappa_id), dtype=bool), np.ones(len(kappa_ood), bool)])
    order = np.argsort(scores)
    known, unknown = known[order], unknown[order]
    n = scores.size
    ccr, fpr = [0.0] * (n + 2), [0.0] * (n + 2)
    for k in range(n - 1):  # as in ARPL: positions n-1 and n stay at (0, 0)
        ccr[k] = float(known[k + 1 :].sum()) / len(kappa_id)
        fpr[k] = float(unknown[k:].sum()) / len(kappa_ood)
    ccr[n + 1] = fpr[n + 1] = 1.0
    curve = sorted(zip(fpr, ccr), reverse=True)
    return sum((x0 - x1) * (y0 + y1) / 2.0 for (x0, y0), (x1, y1) in zip(curve, curve[1:]))


def strict_oscr_loop(kappa: np.ndarray, is_ood: np.ndarray, correct: np.ndarray) -> float:
    """Dhamija's counts at every distinct threshold t (CCR: correct ID with κ > t; FPR: OOD
    with κ >= t), the highest threshold joined to (0, 0), trapezoids in between."""
    id_right = ~is_ood & np.asarray(correct, dtype=bool)
    points = [(0.0, 0.0)]
    for t in np.unique(kappa)[::-1]:
        points.append(
            (
                np.sum(is_ood & (kappa >= t)) / np.sum(is_ood),
                np.sum(id_right & (kappa > t)) / np.sum(~is_ood),
            )
        )
    x, y = np.array(points).T
    return float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2.0))
