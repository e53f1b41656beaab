"""``pytorch_ood:<Class>`` detectors: each supported class gives κ = −(its own score) on the same
arrays, names are checked where a spec is built, and a run uses them from cached outputs."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

import oodsim
from oodsim import Outputs
from oodsim.detectors import _registry as registry
from oodsim.detectors import available, confidence, get_detector
from oodsim.detectors import pytorch_ood as adapter
from oodsim.detectors.vim import recover_linear_head
from oodsim.errors import SpecError, UnknownNameError
from oodsim.models.architectures import build_model
from oodsim.results import store_counts
from oodsim.specs import DetectorSpec
from tests.conftest import ROOT, small_digits


class _Detectors:
    """``pytorch_ood.detector``, imported on first use (with torchvision, about 2 CPU-s that
    every test process would pay while collecting)."""

    def __getattr__(self, name: str) -> object:
        return getattr(importlib.import_module("pytorch_ood.detector"), name)


pod = _Detectors()

N_CLASSES, N_FEATURES = 6, 16
RNG = np.random.default_rng(0)
#: the final layer: class c reads feature c, so the linear head classifies the clusters well
W = 2.0 * np.eye(N_CLASSES, N_FEATURES) + 0.1 * RNG.normal(size=(N_CLASSES, N_FEATURES))
B = 0.1 * RNG.normal(size=N_CLASSES)


def _outputs(n: int) -> Outputs:
    """Non-negative (post-ReLU) 16-d features in 6 clusters, logits = f Wᵀ + b."""
    labels = np.arange(n) % N_CLASSES
    features = np.abs(
        RNG.normal(size=(n, N_FEATURES)) + 3.0 * np.eye(N_CLASSES, N_FEATURES)[labels]
    )
    return Outputs(logits=features @ W.T + B, features=features, labels=labels)


TRAIN, VAL, TEST = _outputs(300), _outputs(120), _outputs(100)
MODEL = build_model(
    "small_cnn", in_channels=1, n_classes=N_CLASSES, image_size=8, dropout=0.2, width=8, init_seed=0
).eval()  # features of width 2 * 8 = 16
X = torch.from_numpy(RNG.normal(size=(100, 1, 8, 8)).astype(np.float32))
HEAD = {"head_weight": W, "head_bias": B}


def f32(array: np.ndarray) -> torch.Tensor:
    return torch.tensor(array, dtype=torch.float32)  # a copy: Outputs are read-only


def labels(outputs: Outputs) -> torch.Tensor:
    return torch.from_numpy(outputs.labels.astype(np.int64))


def linear() -> torch.nn.Linear:
    head = torch.nn.Linear(N_FEATURES, N_CLASSES)
    with torch.no_grad():
        head.weight.copy_(f32(W))
        head.bias.copy_(f32(B))
    return head


def fitted(detector, outputs: Outputs, kind: str = "features"):
    """``detector.fit_<kind>(...)`` on the in-distribution arrays of ``outputs``."""
    return getattr(detector, f"fit_{kind}")(f32(getattr(outputs, kind)), labels(outputs))


ZT, FT = f32(TEST.logits), f32(TEST.features)

#: name → (the oodsim call's fit split and parameters, pytorch-ood's own outlier score)
ON_OUTPUTS: dict[str, tuple[Outputs | None, dict, Callable[[], torch.Tensor]]] = {
    "MaxSoftmax": (None, {"t": 2.0}, lambda: pod.MaxSoftmax.score(ZT, t=2.0)),
    "EnergyBased": (None, {"t": 2.0}, lambda: pod.EnergyBased.score(ZT, t=2.0)),
    "MaxLogit": (None, {}, lambda: pod.MaxLogit.score(ZT)),
    "Entropy": (None, {}, lambda: pod.Entropy.score(ZT)),
    "GEN": (None, {"gamma": 0.5, "M": 3}, lambda: pod.GEN.score(ZT, gamma=0.5, M=3)),
    "KLMatching": (
        VAL,
        {},
        lambda: fitted(pod.KLMatching(None), VAL, "logits").predict_logits(ZT),
    ),
    "TemperatureScaling": (
        VAL,
        {},
        lambda: fitted(pod.TemperatureScaling(None), VAL, "logits").predict_logits(ZT),
    ),
    "OpenMax": (
        TRAIN,
        {"tailsize": 15, "alpha": 3},
        lambda: fitted(pod.OpenMax(None, tailsize=15, alpha=3), TRAIN, "logits").predict_logits(ZT),
    ),
    "Mahalanobis": (
        TRAIN,
        {},
        lambda: fitted(pod.Mahalanobis(None), TRAIN).predict_features(FT),
    ),
    "RMD": (TRAIN, {}, lambda: fitted(pod.RMD(None), TRAIN).predict_features(FT)),
    "GMM": (
        TRAIN,
        {"reg": 1e-3},
        lambda: fitted(pod.GMM(None, reg=1e-3), TRAIN).predict_features(FT),
    ),
    "KNN": (
        TRAIN,
        {"k": 7, "normalize": False},
        lambda: fitted(pod.KNN(None, k=7, normalize=False), TRAIN).predict_features(FT),
    ),
    "ViM": (
        TRAIN,
        {"d": 5, **HEAD},
        lambda: fitted(pod.ViM(None, d=5, w=f32(W), b=f32(B)), TRAIN).predict_features(FT),
    ),
    "DICE": (
        TRAIN,
        {"p": 0.5, **HEAD},
        lambda: fitted(pod.DICE(None, w=f32(W), b=f32(B), p=0.5), TRAIN).predict_features(FT),
    ),
    "LTS": (TRAIN, {"p": 0.2, **HEAD}, lambda: pod.LTS(None, linear(), p=0.2).predict_features(FT)),
    "NCI": (
        TRAIN,
        {"alpha": 0.01, **HEAD},
        lambda: fitted(pod.NCI(None, linear(), alpha=0.01), TRAIN).predict_features(FT),
    ),
    "NNGuide": (
        TRAIN,
        {"k": 5, **HEAD},
        lambda: fitted(pod.NNGuide(None, linear(), k=5), TRAIN).predict_features(FT),
    ),
    "PNML": (
        TRAIN,
        {"eps": 1e-9, **HEAD},
        lambda: fitted(pod.PNML(None, linear(), eps=1e-9), TRAIN).predict_features(FT),
    ),
    "SHE": (TRAIN, HEAD, lambda: fitted(pod.SHE(None, linear()), TRAIN).predict_features(FT)),
    "fDBD": (TRAIN, HEAD, lambda: fitted(pod.fDBD(None, linear()), TRAIN).predict_features(FT)),
    "ReAct": (
        TRAIN,
        {"percentile": 0.8, **HEAD},
        lambda: (
            pod.ReAct(None, linear(), percentile=0.8)
            .fit_feature_maps(f32(TRAIN.features), labels(TRAIN))
            .predict_feature_maps(FT)
        ),
    ),
    "VRA": (
        TRAIN,
        {"lower_percentile": 0.05, "upper_percentile": 0.9, **HEAD},
        lambda: (
            pod.VRA(None, linear(), lower_percentile=0.05, upper_percentile=0.9)
            .fit_feature_maps(f32(TRAIN.features), labels(TRAIN))
            .predict_feature_maps(FT)
        ),
    ),
}


def _mcd_direct() -> torch.Tensor:
    torch.manual_seed(adapter._block_seed(7, 0))  # 100 rows: one block
    return pod.MCD(MODEL, samples=5, mode="mean").predict(X)


def _mahalanobis_odin_direct() -> torch.Tensor:
    detector = pod.MahalanobisODIN(MODEL.embed, eps=0.001)
    detector.fit_features(f32(TRAIN.features), labels(TRAIN))
    return detector.predict(X)


ON_MODEL: dict[str, tuple[Outputs | None, dict, Callable[[], torch.Tensor]]] = {
    "ODIN": (
        None,
        {"eps": 0.002, "temperature": 10.0},
        lambda: pod.ODIN(MODEL, eps=0.002, temperature=10.0).predict(X),
    ),
    "MCD": (None, {"samples": 5, "mode": "mean", "seed": 7}, _mcd_direct),
    "GradNorm": (
        None,
        {"temperature": 2.0},
        lambda: pod.GradNorm(MODEL, temperature=2.0).predict(X),
    ),
    "GradUncertainty": (None, {}, lambda: pod.GradUncertainty(MODEL).predict(X)),
    "MahalanobisODIN": (TRAIN, {"eps": 0.001}, _mahalanobis_odin_direct),
}


def test_every_class_of_the_module_is_classified_once() -> None:
    import pytorch_ood.api
    import pytorch_ood.detector

    classes = {
        name
        for name, obj in vars(pytorch_ood.detector).items()
        if inspect.isclass(obj) and issubclass(obj, pytorch_ood.api.Detector)
    }
    assert set(adapter.SUPPORTED) | set(adapter.UNSUPPORTED) == classes
    assert not set(adapter.SUPPORTED) & set(adapter.UNSUPPORTED)
    assert set(adapter.SUPPORTED) == set(ON_OUTPUTS) | set(ON_MODEL)  # each tested below


@pytest.mark.parametrize("name", sorted(ON_OUTPUTS))
def test_cached_output_classes_equal_the_class_called_directly(name: str) -> None:
    fit, params, direct = ON_OUTPUTS[name]
    detector = get_detector(f"pytorch_ood:{name}")
    assert "model" not in detector.needs
    kappa = confidence(f"pytorch_ood:{name}", TEST, fit=fit, **params)
    assert kappa.dtype == np.float64 and kappa.shape == (len(TEST),)
    expected = -direct().detach().double().numpy()
    np.testing.assert_allclose(kappa, expected, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", sorted(ON_MODEL))
def test_model_classes_equal_the_class_called_directly(name: str) -> None:
    fit, params, direct = ON_MODEL[name]
    assert get_detector(f"pytorch_ood:{name}").needs == {"model"}
    with torch.inference_mode():  # the adapter turns on the gradients it needs
        kappa = confidence(f"pytorch_ood:{name}", None, fit=fit, model=MODEL, inputs=X, **params)
    assert not MODEL.training and all(p.grad is None for p in MODEL.parameters())
    assert all(not m.training for m in MODEL.modules())
    expected = -direct().detach().double().numpy()
    for p in MODEL.parameters():
        p.grad = None
    MODEL.eval()
    np.testing.assert_allclose(kappa, expected, rtol=1e-6, atol=1e-9)


def test_energy_based_is_minus_its_score_and_our_energy() -> None:
    kappa = confidence("pytorch_ood:EnergyBased", TEST)
    np.testing.assert_allclose(kappa, -pod.EnergyBased.score(ZT).double().numpy(), rtol=1e-7)
    np.testing.assert_allclose(kappa, confidence("energy", TEST), rtol=1e-6)
    np.testing.assert_allclose(
        confidence("pytorch_ood:EnergyBased", TEST, t=3.0),
        confidence("energy", TEST, temperature=3.0),
        rtol=1e-6,
    )
    assert not np.allclose(confidence("pytorch_ood:EnergyBased", TEST, t=3.0), kappa)


def test_the_recovered_final_layer_matches_the_given_one() -> None:
    weight, bias = recover_linear_head(TRAIN.features, TRAIN.logits)
    np.testing.assert_allclose(weight, W, atol=1e-9)
    for name in ("ViM", "DICE", "SHE", "NCI"):
        np.testing.assert_allclose(
            confidence(f"pytorch_ood:{name}", TEST, fit=TRAIN),
            confidence(f"pytorch_ood:{name}", TEST, fit=TRAIN, **HEAD),
            rtol=1e-5,
            atol=1e-6,
        )
    # ViM's d defaults to D // 2, as oodsim's vim; both use the same (W, b)
    np.testing.assert_allclose(
        confidence("pytorch_ood:ViM", TEST, fit=TRAIN, **HEAD),
        confidence("pytorch_ood:ViM", TEST, fit=TRAIN, d=N_FEATURES // 2, **HEAD),
    )


def test_a_final_layer_that_cannot_be_recovered_says_so() -> None:
    scrambled = Outputs(
        logits=RNG.normal(size=TRAIN.logits.shape), features=TRAIN.features, labels=TRAIN.labels
    )
    with pytest.raises(ValueError, match="'pytorch_ood:ViM': the fit logits are not a linear"):
        confidence("pytorch_ood:ViM", TEST, fit=scrambled)
    with pytest.raises(ValueError, match="'pytorch_ood:DICE' needs fit=Outputs"):
        confidence("pytorch_ood:DICE", TEST)
    with torch.inference_mode():  # fitting T takes gradients even here
        kappa = confidence("pytorch_ood:TemperatureScaling", TEST, fit=VAL)
    np.testing.assert_array_equal(
        kappa, confidence("pytorch_ood:TemperatureScaling", TEST, fit=VAL)
    )


def test_mcd_is_reproducible_from_its_seed() -> None:
    first = confidence("pytorch_ood:MCD", None, model=MODEL, inputs=X, samples=4, seed=1)
    again = confidence("pytorch_ood:MCD", None, model=MODEL, inputs=X, samples=4, seed=1)
    other = confidence("pytorch_ood:MCD", None, model=MODEL, inputs=X, samples=4, seed=2)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    assert get_detector("pytorch_ood:MCD").stochastic


def test_metadata_version_and_parameters_come_from_the_class() -> None:
    import pytorch_ood

    energy = get_detector("pytorch_ood:EnergyBased")
    assert energy.version == f"{adapter.ADAPTER_VERSION}+pytorch-ood-{pytorch_ood.__version__}"
    assert DetectorSpec(name="pytorch_ood:EnergyBased").version == energy.version
    assert dict(energy.defaults) == {"t": 1.0} and energy.needs == {"logits"}
    assert get_detector("pytorch_ood:KNN").defaults == {"k": 50, "normalize": True}
    assert get_detector("pytorch_ood:KLMatching").fit_on == "val"
    vim = get_detector("pytorch_ood:ViM")
    assert vim.fit_on == "train" and vim.needs == {"logits", "features"}
    assert dict(vim.defaults) == {"d": None, "head_weight": None, "head_bias": None}
    odin = get_detector("pytorch_ood:ODIN")  # criterion and norm_std stay pytorch-ood's defaults
    assert dict(odin.defaults) == {"eps": 0.0014, "temperature": 1000.0, "batch_size": 256}
    assert {n for n in available() if n.startswith("pytorch_ood:")} == {
        f"pytorch_ood:{n}" for n in adapter.SUPPORTED
    }


def test_spec_parameters_are_checked_and_reach_the_class() -> None:
    spec = DetectorSpec(name="pytorch_ood:EnergyBased", params={"t": [0.5, 2.0]})
    assert spec.kwargs == {"t": (0.5, 2.0)}
    with pytest.raises(SpecError, match=r"parameter t: 0 is not allowed; expected a number > 0"):
        DetectorSpec(name="pytorch_ood:EnergyBased", params={"t": 0})
    with pytest.raises(UnknownNameError, match="temperature.*expected one of 't'"):
        DetectorSpec(name="pytorch_ood:EnergyBased", params={"temperature": 2.0})
    with pytest.raises(SpecError, match="parameter k: 1.5 is not allowed; expected an integer"):
        DetectorSpec(name="pytorch_ood:KNN", params={"k": 1.5})
    with pytest.raises(SpecError, match="parameter mode: 'max' is not allowed; expected one of"):
        DetectorSpec(name="pytorch_ood:MCD", params={"mode": "max"})
    with pytest.raises(SpecError, match=r"parameter p: nan"):
        DetectorSpec(name="pytorch_ood:DICE", params={"p": float("nan")})
    # a fraction outside [0, 1] is refused by oodsim's table, before any class is built
    with pytest.raises(SpecError, match=r"parameter p: 1\.5 .*expected a number in \[0, 1\]"):
        DetectorSpec(name="pytorch_ood:DICE", params={"p": 1.5})
    with pytest.raises(ValueError, match=r"pytorch_ood:DICE': p must be a number in \[0, 1\]"):
        confidence("pytorch_ood:DICE", TEST, fit=TRAIN, p=1.5)
    # a value pytorch-ood itself refuses says which class refused it
    with pytest.raises(ValueError, match="pytorch_ood:VRA.*VRA raised"):
        confidence("pytorch_ood:VRA", TEST, fit=TRAIN, lower_percentile=0.9, upper_percentile=0.5)


@pytest.mark.parametrize(
    "name",
    [
        "pytorch_ood:os.system",
        "pytorch_ood:NoSuchClass",
        "pytorch_ood:odin_preprocessing",  # a function of the module, not a class
        "pytorch_ood:detector",
        "pytorch_ood:__class__",
        "pytorch_ood:",
        "pytorch_ood:MCM",  # a class oodsim cannot run
    ],
)
def test_only_supported_classes_can_be_named(name: str) -> None:
    with pytest.raises(UnknownNameError, match="'pytorch_ood:EnergyBased'"):
        DetectorSpec(name=name)
    with pytest.raises(UnknownNameError, match="'pytorch_ood:ViM'"):
        get_detector(name)


def test_an_unsupported_class_says_why() -> None:
    with pytest.raises(UnknownNameError, match="MCM is not supported: needs the text embeddings"):
        get_detector("pytorch_ood:MCM")
    with pytest.raises(UnknownNameError, match="ASH is not supported: .*feature maps"):
        confidence("pytorch_ood:ASH", TEST)


def test_without_pytorch_ood_the_error_says_how_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pytorch_ood", None)  # what an uninstalled package looks like
    monkeypatch.setattr(registry.REGISTRY, "loaded", {})
    install = re.escape('pip install "oodsim[pytorch-ood]"')
    with pytest.raises(SpecError, match=f"pytorch-ood is not installed: {install}"):
        DetectorSpec(name="pytorch_ood:ViM")
    with pytest.raises(SpecError, match=install):
        confidence("pytorch_ood:EnergyBased", TEST)
    assert "msp" in available() and confidence("msp", TEST).shape == (len(TEST),)


def test_an_old_pytorch_ood_is_refused(monkeypatch) -> None:
    import pytorch_ood

    monkeypatch.setattr(pytorch_ood, "__version__", "0.2.0")
    monkeypatch.setattr(registry.REGISTRY, "loaded", {})
    with pytest.raises(SpecError, match=r"pytorch-ood 0.2.0 is installed: pip install -U"):
        DetectorSpec(name="pytorch_ood:ViM")


def test_the_prefix_is_reserved() -> None:
    with pytest.raises(ValueError, match="reserved"):
        oodsim.detectors.register("pytorch_ood:Mine", needs={"logits"})(lambda out, *, fit=None: 0)


def test_docs_table_lists_every_class() -> None:
    text = (ROOT / "docs" / "detectors.md").read_text(encoding="utf-8")
    section = text.split("## pytorch-ood detectors", 1)[1].split("\n## ", 1)[0]
    for name in [*adapter.SUPPORTED, *adapter.UNSUPPORTED]:
        assert re.search(rf"`(pytorch_ood:)?{name}`", section), name


def test_a_digits_run_and_adding_one_to_it_reads_the_cache(
    cluster_address: str, cache: Path
) -> None:
    detectors = ("msp", "pytorch_ood:MaxSoftmax", "pytorch_ood:Mahalanobis")
    first = oodsim.run(
        small_digits(2, detectors=detectors), address=cluster_address, cache=cache, progress=False
    )
    assert store_counts(first)["computed"] == {"checkpoint": 2, "outputs": 2}
    assert np.isfinite(first.score.values).all()

    more = small_digits(2, detectors=(*detectors, "pytorch_ood:ViM"))
    second = oodsim.run(more, address=cluster_address, cache=cache, progress=False)
    assert store_counts(second)["computed"] == {}  # no training, no inference
    assert set(second.method.values) == {*detectors, "pytorch_ood:ViM"}
    assert np.isfinite(second.score.values).all()
    np.testing.assert_array_equal(
        second.score.sel({"method": list(detectors)}).values, first.score.values
    )
    auroc = second.score.sel({"metric": "auroc"})
    # the same ranking as msp except where pytorch-ood's float32 softmax rounds to 1 (ties)
    np.testing.assert_allclose(
        auroc.sel({"method": "pytorch_ood:MaxSoftmax"}).values,
        auroc.sel({"method": "msp"}).values,
        atol=0.01,
    )
