"""Tables for papers: LaTeX that a booktabs document accepts (checked by a small reader of its
own, no TeX), bold exactly where scipy's paired t tests with statsmodels' Holm adjustment say
a method is best, CSV equal to the estimates, and the command's flags."""

from __future__ import annotations

import csv
import io
import itertools
import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from oodsim.cli.main import main as cli_main
from oodsim.metrics import higher_is_better
from oodsim.report import write_report
from oodsim.report.paper import CSV_COLUMNS, csv_table, latex_table, latex_text, paper_table
from oodsim.results import save_results
from oodsim.stats import estimate
from tests.factories import synthetic_results

METHODS = ("msp", "max_logit", "energy", "pytorch_ood:KNN")

#: the LaTeX commands a table may use: booktabs' rules and what every LaTeX has
KNOWN_COMMANDS = {
    "begin", "end", "centering", "caption", "label", "toprule", "midrule", "bottomrule",
    "textbf", "scriptsize", "uparrow", "downarrow", "textit", "par", "smallskip", "%", "_",
    "&", "#", "$", "{", "}", "textbackslash", "textasciitilde", "textasciicircum",
}  # fmt: skip


def latex_problems(source: str) -> list[str]:
    """What would stop LaTeX with booktabs on ``source``: an unknown command, unbalanced
    braces or environments, a special character left bare, rows of the wrong width, rules
    out of order."""
    problems = []
    for name in re.findall(r"\\([A-Za-z]+|.)", source):
        if name not in KNOWN_COMMANDS and name != "\\":
            problems.append(f"unknown command \\{name}")
    unescaped = re.sub(r"\\[A-Za-z]+|\\.", "", source)
    if unescaped.count("{") != unescaped.count("}"):
        problems.append("unbalanced braces")
    if re.search(r"[_%#~^]", unescaped):
        problems.append(f"a bare special character: {re.findall(r'[_%#~^]', unescaped)}")
    if unescaped.replace("$\\uparrow$", "").count("$") % 2:
        problems.append("an unclosed $")
    stack = []
    for kind, env in re.findall(r"\\(begin|end)\{(\w+)\}", source):
        if kind == "begin":
            stack.append(env)
        elif not stack or stack.pop() != env:
            problems.append(f"\\end{{{env}}} without its \\begin")
    if stack:
        problems.append(f"unclosed environments {stack}")
    for block in re.findall(r"\\begin\{tabular\}\{(\w+)\}(.*?)\\end\{tabular\}", source, re.S):
        columns, body = len(block[0]), block[1]
        rules = re.findall(r"\\(toprule|midrule|bottomrule)", body)
        if rules != ["toprule", "midrule", "bottomrule"]:
            problems.append(f"rules {rules}")
        for row in (r for r in body.split("\\\\") if "&" in r):
            cells = re.sub(r"\\&", "", row).count("&") + 1
            if cells != columns:
                problems.append(f"a row of {cells} cells in {columns} columns")
    return problems


def test_the_checker_finds_what_latex_would_refuse() -> None:
    good = "\n".join(
        ["\\begin{tabular}{lc}", "\\toprule", "a & b \\\\", "\\midrule", "c & d \\\\"]
        + ["\\bottomrule", "\\end{tabular}"]
    )
    assert latex_problems(good) == []
    assert latex_problems(good.replace("c & d", "c & d & e"))[0].startswith("a row of 3")
    assert "a bare special character: ['_']" in latex_problems(good.replace("c &", "max_logit &"))
    assert latex_problems(good.replace("\\midrule\n", "")) == ["rules ['toprule', 'bottomrule']"]
    assert "unknown command \\hline" in latex_problems(good.replace("\\toprule", "\\hline"))
    assert latex_text("a_b & 50% #1 {x} ~^\\") == (
        "a\\_b \\& 50\\% \\#1 \\{x\\} \\textasciitilde{}\\textasciicircum{}\\textbackslash{}"
    )


def separated(n_seeds: int = 12, gap: float = 0.05) -> xr.Dataset:
    """Synthetic results in which energy beats every other method by ``gap`` in every metric
    (per-seed noise 0.004), and msp and max_logit are tied within noise."""
    results = synthetic_results(n_seeds, methods=METHODS, failed=())
    rng = np.random.default_rng(1)
    score = results["score"].transpose("seed", "method", "metric", ...)
    values = score.values.copy()
    base = {"msp": 0.80, "max_logit": 0.801, "energy": 0.80 + gap, "pytorch_ood:KNN": 0.78}
    for m, method in enumerate(METHODS):
        for k, metric in enumerate(score["metric"].values):
            mean = base[method] if higher_is_better(metric) else 1 - base[method]
            values[:, m, k] = (mean + rng.normal(0, 0.004, n_seeds))[:, None]
    results["score"] = score.copy(data=values)
    return results


def oracle_best(results: xr.Dataset, metrics: list[str], alpha: float) -> dict[str, str | None]:
    """The significantly best method per metric: scipy's paired t test of every pair in every
    metric, statsmodels' Holm over all of them, the best mean winning all its tests."""
    score = results["score"].squeeze("severity", drop=True)
    tests, pairs = [], []
    for metric in metrics:
        for a, b in itertools.combinations(METHODS, 2):
            x, y = (score.sel(metric=metric).sel({"method": m}).values for m in (a, b))
            tests.append(sps.ttest_rel(x, y).pvalue)
            pairs.append((metric, a, b))
    rejected = dict(zip(pairs, multipletests(tests, alpha=alpha, method="holm")[0], strict=True))
    best = {}
    for metric in metrics:
        sign = 1 if higher_is_better(metric) else -1
        means = {
            m: sign * float(score.sel(metric=metric).sel({"method": m}).mean()) for m in METHODS
        }
        top = max(means, key=means.get)
        wins = all(
            rejected.get((metric, top, o), rejected.get((metric, o, top))) and means[top] > means[o]
            for o in METHODS
            if o != top
        )
        best[metric] = top if wins else None
    return best


@pytest.mark.parametrize("gap", [0.05, 0.0005])
def test_bold_marks_exactly_the_method_holms_paired_tests_call_best(gap: float) -> None:
    results = separated(gap=gap)
    metrics = ["auroc", "aupr_in", "aupr_out", "fpr95"]
    table = paper_table(results)
    assert table.metrics == tuple(metrics) and table.n_tests == 6 * 4
    want = oracle_best(results, metrics, 0.05)
    assert set(want.values()) == ({"energy"} if gap == 0.05 else {None})
    (values,) = table.cells.values()
    for metric in metrics:
        marked = [m for m in METHODS if values[(m, metric)].significantly_best]
        assert marked == ([want[metric]] if want[metric] else [])
    latex = latex_table(table)
    assert latex_problems(latex) == []
    assert latex.count("\\textbf{") == (4 if gap == 0.05 else 0)
    assert "pytorch\\_ood:KNN &" in latex and "max\\_logit &" in latex
    assert "Holm adjustment over the 24 tests of the table, alpha = 0.05" in latex
    assert "paired t test" in table.caption and "FPR95 $\\downarrow$" in latex


def test_the_csv_holds_the_estimates_at_full_precision() -> None:
    results = separated()
    rows = list(csv.DictReader(io.StringIO(csv_table(paper_table(results)))))
    assert tuple(rows[0]) == CSV_COLUMNS and len(rows) == len(METHODS) * 4
    est = estimate(results)
    for row in rows:
        cell = est.oodsim.sel(method=row["method"], metric=row["metric"])
        assert float(row["mean"]) == float(cell["mean"])
        assert float(row["lower"]) == float(cell["lower"]) and int(row["n"]) == int(cell["n"])
    energy = [r for r in rows if r["method"] == "energy"]
    assert all(r["significantly_best"] == "True" == r["best_mean"] for r in energy)


def test_every_cell_of_a_varying_dim_gets_its_own_tabular() -> None:
    results = synthetic_results(8, methods=METHODS, oods=("svhn", "noise"), failed=())
    latex = latex_table(paper_table(results))
    assert latex.count("\\begin{tabular}") == 2 and "ood=svhn" in latex
    assert latex_problems(latex) == []


def test_the_report_command_writes_the_tables_it_is_asked_for(tmp_path: Path, capsys) -> None:
    path = save_results(separated(), tmp_path / "r.zarr")
    out = tmp_path / "report"
    assert (
        cli_main(["report", str(path), "--out", str(out), "--no-figures", "--latex", "--csv"]) == 0
    )
    printed = capsys.readouterr().out
    assert f"latex table written to {out / 'table.tex'}" in printed
    assert f"csv table written to {out / 'table.csv'}" in printed
    assert latex_problems((out / "table.tex").read_text()) == []
    summary = (out / "summary.md").read_text()
    assert "## Tables for papers" in summary and "[table.csv](table.csv)" in summary
    write_report(separated(), tmp_path / "plain", figures=False, n_draws=50)
    assert not (tmp_path / "plain" / "table.tex").exists()
    with pytest.raises(ValueError, match="tables must be among latex, csv"):
        write_report(separated(), tmp_path / "x", figures=False, tables=("pdf",))
