"""Soak test: run a digits spec while a random Dask worker is SIGKILLed every few seconds, then
check that the results equal a fault-free run on a fresh cache.

    python benchmarks/soak.py [--minutes 3] [--seeds 40] [--workers 2] [--interval 6]

Phase 1 runs the spec (rounds of ``--seeds`` new seeds each, until ``--minutes`` have passed)
on a LocalCluster whose workers a killer thread SIGKILLs at random (the nanny restarts them;
distributed re-runs their tasks; the store's locks of the dead workers are taken over). Phase 2
runs the same seeds on a fresh cache without faults. Prints the faults injected (and how many
hit a worker while it held a store lock, i.e. mid-computation), the faults survived, the seeds
completed, the cache check, and whether the two results are identical.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import xarray as xr

import oodsim
from oodsim.store import Store

ROOT = Path(__file__).resolve().parents[1]


def _spec(seeds: int, start: int) -> oodsim.specs.ExperimentSpec:
    spec = oodsim.load(ROOT / "specs" / "digits.toml")
    return attrs.evolve(spec, seeds=attrs.evolve(spec.seeds, n=seeds, start=start))


class Killer(threading.Thread):
    """SIGKILLs a random worker process of ``client`` every ``interval`` (±50%) seconds until
    ``deadline`` (``time.monotonic()``); the round running then finishes without faults."""

    def __init__(
        self, client: Any, cache: Path, interval: float, seed: int, deadline: float
    ) -> None:
        super().__init__(daemon=True)
        self.client, self.cache, self.interval = client, cache, interval
        self.deadline = deadline
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.injected = self.mid_task = 0

    def _lock_holders(self) -> set[int]:
        holders = set()
        for lock in (self.cache / "locks").glob("*.lock"):
            try:
                holders.add(int(json.loads(lock.read_text())["pid"]))
            except (OSError, ValueError, KeyError):
                continue
        return holders

    def run(self) -> None:
        empty_since = None
        while not self.stop.wait(self.interval * self.rng.uniform(0.5, 1.5)):
            if time.monotonic() > self.deadline:
                return
            try:
                pids = sorted(self.client.run(os.getpid, wait=True).values())
            except Exception:  # a worker is restarting: try again at the next tick
                continue
            if not pids:  # distributed gives up on a nanny whose restart fails: say so
                empty_since = empty_since or time.monotonic()
                if time.monotonic() - empty_since > 60:
                    print("no worker for 60 s: distributed did not restart them", flush=True)
                    os._exit(3)
                continue
            empty_since = None
            victim = self.rng.choice(pids)
            busy = victim in self._lock_holders()
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                continue
            self.injected += 1
            self.mid_task += busy


def faulty_phase(args: argparse.Namespace, cache: Path) -> tuple[list[xr.Dataset], Killer, int]:
    """Rounds of new seeds under fire until the time is up. Returns the results of every
    round, the killer (its counts) and the number of runs that raised (none expected)."""
    from oodsim.engine import cluster_client

    rounds: list[xr.Dataset] = []
    raised = 0
    with cluster_client(n_workers=args.workers) as client:
        deadline = time.monotonic() + 60 * args.minutes
        killer = Killer(client, cache, args.interval, args.rng, deadline)
        killer.start()
        while time.monotonic() < deadline or len(rounds) == 0:
            spec = _spec(args.seeds, start=len(rounds) * args.seeds)
            try:
                results = oodsim.run(
                    spec, address=client.scheduler.address, cache=cache, progress=False
                )
            except Exception as error:  # a fault was not survived: report it, resume the round
                raised += 1
                print(f"  run raised {type(error).__name__}: {error}; resuming", flush=True)
                continue
            rounds.append(results)
            print(
                f"  round {len(rounds)}: {results.sizes['seed']} seeds, "
                f"{killer.injected} faults so far, "
                f"{int(results.attrs['n_failed'])} failed seeds",
                flush=True,
            )
        killer.stop.set()
        killer.join()
    return rounds, killer, raised


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="how long to inject faults")
    parser.add_argument("--seeds", type=int, default=40, help="seeds per round")
    parser.add_argument("--workers", type=int, default=2, help="local worker processes")
    parser.add_argument("--interval", type=float, default=6.0, help="mean seconds between kills")
    parser.add_argument("--rng", type=int, default=0, help="seed of the victim choice")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="oodsim-soak-") as tmp:
        faulty_cache, clean_cache = Path(tmp) / "faulty", Path(tmp) / "clean"
        print(f"phase 1: faults every ~{args.interval:g} s for {args.minutes:g} min", flush=True)
        started = time.monotonic()
        rounds, killer, raised = faulty_phase(args, faulty_cache)
        faulty_seconds = time.monotonic() - started
        faulty = xr.concat(rounds, dim="seed")
        n_seeds = faulty.sizes["seed"]
        n_failed = int((faulty.failure.values != "").sum())

        print(f"phase 2: the same {n_seeds} seeds without faults on a fresh cache", flush=True)
        started = time.monotonic()
        clean = oodsim.run(
            _spec(n_seeds, 0), n_workers=args.workers, cache=clean_cache, progress=False
        )
        clean_seconds = time.monotonic() - started

        store = Store(faulty_cache)
        corrupt = store.verify()
        leftovers = len(list(faulty_cache.glob("**/.tmp-*")))
        equal = all(
            faulty[name].equals(clean[name]) for name in ("score", "failure", "class_split")
        ) and list(faulty.seed.values) == list(clean.seed.values)

    survived = killer.injected if raised == 0 else f"{killer.injected - raised} (runs raised)"
    print()
    print(
        f"faults injected:        {killer.injected} ({killer.mid_task} while the worker "
        "held a store lock, i.e. mid-computation)"
    )
    print(f"faults survived:        {survived}")
    print(f"runs that raised:       {raised}")
    print(f"seeds completed:        {n_seeds} in {len(rounds)} round(s) ({n_failed} failed)")
    print(f"faulty phase:           {faulty_seconds:.0f} s; clean phase: {clean_seconds:.0f} s")
    print(
        f"cache verify (faulty):  {len(corrupt)} corrupt entries, {leftovers} temp leftovers "
        "(removed by `oodsim cache gc`)"
    )
    print(f"results equal:          {equal}")
    raise SystemExit(0 if equal and not corrupt and raised == 0 else 1)


if __name__ == "__main__":
    main()
