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

A second table times such a rerun of that spec (``normal``) and of a spec whose classifiers
are mostly weak (``weak``: 90 images a class, 2 epochs), where the degenerate rule
(:mod:`oodsim.protocols.degenerate`) needs its 9,999-shuffle permutation test for most seeds:
the cached verdicts they load keep a rerun's cost a seed the same. For each: the seeds whose
verdict took the shuffles (``shuffled``: the ``degenerate_verdict`` entries the first run
stored), the seeds found degenerate, the verdicts the rerun loaded and computed, and its
``scoring ms/seed`` (its cost a seed beyond start-up).

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

#: :data:`TINY` with classifiers that mostly stay weak: few images a class (18 validation
#: images, below the 20 the rule's closed form needs) and 2 epochs
WEAK = (
    TINY.replace('name = "scaling"', 'name = "scaling-weak"')
    .replace('name = "digits"', 'name = "digits"\nmax_per_class = 90')
    .replace("max_epochs = 6", "max_epochs = 2")
)

#: the store kind of the degenerate rule's stored verdicts (oodsim.artifacts.verdicts)
VERDICTS = "degenerate_verdict"


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
score_seed, stamps, counts = engine.score_seed, [], [0, 0, 0]
def timed(*args, **kwargs):
    result = score_seed(*args, **kwargs)
    stamps.append(time.perf_counter() - started)
    counts[0] += bool(str(result.variables.get("degenerate", "")))
    counts[1] += sum(e[:2] == ("loaded", "degenerate_verdict") for e in result.events)
    counts[2] += sum(e[:2] == ("computed", "degenerate_verdict") for e in result.events)
    return result
engine.score_seed = timed
from oodsim.cli.main import main
code = main(sys.argv[1:])
per_seed = (stamps[-1] - stamps[0]) / max(len(stamps) - 1, 1)
print("TIMED", stamps[0], per_seed, *counts, file=sys.stderr)
sys.exit(code)
"""


def _timed_rerun(spec: Path, cache: Path) -> dict[str, float]:
    """Of a cached rerun: seconds to the first scored seed (``start``), seconds per seed while
    scoring (``per seed``), and the seeds found degenerate and verdicts loaded and computed."""
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
    names = ("start", "per seed", "degenerate", "loaded", "computed")
    return dict(zip(names, map(float, line.split()[1:]), strict=True))


def _shuffled(cache: Path) -> int:
    """How many verdicts of the degenerate rule took the permutation test: the entries of
    their kind in the store (one per seed whose verdict needed shuffles)."""
    return sum(1 for entry in (cache / VERDICTS).glob("*/*") if entry.is_dir())


def measure(n: int) -> dict[str, float]:
    """One round of the three runs at ``n`` seeds, each on a fresh cache, then a first run
    and a timed rerun of the weak spec (its keys ``weak ...``)."""
    with tempfile.TemporaryDirectory() as folder:
        spec = Path(folder) / "spec.toml"
        spec.write_text(TINY.format(n=n))
        one = _run(spec, Path(folder) / "cache-1", 1)
        two = _run(spec, Path(folder) / "cache-2", 2)
        rerun = _run(spec, Path(folder) / "cache-2", 2)
        timed = _timed_rerun(spec, Path(folder) / "cache-2")
        shuffled = _shuffled(Path(folder) / "cache-2")
        weak = Path(folder) / "weak.toml"
        weak.write_text(WEAK.format(n=n))
        weak_first = _run(weak, Path(folder) / "cache-weak", 2)
        weak_timed = _timed_rerun(weak, Path(folder) / "cache-weak")
        weak_shuffled = _shuffled(Path(folder) / "cache-weak")
    return {
        "1 worker": one,
        "2 workers": two,
        "rerun": rerun,
        **timed,
        "shuffled": shuffled,
        "weak first": weak_first,
        **{f"weak {name}": value for name, value in weak_timed.items()},
        "weak shuffled": weak_shuffled,
    }


def _rerun_row(n: int, case: str, wall: dict[str, float], prefix: str) -> str:
    """A row of the second table: one case's timed rerun (``prefix``: "" or "weak ")."""
    return (
        f"{n:5d}  {case:6s}  {wall[prefix + 'shuffled']:8.0f}  {wall[prefix + 'degenerate']:10.0f}"
        f"  {wall[prefix + 'loaded']:15.0f}  {wall[prefix + 'computed']:17.0f}"
        f"  {wall[prefix + 'start']:13.2f}  {1000 * wall[prefix + 'per seed']:15.2f}"
    )


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
    reruns = []
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
        reruns += [_rerun_row(n, "normal", wall, ""), _rerun_row(n, "weak", wall, "weak ")]
    header = (
        "seeds  case    shuffled  degenerate  verdicts loaded  verdicts computed"
        "  rerun start s  scoring ms/seed"
    )
    print(f"\nCached reruns, normal and weak classifiers:\n{header}\n{'-' * len(header)}")
    print("\n".join(reruns))


if __name__ == "__main__":
    main()
