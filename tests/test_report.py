"""Tests of oodsim.report: PNG plots and the Markdown / plain-text summaries."""

from __future__ import annotations

import io
import json
import re
import signal
import sys
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
import xarray as xr

from oodsim.cli.main import main as cli_main
from oodsim.cli.reporting import ReportProgress
from oodsim.errors import OodsimError
from oodsim.report import (
    REPORT_MARKER,
    ReportFolderError,
    format_summary_table,
    is_complete,
    plot_distributions,
    plot_paired_differences,
    plot_required_simulations,
    plot_running_mean,
    plot_variance_sources,
    plot_win_probability,
    report_folder,
    write_report,
)
from oodsim.report.folder import is_report_file, write_file
from oodsim.report.summary import NO_FIGURES, NOTHING_TO_DRAW
from oodsim.results import save_results
from oodsim.stats import StopDecision, estimate
from tests.conftest import digits_toml, run_denied, signalled, wait_for
from tests.factories import METRICS, synthetic_results


def make_results(n_seeds: int = 24, **options) -> xr.Dataset:
    """Results of the protocols' own shape (see :func:`tests.factories.synthetic_results`)."""
    return synthetic_results(n_seeds, **options)


def assert_png(path: Path) -> None:
    assert path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = mpimg.imread(path)
    assert image.ndim == 3 and image.shape[0] > 50 and image.shape[1] > 50


@pytest.mark.parametrize("sweep", [False, True])
def test_plots_write_valid_pngs(tmp_path: Path, sweep: bool) -> None:
    results = make_results(levels=("0", "1"), models=("svhn", "noise")) if sweep else make_results()
    results.attrs["stopping"] = StopDecision(True, "ci_width", "narrow", 0.004, 20).to_json()
    paths = [
        plot_distributions(results, tmp_path / "d.png", metric="fpr95" if sweep else None),
        plot_win_probability(results, tmp_path / "w.png", "auroc", k=5, n_draws=500),
        plot_required_simulations(results, tmp_path / "r.png", "auroc"),
        plot_paired_differences(results, tmp_path / "p.png", "fpr95"),
        plot_running_mean(results, tmp_path / "sub" / "m.png", "auroc"),
    ]
    for path in paths:
        assert_png(path)


def test_distributions_survive_constant_and_single_seed_methods(tmp_path: Path) -> None:
    results = make_results(n_seeds=6)
    results["score"].loc[{"method": "msp"}] = 0.5  # zero variance: no KDE possible
    results["score"][1:, 1] = np.nan  # odin: a single finite seed
    assert_png(plot_distributions(results, tmp_path / "d.png", metric="auroc"))
    assert_png(plot_required_simulations(results, tmp_path / "r.png"))
    assert_png(plot_paired_differences(results, tmp_path / "p.png"))


def test_a_designed_run_reports_its_sources_of_variance(tmp_path: Path) -> None:
    design = {"class_split": 3, "init": 3}
    results = synthetic_results(18, design=design, failed=())
    summary = write_report(results, tmp_path / "report", n_draws=500).read_text()
    assert_png(tmp_path / "report" / "variance_sources.png")
    assert "(variance_sources.png)" in summary
    start = summary.index("## Sources of variance")
    section = summary[start : summary.index("\n## ", start)]
    rows = [line.split(" | ")[0].strip("| ") for line in section.splitlines() if line[:2] == "| "]
    assert rows[1:] == ["class_split", "init", "class_split:init", "residual", "total SD"]
    assert "anova fit of the crossed random-effects model" in section
    # The same fit as the library's, shown to two decimals.
    from oodsim.stats import variance_components

    share = variance_components(results, "auroc")["share"]
    odin = share.sel({"method": "odin", "source": "class_split"}).item()
    assert "| class_split | " in section and f"{odin:.2f} [" in section
    assert_png(plot_variance_sources(results, tmp_path / "v.png", "fpr95"))


def test_paired_comparisons_in_the_report_are_those_of_stats_compare(tmp_path: Path) -> None:
    from oodsim.stats import compare

    results = make_results(n_seeds=30)
    text = write_report(
        results, tmp_path / "report", n_draws=500, adjust="bh", figures=False
    ).read_text()
    cmp = compare(results, "auroc", adjust="bh")
    section = text[text.index("## Paired comparisons") : text.index("## Seeds needed")]
    assert f"Benjamini-Hochberg adjustment over {cmp.attrs['n_tests']} tests" in section
    for a, b in (("msp", "energy"), ("energy", "odin")):
        cell = cmp.sel({"method": a, "other": b})
        star = "*" if bool(cell["significant"]) else ""
        expected = (
            f"{cell['diff'].item():+.4f} [{cell['diff_low'].item():+.4f}, "
            f"{cell['diff_high'].item():+.4f}]{star}"
        )
        row = next(line for line in section.splitlines() if line.startswith(f"| {a} |"))
        assert expected in row


def test_write_report_writes_plots_and_tables(tmp_path: Path) -> None:
    results = make_results(n_seeds=30)
    decision = StopDecision(True, "ranking", "energy is best", 0.002, 30)
    results.attrs["stopping"] = decision.to_json()
    summary = write_report(results, tmp_path / "report", n_draws=1000)
    assert summary == tmp_path / "report" / "summary.md"
    text = summary.read_text()
    for heading in (
        "## Estimates",
        "## Win probability",
        "## Paired comparisons",
        "## Seeds needed (power)",
        "## Sources of variance",
        "## Stopping decision",
    ):
        assert heading in text
    for name in (
        "forest",
        "distributions",
        "win_probability",
        "paired_differences",
        "running_mean",
    ):
        assert_png(tmp_path / "report" / f"{name}.png")
        assert f"({name}.png)" in text
    figures = text[text.index("## Figures") :].splitlines()
    assert next(line for line in figures if line.startswith("![")) == "![forest](forest.png)"
    assert "- OOD metrics: auroc, aupr_in, aupr_out, fpr95 (fpr95: lower is better)" in text
    # the one-way ANOVA states its degrees of freedom: 4 splits, 29 seeds used
    assert "Degrees of freedom: 3 between class splits (splits − 1), 25 within" in text
    # accuracy is the classifier's: stated once, not as a column of every detector
    assert "| method | auroc | aupr_in | aupr_out | fpr95 | n |" in text
    assert text.count("- classifier accuracy: ") == 1
    assert "energy is best" in text and "| ranking | True | 30 |" in text
    assert "- seeds: 30 (100-129); 29 in the estimates, 1 excluded" in text
    assert "  - 1 seed, training diverged: 103\n" in text
    # Win probabilities: OOD metrics only, and the sampling is stated.
    assert "- independent: each method averages its own 5 seeds" in text
    assert "- paired: one draw of 5 seeds shared by all methods" in text
    assert "95% bootstrap percentile interval: the 29 seeds resampled 400 times" in text
    assert (
        "| method | auroc independent | auroc paired | aupr_in independent | aupr_in paired "
        "| aupr_out independent | aupr_out paired | fpr95 independent | fpr95 paired |\n"
    ) in text
    assert "study's reading" not in text
    assert "accuracy: left out, the same for every detector" in text
    mean = estimate(results)["mean"].sel({"method": "odin", "metric": "auroc"})
    assert f"| odin | {mean.item():.4f} [" in text


@pytest.mark.slow  # every figure of a sweep: one of the suite's longest report tests
def test_write_report_with_sweep_dims_and_no_stopping(tmp_path: Path) -> None:
    results = make_results(levels=("0", "1", "2"), models=("svhn", "noise"))
    summary = write_report(results, tmp_path, metric="aupr_out", n_draws=500)
    text = summary.read_text()
    assert "| severity | model | method |" in text
    assert "*severity=2, model=noise*" in text
    assert "No stopping rule recorded" in text
    assert_png(tmp_path / "distributions.png")


def test_format_summary_table() -> None:
    results = make_results()
    table = format_summary_table(results)
    lines = table.splitlines()
    assert "over 23 seeds" in lines[0]  # 24, one failed
    assert "severity" not in lines[0]  # no levels: nothing to say
    assert lines[1].split() == ["method", *METRICS, "n"]
    est = estimate(results)
    row = next(line for line in lines if line.startswith("energy"))
    e = est.sel({"method": "energy", "metric": "fpr95"})
    cell = f"{e['mean'].item():.3f} [{e['lower'].item():.3f}, {e['upper'].item():.3f}]"
    assert cell in row and row.rstrip().endswith("23")
    sweep = format_summary_table(make_results(levels=("0", "1"), models=("svhn",)))
    assert sweep.splitlines()[1].split()[:3] == ["severity", "method", "auroc"]
    assert "model=svhn" in sweep.splitlines()[0]


def test_report_of_fewer_seeds_than_k_says_why_it_has_no_win_probability(tmp_path: Path) -> None:
    summary = write_report(make_results(n_seeds=3, failed=()), tmp_path, k=5)
    text = summary.read_text()
    assert "n too small: the results have 3 scored seeds, fewer than k = 5." in text
    assert not (tmp_path / "win_probability.png").exists()
    assert_png(tmp_path / "distributions.png")


def test_seed_counts_leave_out_failed_seeds(tmp_path: Path, capsys) -> None:
    """5 seeds, one failed, k = 5: the report drew 5-seed experiments from 4 seeds (a table
    of dashes headed "the 5 seeds resampled") and the summary table said "over 5 seeds"."""
    results = make_results(n_seeds=5, failed=(3,))
    assert format_summary_table(results).splitlines()[0].endswith("over 4 seeds")
    text = write_report(results, tmp_path / "report", k=5, figures=False).read_text()
    assert "n too small: the results have 4 scored seeds, fewer than k = 5." in text
    assert "– [–, –]" not in text
    four = write_report(results, tmp_path / "four", k=4, figures=False).read_text()
    assert "the 4 seeds resampled" in four and "the 5 seeds" not in four


def test_win_probability_pairing_in_report_plot_and_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from oodsim.cli.summary import print_win_probabilities

    results = make_results(n_seeds=12)
    text = write_report(results, tmp_path, n_draws=500, pairing="paired").read_text()
    assert "- paired: one draw of 5 seeds shared by all methods" in text
    assert "- independent:" not in text and "| method | auroc paired | aupr_in paired |" in text
    assert_png(tmp_path / "win_probability.png")
    with pytest.raises(ValueError, match="not an OOD metric"):
        plot_win_probability(results, tmp_path / "w.png", "accuracy", n_draws=100)
    # accuracy asked for: the report still plots an OOD metric's win probability.
    write_report(results, tmp_path / "acc", metric="accuracy", n_draws=200)
    assert_png(tmp_path / "acc" / "win_probability.png")
    print_win_probabilities(results, "accuracy")
    printed = capsys.readouterr().out
    assert "P(best mean auroc in a 5-seed comparison; 10000 draws) [95% bootstrap" in printed
    assert "independent: each method averages its own 5 seeds" in printed
    assert "paired: every method averages the same 5 seeds" in printed
    header = next(line for line in printed.splitlines() if line.split()[:1] == ["method"])
    assert header.split() == ["method", "independent", "paired"]
    for method in ("msp", "odin", "energy"):  # every method, however small its probability
        assert any(line.split()[:1] == [method] for line in printed.splitlines())


def test_summary_names_the_spec_the_data_and_every_excluded_seed(tmp_path: Path) -> None:
    results = make_results(n_seeds=12)
    failure = results["failure"].values.astype(object)
    failure[[5, 6, 9]] = "degenerate: accuracy 0.17 is not above chance (0.17)"
    results["failure"] = ("seed", failure.astype(str))
    text = write_report(results, tmp_path, n_draws=200, figures=False).read_text()
    key = results.attrs["spec_key"]
    assert f"- spec: `experiment` (protocol `open_set`, key `{key}`)" in text
    assert "- datasets: digits; OOD sets: held_out" in text
    assert "- seeds: 12 (100-111); 8 in the estimates, 4 excluded" in text
    lines = text.splitlines()
    degenerate = lines.index(
        "  - 3 seeds, degenerate (the classifier is not above chance): 105, 106, 109"
    )
    assert lines[degenerate + 1] == "    - seed 105: accuracy 0.17 is not above chance (0.17)"
    assert "  - 1 seed, training diverged: 103" in lines
    # a degenerate training the spec keeps ([degenerate] keep = true) is named, not excluded
    flagged = np.full(12, "", dtype=object)
    flagged[[5, 7]] = "test accuracy 0.17 is not above chance"
    results["degenerate"] = ("seed", flagged.astype(str))
    text = write_report(results, tmp_path, n_draws=200, figures=False).read_text()
    kept = "  - kept although degenerate (the classifier is not above chance): 107"
    assert kept in text.splitlines()
    clean = make_results(n_seeds=4, failed=())
    clean = write_report(clean, tmp_path / "clean", figures=False).read_text()
    assert "- seeds: 4 (100-103); none excluded" in clean


def test_report_folder_is_named_after_the_results() -> None:
    assert report_folder("results/foo.zarr") == Path("results/foo.report")
    assert report_folder(Path("out/bar")) == Path("out/bar.report")


def _saved(tmp_path: Path, name: str, **options) -> Path:
    return save_results(make_results(**options), tmp_path / f"{name}.zarr")


def test_cli_report_writes_each_results_into_its_own_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _saved(tmp_path, "first", n_seeds=4, failed=())
    second = _saved(tmp_path, "second", n_seeds=4, failed=(), methods=("msp", "energy"))
    assert cli_main(["report", str(first), "--no-figures"]) == 0
    assert cli_main(["report", str(second), "--no-figures"]) == 0
    for path in (first, second):
        summary = (tmp_path / f"{path.stem}.report" / "summary.md").read_text()
        assert f"- results: `{path}`" in summary
    assert "energy" in (tmp_path / "second.report" / "summary.md").read_text()
    assert "odin" in (tmp_path / "first.report" / "summary.md").read_text()
    assert "report written to" in capsys.readouterr().out

    # another results' report is never replaced without --overwrite
    before = (tmp_path / "first.report" / "summary.md").read_text()
    again = ["report", str(second), "--out", str(tmp_path / "first.report"), "--no-figures"]
    assert cli_main(again) == 2
    err = capsys.readouterr().err
    assert err.startswith("oodsim: error: ") and err.count("\n") == 1
    assert "holds the report of other results" in err and "--overwrite" in err
    assert (tmp_path / "first.report" / "summary.md").read_text() == before
    assert cli_main([*again, "--overwrite"]) == 0
    assert "energy" in (tmp_path / "first.report" / "summary.md").read_text()


@pytest.mark.parametrize(("inside", "argument"), [("", "."), ("score", "..")])
def test_cli_report_of_the_current_folder_is_written_beside_the_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inside: str, argument: str
) -> None:
    """The probe: ``cd r.zarr && oodsim report .`` failed with ``ValueError: PosixPath('.')
    has an empty name``, the default report folder being named after the results path. The
    path is now resolved first: the report goes to ``r.report`` beside the results."""
    saved = _saved(tmp_path, "r", n_seeds=4, failed=())
    monkeypatch.chdir(saved / inside)
    assert cli_main(["report", argument, "--no-figures"]) == 0
    summary = (tmp_path / "r.report" / "summary.md").read_text()
    assert f"- results: `{saved}`" in summary
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.report", "r.zarr"]
    assert report_folder(saved / inside / argument) == tmp_path / "r.report"


def test_write_report_refuses_a_folder_of_other_files_and_never_deletes_them(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    results = make_results(n_seeds=6)
    with pytest.raises(ReportFolderError, match="is not an oodsim report") as error:
        write_report(results, folder, n_draws=100, figures=False)
    assert isinstance(error.value, OodsimError)
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
    write_report(results, folder, n_draws=100, overwrite=True, figures=False)
    assert (folder / "notes.txt").read_text() == "mine"
    assert (folder / "summary.md").is_file() and (folder / REPORT_MARKER).is_file()
    with pytest.raises(ReportFolderError, match="not a report folder"):
        write_report(results, folder / "notes.txt")


def test_a_report_never_replaces_a_file_it_did_not_write_even_with_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The probe: ``oodsim report R --out myproj --overwrite`` (and ``oodsim run --report
    myproj --overwrite``) replaced the user's ``myproj/summary.md``. A folder holding a file a
    report writes that no report marker lists is now refused in one line, whatever
    ``--overwrite`` says, before anything is computed or written; in a report folder, such a
    file is refused up front, and one a protocol's hook would write as it is written."""
    saved = _saved(tmp_path, "r", n_seeds=6, failed=())
    mine, cache = tmp_path / "myproj", tmp_path / "cache"
    mine.mkdir()
    (mine / "summary.md").write_text("MY NOTES\n")
    spec = digits_toml(tmp_path / "s.toml", 2)
    run = ["run", str(spec), "--cache", str(cache), "--report", str(mine), "--quiet"]
    for args in (["report", str(saved), "--out", str(mine)], run):
        assert cli_main([*args, "--overwrite"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("oodsim: error: ") and err.count("\n") == 1, err
        assert f"{mine} holds summary.md, which a report writes but oodsim did not" in err
        assert [p.name for p in mine.iterdir()] == ["summary.md"]
        assert (mine / "summary.md").read_text() == "MY NOTES\n"
    assert not cache.exists()  # refused before any compute

    results = make_results(n_seeds=6, failed=())
    folder = tmp_path / "report"
    write_report(results, folder, n_draws=100, figures=False)
    (folder / "forest.png").write_bytes(b"my plot")
    with pytest.raises(ReportFolderError, match="holds forest.png, which a report writes"):
        write_report(results, folder, n_draws=100, overwrite=True)
    assert (folder / "forest.png").read_bytes() == b"my plot"
    (folder / "extra.md").write_text("mine")
    with pytest.raises(ReportFolderError, match="extra.md is not a file of the report"):
        write_file(folder / "extra.md", lambda tmp: tmp.write_text("oodsim's"))
    assert (folder / "extra.md").read_text() == "mine"
    (folder / "forest.png").unlink()
    write_report(results, folder, n_draws=100)  # moved away: written, as before
    assert (folder / "extra.md").read_text() == "mine" and is_complete(folder)
    assert_png(folder / "forest.png")
    assert all(is_report_file(name) for name in _marker(folder)["files"])


def test_a_deeply_nested_report_marker_is_read_as_unreadable(tmp_path: Path) -> None:
    """A marker nested 30,000 levels deep used to stop ``oodsim report`` with a
    RecursionError. It is now a marker that cannot be read: the report is written again and,
    as the old one's files are unknown, nothing else in the folder is removed."""
    results = make_results(n_seeds=6)
    write_report(results, tmp_path, n_draws=100, figures=False)
    (tmp_path / REPORT_MARKER).write_bytes(b"[" * 30_000 + b"]" * 30_000)
    (tmp_path / "old_plot.png").write_bytes(b"not oodsim's to remove")
    write_report(results, tmp_path, n_draws=100, figures=False)
    assert (tmp_path / "old_plot.png").read_bytes() == b"not oodsim's to remove"
    marker = json.loads((tmp_path / REPORT_MARKER).read_text())
    assert marker["results_key"] == results.attrs["spec_key"]


def test_a_report_of_the_same_results_is_refreshed(tmp_path: Path) -> None:
    results = make_results(n_seeds=8)
    write_report(results, tmp_path, n_draws=100)
    assert_png(tmp_path / "win_probability.png")
    (tmp_path / "notes.txt").write_text("kept")
    # the same spec with fewer seeds than k: no win probability any more, its old plot goes
    text = write_report(results.isel(seed=slice(0, 3)), tmp_path, n_draws=100).read_text()
    assert "- seeds: 3 (100-102)" in text
    assert not (tmp_path / "win_probability.png").exists()
    assert (tmp_path / "notes.txt").read_text() == "kept"
    marker = json.loads((tmp_path / REPORT_MARKER).read_text())
    assert marker["results_key"] == results.attrs["spec_key"]
    assert "win_probability.png" not in marker["files"] and "summary.md" in marker["files"]


def _marker(folder: Path) -> dict:
    try:
        return json.loads((folder / REPORT_MARKER).read_text())
    except (OSError, ValueError):
        return {}


@pytest.mark.slow  # draws two whole reports
def test_an_interrupted_report_says_so_and_leaves_nothing_of_other_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while ``oodsim report --overwrite`` replaced the report of other results used
    to exit without a word, leaving the old report's summary and figures under a marker that
    named the new results. Now the old report's files go first, every file written is
    recorded at once, the marker says the report is incomplete, and one line says so."""
    first = _saved(tmp_path, "first", n_seeds=6, failed=())
    second = _saved(tmp_path, "second", n_seeds=6, failed=(), methods=("msp", "energy"))
    folder = tmp_path / "first.report"
    # a report that goes on for longer than its quiet spell says each step as it starts
    monkeypatch.setattr("oodsim.cli.reporting.QUIET_SECONDS", 0.0)
    assert cli_main(["report", str(first)]) == 0
    old = _marker(folder)
    assert is_complete(folder) and "summary.md" in old["files"] and len(old["files"]) > 2
    lines = capsys.readouterr().err.splitlines()  # a step that lasts is said again: once here
    steps = list(dict.fromkeys(line.split("): ", 1)[1] for line in lines))
    figures = re.findall(r"!\[(\w+)\]", (folder / "summary.md").read_text())  # in order
    assert steps[0] == f"reading {first}" and steps[-1] == "writing summary.md"
    drawn = [f"drawing figure {i} of {len(figures)}: {name}" for i, name in enumerate(figures, 1)]
    assert [step for step in steps if step.startswith("drawing")] == drawn
    monkeypatch.undo()
    new_key = xr.open_zarr(second).attrs["spec_key"]

    command = [sys.executable, "-m", "oodsim.cli", "report", str(second), "--out", str(folder)]
    process, output = signalled(
        [*command, "--overwrite"],
        lambda _: _marker(folder).get("results_key") == new_key and _marker(folder)["files"],
        signum=signal.SIGINT,
    )
    assert process.returncode == 130, output
    *progress, last = output.strip().splitlines()  # lines of a report that took a while
    assert last == (
        f"oodsim: interrupted: the report in {folder} is incomplete; the same command writes it "
        "again"
    )
    assert all(line.startswith("oodsim: report (") for line in progress), output
    marker = _marker(folder)
    assert marker["results_key"] == new_key and not is_complete(folder)
    on_disk = sorted(p.name for p in folder.iterdir() if p.name != REPORT_MARKER)
    assert on_disk == marker["files"] and "summary.md" not in on_disk  # only new figures

    # the same command, Markdown alone: the interrupted report's figures go, recorded or not
    assert cli_main(["report", str(second), "--out", str(folder), "--no-figures"]) == 0
    assert sorted(p.name for p in folder.iterdir()) == [REPORT_MARKER, "summary.md"]
    assert is_complete(folder) and "energy" in (folder / "summary.md").read_text()


def test_report_progress_is_silent_while_quick_then_says_every_step() -> None:
    quick = io.StringIO()
    with ReportProgress(quick, quiet=60) as progress:
        progress("reading r.zarr")
        progress("drawing figure 1 of 2: forest")
    assert quick.getvalue() == ""  # a quick report (or one error line) stays as it was

    slow = io.StringIO()
    with ReportProgress(slow, quiet=0.2) as progress:
        progress("computing win probabilities")
        wait_for(lambda: "computing" in slow.getvalue(), 60, "the step, once quiet passed")
        progress("drawing figure 1 of 2: forest")  # from then on, each step as it starts
        assert slow.getvalue().splitlines()[-1].endswith("): drawing figure 1 of 2: forest")
        wait_for(lambda: slow.getvalue().count("forest") > 1, 60, "a lasting step said again")
    lines = slow.getvalue().splitlines()
    assert all(re.fullmatch(r"oodsim: report \(\d+ s\): .+", line) for line in lines), lines
    assert slow.getvalue() == "\n".join(lines) + "\n"  # nothing after the report ended


@pytest.mark.slow  # every figure of a severity report
def test_severity_report_lists_its_files_and_thins_the_levels_of_its_figures(
    tmp_path: Path,
) -> None:
    levels = tuple(str(i) for i in range(11))
    results = make_results(n_seeds=3, failed=(), levels=levels, models=("a", "b"))
    text = write_report(results, tmp_path, n_draws=100).read_text()
    assert "The figures show severity levels 0, 2, 4, 6, 8, 10 of 11" in text
    assert "- datasets: fashion_mnist, digits;" in text
    marker = json.loads((tmp_path / REPORT_MARKER).read_text())
    assert "severity/severity_summary.md" in marker["files"]
    for name in marker["files"]:
        assert (tmp_path / name).is_file() and is_report_file(name, "severity"), name
        if name.endswith(".png"):
            assert_png(tmp_path / name)

    # without figures: the same documents less their images, and no PNG
    plain = write_report(results, tmp_path / "text", n_draws=100, figures=False).read_text()
    assert not list((tmp_path / "text").rglob("*.png"))
    assert NO_FIGURES in plain and "![" not in plain
    assert plain[: plain.index("## Figures")] == text[: text.index("## Figures")]
    drawn, bare = (
        (folder / "severity" / "severity_summary.md").read_text().splitlines()
        for folder in (tmp_path, tmp_path / "text")
    )
    assert [line for line in bare if line] == [
        line for line in drawn if line and not line.startswith("![")
    ]
    marker = json.loads((tmp_path / "text" / REPORT_MARKER).read_text())
    assert sorted(marker["files"]) == ["severity/severity_summary.md", "summary.md"]


def test_run_refuses_a_foreign_report_folder_before_computing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "mine.txt").write_text("not oodsim's")
    spec_path = digits_toml(tmp_path / "s.toml", 2)
    cache = tmp_path / "cache"
    args = ["run", str(spec_path), "--cache", str(cache), "--report", str(folder), "--quiet"]
    assert cli_main(args) == 2
    assert "is not an oodsim report" in capsys.readouterr().err
    assert not cache.exists() and (folder / "mine.txt").read_text() == "not oodsim's"


@pytest.mark.parametrize("where", ["below a file", "under /proc"])
def test_run_refuses_a_report_folder_it_cannot_write_before_computing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """The probe: ``oodsim run SPEC --report afile/sub`` (or ``/proc/rep``) computed every
    seed, then failed with a raw ``NotADirectoryError`` (``FileNotFoundError``). It is now
    refused in one line before any compute, as ``--report afile`` was."""
    if where == "under /proc" and not Path("/proc").is_dir():
        pytest.skip("no /proc file system here")
    parent = Path("/proc") if where == "under /proc" else tmp_path / "afile"
    if where == "below a file":
        parent.write_text("mine")
    folder, cache = parent / "sub", tmp_path / "cache"
    spec_path = digits_toml(tmp_path / "s.toml", 2)
    args = ["run", str(spec_path), "--cache", str(cache), "--report", str(folder), "--quiet"]
    assert cli_main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"oodsim: error: cannot write the report to {folder / 'summary.md'}: ")
    assert err.count("\n") == 1 and not cache.exists() and not folder.exists()


def test_run_refuses_a_read_only_report_folder_before_computing(tmp_path: Path) -> None:
    """A real ``chmod 555`` parent of ``--report``: the run used to compute, then fail with a
    raw ``PermissionError``; now one line, exit code 2, no cache created."""
    parent, cache = tmp_path / "ro", tmp_path / "cache"
    parent.mkdir()
    spec_path = digits_toml(tmp_path / "s.toml", 2)
    command = [sys.executable, "-m", "oodsim.cli", "run", str(spec_path), "--quiet"]
    command += ["--cache", str(cache), "--report", str(parent / "rep")]
    done = run_denied(command, parent, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"oodsim: error: cannot write the report to {parent / 'rep' / 'summary.md'}: cannot "
        f"create files in {parent} (Permission denied); choose a writable output path"
    ]
    assert list(parent.iterdir()) == [] and not cache.exists()


def _tables(text: str) -> list[list[list[str]]]:
    """The Markdown tables of ``text``: their body rows, each a list of cells."""
    tables: list[list[list[str]]] = []
    previous = ""
    for line in text.splitlines():
        if line.startswith("|"):
            if not previous.startswith("|"):
                tables.append([])
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):  # not the separator
                tables[-1].append(cells)
        previous = line
    return [table[1:] for table in tables]  # the header left out


@pytest.mark.parametrize(
    "options",
    [
        {"n_seeds": 3, "levels": tuple(str(i) for i in range(11))},
        {"n_seeds": 2, "failed": ()},
        {"n_seeds": 2, "levels": tuple(str(i) for i in range(11))},
    ],
)
def test_a_report_of_few_seeds_has_no_blank_tables_and_says_n_too_small(
    tmp_path: Path, options: dict
) -> None:
    text = write_report(make_results(**options), tmp_path, n_draws=100).read_text()
    severity = tmp_path / "severity" / "severity_summary.md"
    for table in _tables(text + (severity.read_text() if severity.exists() else "")):
        values = [cell for row in table for cell in row[1:]]  # the first column labels a row
        assert any(value not in ("", "–") for value in values), table
    assert "n too small: the results have" in text  # no win probabilities, and why
    assert not (tmp_path / "win_probability.png").exists()
    paired = "paired comparisons and the seeds needed for power start at 3" in text
    assert paired == (options["n_seeds"] < 3)  # a 2-seed paired t test has one df
    assert (tmp_path / "paired_differences.png").exists() == (options["n_seeds"] >= 3)
    figures = [line for line in text.splitlines() if line.startswith("![")]
    assert figures[0] == "![forest](forest.png)"
    for line in figures:
        assert_png(tmp_path / line[line.index("(") + 1 : -1])


def test_a_report_of_one_method_says_why_it_compares_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The probe: results of the default ``detectors = ["msp"]`` with 3 seeds or more stopped
    the report with ``ValueError: a comparison needs at least 2 methods, got ['msp']``,
    leaving an incomplete marker (``oodsim run --report`` failed after its compute). Now the
    parts that compare methods are one line each, saying why, and the report is complete."""
    saved = _saved(tmp_path, "one", n_seeds=6, failed=(), methods=("msp",))
    assert cli_main(["report", str(saved)]) == 0, capsys.readouterr().err
    folder = tmp_path / "one.report"
    text = (folder / "summary.md").read_text()
    assert is_complete(folder)
    why = "Not computed: the results have one method (msp); {} compare methods."
    win = text[text.index("## Win probability") : text.index("## Paired comparisons")]
    assert why.format("win probabilities") in win
    paired = text[text.index("## Paired comparisons") : text.index("## Sources of variance")]
    assert why.format("paired comparisons and the seeds needed for power") in paired
    assert "## Seeds needed" not in text
    figures = [line for line in text.splitlines() if line.startswith("![")]
    assert figures == [
        "![forest](forest.png)",
        "![distributions](distributions.png)",
        "![running_mean](running_mean.png)",
    ]
    for name in ("forest", "distributions", "running_mean"):
        assert_png(folder / f"{name}.png")


@pytest.mark.parametrize("levels", [None, ("0", "1", "2")])
def test_a_report_without_a_scored_seed_draws_nothing_and_says_why(
    tmp_path: Path, levels: tuple[str, ...] | None
) -> None:
    """The probe: a report with figures of results whose every seed failed (or was excluded)
    stopped with ``ValueError: need at least one array to concatenate`` in the running-mean
    plot's axis limits. Now the report is written, without a figure, and says why; the plot
    alone draws empty axes."""
    results = make_results(n_seeds=3, failed=(0, 1, 2), levels=levels)
    folder = tmp_path / "report"
    text = write_report(results, folder, n_draws=100).read_text()
    assert "0 in the estimates, 3 excluded" in text and is_complete(folder)
    figures = text[text.index("## Figures") :]
    assert NOTHING_TO_DRAW in figures and "![" not in figures
    assert not list(folder.rglob("*.png"))
    assert_png(plot_running_mean(results, tmp_path / "running_mean.png", "auroc"))


@pytest.mark.parametrize("levels", [None, ("0", "1", "2")])
def test_a_label_with_a_pipe_keeps_every_markdown_table_whole(
    tmp_path: Path, levels: tuple[str, ...] | None
) -> None:
    """The probe: a detector labelled ``a|b`` split its cell in two in every Markdown table of
    ``summary.md`` (``| a|b | 0.6120 [–, –] | 1 |``: one cell more than the header). Every
    table cell the report writes now escapes ``|`` as ``\\|``."""
    methods = ("msp", {"name": "odin", "label": "a|b"})
    results = make_results(n_seeds=6, failed=(), methods=methods, levels=levels)
    text = write_report(results, tmp_path, n_draws=100, figures=False).read_text()
    severity = tmp_path / "severity" / "severity_summary.md"
    text += severity.read_text() if levels else ""
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert not any("a|b" in row for row in rows)
    assert sum("a\\|b" in row for row in rows) >= (10 if levels is None else 4)
    tables: list[list[int]] = [[]]
    for line in text.splitlines():  # cells per row, split at pipes that are not escaped
        if line.startswith("|"):
            tables[-1].append(len(re.split(r"(?<!\\)\|", line)) - 2)
        elif tables[-1]:
            tables.append([])
    assert len(tables) > 3
    for widths in tables:
        assert widths == widths[:1] * len(widths), widths


def test_the_win_table_has_every_method(tmp_path: Path) -> None:
    methods = ("msp", "temperature", "odin", "entropy", "max_logit", "energy", "knn", "vim")
    results = make_results(n_seeds=8, methods=methods)
    text = write_report(results, tmp_path, n_draws=200, figures=False).read_text()
    section = text[text.index("## Win probability") : text.index("## Paired comparisons")]
    rows = [line.split(" | ")[0].strip("| ") for line in section.splitlines() if line[:2] == "| "]
    assert rows[1:] == list(methods)


def test_one_model_and_one_ood_set_are_not_called_across_models(tmp_path: Path) -> None:
    levels = ("0", "1", "2")
    one = make_results(n_seeds=3, failed=(), levels=levels)
    write_report(one, tmp_path / "one", n_draws=100, figures=False)
    texts = [p.read_text() for p in (tmp_path / "one").rglob("*.md")]
    assert len(texts) == 2  # summary.md and severity/severity_summary.md
    for text in texts:
        assert "across models" not in text and "per OOD set" not in text
    assert "### Improvement over msp (model model_a)" in texts[0] + texts[1]
    two = make_results(n_seeds=3, failed=(), levels=levels, models=("a", "b"))
    write_report(two, tmp_path / "two", n_draws=100, figures=False)
    severity = (tmp_path / "two" / "severity" / "severity_summary.md").read_text()
    assert "### Improvement over msp (median across 2 models)" in severity


def test_a_power_table_of_blanks_is_one_line(tmp_path: Path) -> None:
    results = make_results(n_seeds=6, failed=())
    score = results["score"].transpose("seed", "method", ...)
    results["score"] = score.copy(data=np.repeat(score.values[:, :1], score.sizes["method"], 1))
    text = write_report(results, tmp_path, n_draws=100, figures=False).read_text()
    section = text[text.index("## Seeds needed") : text.index("## Sources of variance")]
    assert "Not computed: no pair has paired differences that spread" in section
    assert "| msp |" not in section


def test_a_report_never_writes_or_deletes_through_links(tmp_path: Path) -> None:
    """The probe: a `summary.md` that is a link had the file it points to overwritten, and a
    marker listing `../victim.txt` or `sub/secret.txt` (`sub` a link out of the folder) had
    those files deleted by the next report."""
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("victim.txt", "secret.txt", "linked.txt"):
        (outside / name).write_text(f"user's {name}")
    out = tmp_path / "report"
    results = make_results(n_seeds=3, failed=())
    write_report(results, out, n_draws=100)
    (out / "summary.md").unlink()
    (out / "summary.md").symlink_to(outside / "linked.txt")
    (out / "sub").symlink_to(outside, target_is_directory=True)
    (tmp_path / "victim.txt").write_text("user's victim.txt")
    marker = json.loads((out / REPORT_MARKER).read_text())
    marker["files"] += ["../victim.txt", "sub/secret.txt", str(outside / "victim.txt")]
    (out / REPORT_MARKER).write_text(json.dumps(marker))
    write_report(results, out, n_draws=100)  # the same results: the report is refreshed
    for path in (*outside.iterdir(), tmp_path / "victim.txt"):
        assert path.read_text() == f"user's {path.name}", path
    assert (out / "summary.md").is_file() and not (out / "summary.md").is_symlink()
    assert (out / "summary.md").read_text().startswith("#")
    # a link on the way to a file the report writes is refused, never written through
    with pytest.raises(ReportFolderError, match="is a link in the report folder"):
        write_file(out / "sub" / "plot.png", lambda tmp: tmp.write_bytes(b"x"))
    assert sorted(p.name for p in outside.iterdir()) == ["linked.txt", "secret.txt", "victim.txt"]


def test_results_opened_lazily_read_as_opened_in_memory(tmp_path: Path) -> None:
    """``xr.open_zarr`` gives dask arrays and numpy's StringDType for the text variables:
    every analysis failed (TypeError: cannot cast StringDType), and the seeds a severity run
    flagged degenerate went unseen (their dtype kind is "T")."""
    import warnings

    from oodsim import open_results, stats

    results = make_results(n_seeds=8)
    save_results(results, tmp_path / "r.zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr: the manifest is no zarr component
        lazy = xr.open_zarr(tmp_path / "r.zarr")
    assert lazy["score"].chunks is not None
    eager = open_results(tmp_path / "r.zarr")
    xr.testing.assert_identical(stats.estimate(lazy), stats.estimate(eager))
    assert format_summary_table(lazy) == format_summary_table(eager)
    one = write_report(lazy, tmp_path / "lazy", figures=False).read_text()
    other = write_report(eager, tmp_path / "eager", figures=False).read_text()
    assert one == other
