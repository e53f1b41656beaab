"""The detector registry, entry points and the checks ``confidence`` makes before and after."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest

import oodsim
from oodsim.detectors import (
    Detector,
    DetectorChangedModel,
    DetectorInputError,
    DetectorWroteInputs,
    UnknownParameterError,
    at_least,
    available,
    confidence,
    detector_family,
    get_detector,
    greater_than,
    register,
)
from oodsim.detectors import _registry as registry
from oodsim.errors import SpecError, UnknownNameError
from oodsim.outputs import Outputs
from oodsim.results import store_counts
from oodsim.specs import DetectorSpec
from tests.conftest import small_digits

BUILTINS = {
    "msp",
    "temperature",
    "odin",
    "openmax",
    "mc_dropout",
    "mc_dropout_entropy",
    "entropy",
    "max_logit",
    "energy",
    "mahalanobis",
    "knn",
    "vim",
}


def outputs(n: int = 40, classes: int = 4, dim: int = 6, seed: int = 0) -> Outputs:
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % classes
    features = rng.normal(size=(n, dim)) + labels[:, None]
    logits = features @ rng.normal(size=(dim, classes)) + rng.normal(size=classes)
    return Outputs(logits=logits, features=features, labels=labels)


def test_builtins_are_available_with_their_metadata() -> None:
    assert set(available()) >= BUILTINS
    assert available() == sorted(available())
    assert get_detector("mahalanobis").fit_on == "train"
    assert get_detector("temperature").fit_on == "val"
    assert get_detector("odin").needs == {"model"}
    assert get_detector("vim").needs == {"logits", "features"}
    assert get_detector("mc_dropout").stochastic and not get_detector("msp").stochastic
    assert dict(get_detector("knn").defaults) == {"k": 50}
    assert dict(get_detector("odin").defaults) == {
        "temperature": 1000.0,
        "epsilon": 0.0014,
        "batch_size": 256,
    }
    assert "Mahalanobis" in get_detector("mahalanobis").doc
    # version 2: the softmax κ became log-odds / −log entropy (issue 10, no saturation ties)
    bumped = {"msp", "temperature", "entropy", "odin", "mc_dropout", "mc_dropout_entropy"}
    for name in BUILTINS:
        assert get_detector(name).version == ("2" if name in bumped else "1"), name


def test_unknown_name_suggests_a_close_one() -> None:
    with pytest.raises(UnknownNameError, match="Did you mean 'mahalanobis'") as info:
        get_detector("mahalanobois")
    assert isinstance(info.value, KeyError) and isinstance(info.value, SpecError)
    with pytest.raises(UnknownNameError, match="'knn'"):
        confidence("nope", outputs())


def test_register_a_user_detector_and_call_it() -> None:
    @register("test_margin", needs={"logits"}, version="3")
    def margin(out: Outputs, *, fit: Outputs | None = None, scale: float = 1.0) -> np.ndarray:
        """Top-1 minus top-2 logit: a large gap means a confident, familiar input."""
        top = np.sort(out.logits, axis=1)
        return scale * (top[:, -1] - top[:, -2])

    det = get_detector("test_margin")
    assert det.func is margin and det.version == "3" and dict(det.defaults) == {"scale": 1.0}
    assert det.doc.startswith("Top-1 minus top-2 logit")
    assert "test_margin" in available()
    out = outputs()
    np.testing.assert_allclose(confidence("test_margin", out, scale=2.0), 2 * margin(out))
    with pytest.raises(ValueError, match="already registered"):
        register("test_margin", needs={"logits"})(margin)
    with pytest.raises(ValueError, match="already registered"):
        register("msp", needs={"logits"}, replace=True)(margin)
    register("test_margin", needs={"logits"}, version="4", replace=True)(margin)
    assert get_detector("test_margin").version == "4"


def test_detector_metadata_is_validated() -> None:
    with pytest.raises(ValueError, match="needs"):
        register("test_bad_needs", needs={"pixels"})(lambda out, *, fit=None: out.logits[:, 0])
    with pytest.raises(ValueError, match="fit_on"):
        register("test_bad_split", needs={"logits"}, fit_on="test")(lambda out, *, fit=None: 0)
    assert "test_bad_needs" not in available()


def test_unknown_parameter_names_the_allowed_ones() -> None:
    message = "unknown parameter 'tmp' for detector 'temperature'; allowed: temperature"
    with pytest.raises(UnknownParameterError, match=message) as info:
        confidence("temperature", outputs(), tmp=2.0)
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
    with pytest.raises(UnknownParameterError, match="allowed: none"):
        confidence("msp", outputs(), temperature=2.0)
    assert get_detector("openmax").resolve({"alpha": 2}) == {
        "tail_size": 20,
        "alpha": 2,
        "distance": "euclidean",
    }


def test_missing_inputs_say_what_to_pass() -> None:
    out = outputs()
    bare = Outputs(logits=out.logits)
    message = r"detector 'mahalanobis' needs features: pass Outputs\(features=...\)"
    with pytest.raises(DetectorInputError, match=message):
        confidence("mahalanobis", bare, fit=out)
    with pytest.raises(
        DetectorInputError,
        match=r"needs fit=Outputs\(features=...\) of the "
        r"in-distribution training split",
    ):
        confidence("knn", out)
    with pytest.raises(DetectorInputError, match="fit.features is missing"):
        confidence("knn", out, fit=bare)
    with pytest.raises(DetectorInputError, match=r"needs fit.labels: pass fit=Outputs"):
        confidence("mahalanobis", out, fit=Outputs(logits=out.logits, features=out.features))
    with pytest.raises(DetectorInputError, match="validation split, or a fixed temperature="):
        confidence("temperature", out)
    with pytest.raises(DetectorInputError, match="needs model="):
        confidence("odin", out)
    with pytest.raises(DetectorInputError, match=r"scores an Outputs\(...\)"):
        confidence("msp", out.logits)


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("knn", {"k": 0}, "k must be a number >= 1, got 0"),
        ("knn", {"k": 2.5}, "k must be an integer"),
        ("openmax", {"tail_size": 0}, "tail_size"),
        ("openmax", {"alpha": 5}, r"alpha must be an integer in \[1, 4\]"),
        ("openmax", {"distance": "cosine"}, "distance must be one of"),
        ("temperature", {"temperature": -1.0}, "temperature must be a number > 0, got -1.0"),
        ("energy", {"temperature": 0}, "temperature must be"),
        ("vim", {"dim": 6}, r"dim must be an integer in \[1, 5\]"),
        ("mahalanobis", {"ridge": -1.0}, "ridge must be"),
    ],
)
def test_bad_parameter_values_are_rejected(name: str, params: dict, match: str) -> None:
    out = outputs()
    with pytest.raises(DetectorInputError, match=match):
        confidence(name, out, fit=out, **params)


@pytest.mark.parametrize(
    ("name", "param", "value", "expected"),
    [
        ("knn", "k", 0, "a number >= 1"),
        ("energy", "temperature", 0.0, "a number > 0"),
        ("temperature", "temperature", -1.0, "a number > 0"),
        ("mahalanobis", "ridge", -1e-3, "a number >= 0"),
        ("odin", "epsilon", -0.1, "a number >= 0"),
        ("odin", "temperature", 0.0, "a number > 0"),
        ("mc_dropout", "n_passes", 0, "a number >= 1"),
        ("mc_dropout_entropy", "seed", -1, "a number >= 0"),
        ("openmax", "tail_size", 0, "a number >= 1"),
        ("openmax", "distance", "cosine", "one of 'euclidean', 'eucos'"),
        ("vim", "dim", 0, "a number >= 1"),
    ],
)
def test_parameter_limits_are_checked_where_the_spec_is_built(
    name: str, param: str, value: object, expected: str
) -> None:
    """A value outside a built-in detector's limits is refused by the spec, in the driver,
    before any compute; in a grid, the bad item is named by its index."""
    with pytest.raises(SpecError) as caught:
        DetectorSpec(name=name, params={param: value})
    assert str(caught.value) == (
        f"detector {name!r} parameter {param}: {value!r} is not allowed; expected {expected}"
    )
    default = get_detector(name).defaults[param]
    with pytest.raises(SpecError, match=rf"{param}\[1\]: {value!r} is not allowed"):
        DetectorSpec(name=name, params={param: [default, value]})


def test_a_user_detector_declares_limits_checked_by_specs_and_calls() -> None:
    @register("test_scaled", needs={"logits"}, limits={"scale": greater_than(0)}, replace=True)
    def scaled(out: Outputs, *, scale: float = 1.0) -> np.ndarray:
        return scale * out.logits.max(axis=1)

    assert DetectorSpec(name="test_scaled", params={"scale": 2.0}).kwargs == {"scale": 2.0}
    with pytest.raises(SpecError, match=r"scale: -2.0 is not allowed; expected a number > 0"):
        DetectorSpec(name="test_scaled", params={"scale": -2.0})
    with pytest.raises(DetectorInputError, match="'test_scaled': scale must be a number > 0"):
        confidence("test_scaled", outputs(), scale=-2.0)
    with pytest.raises(ValueError, match=r"limits name parameters .* does not take: \['sclae'\]"):
        register("test_typo", needs={"logits"}, limits={"sclae": at_least(0)})(scaled)


def test_feature_width_mismatch_is_reported() -> None:
    with pytest.raises(DetectorInputError, match="features have 6 columns but fit.features have 5"):
        confidence("knn", outputs(), fit=outputs(dim=5))


def test_results_are_checked() -> None:
    @register("test_nan", needs={"logits"})
    def nan(out: Outputs, *, fit: Outputs | None = None) -> np.ndarray:
        return np.where(np.arange(len(out)) == 3, np.nan, 0.0)

    @register("test_shape", needs={"logits"})
    def wrong_shape(out: Outputs, *, fit: Outputs | None = None) -> np.ndarray:
        return out.logits

    with pytest.raises(ValueError, match=r"detector 'test_nan' returned 1 non-finite .* row 3"):
        confidence("test_nan", outputs())
    with pytest.raises(ValueError, match=r"detector 'test_shape' returned shape \(40, 4\)"):
        confidence("test_shape", outputs())


def _normalized_in_place(out: Outputs, *, fit: Outputs | None = None) -> np.ndarray:
    """A detector that shifts its logits in place first (a common numpy habit)."""
    z = out.logits
    z -= z.max(axis=1, keepdims=True)
    return -np.log(np.exp(z).sum(axis=1))


def test_a_detector_cannot_change_the_outputs_others_read() -> None:
    """Every detector of a seed reads the same cached outputs. One that changed them in place
    silently changed the scores of those after it (a probe: energy's AUROC 0.91 -> 0.15, msp's
    0.862 -> 0.850). The arrays are read-only now, and the error names the detector."""
    register("test_in_place", needs={"logits"}, replace=True)(_normalized_in_place)
    owned = outputs().logits.copy()
    shared = Outputs(logits=owned)
    expected = confidence("energy", shared)
    with pytest.raises(DetectorWroteInputs, match=r"detector 'test_in_place' changed its inputs"):
        confidence("test_in_place", shared)
    np.testing.assert_array_equal(confidence("energy", shared), expected)
    assert owned.flags.writeable  # the caller's own array stays writable (a read-only view)
    owned[0, 0] += 1.0
    assert shared.logits[0, 0] == owned[0, 0]


def test_a_run_stops_at_a_detector_that_changes_the_outputs(tmp_path: Path) -> None:
    """The same in a run: it ends with that error instead of results whose later detectors
    scored altered logits; what it computed stays cached."""
    register("test_in_place", needs={"logits"}, replace=True)(_normalized_in_place)
    spec = small_digits(1, detectors=("test_in_place", "msp", "energy"))
    with pytest.raises(DetectorWroteInputs, match="work on a copy"):
        oodsim.run(spec, cache=tmp_path, progress=False)
    again = oodsim.run(
        attrs.evolve(spec, detectors=("msp", "energy")), cache=tmp_path, progress=False
    )
    assert store_counts(again)["computed"] == {}


def _small_model() -> Any:
    """An untrained small_cnn of the project's own (BatchNorm and dropout) on 8x8 inputs."""
    from oodsim.models.architectures import build_model

    model = build_model(
        "small_cnn", in_channels=1, n_classes=4, image_size=8, dropout=0.2, width=8, init_seed=0
    )
    return model.eval()


def _naive_mc(out: Outputs | None, *, fit=None, model, inputs) -> np.ndarray:
    """MC dropout as many write it: ``model.train()`` to switch dropout on, and no way back."""
    import torch

    model.train()
    with torch.no_grad():
        probs = torch.stack([model(inputs).softmax(1) for _ in range(3)]).mean(0)
    return torch.log(probs.max(1).values).double().numpy()


def _hooked(out: Outputs | None, *, fit=None, model, inputs) -> np.ndarray:
    """Registers a hook (a clipping, say) and leaves it there."""
    import torch

    model.register_forward_hook(lambda module, args, result: result.clamp(max=1.0))
    with torch.no_grad():
        return model(inputs).max(1).values.double().numpy()


def _scaled_weights(out: Outputs | None, *, fit=None, model, inputs) -> np.ndarray:
    """Edits a weight in place, then scores."""
    import torch

    with torch.no_grad():
        next(model.parameters()).mul_(2.0)
        return model(inputs).max(1).values.double().numpy()


@pytest.mark.parametrize(
    ("detector", "changed"),
    [
        (_naive_mc, "the mode (train/eval) of its modules; its weights or buffers, in place"),
        (_hooked, "its hooks"),
        (_scaled_weights, "its weights or buffers, in place"),
    ],
)
def test_a_model_based_detector_must_leave_the_model_as_it_found_it(detector, changed) -> None:
    """Every model-based detector of a seed runs the same network. One that left it changed
    silently changed the κ of the detectors after it, and those were cached: in a probe,
    ODIN's AUROC went from 0.898 to 0.952 behind a naive MC dropout, and a later run of ODIN
    alone read the altered κ from the cache."""
    import torch

    register("test_changes_model", needs={"model"}, replace=True)(detector)
    model = _small_model()
    inputs = torch.randn(12, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with pytest.raises(DetectorChangedModel, match=re.escape(f"({changed})")):
        confidence("test_changes_model", None, model=model, inputs=inputs)
    # oodsim's own model-based detectors leave it as found (they switch dropout on and off)
    fresh = _small_model()
    for name in ("mc_dropout", "odin"):
        confidence(name, None, model=fresh, inputs=inputs)


def test_what_a_model_does_on_its_own_first_pass_is_not_blamed_on_the_detector() -> None:
    """Some models cache a buffer on their first forward pass (an attention mask, say), and
    a lazy module gets its weights there. When that pass is a detector's (a model loaded in a
    new process), the model changed itself: not an error. A later in-place write to that
    buffer is one."""
    import torch

    class MaskCaching(torch.nn.Module):
        """A plug-in architecture's shape: ``small_cnn`` whose logits meet a cached mask."""

        def __init__(self) -> None:
            super().__init__()
            self.net = _small_model()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if not hasattr(self, "mask"):
                self.register_buffer("mask", torch.ones(4), persistent=False)
            return self.net(x) * self.mask

    model = MaskCaching().eval()
    inputs = torch.randn(12, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    for name in ("odin", "mc_dropout"):
        confidence(name, None, model=model, inputs=inputs)
    lazy = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(4)).eval()
    confidence("odin", None, model=lazy, inputs=inputs)

    def _scaled_mask(out, *, fit=None, model, inputs) -> np.ndarray:
        model.mask.mul_(2.0)
        with torch.no_grad():
            return model(inputs).max(1).values.double().numpy()

    register("test_changes_model", needs={"model"}, replace=True)(_scaled_mask)
    with pytest.raises(DetectorChangedModel, match=r"\(its weights or buffers, in place\)"):
        confidence("test_changes_model", None, model=model, inputs=inputs)


def test_a_run_stops_at_a_detector_that_changes_the_model(tmp_path: Path) -> None:
    """The same in a run: it stops with that error before the detectors after it run, so
    nothing they would have scored on the changed network reaches the cache."""
    register("test_changes_model", needs={"model"}, replace=True)(_naive_mc)
    spec = small_digits(1, detectors=("test_changes_model", "odin"))
    with pytest.raises(DetectorChangedModel, match="detector 'test_changes_model'"):
        oodsim.run(spec, cache=tmp_path, progress=False)
    again = oodsim.run(attrs.evolve(spec, detectors=("odin",)), cache=tmp_path, progress=False)
    computed = store_counts(again)["computed"]
    assert set(computed) == {"kappa"}  # ODIN's κ, never stored before; the model was cached


def test_a_required_fit_is_checked_for_user_detectors() -> None:
    @register("test_needs_train", needs={"features"}, fit_on="train")
    def centroid(out: Outputs, *, fit: Outputs, shrink: float = 0.0) -> np.ndarray:
        return -np.linalg.norm(out.features - fit.features.mean(0), axis=1)

    assert get_detector("test_needs_train").fit_required
    with pytest.raises(DetectorInputError, match="in-distribution training split"):
        confidence("test_needs_train", outputs())
    assert confidence("test_needs_train", outputs(), fit=outputs(seed=1)).shape == (40,)


def test_every_logit_and_feature_builtin_returns_finite_float64() -> None:
    out, fit = outputs(n=60), outputs(n=80, seed=2)
    for name in BUILTINS - {"odin", "mc_dropout", "mc_dropout_entropy"}:
        kappa = confidence(name, out, fit=fit)
        assert kappa.dtype == np.float64 and kappa.shape == (60,) and np.isfinite(kappa).all()


def test_extreme_logits_stay_finite() -> None:
    big = Outputs(logits=np.array([[1e4, -1e4, 0.0], [0.0, 0.0, 0.0]]))
    for name in ("msp", "entropy", "energy", "max_logit"):
        assert np.isfinite(confidence(name, big)).all()
    # κ of msp is the log-odds of the max softmax p: 1e4 (p = 1 − e^−1e4) and log(1/2) (p = 1/3)
    np.testing.assert_allclose(confidence("msp", big), [1e4, -np.log(2)])
    assert confidence("entropy", big)[0] > 9000  # −log H, H ≈ 1e4·e^−1e4: not rounded to 0


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A third-party package on sys.path that declares two detector entry points."""
    (tmp_path / "oodsim_plugin_demo.py").write_text(
        textwrap.dedent('''
        import numpy as np
        from oodsim.detectors import Detector, register

        @register("plugin_mean_logit", needs={"logits"}, version="2")
        def mean_logit(outputs, *, fit=None, shift: float = 0.0):
            """Mean logit plus a shift."""
            return outputs.logits.mean(axis=1) + shift

        def _min_logit(outputs, *, fit=None):
            return outputs.logits.min(axis=1)

        MIN_LOGIT = Detector(name="min_logit", func=_min_logit, needs={"logits"})
        NOT_A_DETECTOR = 42
    ''')
    )
    info = tmp_path / "oodsim_plugin_demo-0.1.dist-info"
    info.mkdir()
    metadata = "Metadata-Version: 2.1\nName: oodsim-plugin-demo\nVersion: 0.1\n"
    (info / "METADATA").write_text(metadata)
    (info / "entry_points.txt").write_text(
        "[oodsim.detectors]\n"
        "plugin_mean_logit = oodsim_plugin_demo:mean_logit\n"
        "plugin_min_logit = oodsim_plugin_demo:MIN_LOGIT\n"
        "plugin_broken = oodsim_plugin_demo:NOT_A_DETECTOR\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry._entry_points.cache_clear()
    yield
    registry._entry_points.cache_clear()
    for name in ("plugin_mean_logit", "plugin_min_logit", "plugin_broken"):
        registry._USER.pop(name, None)
        registry._LOADED.pop(name, None)
    sys.modules.pop("oodsim_plugin_demo", None)


def test_entry_points_are_listed_lazily_and_loaded_on_use(plugin) -> None:
    names = available()
    assert {"plugin_mean_logit", "plugin_min_logit", "plugin_broken"} <= set(names)
    assert "oodsim_plugin_demo" not in sys.modules  # listed, not imported
    out = outputs()
    np.testing.assert_allclose(
        confidence("plugin_mean_logit", out, shift=1.0), out.logits.mean(1) + 1.0
    )
    assert get_detector("plugin_mean_logit").version == "2"
    det = get_detector("plugin_min_logit")
    assert isinstance(det, Detector) and det.name == "plugin_min_logit"
    assert det.func.__name__ == "_min_logit"  # the entry point's name replaces "min_logit"
    np.testing.assert_allclose(confidence("plugin_min_logit", out), out.logits.min(1))
    with pytest.raises(TypeError, match="plugin_broken.*must name a Detector"):
        get_detector("plugin_broken")


def test_vim_head_recovery_says_when_it_cannot_work() -> None:
    out = outputs()
    rng = np.random.default_rng(5)
    scrambled = Outputs(logits=rng.normal(size=out.logits.shape), features=out.features)
    with pytest.raises(DetectorInputError, match="not a linear function.*head_weight="):
        confidence("vim", out, fit=scrambled)
    dead = out.features.copy()
    dead[:, 0] = 0.0  # a dead unit: the head's first column is not identifiable
    linear = Outputs(logits=dead @ rng.normal(size=(6, 4)), features=dead)
    with pytest.warns(UserWarning, match="span only 5 of 6 dimensions"):
        confidence("vim", linear, fit=linear)
    with pytest.raises(DetectorInputError, match="head_bias= needs head_weight="):
        confidence("vim", out, fit=out, head_bias=np.zeros(4))
    with pytest.raises(DetectorInputError, match=r"head_weight must have shape \(4, 6\)"):
        confidence("vim", out, fit=out, head_weight=np.zeros((6, 4)))


def test_a_registered_detector_declares_its_family_which_groups_and_colours_it() -> None:
    from oodsim.report import styles

    @register("density_demo", needs={"logits"}, family="density")
    def density_demo(outputs, *, fit=None):
        return outputs.logits.max(axis=1)

    try:
        assert detector_family("density_demo") == "density"
        assert styles.grouped(["msp", "density_demo"]) == {
            "softmax / logit": ["msp"],
            "density": ["density_demo"],
        }
        colour = styles.method_style("density_demo")["color"]
        palette = [c for p in styles._MORE_PALETTES for c in p]
        assert colour in palette  # its family's colours, not "other"'s grey-browns
        assert detector_family("no_such_detector") == "other"
    finally:
        registry._USER.pop("density_demo", None)
