"""Degenerate simulations (a classifier not above chance) are named and excluded; the
parameters every detector was scored with (temperature scaling's fitted T) are recorded."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import attrs
import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps
from sklearn.metrics import balanced_accuracy_score

import oodsim
from oodsim.artifacts.keys import OUTPUTS, simulation_keys
from oodsim.artifacts.verdicts import DEGENERATE_VERDICT, verdict_key
from oodsim.detectors import confidence, get_detector
from oodsim.detectors.temperature import T_BOUNDS, fit_temperature
from oodsim.errors import StoreError
from oodsim.outputs import Outputs
from oodsim.protocols.degenerate import (
    RULE_VERSION,
    SUBSET,
    balanced_accuracy,
    closed_form_verdict,
    degenerate_reason,
    independence_p_value,
    judge,
    null_moments,
    permutation_tail_bound,
    stored_judgement,
)
from oodsim.report.tables import exclusion_effect_table
from oodsim.results import DEGENERATE, failure_kind, store_counts
from oodsim.specs import DegenerateSpec
from oodsim.specs.seeded import N_PERMUTATIONS
from oodsim.stats import estimate
from oodsim.store import CorruptEntryWarning, Store
from oodsim.store.arrays import ARRAYS_ZIP
from tests.conftest import cli_run_on, digits_toml, small_digits


def test_balanced_accuracy_is_sklearns() -> None:
    rng = np.random.default_rng(0)
    labels = rng.choice(4, 300, p=[0.7, 0.2, 0.05, 0.05])
    predictions = np.where(rng.random(300) < 0.5, labels, rng.integers(0, 6, 300))  # 4, 5: unseen
    assert balanced_accuracy(predictions, labels) == pytest.approx(
        balanced_accuracy_score(labels, predictions), abs=1e-12
    )


@pytest.mark.parametrize("share", [0.0, 0.3])
def test_independence_p_value_agrees_with_scipy_permutation_test(share: float) -> None:
    """The p-value is a one-sided permutation test of the balanced accuracy; scipy's own
    permutation test (another random stream; the statistic is scikit-learn's balanced accuracy,
    :func:`test_balanced_accuracy_is_sklearns`) agrees within Monte Carlo error."""
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 5, 120)
    predictions = np.where(rng.random(120) < share, labels, rng.integers(0, 5, 120))
    ours = independence_p_value(predictions, labels)
    oracle = sps.permutation_test(
        (predictions,),
        lambda p: balanced_accuracy(p, labels),
        permutation_type="pairings",
        n_resamples=2999,
        alternative="greater",
        random_state=7,
    ).pvalue
    assert abs(ours - oracle) < 0.02 + 0.1 * oracle
    assert independence_p_value(predictions, labels) == ours  # deterministic


@pytest.mark.parametrize("trial", range(4))
def test_null_moments_are_the_exact_permutation_moments(trial: int) -> None:
    """Mean and SD of the balanced accuracy over all 7! shuffles of the predictions (some
    predicting a class absent from the labels) equal the closed form."""
    rng = np.random.default_rng(trial)
    labels, predictions = rng.integers(0, 3, 7), rng.integers(0, 4, 7)
    values = [
        balanced_accuracy(predictions[list(order)], labels)
        for order in itertools.permutations(range(7))
    ]
    assert null_moments(predictions, labels) == pytest.approx((np.mean(values), np.std(values)))


def test_a_clearly_trained_classifier_is_decided_without_shuffles_and_agrees() -> None:
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 6, 600)
    predictions = np.where(rng.random(600) < 0.7, labels, rng.integers(0, 6, 600))
    mean, _ = null_moments(predictions, labels)
    largest = 1 / (6 * np.bincount(labels).min())
    bound = permutation_tail_bound(balanced_accuracy(predictions, labels), mean, largest)
    assert bound < 1e-20  # the exact p-value is far below alpha: no shuffles needed
    assert closed_form_verdict(predictions, labels, 1e-3) is not None
    assert degenerate_reason(predictions, labels, alpha=1e-3) == ""
    assert independence_p_value(predictions, labels) == pytest.approx(1e-4)  # none reached it


def test_one_correct_prediction_of_a_rare_class_is_judged_by_the_exact_test() -> None:
    """The counterexample to a normal-tail shortcut: 9,980 + 20 validation samples, the rare
    class predicted once, correctly. z is about 22, but the exact p-value is 20/10,000 =
    0.002 (the one prediction of the rare class lands on one of its 20 samples): at
    alpha = 0.001 the classifier is not above chance."""
    labels = np.array([0] * 9980 + [1] * 20)
    predictions = np.zeros(10_000, int)
    predictions[-1] = 1
    mean, sd = null_moments(predictions, labels)
    score = balanced_accuracy(predictions, labels)
    assert (score - mean) / sd > 20  # a normal tail would call it certain
    assert permutation_tail_bound(score, mean, 1 / (2 * 20)) > 0.9
    assert closed_form_verdict(predictions, labels, 1e-3) is None  # no shortcut
    verdict = judge(predictions, labels, 1e-3)
    assert verdict.degenerate and verdict.p_value == pytest.approx(0.002, abs=0.001)
    assert not judge(predictions, labels, 0.01).degenerate  # p = 0.002 < 0.01


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 5), st.integers(5, 60), st.floats(0.0, 1.0), st.integers(0, 2**32 - 1))
def test_the_shortcut_never_keeps_what_the_exact_test_excludes(
    k: int, n: int, skill: float, seed: int
) -> None:
    """Wherever the closed form keeps a classifier, scipy's permutation test rejects at that
    alpha too (its Monte Carlo p-value, with room for its own noise)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    predictions = np.where(rng.random(n) < skill, labels, rng.integers(0, k, n))
    kept = [
        alpha
        for alpha in (0.05, 0.01, 0.001)
        if (verdict := closed_form_verdict(predictions, labels, alpha)) and not verdict.degenerate
    ]
    if not kept:
        return
    exact = sps.permutation_test(
        (predictions,),
        lambda x: balanced_accuracy(x, labels),
        permutation_type="pairings",
        alternative="greater",
        n_resamples=4_000,
        random_state=seed,
    ).pvalue
    assert exact < min(kept) + 1e-3, (kept, exact)


def test_the_tail_bound_holds_the_exact_two_class_tails() -> None:
    """With two classes the balanced accuracy is linear in one hypergeometric count (the
    predictions of class 1 that land on its labels): the exact tail, from scipy, never exceeds
    the bound, for rare and common classes alike."""
    for n, labelled, predicted in itertools.product(
        (40, 200, 10_000), (1, 2, 5, 20, 100), (1, 2, 5, 20, 100)
    ):
        if labelled >= n or predicted >= n:
            continue
        count = sps.hypergeom(n, labelled, predicted)

        def score(
            x: int, n: int = n, labelled: int = labelled, predicted: int = predicted
        ) -> float:
            return 0.5 * (x / labelled + (n - labelled - (predicted - x)) / (n - labelled))

        largest = 1 / (2 * min(labelled, n - labelled))
        for x in range(int(np.ceil(count.mean())), min(labelled, predicted) + 1):
            bound = permutation_tail_bound(score(x), score(count.mean()), largest)
            assert count.sf(x - 1) <= bound, (n, labelled, predicted, x)
    assert permutation_tail_bound(0.4, 0.5, 0.01) == 1.0  # below the mean


def test_an_imbalanced_but_informative_classifier_is_kept() -> None:
    """The issue's case: balanced accuracy 0.59 on an imbalanced set. Plain accuracy is below the
    majority share (the old rule flagged it, p = 1); the balanced rule keeps it."""
    labels = np.array([0] * 900 + [1] * 100)
    predictions = labels.copy()
    predictions[:450] = 1  # half of the majority class right, 68 of the 100 minority ones
    predictions[900:932] = 0
    assert balanced_accuracy(predictions, labels) == pytest.approx(0.59)
    assert np.mean(predictions == labels) < 0.9  # below "always predict class 0"
    assert degenerate_reason(predictions, labels, alpha=1e-3) == ""


def test_collapsed_and_input_blind_classifiers_are_degenerate() -> None:
    labels = np.array([0] * 70 + [1] * 20 + [2] * 10)
    always_zero = np.zeros(100, int)  # a collapsed model predicting the majority class
    reason = degenerate_reason(always_zero, labels, alpha=1e-3)
    assert reason.startswith("validation balanced accuracy 0.333 (n = 100)")
    assert "chance 0.333" in reason and "p = 1" in reason
    blind = np.random.default_rng(3).integers(0, 3, 100)  # ignores its input
    assert degenerate_reason(blind, labels, alpha=1e-3) != ""
    with pytest.raises(ValueError):
        balanced_accuracy(np.array([]), np.array([]))


def test_fitted_temperature_is_reported_and_scores_the_same() -> None:
    rng = np.random.default_rng(0)
    val = Outputs(logits=rng.normal(0, 3, (200, 6)), labels=rng.integers(0, 6, 200))
    test = Outputs(logits=rng.normal(0, 3, (300, 6)))
    detector = get_detector("temperature")
    params = detector.fitted(val, {})
    assert params == {"temperature": fit_temperature(val.logits, val.labels)}
    np.testing.assert_array_equal(
        confidence("temperature", test, fit=val), confidence("temperature", test, **params)
    )
    assert detector.fitted(val, {"temperature": 2.0}) == {"temperature": 2.0}  # fixed: no fit
    assert get_detector("msp").fitted(val, {}) == {}


def test_untrained_classifiers_are_excluded_unless_kept(
    cluster_address: str, cache: Path, tmp_path: Path
) -> None:
    """A learning rate of 1e-7 leaves the network at its random initialisation: chance-level
    accuracy. Its seeds are named and excluded by default; ``keep`` re-scores them into the
    estimates from the same cache (the rule changes scoring, not training)."""
    spec = small_digits(
        3,
        detectors=("msp", "temperature"),
        training=attrs.evolve(small_digits().training, lr=1e-7, max_epochs=1, patience=1),
    )
    excluded = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    failures = [str(f) for f in excluded["failure"].values]
    assert all(failure_kind(f) is DEGENERATE for f in failures), failures
    assert excluded.attrs["n_failed"] == 3
    assert all("not above chance" in str(r) for r in excluded["degenerate"].values)
    assert np.isfinite(excluded["score"]).all()  # scored, kept in the file, masked in estimates
    assert (estimate(excluded)["n"] == 0).all()

    kept_spec = attrs.evolve(spec, degenerate=DegenerateSpec(keep=True))
    kept = oodsim.run(kept_spec, address=cluster_address, cache=cache, progress=False)
    assert oodsim.results.store_counts(kept)["computed"] == {}
    assert (kept["failure"] == "").all() and kept.attrs["n_failed"] == 0
    assert (kept["degenerate"] == excluded["degenerate"]).all()
    assert (estimate(kept)["n"] == 3).all()
    # the estimand moves: the run summary shows each method's mean without and with them
    table = exclusion_effect_table(excluded, "auroc")
    assert (
        table is not None and "without (0 seeds)" in table and "with degenerate (3 seeds)" in table
    )
    for method in ("msp", "temperature"):
        with_them = float(kept.score.sel({"metric": "auroc", "method": method}).mean())
        line = next(row for row in table.splitlines() if row.startswith(method + " "))
        assert f"{with_them:.3f}" in line
    assert exclusion_effect_table(kept, "auroc") is None

    for seed in kept.seed.values:
        params = kept["detector_params"].sel(seed=seed)
        assert json.loads(str(params.sel({"method": "msp"}).item())) == {}
        t = json.loads(str(params.sel({"method": "temperature"}).item()))["temperature"]
        assert T_BOUNDS[0] <= t <= T_BOUNDS[1]


def test_trained_classifiers_are_not_degenerate(cluster_address: str, cache: Path) -> None:
    results = oodsim.run(small_digits(2), address=cluster_address, cache=cache, progress=False)
    assert (results["failure"] == "").all() and (results["degenerate"] == "").all()


def test_run_summary_names_degenerate_seeds(
    cluster_address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_path = digits_toml(tmp_path / "s.toml", 2, lr="1e-7", max_epochs="1")
    assert cli_run_on(cluster_address, spec_path, tmp_path) == 0
    out = capsys.readouterr().out
    assert out.startswith("No estimates: none of the 2 seeds has a score (each one failed or")
    assert "2 of 2 simulations excluded from the estimates above:" in out
    assert "2 x degenerate: classifier not above chance" in out
    for seed in (0, 1):
        assert f"    seed {seed}: validation balanced accuracy 0." in out
    assert "Mean auroc without and with the degenerate seeds:" in out
    assert "2 simulations in " in out and ", 2 excluded (degenerate); " in out


# --------------------------------------------------------------------------- stored verdicts


def _weak_outputs(seed: int) -> dict[str, np.ndarray]:
    """Validation outputs of a classifier barely above chance (a third of its predictions
    right, 216 samples of 6 classes): the closed form cannot decide it."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 6, 216)
    logits = rng.normal(size=(216, 6))
    logits[np.arange(216), labels] += np.where(rng.random(216) < 0.15, 10.0, 0.0)
    return {f"{SUBSET}.logits": logits, f"{SUBSET}.labels": labels}


def test_a_verdict_that_took_the_shuffles_is_stored_once_and_read_back(tmp_path: Path) -> None:
    arrays = _weak_outputs(0)
    predictions, labels = arrays[f"{SUBSET}.logits"].argmax(axis=1), arrays[f"{SUBSET}.labels"]
    assert closed_form_verdict(predictions, labels, 1e-3) is None  # it needs the shuffles
    outputs = "ab" * 32
    first = Store(tmp_path)
    verdict = stored_judgement(first, outputs, arrays, 1e-3, "a weak classifier")
    assert verdict == judge(predictions, labels, 1e-3)  # the p-value of the shuffles itself
    key = verdict_key(outputs, SUBSET, 1e-3, N_PERMUTATIONS, RULE_VERSION)
    assert first.counts()["computed"] == {DEGENERATE_VERDICT: 1}
    again = Store(tmp_path)
    assert stored_judgement(again, outputs, arrays, 1e-3, "a weak classifier") == verdict
    assert again.events == [("loaded", DEGENERATE_VERDICT, key)]
    # a clearly trained one is decided in closed form: nothing stored, nothing read
    clear = Store(tmp_path / "clear")
    trained = {f"{SUBSET}.logits": np.eye(6)[labels] * 5, f"{SUBSET}.labels": labels}
    assert stored_judgement(clear, outputs, trained, 1e-3, "x").reason == ""
    assert clear.events == []


def test_a_verdict_key_binds_the_outputs_judged_and_every_parameter_of_the_rule() -> None:
    base = {"outputs": "ab" * 32, "subset": SUBSET, "alpha": 1e-3, "n_permutations": 9_999}
    changes = {"outputs": "cd" * 32, "subset": "in_test", "alpha": 0.01, "n_permutations": 999}
    key = verdict_key(**base, version=RULE_VERSION)
    others = {
        verdict_key(**(base | {name: value}), version=RULE_VERSION)
        for name, value in changes.items()
    }
    others.add(verdict_key(**base, version=RULE_VERSION + "-bumped"))
    assert key not in others and len(others) == len(changes) + 1


def _same_verdicts_and_scores(first: xr.Dataset, second: xr.Dataset) -> None:
    for name in ("score", "degenerate", "failure"):
        xr.testing.assert_identical(first[name], second[name])


def test_reruns_load_stored_verdicts_and_heal_a_corrupt_one(
    cluster_address: str, cache: Path
) -> None:
    """A validation split of 5% of 60 images a class (3 a class) is too small for the closed
    form at alpha = 0.001, even for a perfect classifier: every seed's verdict takes the 9,999
    shuffles. The first run stores them where it scores the seeds; a rerun loads them (and
    computes nothing); another alpha is another key; an altered verdict is caught by its
    checksum, moved aside and computed again."""
    base = small_digits(2)
    small = attrs.evolve(base.dataset, max_per_class=60)  # 54 training images a class
    spec = attrs.evolve(
        base, dataset=small, split=attrs.evolve(base.split, fractions=(0.9, 0.05, 0.05))
    )
    first = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    assert store_counts(first)["computed"] == {"checkpoint": 2, "outputs": 2, DEGENERATE_VERDICT: 2}
    store = Store(cache)
    for seed in spec.seeds.all():  # each verdict is the rule's on its own seed's outputs
        outputs = simulation_keys(spec, seed).outputs
        arrays = store.get(OUTPUTS, outputs).arrays
        direct = judge(arrays["in_val.logits"].argmax(axis=1), arrays["in_val.labels"], 1e-3)
        assert direct.p_value is not None  # decided by the shuffles
        assert str(first["degenerate"].sel(seed=seed).item()) == direct.reason
        key = verdict_key(outputs, SUBSET, 1e-3, N_PERMUTATIONS, RULE_VERSION)
        stored = store.get(DEGENERATE_VERDICT, key)
        assert stored is not None and float(stored.arrays["p_value"]) == direct.p_value

    again = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    assert store_counts(again)["computed"] == {}
    assert store_counts(again)["loaded"][DEGENERATE_VERDICT] == 2
    _same_verdicts_and_scores(first, again)

    stricter = attrs.evolve(spec, degenerate=DegenerateSpec(alpha=5e-4))
    other = oodsim.run(stricter, address=cluster_address, cache=cache, progress=False)
    assert store_counts(other)["computed"] == {DEGENERATE_VERDICT: 2}

    key = verdict_key(simulation_keys(spec, 0).outputs, SUBSET, 1e-3, N_PERMUTATIONS, RULE_VERSION)
    zipped = store.place(DEGENERATE_VERDICT, key) / ARRAYS_ZIP
    p_value = float(store.get(DEGENERATE_VERDICT, key).arrays["p_value"])
    altered = zipped.read_bytes().replace(np.float64(p_value).tobytes(), np.float64(0.5).tobytes())
    assert altered != zipped.read_bytes()
    zipped.write_bytes(altered)  # the same size: only the checksum tells
    problems = Store(cache).verify()
    assert [(info.kind, info.key) for info, _ in problems] == [(DEGENERATE_VERDICT, key)]
    with pytest.warns(CorruptEntryWarning, match="degenerate_verdict"):
        healed = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    assert store_counts(healed)["computed"] == {DEGENERATE_VERDICT: 1}
    _same_verdicts_and_scores(first, healed)
    assert Store(cache).verify() == []


def test_a_run_moves_no_file_of_the_users_where_verdicts_belong(tmp_path: Path) -> None:
    """No task plans a verdict, yet scoring may write one: in a folder that held other files
    when runs began to use it, a file named like the kind stops the run before any compute,
    as a file named like any other kind does."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("notes")
    (home / DEGENERATE_VERDICT).write_text("mine")
    with pytest.raises(StoreError, match=rf"{DEGENERATE_VERDICT} \(.*\) is where the cache needs"):
        oodsim.run(small_digits(1), cache=home, progress=False)
    assert sorted(p.name for p in home.iterdir()) == [DEGENERATE_VERDICT, "notes.txt"]
    assert (home / DEGENERATE_VERDICT).read_text() == "mine"
