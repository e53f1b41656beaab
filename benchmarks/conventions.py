"""How far two conventions of one metric lie apart, on simulated scores: ``oscr`` (Dhamija's
counts, as the ARPL / Vaze et al. ``compute_oscr`` computes them) and ``oscr_pytorch_ood`` (both
counts with >=, a tied run as one diagonal segment); ``aurc`` (ties in expectation over their
orders) and ``aurc_thresholds`` (the risk read at the thresholds only).

Each row: ID scores ~ N(1, 1) and OOD scores ~ N(0, 1), half of the samples ID, each ID
prediction correct with probability ``accuracy``; ``--decimals`` rounds the scores (ties, as
a saturated softmax gives them). Prints the mean and largest difference over the repeats.

    python benchmarks/conventions.py [--repeats 20000]
"""

from __future__ import annotations

import argparse

import numpy as np

from oodsim import metrics


def differences(
    n: int, accuracy: float, decimals: int | None, repeats: int, rng: np.random.Generator
) -> np.ndarray:
    """oscr_pytorch_ood - oscr over ``repeats`` simulated rows of ``n`` samples."""
    is_ood = np.arange(n) >= n // 2
    kappa = rng.normal(size=(repeats, n)) + (~is_ood).astype(float)
    if decimals is not None:
        kappa = np.round(kappa, decimals)
    correct = rng.random((repeats, n)) < accuracy
    return metrics.oscr_pytorch_ood(kappa, is_ood, correct) - metrics.oscr(kappa, is_ood, correct)


def aurc_gaps(n: int, accuracy: float, distinct: int, repeats: int, rng) -> np.ndarray:
    """|aurc - aurc_thresholds| over rows of ``n`` ID samples whose κ takes ``distinct``
    values, more often high where the prediction is correct."""
    correct = rng.random((repeats, n)) < accuracy
    kappa = np.clip(rng.integers(0, distinct, (repeats, n)) + correct, 0, distinct - 1)
    kappa = kappa.astype(float)
    return np.abs(metrics.aurc(kappa, correct) - metrics.aurc_thresholds(kappa, correct))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print("| samples | accuracy | scores | mean difference | largest |")
    print("|---|---|---|---|---|")
    for n in (20, 200, 2000):
        for decimals, label in ((None, "continuous"), (1, "rounded to 0.1")):
            repeats = max(args.repeats * 20 // n, 100)
            d = differences(n, 0.9, decimals, repeats, rng)
            print(f"| {n} | 0.9 | {label} | {d.mean():.4f} | {d.max():.4f} |")
    print("\n| ID samples | accuracy | distinct κ | mean abs(aurc - aurc_thresholds) | largest |")
    print("|---|---|---|---|---|")
    for n in (20, 200):
        for distinct in (2, 3, 10):
            d = aurc_gaps(n, 0.8, distinct, max(args.repeats * 20 // n, 100), rng)
            print(f"| {n} | 0.8 | {distinct} | {d.mean():.4f} | {d.max():.4f} |")
    constant = np.zeros(6)
    is_ood = np.array([False, False, False, True, True, True])
    correct = np.array([True, True, False, False, False, False])
    print(
        f"\nconstant κ, accuracy 2/3: oscr = {metrics.oscr(constant, is_ood, correct):.3f}, "
        f"oscr_pytorch_ood = {metrics.oscr_pytorch_ood(constant, is_ood, correct):.3f}"
    )


if __name__ == "__main__":
    main()
