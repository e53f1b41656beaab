"""What writing to the store costs a digits simulation, and how many files it leaves.

Runs ``specs/digits.toml`` (all its detectors) for ``--seeds`` seeds in this process (after a
one-seed warm-up run, so imports and data loading are not counted), then writes every store
entry of those seeds again with ``Store.put`` into a fresh store, timing each put, and once
more with the peer a researcher would write by hand: one ``np.savez`` per entry plus an
``fsync``. Prints per seed: simulation time, put time (and its share of the simulation), the
peer's time, and files per entry in the store.

    python benchmarks/store_put.py [--seeds 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import attrs
import numpy as np

import oodsim
from oodsim.protocols import load
from oodsim.protocols.open_set import entries
from oodsim.store import META_DIGEST, Store

ROOT = Path(__file__).resolve().parents[1]
#: What ``Store.put`` records itself: not passed back to it as the entry's own metadata.
STORE_FIELDS = ("created", "write_seconds", "shapes", "kind", "key", "files", "sizes", META_DIGEST)


def savez_fsync(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """The hand-written peer: one uncompressed .npz, flushed to disk."""
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)
        handle.flush()
        os.fsync(handle.fileno())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    base = load(ROOT / "specs" / "digits.toml")
    with tempfile.TemporaryDirectory() as tmp:
        cache, copy, peer = Path(tmp, "cache"), Store(Path(tmp, "copy")), Path(tmp, "peer")
        peer.mkdir()
        warm = attrs.evolve(base, seeds=attrs.evolve(base.seeds, n=1, start=1000))
        oodsim.run(warm, n_workers=1, cache=cache, progress=False)
        spec = attrs.evolve(base, seeds=attrs.evolve(base.seeds, n=args.seeds, start=0))
        started = time.perf_counter()
        oodsim.run(spec, n_workers=1, cache=cache, progress=False)
        simulation = (time.perf_counter() - started) / args.seeds
        source = Store(cache)
        put = savez = 0.0
        n_entries = 0
        for seed in spec.seeds.all():
            for kind, key in dict.fromkeys(map(tuple, entries(spec, seed))):
                entry = source.get(kind, key)
                assert entry is not None, (kind, key)
                arrays = dict(entry.arrays)
                meta = {k: v for k, v in entry.meta.items() if k not in STORE_FIELDS}
                started = time.perf_counter()
                copy.put(kind, key, arrays, meta)
                put += time.perf_counter() - started
                started = time.perf_counter()
                savez_fsync(peer / f"{n_entries}.npz", arrays)
                savez += time.perf_counter() - started
                n_entries += 1
        files = sum(1 for p in copy.root.rglob("*") if p.is_file())
        per_seed = n_entries / args.seeds
    print(f"{args.seeds} digits simulations ({len(spec.detectors)} detectors), per seed:")
    print(f"  simulation (in-process, warm)   {simulation * 1000:8.1f} ms")
    print(f"  Store.put of its {per_seed:.0f} entries     {put / args.seeds * 1000:8.1f} ms")
    print(f"  np.savez + fsync, same arrays   {savez / args.seeds * 1000:8.1f} ms")
    print(f"put / simulation:                 {put / args.seeds / simulation:8.3f}")
    print(f"put / np.savez + fsync:           {put / savez:8.2f}")
    print(f"files per store entry:            {files / n_entries:8.2f}  ({files} files)")


if __name__ == "__main__":
    main()
