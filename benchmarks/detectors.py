"""Cost of adding one logit detector to a finished experiment, relative to the first run.

Runs the digits spec with MSP only for 100 seeds on a fresh cache (training + inference), then
the same spec with one more logit detector (energy): the second run may only read cached outputs
and score. Prints both times and their ratio (target: under 2%).

    python benchmarks/detectors.py [--seeds 100] [--detector energy]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import attrs

import oodsim
from oodsim.results import store_counts

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default=str(ROOT / "specs" / "digits.toml"))
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--detector", default="energy")
    args = parser.parse_args()
    spec = oodsim.load(args.spec)
    base = attrs.evolve(spec, detectors=("msp",), seeds=attrs.evolve(spec.seeds, n=args.seeds))
    added = attrs.evolve(base, detectors=("msp", args.detector))

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        first = oodsim.run(base, cache=tmp, progress=False)
        first_seconds = time.perf_counter() - started
        started = time.perf_counter()
        second = oodsim.run(added, cache=tmp, progress=False)
        added_seconds = time.perf_counter() - started
    print(
        f"first run (msp, {args.seeds} seeds)      {first_seconds:8.2f} s  "
        f"computed {store_counts(first)['computed']}"
    )
    print(
        f"adding {args.detector!r} (re-run, scores all) {added_seconds:8.2f} s  "
        f"computed {store_counts(second)['computed']}"
    )
    print(f"cost of adding a logit detector / first run = {added_seconds / first_seconds:.2%}")


if __name__ == "__main__":
    main()
