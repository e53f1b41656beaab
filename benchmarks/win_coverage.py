"""Coverage of the win-probability intervals (:func:`oodsim.stats.win_probability_interval`,
bootstrap percentile over the seed pool) against the true probability of winning a k-seed
experiment, per pool size: the rows of docs/statistics.md and the pool size from which the
report calls the intervals reliable (:data:`oodsim.stats.win.RELIABLE_FROM`).

Two methods, per-seed scores normal with SD 1 and independent between methods; method A's mean
is above B's by the delta that makes A win a k = 5 seed comparison (means of 5 independent
seeds each) with probability p: ``p = Φ(delta / sqrt(2/5))``. Each replicate draws a pool of n
seeds, computes A's interval (400 resampled pools of 1,000 draws, the report's settings) and
checks whether it holds p. ``--reps`` replicates per row (Monte Carlo SE about 0.015 at 0.90
with 400).

    python benchmarks/win_coverage.py [--reps 400]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.stats import norm

from oodsim.stats import win_probability_interval

K = 5
PROBABILITIES = (0.05, 0.105, 0.25, 0.5)
POOLS = (10, 20, 30, 50, 100)


def coverage(p: float, n: int, reps: int, rng: np.random.Generator) -> float:
    """Share of ``reps`` pools of ``n`` seeds whose interval for A holds ``p``."""
    delta = norm.ppf(p) * np.sqrt(2 / K)
    hits = 0
    for _ in range(reps):
        pool = rng.normal(size=(n, 2)) + np.array([delta, 0.0])
        _, lower, upper = win_probability_interval(
            pool, k=K, n_draws=2_000, rng=rng, n_boot=400, boot_draws=1_000
        )
        hits += lower[0] <= p <= upper[0]
    return hits / reps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=400)
    args = parser.parse_args()
    started = time.perf_counter()
    rng = np.random.default_rng(5)
    print(f"k = {K}, independent pairing, {args.reps} pools per row; nominal 95% interval\n")
    print("| true P(win) | " + " | ".join(f"n = {n}" for n in POOLS) + " |")
    print("|---|" + "---|" * len(POOLS))
    for p in PROBABILITIES:
        cells = [f"{coverage(p, n, args.reps, rng):.3f}" for n in POOLS]
        print(f"| {p:g} | " + " | ".join(cells) + " |")
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
