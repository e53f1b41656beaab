"""Coverage of the variance-component intervals of an unbalanced crossed design (REML with a
parametric bootstrap, :func:`oodsim.stats.crossed_components`): the rows of docs/statistics.md
behind the word "approximate" on those intervals.

A 6 × 4 crossed design of two factors (class split × init, one seed per cell) with normal
effects, variances 1 (a), 0.5 (b) and 1 (residual, which holds the interaction); a number of
cells is dropped at random (failed seeds), which makes it unbalanced. Each replicate fits the
REML model with 200 bootstrap refits and checks whether each share's 95% interval holds the true
share. ``--reps`` replicates per row.

    python benchmarks/vc_coverage.py [--reps 100]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from oodsim.stats import crossed_components

LEVELS = (6, 4)
VARIANCES = {"a": 1.0, "b": 0.5, "residual": 1.0}


def replicate(dropped: int, rng: np.random.Generator) -> dict[str, bool]:
    """Whether each source's share interval holds the truth, for one simulated design."""
    a, b = np.meshgrid(np.arange(LEVELS[0]), np.arange(LEVELS[1]), indexing="ij")
    a, b = a.ravel(), b.ravel()
    effect_a = rng.normal(0, np.sqrt(VARIANCES["a"]), LEVELS[0])
    effect_b = rng.normal(0, np.sqrt(VARIANCES["b"]), LEVELS[1])
    values = effect_a[a] + effect_b[b] + rng.normal(0, np.sqrt(VARIANCES["residual"]), a.size)
    values[rng.choice(a.size, dropped, replace=False)] = np.nan
    fit = crossed_components(values, {"a": a, "b": b}, rng=rng, n_boot=200)
    total = sum(VARIANCES.values())
    return {
        source: bool(fit.share_low[i] <= VARIANCES[source] / total <= fit.share_high[i])
        for i, source in enumerate(fit.sources)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=100)
    args = parser.parse_args()
    started = time.perf_counter()
    rng = np.random.default_rng(11)
    print(f"{LEVELS[0]} x {LEVELS[1]} crossed design, {args.reps} replicates per row\n")
    print("| cells dropped | estimator | a | b | residual |")
    print("|---|---|---|---|---|")
    for dropped in (0, 2, 6):
        hits = [replicate(dropped, rng) for _ in range(args.reps)]
        cells = [f"{np.mean([h[s] for h in hits]):.3f}" for s in ("a", "b", "residual")]
        estimator = "anova (fiducial)" if dropped == 0 else "reml (bootstrap)"
        print(f"| {dropped} | {estimator} | " + " | ".join(cells) + " |")
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
