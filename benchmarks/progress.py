"""The status line's time left, replayed on recorded runs: how often its range holds the truth.

Each recording (``benchmarks/recordings/*.json``) is a real run's landings: when each seed
landed, seconds from the run's start, whether it came from the cache or failed, and how many
seeds the cluster ran at once. Replaying one feeds the landings, one by one, to the time-left
estimator of :mod:`oodsim.engine.progress` and to the one it replaced (the mean gap between
landings ± 2 standard errors of that mean, times the seeds left), both measured here, on the
same samples. At each landing where an estimator shows a range, the true time left is the last
landing's time minus this one's. Printed per recording and overall: the coverage (the share of
samples whose range holds the true time left; the engine's goal is ≥ 0.8), the median width of
the range relative to the true time left, and the new estimator's ratios to the old one.

    python benchmarks/progress.py                       # replay every recording
    python benchmarks/progress.py record NAME [--spec specs/digits.toml] [--workers 2]

``record`` runs ``oodsim run SPEC --quiet`` on a fresh temporary cache with
``$OODSIM_RECORD_LANDINGS`` set (the run's :class:`~oodsim.engine.progress.Progress` writes its
landings there when it ends) and saves them as ``benchmarks/recordings/NAME.json``, with the
command, the date and the machine's load averages before and after.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from oodsim.engine.progress import RECORD_ENV
from oodsim.engine.time_left import ROUNDS_BEFORE_ESTIMATE, TimeLeft, time_left

ROOT = Path(__file__).resolve().parents[1]
RECORDINGS = Path(__file__).resolve().parent / "recordings"


def record(name: str, spec: str, workers: int | None) -> Path:
    """Run ``spec`` on a fresh cache and save its landings as ``RECORDINGS/NAME.json``."""
    with tempfile.TemporaryDirectory() as tmp:
        landings = Path(tmp) / "landings.json"
        command = [sys.executable, "-m", "oodsim.cli", "run", spec, "--quiet"]
        command += ["--cache", f"{tmp}/cache", "--out", f"{tmp}/results.zarr"]
        command += [] if workers is None else ["--workers", str(workers)]
        before = os.getloadavg()
        environment = {**os.environ, RECORD_ENV: str(landings)}
        subprocess.run(command, check=True, cwd=ROOT, env=environment, stdout=subprocess.DEVNULL)
        recorded = json.loads(landings.read_text(encoding="utf-8"))
    shown = ["oodsim", "run", spec] + ([] if workers is None else ["--workers", str(workers)])
    recorded.update(
        name=name,
        command=" ".join(shown),
        date=datetime.date.today().isoformat(),
        load_before=[round(x, 2) for x in before],
        load_after=recorded.pop("load"),
    )
    RECORDINGS.mkdir(exist_ok=True)
    path = RECORDINGS / f"{name}.json"
    path.write_text(json.dumps(recorded) + "\n", encoding="utf-8")
    return path


Estimator = Callable[[Sequence[float], int, int, int], "TimeLeft | None"]


def old_time_left(computed: Sequence[float], done: int, total: int, slots: int) -> TimeLeft | None:
    """The status line's time left before this benchmark existed (the peer): the mean gap
    between landings after the first round, ± 2 standard errors of that mean, times the seeds
    left; shown from the second round."""
    left, slots = total - done, max(1, slots)
    if left <= 0 or len(computed) < ROUNDS_BEFORE_ESTIMATE * slots:
        return None
    gaps = [b - a for a, b in zip(computed[slots - 1 :], computed[slots:])]
    if not gaps:
        return None
    pace = statistics.fmean(gaps)
    error = statistics.stdev(gaps) / math.sqrt(len(gaps)) if len(gaps) > 1 else pace
    return TimeLeft(left * max(pace - 2 * error, 0.0), left * pace, left * (pace + 2 * error))


def said(estimator: Estimator, recording: dict) -> list[tuple[float, TimeLeft]]:
    """``(true time left, estimate)`` at each landing of ``recording`` where ``estimator``
    gives one (as :func:`oodsim.engine.time_left.replay` does for the engine's)."""
    landings, total = recording["landings"], recording["total"]
    computed: list[float] = []
    samples = []
    for done, (when, cached, _failed, slots) in enumerate(landings, start=1):
        if not cached:
            computed.append(when)
        estimate = estimator(computed, done, total, int(slots))
        if estimate is not None:
            samples.append((landings[-1][0] - when, estimate))
    return samples


def scores(samples: list[tuple[float, TimeLeft]]) -> tuple[float, float]:
    """The coverage (share of samples whose range holds the truth) and the median width of the
    range relative to the true time left (over samples with time left)."""
    held = sum(estimate.holds(truth) for truth, estimate in samples) / len(samples)
    widths = [(e.high - e.low) / truth for truth, e in samples if truth > 0]
    return held, statistics.median(widths)


def compare(paths: Sequence[Path]) -> None:
    """Print each recording's and the pooled coverage and median relative width, of the
    engine's estimator and of the old one, and their ratios."""
    header = (
        f"{'recording':32} {'load':>5} {'n':>4}  {'coverage new/old':>17}  {'width new/old':>14}"
    )
    print(header)
    pooled: dict[str, list] = {"new": [], "old": []}
    for path in paths:
        recording = json.loads(path.read_text(encoding="utf-8"))
        new, old = said(time_left, recording), said(old_time_left, recording)
        pooled["new"] += new
        pooled["old"] += old
        (held, width), (held_old, width_old) = scores(new), scores(old)
        load = statistics.fmean(recording["load_before"][:1] + recording["load_after"][:1])
        print(
            f"{path.stem:32} {load:5.1f} {len(new):4d}  {held:7.2f} / {held_old:4.2f}   "
            f"  {width:6.2f} / {width_old:4.2f}"
        )
    (held, width), (held_old, width_old) = scores(pooled["new"]), scores(pooled["old"])
    print(
        f"{'all':32} {'':5} {len(pooled['new']):4d}  {held:7.2f} / {held_old:4.2f}   "
        f"  {width:6.2f} / {width_old:4.2f}"
    )
    print(
        f"coverage new / old = {held / held_old:.2f}; median relative width new / old = "
        f"{width / width_old:.2f} (the engine's goal: coverage >= 0.80)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command")
    recording = commands.add_parser("record", help="record a real run's landings")
    recording.add_argument("name", help="the recording's name (benchmarks/recordings/NAME.json)")
    recording.add_argument("--spec", default="specs/digits.toml")
    recording.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)
    if args.command == "record":
        print(record(args.name, args.spec, args.workers))
        return 0
    compare(sorted(RECORDINGS.glob("*.json")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
