"""oodsim's SGD and cosine schedule against torch.optim's: the same weights, bit for bit."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from oodsim.data import load_dataset
from oodsim.models.architectures import build_model
from oodsim.models.optimizer import SGD, cosine_lr
from oodsim.models.tensors import channel_stats, to_tensor


@pytest.mark.parametrize("t_max", [1, 7, 30, 200])
def test_cosine_lr_is_the_schedulers_sequence(t_max: int) -> None:
    parameter = torch.nn.Parameter(torch.zeros(1))
    reference = torch.optim.SGD([parameter], lr=0.05)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(reference, T_max=t_max)
    lr = 0.05
    for epoch in range(1, t_max + 1):
        reference.step()
        schedule.step()
        lr = cosine_lr(lr, epoch, t_max)
        assert lr == schedule.get_last_lr()[0], epoch  # exactly: the same rounding
    with pytest.raises(ValueError, match="outside"):
        cosine_lr(lr, t_max + 1, t_max)


def _model() -> torch.nn.Module:
    return build_model(
        "small_cnn", in_channels=1, n_classes=10, image_size=8, dropout=0.2, width=8, init_seed=3
    )


@pytest.mark.parametrize(("momentum", "weight_decay"), [(0.9, 5e-4), (0.0, 0.0), (0.5, 0.0)])
def test_sgd_trains_to_the_same_weights_as_torch(momentum: float, weight_decay: float) -> None:
    digits = load_dataset("digits")
    x = to_tensor(digits.images[:512], *channel_stats(digits.images))
    y = torch.tensor(digits.labels[:512])  # a copy: loaded data is read-only
    ours, theirs = _model(), _model()
    optimizer = SGD(ours.parameters(), 0.05, momentum, weight_decay)
    reference = torch.optim.SGD(
        theirs.parameters(), lr=0.05, momentum=momentum, weight_decay=weight_decay
    )
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(reference, T_max=4)
    for epoch in range(1, 5):
        for start in range(0, len(x), 64):
            for model, step in ((ours, optimizer), (theirs, reference)):
                torch.manual_seed(epoch * 1000 + start)  # the same dropout masks for both
                loss = F.cross_entropy(model(x[start : start + 64]), y[start : start + 64])
                step.zero_grad()
                loss.backward()
                step.step()
        schedule.step()
        optimizer.lr = cosine_lr(optimizer.lr, epoch, 4)
    for mine, torchs in zip(ours.state_dict().values(), theirs.state_dict().values(), strict=True):
        np.testing.assert_array_equal(mine.numpy(), torchs.numpy())
    assert any(not torch.equal(a, b) for a, b in zip(ours.parameters(), _model().parameters()))


@pytest.mark.slow  # trains in a fresh interpreter
def test_training_does_not_import_the_compiler() -> None:
    """The point of the module: a process that trains never imports torch._dynamo."""
    code = (
        "import sys\n"
        "from oodsim.data import load_dataset\n"
        "from oodsim.models.architectures import build_model\n"
        "from oodsim.models.tensors import channel_stats\n"
        "from oodsim.simulation.training import train\n"
        "from oodsim.seeds import SeedStreams\n"
        "from oodsim.specs import TrainingSpec\n"
        "data = load_dataset('digits')\n"
        "model = build_model('small_cnn', in_channels=1, n_classes=10, image_size=8,"
        " dropout=0.2, width=4, init_seed=0)\n"
        "x, y = data.images[:200], data.labels[:200]\n"
        "mean, std = channel_stats(x)\n"
        "train(model, x, y, x, y, mean=mean, std=std,"
        " spec=TrainingSpec(batch_size=50, max_epochs=2), hflip=False, streams=SeedStreams(0))\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "False"
