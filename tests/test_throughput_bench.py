"""benchmarks/throughput.py: its hand loop runs as a script and scores all five detectors, and
the spec it gives oodsim loads with the same detectors (no timing is asserted)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

from oodsim.specs import load_spec
from tests.conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "throughput.py"


def _bench():
    spec = importlib.util.spec_from_file_location("throughput_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_hand_loop_scores_five_detectors() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--hand-loop-only", "--seeds", "1", "--max-epochs", "2"],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 1
    row = rows[0]
    assert set(row["auroc"]) == {"msp", "energy", "mahalanobis", "odin", "mc_dropout"}
    for name, value in row["auroc"].items():
        assert math.isfinite(value) and 0.0 <= value <= 1.0, (name, value)
    assert 1 <= row["epochs"] <= 2
    sizes = row["sizes"]  # 6 of 10 digit classes: about 60/20/20 of ~1,080 known samples
    assert 600 < sizes["train"] < 700 and 180 < sizes["val"] < 250 < sizes["train"]
    assert abs(sizes["val"] - sizes["test"]) < 10 and 100 < sizes["ood"] < 200


def test_benchmark_spec_matches_the_hand_loop(tmp_path: Path) -> None:
    bench = _bench()
    spec = load_spec(bench.write_spec(tmp_path / "spec.toml", 3, 7, 5))
    assert [d.name for d in spec.detectors] == list(bench.DETECTORS)
    assert spec.metrics == ("auroc",)
    assert (spec.seeds.n, spec.seeds.start, spec.training.max_epochs) == (3, 7, 5)
    training = spec.training
    assert (training.batch_size, training.lr, training.patience) == (
        bench.BATCH_SIZE,
        bench.LR,
        bench.PATIENCE,
    )
    assert (training.momentum, training.weight_decay) == (bench.MOMENTUM, bench.WEIGHT_DECAY)
    assert (spec.model.arch, spec.model.width, spec.model.dropout) == (
        "small_cnn",
        bench.WIDTH,
        bench.DROPOUT,
    )
