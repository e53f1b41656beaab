"""C-OOD severity levels: exact windows, monotone difficulty, fast AUROC == sklearn; analyses
and reports of results built by the real results constructor (seed and dataset dims)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr
from sklearn.metrics import auc, precision_recall_curve, roc_auc_score

from oodsim.errors import SpecError, UnknownNameError
from oodsim.protocols.severity import analysis as sa
from oodsim.protocols.severity import levels as sev
from oodsim.protocols.severity.scoring import layout
from oodsim.protocols.severity.spec import PoolSpec, SeveritySpec, SourceSpec
from oodsim.report.severity import format_level_table, write_severity_report
from oodsim.results import DEGENERATE, SeedResult, build
from oodsim.specs import SeedsSpec
from oodsim.zoo import ModelRef


def test_windows_k25_g5_match_hand_written_starts() -> None:
    # K=25, G=5 -> M=21 windows; level i starts at int(i/10 * 21), the last at 20.
    expected_starts = [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20]
    assert sev.window_starts(25, 5, 11).tolist() == expected_starts
    severity = np.random.default_rng(0).permutation(25).astype(float)  # class c has rank sev[c]
    levels = sev.severity_levels(severity, group_size=5)
    assert len(levels) == 11
    order = np.argsort(severity)
    for level, start in zip(levels, expected_starts):
        assert level.tolist() == order[start : start + 5].tolist()
        assert sorted(severity[level].tolist()) == list(range(start, start + 5))
    assert levels[0].tolist() == order[:5].tolist()  # easiest: lowest mean κ
    assert levels[-1].tolist() == order[-5:].tolist()  # hardest
    assert np.all(np.diff(sev.level_severity(severity, levels)) > 0)


def test_windows_edge_cases_and_ties() -> None:
    assert sev.window_starts(5, 5, 3).tolist() == [0, 0, 0]  # one window only
    assert sev.window_starts(10, 1, 2).tolist() == [0, 9]
    levels = sev.severity_levels(np.zeros(4), group_size=2, n_levels=3)  # ties: stable
    assert [lv.tolist() for lv in levels] == [[0, 1], [1, 2], [2, 3]]


@pytest.mark.parametrize(
    ("severity", "group_size", "n_levels"),
    [
        (np.arange(4.0), 5, 11),
        (np.arange(4.0), 0, 11),
        (np.arange(4.0), 2, 1),
        (np.array([0.0, np.nan, 1.0]), 2, 11),
        (np.ones((2, 2)), 1, 11),
    ],
)
def test_severity_levels_rejects_bad_input(severity, group_size, n_levels) -> None:
    with pytest.raises(SpecError):
        sev.severity_levels(severity, group_size, n_levels)


def test_class_severity_is_mean_per_class_and_batches() -> None:
    rng = np.random.default_rng(1)
    kappa = rng.random((3, 40))
    cls = rng.integers(0, 6, 40)
    cls[:6] = np.arange(6)
    got = sev.class_severity(kappa, cls, 6)
    want = np.stack([[row[cls == c].mean() for c in range(6)] for row in kappa])
    np.testing.assert_allclose(got, want)
    assert np.isnan(sev.class_severity(kappa[0], cls % 5, 6)[5])  # empty class -> NaN


def test_split_drops_small_classes_and_subsamples_large() -> None:
    labels = np.repeat(np.array([10, 11, 12, 13]), [6, 3, 9, 5])
    split = sev.split_estimation_test(labels, n_est=3, n_test=2, rng=7)
    assert split.dropped == {11: 3}
    assert split.classes.tolist() == [10, 12, 13]
    assert split.est_index.size == 9 and split.test_index.size == 6
    assert not np.intersect1d(split.est_index, split.test_index).size
    assert np.array_equal(labels[split.est_index], split.classes[split.est_class])
    assert np.array_equal(labels[split.test_index], split.classes[split.test_class])
    assert np.bincount(split.est_class).tolist() == [3, 3, 3]
    assert np.bincount(split.test_class).tolist() == [2, 2, 2]
    again = sev.split_estimation_test(labels, n_est=3, n_test=2, rng=7)
    assert np.array_equal(again.est_index, split.est_index)
    other = [sev.split_estimation_test(labels, 3, 2, rng=s).est_index for s in range(5)]
    assert len({tuple(o) for o in other}) > 1  # the seed matters


def _pool(n_classes: int = 60, per_class: int = 40, n_id: int = 500, seed: int = 0):
    """OOD classes whose κ means rise steadily, plus ID κ above most of them."""
    rng = np.random.default_rng(seed)
    means = np.linspace(-2.0, 2.0, n_classes)
    ood = rng.normal(means[:, None], 1.0, (n_classes, per_class))
    perm = rng.permutation(n_classes)  # class ids unrelated to difficulty
    return rng.normal(2.0, 1.0, n_id), ood[perm], means[perm]


def test_auroc_falls_monotonically_with_severity() -> None:
    id_kappa, ood, _ = _pool()
    labels = np.repeat(np.arange(ood.shape[0]), ood.shape[1])
    result = sev.severity_benchmark(
        id_kappa, ood.ravel(), labels, group_size=10, rng=3, n_est=30, n_test=10
    )
    auroc = result.metrics["auroc"]
    assert auroc.shape == (11,)
    assert np.all(np.diff(auroc) < 0), auroc
    assert np.all(np.diff(result.level_severity) > 0)
    assert result.metrics["fpr95"][0] < result.metrics["fpr95"][-1]


def test_fast_auroc_equals_sklearn_per_level_with_ties() -> None:
    id_kappa, ood, _ = _pool(seed=5)
    id_kappa, ood = np.round(id_kappa, 1), np.round(ood, 1)  # many ties
    severity = ood[:, :20].mean(axis=1)
    levels = sev.severity_levels(severity, group_size=8)
    test = ood[:, 20:]
    got = sev.level_metrics(id_kappa, test, levels)
    for i, level in enumerate(levels):
        kappa = np.r_[id_kappa, test[level].ravel()]
        is_id = np.r_[np.ones(id_kappa.size, bool), np.zeros(test[level].size, bool)]
        assert got["auroc"][i] == pytest.approx(roc_auc_score(is_id, kappa), abs=1e-12)
        precision, recall, _ = precision_recall_curve(~is_id, -kappa)
        assert got["aupr_out"][i] == pytest.approx(auc(recall, precision), abs=1e-12)
        precision, recall, _ = precision_recall_curve(is_id, kappa)
        assert got["aupr_in"][i] == pytest.approx(auc(recall, precision), abs=1e-12)


def test_flat_input_with_unequal_levels_matches_2d_input() -> None:
    id_kappa, ood, _ = _pool(n_classes=12, per_class=6, seed=2)
    levels = sev.severity_levels(ood.mean(axis=1), group_size=4, n_levels=4)
    want = sev.level_metrics(id_kappa, ood, levels)
    flat_class = np.repeat(np.arange(12), 6)
    got = sev.level_metrics(id_kappa, ood.ravel(), levels, ood_class=flat_class)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-12)
    keep = np.ones(ood.size, bool)
    keep[:3] = False  # class 0 loses half its samples: levels get unequal sizes
    uneven = sev.level_metrics(id_kappa, ood.ravel()[keep], levels, ood_class=flat_class[keep])
    for i, level in enumerate(levels):
        in_level = np.isin(flat_class[keep], level)
        kappa = np.r_[id_kappa, ood.ravel()[keep][in_level]]
        is_id = np.r_[np.ones(id_kappa.size, bool), np.zeros(in_level.sum(), bool)]
        assert uneven["auroc"][i] == pytest.approx(roc_auc_score(is_id, kappa), abs=1e-12)
        precision, recall, _ = precision_recall_curve(~is_id, -kappa)
        assert uneven["aupr_out"][i] == pytest.approx(auc(recall, precision), abs=1e-12)


def test_level_metrics_rejects_unknown_metric_and_nan() -> None:
    id_kappa, ood, _ = _pool(n_classes=6, per_class=4)
    levels = sev.severity_levels(ood.mean(axis=1), group_size=2, n_levels=2)
    with pytest.raises(UnknownNameError, match="auroc"):
        sev.level_metrics(id_kappa, ood, levels, metrics=("aurocc",))
    with pytest.raises(SpecError, match="levels"):
        sev.level_metrics(id_kappa, ood, [])
    with pytest.raises(SpecError, match="class_index"):
        sev.class_severity(ood.ravel(), np.zeros(ood.size), 1)
    ood[0, 0] = np.nan
    with pytest.raises(SpecError, match="non-finite"):
        sev.level_metrics(id_kappa, ood, levels, metrics=("auroc",))


def test_id_auroc_matches_sklearn() -> None:
    rng = np.random.default_rng(4)
    correct = rng.random(300) < 0.7
    kappa = rng.normal(correct.astype(float), 1.0)
    assert sev.id_auroc(kappa, correct) == pytest.approx(roc_auc_score(correct, kappa))


def test_benchmark_reports_too_few_classes() -> None:
    labels = np.repeat(np.arange(5), [10, 10, 2, 2, 2])
    with pytest.raises(SpecError, match="3 smaller classes dropped"):
        sev.severity_benchmark(
            np.ones(5), np.zeros(labels.size), labels, group_size=3, rng=0, n_est=4, n_test=4
        )


# --------------------------------------------------------------------------- analyses, plots


def _spec(n_models: int, n_seeds: int, datasets: tuple[str, ...] = ("pool",)) -> SeveritySpec:
    """A severity spec of several random-weight zoo models (nothing here runs them)."""
    pools = tuple(
        PoolSpec(
            label=label,
            id=SourceSpec(kind="dataset", name="digits"),
            ood=(SourceSpec(kind="uniform_noise"),),
        )
        for label in datasets
    )
    models = tuple(
        ModelRef(name="timm:test_resnet", pretrained=False, init_seed=i, label=f"m{i}")
        for i in range(n_models)
    )
    return SeveritySpec(
        name="synthetic",
        models=models,
        detectors=("msp", "energy", "odin"),
        metrics=("auroc", "fpr95"),
        datasets=pools,
        seeds=SeedsSpec(n=n_seeds),
    )


def _results(
    n_models: int = 6,
    n_seeds: int = 3,
    datasets: tuple[str, ...] = ("pool",),
    excluded: int | None = None,
):
    """Severity results of several synthetic models, built by the real constructor: AUROC falls
    with the level and rises with accuracy; 'energy' helps at high levels, 'odin' everywhere a
    little; seeds add a little noise. Seed ``excluded`` is a collapsed training, scored at
    chance and excluded as degenerate (the default ``[degenerate] keep = false``). Returns
    (results, auroc of shape (seed, model, method, level) before noise)."""
    spec = _spec(n_models, n_seeds, datasets)
    shape = layout(spec)
    rng = np.random.default_rng(0)
    accuracy = np.sort(rng.uniform(0.6, 0.9, n_models))
    levels = np.arange(11)
    base = 0.95 - 0.03 * levels[None, :] + 0.3 * (accuracy[:, None] - 0.75)
    base = base + rng.normal(0, 0.005, base.shape)
    auroc = np.stack([base, base + 0.004 * levels, base + 0.01], axis=1)  # (model, method, level)
    id_auroc = rng.uniform(0.7, 0.9, (n_models, 3))
    seeds = []
    for seed in spec.seeds.all():
        noisy = auroc + rng.normal(0, 1e-4, auroc.shape) * (seed > 0)
        score = np.stack([noisy, 1.0 - noisy], axis=2)  # (model, method, metric, level)
        variables = {
            "score": score.transpose(1, 2, 3, 0),
            "level_severity": np.broadcast_to(levels, (3, n_models, 11)).transpose(0, 2, 1),
            "level_classes": np.full((3, 11, n_models), '["noise"]'),
            "class_severity": np.full((3, len(shape.coords["ood_class"]), n_models), 0.5),
            "id_accuracy": accuracy,
            "id_auroc": id_auroc.T,
            "n_pool_classes": np.full(n_models, 12.0),
            "group_size": np.full(n_models, 3.0),
            "dropped_classes": np.full(n_models, "{}"),
            "degenerate": np.full(n_models, ""),
        }
        failure = ""
        if seed == excluded:
            variables |= {
                "score": np.full_like(variables["score"], 0.5),
                "id_accuracy": accuracy / 9,
            }
            failure = DEGENERATE.message("model m0: balanced accuracy 0.11 (chance 0.10)")
        if spec.varies_dataset:
            variables = {k: np.stack([v] * len(datasets), axis=-1) for k, v in variables.items()}
        seeds.append(SeedResult(seed, variables, failure=failure))
    return build(spec, "severity", shape, seeds), auroc


def test_results_have_seed_model_and_optional_dataset_dims() -> None:
    results, _ = _results()
    assert results["score"].dims == ("seed", "method", "metric", "severity", "model")
    assert results["level_quantile"].values.tolist() == pytest.approx(np.arange(11) / 10)
    suite, _ = _results(datasets=("a", "b"))
    assert suite["score"].dims[-1] == "dataset" and suite.sizes["dataset"] == 2
    assert [label for label, _ in sa.per_dataset(suite)] == ["a", "b"]
    assert sa.per_dataset(results)[0][0] == ""


def test_correlation_is_spearman_across_models_per_level() -> None:
    results, _ = _results()
    rho = sa.correlation(results, "id_accuracy")
    assert rho["rho"].dims == ("method", "severity") and rho["rho"].shape == (3, 11)
    auroc = results["score"].sel(metric="auroc").mean("seed").transpose("model", "method", ...)
    for j in range(3):
        for level in range(11):
            want = spearmanr(results["id_accuracy"].values[0], auroc.values[:, j, level])
            assert rho["rho"].values[j, level] == pytest.approx(want.statistic)
            assert rho["pvalue"].values[j, level] == pytest.approx(want.pvalue)
    assert (rho["rho"].values > 0.8).all()  # accuracy predicts detection here
    by_auroc = sa.correlation(results, "id_auroc")
    id_auroc = results["id_auroc"].mean("seed").transpose("model", "method").values
    want = spearmanr(id_auroc[:, 2], auroc.values[:, 2, 4]).statistic
    assert by_auroc["rho"].values[2, 4] == pytest.approx(want)  # paired with the same κ
    assert np.isnan(sa.correlation(_results(n_models=2)[0], "id_accuracy")["rho"]).all()
    with pytest.raises(UnknownNameError, match="id_accuracy"):
        sa.correlation(results, "accuracy")
    suite, _ = _results(datasets=("a", "b"))
    per_dataset = sa.correlation(suite, "id_accuracy")["rho"]
    assert per_dataset.dims == ("method", "severity", "dataset")
    np.testing.assert_allclose(per_dataset.sel(dataset="a"), rho["rho"], atol=1e-12)


def test_improvement_over_softmax() -> None:
    results, _ = _results()
    delta = sa.improvement(results)
    assert delta.dims == ("seed", "method", "severity", "model")
    assert delta["method"].values.tolist() == ["energy", "odin"]
    np.testing.assert_allclose(delta.sel({"method": "odin"}).values, 0.01, atol=1e-3)
    first = delta.isel(seed=0).sel({"method": "energy"}).transpose("model", "severity").values
    np.testing.assert_allclose(first[0], 0.004 * np.arange(11), atol=1e-12)
    flipped = sa.improvement(results, metric="fpr95")  # lower FPR is better: same sign
    np.testing.assert_allclose(flipped.values, delta.values, atol=1e-12)
    for lower in ("fpr95_ood", "aurc"):  # every lower-is-better metric, not fpr95 alone
        names = [lower if m == "fpr95" else str(m) for m in results["metric"].values]
        renamed = sa.improvement(results.assign_coords(metric=names), metric=lower)
        np.testing.assert_allclose(renamed.values, delta.values, atol=1e-12)
    summary = sa.improvement_summary(results)
    assert summary["median"].dims == ("method", "severity")
    assert (summary["share_improved"].sel({"method": "odin"}) == 1.0).all()
    assert (summary["n_models"] == 6).all()
    trend = sa.level_trend(results)
    assert trend.dims == ("model", "method") and (trend.values < -0.9).all()
    with pytest.raises(UnknownNameError, match="msp"):
        sa.improvement(results, baseline="softmax")


def test_failed_seeds_are_skipped_by_the_means() -> None:
    results, auroc = _results(n_seeds=2)
    failed = results.copy(deep=True)
    failed["score"][1] = np.nan  # what the constructor writes for a failed seed
    failed["failure"][1] = "training diverged"
    mean = sa.seed_mean(failed["score"]).sel(metric="auroc").transpose("model", "method", ...)
    np.testing.assert_allclose(mean.values, auroc, atol=1e-12)


def test_report_writes_pngs_and_a_summary(tmp_path) -> None:
    results, auroc = _results()
    table = format_level_table(results)
    lines = table.splitlines()
    assert "mean over 3 seeds" in lines[0]
    assert lines[1].split()[:3] == ["model", "method", "0"]
    assert len(lines) == 2 + 6 * 3
    first = results.score.values[:, 0, 0, 0, 0].mean()  # msp, auroc, level 0, model m0
    assert lines[2].split()[2] == f"{first:.3f}"
    summary = write_severity_report(results, tmp_path / "report")
    text = summary.read_text()
    assert "Improvement over msp" in text and "id_accuracy vs. auroc" in text
    for name in ("auroc_by_level.png", "auroc_improvement.png", "auroc_correlation.png"):
        assert (tmp_path / "report" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_of_several_datasets_has_a_section_each(tmp_path) -> None:
    results, _ = _results(n_models=3, datasets=("a", "b"))
    table = format_level_table(results)
    assert table.splitlines()[1].split()[:3] == ["dataset", "model", "method"]
    assert len(table.splitlines()) == 2 + 2 * 3 * 3
    text = write_severity_report(results, tmp_path).read_text()
    assert "## a" in text and "## b" in text
    for label in ("a", "b"):
        assert (tmp_path / label / "auroc_by_level.png").is_file()


def test_seeds_excluded_as_degenerate_enter_no_severity_mean(tmp_path) -> None:
    """They keep their scores in the results (for the exclusion table) and were averaged into
    the level table, the improvement over softmax and the correlation with ID accuracy, under
    a seed count that left them out."""
    results, _ = _results(n_seeds=4, excluded=3)
    used = results.isel(seed=[0, 1, 2])
    assert np.isfinite(results["score"].sel(seed=3)).all()  # kept in the results
    assert sa.improvement(results).sel(seed=3).isnull().all()
    np.testing.assert_array_equal(sa.improvement(results).sel(seed=[0, 1, 2]), sa.improvement(used))
    for name in ("id_accuracy", "id_auroc"):
        want = sa.correlation(used, name)
        assert want["rho"].notnull().all()
        np.testing.assert_allclose(sa.correlation(results, name)["rho"], want["rho"])
    np.testing.assert_allclose(sa.level_trend(results), sa.level_trend(used))
    table = format_level_table(results)
    assert table.splitlines()[0].endswith("mean over 3 seeds")
    assert table == format_level_table(used)
    write_severity_report(results, tmp_path / "report")
