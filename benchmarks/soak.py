"""Soak test: run a digits spec while Dask workers are SIGKILLed and the cache is tampered with,
then check that every result equals a fault-free run on a fresh cache.

    python benchmarks/soak.py [--minutes 3] [--seeds 40] [--workers 2]
                              [--kill-interval 6 | --no-kill] [--tamper-interval 4 | --no-tamper]
                              [--burst 12] [--rng 0] [--allowed-failures 20]

Phase 1 runs the spec in rounds of ``--seeds`` new seeds each, until ``--minutes`` have passed,
on a LocalCluster, under two independent fault injectors (each can be switched off):

- a killer thread SIGKILLs a random worker every ``--kill-interval`` (±50%) seconds (the nanny
  restarts it; distributed re-runs its tasks; the store's locks of the dead worker are taken
  over; ``--interval`` is the old name of the option);
- a tamperer thread damages the cache every ``--tamper-interval`` (±50%) seconds with one of:
  a flipped byte (same size) in a file of a finished entry (a chunk, a checkpoint array,
  ``meta.json``), an entry folder replaced by a regular file, ``meta.json`` replaced by ``{}``
  or garbage, a garbage lock file (not JSON, ``[1, 2]``, ``{"pid": "abc"}``, a folder) on a key
  the run is computing or will compute, a deleted chunk file. It damages only entries of the
  seeds of the running round, at most one entry per seed and round: the engine heals a seed
  once per run after scoring, and an adversary that damages every recomputation cannot be
  beaten. In-progress writes (``.tmp-*``) are never touched.

Then a burst of ``--burst`` faults hits old entries (one per seed) and the whole seed range
runs once more on the tampered cache without faults (the heal pass): its planning must find and
recompute everything damaged. ``Store.verify`` then checks the tampered cache. Phase 2 runs the
same seeds on a fresh cache without faults. Exit code 0 only if every round and the heal pass
equal the clean run (score, failure, class_split, seeds), no run raised and the cache holds
nothing corrupt. ``CorruptEntryWarning``s (driver and workers) are counted, not printed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import tempfile
import threading
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs
import dask.config
import xarray as xr
from distributed.diagnostics.plugin import WorkerPlugin

import oodsim
from oodsim.protocols import bind
from oodsim.store import LOCKS, META, CorruptEntryWarning, Store
from oodsim.store.arrays import ARRAYS_ZIP

ROOT = Path(__file__).resolve().parents[1]
COMPARED = ("score", "failure", "class_split")
#: fault kinds of the tamperer, as the summary names them
FLIP, TO_FILE, META_GARBAGE, LOCK_GARBAGE, CHUNK_DELETED = (
    "flipped byte",
    "entry -> file",
    "meta.json garbage",
    "garbage lock",
    "chunk deleted",
)
ENTRY_FAULTS = (FLIP, TO_FILE, META_GARBAGE, CHUNK_DELETED)
META_CONTENTS = (b"{}", b"[]", b"", b"\x00\x9fnot json", b'{"files": {"../x": "0"}}')
LOCK_CONTENTS = (b"\x00\xffnot json", b"[1, 2]", b'{"pid": "abc"}', b'{"host": "h", "pid": 0}')


def _spec(seeds: int, start: int) -> oodsim.specs.ExperimentSpec:
    spec = oodsim.load(ROOT / "specs" / "digits.toml")
    return attrs.evolve(spec, seeds=attrs.evolve(spec.seeds, n=seeds, start=start))


def planned_entries(spec: Any) -> dict[tuple[str, str], int]:
    """The seed of every (kind, key) entry that the seeds of ``spec`` store."""
    protocol = bind(spec)
    owners: dict[tuple[str, str], int] = {}
    for seed in spec.seeds.all():
        for task in protocol.plan(seed):
            owners |= dict.fromkeys([*task.entries, *task.verify], seed)
    return owners


# --------------------------------------------------------------------------- warnings


class WarningLog(WorkerPlugin):
    """Appends each ``CorruptEntryWarning`` to a file instead of printing it, in the driver
    (:meth:`install`) and in every worker, restarted ones included (a Dask plugin). A file
    survives killed workers; other warnings print as usual."""

    name = "soak-warning-log"

    def __init__(self, path: Path) -> None:
        self.path = path

    def setup(self, worker: Any) -> None:
        self.install()

    def install(self) -> None:
        warnings.simplefilter("always", CorruptEntryWarning)
        shown = warnings.showwarning

        def show(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
            if not issubclass(category, CorruptEntryWarning):
                return shown(message, category, *args, **kwargs)
            with self.path.open("a") as handle:
                handle.write(f"{os.getpid()} {message}\n".replace("\n", " ").rstrip() + "\n")

        warnings.showwarning = show

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []


# --------------------------------------------------------------------------- kills


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
        for lock in (self.cache / LOCKS).glob("*.lock"):
            try:
                holders.add(int(json.loads(lock.read_text())["pid"]))
            except (OSError, ValueError, KeyError, TypeError):  # the tamperer's garbage locks
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


# --------------------------------------------------------------------------- tampering


def _files(entry: Path) -> list[Path]:
    """The regular files of an entry folder (links are not followed)."""
    return sorted(p for p in entry.rglob("*") if p.is_file() and not p.is_symlink())


def flip_byte(entry: Path, scratch: Path, rng: random.Random) -> Path | None:
    """XOR one byte of a random non-empty file of ``entry`` with a non-zero value."""
    files = [p for p in _files(entry) if p.stat().st_size > 0]
    if not files:
        return None
    path = rng.choice(files)
    offset = rng.randrange(path.stat().st_size)
    with path.open("r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)[0] ^ rng.randrange(1, 256)
        handle.seek(offset)
        handle.write(bytes([byte]))
    return path


def replace_by_file(entry: Path, scratch: Path, rng: random.Random) -> Path | None:
    """Move the entry folder out of the cache (then delete it) and put a regular file there."""
    aside = scratch / uuid.uuid4().hex
    os.rename(entry, aside)
    entry.write_bytes(rng.randbytes(rng.randrange(0, 64)))
    shutil.rmtree(aside)
    return entry


def garble_meta(entry: Path, scratch: Path, rng: random.Random) -> Path | None:
    """Replace ``meta.json`` by ``{}``, a list, nothing, garbage or a record of the wrong form."""
    path = entry / META
    if not path.is_file():
        return None
    _write_over(path, rng.choice(META_CONTENTS), scratch)
    return path


def delete_chunk(entry: Path, scratch: Path, rng: random.Random) -> Path | None:
    """Delete the arrays file of ``entry`` (``arrays.zarr.zip``; in an entry of the older
    layout, a random chunk file ``arrays.zarr/<array>/c/...``)."""
    chunks = [p for p in _files(entry) if p.name == ARRAYS_ZIP]
    chunks += [p for p in _files(entry) if "c" in p.relative_to(entry).parts[2:-1]]
    if not chunks:
        return None
    path = rng.choice(chunks)
    path.unlink()
    return path


def garbage_lock(path: Path, scratch: Path, rng: random.Random) -> Path | None:
    """Put a lock file that is not a lock record (or a folder) at ``path``."""
    content = rng.choice((*LOCK_CONTENTS, None))
    if content is None:  # a folder where the lock file belongs
        path.unlink(missing_ok=True)
        path.mkdir()
    else:
        _write_over(path, content, scratch)
    return path


def _write_over(path: Path, content: bytes, scratch: Path) -> None:
    """Replace the file at ``path`` by ``content`` at once (written aside, then renamed)."""
    aside = scratch / uuid.uuid4().hex
    aside.write_bytes(content)
    os.replace(aside, path)


ENTRY_DAMAGE: dict[str, Callable[[Path, Path, random.Random], Path | None]] = {
    FLIP: flip_byte,
    TO_FILE: replace_by_file,
    META_GARBAGE: garble_meta,
    CHUNK_DELETED: delete_chunk,
}


class Tamperer(threading.Thread):
    """Damages the cache every ``interval`` (±50%) seconds until ``deadline``, while a round
    runs (:meth:`begin_round`, :meth:`end_round`): one fault per tick, chosen with its own
    ``random.Random(seed)``. Entry faults hit only finished entries of the round's seeds, at
    most one per seed and round, half of the time one of the 8 newest (those of the seeds in
    flight). Lock faults hit a live lock or the lock of a round key not computed yet."""

    def __init__(
        self, cache: Path, scratch: Path, interval: float, seed: int, deadline: float
    ) -> None:
        super().__init__(daemon=True)
        self.cache, self.scratch, self.interval, self.deadline = cache, scratch, interval, deadline
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.mutex = threading.Lock()
        self.owners: dict[tuple[str, str], int] = {}  # the round's entries and their seeds
        self.hit_seeds: set[int] = set()
        self.hit_locks: set[str] = set()
        self.counts: Counter[str] = Counter()
        self.log: list[tuple[str, int | None, str, str]] = []  # (fault, seed, path, round)
        self.written_locks: set[str] = set()
        self.round = ""

    def begin_round(self, label: str, owners: dict[tuple[str, str], int]) -> None:
        """Start tampering with the entries (and locks) of a round's seeds."""
        with self.mutex:
            if label != self.round:
                self.round, self.hit_seeds, self.hit_locks = label, set(), set()
            self.owners = owners

    def end_round(self) -> None:
        """Stop tampering until the next round begins."""
        with self.mutex:
            self.owners = {}

    def run(self) -> None:
        while not self.stop.wait(self.interval * self.rng.uniform(0.5, 1.5)):
            if time.monotonic() > self.deadline:
                return
            with self.mutex:
                if self.owners:
                    self.tamper(self.rng.choice((*ENTRY_FAULTS, LOCK_GARBAGE)))

    def burst(self, label: str, owners: dict[tuple[str, str], int], n: int) -> None:
        """``n`` entry faults on ``owners`` at once (one per seed), then no more tampering."""
        self.begin_round(label, owners)
        with self.mutex:
            for _ in range(n):
                self.tamper(self.rng.choice(ENTRY_FAULTS))
            self.owners = {}

    def tamper(self, fault: str) -> None:
        """Inject one ``fault`` if it has a target; count and log it."""
        if fault == LOCK_GARBAGE:
            target, seed = self._lock_target(), None
            damage = garbage_lock
        else:
            target, seed = self._entry_target()
            damage = ENTRY_DAMAGE[fault]
        if target is None:
            return
        try:
            damaged = damage(target, self.scratch, self.rng)
        except OSError:  # the run moved it meanwhile (quarantine, lock release)
            return
        if damaged is None:
            return
        if seed is not None:
            self.hit_seeds.add(seed)
        else:
            self.hit_locks.add(target.name)
            self.written_locks.add(target.name)
        self.counts[fault] += 1
        self.log.append((fault, seed, str(damaged.relative_to(self.cache)), self.round))

    def _entry_target(self) -> tuple[Path | None, int | None]:
        """A finished entry of a round seed not hit yet this round, and its seed."""
        found = []
        for (kind, key), seed in self.owners.items():
            path = self.cache / kind / key[:2] / key
            if seed not in self.hit_seeds and path.is_dir() and not path.is_symlink():
                try:
                    found.append((path.lstat().st_ctime, path, seed))
                except OSError:
                    continue
        if not found:
            return None, None
        found.sort()
        _, path, seed = self.rng.choice(found[-8:] if self.rng.random() < 0.5 else found)
        return path, seed

    def _lock_target(self) -> Path | None:
        """A live lock file, or the lock of a round entry that is not computed yet."""
        folder = self.cache / LOCKS
        names = [p.name for p in folder.glob("*.lock") if p.is_file()]
        names += [
            f"{kind}-{key}.lock"
            for kind, key in self.owners
            if not (self.cache / kind / key[:2] / key).exists()
        ]
        names = sorted(set(names) - self.hit_locks)
        if not names or not folder.is_dir():
            return None
        return folder / self.rng.choice(names)


# --------------------------------------------------------------------------- phases


@attrs.define
class Faulty:
    """What phase 1 and the heal pass produced."""

    rounds: list[xr.Dataset] = attrs.field(factory=list)
    heal: xr.Dataset | None = None
    raised: int = 0
    kills: int = 0
    kills_mid_task: int = 0
    tamperer: Tamperer | None = None
    seconds: float = 0.0
    heal_seconds: float = 0.0


def faulty_phase(args: argparse.Namespace, cache: Path, scratch: Path, log: WarningLog) -> Faulty:
    """Rounds of new seeds under fire until the time is up, then the burst and the heal pass."""
    from oodsim.engine import cluster_client

    out = Faulty()
    started = time.monotonic()
    # a kill every few seconds can hit one task more than distributed's default 3 times, and
    # distributed then gives up on it (KilledWorker, a documented limit, not a fault of the
    # cache); oodsim's tasks are idempotent, so the soak lets them be retried more often
    allowed = {"distributed.scheduler.allowed-failures": args.allowed_failures}
    with dask.config.set(allowed), cluster_client(n_workers=args.workers) as client:
        client.register_plugin(log, name=WarningLog.name)
        deadline = time.monotonic() + 60 * args.minutes
        killer = Killer(client, cache, args.kill_interval, args.rng, deadline)
        tamperer = Tamperer(cache, scratch, args.tamper_interval, args.rng + 1, deadline)
        out.tamperer = tamperer
        threads = [
            t for t, on in ((killer, not args.no_kill), (tamperer, not args.no_tamper)) if on
        ]
        for thread in threads:
            thread.start()
        while time.monotonic() < deadline or len(out.rounds) == 0:
            spec = _spec(args.seeds, start=len(out.rounds) * args.seeds)
            tamperer.begin_round(f"round {len(out.rounds) + 1}", planned_entries(spec))
            try:
                results = oodsim.run(
                    spec, address=client.scheduler.address, cache=cache, progress=False
                )
            except Exception as error:  # a fault was not survived: report it, resume the round
                out.raised += 1
                print(f"  run raised {type(error).__name__}: {error}; resuming", flush=True)
                continue
            finally:
                tamperer.end_round()
            out.rounds.append(results)
            _print_round(f"round {len(out.rounds)}", results, killer, tamperer, log)
        for thread in threads:
            thread.stop.set()
            thread.join()
        out.kills, out.kills_mid_task = killer.injected, killer.mid_task
        out.seconds = time.monotonic() - started

        n_seeds = sum(r.sizes["seed"] for r in out.rounds)
        spec = _spec(n_seeds, 0)
        if not args.no_tamper:
            tamperer.burst("heal pass", planned_entries(spec), args.burst)
        print(f"heal pass: all {n_seeds} seeds on the tampered cache, no faults", flush=True)
        started = time.monotonic()
        try:
            out.heal = oodsim.run(
                spec, address=client.scheduler.address, cache=cache, progress=False
            )
        except Exception as error:
            out.raised += 1
            print(f"  heal pass raised {type(error).__name__}: {error}", flush=True)
        out.heal_seconds = time.monotonic() - started
        if out.heal is not None:
            _print_round("heal pass", out.heal, killer, tamperer, log)
    return out


def _print_round(
    label: str, results: xr.Dataset, killer: Killer, tamperer: Tamperer, log: WarningLog
) -> None:
    """One progress line per run, plus the reason of each failed seed."""
    print(
        f"  {label}: {results.sizes['seed']} seeds, {killer.injected} kills and "
        f"{sum(tamperer.counts.values())} tamperings so far, {len(log.lines())} corrupt-entry "
        f"warnings so far, {int((results.failure.values != '').sum())} failed seeds; "
        f"computed {json.loads(results.attrs['store'])['computed']}",
        flush=True,
    )
    for seed, failure in zip(results.seed.values, results.failure.values):
        if failure:
            print(f"    seed {seed} failed: {failure}", flush=True)


# --------------------------------------------------------------------------- checks


def differing_seeds(results: xr.Dataset, clean: xr.Dataset) -> list[int]:
    """Seeds of ``results`` whose score, failure or class split differ from ``clean``'s."""
    reference = clean.sel(seed=results.seed.values)
    if list(reference.seed.values) != list(results.seed.values):
        return [int(s) for s in results.seed.values]
    return [
        int(seed)
        for seed in results.seed.values
        if not all(
            results[name].sel(seed=seed).equals(reference[name].sel(seed=seed)) for name in COMPARED
        )
    ]


def verify_problems(store: Store, written_locks: Iterable[str]) -> tuple[list[str], list[str]]:
    """``Store.verify()`` split into (corrupt: entries, misplaced objects, locks the tamperer
    did not write; left over: garbage locks the tamperer wrote on keys no run needed again)."""
    written = set(written_locks)
    corrupt, left = [], []
    for info, problem in store.verify():
        line = f"{info.path.relative_to(store.root)}: {problem}"
        is_ours = info.path.parent.name == LOCKS and info.path.name in written
        (left if is_ours else corrupt).append(line)
    return corrupt, left


def _reasons(lines: list[str]) -> Counter[str]:
    """Corrupt-entry warnings by reason (the text in parentheses, hex keys and numbers out)."""
    reasons: Counter[str] = Counter()
    for line in lines:
        found = re.search(r"\((.*)\); moved aside", line)
        reason = found.group(1) if found else line.split(" ", 1)[-1]
        reasons[re.sub(r"[0-9a-f]{8,}|\d+", "#", reason)[:70]] += 1
    return reasons


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="how long to inject faults")
    parser.add_argument("--seeds", type=int, default=40, help="seeds per round")
    parser.add_argument("--workers", type=int, default=2, help="local worker processes")
    parser.add_argument(
        "--kill-interval", "--interval", type=float, default=6.0, help="mean s between kills"
    )
    parser.add_argument("--no-kill", action="store_true", help="kill no worker")
    parser.add_argument("--tamper-interval", type=float, default=4.0, help="mean s between faults")
    parser.add_argument("--no-tamper", action="store_true", help="leave the cache alone")
    parser.add_argument("--burst", type=int, default=12, help="faults before the heal pass")
    parser.add_argument("--rng", type=int, default=0, help="seed of the fault choices")
    parser.add_argument(
        "--allowed-failures",
        type=int,
        default=20,
        help="worker deaths during one task before distributed gives up on it (its default: 3)",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="oodsim-soak-") as tmp:
        faulty_cache, clean_cache = Path(tmp) / "faulty", Path(tmp) / "clean"
        scratch = Path(tmp) / "scratch"
        scratch.mkdir()
        log = WarningLog(Path(tmp) / "corrupt-warnings.log")
        log.install()
        kills = "off" if args.no_kill else f"every ~{args.kill_interval:g} s"
        tampering = "off" if args.no_tamper else f"every ~{args.tamper_interval:g} s"
        print(
            f"phase 1: kills {kills}, tampering {tampering}, for {args.minutes:g} min", flush=True
        )
        faulty = faulty_phase(args, faulty_cache, scratch, log)
        tamperer = faulty.tamperer
        assert tamperer is not None
        corrupt, left_locks = verify_problems(Store(faulty_cache), tamperer.written_locks)
        leftovers = len(list(faulty_cache.glob("**/.tmp-*")))

        seeds = xr.concat(faulty.rounds, dim="seed")
        n_seeds = seeds.sizes["seed"]
        print(f"phase 2: the same {n_seeds} seeds without faults on a fresh cache", flush=True)
        started = time.monotonic()
        clean = oodsim.run(
            _spec(n_seeds, 0), n_workers=args.workers, cache=clean_cache, progress=False
        )
        clean_seconds = time.monotonic() - started
        round_diffs = [differing_seeds(r, clean) for r in faulty.rounds]
        heal_diffs = differing_seeds(faulty.heal, clean) if faulty.heal is not None else None
        warning_lines = log.lines()

    equal_rounds = [not d for d in round_diffs]
    heal_equal = heal_diffs == []
    failed = [int(s) for s, f in zip(seeds.seed.values, seeds.failure.values) if f]
    injected = ", ".join(f"{n} {kind}" for kind, n in sorted(tamperer.counts.items())) or "none"
    print()
    print(
        f"kills injected:         {faulty.kills} ({faulty.kills_mid_task} while the worker "
        "held a store lock, i.e. mid-computation)"
    )
    print(f"tamperings injected:    {sum(tamperer.counts.values())} ({injected})")
    print(f"  of them before heal:  {sum(1 for e in tamperer.log if e[3] == 'heal pass')}")
    print(f"corrupt-entry warnings: {len(warning_lines)} (driver and workers)")
    for reason, n in _reasons(warning_lines).most_common(8):
        print(f"  {n:5d} {reason}")
    print(f"runs that raised:       {faulty.raised}")
    print(f"seeds completed:        {n_seeds} in {len(faulty.rounds)} round(s); failed: {failed}")
    print(
        f"faulty phase:           {faulty.seconds:.0f} s; heal pass: {faulty.heal_seconds:.0f} s; "
        f"clean phase: {clean_seconds:.0f} s"
    )
    print(
        f"cache verify (faulty):  {len(corrupt)} corrupt, {len(left_locks)} garbage locks left on "
        f"keys no run needed again, {leftovers} temp leftovers (both removed by `oodsim cache gc`)"
    )
    for line in corrupt[:10]:
        print(f"  corrupt: {line}")
    print(f"rounds equal to clean:  {equal_rounds}")
    print(f"heal pass equal:        {heal_equal}")
    for label, diffs in [*zip(range(1, len(round_diffs) + 1), round_diffs), ("heal", heal_diffs)]:
        for seed in diffs or []:
            hits = [e for e in tamperer.log if e[1] == seed]
            print(f"  {label}: seed {seed} differs; tampered: {hits}")
    ok = all(equal_rounds) and heal_equal and faulty.raised == 0 and not corrupt
    print(f"all equal, all clean:   {ok}")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
