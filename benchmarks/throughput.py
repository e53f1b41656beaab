"""Throughput of oodsim against the single-process loop a researcher would write by hand.

What it measures: N open set simulations on scikit-learn's digits (6 known / 4 unknown classes
drawn per seed, 60/20/20 per-class split, oodsim's ``small_cnn`` trained with the digits recipe
of ``specs/digits.toml``, 5 detectors: MSP, energy, Mahalanobis, ODIN, MC dropout, AUROC of
each), done by

- ``hand loop``: this file's own loop (torch + pytorch-ood + scikit-learn, one torch thread, no
  oodsim code), in one process;
- ``oodsim 1 worker`` / ``oodsim 2 workers``: ``oodsim run SPEC --workers W`` on a fresh cache
  (whatever oodsim does for W: a local Dask cluster, or its in-process executor);
- ``2 hand loops`` (``--hand-pair``): the same seeds split over two hand loops run at once, the
  machine's own two-process speed-up to hold oodsim's against.

Every contender runs as a child process of this script (interpreter start, imports, cluster
start and shutdown included), and the repetitions are interleaved (hand, oodsim 1, oodsim 2,
hand, ...) so that load from other jobs on the machine hits all of them alike. Per run:

- wall: seconds from start to exit;
- CPU: user + system seconds of the child and every descendant it waited for (``os.wait4``),
  or ``polled`` where that is more: oodsim's local workers fork from a server process
  (``oodsim.clusters.forkserver``), which reaps them and is not the child's to reap.
  ``polled``: the CPU seconds of the child and every descendant seen by polling ``/proc``
  (psutil) every 0.25 s, a slight undercount; the share of CPU polled from descendants still
  alive when their parent exited is printed;
- minor page faults (``ru_minflt``, the same processes as CPU);
- others: cores the rest of the machine kept busy meanwhile (``/proc/stat``, hypervisor steal
  included). Above ~0.3 on 2 cores the run competed for CPU: compare walls with care.

How to read it: ``oodsim 1 worker / hand loop`` wall and CPU ratios are oodsim's overhead
(1.0 = none; start-up costs weigh more with few seeds). ``throughput 2 workers / 1 worker`` is
wall(1 worker) / wall(2 workers), at most 2 on 2 cores; ``2 hand loops / 1`` is the same for the
hand loop. The mean AUROCs and epochs trained of both are printed as a check that the hand loop
does the same work (they differ seed by seed: the random streams are not oodsim's).

    python benchmarks/throughput.py [--seeds 10] [--repeats 2] [--start-seed 0]
        [--max-epochs 30] [--hand-pair]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the driver never imports torch: only the hand loop's process does
    import numpy as np
    import torch
    from torch import nn

ROOT = Path(__file__).resolve().parents[1]
DETECTORS = ("msp", "energy", "mahalanobis", "odin", "mc_dropout")
HAND, ONE, TWO, HAND_PAIR = "hand loop", "oodsim 1 worker", "oodsim 2 workers", "2 hand loops"

# The digits recipe (specs/digits.toml) and oodsim's defaults it relies on.
N_KNOWN = 6
FRACTIONS = (0.6, 0.2, 0.2)
WIDTH, DROPOUT = 16, 0.2
BATCH_SIZE, LR, MOMENTUM, WEIGHT_DECAY = 64, 0.05, 0.9, 5e-4  # TrainingSpec defaults: 0.9, 5e-4
MAX_EPOCHS, PATIENCE = 30, 4
ROTATION, SCALE = 10.0, (0.9, 1.1)  # digits: no horizontal flip
INFERENCE_BATCH = 512  # oodsim.models.inference.infer
MODEL_BATCH = 256  # ODIN and MC dropout batch size (oodsim.detectors.odin / mc_dropout)
ODIN_TEMPERATURE, ODIN_EPSILON = 1000.0, 0.0014  # epsilon in normalized-input units
MC_PASSES = 30

# Dask's nanny gives every oodsim worker these; the hand loop gets the same one-thread BLAS.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


# --------------------------------------------------------------------------- the hand loop


def digits() -> tuple[np.ndarray, np.ndarray]:
    """Digits as uint8 images (N, 8, 8) in 0..255 (pixel values 0..16 times 16) and labels."""
    import numpy as np
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return np.clip(bunch.images * 16.0, 0, 255).astype(np.uint8), bunch.target


def open_set_split(labels: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """6 random known classes; each class's samples split 60/20/20 into train/val/test.

    Known train/val/test are the ID subsets, relabelled 0..5; the test part of the unknown
    classes is the OOD test set (their train and val parts are unused, as in oodsim).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    known = np.sort(rng.permutation(10)[:N_KNOWN])
    part = np.empty(len(labels), dtype=np.int8)
    for label in range(10):
        members = rng.permutation(np.flatnonzero(labels == label))
        cuts = np.round(np.cumsum(FRACTIONS)[:2] * len(members)).astype(int)
        for index, chunk in enumerate(np.split(members, cuts)):
            part[chunk] = index
    is_known = np.isin(labels, known)
    relabel = np.full(10, -1)
    relabel[known] = np.arange(N_KNOWN)
    return {
        "train": np.flatnonzero(is_known & (part == 0)),
        "val": np.flatnonzero(is_known & (part == 1)),
        "test": np.flatnonzero(is_known & (part == 2)),
        "ood": np.flatnonzero(~is_known & (part == 2)),
        "relabel": relabel,
    }


def normalized(images: np.ndarray, mean: float, std: float) -> torch.Tensor:
    """Float tensor (N, 1, 8, 8) of uint8 images, standardized with the training statistics."""
    import torch

    return (torch.from_numpy(images).float().div(255.0).unsqueeze(1) - mean) / std


def small_cnn(n_classes: int) -> nn.Module:
    """oodsim's ``small_cnn`` for 8x8 inputs: 4 conv-BN-ReLU blocks (16, 16, 32, 32 channels,
    one max-pool), global average pooling, then dropout and a linear head."""
    from torch import nn

    class SmallCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()

            def block(cin: int, cout: int) -> list[nn.Module]:
                conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
                return [conv, nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

            self.encoder = nn.Sequential(
                *block(1, WIDTH),
                *block(WIDTH, WIDTH),  # no pooling here: images are smaller than 16 pixels
                *block(WIDTH, 2 * WIDTH),
                nn.MaxPool2d(2),
                *block(2 * WIDTH, 2 * WIDTH),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
            )
            self.head = nn.Sequential(nn.Dropout(DROPOUT), nn.Linear(2 * WIDTH, n_classes))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(x))

    return SmallCNN()


def augment(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random rotation (± 10°) and scaling (0.9-1.1) of a normalized batch, background kept."""
    import torch
    import torch.nn.functional as F

    draws = torch.rand(len(x), 2, generator=generator)
    angle = (draws[:, 0] * 2 - 1) * math.radians(ROTATION)
    scale = SCALE[0] + draws[:, 1] * (SCALE[1] - SCALE[0])
    cos, sin, zero = torch.cos(angle) / scale, torch.sin(angle) / scale, torch.zeros(len(x))
    theta = torch.stack([torch.stack([cos, -sin, zero], 1), torch.stack([sin, cos, zero], 1)], 1)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    background = x.amin(dim=(0, 2, 3), keepdim=True)
    return F.grid_sample(x - background, grid, align_corners=False) + background


def mean_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    import torch
    import torch.nn.functional as F

    model.eval()
    with torch.no_grad():
        total = sum(
            F.cross_entropy(
                model(x[i : i + 4 * BATCH_SIZE]), y[i : i + 4 * BATCH_SIZE], reduction="sum"
            ).item()
            for i in range(0, len(x), 4 * BATCH_SIZE)
        )
    return total / len(x)


def train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    x_val: torch.Tensor,
    y_val: torch.Tensor,
    seed: int,
    max_epochs: int,
) -> int:
    """SGD + cosine annealing, early stopping on the validation loss; keeps the best weights.
    Returns the number of epochs trained."""
    import torch
    import torch.nn.functional as F

    order = torch.Generator().manual_seed(seed)
    augmentation = torch.Generator().manual_seed(seed + 1)
    optimizer = torch.optim.SGD(
        model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY
    )
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max_epochs)
    best_loss, best_epoch = math.inf, 0
    best_state = {k: v.clone() for k, v in model.state_dict().items()}
    for epoch in range(max_epochs):
        model.train()
        for index in torch.randperm(len(x), generator=order).split(BATCH_SIZE):
            loss = F.cross_entropy(model(augment(x[index], augmentation)), y[index])
            if not torch.isfinite(loss):
                raise FloatingPointError(f"training loss became {loss.item()}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        schedule.step()
        val_loss = mean_loss(model, x_val, y_val)
        if val_loss < best_loss:
            best_loss, best_epoch = val_loss, epoch
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
        elif epoch - best_epoch >= PATIENCE:
            break
    model.load_state_dict(best_state)
    model.eval()
    return epoch + 1


def infer(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits and penultimate features in batches of 512, eval mode."""
    import torch

    with torch.no_grad():
        features = torch.cat([model.encoder(b) for b in x.split(INFERENCE_BATCH)])
        return model.head(features), features


def detector_scores(
    model: nn.Module, x: dict[str, torch.Tensor], y_train: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Outlier scores (higher = more OOD) of the 5 detectors on ID test followed by OOD test."""
    import torch
    from pytorch_ood.detector import MCD, ODIN, EnergyBased, Mahalanobis, MaxSoftmax

    outputs = {name: infer(model, x[name]) for name in ("train", "test", "ood")}
    logits = torch.cat([outputs["test"][0], outputs["ood"][0]])
    features = torch.cat([outputs["test"][1], outputs["ood"][1]])
    mahalanobis = Mahalanobis(None).fit_features(outputs["train"][1], y_train)
    odin = ODIN(model, eps=ODIN_EPSILON, temperature=ODIN_TEMPERATURE)
    # MC dropout as oodsim does it: the encoder once per batch, the dropout head 30 times
    mcd = MCD(model.head, samples=MC_PASSES, mode="mean")

    def per_batch(score: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        return torch.cat([score(b) for name in ("test", "ood") for b in x[name].split(MODEL_BATCH)])

    def mc_dropout(batch: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return mcd.predict(model.encoder(batch))

    return {
        "msp": MaxSoftmax(None).predict_logits(logits),
        "energy": EnergyBased(None).predict_logits(logits),
        "mahalanobis": mahalanobis.predict_features(features),
        "odin": per_batch(odin.predict),
        "mc_dropout": per_batch(mc_dropout),
    }


def simulate(images: np.ndarray, labels: np.ndarray, seed: int, max_epochs: int) -> dict[str, Any]:
    """One open set simulation: split, train, score, AUROC per detector."""
    import numpy as np
    import torch
    from sklearn.metrics import roc_auc_score

    split = open_set_split(labels, seed)
    scaled = images[split["train"]] / 255.0
    mean, std = float(scaled.mean()), max(float(scaled.std()), 1e-3)
    x = {
        name: normalized(images[split[name]], mean, std) for name in ("train", "val", "test", "ood")
    }
    y = {name: torch.from_numpy(split["relabel"][labels[split[name]]]) for name in ("train", "val")}
    torch.manual_seed(seed)  # weight initialization and training-time dropout
    model = small_cnn(N_KNOWN)
    epochs = train(model, x["train"], y["train"], x["val"], y["val"], seed, max_epochs)
    is_ood = np.r_[np.zeros(len(x["test"]), bool), np.ones(len(x["ood"]), bool)]
    scores = detector_scores(model, x, y["train"])
    auroc = {
        name: float(roc_auc_score(is_ood, score.detach().double().numpy()))
        for name, score in scores.items()
    }
    sizes = {name: len(x[name]) for name in x}
    return {"seed": seed, "epochs": epochs, "sizes": sizes, "auroc": auroc}


def hand_loop(seeds: range, max_epochs: int) -> None:
    """Run the simulations one after another; one JSON line per seed on stdout."""
    import torch

    torch.set_num_threads(1)  # one oodsim worker is one torch thread
    images, labels = digits()
    for seed in seeds:
        started = time.perf_counter()
        result = simulate(images, labels, seed, max_epochs)
        result["seconds"] = time.perf_counter() - started
        print(json.dumps(result), flush=True)


# --------------------------------------------------------------------------- measuring


@dataclass
class Run:
    """One measured run of one or more child processes started together."""

    wall: float
    cpu: float
    minflt: int
    polled_cpu: float
    unreaped_cpu: float  # polled CPU of descendants still alive when their parent exited
    others: float  # cores the rest of the machine kept busy meanwhile (incl. hypervisor steal)


@dataclass
class _Poller:
    """Polls the CPU seconds of ``pid`` and every descendant until stopped (psutil); ``seen``
    keeps the last value per process (pid and start time)."""

    pid: int
    interval: float = 0.25
    seen: dict[tuple[int, float], float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        import psutil

        while not self.stop.is_set():
            try:
                root = psutil.Process(self.pid)
                processes = [root, *root.children(recursive=True)]
            except psutil.Error:
                processes = []
            for process in processes:
                try:
                    with process.oneshot():
                        times, created = process.cpu_times(), process.create_time()
                except psutil.Error:
                    continue
                self.seen[(process.pid, created)] = times.user + times.system
            self.stop.wait(self.interval)

    def alive_cpu(self) -> float:
        """CPU seconds seen of the processes still running: the child did not reap them, so
        ``wait4`` does not count them."""
        import psutil

        total = 0.0
        for (pid, created), cpu in self.seen.items():
            try:
                process = psutil.Process(pid)
                if process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE:
                    total += cpu
            except psutil.Error:
                pass
        return total


def machine_busy() -> float:
    """CPU seconds the machine has been busy since boot, all processes and hypervisor steal
    included (``/proc/stat``); NaN where there is none."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    except OSError:
        return math.nan
    user, nice, system, _, _, irq, softirq, steal = map(int, fields)
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def measure(commands: list[tuple[list[str], Path]], env: dict[str, str] | None = None) -> Run:
    """Start every command (stdout to its file), wait for all; the wall time until the last
    exits and the rusage of the children and their reaped descendants (``os.wait4``)."""
    busy, started = machine_busy(), time.perf_counter()
    children, pollers = [], []
    for command, stdout in commands:
        with open(stdout, "w") as out:
            children.append(subprocess.Popen(command, cwd=ROOT, stdout=out, env=env))
        pollers.append(_Poller(children[-1].pid))
        threading.Thread(target=pollers[-1].run, daemon=True).start()
    cpu, minflt = 0.0, 0
    for child, (command, _) in zip(children, commands, strict=True):
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            raise SystemExit(f"{' '.join(command)} exited with {child.returncode}")
        cpu += usage.ru_utime + usage.ru_stime
        minflt += usage.ru_minflt
    wall = time.perf_counter() - started
    machine = machine_busy() - busy
    for poller in pollers:
        poller.stop.set()
    polled = sum(cpu for poller in pollers for cpu in poller.seen.values())
    unreaped = sum(poller.alive_cpu() for poller in pollers)
    # a fork server and the workers forked from it are not the child's to reap: where that
    # leaves wait4 short, the polled CPU counts them
    cpu = max(cpu + unreaped, polled)
    return Run(wall, cpu, minflt, polled, unreaped, max(machine - cpu, 0.0) / wall)


def write_spec(path: Path, n: int, start: int, max_epochs: int) -> Path:
    """specs/digits.toml with the 5 detectors, AUROC only and the requested seeds/epochs."""
    lines = []
    skipping = False
    for line in (ROOT / "specs" / "digits.toml").read_text().splitlines():
        if skipping:
            skipping = line.strip() != "]"
            continue
        if line.startswith("detectors = ["):
            skipping = not line.rstrip().endswith("]")
            line = "detectors = " + json.dumps(list(DETECTORS))
        elif line.startswith("metrics = "):
            line = 'metrics = ["auroc"]'
        elif line.startswith("max_epochs = "):
            line = f"max_epochs = {max_epochs}"
        elif line.startswith("n = "):
            line = f"n = {n}\nstart = {start}"
        lines.append(line)
    path.write_text("\n".join(lines) + "\n")
    return path


def oodsim_command(spec: Path, workers: int, folder: Path) -> list[str]:
    """``oodsim run`` on a fresh cache and output inside ``folder``."""
    return [
        sys.executable,
        "-m",
        "oodsim.cli",
        "run",
        str(spec),
        "--workers",
        str(workers),
        "--cache",
        str(folder / "cache"),
        "--out",
        str(folder / "results.zarr"),
        "--quiet",
    ]


def hand_command(start: int, n: int, max_epochs: int) -> list[str]:
    """This script's hand loop for seeds ``start .. start+n-1``, in a new interpreter."""
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--hand-loop-only",
        "--seeds",
        str(n),
        "--start-seed",
        str(start),
        "--max-epochs",
        str(max_epochs),
    ]


# --------------------------------------------------------------------------- reporting


def hand_rows(stdout: Path) -> list[dict[str, Any]]:
    """The per-seed JSON lines the hand loop printed."""
    return [json.loads(line) for line in stdout.read_text().splitlines() if line.startswith("{")]


def oodsim_aurocs(results: Path) -> dict[str, list[float]]:
    """AUROC per detector over the seeds of an oodsim result."""
    import oodsim  # only to read the result for the sanity check, never in the hand loop

    data = oodsim.open_results(results)
    score = data.score.sel({"metric": "auroc"})
    return {
        name: [float(v) for v in score.sel({"method": name}).values.ravel() if math.isfinite(v)]
        for name in DETECTORS
    }


def oodsim_epochs(spec_path: Path, cache: Path) -> list[int]:
    """Epochs each seed's model trained, from the training logs in oodsim's checkpoints."""
    import oodsim
    from oodsim.protocols.open_set import CHECKPOINT, checkpoint_key
    from oodsim.seeds import SeedStreams
    from oodsim.store import Store

    spec, store = oodsim.load(spec_path), Store(cache)
    epochs = []
    for seed in spec.seeds.all():
        key = checkpoint_key(spec, SeedStreams(seed, dict(spec.seeds.pinned)))
        meta = store.meta(CHECKPOINT, key)
        if meta is not None:
            epochs.append(int(meta["training"]["epochs"]))
    return epochs


def medians(runs: list[Run]) -> dict[str, float]:
    return {name: statistics.median(getattr(r, name) for r in runs) for name in Run.__annotations__}


def print_table(runs: dict[str, list[Run]], seeds: int) -> None:
    """Medians per contender, then the ratios."""
    print(
        f"\n{'contender':18} {'wall s':>8} {'CPU s':>8} {'polled':>8} {'sim/min':>8} "
        f"{'minor faults':>13} {'others':>7}"
    )
    median = {name: medians(got) for name, got in runs.items()}
    for name, m in median.items():
        print(
            f"{name:18} {m['wall']:8.1f} {m['cpu']:8.1f} {m['polled_cpu']:8.1f} "
            f"{seeds / m['wall'] * 60:8.1f} {m['minflt']:13,.0f} {m['others']:7.2f}"
        )
    wall = {name: m["wall"] for name, m in median.items()}
    cpu = {name: m["cpu"] for name, m in median.items()}
    print(f"\noodsim 1 worker / hand loop, wall:   {wall[ONE] / wall[HAND]:.2f}")
    print(f"oodsim 1 worker / hand loop, CPU:    {cpu[ONE] / cpu[HAND]:.2f}")
    print(f"oodsim 2 workers / hand loop, CPU:   {cpu[TWO] / cpu[HAND]:.2f}")
    print(f"throughput 2 workers / 1 worker:     {wall[ONE] / wall[TWO]:.2f}")
    if HAND_PAIR in wall:
        print(f"throughput 2 hand loops / 1:         {wall[HAND] / wall[HAND_PAIR]:.2f}")
        print(f"2 hand loops / 1 hand loop, CPU:     {cpu[HAND_PAIR] / cpu[HAND]:.2f}")
    print(
        "(others: cores kept busy by the rest of the machine during the run, hypervisor steal "
        "included; 2 cores in all)"
    )
    unreaped = {name: max(r.unreaped_cpu / r.cpu for r in got) for name, got in runs.items()}
    if max(unreaped.values()) > 0.01:
        shares = ", ".join(f"{name} {share:.1%}" for name, share in unreaped.items())
        print(f"(share of CPU polled from descendants that outlived their parent: {shares})")


def print_check(rows: list[dict[str, Any]], spec: Path, folder: Path, wall: float) -> None:
    """Same problem, same work: mean AUROCs and epochs of the hand loop and oodsim (last
    repeat, 1 worker), and the hand loop's start-up (imports, data) outside its simulations."""
    simulating = sum(row["seconds"] for row in rows)
    print(
        f"\nhand loop: {simulating:.1f} s in simulations ({simulating / len(rows):.2f} s each), "
        f"{wall - simulating:.1f} s start-up (interpreter, imports, data)"
    )
    try:
        ours = oodsim_aurocs(folder / "results.zarr")
        epochs = oodsim_epochs(spec, folder / "cache")
    except Exception as error:  # the check is informative only (oodsim internals may move)
        print(f"(could not read oodsim's results: {type(error).__name__}: {error})")
        return
    hand = {name: [row["auroc"][name] for row in rows] for name in DETECTORS}
    hand["epochs trained"] = [row["epochs"] for row in rows]
    ours["epochs trained"] = epochs

    def cell(values: list[float]) -> str:
        return f"{statistics.fmean(values):.3f} (n={len(values)})" if values else "-"

    print(f"{'mean':17} {'hand loop':>14} {'oodsim':>14}")
    for name in hand:
        label = name if name.startswith("epochs") else f"AUROC {name}"
        print(f"{label:17} {cell(hand[name]):>14} {cell(ours[name]):>14}")


def benchmark(args: argparse.Namespace) -> None:
    """Interleaved repetitions of every contender, then the table and the sanity check."""
    names = [HAND, ONE, TWO] + ([HAND_PAIR] if args.hand_pair else [])
    runs: dict[str, list[Run]] = {name: [] for name in names}
    one_thread = {**os.environ, **ONE_THREAD}
    first_half = (args.seeds + 1) // 2
    with tempfile.TemporaryDirectory(prefix="oodsim-throughput-") as tmp:
        spec = write_spec(Path(tmp) / "spec.toml", args.seeds, args.start_seed, args.max_epochs)
        for repeat in range(args.repeats):
            folder = Path(tmp) / f"repeat-{repeat}"
            for name in names:
                (folder / name.replace(" ", "-")).mkdir(parents=True)
            hand_out = folder / "hand-loop" / "stdout.jsonl"
            command = hand_command(args.start_seed, args.seeds, args.max_epochs)
            runs[HAND].append(measure([(command, hand_out)], one_thread))
            for workers, name in ((1, ONE), (2, TWO)):
                work = folder / name.replace(" ", "-")
                runs[name].append(measure([(oodsim_command(spec, workers, work), work / "out")]))
            if args.hand_pair:  # the same seeds in two hand loops at once: the machine's 2/1
                halves = [
                    (args.start_seed, first_half),
                    (args.start_seed + first_half, args.seeds - first_half),
                ]
                pair = [
                    (hand_command(start, n, args.max_epochs), folder / "2-hand-loops" / f"{i}")
                    for i, (start, n) in enumerate(halves)
                    if n > 0
                ]
                runs[HAND_PAIR].append(measure(pair, one_thread))
            for name in names:
                run = runs[name][-1]
                print(
                    f"repeat {repeat + 1}/{args.repeats} {name:18} wall {run.wall:7.1f} s  "
                    f"CPU {run.cpu:7.1f} s  polled {run.polled_cpu:7.1f} s  "
                    f"minor faults {run.minflt:,}  others {run.others:.2f} cores",
                    flush=True,
                )
        last = args.start_seed + args.seeds - 1
        print(
            f"\n{args.seeds} simulations (seeds {args.start_seed}..{last}), "
            f"{args.repeats} repeat(s), medians:"
        )
        print_table(runs, args.seeds)
        print_check(hand_rows(hand_out), spec, folder / "oodsim-1-worker", runs[HAND][-1].wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="simulations per run")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repetitions")
    parser.add_argument("--start-seed", type=int, default=0)
    parser.add_argument(
        "--max-epochs", type=int, default=MAX_EPOCHS, help="training epochs cap (both contenders)"
    )
    parser.add_argument(
        "--hand-pair",
        action="store_true",
        help="also run the seeds split over two hand loops at once (the machine's own 2/1)",
    )
    parser.add_argument(
        "--hand-loop-only", action="store_true", help="run the hand loop here, print JSON lines"
    )
    args = parser.parse_args()
    if args.hand_loop_only:
        hand_loop(range(args.start_seed, args.start_seed + args.seeds), args.max_epochs)
    else:
        benchmark(args)


if __name__ == "__main__":
    main()
