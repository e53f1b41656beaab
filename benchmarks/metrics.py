"""Benchmark: oodsim.metrics (vectorized) against a scikit-learn loop over the same rows.

Scores ``--rows`` score vectors of ``--samples`` samples each (every other row rounded to one
decimal, so half the rows are heavily tied) with AUROC, AUPR-IN, AUPR-OUT and FPR@95TPR, both
ways, checks the values agree and prints the times and the speed-up. Usage::

    python benchmarks/metrics.py [--rows 1000] [--samples 20000] [--seed 0]

Exits with status 1 if any value differs from scikit-learn by more than 1e-12.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

import numpy as np
import sklearn
from sklearn.metrics import auc, precision_recall_curve, roc_auc_score, roc_curve

from oodsim import metrics

NAMES = ("auroc", "aupr_in", "aupr_out", "fpr95")
TOLERANCE = 1e-12
TARGET_SPEEDUP = 10.0


def make_scores(rows: int, samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """κ of shape (rows, samples) with ID scored higher on average; is_ood of shape (samples,).

    Each row has its own separation; every other row is rounded to one decimal (heavy ties).
    """
    rng = np.random.default_rng(seed)
    is_ood = rng.random(samples) < 0.3
    separation = rng.uniform(0.0, 2.0, size=(rows, 1))
    kappa = rng.normal(size=(rows, samples)) + separation * ~is_ood
    kappa[::2] = np.round(kappa[::2], 1)
    return kappa, is_ood


def sklearn_row(kappa: np.ndarray, is_ood: np.ndarray) -> tuple[float, float, float, float]:
    """The four metrics of one row with scikit-learn, following DESIGN.md's definitions."""
    is_id = ~is_ood
    precision, recall, _ = precision_recall_curve(is_id, kappa)
    aupr_in = auc(recall, precision)
    precision, recall, _ = precision_recall_curve(is_ood, -kappa)
    aupr_out = auc(recall, precision)
    fpr, tpr, _ = roc_curve(is_id, kappa, drop_intermediate=False)
    return roc_auc_score(is_id, kappa), aupr_in, aupr_out, fpr[np.argmax(tpr >= 0.95)]


def sklearn_all(kappa: np.ndarray, is_ood: np.ndarray) -> dict[str, np.ndarray]:
    """The sklearn loop over rows, shaped like oodsim's result."""
    values = np.array([sklearn_row(row, is_ood) for row in kappa])
    return dict(zip(NAMES, values.T))


def oodsim_separate(kappa: np.ndarray, is_ood: np.ndarray) -> dict[str, np.ndarray]:
    """One call per metric (each sorts again)."""
    return {name: metrics.METRICS[name](kappa, is_ood) for name in NAMES}


def oodsim_together(kappa: np.ndarray, is_ood: np.ndarray) -> dict[str, np.ndarray]:
    """All four metrics from one sort per block of rows."""
    return metrics.evaluate(kappa, is_ood, NAMES)


def timed(fn: Callable[[], dict], repeat: int) -> tuple[float, dict]:
    """Best wall time of ``repeat`` calls, and the last result."""
    best, result = float("inf"), {}
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print a table; return 1 on a mismatch."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help="oodsim timings: best of N")
    args = parser.parse_args(argv)

    kappa, is_ood = make_scores(args.rows, args.samples, args.seed)
    print(
        f"{args.rows} rows x {args.samples} samples ({is_ood.mean():.0%} OOD, half the rows "
        f"rounded to 0.1); numpy {np.__version__}, scikit-learn {sklearn.__version__}, "
        f"{os.cpu_count()} CPUs"
    )

    runs = [
        (
            "oodsim evaluate (shared sort)",
            *timed(lambda: oodsim_together(kappa, is_ood), args.repeat),
        ),
        (
            "oodsim, one call per metric",
            *timed(lambda: oodsim_separate(kappa, is_ood), args.repeat),
        ),
    ]
    sk_time, reference = timed(lambda: sklearn_all(kappa, is_ood), 1)
    runs.append(("scikit-learn loop over rows", sk_time, reference))

    print(f"\n{'implementation':32s} {'seconds':>9s} {'rows/s':>10s} {'vs sklearn':>11s}")
    for label, seconds, _ in runs:
        rate = args.rows / seconds
        print(f"{label:32s} {seconds:9.3f} {rate:10.0f} {sk_time / seconds:10.1f}x")

    print(f"\n{'metric':10s} {'max |oodsim - sklearn|':>24s} {'mean value':>11s}")
    worst = 0.0
    for name in NAMES:
        diff = max(float(np.max(np.abs(r[name] - reference[name]))) for _, _, r in runs[:2])
        worst = max(worst, diff)
        print(f"{name:10s} {diff:24.3g} {reference[name].mean():11.4f}")

    speedup = sk_time / runs[0][1]
    agree = worst <= TOLERANCE
    verdict = "met" if speedup >= TARGET_SPEEDUP else "NOT met"
    print(
        f"\nvalues {'agree' if agree else 'DIFFER'} (tolerance {TOLERANCE:g}); speed-up "
        f"{speedup:.1f}x (target >= {TARGET_SPEEDUP:g}x: {verdict})"
    )
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
