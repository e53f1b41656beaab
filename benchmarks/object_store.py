"""A cached rerun from object storage against the same rerun from a local disk.

The tiny open set spec of ``benchmarks/scaling.py`` (digits, ``small_cnn`` of width 8, 6
epochs, MSP) is run once for N seeds (default 400) on a fresh local cache; every entry is then
copied, byte for byte, into a bucket of an S3-compatible server on 127.0.0.1 (moto's server
mode, started here; ``--endpoint URL`` uses another). Then the same spec is rerun, everything
cached, from each cache in turn (``--repeats`` rounds, alternating): ``oodsim.run`` in this
process with 2 local workers, so both pay the same cluster start. Printed: each rerun's wall
seconds, its milliseconds a seed, and the ratio object storage / local disk (median of the
rounds). Each rerun starts remembering nothing of the bucket, as a new process would. moto
keeps objects in memory on this machine: a real service adds its network's
latency to every request (an entry's record, its listing and its arrays: 3 requests).

    python benchmarks/object_store.py [--seeds 400] [--repeats 3] [--endpoint URL]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import attrs

import oodsim
from oodsim.results import store_counts
from oodsim.store import Store
from oodsim.store.objects import SEEN

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from scaling import TINY  # noqa: E402  (the scaling benchmark's spec, beside this file)

from tests import s3_server  # noqa: E402  (the tests' S3 server helper)


def copy_entries(source: Store, target: Store) -> int:
    """Copy every entry of ``source`` into ``target`` as it is (its files and record)."""
    copied = 0
    for info in source.entries():
        with target.backend.staging(info.kind, info.key) as folder:
            for path in Path(source.place(info.kind, info.key)).iterdir():
                shutil.copy2(path, folder / path.name)
            copied += target.backend.commit(info.kind, info.key, folder)
    return copied


def timed_rerun(spec: oodsim.specs.ExperimentSpec, cache: str | Path) -> float:
    SEEN.clear()  # what a new process remembers of object storage: nothing
    started = time.perf_counter()
    results = oodsim.run(spec, cache=cache, n_workers=2, progress=False)
    seconds = time.perf_counter() - started
    assert store_counts(results)["computed"] == {}, "the rerun computed something"
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--endpoint", help="an S3-compatible endpoint (default: start moto)")
    args = parser.parse_args()
    if args.endpoint:
        os.environ[s3_server.ENDPOINT_ENV] = args.endpoint
    s3_server.prepare()
    endpoint = os.environ[s3_server.ENDPOINT_ENV]
    server = None if s3_server.answers(endpoint) else s3_server.start(endpoint)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            spec_file = Path(tmp) / "tiny.toml"
            spec_file.write_text(TINY.format(n=args.seeds))
            spec = attrs.evolve(oodsim.load(spec_file), name="object-store")
            local = Path(tmp) / "cache"
            started = time.perf_counter()
            oodsim.run(spec, cache=local, n_workers=2, progress=False)
            print(f"first run (local): {args.seeds} seeds in {time.perf_counter() - started:.1f} s")
            url = f"s3://{s3_server.new_bucket(endpoint)}/cache"
            copied = copy_entries(Store(local), Store(url))
            print(f"copied {copied} entries to {url} ({endpoint})")
            times: dict[str, list[float]] = {"local disk": [], "object storage": []}
            for _ in range(args.repeats):
                times["local disk"].append(timed_rerun(spec, local))
                times["object storage"].append(timed_rerun(spec, url))
            for where, seconds in times.items():
                median = statistics.median(seconds)
                rounds = ", ".join(f"{s:.1f}" for s in seconds)
                print(
                    f"rerun from {where:15s} median {median:6.1f} s ({rounds}) = "
                    f"{median / args.seeds * 1000:6.1f} ms/seed"
                )
            ratio = statistics.median(times["object storage"]) / statistics.median(
                times["local disk"]
            )
            print(f"rerun object storage / local disk = {ratio:.2f}")
    finally:
        if server is not None:
            server.kill()


if __name__ == "__main__":
    main()
