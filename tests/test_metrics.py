"""oodsim.metrics against scikit-learn (the reference definitions) and a brute-force pair count."""

from __future__ import annotations

import functools
import itertools
import pickle
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import (
    accuracy_score,
    auc,
    average_precision_score,
    precision_recall_curve,
    roc_auc_score,
    roc_curve,
)

from oodsim import metrics
from oodsim.errors import OodsimError, UnknownNameError
from oodsim.metrics import NonFiniteScoreError
from tests.oscr_oracles import arpl_oscr, strict_oscr_loop

TOL = 1e-12

# --------------------------------------------------------------------------- oracles


@functools.lru_cache(maxsize=4096)
def _curve(kind: str, positive: tuple[bool, ...], score: tuple[float, ...]) -> tuple:
    """One sklearn computation, memoized: several oracles share the same curve (fpr at three
    TPRs, trapezoid and step AUPR), and the exhaustive tie test asks each many times."""
    positive_, score_ = np.array(positive), np.array(score)
    if kind == "roc":
        return roc_curve(positive_, score_, drop_intermediate=False)
    if kind == "pr":
        return precision_recall_curve(positive_, score_)
    return average_precision_score(positive_, score_)


def _sk(kind: str, positive: np.ndarray, score: np.ndarray) -> Any:
    return _curve(kind, tuple(positive.tolist()), tuple(score.tolist()))


def sk_auroc(kappa: np.ndarray, is_ood: np.ndarray) -> float:
    return roc_auc_score(~is_ood, kappa)


def sk_aupr(positive: np.ndarray, score: np.ndarray, method: str) -> float:
    if method == "step":
        return _sk("ap", positive, score)
    precision, recall, _ = _sk("pr", positive, score)
    return auc(recall, precision)


def sk_fpr_at_tpr(kappa: np.ndarray, is_ood: np.ndarray, tpr: float) -> float:
    fpr, tpr_curve, _ = _sk("roc", ~is_ood, kappa)
    return fpr[np.argmax(tpr_curve >= tpr)]


def sk_fpr_at_tpr_ood(kappa: np.ndarray, is_ood: np.ndarray, tpr: float) -> float:
    """OOD positive, ranked by -κ: the sklearn recipe fpr95_ood is defined by."""
    fpr, tpr_curve, _ = _sk("roc", is_ood, -kappa)
    return fpr[np.argmax(tpr_curve >= tpr)]


# (name, our function, keyword arguments, oracle(kappa, is_ood))
CASES = [
    ("auroc", metrics.auroc, {}, sk_auroc),
    ("aupr_in", metrics.aupr_in, {}, lambda k, o: sk_aupr(~o, k, "trapezoid")),
    ("aupr_in_step", metrics.aupr_in, {"method": "step"}, lambda k, o: sk_aupr(~o, k, "step")),
    ("aupr_out", metrics.aupr_out, {}, lambda k, o: sk_aupr(o, -k, "trapezoid")),
    ("aupr_out_step", metrics.aupr_out, {"method": "step"}, lambda k, o: sk_aupr(o, -k, "step")),
    ("fpr95", metrics.fpr_at_tpr, {}, lambda k, o: sk_fpr_at_tpr(k, o, 0.95)),
    ("fpr50", metrics.fpr_at_tpr, {"tpr": 0.5}, lambda k, o: sk_fpr_at_tpr(k, o, 0.5)),
    ("fpr100", metrics.fpr_at_tpr, {"tpr": 1.0}, lambda k, o: sk_fpr_at_tpr(k, o, 1.0)),
    ("ap_in", metrics.ap_in, {}, lambda k, o: sk_aupr(~o, k, "step")),
    ("ap_out", metrics.ap_out, {}, lambda k, o: sk_aupr(o, -k, "step")),
    ("fpr95_ood", metrics.fpr95_ood, {}, lambda k, o: sk_fpr_at_tpr_ood(k, o, 0.95)),
    ("fpr50_ood", metrics.fpr_at_tpr_ood, {"tpr": 0.5}, lambda k, o: sk_fpr_at_tpr_ood(k, o, 0.5)),
    ("fpr100_ood", metrics.fpr_at_tpr_ood, {"tpr": 1.0}, lambda k, o: sk_fpr_at_tpr_ood(k, o, 1)),
]
CASE_IDS = [case[0] for case in CASES]


def assert_matches_sklearn(kappa: np.ndarray, is_ood: np.ndarray) -> None:
    """Every metric of one score vector equals its sklearn oracle to TOL."""
    for name, fn, kwargs, oracle in CASES:
        got, want = fn(kappa, is_ood, **kwargs), oracle(kappa, is_ood)
        assert abs(got - want) <= TOL, (name, kappa.tolist(), is_ood.tolist(), got, want)


# --------------------------------------------------------------------------- strategies


@st.composite
def labels(draw: st.DrawFn, n: int) -> np.ndarray:
    """is_ood of length n holding at least one ID and one OOD sample."""
    rest = draw(st.lists(st.booleans(), min_size=n - 2, max_size=n - 2))
    return np.array(draw(st.permutations([True, False, *rest])), dtype=bool)


def scores(n: int) -> st.SearchStrategy[np.ndarray]:
    """κ of length n: arbitrary finite floats, float32, or few distinct values (heavy ties)."""
    wide = st.floats(allow_nan=False, allow_infinity=False)
    narrow = st.floats(allow_nan=False, allow_infinity=False, width=32)
    few = st.lists(st.floats(-3, 3), min_size=1, max_size=3, unique=True)
    return st.one_of(
        st.lists(wide, min_size=n, max_size=n).map(np.array),
        st.lists(narrow, min_size=n, max_size=n).map(lambda v: np.array(v, dtype=np.float32)),
        few.flatmap(lambda vals: st.lists(st.sampled_from(vals), min_size=n, max_size=n)).map(
            np.array
        ),
        st.lists(st.integers(-2, 2), min_size=n, max_size=n).map(np.array),
    )


@st.composite
def scored_sets(draw: st.DrawFn, min_n: int = 2, max_n: int = 60) -> tuple:
    """(kappa, is_ood) for one set of n samples."""
    n = draw(st.integers(min_n, max_n))
    return draw(scores(n)), draw(labels(n))


# --------------------------------------------------------------------------- agreement with sklearn


@settings(max_examples=150, deadline=None)
@given(scored_sets())
def test_every_metric_matches_sklearn(data: tuple) -> None:
    assert_matches_sklearn(*data)


@settings(max_examples=150, deadline=None)
@given(scored_sets(min_n=2, max_n=5))
def test_tiny_sets_match_sklearn(data: tuple) -> None:
    assert_matches_sklearn(*data)


@pytest.mark.parametrize("n", [2, 3])
def test_all_tiny_tie_patterns_match_sklearn(n: int) -> None:
    """Every κ in {0, 1, 2}^n against every labelling with both classes, in one batched call
    (n = 4 took 9 s of sklearn calls; the random tie patterns below reach further)."""
    grid = np.array(list(itertools.product([0.0, 1.0, 2.0], repeat=n)))
    for is_ood in itertools.product([False, True], repeat=n):
        is_ood = np.array(is_ood)
        if is_ood.all() or not is_ood.any():
            continue
        for name, fn, kwargs, oracle in CASES:
            got = fn(grid, is_ood, **kwargs)
            want = np.array([oracle(row, is_ood) for row in grid])
            np.testing.assert_allclose(got, want, rtol=0, atol=TOL, err_msg=name)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 2000), st.integers(0, 6), st.floats(0.01, 0.99), st.randoms())
def test_larger_sets_match_sklearn(n, distinct, ood_share, rnd) -> None:
    """Up to 2000 samples: continuous κ (distinct=0) or only 1..6 distinct values."""
    rng = np.random.default_rng(rnd.getrandbits(32))
    kappa = rng.normal(size=n) if distinct == 0 else rng.integers(0, distinct, n) / 2.0
    is_ood = rng.random(n) < ood_share
    is_ood[:2] = True, False
    assert_matches_sklearn(kappa, is_ood)


@settings(max_examples=100, deadline=None)
@given(scored_sets(), st.floats(0, 1, exclude_min=True))
def test_fpr_at_any_tpr_matches_roc_curve(data: tuple, tpr: float) -> None:
    kappa, is_ood = data
    assert metrics.fpr_at_tpr(kappa, is_ood, tpr=tpr) == sk_fpr_at_tpr(kappa, is_ood, tpr)


@settings(max_examples=100, deadline=None)
@given(scored_sets(max_n=30))
def test_auroc_is_pairwise_win_probability(data: tuple) -> None:
    """DESIGN: AUROC = P(κ_ID > κ_OOD) + ½·P(tie), counted over all (ID, OOD) pairs."""
    kappa, is_ood = data
    kappa_id, kappa_ood = kappa[~is_ood, None], kappa[None, is_ood]
    pairs = np.mean(kappa_id > kappa_ood) + 0.5 * np.mean(kappa_id == kappa_ood)
    assert abs(metrics.auroc(kappa, is_ood) - pairs) <= TOL


def test_fpr_uses_every_threshold_not_sklearns_dropped_curve() -> None:
    """roc_curve's default drop_intermediate=True removes the collinear point where TPR first
    reaches 95% here; reading FPR off that curve would overstate it (0.5 instead of 0.25)."""
    kappa = np.r_[np.arange(28.0, 10.0, -1.0), 1, 1, 0, 0, -1, -2]
    is_ood = np.r_[np.zeros(18, bool), False, True, False, True, True, True]
    fpr, tpr, _ = roc_curve(~is_ood, kappa)  # default: intermediate points dropped
    assert fpr[np.argmax(tpr >= 0.95)] == 0.5
    assert metrics.fpr95(kappa, is_ood) == sk_fpr_at_tpr(kappa, is_ood, 0.95) == 0.25


def test_known_values() -> None:
    kappa = np.array([0.9, 0.8, 0.7, 0.6])
    is_ood = np.array([False, True, False, True])
    assert metrics.auroc(kappa, is_ood) == 0.75
    assert metrics.auroc(-kappa, is_ood) == 0.25
    assert metrics.auroc(np.zeros(4), is_ood) == 0.5  # all tied
    assert metrics.fpr_at_tpr(kappa, is_ood, tpr=0.5) == 0.0
    assert metrics.fpr95(kappa, is_ood) == 0.5


# --------------------------------------------------------------------------- batching


@st.composite
def batches(draw: st.DrawFn) -> tuple:
    """(kappa of shape (a, b, n), is_ood of shape (n,) or (a, b, n))."""
    a, b, n = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(2, 30))
    rows = draw(st.lists(scores(n), min_size=a * b, max_size=a * b))
    kappa = np.stack([row.astype(np.float64) for row in rows]).reshape(a, b, n)
    if draw(st.booleans()):
        return kappa, draw(labels(n))
    per_row = draw(st.lists(labels(n), min_size=a * b, max_size=a * b))
    return kappa, np.stack(per_row).reshape(a, b, n)


@settings(max_examples=100, deadline=None)
@given(batches())
def test_batched_equals_row_loop(data: tuple) -> None:
    kappa, is_ood = data
    together = metrics.evaluate(kappa, is_ood)
    for _, fn, kwargs, _ in CASES:
        batched = fn(kappa, is_ood, **kwargs)
        assert batched.shape == kappa.shape[:-1] and batched.dtype == np.float64
        for index in np.ndindex(kappa.shape[:-1]):
            row_ood = is_ood if is_ood.ndim == 1 else is_ood[index]
            assert batched[index] == fn(kappa[index], row_ood, **kwargs)
    for name, values in together.items():
        np.testing.assert_array_equal(values, metrics.METRICS[name](kappa, is_ood))


@pytest.mark.parametrize("shared_labels", [True, False])
def test_many_blocks_equal_row_loop_and_sklearn(shared_labels: bool) -> None:
    """Enough rows to span several internal blocks, with the last one partial."""
    rng = np.random.default_rng(7)
    rows, n = 750, 3000  # 2.25M scores: blocks of 349 rows
    kappa = rng.normal(size=(rows, n)).astype(np.float32)
    kappa[::2] = np.round(kappa[::2], 1)
    shape = (n,) if shared_labels else (rows, n)
    is_ood = rng.random(shape) < 0.4
    together = metrics.evaluate(kappa, is_ood)
    for row in (0, 1, 348, 349, 350, 697, 698, 749):
        row_ood = is_ood if shared_labels else is_ood[row]
        for name, values in together.items():
            assert values[row] == metrics.METRICS[name](kappa[row], row_ood), (name, row)
        assert abs(together["auroc"][row] - sk_auroc(kappa[row], row_ood)) <= TOL
        assert abs(together["aupr_out"][row] - sk_aupr(row_ood, -kappa[row], "trapezoid")) <= TOL
        assert together["fpr95"][row] == sk_fpr_at_tpr(kappa[row], row_ood, 0.95)


def test_single_row_returns_float64_scalar_and_empty_batch_is_empty() -> None:
    value = metrics.auroc([0.1, 0.2, 0.3], [True, False, False])
    assert isinstance(value, np.float64) and value == 1.0
    empty = metrics.evaluate(np.empty((0, 4)), np.array([True, False, True, False]))
    assert all(v.shape == (0,) and v.dtype == np.float64 for v in empty.values())


def test_leading_size_one_label_dims_broadcast() -> None:
    rng = np.random.default_rng(3)
    kappa = rng.normal(size=(2, 3, 10))
    is_ood = np.arange(10) % 2 == 0
    np.testing.assert_array_equal(
        metrics.auroc(kappa, is_ood[None, None]), metrics.auroc(kappa, is_ood)
    )
    np.testing.assert_array_equal(
        metrics.auroc(kappa, np.broadcast_to(is_ood, (1, 3, 10))), metrics.auroc(kappa, is_ood)
    )


def test_integer_labels_are_accepted_as_booleans() -> None:
    kappa = np.array([0.9, 0.8, 0.7, 0.6])
    assert metrics.auroc(kappa, [0, 1, 0, 1]) == metrics.auroc(kappa, [False, True, False, True])


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_scores_raise_with_count_row_and_context(bad: float) -> None:
    kappa = np.zeros((4, 5, 6))
    kappa[2, 3, [0, 4]] = bad
    kappa[3, 0, 1] = bad
    is_ood = np.array([True, False] * 3)
    for fn in (metrics.auroc, metrics.aupr_in, metrics.aupr_out, metrics.fpr_at_tpr):
        with pytest.raises(NonFiniteScoreError) as info:
            fn(kappa, is_ood, context="detector 'odin', seed 17")
        message = str(info.value)
        assert "3 non-finite values" in message
        assert "2 of 20 row(s)" in message
        assert "batch index (2, 3)" in message and "(2 there)" in message
        assert "detector 'odin', seed 17" in message
        assert isinstance(info.value, OodsimError) and isinstance(info.value, ValueError)
        assert info.value.batch_index == (2, 3) and info.value.count == 3


def test_non_finite_error_survives_pickling() -> None:
    with pytest.raises(NonFiniteScoreError) as info:
        metrics.auroc([0.1, np.nan, 0.3], [True, False, False], context="seed 4")
    clone = pickle.loads(pickle.dumps(info.value))
    assert type(clone) is NonFiniteScoreError and str(clone) == str(info.value)
    assert clone.batch_index == () and clone.context == "seed 4"


@pytest.mark.parametrize(
    ("is_ood", "missing"), [([False, False, False], "no OOD"), ([True, True, True], "no ID")]
)
def test_set_without_one_class_raises(is_ood: list, missing: str) -> None:
    for fn in (metrics.auroc, metrics.aupr_in, metrics.aupr_out, metrics.fpr95):
        with pytest.raises(ValueError, match=missing):
            fn([0.1, 0.2, 0.3], is_ood)


def test_batch_row_without_ood_names_its_index() -> None:
    is_ood = np.ones((2, 3, 4), dtype=bool)
    is_ood[..., 0] = False
    is_ood[1, 2] = False
    with pytest.raises(
        ValueError, match=r"no OOD .* 1 of 6 row\(s\), first at batch index \(1, 2\)"
    ):
        metrics.auroc(np.zeros((2, 3, 4)), is_ood, context="seed 9")


@pytest.mark.parametrize(
    ("kappa_shape", "ood_shape"), [((3, 5), (4,)), ((3, 5), (2, 5)), ((5,), (3, 5)), ((5,), ())]
)
def test_shape_mismatch_names_both_shapes(kappa_shape: tuple, ood_shape: tuple) -> None:
    with pytest.raises(ValueError) as info:
        metrics.auroc(np.zeros(kappa_shape), np.zeros(ood_shape, dtype=bool))
    assert str(kappa_shape) in str(info.value) and str(ood_shape) in str(info.value)


def test_bad_inputs_and_options_raise() -> None:
    kappa, is_ood = [0.1, 0.2, 0.3], [True, False, False]
    with pytest.raises(ValueError, match="boolean"):
        metrics.auroc(kappa, [0, 2, 1])
    with pytest.raises(ValueError, match="real numbers"):
        metrics.auroc(["a", "b", "c"], is_ood)
    with pytest.raises(ValueError, match="n>0"):
        metrics.auroc(np.zeros((3, 0)), np.zeros(0, dtype=bool))
    with pytest.raises(UnknownNameError, match="'trapezoid'"):
        metrics.aupr_in(kappa, is_ood, method="trapz")
    for tpr in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="tpr"):
            metrics.fpr_at_tpr(kappa, is_ood, tpr=tpr)
    with pytest.raises(UnknownNameError, match="Did you mean 'auroc'"):
        metrics.get_metric("auroc_")
    with pytest.raises(UnknownNameError, match="accuracy"):
        metrics.evaluate(kappa, is_ood, ["auroc", "accuracy"])


# --------------------------------------------------------------------------- accuracy, registry


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 4), st.integers(1, 40), st.integers(1, 5), st.randoms())
def test_accuracy_matches_sklearn_per_row(rows: int, n: int, classes: int, rnd) -> None:
    rng = np.random.default_rng(rnd.getrandbits(32))
    predictions = rng.integers(0, classes, (rows, n))
    labels_ = rng.integers(0, classes, n)
    got = metrics.accuracy(predictions, labels_)
    assert got.dtype == np.float64 and got.shape == (rows,)
    for row in range(rows):
        assert got[row] == accuracy_score(labels_, predictions[row])


def test_accuracy_shapes() -> None:
    assert metrics.accuracy([1, 2, 3, 4], [1, 2, 0, 4]) == 0.75
    assert metrics.accuracy(np.zeros((2, 3, 4)), np.zeros(4)).shape == (2, 3)
    with pytest.raises(ValueError, match=r"\(2, 4\).*\(3,\)"):
        metrics.accuracy(np.zeros((2, 4)), np.zeros(3))
    with pytest.raises(ValueError, match="n=0"):
        metrics.accuracy(np.zeros((2, 0)), np.zeros(0))


def test_registry() -> None:
    assert metrics.available_metrics() == (
        "accuracy",
        "ap",  # ImageNet-O's names of ap_out and aupr_out
        "ap_in",
        "ap_out",
        "aupr",
        "aupr_in",
        "aupr_out",
        "aurc",
        "aurc_thresholds",
        "auroc",
        "brier",
        "eaurc",
        "ece",
        "fpr95",
        "fpr95_ood",
        "fpr_at_val95",
        "nll",
        "oscr",
        "oscr_pytorch_ood",
        "selective_risk95",
        "tpr_at_val95",
    )
    classifier = {"accuracy", "ece", "brier", "nll"}  # the same for every detector
    validation = set(metrics.VALIDATION_METRICS)  # κ of the validation samples too
    imagenet_o = {"aupr", "ap"}  # its names of aupr_out and ap_out: specs ask for those
    assert set(metrics.KAPPA_METRICS) == set(metrics.METRICS) - classifier - validation - imagenet_o
    assert metrics.get_metric("fpr95") is metrics.METRICS["fpr95"]
    kappa, is_ood = np.array([0.3, 0.1, 0.2, 0.4]), np.array([False, True, False, True])
    assert metrics.METRICS["fpr95"](kappa, is_ood) == metrics.fpr_at_tpr(kappa, is_ood, tpr=0.95)
    assert metrics.DEFAULT_KAPPA_METRICS == ("auroc", "aupr_in", "aupr_out", "fpr95")
    assert metrics.evaluate(kappa, is_ood) == {
        name: metrics.METRICS[name](kappa, is_ood) for name in metrics.DEFAULT_KAPPA_METRICS
    }


# --------------------------------------------------------------------------- named conventions
#
# fpr95_ood, ap_in and ap_out ride on CASES above (every sklearn test, tiny tie patterns,
# batching); here: pytorch-ood's numbers, OSCR and AURC against plain loops, evaluate(correct=).


def pod_metrics(kappa: np.ndarray, is_ood: np.ndarray) -> dict[str, float]:
    """pytorch-ood's OODMetrics on outlier scores -κ (OOD marked by label -1)."""
    torch = pytest.importorskip("torch")
    pod = pytest.importorskip("pytorch_ood.metrics")
    scores = torch.as_tensor(-np.asarray(kappa))
    labels = torch.as_tensor(np.where(is_ood, -1, 0))
    with warnings.catch_warnings():  # its AUTC (not compared) warns on constant scores
        warnings.simplefilter("ignore", UserWarning)
        return pod.OODMetrics().update(scores, labels).compute()


def pod_fpr_at_tpr(kappa: np.ndarray, is_ood: np.ndarray, tpr: float) -> float:
    torch = pytest.importorskip("torch")
    pod = pytest.importorskip("pytorch_ood.metrics")
    scores, labels = torch.as_tensor(-np.asarray(kappa)), torch.as_tensor(np.where(is_ood, -1, 0))
    return float(pod.functional.fpr_at_tpr(scores, labels, tpr))


def loop_oscr(kappa: np.ndarray, is_ood: np.ndarray, correct: np.ndarray) -> float:
    """OSCR by hand: one (FPR, CCR) point per unique threshold t (accept κ >= t), trapezoid."""
    id_right = ~is_ood & correct
    points = [(0.0, 0.0)]
    for t in sorted(set(kappa.tolist()), reverse=True):
        accepted = kappa >= t
        points.append(
            (
                np.sum(accepted & is_ood) / np.sum(is_ood),
                np.sum(accepted & id_right) / np.sum(~is_ood),
            )
        )
    return sum((x1 - x0) * (y1 + y0) / 2 for (x0, y0), (x1, y1) in zip(points, points[1:]))


def pod_oscr(kappa: np.ndarray, is_ood: np.ndarray, correct: np.ndarray) -> float:
    """pytorch-ood's oscr_score: outlier scores -κ, labels -1 for OOD, predictions right or not."""
    torch = pytest.importorskip("torch")
    pod = pytest.importorskip("pytorch_ood.metrics")
    labels = np.where(is_ood, -1, 1)
    predictions = np.where(correct, labels, 2)
    return pod.oscr_score(
        torch.as_tensor(-np.asarray(kappa)), torch.as_tensor(predictions), torch.as_tensor(labels)
    )


def loop_aurc(kappa: np.ndarray, correct: np.ndarray) -> float:
    """The plain AURC loop: sort by κ descending, mean over i of (wrong among top i) / i."""
    wrong = ~correct[np.argsort(-kappa, kind="stable")]
    return float(np.mean([wrong[:i].sum() / i for i in range(1, kappa.size + 1)]))


def loop_aurc_expected(kappa: np.ndarray, correct: np.ndarray) -> float:
    """AURC with ties in expectation, by hand: each run of tied κ adds its wrong predictions
    evenly, so coverage (above + s) of a run of r with w wrong has (wrong_above + s·w/r) wrong."""
    total, above, wrong_above = 0.0, 0, 0
    for t in sorted(set(kappa.tolist()), reverse=True):
        run = kappa == t
        r, w = int(run.sum()), int(np.sum(~correct[run]))
        total += sum((wrong_above + s * w / r) / (above + s) for s in range(1, r + 1))
        above, wrong_above = above + r, wrong_above + w
    return total / kappa.size


@st.composite
def judged_sets(draw: st.DrawFn, max_n: int = 40) -> tuple:
    """(kappa, is_ood, correct) for one set: random, float32, few values, small integers."""
    n = draw(st.integers(2, max_n))
    correct = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    return draw(scores(n)), draw(labels(n)), correct


def tie_heavy_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    """Rows of κ: continuous, rounded to 1 decimal, integers 0..3, and all equal."""
    normal = rng.normal(size=n)
    return np.stack([normal, np.round(normal, 1), rng.integers(0, 4, n).astype(float), np.ones(n)])


@settings(max_examples=60, deadline=None)
@given(scored_sets(max_n=40))
def test_fpr95_ood_and_auprs_match_pytorch_ood_oodmetrics(data: tuple) -> None:
    kappa, is_ood = data
    pod = pod_metrics(kappa, is_ood)
    assert metrics.fpr95_ood(kappa, is_ood) == pod["FPR95TPR"]  # same counts, same division
    assert abs(metrics.auroc(kappa, is_ood) - pod["AUROC"]) <= TOL
    assert abs(metrics.aupr_in(kappa, is_ood) - pod["AUPR-IN"]) <= TOL
    assert abs(metrics.aupr_out(kappa, is_ood) - pod["AUPR-OUT"]) <= TOL


@pytest.mark.parametrize("seed", [0, 1])
def test_named_conventions_on_tie_heavy_rows_match_sklearn_and_pytorch_ood(seed: int) -> None:
    """Continuous, 1-decimal, integer and all-equal κ: one batched call per metric vs oracles."""
    rng = np.random.default_rng(seed)
    n = 500
    is_ood = rng.random(n) < 0.3
    is_ood[:2] = True, False
    kappa = tie_heavy_rows(rng, n) + 0.5 * ~is_ood
    kappa[-1] = 1.0  # keep the all-equal row all equal
    fpr_ood, ap_i, ap_o = (
        metrics.fpr95_ood(kappa, is_ood),
        metrics.ap_in(kappa, is_ood),
        metrics.ap_out(kappa, is_ood),
    )
    for row in range(kappa.shape[0]):
        k = kappa[row]
        assert (
            fpr_ood[row] == sk_fpr_at_tpr_ood(k, is_ood, 0.95) == pod_metrics(k, is_ood)["FPR95TPR"]
        )
        assert abs(ap_i[row] - average_precision_score(~is_ood, k)) <= TOL
        assert abs(ap_o[row] - average_precision_score(is_ood, -k)) <= TOL
    assert fpr_ood[-1] == 1.0  # all tied: catching any OOD sample flags every ID sample


@settings(max_examples=60, deadline=None)
@given(scored_sets(max_n=30), st.floats(0, 1, exclude_min=True))
def test_fpr_ood_at_any_tpr_matches_roc_curve_and_pytorch_ood(data: tuple, tpr: float) -> None:
    kappa, is_ood = data
    got = metrics.fpr_at_tpr_ood(kappa, is_ood, tpr=tpr)
    assert got == sk_fpr_at_tpr_ood(kappa, is_ood, tpr) == pod_fpr_at_tpr(kappa, is_ood, tpr)


def test_fpr95_conventions_differ_and_are_named() -> None:
    """ID positive (fpr95) and OOD positive (fpr95_ood) are different numbers on one set:
    ID κ spread over 0..19, OOD κ packed in [5, 6)."""
    kappa = np.r_[np.arange(20.0), 5 + np.arange(20) / 20]
    is_ood = np.r_[np.zeros(20, bool), np.ones(20, bool)]
    # keeping 19 of 20 ID samples needs t = 1: every OOD sample is accepted
    assert metrics.fpr95(kappa, is_ood) == sk_fpr_at_tpr(kappa, is_ood, 0.95) == 1.0
    # catching 19 of 20 OOD samples flags κ <= 5.9: the 6 ID samples 0..5
    assert metrics.fpr95_ood(kappa, is_ood) == sk_fpr_at_tpr_ood(kappa, is_ood, 0.95) == 0.3


@settings(max_examples=150, deadline=None)
@given(judged_sets())
def test_oscr_pytorch_ood_matches_loop_and_pytorch_ood(data: tuple) -> None:
    kappa, is_ood, correct = data
    got = metrics.oscr_pytorch_ood(kappa, is_ood, correct)
    assert abs(got - loop_oscr(kappa, is_ood, correct)) <= TOL
    assert abs(got - pod_oscr(kappa, is_ood, correct)) <= TOL


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 60), st.randoms())
def test_oscr_is_arpls_compute_oscr_on_tie_free_scores(n: int, rnd) -> None:
    """The oracle: the ARPL / Vaze et al. ``compute_oscr`` procedure (tests/oscr_oracles.py)."""
    rng = np.random.default_rng(rnd.getrandbits(32))
    kappa = rng.permutation(n).astype(float) + rng.random()  # distinct scores
    is_ood = rng.random(n) < rng.uniform(0.1, 0.9)
    is_ood[:2] = True, False
    correct = rng.random(n) < rng.uniform(0.0, 1.0)
    want = arpl_oscr(kappa[~is_ood], kappa[is_ood], correct[~is_ood])
    assert abs(metrics.oscr(kappa, is_ood, correct) - want) <= TOL


@settings(max_examples=150, deadline=None)
@given(judged_sets())
def test_oscr_follows_the_written_tie_rule_and_stays_below_pytorch_oods(data: tuple) -> None:
    """Ties: Dhamija's counts at each distinct threshold; never above the ≥-for-both variant."""
    kappa, is_ood, correct = data
    got = metrics.oscr(kappa, is_ood, correct)
    assert abs(got - strict_oscr_loop(kappa, is_ood, correct)) <= TOL
    assert got <= metrics.oscr_pytorch_ood(kappa, is_ood, correct) + TOL


@settings(max_examples=100, deadline=None)
@given(scored_sets(max_n=40))
def test_oscr_pytorch_ood_with_every_id_sample_correct_is_auroc(data: tuple) -> None:
    kappa, is_ood = data
    correct = np.ones(kappa.size, dtype=bool)
    got = metrics.oscr_pytorch_ood(kappa, is_ood, correct)
    assert got == metrics.auroc(kappa, is_ood)  # the same sum, term for term
    assert abs(got - roc_auc_score(~is_ood, kappa)) <= TOL
    # OOD samples' correctness is ignored, by both
    assert metrics.oscr_pytorch_ood(kappa, is_ood, ~is_ood) == got
    strict = metrics.oscr(kappa, is_ood, correct)
    assert metrics.oscr(kappa, is_ood, ~is_ood) == strict


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_oscr_on_tie_heavy_rows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 300
    is_ood = rng.random(n) < 0.4
    is_ood[:2] = True, False
    correct = rng.random(n) < 0.8
    kappa = tie_heavy_rows(rng, n)
    got = metrics.oscr_pytorch_ood(kappa, is_ood, correct)
    strict = metrics.oscr(kappa, is_ood, correct)
    for row in range(kappa.shape[0]):
        assert abs(got[row] - loop_oscr(kappa[row], is_ood, correct)) <= TOL
        assert abs(got[row] - pod_oscr(kappa[row], is_ood, correct)) <= TOL
        assert abs(strict[row] - strict_oscr_loop(kappa[row], is_ood, correct)) <= TOL
    accuracy = np.mean(correct[~is_ood])
    assert abs(got[-1] - accuracy / 2) <= TOL  # all tied: one diagonal segment to (1, acc)
    assert strict[-1] == 0.0  # all tied: nothing is strictly above the only threshold


def test_oscr_known_values() -> None:
    kappa = np.array([0.9, 0.8, 0.7, 0.6])
    is_ood = np.array([False, True, False, True])
    pod = metrics.oscr_pytorch_ood
    assert pod(kappa, is_ood, [True, True, False, True]) == 0.5  # CCR 1/2 from FPR 0
    assert pod(kappa, is_ood, [True, True, True, True]) == 0.75  # = AUROC
    assert pod(kappa, is_ood, [False, True, False, True]) == 0.0
    assert pod(np.zeros(4), is_ood, [True, True, False, False]) == 0.25  # acc / 2
    # strict: points (1, 1/2), (1/2, 1/2) at t = 0.7 and 0.8, (0, 0) at t = 0.9: 1/4 + 1/8
    assert metrics.oscr(kappa, is_ood, [True, True, False, True]) == 0.375
    assert metrics.oscr(kappa, is_ood, [True, True, True, True]) == 0.5  # (1, 1), (1/2, 1/2)...
    assert metrics.oscr(kappa, is_ood, [False, True, False, True]) == 0.0
    assert metrics.oscr(np.zeros(4), is_ood, [True, True, False, False]) == 0.0  # the paper's 0


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(scores(n), st.lists(st.booleans(), min_size=n, max_size=n))
    )
)
def test_aurc_matches_loops(data: tuple) -> None:
    kappa, correct = data[0], np.array(data[1], dtype=bool)
    got = metrics.aurc(kappa, correct)
    assert abs(got - loop_aurc_expected(kappa, correct)) <= TOL
    if np.unique(kappa).size == kappa.size:  # no ties: the plain sorted loop
        assert abs(got - loop_aurc(kappa, correct)) <= TOL


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 300), st.randoms())
def test_aurc_without_ties_is_the_plain_loop(n: int, rnd) -> None:
    rng = np.random.default_rng(rnd.getrandbits(32))
    kappa, correct = rng.permutation(n).astype(float), rng.random(n) < rng.random()
    assert abs(metrics.aurc(kappa, correct) - loop_aurc(kappa, correct)) <= TOL


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_aurc_is_the_mean_over_every_order_of_ties(n: int) -> None:
    """Every κ in {0, 1}^n with every correctness pattern: AURC equals the plain loop averaged
    over all n! orders of the samples (so over all orders of each run of ties)."""
    grid = np.array(list(itertools.product([0.0, 1.0], repeat=n)))
    orders = [np.array(p) for p in itertools.permutations(range(n))]
    for correct in itertools.product([False, True], repeat=n):
        correct = np.array(correct)
        got = metrics.aurc(grid, correct)
        for row, kappa in enumerate(grid):
            mean = np.mean([loop_aurc(kappa[p], correct[p]) for p in orders])
            assert abs(got[row] - mean) <= TOL, (kappa, correct)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_aurc_on_tie_heavy_rows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    correct = rng.random(n) < 0.7
    kappa = tie_heavy_rows(rng, n) + 0.5 * correct
    kappa[-1] = 1.0
    got = metrics.aurc(kappa, correct)
    for row in range(kappa.shape[0]):
        assert abs(got[row] - loop_aurc_expected(kappa[row], correct)) <= TOL
    assert abs(got[0] - loop_aurc(kappa[0], correct)) <= TOL  # continuous: no ties
    assert abs(got[-1] - np.mean(~correct)) <= TOL  # all tied: the error rate at every coverage


def test_aurc_known_values_and_direction() -> None:
    correct = np.array([True, True, False, True])
    kappa = np.array([0.9, 0.8, 0.7, 0.6])
    assert abs(metrics.aurc(kappa, correct) - (0 + 0 + 1 / 3 + 1 / 4) / 4) <= TOL
    assert metrics.aurc(kappa, np.ones(4, bool)) == 0.0
    assert metrics.aurc(kappa, np.zeros(4, bool)) == 1.0
    ranked_well = metrics.aurc(np.array([3.0, 2.0, 1.0, 0.0]), np.array([1, 1, 1, 0]))
    ranked_badly = metrics.aurc(np.array([0.0, 1.0, 2.0, 3.0]), np.array([1, 1, 1, 0]))
    assert ranked_well < ranked_badly  # lower is better


@st.composite
def judged_batches(draw: st.DrawFn) -> tuple:
    """(kappa (a, b, n), is_ood (n,) or (a, b, n), correct (n,) or (a, b, n))."""
    kappa, is_ood = draw(batches())
    shape = kappa.shape if draw(st.booleans()) else kappa.shape[-1:]
    correct = np.array(
        draw(st.lists(st.booleans(), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    ).reshape(shape)
    return kappa, is_ood, correct


@settings(max_examples=100, deadline=None)
@given(judged_batches())
def test_oscr_aurc_batched_and_evaluate_equal_row_loop(data: tuple) -> None:
    kappa, is_ood, correct = data
    together = metrics.evaluate(kappa, is_ood, metrics.KAPPA_METRICS, correct=correct)
    oscr = metrics.oscr(kappa, is_ood, correct)
    diagonal = metrics.oscr_pytorch_ood(kappa, is_ood, correct)
    aurc = metrics.aurc(kappa, correct)
    assert oscr.shape == aurc.shape == kappa.shape[:-1]
    for index in np.ndindex(kappa.shape[:-1]):
        row_ood = is_ood if is_ood.ndim == 1 else is_ood[index]
        row_correct = correct if correct.ndim == 1 else correct[index]
        assert oscr[index] == metrics.oscr(kappa[index], row_ood, row_correct)
        assert aurc[index] == metrics.aurc(kappa[index], row_correct)
        assert together["oscr"][index] == oscr[index]
        assert diagonal[index] == metrics.oscr_pytorch_ood(kappa[index], row_ood, row_correct)
        assert together["oscr_pytorch_ood"][index] == diagonal[index]
        ids = ~row_ood
        assert together["aurc"][index] == metrics.aurc(kappa[index][ids], row_correct[ids])
        for name in metrics.DEFAULT_KAPPA_METRICS + ("ap_in", "ap_out", "fpr95_ood"):
            assert together[name][index] == metrics.METRICS[name](kappa[index], row_ood)


@pytest.mark.parametrize("shared_labels", [True, False])
def test_oscr_aurc_over_many_blocks(shared_labels: bool) -> None:
    rng = np.random.default_rng(11)
    rows, n = 700, 3000  # several internal blocks, the last one partial
    kappa = rng.normal(size=(rows, n)).astype(np.float32)
    kappa[::2] = np.round(kappa[::2], 1)
    shape = (n,) if shared_labels else (rows, n)
    is_ood, correct = rng.random(shape) < 0.4, rng.random(shape) < 0.8
    names = ("oscr", "oscr_pytorch_ood", "aurc", "auroc")
    together = metrics.evaluate(kappa, is_ood, names, correct=correct)
    for row in (0, 1, 348, 349, 350, 699):
        row_ood = is_ood if shared_labels else is_ood[row]
        row_correct = correct if shared_labels else correct[row]
        args = (kappa[row], row_ood, row_correct)
        assert together["oscr"][row] == metrics.oscr(*args)
        assert abs(together["oscr"][row] - strict_oscr_loop(*args)) <= TOL
        assert together["oscr_pytorch_ood"][row] == metrics.oscr_pytorch_ood(*args)
        assert abs(together["oscr_pytorch_ood"][row] - loop_oscr(*args)) <= TOL
        ids = ~row_ood
        expected = loop_aurc_expected(kappa[row][ids], row_correct[ids])
        assert abs(together["aurc"][row] - expected) <= TOL


def test_evaluate_without_correct_names_the_metric() -> None:
    kappa, is_ood = np.array([0.3, 0.1, 0.2, 0.4]), np.array([False, True, False, True])
    for name in ("oscr", "aurc"):
        with pytest.raises(ValueError, match=f"'{name}' needs correct=.*seed 3"):
            metrics.evaluate(kappa, is_ood, ["auroc", name], context="seed 3")
    with pytest.raises(ValueError, match="'oscr' needs correct="):
        metrics.oscr(kappa, is_ood, None)
    with pytest.raises(ValueError, match="'aurc' needs correct="):
        metrics.aurc(kappa, None)
    with pytest.raises(ValueError, match=r"correct of shape \(3,\).*\(4,\)"):
        metrics.evaluate(kappa, is_ood, ["oscr"], correct=[True, False, True])
    with pytest.raises(ValueError, match="correct must be boolean"):
        metrics.aurc(kappa, [0, 2, 1, 1])


def test_evaluate_aurc_alone_needs_id_samples_only() -> None:
    kappa = np.array([[0.3, 0.1, 0.2, 0.4], [0.5, 0.6, 0.7, 0.8]])
    is_ood = np.array([[False, True, False, True], [False, False, False, False]])
    correct = np.array([True, False, False, True])
    got = metrics.evaluate(kappa, is_ood, ["aurc"], correct=correct)["aurc"]
    assert got[0] == metrics.aurc([0.3, 0.2], [True, False])
    assert got[1] == metrics.aurc(kappa[1], correct)
    with pytest.raises(ValueError, match="no OOD"):
        metrics.evaluate(kappa, is_ood, ["aurc", "oscr"], correct=correct)
    with pytest.raises(ValueError, match="no ID .*AURC needs ID samples"):
        metrics.evaluate(kappa, ~is_ood[1], ["aurc"], correct=correct)


def test_existing_metrics_unchanged_by_correct() -> None:
    rng = np.random.default_rng(5)
    kappa, is_ood = np.round(rng.normal(size=(6, 50)), 1), rng.random(50) < 0.5
    plain = metrics.evaluate(kappa, is_ood)
    with_correct = metrics.evaluate(
        kappa, is_ood, metrics.KAPPA_METRICS, correct=rng.random(50) < 0.5
    )
    for name, values in plain.items():
        np.testing.assert_array_equal(values, with_correct[name])


def test_metric_info_records() -> None:
    from oodsim.stats import LOWER_IS_BETTER, higher_is_better

    info = metrics.METRIC_INFO
    assert set(info) == set(metrics.METRICS)
    for name, record in info.items():
        assert record.name == name and record.function is metrics.METRICS[name]
        assert record.range == metrics.metric_range(name)
        assert record.range == {"brier": (0.0, 2.0), "nll": (0.0, np.inf)}.get(name, (0.0, 1.0))
        assert record.inputs in metrics.METRIC_INPUTS and record.reproduces
        assert higher_is_better(name) == record.higher_is_better
        assert higher_is_better(name.upper()) == record.higher_is_better
    lower = {name for name, record in info.items() if not record.higher_is_better}
    selective = {"aurc", "aurc_thresholds", "eaurc", "selective_risk95"}
    calibration = {"ece", "brier", "nll"}
    assert lower == {"fpr95", "fpr95_ood", "fpr_at_val95", *selective, *calibration}
    assert lower <= LOWER_IS_BETTER
    assert {info["oscr"].inputs, info["aurc"].inputs} == {"kappa+is_ood+correct", "kappa+correct"}
    assert info["oscr"].needs_correct and info["aurc"].needs_correct
    assert not info["auroc"].needs_correct and info["accuracy"].inputs == "predictions+labels"
    # the records decide, never the name: a name without one is higher-is-better, unbounded
    assert higher_is_better("fpr_95") and higher_is_better("some_protocol_metric")
    assert metrics.metric_range("unknown") is None and "fpr_95" not in LOWER_IS_BETTER
    assert dict(metrics.METRIC_RANGES) == {name: r.range for name, r in info.items()}
    # ImageNet-O's names are records of the metrics they are, which specs offer instead
    for name, same_as in (("aupr", "aupr_out"), ("ap", "ap_out")):
        assert info[name].same_as == same_as and info[name].kernel == info[same_as].kernel
        assert info[name].label and name not in metrics.KAPPA_METRICS
    kernels = {name: r.kernel for name, r in info.items() if r.kernel is not None}
    assert set(metrics.KAPPA_METRICS) == set(kernels) - {"aupr", "ap"}
    with pytest.raises(OodsimError):
        metrics.MetricInfo(name="x", function=len, higher_is_better=True, inputs="kappa")
    assert set(metrics.__all__) >= {"fpr95_ood", "ap_in", "ap_out", "oscr", "aurc", "METRIC_INFO"}
