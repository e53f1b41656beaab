"""Cache reuse and worker scaling of the digits spec.

Prints the first-run time, the re-run time (everything from the cache) and their ratio, then the
throughput (simulations per minute) of fresh runs with 1 and 2 local workers and their ratio.
All runs are measured here, in this process, on fresh temporary caches.

    python benchmarks/reuse.py [--spec specs/digits.toml] [--seeds 50] [--scaling-seeds 20]
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


def _timed_run(spec: oodsim.specs.ExperimentSpec, cache: Path, workers: int | None) -> tuple:
    started = time.perf_counter()
    results = oodsim.run(spec, cache=cache, n_workers=workers, progress=False)
    return time.perf_counter() - started, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default=str(ROOT / "specs" / "digits.toml"))
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--scaling-seeds", type=int, default=20)
    args = parser.parse_args()
    spec = oodsim.load(args.spec)

    def with_seeds(n: int, start: int = 0) -> oodsim.specs.ExperimentSpec:
        return attrs.evolve(spec, seeds=attrs.evolve(spec.seeds, n=n, start=start))

    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        first, results = _timed_run(with_seeds(args.seeds), cache, None)
        again, rerun = _timed_run(with_seeds(args.seeds), cache, None)
        print(f"spec {args.spec}: {args.seeds} simulations, {len(spec.detectors)} detectors")
        print(f"first run   {first:8.1f} s   computed {store_counts(results)['computed']}")
        print(f"re-run      {again:8.1f} s   computed {store_counts(rerun)['computed']}")
        print(f"re-run / first run = {again / first:.3f}")

        rates = {}
        for workers in (1, 2):
            # fresh seeds and cache per worker count, so both compute everything
            seconds, _ = _timed_run(
                with_seeds(args.scaling_seeds, start=10_000 * workers),
                Path(tmp) / f"scaling-{workers}",
                workers,
            )
            rates[workers] = args.scaling_seeds / seconds * 60
            print(
                f"{workers} worker(s): {args.scaling_seeds} simulations in {seconds:6.1f} s "
                f"= {rates[workers]:6.1f} simulations/min (cluster start included)"
            )
        print(f"throughput 2 workers / 1 worker = {rates[2] / rates[1]:.2f}")


if __name__ == "__main__":
    main()
