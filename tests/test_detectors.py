"""Detectors against an independent oracle: pytorch-ood on the same trained model and arrays.

pytorch-ood returns outlier scores s; oodsim returns confidences κ. Where the definitions agree
s = −κ (to float32 precision); elsewhere the test states the documented monotone transform or,
for genuinely different implementations, the strongest agreement that holds honestly. The
softmax κ are log-odds of the max softmax p (p = expit(κ)) or −log of the entropy H
(H = exp(−κ)), so that confident rows do not tie: the oracle is compared on p and −H.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import scipy.spatial.distance
import torch
from scipy import stats
from scipy.special import expit
from sklearn.datasets import load_digits
from sklearn.neighbors import NearestNeighbors
from torch import nn

from oodsim.detectors import confidence, knn, openmax, temperature, weibull
from oodsim.outputs import Outputs


def pood():  # noqa: ANN201
    """pytorch-ood's detectors, the oracle (imported when a test asks: the import takes about
    2 s, which every collection of the suite would pay)."""
    import pytorch_ood.detector

    return pytorch_ood.detector


class TinyNet(nn.Module):
    """The model contract: ``embed`` → features, ``head`` = dropout then linear."""

    def __init__(self, n_classes: int = 6, width: int = 8, n_features: int = 24) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, n_features, 3, padding=1),
            nn.BatchNorm2d(n_features),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(n_features, n_classes))

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(x))


class Setup:
    """A trained TinyNet on digits 0–5 (ID) with digits 6–9 as OOD, and its outputs."""

    def __init__(self) -> None:
        digits = load_digits()
        order = np.random.default_rng(0).permutation(len(digits.target))
        x = torch.tensor(digits.images[order], dtype=torch.float32)[:, None] / 16.0
        x = (x - 0.3) / 0.4
        y = torch.tensor(digits.target[order])
        known = y < 6
        xi, yi = x[known], y[known]
        n = len(yi)
        train, val, test = slice(0, n // 2), slice(n // 2, 3 * n // 4), slice(3 * n // 4, n)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.model = TinyNet()
            optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-2)
            for _ in range(8):
                for rows in torch.randperm(n // 2).split(64):
                    optimizer.zero_grad()
                    loss = nn.functional.cross_entropy(self.model(xi[train][rows]), yi[train][rows])
                    loss.backward()
                    optimizer.step()
        self.model.zero_grad(set_to_none=True)
        self.model.eval()
        self.train = self.outputs(xi[train], yi[train])
        self.val = self.outputs(xi[val], yi[val])
        self.inputs = torch.cat([xi[test], x[~known][:250]])
        self.test = self.outputs(self.inputs, torch.cat([yi[test], torch.full((250,), -1)]))

    def outputs(self, x: torch.Tensor, y: torch.Tensor) -> Outputs:
        with torch.no_grad():
            features = self.model.embed(x)
            logits = self.model.head(features)
        return Outputs(logits=logits.numpy(), features=features.numpy(), labels=y.numpy())


@pytest.fixture(scope="module")
def s() -> Iterator[Setup]:
    # tiny tensors: one intra-op thread is faster, and far faster on a busy machine
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield Setup()
    finally:
        torch.set_num_threads(threads)


def t(array: np.ndarray) -> torch.Tensor:
    return torch.tensor(array)  # a copy: Outputs are read-only


def scores(detector_scores: torch.Tensor) -> np.ndarray:
    return detector_scores.detach().cpu().numpy().astype(np.float64)


def rho(kappa: np.ndarray, outlier_score: np.ndarray) -> float:
    """Spearman correlation of κ with −s: 1 when the rankings agree."""
    return float(stats.spearmanr(kappa, -outlier_score)[0])


def as_probability(kappa: np.ndarray) -> np.ndarray:
    """max softmax p from its log-odds κ (msp, temperature, odin, mc_dropout)."""
    return expit(kappa)


def as_negative_entropy(kappa: np.ndarray) -> np.ndarray:
    """−H from κ = −log H (entropy, mc_dropout_entropy)."""
    return -np.exp(-kappa)


def test_setup_is_a_sensible_classifier(s: Setup) -> None:
    accuracy = (s.val.logits.argmax(1) == s.val.labels).mean()
    assert accuracy > 0.85
    assert s.test.features.shape == (len(s.inputs), 24)


# --- logits-only detectors: identical definitions -------------------------------------------


@pytest.mark.parametrize(
    ("name", "params", "oracle", "transform"),
    [
        ("msp", {}, lambda: pood().MaxSoftmax(None), as_probability),
        ("max_logit", {}, lambda: pood().MaxLogit(None), np.asarray),
        ("energy", {}, lambda: pood().EnergyBased(None), np.asarray),
        ("energy", {"temperature": 3.0}, lambda: pood().EnergyBased(None, t=3.0), np.asarray),
        ("entropy", {}, lambda: pood().Entropy(None), as_negative_entropy),
    ],
)
def test_logit_detectors_equal_pytorch_ood(s: Setup, name, params, oracle, transform) -> None:
    kappa = confidence(name, s.test, **params)
    outlier = scores(oracle().predict_logits(t(s.test.logits)))
    assert kappa.dtype == np.float64 and kappa.shape == (len(s.test),)
    np.testing.assert_allclose(transform(kappa), -outlier, atol=2e-6, rtol=1e-6)
    assert rho(kappa, outlier) > 0.9999  # 1 up to float32 ties in pytorch-ood


def test_entropy_differs_from_pytorch_ood_only_by_its_probability_clipping(s: Setup) -> None:
    # pytorch-ood clips p at 1e-7 before p·log p; oodsim is exact. Sharpened logits push
    # probabilities below 1e-7: those rows differ by at most C·1e-7·ln(1e7), and pytorch-ood
    # ties all very confident rows at its floor while oodsim still ranks them.
    sharp = Outputs(logits=s.test.logits.astype(np.float64) * 8)
    p = torch.softmax(t(sharp.logits), 1).numpy()
    clipped = (p < 1e-7).any(axis=1)
    assert 0 < clipped.sum() < len(p)
    kappa = as_negative_entropy(confidence("entropy", sharp))
    outlier = scores(pood().Entropy(None).predict_logits(t(sharp.logits)))
    np.testing.assert_allclose(kappa[~clipped], -outlier[~clipped], atol=1e-9)
    gap = outlier[clipped] + kappa[clipped]
    assert np.all(gap >= -1e-12) and np.all(gap <= 6 * 1e-7 * np.log(1e7) + 1e-12)
    assert len(np.unique(kappa)) > len(np.unique(outlier))


# --- temperature scaling --------------------------------------------------------------------


def test_fitted_temperature_is_the_brute_force_nll_minimum(s: Setup) -> None:
    fitted = temperature.fit_temperature(s.val.logits, s.val.labels)
    grid = np.geomspace(0.05, 20.0, 20001)
    nll = np.array([temperature.nll(s.val.logits, s.val.labels, g) for g in grid[::50]])
    coarse = grid[::50][nll.argmin()]
    fine = grid[(grid > coarse / 1.02) & (grid < coarse * 1.02)]
    nll_fine = [temperature.nll(s.val.logits, s.val.labels, g) for g in fine]
    best = fine[int(np.argmin(nll_fine))]
    step = np.log(grid[1] / grid[0])
    assert abs(np.log(fitted / best)) <= step
    assert temperature.nll(s.val.logits, s.val.labels, fitted) <= min(nll_fine) + 1e-12


def test_temperature_matches_pytorch_ood_at_the_same_temperature(s: Setup) -> None:
    fitted = temperature.fit_temperature(s.val.logits, s.val.labels)
    kappa = confidence("temperature", s.test, fit=s.val)
    outlier = scores(pood().MaxSoftmax(None, t=fitted).predict_logits(t(s.test.logits)))
    np.testing.assert_allclose(as_probability(kappa), -outlier, atol=2e-6)
    assert rho(kappa, outlier) > 0.9999
    fixed = confidence("temperature", s.test, temperature=2.5)
    outlier = scores(pood().MaxSoftmax(None, t=2.5).predict_logits(t(s.test.logits)))
    np.testing.assert_allclose(as_probability(fixed), -outlier, atol=2e-6)


def test_pytorch_ood_temperature_fit_approaches_ours(s: Setup) -> None:
    # pytorch-ood runs L-BFGS (lr 0.01, 50 iterations) per fit call: it stops short of the
    # optimum; repeated calls continue from its last T and converge towards ours.
    ours = temperature.fit_temperature(s.val.logits, s.val.labels)
    oracle = pood().TemperatureScaling(None)
    # How many calls it takes depends on the logits (a trained model's, which differ a little
    # between processors): up to 40, stopping once within 2% of ours.
    nll = [temperature.nll(s.val.logits, s.val.labels, ours)]
    for _ in range(40):
        oracle.fit_logits(t(s.val.logits), t(s.val.labels))
        nll.append(temperature.nll(s.val.logits, s.val.labels, oracle.t.item()))
        if len(nll) > 2 and abs(oracle.t.item() / ours - 1) < 0.02:
            break
    assert min(nll[1:]) >= nll[0] - 1e-9  # nobody beats the exact minimum
    assert nll[-1] < nll[1] and abs(oracle.t.item() / ours - 1) < 0.02


# --- ODIN -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("temp", "eps"), [(1000.0, 0.0014), (1.0, 0.02)])
def test_odin_equals_pytorch_ood(s: Setup, temp: float, eps: float) -> None:
    kappa = confidence(
        "odin",
        s.test,
        model=s.model,
        inputs=s.inputs,
        temperature=temp,
        epsilon=eps,
        batch_size=200,
    )
    outlier = scores(pood().ODIN(s.model, eps=eps, temperature=temp).predict(s.inputs))
    np.testing.assert_allclose(as_probability(kappa), -outlier, atol=1e-6)
    assert rho(kappa, outlier) > 0.9999
    plain = confidence("temperature", s.test, temperature=temp)
    assert np.abs(kappa - plain).max() > 1e-7  # the perturbation did something


def test_odin_leaves_the_model_as_it_was(s: Setup) -> None:
    s.model.train()
    s.model.head[0].eval()
    modes = [m.training for m in s.model.modules()]
    try:
        with torch.inference_mode():
            kappa = confidence("odin", None, model=s.model, inputs=s.inputs[:50], batch_size=16)
        assert [m.training for m in s.model.modules()] == modes
        assert all(p.grad is None for p in s.model.parameters())
    finally:
        s.model.eval()
    again = confidence("odin", None, model=s.model, inputs=s.inputs[:50])
    np.testing.assert_array_equal(kappa, again)  # eval mode inside, batch size irrelevant


# --- MC dropout ------------------------------------------------------------------------------


def test_mc_dropout_agrees_with_pytorch_ood_in_distribution(s: Setup) -> None:
    # Both estimate the same expectation with independent dropout masks (pytorch-ood draws from
    # the global torch RNG, oodsim from its own seeded generators). The gap between them must
    # look like the gap between two oodsim seeds.
    x, n = s.inputs[:300], 200
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        mean_p = pood().MCD.run_mean(s.model, x, n).double()
    outlier = -mean_p.max(dim=1).values.numpy()
    ours = as_probability(
        confidence("mc_dropout", None, model=s.model, inputs=x, n_passes=n, seed=3)
    )
    other_seed = as_probability(
        confidence("mc_dropout", None, model=s.model, inputs=x, n_passes=n, seed=4)
    )
    gap, seed_gap = np.abs(ours + outlier).mean(), np.abs(ours - other_seed).mean()
    assert gap < 1.5 * seed_gap and gap < 0.02
    assert rho(ours, outlier) > 0.99
    entropy = -scores(pood().Entropy(None).predict_logits(mean_p.log()))
    ours_entropy = as_negative_entropy(
        confidence("mc_dropout_entropy", None, model=s.model, inputs=x, n_passes=n, seed=3)
    )
    assert np.abs(ours_entropy - entropy).mean() < 0.03
    assert stats.spearmanr(ours_entropy, entropy)[0] > 0.99


def test_mc_dropout_without_dropout_is_the_msp(s: Setup) -> None:
    model = TinyNet()
    model.load_state_dict(s.model.state_dict())
    model.head[0].p = 0.0
    model.eval()
    kappa = confidence("mc_dropout", None, model=model, inputs=s.inputs, n_passes=3)
    with torch.random.fork_rng(devices=[]):
        outlier = scores(pood().MCD(model, samples=3, mode="mean").predict(s.inputs))
    np.testing.assert_allclose(kappa, confidence("msp", s.test), atol=1e-5)
    np.testing.assert_allclose(as_probability(kappa), -outlier, atol=1e-6)


def test_mc_dropout_is_reproducible_and_batch_size_invariant(s: Setup) -> None:
    x = s.inputs[:150]
    base = confidence("mc_dropout", None, model=s.model, inputs=x, n_passes=5, seed=7)
    small = confidence(
        "mc_dropout", None, model=s.model, inputs=x, n_passes=5, seed=7, batch_size=7
    )
    np.testing.assert_allclose(small, base, rtol=0, atol=1e-12)
    # the same masks when the whole network runs each pass (no embed/head fast path)
    plain = nn.Sequential(s.model.encoder, s.model.head)
    full = confidence("mc_dropout", None, model=plain, inputs=x, n_passes=5, seed=7)
    np.testing.assert_allclose(full, base, rtol=0, atol=1e-6)
    other = confidence("mc_dropout", None, model=s.model, inputs=x, n_passes=5, seed=8)
    assert np.abs(other - base).max() > 1e-3


def test_mc_dropout_restores_modes_and_keeps_batchnorm_statistics(s: Setup) -> None:
    bn = s.model.encoder[1]
    before = bn.running_mean.clone()
    s.model.train()
    try:
        confidence("mc_dropout_entropy", None, model=s.model, inputs=s.inputs[:40], n_passes=4)
        assert all(m.training for m in s.model.modules())
        assert torch.equal(bn.running_mean, before)
        assert all(p.grad is None for p in s.model.parameters())
    finally:
        s.model.eval()


# --- feature detectors -----------------------------------------------------------------------


def test_mahalanobis_equals_scipy_for_some_rows(s: Setup) -> None:
    ridge = 1e-6
    kappa = confidence("mahalanobis", s.test, fit=s.train, ridge=ridge)
    x, y = s.train.features.astype(np.float64), s.train.labels
    means = np.stack([x[y == c].mean(0) for c in range(6)])
    cov = np.cov((x - means[y]).T, bias=True)
    inverse = np.linalg.inv(cov + ridge * np.trace(cov) / len(cov) * np.eye(len(cov)))
    for row in (0, 5, 100, 300, 500):
        u = s.test.features[row].astype(np.float64)
        expected = min(scipy.spatial.distance.mahalanobis(u, m, inverse) for m in means)
        assert kappa[row] == pytest.approx(-expected, rel=1e-9)


def test_mahalanobis_is_a_monotone_transform_of_pytorch_ood(s: Setup) -> None:
    # pytorch-ood: s = ½ min_k d²_S with S the scatter matrix (covariance · N) + 1e-6·I;
    # oodsim: κ = −min_k d_Σ with Σ the covariance. Hence s = κ² / (2N) up to the ridges.
    oracle = pood().Mahalanobis(None).fit_features(t(s.train.features), t(s.train.labels))
    outlier = scores(oracle.predict_features(t(s.test.features)))
    kappa = confidence("mahalanobis", s.test, fit=s.train, ridge=0.0)
    np.testing.assert_allclose(kappa**2 / (2 * len(s.train)), outlier, rtol=1e-4)
    assert rho(kappa, outlier) > 0.9999


def test_knn_equals_sklearn_and_pytorch_ood(s: Setup, monkeypatch) -> None:
    def unit(x):
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    index = NearestNeighbors(n_neighbors=50).fit(unit(s.train.features.astype(np.float64)))
    distance = index.kneighbors(unit(s.test.features.astype(np.float64)))[0][:, -1]
    monkeypatch.setattr(knn, "BLOCK_ELEMENTS", 5000)  # several blocks of queries
    kappa = confidence("knn", s.test, fit=s.train)
    np.testing.assert_allclose(kappa, -distance, atol=1e-9)
    oracle = pood().KNN(None, k=50).fit_features(t(s.train.features), t(s.train.labels))
    outlier = scores(oracle.predict_features(t(s.test.features)))
    np.testing.assert_allclose(kappa, -outlier, atol=1e-6)
    assert rho(kappa, outlier) > 0.9999


def test_knn_clips_k_to_the_fit_size(s: Setup) -> None:
    small = s.train.take(slice(0, 20))
    np.testing.assert_array_equal(
        confidence("knn", s.test, fit=small, k=500), confidence("knn", s.test, fit=small, k=20)
    )


def _head(s: Setup) -> tuple[np.ndarray, np.ndarray]:
    linear = s.model.head[1]
    return linear.weight.detach().numpy(), linear.bias.detach().numpy()


@pytest.mark.parametrize(("dim", "atol"), [(4, 1e-5), (12, 5e-3)])
def test_vim_equals_pytorch_ood(s: Setup, dim: int, atol: float) -> None:
    # pytorch-ood computes in float32: its eigenvectors of the smallest eigenvalues carry
    # ~1e-3 relative error, which grows with the residual dimension D − dim.
    weight, bias = _head(s)
    oracle = pood().ViM(None, d=dim, w=t(weight), b=t(bias))
    oracle.fit_features(t(s.train.features), t(s.train.labels))
    outlier = scores(oracle.predict_features(t(s.test.features)))
    kappa = confidence("vim", s.test, fit=s.train, dim=dim, head_weight=weight, head_bias=bias)
    np.testing.assert_allclose(kappa, -outlier, atol=atol)
    assert rho(kappa, outlier) > 0.9999


def test_vim_recovers_the_linear_head_from_the_fit_split(s: Setup) -> None:
    design = np.hstack([s.train.features, np.ones((len(s.train), 1))])
    assert np.linalg.matrix_rank(design) == design.shape[1]  # identifiable head
    weight, bias = _head(s)
    given = confidence("vim", s.test, fit=s.train, head_weight=weight, head_bias=bias)
    recovered = confidence("vim", s.test, fit=s.train)  # default dim = D // 2 = 12
    np.testing.assert_allclose(recovered, given, atol=1e-4)


# --- OpenMax ---------------------------------------------------------------------------------


def test_weibull_fit_is_the_scipy_mle() -> None:
    rng = np.random.default_rng(0)
    for scale in (0.1, 1.0, 10.0, 100.0):
        distances = rng.gamma(3.0, scale, size=200)
        tail = weibull.fit_tail(distances, 20)
        top = np.sort(distances)[-20:]
        assert tail.shift == weibull.TRANSLATION - top[0]  # libMR: smallest tail value → 10000
        shifted = top + tail.shift
        c, _, lam = stats.weibull_min.fit(shifted, floc=0)
        assert tail.shape == pytest.approx(c, rel=1e-5)
        assert tail.scale == pytest.approx(lam, rel=1e-7)
        mine = stats.weibull_min.logpdf(shifted, tail.shape, scale=tail.scale).sum()
        assert mine >= stats.weibull_min.logpdf(shifted, c, scale=lam).sum() - 1e-9
        np.testing.assert_allclose(
            weibull.tail_cdf(top, *tail),
            stats.weibull_min.cdf(shifted, tail.shape, scale=tail.scale),
            atol=1e-12,
        )


def test_weibull_without_spread_is_a_step() -> None:
    tail = weibull.fit_tail(np.full(5, 2.0), 20)
    assert tail.shape == np.inf
    np.testing.assert_allclose(
        weibull.tail_cdf(np.array([1.9, 2.0, 2.1]), *tail), [0.0, 1 - np.exp(-1), 1.0]
    )


@pytest.mark.parametrize("alpha", [6, 3])
def test_openmax_equals_pytorch_ood_fitted_on_correct_samples(s: Setup, alpha: int) -> None:
    # Differences, both documented: oodsim fits only correctly classified train samples (the
    # paper), pytorch-ood all it is given; and pytorch-ood adds libMR's 10000 shift in the input
    # dtype, so float32 logits quantize the tail to ~1e-3. Hence float64 logits for the oracle.
    correct = s.train.logits.argmax(1) == s.train.labels
    oracle = pood().OpenMax(None, tailsize=20, alpha=alpha, euclid_weight=1.0)
    oracle.fit_logits(t(s.train.logits[correct].astype(np.float64)), t(s.train.labels[correct]))
    unknown = scores(oracle.predict_logits(t(s.test.logits.astype(np.float64))))
    kappa = confidence("openmax", s.test, fit=s.train, alpha=alpha)
    np.testing.assert_allclose(1.0 - kappa, unknown, atol=1e-6)
    assert rho(kappa, unknown) > 0.9999


def test_openmax_eucos_ranks_like_pytorch_ood_weighted_distance(s: Setup) -> None:
    # OSDN's eucos = euclidean/200 + cosine; pytorch-ood's closest setting is the weighted sum
    # w·euclidean + (1 − w)·cosine with w = 1/201, i.e. 200/201 · eucos, and the libMR shift
    # does not commute with that scale: the Weibull fits differ slightly.
    correct = s.train.logits.argmax(1) == s.train.labels
    oracle = pood().OpenMax(None, tailsize=20, alpha=6, euclid_weight=1 / 201)
    oracle.fit_logits(t(s.train.logits[correct].astype(np.float64)), t(s.train.labels[correct]))
    unknown = scores(oracle.predict_logits(t(s.test.logits.astype(np.float64))))
    kappa = confidence("openmax", s.test, fit=s.train, distance="eucos")
    assert rho(kappa, unknown) > 0.999
    assert np.abs(1.0 - kappa - unknown).max() < 0.05


def test_openmax_ignores_misclassified_train_samples(s: Setup, monkeypatch) -> None:
    correct = s.train.logits.argmax(1) == s.train.labels
    assert not correct.all()
    kappa = confidence("openmax", s.test, fit=s.train)
    np.testing.assert_array_equal(kappa, confidence("openmax", s.test, fit=s.train.take(correct)))
    monkeypatch.setattr(openmax, "BLOCK_ELEMENTS", 100)  # many row blocks, same result
    np.testing.assert_array_equal(kappa, confidence("openmax", s.test, fit=s.train))


# --- everything at once ------------------------------------------------------------------------


def test_every_builtin_separates_id_from_ood(s: Setup) -> None:
    from sklearn.metrics import roc_auc_score

    is_id = s.test.labels >= 0
    fits = {"train": s.train, "val": s.val, None: None}
    from oodsim.detectors._registry import BUILTINS

    assert len(BUILTINS) == 12
    for name, det in BUILTINS.items():
        kwargs = {"model": s.model, "inputs": s.inputs} if "model" in det.needs else {}
        if det.stochastic:
            kwargs["n_passes"] = 5
        kappa = confidence(name, s.test, fit=fits[det.fit_on], **kwargs)
        assert roc_auc_score(is_id, kappa) > 0.6, name
