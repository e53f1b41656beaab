"""How often the degenerate rule excludes a weak but real classifier: the share of simulated
classifiers judged "not above chance" per validation size and ``alpha``.

Each repeat: K known classes with ``per_class`` validation samples each; the classifier is right
with probability ``skill × chance`` (``chance = 1/K``) and otherwise predicts one of the other
classes at random, independently of the input. ``skill = 1`` is a classifier at chance (every
exclusion is right), anything above is a real classifier the rule should keep. The verdict is
:func:`oodsim.protocols.degenerate.judge`'s, the closed form where it applies and the
permutation test (9,999 shuffles) elsewhere.

    python benchmarks/degenerate_rates.py [--repeats 200] [--classes 6]
"""

from __future__ import annotations

import argparse

import numpy as np

from oodsim.protocols.degenerate import closed_form_verdict, independence_p_value

ALPHAS = (0.05, 0.01, 0.001)


def excluded(
    classes: int, per_class: int, skill: float, repeats: int, rng: np.random.Generator
) -> dict[float, float]:
    """The share of ``repeats`` simulated classifiers the rule excludes, per alpha."""
    labels = np.repeat(np.arange(classes), per_class)
    counts = dict.fromkeys(ALPHAS, 0)
    for _ in range(repeats):
        right = rng.random(labels.size) < skill / classes
        other = (labels + rng.integers(1, classes, labels.size)) % classes
        predictions = np.where(right, labels, other)
        p_value = None
        for alpha in ALPHAS:
            verdict = closed_form_verdict(predictions, labels, alpha)
            if verdict is None:
                if p_value is None:
                    p_value = independence_p_value(predictions, labels)
                degenerate = not p_value < alpha
            else:
                degenerate = verdict.degenerate
            counts[alpha] += degenerate
    return {alpha: counts[alpha] / repeats for alpha in ALPHAS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--classes", type=int, default=6)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"K = {args.classes} classes, {args.repeats} simulated classifiers per row")
    header = " | ".join(f"alpha {a:g}" for a in ALPHAS)
    print(f"| accuracy | per class | validation n | {header} |")
    print("|---" * (3 + len(ALPHAS)) + "|")
    for skill in (1.0, 1.5, 2.0, 3.0):
        for per_class in (10, 20, 36, 100):
            rates = excluded(args.classes, per_class, skill, args.repeats, rng)
            cells = " | ".join(f"{rates[a]:.2f}" for a in ALPHAS)
            accuracy = f"{skill:g} × chance ({skill / args.classes:.2f})"
            print(f"| {accuracy} | {per_class} | {per_class * args.classes} | {cells} |")


if __name__ == "__main__":
    main()
