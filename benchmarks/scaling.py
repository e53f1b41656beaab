"""How a run's cost grows with its number of seeds: first run, one worker against two, rerun.

For each seed count N (default 50 and 400; add 2000 for the issue's full table), on a tiny open
set model (digits, ``small_cnn`` of width 8, 6 epochs, MSP), each as ``oodsim run`` in a child
process on a fresh cache (interpreter start, imports and cluster included: what a user pays):

- ``1 worker``: ``--workers 1`` (oodsim runs in-process);
- ``2 workers``: ``--workers 2`` (a local cluster), then ``rerun``: the same command again on
  its cache, where everything is cached (nothing trains, every seed is scored in the driver).

Printed per N: wall seconds of each, ``2 / 1 worker`` throughput (wall(1) / wall(2), at most 2
on 2 cores), the rerun's cost per seed (its wall over N, start-up included) and ``rerun /
first`` (rerun wall over the 2-worker first run's). The peers are measured in the same run, one
after another; a busy machine moves all of them.

A second rerun is timed from inside: the child wraps the engine's ``score_seed`` to stamp each
scored seed, and prints when the first one was scored (``rerun start s``, from the
interpreter's start: imports, spec, preflight, the plan of the first batches) and the time per
seed while scoring (``scoring ms/seed``: planning, checksums, reading and scoring a seed).

    python benchmarks/scaling.py [--seeds 50 400] [--repeats 1]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TINY = """\
name = "scaling"
detectors = ["msp"]
metrics = ["auroc", "accuracy"]

[dataset]
name = "digits"

[split]
n_known = 6
fractions = [0.6, 0.2, 0.2]

[model]
arch = "small_cnn"
dropout = 0.2
width = 8

[training]
batch_size = 64
lr = 0.05
max_epochs = 6
patience = 2

[seeds]
n = {n}
"""


def _run(spec: Path, cache: Path, workers: int) -> float:
    """Wall seconds of ``oodsim run SPEC --workers W --cache CACHE --quiet`` in a child."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "oodsim.cli", "run", str(spec), "--workers", str(workers)]
        + ["--cache", str(cache), "--quiet"],
        capture_output=True,
        text=True,
        cwd=spec.parent,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"oodsim run failed:\n{done.stderr[-3000:]}")
    return wall


#: a cached rerun in a child that stamps every seed the engine scores (see the docstring)
TIMED = """\
import sys, time
started = time.perf_counter()
import oodsim.engine.submitter
engine = sys.modules["oodsim.engine.submitter"]
score_seed, stamps = engine.score_seed, []
def timed(*args, **kwargs):
    result = score_seed(*args, **kwargs)
    stamps.append(time.perf_counter() - started)
    return result
engine.score_seed = timed
from oodsim.cli.main import main
code = main(sys.argv[1:])
print("TIMED", stamps[0], (stamps[-1] - stamps[0]) / max(len(stamps) - 1, 1), file=sys.stderr)
sys.exit(code)
"""


def _timed_rerun(spec: Path, cache: Path) -> tuple[float, float]:
    """(seconds to the first scored seed, seconds per seed while scoring) of a cached rerun."""
    done = subprocess.run(
        [sys.executable, "-c", TIMED, "run", str(spec), "--workers", "2"]
        + ["--cache", str(cache), "--quiet"],
        capture_output=True,
        text=True,
        cwd=spec.parent,
    )
    if done.returncode != 0:
        sys.exit(f"oodsim run failed:\n{done.stderr[-3000:]}")
    line = next(x for x in done.stderr.splitlines() if x.startswith("TIMED"))
    start, per_seed = map(float, line.split()[1:])
    return start, per_seed


def measure(n: int) -> dict[str, float]:
    """One round of the three runs at ``n`` seeds, each on a fresh cache."""
    with tempfile.TemporaryDirectory() as folder:
        spec = Path(folder) / "spec.toml"
        spec.write_text(TINY.format(n=n))
        one = _run(spec, Path(folder) / "cache-1", 1)
        two = _run(spec, Path(folder) / "cache-2", 2)
        rerun = _run(spec, Path(folder) / "cache-2", 2)
        start, per_seed = _timed_rerun(spec, Path(folder) / "cache-2")
    return {
        "1 worker": one,
        "2 workers": two,
        "rerun": rerun,
        "start": start,
        "per seed": per_seed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[50, 400])
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    header = (
        "seeds  1 worker s  2 workers s  2 / 1 worker  rerun s  rerun ms/seed  rerun / first"
        "  rerun start s  scoring ms/seed"
    )
    print(header)
    print("-" * len(header))
    for n in args.seeds:
        rounds = [measure(n) for _ in range(args.repeats)]
        wall = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        print(
            f"{n:5d}  {wall['1 worker']:10.1f}  {wall['2 workers']:11.1f}  "
            f"{wall['1 worker'] / wall['2 workers']:12.2f}  {wall['rerun']:7.2f}  "
            f"{1000 * wall['rerun'] / n:13.1f}  {wall['rerun'] / wall['2 workers']:13.3f}  "
            f"{wall['start']:13.2f}  {1000 * wall['per seed']:15.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
