"""Determinism: bit-identical stored arrays across runs and worker counts; keys stable across
processes, hash seeds and installs; a version bump invalidates exactly what depends on it.

Spec keys across processes and ``PYTHONHASHSEED`` values are covered in tests/test_keys.py
(``test_key_identical_across_processes_and_hash_seeds``); here the artifact keys of a plan are.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import attrs
import numpy as np
import pytest

import oodsim
from oodsim.detectors import _registry
from oodsim.engine.work import run_seed
from oodsim.models import registry as arch_registry
from oodsim.models import versions
from oodsim.protocols.open_set import (
    CHECKPOINT,
    KAPPA,
    OOD_OUTPUTS,
    OUTPUTS,
    entries,
    kappa_key,
    outputs_key,
)
from oodsim.results import store_counts
from oodsim.seeds import SeedStreams
from oodsim.specs import DatasetSpec, DetectorSpec, ExperimentSpec
from oodsim.store import Store
from tests.conftest import ROOT, small_digits


def test_same_seed_gives_bit_identical_stored_arrays_across_runs_and_worker_counts(
    cluster_address: str, tmp_path: Path
) -> None:
    spec = small_digits(2)
    caches = {
        "2 workers": tmp_path / "a",
        "2 workers, again": tmp_path / "b",
        "1 worker, in-process": tmp_path / "c",
    }
    runs = [
        oodsim.run(spec, address=cluster_address, cache=caches["2 workers"], progress=False),
        oodsim.run(spec, address=cluster_address, cache=caches["2 workers, again"], progress=False),
        oodsim.run(spec, n_workers=1, cache=caches["1 worker, in-process"], progress=False),
    ]
    for results in runs:
        assert store_counts(results)["computed"] == {CHECKPOINT: 2, OUTPUTS: 2}
    stores = {name: Store(path) for name, path in caches.items()}
    reference = stores.pop("2 workers")
    logits = []
    for seed in spec.seeds.all():
        for kind, key in entries(spec, seed):
            expected = reference.get(kind, key)
            assert expected is not None
            for name, store in stores.items():
                entry = store.get(kind, key)
                assert entry is not None, (name, kind)
                assert entry.meta["files"] == expected.meta["files"], (name, kind)  # same bytes
                for array, value in expected.arrays.items():
                    other = entry.arrays[array]
                    assert other.dtype == value.dtype and other.shape == value.shape
                    assert other.tobytes() == value.tobytes(), (name, kind, array)
            if kind == OUTPUTS:
                logits.append(expected.arrays["in_test.logits"])
    assert not np.array_equal(logits[0][:10], logits[1][:10])  # seeds differ: not a constant


DETERMINISTIC_SCRIPT = """
import sys, torch
from oodsim.engine.work import deterministic_torch
deterministic_torch(1)
print(torch.are_deterministic_algorithms_enabled(), torch.get_num_threads(),
      "torch._inductor" in sys.modules, "torch._dynamo" in sys.modules)
"""


def test_a_task_sets_deterministic_torch_without_loading_the_compiler_stack() -> None:
    """torch.use_deterministic_algorithms imports torch._inductor (1.5 s per worker); the
    engine sets torch's own flag instead while the compiler is not loaded."""
    out = subprocess.run(
        [sys.executable, "-c", DETERMINISTIC_SCRIPT], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["True", "1", "False", "False"]


KEYS_SCRIPT = """
import json, oodsim, sys
from oodsim.protocols.open_set import entries
sys.path.insert(0, {root!r})
from tests.conftest import small_digits
import attrs
spec = attrs.evolve(small_digits(1), detectors=("msp", "odin"), ood=("held_out", "uniform_noise"))
print(json.dumps({{"file": oodsim.__file__, "plan": [entries(spec, s) for s in (0, 7)]}}))
"""


def _plan_in_subprocess(env: dict[str, str]) -> tuple[str, list]:
    code = KEYS_SCRIPT.format(root=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    ).stdout
    data = json.loads(out.strip().splitlines()[-1])
    return data["file"], data["plan"]


def test_artifact_keys_stable_across_processes_hash_seeds_and_installs(tmp_path: Path) -> None:
    spec = attrs.evolve(
        small_digits(1), detectors=("msp", "odin"), ood=("held_out", "uniform_noise")
    )
    here = [[list(entry) for entry in entries(spec, s)] for s in (0, 7)]
    assert {kind for kind, _ in here[0]} == {CHECKPOINT, OUTPUTS, OOD_OUTPUTS, KAPPA}
    for hash_seed in ("0", "4242"):
        _, keys = _plan_in_subprocess({"PYTHONHASHSEED": hash_seed})
        assert keys == here
    # "reinstall": the package imported from a copy somewhere else gives the same keys
    site = tmp_path / "elsewhere"
    shutil.copytree(ROOT / "oodsim", site / "oodsim", ignore=shutil.ignore_patterns("__pycache__"))
    file, keys = _plan_in_subprocess({"PYTHONPATH": str(site), "PYTHONHASHSEED": "random"})
    assert file.startswith(str(site))
    assert keys == here


def _keys_by_kind(spec: ExperimentSpec, seed: int = 0) -> dict[str, set[str]]:
    keys: dict[str, set[str]] = defaultdict(set)
    for kind, key in entries(spec, seed):
        keys[kind].add(key)
    return dict(keys)


SPEC = attrs.evolve(
    small_digits(1), detectors=("msp", "odin", "mc_dropout"), ood=("held_out", "uniform_noise")
)


def _changed(before: dict[str, set[str]], after: dict[str, set[str]]) -> set[str]:
    assert before.keys() == after.keys()
    return {kind for kind in before if before[kind] != after[kind]}


@pytest.mark.parametrize(
    ("bump", "invalidated"),
    [
        (lambda m: m.setattr(versions, "INFERENCE", "2"), {OUTPUTS, OOD_OUTPUTS, KAPPA}),
        (lambda m: m.setattr(versions, "TRAINING", "2"), {CHECKPOINT, OUTPUTS, OOD_OUTPUTS, KAPPA}),
        (
            lambda m: m.setitem(
                arch_registry.BUILTINS,
                "small_cnn",
                attrs.evolve(arch_registry.BUILTINS["small_cnn"], version="2"),
            ),
            {CHECKPOINT, OUTPUTS, OOD_OUTPUTS, KAPPA},
        ),
        (
            lambda m: m.setattr(DatasetSpec, "VERSION", "2"),
            {CHECKPOINT, OUTPUTS, OOD_OUTPUTS, KAPPA},
        ),
        (
            lambda m: m.setitem(
                _registry.BUILTINS,
                "odin",
                attrs.evolve(_registry.BUILTINS["odin"], version="bumped"),
            ),
            {KAPPA},
        ),
    ],
    ids=["inference", "training", "architecture", "dataset-spec", "detector"],
)
def test_a_version_bump_changes_exactly_the_dependent_keys(
    monkeypatch: pytest.MonkeyPatch, bump, invalidated: set[str]
) -> None:
    before = _keys_by_kind(SPEC)
    bump(monkeypatch)
    assert _changed(before, _keys_by_kind(SPEC)) == invalidated


def test_a_detector_version_bump_changes_only_that_detectors_kappa(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    streams = SeedStreams(0, {})
    source = outputs_key(entries(SPEC, 0)[0][1])
    odin, mc_dropout = SPEC.detectors[1], SPEC.detectors[2]
    before = {d.name: kappa_key(source, "in_test", d, streams) for d in (odin, mc_dropout)}
    monkeypatch.setitem(
        _registry.BUILTINS, "odin", attrs.evolve(_registry.BUILTINS["odin"], version="bumped")
    )
    after = {d.name: kappa_key(source, "in_test", d, streams) for d in (odin, mc_dropout)}
    assert after["odin"] != before["odin"] and after["mc_dropout"] == before["mc_dropout"]


def test_a_version_bump_recomputes_exactly_the_dependent_artifacts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """In the store: after a bump, one simulation loads what still holds and recomputes the
    rest (run in this process so the bumped version is the one the work sees)."""
    cheap_mc = DetectorSpec(name="mc_dropout", params={"n_passes": 3})
    spec = attrs.evolve(small_digits(1), detectors=("msp", cheap_mc))
    cache = str(tmp_path / "cache")

    def computed() -> dict[str, int]:
        outcome = run_seed(spec, 0, cache, torch_threads=None)
        assert not outcome.failed, outcome.failure
        return store_counts_of(outcome.events)["computed"]

    assert computed() == {CHECKPOINT: 1, OUTPUTS: 1, KAPPA: 2}
    assert computed() == {}
    detector = _registry.BUILTINS["mc_dropout"]
    monkeypatch.setitem(_registry.BUILTINS, "mc_dropout", attrs.evolve(detector, version="bumped"))
    assert computed() == {KAPPA: 2}  # on the ID test set and the held-out OOD set
    monkeypatch.setattr(versions, "INFERENCE", "2")
    assert computed() == {OUTPUTS: 1, KAPPA: 2}  # the checkpoint still holds


def store_counts_of(events: tuple[tuple[str, str, str], ...]) -> dict[str, dict[str, int]]:
    from oodsim.store import summarize_events

    return summarize_events(list(events))
