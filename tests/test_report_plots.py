"""Tests of how the report's figures look: axis limits, panels, legends, styles and titles,
and that no drawn text runs into another.

Each test builds the real figure (the plot function's own code path) and inspects the matplotlib
objects it saved: what is drawn, not how long it takes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.colors import rgb_to_hsv, to_rgb, to_rgba
from matplotlib.figure import Figure
from matplotlib.text import Annotation, Text

from oodsim.detectors import builtin_detectors, families
from oodsim.report import (
    method_detectors,
    method_family,
    method_style,
    method_styles,
    plot_distributions,
    plot_forest,
    plot_paired_differences,
    plot_required_simulations,
    plot_running_mean,
    plot_win_probability,
    write_report,
)
from oodsim.report.figures import save
from oodsim.report.folder import REPORT_MARKER
from oodsim.report.selective import plot_risk_coverage
from oodsim.report.severity import plot_improvement, plot_levels
from oodsim.report.styles import CONTEXT
from oodsim.specs import DetectorSpec, load_spec
from oodsim.stats import StopDecision
from tests.conftest import ROOT
from tests.factories import synthetic_results

#: the twelve detectors of the shipped digits spec, the largest method list of a real report
TWELVE = tuple(d.label for d in load_spec(ROOT / "specs" / "digits.toml").detectors)


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """Every figure the report functions save during the test, in order."""
    saved: list[Figure] = []

    def keep(fig: Figure, path: str | Path) -> Path:
        saved.append(fig)
        return save(fig, path)

    for module in ("plots", "decisions", "severity", "comparisons", "sources", "selective"):
        monkeypatch.setattr(f"oodsim.report.{module}.save", keep)
    return saved


def panels(fig: Figure) -> list:
    """The data axes of a figure (not its colour bar)."""
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def legend_labels(fig: Figure) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def test_running_mean_stays_in_the_metric_range_with_intervals_from_three_seeds(
    tmp_path: Path, figures: list[Figure]
) -> None:
    two = synthetic_results(2, methods=TWELVE, failed=())
    plot_running_mean(two, tmp_path / "two.png", "auroc")
    (ax,) = panels(figures[-1])
    low, high = ax.get_ylim()
    auroc = two["score"].sel(metric="auroc").values
    means = np.concatenate([auroc[0], auroc.mean(axis=0)])  # the running means at n = 1, 2
    assert 0.0 <= low <= means.min() and means.max() <= high <= 1.0
    assert high - low < 0.1  # fits the means, not a 2-seed interval
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]  # no interval
    assert not [t for t in legend_labels(figures[-1]) if "interval" in t]

    many = synthetic_results(12, methods=TWELVE[:4])
    many["score"].loc[{"metric": "fpr95"}] = np.linspace(0.0, 1.0, 12)[:, None, None]
    plot_running_mean(many, tmp_path / "many.png", "fpr95")
    (ax,) = panels(figures[-1])
    assert [c for c in ax.collections if isinstance(c, PolyCollection)]
    low, high = ax.get_ylim()
    assert 0.0 <= low < high <= 1.0
    # the legend is the figure's, outside the axes, one entry per method
    assert ax.get_legend() is None
    assert legend_labels(figures[-1])[:5] == ["softmax / logit", *TWELVE[:4]]


@pytest.mark.parametrize("metric", ["auroc", "fpr95"])
def test_a_crowded_running_mean_draws_the_best_four_in_colour_and_the_rest_grey(
    tmp_path: Path, figures: list[Figure], metric: str
) -> None:
    results = synthetic_results(10, methods=TWELVE)
    plot_running_mean(results, tmp_path / "r.png", metric)
    (ax,) = panels(figures[-1])
    final = np.nanmean(results["score"].sel(metric=metric).values, axis=0)[:, 0]
    order = np.argsort(-final if metric == "auroc" else final)  # fpr95: lower is better
    best = [TWELVE[i] for i in sorted(order[:4])]
    styles = method_styles(TWELVE)
    lines = [line for line in ax.get_lines() if line.get_xdata().size > 1]
    grey = [line for line in lines if to_rgba(line.get_color()) == to_rgba(CONTEXT)]
    coloured = {to_rgba(line.get_color()) for line in lines if line not in grey}
    assert len(grey) == 8 and coloured == {to_rgba(styles[m]["color"]) for m in best}
    labels = legend_labels(figures[-1])
    assert [m for m in labels if m in TWELVE] == best and "8 other methods" in labels
    assert "the best 4 by the final mean in colour" in " ".join(figures[-1].get_suptitle().split())


def test_no_classifier_accuracy_in_detector_plots(tmp_path: Path, figures: list[Figure]) -> None:
    results = synthetic_results(8)
    plot_distributions(results, tmp_path / "d.png")
    titles = [ax.get_title() for ax in panels(figures[-1])]
    assert titles == ["auroc", "aupr_in", "aupr_out", "fpr95"]
    for plot in (plot_distributions, plot_running_mean, plot_required_simulations):
        with pytest.raises(ValueError, match="not an OOD metric"):
            plot(results, tmp_path / "x.png", "accuracy")


def test_few_seeds_are_drawn_as_points_not_a_density(tmp_path: Path, figures: list[Figure]) -> None:
    plot_distributions(synthetic_results(3, failed=()), tmp_path / "d.png", "auroc")
    (ax,) = panels(figures[-1])
    assert [t.get_text() for t in ax.get_yticklabels()] == ["msp", "odin", "energy"]
    assert "markers are seeds" in figures[-1].get_suptitle()


def _look(style: dict) -> tuple:
    return to_rgba(style["color"]), style["marker"], style["linestyle"]


def test_a_method_keeps_its_style_whatever_else_a_report_holds() -> None:
    users = ["mine_a", "mine_b", "pytorch_ood:GEN", "energy(temperature=2.0)"]
    names = [*TWELVE, *users]
    styles = method_styles(names)
    assert len({_look(s) for s in styles.values()}) == len(names)  # never two alike
    assert len({to_rgba(styles[m]["color"]) for m in TWELVE}) == 12  # twelve colours
    assert len({styles[m]["marker"] for m in TWELVE}) == 12
    # the same style in a report of any other methods, in any order
    rng = np.random.default_rng(0)
    for size in (1, 3, 7):
        some = list(rng.choice(names, size, replace=False))
        assert method_styles(some) == {m: styles[m] for m in some}
        assert method_styles(some[::-1]) == {m: styles[m] for m in some}
    assert all(method_style(m) == styles[m] for m in names)


@pytest.mark.slow
def test_a_methods_style_is_the_same_in_another_process() -> None:
    """Python's ``hash()`` of a string changes with every process (PYTHONHASHSEED): a style
    drawn from it would change from one report to the next."""
    names = ["mine_a", "pytorch_ood:GEN", "energy(temperature=2.0)", "msp", "vim"]
    code = (
        "import json, sys; from oodsim.report import method_styles; "
        "print(json.dumps(method_styles(sys.argv[1:])))"
    )
    looks = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [sys.executable, "-c", code, *names], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        looks.append(json.loads(done.stdout))
    assert looks[0] == looks[1] == method_styles(names)


def _hue(colour: object) -> float:
    return float(rgb_to_hsv(to_rgb(colour))[0]) * 360


def test_methods_are_coloured_by_the_family_their_detector_record_names() -> None:
    records = {d.name: d.family for d in builtin_detectors()}
    assert set(records) >= set(TWELVE)
    assert records["mc_dropout"] == "sampling (MC dropout)" and records["vim"] == "feature"
    assert all(method_family(name) == family for name, family in records.items())
    assert method_family("energy_t2") == method_family("energy(temperature=2)") == records["energy"]
    assert method_family("pytorch_ood:GEN") == "pytorch-ood"
    assert method_family("my_detector") == "other"
    styles = method_styles([*TWELVE, "pytorch_ood:GEN", "my_detector"])
    hues = {  # each family's colours are of one kind: hue (degrees) within reach of a centre
        "softmax / logit": (235, 55),  # blues, cyans, purples
        "sampling (MC dropout)": (15, 30),  # oranges, reds
        "feature": (120, 50),  # greens
        "pytorch-ood": (325, 20),  # pinks
    }
    for method, style in styles.items():
        family = method_family(method)
        if family in hues:
            centre, reach = hues[family]
            away = abs((_hue(style["color"]) - centre + 180) % 360 - 180)
            assert away <= reach, (method, style["color"])
    other = to_rgb(styles["my_detector"]["color"])
    assert other not in [to_rgb(styles[m]["color"]) for m in TWELVE]


def test_a_label_takes_the_family_of_the_detector_its_spec_names(
    tmp_path: Path, figures: list[Figure]
) -> None:
    knn = DetectorSpec(name="knn", label="fast")
    results = synthetic_results(8, methods=(knn, "msp", "vim"))
    detectors = method_detectors(results)
    assert detectors == {"fast": "knn", "msp": "msp", "vim": "vim"}
    assert method_family("fast", detectors) == "feature" and method_family("fast") == "other"
    # the label is not the built-in knn: a style of its own, the feature family's colours
    assert method_style("fast", detectors) != method_style("knn")
    plot_forest(results, tmp_path / "f.png", "auroc")
    assert legend_labels(figures[-1]) == ["softmax / logit", "msp", "feature", "fast", "vim"]


def test_the_legend_groups_methods_under_their_family(
    tmp_path: Path, figures: list[Figure]
) -> None:
    methods = ("msp", "mahalanobis", "energy", "mc_dropout", "pytorch_ood:GEN")
    plot_distributions(synthetic_results(8, methods=methods), tmp_path / "d.png", "auroc")
    labels = legend_labels(figures[-1])
    assert labels == [
        "softmax / logit",
        "msp",
        "energy",
        "sampling (MC dropout)",
        "mc_dropout",
        "feature",
        "mahalanobis",
        "pytorch-ood",
        "pytorch_ood:GEN",
    ]
    assert [f for f in labels if f in families()] == [f for f in families() if f in labels]
    weights = {t.get_text(): t.get_fontweight() for t in figures[-1].legends[0].get_texts()}
    assert weights["feature"] == "bold" and weights["msp"] == "normal"


def test_forest_sorts_methods_best_first_by_the_metrics_direction(
    tmp_path: Path, figures: list[Figure]
) -> None:
    # auroc rises msp < odin < energy; fpr95 = 1 - score falls: energy is best in both
    results = synthetic_results(20)
    plot_forest(results, tmp_path / "f.png")
    axes = {ax.get_title(): ax for ax in panels(figures[-1])}
    assert list(axes) == ["auroc", "aupr_in", "aupr_out", "fpr95"]  # no accuracy panel
    for ax in axes.values():
        assert [t.get_text() for t in ax.get_yticklabels()] == ["energy", "odin", "msp"]
    assert axes["auroc"].get_xlabel() == "auroc (higher is better)"
    assert axes["fpr95"].get_xlabel() == "fpr95 (lower is better)"
    with pytest.raises(ValueError, match="not an OOD metric"):
        plot_forest(results, tmp_path / "x.png", ["accuracy"])


def test_lower_is_better_on_every_per_metric_figure(tmp_path: Path, figures: list[Figure]) -> None:
    results = synthetic_results(8)
    plot_distributions(results, tmp_path / "d.png", "fpr95")
    plot_running_mean(results, tmp_path / "r.png", "fpr95")
    plot_win_probability(results, tmp_path / "w.png", "fpr95", k=5, n_draws=100)
    plot_forest(results, tmp_path / "f.png", "fpr95")
    sweep = synthetic_results(3, levels=("0", "1"), models=("a", "b"), failed=())
    plot_levels(sweep, tmp_path / "l.png", "fpr95")
    plot_improvement(sweep, tmp_path / "i.png", metric="fpr95")
    for fig in figures:
        labels = [ax.get_xlabel() + ax.get_ylabel() + ax.get_title() for ax in panels(fig)]
        assert all("lower is better" in label for label in labels), labels


def test_no_colour_bar_of_a_single_value_or_of_two_to_three_seeds(
    tmp_path: Path, figures: list[Figure]
) -> None:
    def bars(fig: Figure) -> list:
        return [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]

    plot_required_simulations(synthetic_results(3, failed=()), tmp_path / "r.png")
    assert not bars(figures[-1])
    plot_paired_differences(synthetic_results(2, failed=()), tmp_path / "p.png")
    assert not bars(figures[-1])  # nothing significant at 2 seeds: every cell grey
    plot_paired_differences(synthetic_results(30), tmp_path / "p30.png")
    (bar,) = bars(figures[-1])
    low, high = bar.get_ylim()
    assert high > low


def test_one_model_is_not_called_across_models(tmp_path: Path, figures: list[Figure]) -> None:
    one = synthetic_results(3, levels=("0", "1", "2"), failed=())
    plot_improvement(one, tmp_path / "i.png")
    fig = figures[-1]
    assert "across" not in fig.get_suptitle() and "model_a" in fig.get_suptitle()
    assert all(not ax.patches for ax in panels(fig))  # a line per panel, no one-value boxes
    plot_improvement(synthetic_results(3, levels=("0", "1"), models=("a", "b")), tmp_path / "j")
    assert "across 2 models" in figures[-1].get_suptitle()


def test_a_method_looks_the_same_in_every_figure(tmp_path: Path, figures: list[Figure]) -> None:
    results = synthetic_results(8)
    plot_distributions(results, tmp_path / "d.png", "auroc")
    plot_running_mean(results, tmp_path / "r.png")
    plot_win_probability(results, tmp_path / "w.png", k=5, n_draws=200)
    expected = method_styles(["msp", "odin", "energy"])
    for fig in figures[:2]:
        handles = {h.get_label(): h for legend in fig.legends for h in legend.legend_handles}
        for method, style in expected.items():
            assert handles[method].get_color() == style["color"]
            assert handles[method].get_marker() == style["marker"]
    (ax,) = panels(figures[2])  # a row per method, the likeliest winner first
    rows = [t.get_text() for t in ax.get_yticklabels()]
    assert sorted(rows) == sorted(expected)
    bars = [p for p in ax.patches if p.get_width() > 0 or p.get_height() > 0]
    independent = [b for b in bars if b.get_hatch()]
    paired = [b for b in bars if not b.get_hatch()]
    assert len(independent) == len(paired) == 3  # both pairings: one bar each
    by_row = sorted(paired, key=lambda b: b.get_y())
    assert [to_rgba(b.get_facecolor()) for b in by_row] == [
        to_rgba(expected[m]["color"]) for m in rows
    ]
    by_row = sorted(independent, key=lambda b: b.get_y())
    assert [to_rgba(b.get_edgecolor()) for b in by_row] == [
        to_rgba(expected[m]["color"]) for m in rows
    ]


def test_required_simulations_has_a_colour_bar_and_marks_unseparated_pairs(
    tmp_path: Path, figures: list[Figure]
) -> None:
    plot_required_simulations(synthetic_results(10), tmp_path / "r.png")
    fig = figures[-1]
    (bar,) = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert bar.get_ylabel() == "seeds needed"
    labels = legend_labels(fig)
    assert labels == ["not separated in 10 seeds", "diagonal: a method against itself"]
    (patch, diagonal) = fig.legends[0].get_patches()
    assert patch.get_facecolor() != diagonal.get_facecolor()
    texts = [t.get_text() for t in panels(fig)[0].texts]
    assert ">10" in texts


def drawn_texts(fig: Figure) -> tuple[list[Text], object]:
    """The Text artists (titles, labels, tick labels, legends, value labels) that drawing
    ``fig`` draws, not blank, and the renderer that laid them out. The figure is drawn as
    ``Figure.draw_without_rendering`` draws it (layout and text sizes, no pixels), with the
    renderer's text calls recorded: the same texts at the same places, without rasterizing."""
    renderer = FigureCanvasAgg(fig).get_renderer()
    drawn: list[Text] = []

    def record(gc, x, y, s, prop, angle, ismath=False, mtext=None):  # noqa: ANN001, ANN202
        if mtext is not None and mtext not in drawn:
            drawn.append(mtext)

    with renderer._draw_disabled():  # every draw_* a no-op, as draw_without_rendering does
        renderer.draw_text = record
        fig.draw(renderer)
    return [t for t in drawn if t.get_text().strip()], renderer


def _corners(text: Text, renderer: object) -> np.ndarray:
    """The four corners of ``text``'s box on the canvas (pixels): its window extent, or for a
    text turned by an angle other than 0 or 90 degrees the turned box itself (the extent of a
    turned text is the upright box around it, wider than the text)."""
    box = text.get_window_extent(renderer)
    angle = text.get_rotation() % 180
    if min(angle, 180 - angle, abs(angle - 90)) < 1e-6:
        return np.array([[box.x0, box.y0], [box.x1, box.y0], [box.x1, box.y1], [box.x0, box.y1]])
    text.set_rotation(0)
    flat = text.get_window_extent(renderer)
    text.set_rotation(angle)
    half = np.array([flat.width, flat.height]) / 2
    turn = np.radians(angle)
    rotation = np.array([[np.cos(turn), -np.sin(turn)], [np.sin(turn), np.cos(turn)]])
    local = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]]) * half
    return np.array([box.x0 + box.x1, box.y0 + box.y1]) / 2 + local @ rotation.T


def _overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two convex quadrilaterals overlap by more than half a pixel (separating axes)."""
    for shape in (a, b):
        for i in range(4):
            edge = shape[(i + 1) % 4] - shape[i]
            axis = np.array([-edge[1], edge[0]]) / np.hypot(*edge)
            on_a, on_b = a @ axis, b @ axis
            if on_a.max() <= on_b.min() + 0.5 or on_b.max() <= on_a.min() + 0.5:
                return False
    return True


def _close_pairs(shapes: list[np.ndarray]) -> list[tuple[int, int]]:
    """The pairs ``(i, j)``, i < j, whose upright bounding boxes overlap by more than half a
    pixel: the only pairs whose shapes can (:func:`_overlap` decides), found at once."""
    if len(shapes) < 2:
        return []
    corners = np.stack(shapes)
    low, high = corners.min(axis=1), corners.max(axis=1)  # (text, xy)
    apart = (high[:, None] <= low[None, :] + 0.5) | (high[None, :] <= low[:, None] + 0.5)
    close = ~apart.any(axis=2)
    first, second = np.nonzero(np.triu(close, k=1))
    return list(zip(first.tolist(), second.tolist(), strict=True))


#: The smallest font of any drawn text, and of a value label (a bar's number), in points.
MIN_FONT, MIN_VALUE_FONT = 7.0, 8.0


def text_problems(fig: Figure) -> list[str]:
    """What is wrong with the drawn text of ``fig``: texts that overlap, texts not wholly in
    the figure, fonts below :data:`MIN_FONT` (value labels below :data:`MIN_VALUE_FONT`), and
    value labels that an error bar runs into."""
    texts, renderer = drawn_texts(fig)
    shapes = [_corners(t, renderer) for t in texts]
    found = [
        f"{texts[i].get_text()!r} overlaps {texts[j].get_text()!r}"
        for i, j in _close_pairs(shapes)
        if _overlap(shapes[i], shapes[j])
    ]
    width, height = fig.bbox.width, fig.bbox.height
    for text, shape in zip(texts, shapes, strict=True):
        low, high = shape.min(axis=0), shape.max(axis=0)
        if low.min() < -0.5 or high[0] > width + 0.5 or high[1] > height + 0.5:
            found.append(f"{text.get_text()!r} leaves the figure")
        least = MIN_VALUE_FONT if isinstance(text, Annotation) else MIN_FONT
        if text.get_fontsize() < least:
            found.append(f"{text.get_text()!r} is {text.get_fontsize()} pt")
    for ax in fig.axes:  # error bars are line collections of their axes
        labels = [(t, s) for t, s in zip(texts, shapes, strict=True) if t.axes is ax]
        for lines in (c for c in ax.collections if isinstance(c, LineCollection)):
            for segment in lines.get_segments():
                ends = ax.transData.transform(segment)
                pad = np.array([[-0.5, -0.5], [0.5, -0.5], [0.5, 0.5], [-0.5, 0.5]])
                bar = ends.mean(axis=0) + pad + np.abs(ends[1] - ends[0]) / 2 * np.sign(pad)
                found += [
                    f"an error bar runs into {t.get_text()!r}"
                    for t, s in labels
                    if isinstance(t, Annotation) and _overlap(bar, s)
                ]
    return found


def test_text_problems_finds_overlaps_small_and_outside_text() -> None:
    fig = Figure(figsize=(4, 3), layout="constrained")
    ax = fig.add_subplot()
    ax.text(0.5, 0.5, "one label", fontsize=10)
    ax.text(0.52, 0.52, "another", fontsize=10)  # on top of the first
    ax.annotate("0.42", (0.1, 0.1), fontsize=6)  # a value label too small to read
    fig.suptitle("a title much too long for a figure four inches wide, on one line of text")
    # turned labels whose upright boxes overlap, though the labels themselves stand apart
    ax.set_xticks(np.linspace(0, 1, 11), ["a longer label"] * 11, rotation=45, ha="right")
    found = text_problems(fig)
    assert "'one label' overlaps 'another'" in found and "'0.42' is 6.0 pt" in found
    assert any(p.startswith("'a title much too long") and "leaves" in p for p in found)
    assert not [p for p in found if "a longer label" in p]
    ax.set_xticks(np.linspace(0, 1, 11), ["a longer label"] * 11, rotation=10, ha="right")
    assert "'a longer label' overlaps 'a longer label'" in text_problems(fig)


def test_twelve_methods_win_probabilities_have_readable_labels_clear_of_their_error_bars(
    tmp_path: Path, figures: list[Figure]
) -> None:
    results = synthetic_results(8, methods=TWELVE)
    plot_win_probability(results, tmp_path / "w.png", k=5, n_draws=100, n_boot=20)
    (ax,) = panels(figures[-1])
    assert len([t for t in ax.texts if isinstance(t, Annotation)]) == 24  # a label per bar
    assert text_problems(figures[-1]) == []


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["open set", "severity"])
def test_no_text_of_any_figure_of_a_report_of_many_methods_overlaps(
    tmp_path: Path, figures: list[Figure], protocol: str
) -> None:
    if protocol == "open set":
        results = synthetic_results(30, methods=TWELVE)  # the layout of specs/digits.toml
        expected = {"forest", "distributions", "paired_differences", "running_mean"}
    else:
        levels, models = ("0", "1"), ("resnet", "vit", "convnext")  # 3 models: correlations
        methods = TWELVE[:8]  # more than five: the levels' figure greys all but the best few
        results = synthetic_results(6, methods=methods, levels=levels, models=models, failed=())
        expected = {"auroc_by_level", "auroc_improvement", "auroc_correlation"}
    results.attrs["stopping"] = StopDecision(True, "ci_width", "narrow", 0.004, 5).to_json()
    write_report(results, tmp_path / "report", n_draws=200)
    drawn = {
        Path(p).stem for p in json.loads((tmp_path / "report" / REPORT_MARKER).read_text())["files"]
    }
    assert expected <= drawn and "win_probability" in drawn
    assert len(figures) == len([name for name in drawn if not name.endswith("summary")])
    for fig in figures:
        assert text_problems(fig) == [], fig.get_suptitle()


def test_titles_fit_their_figures(tmp_path: Path, figures: list[Figure]) -> None:
    results = synthetic_results(6, methods=TWELVE[:3], oods=("svhn", "uniform noise"))
    plot_win_probability(results, tmp_path / "w.png", k=5, n_draws=100, pairing="paired")
    plot_required_simulations(results, tmp_path / "r.png")
    sweep = synthetic_results(3, levels=("0", "1"), models=("a", "b"), failed=())
    plot_levels(sweep, tmp_path / "l.png")
    plot_improvement(sweep, tmp_path / "i.png", baseline="msp")
    for fig in figures:
        assert not [p for p in text_problems(fig) if "leaves the figure" in p]


def test_severity_levels_share_the_styles_and_one_outside_legend(
    tmp_path: Path, figures: list[Figure]
) -> None:
    sweep = synthetic_results(3, levels=("0", "1", "2"), models=("a", "b"), failed=())
    plot_levels(sweep, tmp_path / "l.png")
    fig = figures[-1]
    assert all(ax.get_legend() is None for ax in fig.axes)
    styles = method_styles(sweep["method"].values)
    handles = {h.get_label(): h for h in fig.legends[0].legend_handles}
    assert {m: handles[m].get_marker() for m in styles} == {
        m: s["marker"] for m, s in styles.items()
    }
    assert [ax.get_title().split(" (")[0] for ax in fig.axes] == ["a", "b"]


def test_the_risk_coverage_figure_of_twelve_methods_greys_all_but_the_best_few(
    tmp_path: Path, figures: list[Figure]
) -> None:
    results = synthetic_results(10, methods=TWELVE, failed=())
    coverage = np.round(np.arange(1, 21) * 0.05, 2)
    rng = np.random.default_rng(0)
    slope = np.linspace(0.02, 0.08, len(TWELVE))[None, :, None]
    curve = np.clip(slope * coverage**2 + rng.normal(0, 0.002, (10, len(TWELVE), 20)), 0, 1)
    results = results.assign_coords(coverage=coverage)
    results["risk_coverage"] = (("seed", "method", "coverage"), curve)
    assert plot_risk_coverage(results, tmp_path / "rc.png").is_file()
    (fig,) = [f for f in figures if "Risk–coverage" in f.get_suptitle()]
    (ax,) = panels(fig)
    coloured = [line for line in ax.get_lines() if line.get_marker() not in ("None", None, "")]
    assert len(coloured) == 4  # the four with the lowest curves
    assert text_problems(fig) == []
    assert "mean over 10 seeds" in fig.get_suptitle()
