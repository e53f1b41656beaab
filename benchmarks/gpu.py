"""Simulations per hour of the study's CIFAR-10 recipe on a GPU: one seed at a time vs packed.

The recipe: ResNet-18 with dropout 0.2 (oodsim's registry), SGD (lr 0.01, momentum 0.9, weight
decay 5e-4, batch 128, cosine schedule, rotation/scale/flip augmentation, validation loss every
epoch: ``oodsim.simulation.training.train``), 10 classes of which 6 are known, samples split
60/20/20, then inference on every subset (``oodsim.models.inference.infer``), as an open set
simulation does. The data are CIFAR-shaped (3x32x32 uint8) noise from a seeded numpy generator.

Each contender is a cluster from ``oodsim.clusters.gpu.cuda_cluster`` with K worker processes per
GPU (K = 1 is one seed at a time per GPU, oodsim's default); every worker trains one seed per
round, all submitted at once through a ``distributed.Client``. A contender trains real seeds
for ``--epochs`` epochs on a pool reduced to about ``--train-size`` training images, and is
timed from submission to the last result (after a warm-up task per worker).

How to read the table:

- ``epochs/s``: measured; training epochs (of the reduced pool, validation included) finished
  per second by all workers together.
- ``s/seed``: measured; median seconds a worker spent training + inferring one seed, while its
  neighbours on the GPU did the same.
- ``sims/h``: extrapolated to the full recipe: CIFAR-10's 60,000 images (train + test, pooled
  as oodsim's loader does), so 21,600 training images per epoch, and ``--full-epochs``
  (default 30: oodsim's ``TrainingSpec.max_epochs``; the paper does not state its epochs, and
  early stopping may end sooner). A seed's full time is its measured training time scaled by
  data size and epochs plus its inference time scaled by data size; ``sims/h`` = workers x
  3600 / that time. Data loading, detectors beyond one forward pass and scoring are not in it.
- ``x one``: ``sims/h`` over the K = 1 row's.
- ``same weights``: whether the seeds this contender shares with K = 1 ended with bit-identical
  weights (state_dict digests); packing must not change any result.

    python benchmarks/gpu.py [--packs 1,2,4,8] [--train-size 10000] [--epochs 2]
    python benchmarks/gpu.py --device cpu --quick      # a smoke run on a CPU-only machine
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import statistics
import time
import warnings
from typing import Any

import attrs
import dask.config
import numpy as np
import torch
from distributed import Client

from oodsim.clusters.cluster import NO_HTTP_ROUTES, private_options
from oodsim.clusters.gpu import cuda_cluster, visible_gpus
from oodsim.engine.work import deterministic_torch
from oodsim.models.architectures import build_model
from oodsim.models.inference import infer
from oodsim.models.tensors import channel_stats
from oodsim.seeds import SeedStreams
from oodsim.simulation.splits import SUBSETS, make_split
from oodsim.simulation.training import train
from oodsim.specs import ModelSpec, SplitSpec, TrainingSpec

FULL_POOL = 60_000  # CIFAR-10 train + test
SPLIT = SplitSpec(n_known=6, fractions=(0.6, 0.2, 0.2))
N_CLASSES = 10
MODEL = ModelSpec(arch="resnet18", dropout=0.2)
TRAIN_SHARE = SPLIT.n_known / N_CLASSES * SPLIT.fractions[0]  # training images per pooled image
DATA_SEED = 2023


def recipe(epochs: int) -> TrainingSpec:
    """The study's SGD recipe for ``epochs`` epochs, never stopped early."""
    return TrainingSpec(
        batch_size=128, lr=0.01, momentum=0.9, weight_decay=5e-4, max_epochs=epochs, patience=epochs
    )


def synthetic_pool(size: int) -> tuple[np.ndarray, np.ndarray]:
    """``size`` CIFAR-shaped uint8 images (N, 32, 32, 3) and balanced labels 0..9."""
    rng = np.random.default_rng(DATA_SEED)
    images = rng.integers(0, 256, (size, 32, 32, 3), dtype=np.uint8)
    return images, rng.permutation(np.arange(size) % N_CLASSES)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _prepare() -> None:
    """What oodsim's workers set before a task: one torch thread, deterministic algorithms."""
    deterministic_torch(1)


def recipe_model(init_seed: int) -> torch.nn.Module:
    """The study's ResNet-18 (dropout 0.2) for CIFAR-shaped images, from oodsim's registry."""
    return build_model(
        MODEL.arch,
        in_channels=3,
        n_classes=SPLIT.n_known,
        image_size=32,
        dropout=MODEL.dropout,
        width=MODEL.width,
        init_seed=init_seed,
    )


def warm_up(device: str, batch: int) -> str:
    """One training step and one inference batch of ``batch`` images (the CUDA context, cuDNN
    and cuBLAS start here, not in the timed part); the name of the device."""
    _prepare()
    model = recipe_model(0).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.zeros(batch, 3, 32, 32, device=device)
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        model.eval()(x)
    _sync(device)
    return torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "CPU"


def simulate(seed: int, pool_size: int, epochs: int, device: str) -> dict[str, Any]:
    """Train and infer one seed in this worker: its times, images, weight digest and any
    nondeterminism warnings torch gave."""
    _prepare()
    images, labels = synthetic_pool(pool_size)
    streams = SeedStreams(seed)
    split = make_split(labels, N_CLASSES, SPLIT, streams)
    known = split.known_labels(labels)
    train_idx, val_idx = split.indices["in_train"], split.indices["in_val"]
    mean, std = channel_stats(images[train_idx])
    model = recipe_model(streams.torch_seed("init"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _sync(device)
        started = time.perf_counter()
        train(
            model,
            images[train_idx],
            known[train_idx],
            images[val_idx],
            known[val_idx],
            mean=mean,
            std=std,
            spec=recipe(epochs),
            hflip=True,
            streams=streams,
            device=device,
        )
        _sync(device)
        fitted = time.perf_counter()
        for subset in SUBSETS:
            if len(index := split.indices[subset]):
                infer(model, images[index], mean=mean, std=std, device=device)
        _sync(device)
        inferred = time.perf_counter()
    digest = hashlib.sha256()
    for name, value in model.state_dict().items():
        digest.update(name.encode())
        digest.update(value.detach().cpu().numpy().tobytes())
    return {
        "seed": seed,
        "fit_s": fitted - started,
        "infer_s": inferred - fitted,
        "train_images": len(train_idx),
        "digest": digest.hexdigest(),
        "warnings": sorted({str(w.message) for w in caught if "determinis" in str(w.message)}),
    }


@attrs.frozen
class Contender:
    """One contender's measurement: K workers per GPU, wall time, each seed's result."""

    per_gpu: int
    workers: int
    wall_s: float
    results: tuple[dict[str, Any], ...]
    device_name: str


def run_contender(per_gpu: int, gpus: list[str], args: argparse.Namespace) -> Contender:
    """Start ``per_gpu`` workers per GPU, warm them up, then time one seed per worker per
    round, each pinned to its worker."""
    n_workers = per_gpu * len(gpus)
    with dask.config.set(NO_HTTP_ROUTES):
        cluster = cuda_cluster(private_options(), n_workers, gpus)
    assert cluster is not None
    with cluster, Client(cluster) as client:
        client.wait_for_workers(n_workers)
        info = client.scheduler_info()["workers"]
        workers = sorted(info, key=lambda address: info[address]["name"])
        batch = 128 if args.device == "cuda" else 2  # a CPU only needs its libraries loaded
        warm = [
            client.submit(warm_up, args.device, batch, workers=[w], pure=False) for w in workers
        ]
        names = client.gather(warm)
        seeds = range(n_workers * args.rounds)
        started = time.perf_counter()
        futures = [
            client.submit(
                simulate,
                seed,
                args.pool,
                args.epochs,
                args.device,
                workers=[workers[seed % n_workers]],
                allow_other_workers=False,
                pure=False,
            )
            for seed in seeds
        ]
        results = client.gather(futures)
        wall = time.perf_counter() - started
    return Contender(per_gpu, n_workers, wall, tuple(results), names[0])


def full_seconds(result: dict[str, Any], args: argparse.Namespace) -> float:
    """One seed's time on the full recipe, extrapolated from its measured times."""
    size = FULL_POOL / args.pool
    return size * (args.full_epochs / args.epochs * result["fit_s"] + result["infer_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None)
    parser.add_argument("--packs", default=None, help="workers per GPU, e.g. 1,2,4,8")
    parser.add_argument("--train-size", type=int, default=10_000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--full-epochs", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=1, help="seeds per worker")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    args = parser.parse_args()
    gpus = visible_gpus()
    args.device = args.device or ("cuda" if gpus else "cpu")
    if args.device == "cuda" and not gpus:
        parser.error("--device cuda: torch sees no GPU")
    if args.device == "cpu":
        gpus = ["0"]  # one pretend GPU: its workers train on the CPU
    if args.quick:
        args.train_size, args.epochs = 16, 1
    default_packs = "1,2,4,8" if args.device == "cuda" else "1,2"
    packs = sorted({1, *map(int, (args.packs or default_packs).split(","))})
    args.pool = round(args.train_size / TRAIN_SHARE)

    contenders = [run_contender(k, gpus, args) for k in packs]
    one = contenders[0]
    reference = {r["seed"]: r["digest"] for r in one.results}
    print(f"device: {one.device_name} x {len(gpus)} ({args.device}), torch {torch.__version__}")
    print(
        f"measured: {one.results[0]['train_images']} training images x {args.epochs} epochs per "
        f"seed, {args.rounds} seed(s) per worker; extrapolated: "
        f"{round(FULL_POOL * TRAIN_SHARE)} x {args.full_epochs} epochs"
    )
    print(
        f"{'K/GPU':>5} {'workers':>7} {'seeds':>5} {'wall s':>7} {'epochs/s':>8} "
        f"{'s/seed':>7} {'sims/h':>8} {'x one':>6}  same weights"
    )
    base = None
    notes = set()
    for c in contenders:
        per_seed = statistics.median(full_seconds(r, args) for r in c.results)
        rate = c.workers * 3600 / per_seed
        base = base or rate
        shared = sorted(set(reference) & {r["seed"] for r in c.results})
        same = all(r["digest"] == reference[r["seed"]] for r in c.results if r["seed"] in shared)
        verdict = "reference" if c is one else f"{'yes' if same else 'NO'} (seeds {shared})"
        measured = statistics.median(r["fit_s"] + r["infer_s"] for r in c.results)
        epochs_per_s = len(c.results) * args.epochs / c.wall_s
        print(
            f"{c.per_gpu:>5} {c.workers:>7} {len(c.results):>5} {c.wall_s:>7.1f} "
            f"{epochs_per_s:>8.2f} {measured:>7.1f} {rate:>8.{1 if rate >= 10 else 3}f} "
            f"{rate / base:>6.2f}  {verdict}"
        )
        notes.update(w for r in c.results for w in r["warnings"])
    for note in sorted(notes):
        print(f"torch warned: {note.splitlines()[0]}")


if __name__ == "__main__":
    main()
