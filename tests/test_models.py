"""Architectures keep the detectors' contract; the study's ResNet-18 trains through the pipeline."""

from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np
import pytest
import torch

from oodsim.engine.work import run_seed
from oodsim.models.architectures import build_model
from oodsim.models.registry import BUILTINS
from oodsim.specs import DatasetSpec, ModelSpec, TrainingSpec
from tests.conftest import small_digits


@pytest.mark.parametrize("arch", sorted(BUILTINS))
@pytest.mark.parametrize(("size", "channels"), [(8, 1), (32, 3)])
def test_forward_is_head_of_embed(arch: str, size: int, channels: int) -> None:
    model = build_model(
        arch, in_channels=channels, n_classes=4, image_size=size, dropout=0.2, width=8, init_seed=0
    ).eval()
    x = torch.randn(5, channels, size, size)
    logits, features = model.forward_with_features(x)
    assert logits.shape == (5, 4) and features.ndim == 2
    torch.testing.assert_close(model(x), model.head(model.embed(x)))
    assert isinstance(model.head[0], torch.nn.Dropout) and model.head[0].p == 0.2


def test_same_init_seed_same_weights() -> None:
    def weights(seed: int) -> np.ndarray:
        model = build_model(
            "small_cnn",
            in_channels=1,
            n_classes=3,
            image_size=8,
            dropout=0.2,
            width=4,
            init_seed=seed,
        )
        return torch.cat([p.flatten() for p in model.parameters()]).detach().numpy()

    np.testing.assert_array_equal(weights(1), weights(1))
    assert not np.array_equal(weights(1), weights(2))


def test_resnet18_simulation_runs_end_to_end(tmp_path: Path) -> None:
    spec = small_digits(
        1,
        dataset=DatasetSpec(name="digits", max_per_class=40),
        model=ModelSpec(arch="resnet18", dropout=0.2),
        training=TrainingSpec(batch_size=64, max_epochs=1, patience=1),
    )
    outcome = run_seed(spec, 0, str(tmp_path), torch_threads=1)
    assert not outcome.failed
    assert np.isfinite(outcome.variables["score"]).all()
    assert attrs.asdict(spec.model)["arch"] == "resnet18"
