"""Architectures as a registry (issue 12, part 1): a script's own builder trains through the
Dask workers, its version enters only the checkpoint chain, timm backbones train from scratch,
built-ins keep the contract, and every misuse is one clear error before any compute."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import attrs
import numpy as np
import pytest
import torch

import oodsim
from oodsim.errors import SpecError, UnknownNameError
from oodsim.keys import digest
from oodsim.models import ArchitectureError, get_architecture, register_architecture
from oodsim.models.architectures import Classifier, build_model, check_contract
from oodsim.specs import ModelSpec
from tests.conftest import digits_toml, install_package, small_digits

MLP_SCRIPT = '''
import json
import sys

import attrs
import torch
from torch import nn

import oodsim
from oodsim.models import register_architecture
from oodsim.models.architectures import Classifier


@register_architecture("two_layer_mlp", version=sys.argv[3])
def two_layer_mlp(*, in_channels, image_size, n_classes, dropout, hidden: int = 64):
    """Flattened pixels, one hidden ReLU layer: the penultimate features."""
    encoder = nn.Sequential(
        nn.Flatten(), nn.Linear(in_channels * image_size**2, hidden), nn.ReLU()
    )
    return Classifier(encoder, hidden, n_classes, dropout)


if __name__ == "__main__":
    spec_path, cache = sys.argv[1], sys.argv[2]
    base = oodsim.load(spec_path)
    mlp = attrs.evolve(
        base,
        name="digits_mlp",
        model=attrs.evolve(base.model, arch="two_layer_mlp", params={"hidden": 32}),
    )
    counts = {}
    for spec in (base, mlp):
        results = oodsim.run(spec, n_workers=1, cache=cache, progress=False)
        counts[spec.model.arch] = {
            "store": json.loads(results.attrs["store"]),
            "auroc": results.score.sel(metric="auroc").values.ravel().tolist(),
        }
    print(json.dumps(counts))
'''


def run_script(tmp_path: Path, version: str) -> dict:
    script = tmp_path / "mlp_study.py"
    script.write_text(MLP_SCRIPT)
    spec = digits_toml(tmp_path / "digits.toml", 2)
    done = subprocess.run(
        [sys.executable, str(script), str(spec), str(tmp_path / "cache"), version],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_scripts_own_architecture_trains_on_the_workers_and_its_version_keys_checkpoints(
    tmp_path: Path,
) -> None:
    """The builder lives only in the user's script: the workers get it shipped. Bumping its
    version retrains that architecture's checkpoints (and what is computed from them); the
    small_cnn simulations on the same cache load everything."""
    first = run_script(tmp_path, "1")
    mlp = first["two_layer_mlp"]
    assert mlp["store"]["computed"] == {"checkpoint": 2, "outputs": 2}  # msp κ is not stored
    assert all(0.5 < a <= 1.0 for a in mlp["auroc"])  # it learned something
    bumped = run_script(tmp_path, "2")
    assert bumped["small_cnn"]["store"]["computed"] == {}
    assert bumped["two_layer_mlp"]["store"]["computed"] == {"checkpoint": 2, "outputs": 2}
    assert bumped["two_layer_mlp"]["auroc"] == mlp["auroc"]  # same builder, same bits


def test_timm_resnet18_trains_on_digits_for_two_seeds(cluster_address: str, cache: Path) -> None:
    spec = small_digits(2)
    spec = attrs.evolve(
        spec,
        dataset=attrs.evolve(spec.dataset, max_per_class=80),
        model=attrs.evolve(spec.model, arch="timm:resnet18"),
        training=attrs.evolve(spec.training, max_epochs=2, patience=1),
    )
    results = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    assert list(results.failure.values) == ["", ""]
    assert np.isfinite(results.score.values).all()
    assert json.loads(results.attrs["store"])["computed"]["checkpoint"] == 2
    version = get_architecture("timm:resnet18").version
    assert version.startswith("1+timm-")


@pytest.mark.parametrize("arch", ["small_cnn", "resnet18", "wrn40_2", "timm:resnet18"])
def test_every_builtin_keeps_the_contract_on_small_and_cifar_sized_images(arch: str) -> None:
    for size, channels in ((8, 1), (32, 3)):
        model = build_model(
            arch,
            in_channels=channels,
            n_classes=5,
            image_size=size,
            dropout=0.2,
            width=8,
            init_seed=0,
        )
        check_contract(model, arch, (channels, size, size), 5)
        assert isinstance(model.head[0], torch.nn.Dropout) and model.head[0].p == 0.2


def test_wrn40_2_is_the_openood_backbone() -> None:
    model = build_model(
        "wrn40_2", in_channels=3, n_classes=10, image_size=32, dropout=0.3, width=32, init_seed=0
    )
    convs = [
        m for m in model.modules() if isinstance(m, torch.nn.Conv2d) and m.kernel_size == (3, 3)
    ]
    assert len(convs) == 1 + 3 * 6 * 2  # the stem and two per block, six blocks per group
    assert model.head[-1].in_features == 128  # 64 x widen 2
    n_params = sum(p.numel() for p in model.parameters())
    assert 2.2e6 < n_params < 2.3e6  # WRN-40-2 has 2.2 M parameters


def test_params_are_checked_against_the_builder_at_construction() -> None:
    with pytest.raises(UnknownNameError, match=r"'deph' .*Did you mean 'depth'\?"):
        ModelSpec(arch="wrn40_2", params={"deph": 16})
    # an architecture that takes none: the message ended "expected one of " with nothing
    with pytest.raises(UnknownNameError, match=r"'foo' .*expected no arch 'small_cnn' param"):
        ModelSpec(arch="small_cnn", params={"foo": 1})
    with pytest.raises(SpecError, match=r"arch 'wrn40_2' parameter depth: 'x' .*an integer"):
        ModelSpec(arch="wrn40_2", params={"depth": "x"})
    with pytest.raises(SpecError, match=r"depth: \[16, 22\] .*one value \(not a list\)"):
        ModelSpec(arch="wrn40_2", params={"depth": [16, 22]})
    with pytest.raises(SpecError, match=r"model.arch: 'timm:resnt18' .*'timm:resnet18'\?"):
        oodsim.specs.spec_from_dict(
            {"dataset": {"name": "digits"}, "model": {"arch": "timm:resnt18"}}
        )
    assert ModelSpec(arch="timm:resnet18", params={"drop_rate": 0.1}).kwargs == {"drop_rate": 0.1}


def test_empty_params_keep_the_key_of_specs_written_before_them() -> None:
    spec = ModelSpec()
    assert spec.key == digest("model", "1", {"arch": "small_cnn", "dropout": 0.2, "width": 32})
    assert ModelSpec(arch="wrn40_2", params={"depth": 16}).key != ModelSpec(arch="wrn40_2").key


def test_register_architecture_refuses_what_it_cannot_use() -> None:
    def needs_nothing(*, in_channels: int) -> Classifier:
        raise AssertionError("never built")

    with pytest.raises(ArchitectureError, match="must take n_classes"):
        register_architecture("test_no_classes")(needs_nothing)
    with pytest.raises(ValueError, match="already registered"):
        register_architecture("resnet18", replace=True)(lambda *, n_classes: None)
    with pytest.raises(ValueError, match="timm's architectures"):
        register_architecture("timm:mine")(lambda *, n_classes: None)


def test_a_model_that_breaks_the_contract_fails_before_any_compute(tmp_path: Path) -> None:
    @register_architecture("test_no_embed", replace=True)
    def no_embed(*, n_classes: int) -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, n_classes))

    @register_architecture("test_wrong_width", replace=True)
    def wrong_width(*, n_classes: int, dropout: float) -> Classifier:
        return Classifier(torch.nn.Flatten(), 64, n_classes + 1, dropout)

    for arch, message in (
        ("test_no_embed", r"has no embed\(x\) and no head; return .*Classifier"),
        ("test_wrong_width", r"logits of shape \(2, 7\) .*expected \(2, 6\)"),
    ):
        spec = small_digits(2)
        spec = attrs.evolve(spec, model=attrs.evolve(spec.model, arch=arch))
        with pytest.raises(ArchitectureError, match=message):
            oodsim.run(spec, n_workers=1, cache=tmp_path / "cache", progress=False)
        assert not (tmp_path / "cache").exists()  # refused in the driver, before the cache


def test_a_module_with_embed_and_head_is_wrapped_into_the_contract() -> None:
    class Custom(torch.nn.Module):
        def __init__(self, n_classes: int) -> None:
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16))
            self.head = torch.nn.Linear(16, n_classes)

        def embed(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x)

    @register_architecture("test_custom", replace=True)
    def custom(*, n_classes: int) -> torch.nn.Module:
        return Custom(n_classes)

    model = build_model(
        "test_custom", in_channels=1, n_classes=3, image_size=8, dropout=0.0, width=1, init_seed=0
    )
    check_contract(model, "test_custom", (1, 8, 8), 3)
    logits, features = model.forward_with_features(torch.zeros(4, 1, 8, 8))
    assert logits.shape == (4, 3) and features.shape == (4, 16)


@pytest.fixture
def arch_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A third-party package on sys.path that declares an architecture entry point."""
    install_package(
        tmp_path,
        "oodsim-arch-demo",
        "[oodsim.models]\ndemo_tiny = oodsim_arch_demo:tiny\n",
        {
            "oodsim_arch_demo": '''
                from torch import nn
                from oodsim.models.architectures import Classifier

                def tiny(*, in_channels, image_size, n_classes, dropout):
                    """A linear classifier of the pixels."""
                    return Classifier(nn.Flatten(), in_channels * image_size**2, n_classes, dropout)
            '''
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from oodsim.models import registry

    registry._entry_points.cache_clear()
    yield "demo_tiny"
    registry._entry_points.cache_clear()
    registry._LOADED.pop("demo_tiny", None)


def test_entry_point_architectures_are_found_and_built(arch_plugin: str) -> None:
    assert arch_plugin in oodsim.models.available_architectures()
    assert ModelSpec(arch=arch_plugin).arch == arch_plugin
    model = build_model(
        arch_plugin, in_channels=1, n_classes=4, image_size=8, dropout=0.1, width=1, init_seed=0
    )
    check_contract(model, arch_plugin, (1, 8, 8), 4)
    assert get_architecture(arch_plugin).doc == "A linear classifier of the pixels."
