"""``[seeds.design]``: crossed streams from the spec to the results, the CLI and the report."""

from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np
import pytest

from oodsim.cli.main import main as cli_main
from oodsim.engine import load
from oodsim.errors import SpecError
from oodsim.results import open_results
from oodsim.seeds import SeedStreams
from oodsim.specs import SeedsSpec
from oodsim.stats import variance_components
from tests.conftest import ROOT, digits_toml

DESIGN = "\n[seeds.design]\nclass_split = 2\ninit = 2\n"


def test_seeds_walk_the_grid_and_replicates_repeat_it() -> None:
    seeds = SeedsSpec(n=12, start=100, design={"init": 3, "class_split": 2})
    levels = [seeds.design_levels(s) for s in seeds.all()]
    cells = [(d["class_split"], d["init"]) for d in levels]
    assert cells[:6] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]  # STREAMS order
    assert cells[6:] == cells[:6]  # the second replicate
    streams = seeds.streams(104)
    assert streams.entropy("class_split") == 101 and streams.entropy("init") == 101
    assert streams.entropy("data_order") == 104  # every other stream follows the seed
    # The same stream values give the same draws as a pinned stream would.
    pinned = SeedStreams(104, {"class_split": 101, "init": 101})
    assert streams.torch_seed("init") == pinned.torch_seed("init")


def test_a_design_keeps_old_keys_and_enters_the_key_when_set() -> None:
    spec = load(ROOT / "specs" / "digits.toml")
    assert SeedsSpec(n=50).key == spec.seeds.key
    designed = attrs.evolve(spec, seeds=SeedsSpec(n=16, design={"class_split": 4, "init": 4}))
    assert designed.key != attrs.evolve(spec, seeds=SeedsSpec(n=16)).key


@pytest.mark.parametrize(
    ("seeds", "field"),
    [
        ({"n": 6, "design": {"class_split": 4}}, "seeds.n"),
        ({"n": 4, "design": {"class_splt": 4}}, "seeds.design"),
        ({"n": 4, "design": {"init": 1}}, "seeds.design.init"),
        ({"n": 4, "design": {"init": 4}, "pinned": {"init": 0}}, "seeds.design.init"),
        ({"values": [1, 2], "design": {"init": 2}}, "seeds.values"),
        ({"n": 4, "design": {"bootstrap": 4}}, "seeds.design.bootstrap"),
    ],
)
def test_a_bad_design_is_refused_at_load(tmp_path: Path, seeds: dict, field: str) -> None:
    with pytest.raises(SpecError) as error:
        load_with(seeds, tmp_path)
    assert error.value.location.startswith(str(tmp_path))  # the file and the line of the field
    assert str(error.value).startswith(f"{error.value.location}: {field}")


def load_with(seeds: dict, tmp_path: Path) -> object:
    """The shipped digits spec with ``seeds`` as its [seeds] table, loaded from TOML."""
    lines = (ROOT / "specs" / "digits.toml").read_text().split("[seeds]")[0]
    body = "".join(f"{k} = {v}\n" for k, v in seeds.items() if not isinstance(v, dict))
    for table in ("design", "pinned"):
        if table in seeds:
            body += f"[seeds.{table}]\n" + "".join(f"{k} = {v}\n" for k, v in seeds[table].items())
    path = tmp_path / "spec.toml"
    path.write_text(lines + "[seeds]\n" + body)
    return load(path)


def test_sequential_rules_and_other_protocols_refuse_a_design(tmp_path: Path) -> None:
    spec = load(ROOT / "specs" / "digits.toml")
    with pytest.raises(SpecError, match="stopping.rule"):
        attrs.evolve(
            spec,
            seeds=SeedsSpec(n=4, design={"init": 4}),
            stopping=attrs.evolve(spec.stopping, rule="ci_width"),
        )
    severity = load(ROOT / "specs" / "severity_fashion_mnist.toml")
    with pytest.raises(SpecError, match="seeds.design"):
        attrs.evolve(severity, seeds=SeedsSpec(n=4, design={"init": 4}))


@pytest.mark.slow  # trains through the command line
def test_a_designed_run_from_the_cli_carries_the_grid_into_results_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cluster_address: str
) -> None:
    spec_path = digits_toml(tmp_path / "d.toml", 8, detectors='"msp", "energy"')
    spec_path.write_text(spec_path.read_text() + DESIGN)
    out, report = tmp_path / "r.zarr", tmp_path / "report"
    code = cli_main(
        ["run", str(spec_path), "--cache", str(tmp_path / "c"), "--out", str(out)]
        + ["--report", str(report), "--address", cluster_address]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "Share of the seed-to-seed variance of auroc by source" in printed
    results = open_results(out)
    np.testing.assert_array_equal(results["stream_class_split"].values, [0, 0, 1, 1] * 2)
    np.testing.assert_array_equal(results["stream_init"].values, [0, 1, 0, 1] * 2)
    assert results["stream_init"].dtype == np.int64
    # The class split a seed drew follows its designed level: one split per level.
    labels = results["class_split"].values
    per_level = [set(labels[results["stream_class_split"].values == level]) for level in (0, 1)]
    assert [len(split) for split in per_level] == [1, 1] and per_level[0] != per_level[1]
    vc = variance_components(results, "auroc")
    assert list(vc["source"].values) == ["class_split", "init", "class_split:init", "residual"]
    summary = (report / "summary.md").read_text()
    assert "## Sources of variance" in summary and "(variance_sources.png)" in summary
    assert (report / "variance_sources.png").read_bytes()[:4] == b"\x89PNG"
