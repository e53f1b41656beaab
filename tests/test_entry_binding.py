"""An entry is valid only if its record derives its own key: every record names its kind, its
key and the inputs the key is the sha256 of, and reading an entry, ``oodsim cache verify`` and
``oodsim cache migrate`` recompute the key from those inputs. An entry whose record lacks them
(an older layout, or edited) or derives another key is refused and computed again. See
docs/reliability.md, "Cache healing".

The probes tamper with a copy of one clean cache of ``small_digits(2)``: seed 1's outputs
entry copied into seed 0's folder (or planted under a legacy kind), its record's ``key`` and
``kind`` removed and resealed. Runs must then give the clean run's scores, never seed 1's as
seed 0's.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

import oodsim
from oodsim.artifacts.outputs import migrate_outputs
from oodsim.cli import main as cli_main
from oodsim.keys import SCHEMA_VERSION, Key, derived_key, digest
from oodsim.protocols.open_set import OUTPUTS, entries
from oodsim.results import store_counts
from oodsim.store import META_DIGEST, CorruptEntryWarning, Store
from oodsim.store.digests import file_checksums, file_sizes, meta_digest
from tests.conftest import CLEAN_SEEDS, small_digits

N_SEEDS = CLEAN_SEEDS  # the shared clean cache's (conftest.clean)


def outputs_key(seed: int) -> str:
    return dict(entries(small_digits(N_SEEDS), seed))[OUTPUTS]


def rewrite(folder: Path, **changes: Any) -> None:
    """Change fields of an entry's record (a value of None removes the field) and reseal it
    (checksums, sizes, its own digest): what a writer who covers the traces does."""
    path = folder / "meta.json"
    meta = json.loads(path.read_text())
    for field, value in changes.items():
        if value is None:
            meta.pop(field, None)
        else:
            meta[field] = value
    meta["files"], meta["sizes"] = file_checksums(folder), file_sizes(folder)
    meta[META_DIGEST] = meta_digest(meta)
    path.write_text(json.dumps(meta, sort_keys=True))


def plant_seed_1_as_seed_0(cache: Path, kind: str = OUTPUTS) -> Path:
    """The probe: seed 1's outputs entry copied to where seed 0's belongs (under ``kind``),
    seed 0's own removed, the record's ``key`` and ``kind`` removed and the record resealed."""
    store = Store(cache)
    target = store.place(kind, outputs_key(0))
    shutil.rmtree(store.place(OUTPUTS, outputs_key(0)))
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(store.place(OUTPUTS, outputs_key(1)), target)
    rewrite(target, key=None, kind=None)
    return target


def test_verify_reports_another_seeds_entry_whose_record_names_no_key(
    copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The probe: `oodsim cache verify` said "0 corrupt entries" over seed 1's outputs in seed
    0's folder, its record's key and kind removed and resealed."""
    folder = plant_seed_1_as_seed_0(copy)
    problems = Store(copy).verify()
    assert [info.key for info, _ in problems] == [folder.name], problems
    assert "names no kind" in problems[0][1]
    capsys.readouterr()
    assert cli_main(["cache", "verify", "--cache", str(copy)]) == 1
    assert "1 corrupt entries" in capsys.readouterr().out
    assert cli_main(["cache", "verify", "--repair", "--cache", str(copy)]) == 0
    assert not folder.exists() and Store(copy).verify() == []


def test_a_run_recomputes_another_seeds_entry_instead_of_scoring_it(
    cluster_address: str, copy: Path, clean: tuple[Path, Any]
) -> None:
    """The probe: a run read seed 1's outputs in seed 0's folder (record without key and kind,
    resealed) and reported seed 1's scores as seed 0's."""
    plant_seed_1_as_seed_0(copy)
    with pytest.warns(CorruptEntryWarning, match="names no kind"):
        result = oodsim.run(small_digits(N_SEEDS), address=cluster_address, cache=copy)
    xr.testing.assert_identical(clean[1].score, result.score)
    assert store_counts(result)["computed"] == {OUTPUTS: 1}
    assert Store(copy).verify() == []


def test_migrate_leaves_a_legacy_entry_that_does_not_derive_its_key_and_runs_recompute(
    cluster_address: str, copy: Path, clean: tuple[Path, Any]
) -> None:
    """The probe: `oodsim cache migrate` moved a legacy entry holding seed 1's outputs (its
    record without key and kind) to seed 0's key under ``outputs``, and runs scored it."""
    planted = plant_seed_1_as_seed_0(copy, kind="severity_outputs")
    report = migrate_outputs(Store(copy))["severity_outputs"]
    assert (report.moved, [key for key, _ in report.left]) == (0, [planted.name])
    assert "names no kind" in report.left[0][1]
    assert not Store(copy).place(OUTPUTS, outputs_key(0)).exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CorruptEntryWarning)  # nothing of it is read
        result = oodsim.run(small_digits(N_SEEDS), address=cluster_address, cache=copy)
    xr.testing.assert_identical(clean[1].score, result.score)
    assert store_counts(result)["computed"] == {OUTPUTS: 1}


def test_migrate_never_trusts_a_legacy_record_without_key_inputs(tmp_path: Path) -> None:
    """An entry an older oodsim wrote names its kind and key but not the inputs of its key:
    it is left in place and named, and reading it computes it again."""
    store = Store(tmp_path / "cache")
    key = digest("test_outputs", 1, {"model": "m"})
    for kind in ("severity_outputs", OUTPUTS):
        rewrite(store.put(kind, key, {"logits": np.zeros((4, 3))}), key_inputs=None)
    report = migrate_outputs(store)["severity_outputs"]
    assert (report.moved, [k for k, _ in report.left]) == (0, [key])
    assert "names no inputs of its key" in report.left[0][1]
    with pytest.warns(CorruptEntryWarning, match="names no inputs of its key"):
        assert store.get(OUTPUTS, key) is None


def test_an_entry_whose_record_names_another_key_is_refused_and_recomputed(
    tmp_path: Path,
) -> None:
    """A record that names its folder's key but another key's inputs (resealed): ``verify``
    reports it, reading it moves it aside, and it is computed again. (A record whose ``key``
    names another entry was refused before.)"""
    store = Store(tmp_path / "cache")
    key, other = digest("test_outputs", 1, {"seed": 0}), digest("test_outputs", 1, {"seed": 1})
    folder = store.put(OUTPUTS, key, {"logits": np.zeros((4, 3))})
    rewrite(folder, key_inputs=other.inputs)
    reason = f"key inputs derive another key ('{other[:12]}')"
    assert reason in store.verify()[0][1]
    with pytest.warns(CorruptEntryWarning, match=re.escape(reason)):
        assert store.get(OUTPUTS, key) is None
    assert not folder.exists()
    store.ensure(OUTPUTS, key, lambda: store.put(OUTPUTS, key, {"logits": np.ones((4, 3))}))
    assert store.get(OUTPUTS, key) is not None and store.verify() == []


def test_every_record_derives_its_key_which_is_unchanged(tmp_path: Path) -> None:
    """A record names its kind, its key and the inputs the key is the sha256 of; the key is
    the one keys always were (sha256 of the canonical JSON of [tag, schema, version, fields])."""
    fields = {"checkpoint": "ab" * 32, "alpha": 0.05, "name": "é"}
    key = digest("outputs", "3", fields)
    text = json.dumps(
        ["outputs", SCHEMA_VERSION, "3", fields], sort_keys=True, separators=(",", ":")
    )
    assert key == hashlib.sha256(text.encode()).hexdigest()
    store = Store(tmp_path / "cache")
    store.put(OUTPUTS, key, {"logits": np.zeros((2, 3))})
    meta = store.get(OUTPUTS, key).meta
    assert (meta["kind"], meta["key"]) == (OUTPUTS, key)
    assert derived_key(meta["key_inputs"]) == key


def test_a_key_without_inputs_is_refused_by_put(tmp_path: Path) -> None:
    """A plain string names no inputs: an entry under it could never be read, so none is
    written."""
    store = Store(tmp_path / "cache")
    with pytest.raises(TypeError, match="carries no inputs"):
        store.put(OUTPUTS, "ab" * 32, {"logits": np.zeros((2, 3))})
    assert not (tmp_path / "cache").exists()  # nothing written, not even the root
    assert isinstance(digest("t", 1, {}), Key)
