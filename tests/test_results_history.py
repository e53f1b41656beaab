"""Results of an edited spec: the latest at the stable path, the earlier ones kept by key beside
it (oodsim.results.history), listed by `oodsim results ls`; and what `oodsim run` prints of a
run: the summary table and its last line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from oodsim.cli import main as cli_main
from oodsim.cli.summary import last_line
from oodsim.report.tables import format_summary_table
from oodsim.results import open_results, save_results
from oodsim.results.history import kept_path, read_saved, spec_changes, versions
from oodsim.stats import estimate
from tests.factories import synthetic_results


def test_results_of_an_earlier_spec_of_the_name_are_kept_by_key(tmp_path: Path) -> None:
    out = tmp_path / "results" / "x.zarr"
    two = synthetic_results(4, methods=("msp", "odin"))
    three = synthetic_results(4, methods=("msp", "odin", "energy"))
    save_results(two, out)
    assert [(s.key, s.latest, s.methods) for s in versions(out)] == [
        (two.attrs["spec_key"], True, ("msp", "odin"))
    ]
    save_results(three, out)
    latest, earlier = versions(out)
    assert (latest.key, latest.latest, latest.path) == (three.attrs["spec_key"], True, out)
    kept = kept_path(out, two.attrs["spec_key"])
    assert (earlier.key, earlier.latest, earlier.path) == (two.attrs["spec_key"], False, kept)
    assert kept == tmp_path / "results" / "x.history" / f"{two.attrs['spec_key'][:12]}.zarr"
    assert earlier.saved is not None and earlier.saved <= latest.saved
    assert open_results(kept).sizes["method"] == 2 and open_results(out).sizes["method"] == 3
    save_results(two, out)  # the edit undone: its kept copy goes, the other one is kept
    assert [(s.key, s.latest) for s in versions(out)] == [
        (two.attrs["spec_key"], True),
        (three.attrs["spec_key"], False),
    ]
    assert not kept.exists()
    assert sorted(p.name for p in out.parent.iterdir()) == ["x.history", "x.zarr"]


def test_results_of_another_name_are_not_kept(tmp_path: Path) -> None:
    out = tmp_path / "x.zarr"
    save_results(synthetic_results(4), out)
    other = synthetic_results(4, methods=("msp",))
    other.attrs["spec"] = other.attrs["spec"].replace('"name": "experiment"', '"name": "other"')
    save_results(other, out)  # what `oodsim run --overwrite` asks for
    assert [s.name for s in versions(out)] == ["other"]
    assert not (tmp_path / "x.history").exists()


def test_what_is_not_results_has_no_versions(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "zarr.json").write_text("{}")
    assert read_saved(tmp_path / "notes") is None and read_saved(tmp_path / "none") is None
    assert versions(tmp_path / "none") == []


def test_spec_changes_name_each_changed_field() -> None:
    before = {
        "detectors": ["msp", "odin"],
        "seeds": {"n": 50, "start": 0},
        "ood": [{"kind": "uniform_noise", "label": "noise", "n_samples": 100}],
        "training": {"lr": 0.05},
    }
    after = {
        "detectors": ["msp", "energy", {"name": "knn", "label": "knn5"}],
        "seeds": {"n": 100, "start": 0},
        "ood": [{"kind": "uniform_noise", "label": "noise", "n_samples": 200}],
        "training": {"lr": 0.05, "augment": {"rotation": 10.0}},
    }
    assert spec_changes(before, after) == [
        "detectors + energy, knn5; − odin",
        "ood[noise].n_samples 100 → 200",
        "seeds.n 50 → 100",
        'training.augment added ({"rotation": 10.0})',
    ]
    assert spec_changes(before, before) == []
    assert spec_changes({"metrics": ["a", "b"]}, {"metrics": ["b", "a"]}) == ["metrics reordered"]


def test_results_ls_lists_the_latest_and_the_earlier_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "results"
    save_results(synthetic_results(4, methods=("msp",)), folder / "a.zarr")
    save_results(synthetic_results(4, methods=("msp", "odin")), folder / "a.zarr")
    save_results(synthetic_results(4, methods=("energy",)), folder / "b.zarr")
    monkeypatch.chdir(tmp_path)
    assert cli_main(["results", "ls", "results"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["results/a.zarr", "earlier:", "results/b.zarr"]
    assert lines[0].endswith("2 methods") and lines[1].endswith(" 1 method")
    assert lines[1].startswith("  earlier: results/a.history/")
    assert cli_main(["results", "ls", str(tmp_path / "nothing")]) == 1
    assert "no oodsim results in" in capsys.readouterr().out


def test_the_table_shows_a_metric_of_the_classifier_once_under_a_short_header() -> None:
    results = synthetic_results(8, methods=("msp", "odin", "energy"))
    metrics = list(results.metric.values)
    accuracy = results.score.loc[{"metric": "accuracy"}]
    results.score.loc[{"metric": "accuracy"}] = accuracy.isel(method=[0] * 3).values
    lines = format_summary_table(results).splitlines()
    assert lines[0] == "Mean [95% interval] over 7 seeds"
    assert lines[1].split() == ["method", *[m for m in metrics if m != "accuracy"], "n"]
    e = estimate(results).sel({"metric": "accuracy", "method": "energy"})
    cell = f"{e['mean'].item():.3f} [{e['lower'].item():.3f}, {e['upper'].item():.3f}]"
    assert lines[-2] == f"classifier accuracy (the same for every method): {cell}"
    assert lines[-1].startswith("interval: 95% bound-aware interval")
    assert sum("accuracy" in line for line in lines) == 1


def test_the_last_line_says_in_words_what_the_run_did(tmp_path: Path) -> None:
    results = synthetic_results(6, failed=(1, 4))
    failure = results.failure.values.astype(object)
    failure[1] = "degenerate: validation balanced accuracy 0.2 is not above chance"
    results["failure"] = ("seed", np.array(failure, dtype=str))
    results.attrs["n_reused"] = 2
    results.attrs["store"] = '{"computed": {"checkpoint": 4, "outputs": 4}, "loaded": {}}'
    out = save_results(results, tmp_path / "r.zarr")
    assert last_line(results, 12.34, out) == (
        "6 simulations in 12.3 s: 4 computed, 2 reused from the cache, 1 excluded "
        "(degenerate), 1 failed; store entries computed: 4 checkpoint, 4 outputs. "
        f"Results in {out}"
    )
