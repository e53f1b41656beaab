"""Model zoo: names, logits + features in one pass, each model's own preprocessing, and
pretrained weights read only from local caches (never downloaded)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from oodsim import zoo
from oodsim.errors import DataNotFoundError, SpecError, UnknownNameError


def _gradient(height: int = 150, width: int = 200) -> np.ndarray:
    yy, xx = np.mgrid[0:height, 0:width]
    channels = [xx * 255 // width, yy * 255 // height, (xx + yy) * 255 // (width + height)]
    return np.stack(channels, axis=-1).astype(np.uint8)


@pytest.fixture
def empty_caches(tmp_path, monkeypatch):
    """Point torch hub and the Hugging Face cache at empty folders."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    return tmp_path


def test_names_are_parsed_and_checked() -> None:
    assert zoo.split_name("timm:resnet18.a1_in1k") == ("timm", "resnet18", "a1_in1k")
    assert zoo.split_name("torchvision:resnet50") == ("torchvision", "resnet50", "")
    with pytest.raises(SpecError, match="timm:<model>"):
        zoo.split_name("keras:resnet50")
    with pytest.raises(SpecError, match="Did you mean 'resnet18'"):
        zoo.ModelRef(name="timm:resnt18")
    with pytest.raises(UnknownNameError, match="a1_in1k"):
        zoo.ModelRef(name="timm:resnet18.a9_in1k")
    with pytest.raises(UnknownNameError, match="IMAGENET1K_V1"):
        zoo.ModelRef(name="torchvision:resnet18.IMAGENET1K_V9")
    with pytest.raises(SpecError, match="experiment"):
        zoo.ModelRef(name="trained")


@pytest.mark.parametrize("name", ["timm:resnet18", "torchvision:resnet18", "timm:test_vit"])
def test_random_models_give_logits_and_features_in_one_pass(name) -> None:
    size = None if "vit" in name else 32  # ViTs have a fixed input size
    model, preprocessing = zoo.create_model(name, pretrained=False, image_size=size)
    x = preprocessing.arrays(np.random.default_rng(0).integers(0, 256, (3, 40, 50, 3), np.uint8))
    assert x.shape[1:] == (3, *preprocessing.crop_size)
    with torch.no_grad():
        logits, features = model.forward_with_features(x)
        torch.testing.assert_close(model(x), logits)
        if isinstance(model, zoo.SplitHead):
            torch.testing.assert_close(model.classifier(features), logits)
        else:
            torch.testing.assert_close(model.net.get_classifier()(features), logits)
    assert logits.shape == (3, 1000) and features.ndim == 2
    loaded = zoo.load_model(name, pretrained=False, image_size=size)
    assert loaded.n_classes == 1000 and len(loaded.class_wnids) == 1000
    assert loaded.source == "random init"


def test_random_weights_are_seeded_and_leave_the_global_rng_alone() -> None:
    state = torch.random.get_rng_state()
    a = zoo.load_model("timm:test_resnet", pretrained=False).model
    b = zoo.load_model("timm:test_resnet", pretrained=False).model
    c = zoo.load_model("timm:test_resnet", pretrained=False, init_seed=1).model
    assert torch.equal(torch.random.get_rng_state(), state)
    first = next(iter(a.state_dict().values()))
    assert torch.equal(first, next(iter(b.state_dict().values())))
    assert not torch.equal(first, next(iter(c.state_dict().values())))


def test_preprocessing_follows_each_library() -> None:
    from timm.data import resolve_data_config

    image = _gradient()
    timm_model, timm_pre = zoo.create_model("timm:resnet18", pretrained=False)
    config = resolve_data_config({}, model=timm_model.net)
    assert timm_pre.crop_size == config["input_size"][1:] == (224, 224)
    assert timm_pre.resize_size == int(224 / config["crop_pct"]) == 235
    assert timm_pre.interpolation == config["interpolation"] == "bicubic"
    assert timm_pre.mean == pytest.approx(config["mean"])
    # the array path and timm's own PIL pipeline agree to resampling differences
    diff = timm_pre.arrays(image[None])[0] - timm_pre.pil_transform(Image.fromarray(image))
    assert diff.abs().mean() < 0.005 and diff.abs().max() < 0.05

    _, tv_pre = zoo.create_model("torchvision:resnet18", pretrained=False)
    preset = tv_pre.pil_transform  # torchvision's weights.transforms()
    assert (tv_pre.resize_size, tv_pre.crop_size) == (256, (224, 224))
    tensor = torch.from_numpy(image).permute(2, 0, 1)[None]
    torch.testing.assert_close(tv_pre.arrays(image[None]), preset(tensor))
    gray = image[..., :1]
    assert tv_pre.arrays(gray[None]).shape == (1, 3, 224, 224)  # gray → RGB
    assert tv_pre.image(Image.fromarray(image[..., 0])).shape == (3, 224, 224)


def test_no_local_weights_is_a_clear_error(empty_caches) -> None:
    with pytest.raises(DataNotFoundError) as error:
        zoo.load_model("timm:resnet18")
    message = str(error.value)
    assert str(empty_caches / "hf" / "models--timm--resnet18.a1_in1k") in message
    assert str(empty_caches / "torch" / "hub" / "checkpoints") in message
    assert "never downloads" in message
    with pytest.raises(DataNotFoundError, match="resnet18-f37072fd.pth"):
        zoo.load_model("torchvision:resnet18")
    with pytest.raises(DataNotFoundError, match="does not exist"):
        zoo.load_model("timm:test_resnet", weights=str(empty_caches / "nope.pth"))


def test_torchvision_weights_come_from_the_torch_hub_cache(empty_caches) -> None:
    reference = zoo.load_model("torchvision:resnet18", pretrained=False, init_seed=7).model
    state = {k.removeprefix("body."): v for k, v in reference.state_dict().items()}
    state = {
        ("fc." + k.removeprefix("classifier.")) if k.startswith("classifier.") else k: v
        for k, v in state.items()
    }
    folder = empty_caches / "torch" / "hub" / "checkpoints"
    folder.mkdir(parents=True)
    torch.save(state, folder / "resnet18-f37072fd.pth")
    loaded = zoo.load_model("torchvision:resnet18")
    assert loaded.source == str(folder / "resnet18-f37072fd.pth")
    for key, value in reference.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[key], value), key


def test_timm_weights_come_from_the_hugging_face_cache(empty_caches) -> None:
    from safetensors.torch import save_file

    reference = zoo.load_model("timm:test_resnet", pretrained=False, init_seed=3).model.net
    repo = empty_caches / "hf" / "models--timm--test_resnet.r160_in1k"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abc")
    (repo / "snapshots" / "0123abc").mkdir(parents=True)
    file = repo / "snapshots" / "0123abc" / "model.safetensors"
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, str(file))
    loaded = zoo.load_model("timm:test_resnet")
    assert loaded.source == str(file)
    for key, value in reference.state_dict().items():
        assert torch.equal(loaded.model.net.state_dict()[key], value), key
    # an explicit file works too, and its content (not its path) enters the key
    copy = empty_caches / "mine.safetensors"
    copy.write_bytes(file.read_bytes())
    by_file = zoo.ModelRef(name="timm:test_resnet", weights=str(copy))
    assert by_file.key == zoo.ModelRef(name="timm:test_resnet", weights=str(file)).key
    assert by_file.key != zoo.ModelRef(name="timm:test_resnet").key
    assert torch.equal(zoo.load_model(by_file).model.net.conv1[0].weight, reference.conv1[0].weight)


@pytest.fixture
def one_thread():
    """Train with one torch thread: on a busy 2-core machine more threads only contend."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", ["timm:test_resnet", "torchvision:resnet18"])
@pytest.mark.parametrize("content", ["text", "a state dict of another model"])
def test_a_weights_file_that_is_no_checkpoint_is_one_spec_error(
    tmp_path, name: str, content: str
) -> None:
    """The probe: `weights = "/etc/passwd"` (or a timm checkpoint_path that is not a
    checkpoint) ended in `IndexError: list index out of range`."""
    path = tmp_path / "weights.pth"
    if content == "text":
        path.write_text("root:x:0:0:root:/root:/bin/bash\n")
    else:
        torch.save({"layer.weight": torch.zeros(3, 3)}, path)
    with pytest.raises(SpecError, match=r"^weights: .* is not allowed; expected a checkpoint of "):
        zoo.load_model(name, weights=str(path))
