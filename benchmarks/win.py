"""Time win probabilities at the study's scale against a plain per-draw loop.

10 methods x 1,000 seeds, k = 5. "ours" = ``oodsim.stats.win_probability`` with 10,000 draws
(both pairings); "loop" = the obvious Python loop (one ``rng.choice`` per method and draw) over
1,000 draws, scaled to 10,000. Prints both times and the ratio; then the cost of the bootstrap
intervals of both pairings (``win_probability_interval``: 400 resampled seed pools of 1,000 draws)
against the point estimates alone, on the same pool.

    python benchmarks/win.py
"""

from __future__ import annotations

import time

import numpy as np

from oodsim.stats import win_probability, win_probability_interval


def loop(values: np.ndarray, k: int, n_draws: int, rng: np.random.Generator) -> np.ndarray:
    """Independent draws per method, ties ignored: the hand-written peer."""
    n_seeds, n_methods = values.shape
    wins = np.zeros(n_methods)
    for _ in range(n_draws):
        means = [values[rng.choice(n_seeds, k, replace=False), m].mean() for m in range(n_methods)]
        wins[int(np.argmax(means))] += 1
    return wins / n_draws


def main() -> None:
    values = np.random.default_rng(8).normal(0.8, 0.03, (1000, 10))
    started = time.perf_counter()
    loop(values, 5, 1000, np.random.default_rng(0))
    peer = (time.perf_counter() - started) * 10
    for pairing in ("independent", "paired"):
        started = time.perf_counter()
        win_probability(values, k=5, n_draws=10_000, rng=0, pairing=pairing)
        ours = time.perf_counter() - started
        print(
            f"{pairing:12s} ours {ours * 1e3:8.1f} ms   loop {peer * 1e3:8.1f} ms   "
            f"speed-up {peer / ours:6.1f}x"
        )
    for pairing in ("independent", "paired"):
        started = time.perf_counter()
        win_probability(values, k=5, n_draws=10_000, rng=0, pairing=pairing)
        point = time.perf_counter() - started
        started = time.perf_counter()
        win_probability_interval(values, k=5, n_draws=10_000, rng=0, pairing=pairing)
        with_interval = time.perf_counter() - started
        print(
            f"{pairing:12s} with bootstrap interval {with_interval * 1e3:8.1f} ms   "
            f"point estimate {point * 1e3:8.1f} ms   ratio {with_interval / point:5.1f}x"
        )


if __name__ == "__main__":
    main()
