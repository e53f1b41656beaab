"""How much the scale of the class-severity average matters (docs/findings.md, section 4).

Runs ``specs/severity_fashion_mnist.toml`` with 2 seeds and two softmax-response detectors that
differ only in the scale their confidence is averaged on: ``msp`` (the paper's: probability,
``expit(κ)``) and ``msp_log_odds`` (the same κ averaged as log-odds, what oodsim did before
detectors declared a ``confidence_scale``). Prints, per seed, Kendall's τ between the two class
orders, how many of the 11 levels hold other classes, and the largest change of a level's AUROC::

    python docs/findings/severity_scale.py [--cache CACHE]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import attrs
import numpy as np
from scipy.stats import kendalltau

import oodsim
from oodsim.detectors.logits import max_softmax_log_odds
from oodsim.specs import DetectorSpec

SPEC = Path(__file__).resolve().parents[2] / "specs" / "severity_fashion_mnist.toml"


@oodsim.detectors.register("msp_log_odds", needs={"logits"}, replace=True)
def msp_log_odds(outputs, *, fit=None):
    """Softmax response as log-odds, averaged as log-odds for class severity (scale "kappa")."""
    return max_softmax_log_odds(outputs.logits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=None)
    args = parser.parse_args()
    spec = oodsim.load(SPEC)
    spec = attrs.evolve(
        spec,
        seeds=attrs.evolve(spec.seeds, n=2),
        detectors=(DetectorSpec(name="msp"), DetectorSpec(name="msp_log_odds")),
        metrics=("auroc",),
    )
    results = oodsim.run(spec, cache=args.cache, progress=False)
    for seed in results.seed.values:
        cell = results.sel({"seed": seed}).isel(model=0)
        paper = cell["class_severity"].sel({"method": "msp"}).values
        log_odds = cell["class_severity"].sel({"method": "msp_log_odds"}).values
        tau = kendalltau(paper, log_odds).statistic
        levels = [
            [set(json.loads(s)) for s in cell["level_classes"].sel({"method": m}).values]
            for m in ("msp", "msp_log_odds")
        ]
        moved = sum(a != b for a, b in zip(*levels))
        auroc = cell["score"].sel({"metric": "auroc"})
        delta = np.abs(auroc.sel({"method": "msp"}) - auroc.sel({"method": "msp_log_odds"}))
        print(
            f"seed {int(seed)}: Kendall tau {tau:.3f}; {moved} of {len(levels[0])} levels hold "
            f"other classes; max level AUROC change {float(delta.max()):.4f}; "
            f"msp class severity in [{paper.min():.3f}, {paper.max():.3f}] (probability), "
            f"log-odds in [{log_odds.min():.2f}, {log_odds.max():.2f}]"
        )


if __name__ == "__main__":
    main()
