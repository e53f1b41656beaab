"""C-OOD class severity on the paper's scale: the mean *confidence* (probability for softmax
response, −H for entropy), not the mean of the stored κ (log-odds, −log H)."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from scipy.special import expit

from oodsim.detectors import confidence, get_detector
from oodsim.detectors.scales import CONFIDENCE_SCALES, to_confidence
from oodsim.errors import UnknownNameError
from oodsim.outputs import Outputs
from oodsim.protocols.severity import levels as sev

N_CLASSES, N_EST, N_TEST, GROUP, N_LEVELS = 12, 30, 10, 3, 11


def _pool_logits(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Logits (samples, 4 model classes) of an OOD pool of 12 classes, 40 samples each. Half of
    the classes are "mostly unsure, a few saturated" (log-odds up to ~60, probability ≈ 1): their
    mean log-odds is high, their mean probability low; the other half are uniformly confident.
    The two scales then order the classes differently."""
    rows, labels = [], []
    for c in range(N_CLASSES):
        n = N_EST + N_TEST
        if c % 2 == 0:
            margin = rng.uniform(0.0, 0.6, n)
            margin[rng.random(n) < 0.15] = rng.uniform(40, 60)  # a few saturated samples
        else:
            margin = rng.uniform(1.5, 3.0, n) + 0.1 * c
        z = rng.normal(0.0, 0.05, (n, 4))
        z[:, 0] += margin
        rows.append(z)
        labels.append(np.full(n, c))
    return np.concatenate(rows), np.concatenate(labels)


def _max_softmax_mpmath(z: np.ndarray) -> float:
    """max softmax of one logit row with 50 digits: an oracle independent of oodsim."""
    with mpmath.workdps(50):
        exps = [mpmath.exp(mpmath.mpf(float(v))) for v in z]
        return float(max(exps) / mpmath.fsum(exps))


def _windows(severity: np.ndarray) -> list[list[int]]:
    """Algorithm 1's windows, written out: sort ascending, level i starts at ⌊i/(L−1)·M⌋."""
    order = sorted(range(len(severity)), key=lambda c: (severity[c], c))
    m = len(severity) - GROUP + 1
    starts = [min(int(i * m // (N_LEVELS - 1)), m - 1) for i in range(N_LEVELS)]
    return [order[s : s + GROUP] for s in starts]


def test_softmax_levels_are_built_on_probabilities_computed_independently() -> None:
    rng = np.random.default_rng(7)
    logits, labels = _pool_logits(rng)
    kappa = confidence("msp", Outputs(logits=logits))
    id_kappa = confidence("msp", Outputs(logits=_pool_logits(np.random.default_rng(1))[0]))
    scale = get_detector("msp").confidence_scale
    assert scale == "probability"
    bench = sev.severity_benchmark(
        id_kappa, kappa, labels, group_size=GROUP, rng=3, n_est=N_EST, n_test=N_TEST, scale=scale
    )
    split = bench.split
    probability = np.array([_max_softmax_mpmath(z) for z in logits[split.est_index]])
    want = np.array([probability[split.est_class == c].mean() for c in range(N_CLASSES)])
    np.testing.assert_allclose(bench.class_severity, want, rtol=1e-12)
    assert ((bench.class_severity >= 0) & (bench.class_severity <= 1)).all()
    assert [level.tolist() for level in bench.levels] == _windows(want)
    levels_of = [sorted(level.tolist()) for level in bench.levels]
    np.testing.assert_allclose(bench.level_severity, [want[lv].mean() for lv in levels_of])
    # the stored κ (log-odds) would have ordered the classes otherwise: the scale matters here
    log_odds = sev.class_severity(kappa[split.est_index], split.est_class, N_CLASSES)
    assert _windows(log_odds) != _windows(want)


def test_entropy_severity_is_minus_entropy() -> None:
    logits, labels = _pool_logits(np.random.default_rng(2))
    kappa = confidence("entropy", Outputs(logits=logits))
    assert get_detector("entropy").confidence_scale == "negative_entropy"
    minus_h = np.empty(len(logits))
    for i, z in enumerate(logits):
        with mpmath.workdps(50):
            exps = [mpmath.exp(mpmath.mpf(float(v))) for v in z]
            total = mpmath.fsum(exps)
            minus_h[i] = float(mpmath.fsum(e / total * mpmath.log(e / total) for e in exps))
    np.testing.assert_allclose(to_confidence(kappa, "negative_entropy"), minus_h, rtol=1e-9)
    bench = sev.severity_benchmark(
        kappa[:50],
        kappa,
        labels,
        group_size=GROUP,
        rng=0,
        n_est=N_EST,
        n_test=N_TEST,
        scale="negative_entropy",
    )
    assert (bench.class_severity <= 0).all()


def test_scales_are_declared_and_keep_rankings() -> None:
    declared = {
        name: get_detector(name).confidence_scale
        for name in (
            "msp",
            "temperature",
            "odin",
            "mc_dropout",
            "entropy",
            "mc_dropout_entropy",
            "max_logit",
            "energy",
            "mahalanobis",
            "knn",
            "vim",
            "openmax",
        )
    }
    assert {n for n, s in declared.items() if s == "probability"} == {
        "msp",
        "temperature",
        "odin",
        "mc_dropout",
    }
    assert {n for n, s in declared.items() if s == "negative_entropy"} == {
        "entropy",
        "mc_dropout_entropy",
    }
    kappa = np.linspace(-30, 30, 101)
    for name in CONFIDENCE_SCALES:
        assert (np.diff(to_confidence(kappa, name)) >= 0).all()  # never reorders samples
    np.testing.assert_array_equal(to_confidence(kappa, "probability"), expit(kappa))
    with pytest.raises(UnknownNameError, match="confidence_scale"):
        to_confidence(kappa, "logit")


def test_levels_score_oscr_and_aurc_with_the_id_correctness() -> None:
    """Metrics that need each ID sample's correctness get it at every level, and equal the
    metric called on the level's own benchmark."""
    from oodsim import metrics

    rng = np.random.default_rng(5)
    id_kappa = rng.normal(2.0, 1.0, 80)
    correct = rng.random(80) < 0.8
    ood_kappa = rng.normal(np.repeat(np.linspace(-1, 1.5, 6), 20), 1.0)
    ood_class = np.repeat(np.arange(6), 20)
    levels = [np.array([0, 1]), np.array([2, 3]), np.array([4, 5])]
    got = sev.level_metrics(
        id_kappa,
        ood_kappa,
        levels,
        ood_class=ood_class,
        metrics=("oscr", "aurc"),
        id_correct=correct,
    )
    for i, level in enumerate(levels):
        ood = ood_kappa[np.isin(ood_class, level)]
        kappa = np.r_[id_kappa, ood]
        is_ood = np.r_[np.zeros(80, bool), np.ones(ood.size, bool)]
        want = metrics.oscr(kappa, is_ood, np.r_[correct, np.ones(ood.size, bool)])
        assert got["oscr"][i] == pytest.approx(want, abs=1e-12)
        assert got["aurc"][i] == pytest.approx(metrics.aurc(id_kappa, correct), abs=1e-12)
    with pytest.raises(ValueError, match="correct"):
        sev.level_metrics(id_kappa, ood_kappa, levels, ood_class=ood_class, metrics=("oscr",))


def test_a_user_detector_declares_its_scale() -> None:
    from oodsim.detectors import register

    @register("test_scale_default", needs={"logits"}, replace=True)
    def plain(outputs, *, fit=None):
        return outputs.logits.max(axis=1)

    @register(
        "test_scale_probability", needs={"logits"}, replace=True, confidence_scale="probability"
    )
    def log_odds(outputs, *, fit=None):
        return outputs.logits.max(axis=1)

    assert get_detector("test_scale_default").confidence_scale == "kappa"
    assert get_detector("test_scale_probability").confidence_scale == "probability"
    with pytest.raises(UnknownNameError, match="confidence_scale"):
        register("test_scale_bad", needs={"logits"}, replace=True, confidence_scale="logit")(plain)
