"""Tests of how the report's figures look: axis limits, panels, legends, styles and titles.

Each test builds the real figure (the plot function's own code path) and inspects the matplotlib
objects it saved: what is drawn, not how long it takes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.colors import rgb_to_hsv, to_rgb
from matplotlib.figure import Figure

from oodsim.report import (
    method_family,
    method_styles,
    plot_distributions,
    plot_forest,
    plot_paired_differences,
    plot_required_simulations,
    plot_running_mean,
    plot_win_probability,
)
from oodsim.report.figures import save
from oodsim.report.severity import plot_improvement, plot_levels
from oodsim.specs import load_spec
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

    for module in ("plots", "decisions", "severity", "comparisons"):
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
    assert "markers: seeds" in ax.get_xlabel()


def test_styles_tell_fifteen_methods_apart_and_are_shared() -> None:
    names = [*TWELVE, "mine_a", "mine_b", "mine_c"]  # the shipped twelve and three of a user's
    styles = method_styles(names)
    assert len({str(s["color"]) for s in styles.values()}) == 15
    assert len({s["marker"] for s in styles.values()}) == 15
    # a method's style depends on its place in the results, not on the figure
    assert method_styles(names[:3]) == {n: styles[n] for n in names[:3]}


def _hue(colour: object) -> float:
    return float(rgb_to_hsv(to_rgb(colour))[0])


def test_methods_are_coloured_by_family() -> None:
    styles = method_styles([*TWELVE, "my_detector"])
    assert method_family("msp") == method_family("energy") == method_family("energy_t2")
    assert method_family("mahalanobis") == "feature" and method_family("my_detector") == "other"
    msp, energy, maha = (styles[m]["color"] for m in ("msp", "energy", "mahalanobis"))
    # two softmax-family methods: one hue (the family's colour map), two shades
    assert abs(_hue(msp) - _hue(energy)) < 0.03 and str(msp) != str(energy)
    assert abs(_hue(msp) - _hue(maha)) > 0.15  # the feature family's hue is another
    assert abs(_hue(styles["mc_dropout"]["color"]) - _hue(msp)) > 0.15
    grey = rgb_to_hsv(to_rgb(styles["my_detector"]["color"]))
    assert grey[1] < 0.05  # a user's detector: the neutral (grey) family


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
        "other",
        "pytorch_ood:GEN",
    ]
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
    bars = panels(figures[2])[0].patches  # both pairings: independent bars, then paired ones
    assert [b.get_facecolor() for b in bars] == 2 * [
        pytest.approx(np.array(style["color"])) for style in expected.values()
    ]
    assert [str(b.get_hatch() or "") for b in bars] == 3 * ["////"] + 3 * [""]


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


def _inside(fig: Figure) -> None:
    """Every title of ``fig`` lies within the figure."""
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    titles = [fig._suptitle] + [ax.title for ax in fig.axes]
    for text in filter(None, titles):
        box = text.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= fig.bbox.x1, text.get_text()


def test_titles_fit_their_figures(tmp_path: Path, figures: list[Figure]) -> None:
    results = synthetic_results(6, methods=TWELVE[:3], oods=("svhn", "uniform noise"))
    plot_win_probability(results, tmp_path / "w.png", k=5, n_draws=100, pairing="paired")
    plot_required_simulations(results, tmp_path / "r.png")
    sweep = synthetic_results(3, levels=("0", "1"), models=("a", "b"), failed=())
    plot_levels(sweep, tmp_path / "l.png")
    plot_improvement(sweep, tmp_path / "i.png", baseline="msp")
    for fig in figures:
        _inside(fig)


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
