"""ImageNet-O recipe: restriction to the 200 classes and AUPR as the paper computes it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from sklearn.metrics import auc, precision_recall_curve, roc_auc_score

from oodsim.data.imagenet_classes import imagenet1k_wnids, imagenet_o_wnids
from oodsim.errors import DataNotFoundError, SpecError
from oodsim.protocols import imagenet_o


def _softmax(logits: np.ndarray) -> np.ndarray:
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


def _sklearn_aupr(id_logits: np.ndarray, ood_logits: np.ndarray) -> float:
    """The recipe verbatim: anomaly = -max softmax; auc(recall, precision)."""
    anomaly = -np.r_[_softmax(id_logits).max(axis=1), _softmax(ood_logits).max(axis=1)]
    gold = np.r_[np.zeros(len(id_logits)), np.ones(len(ood_logits))]
    precision, recall, _ = precision_recall_curve(gold, anomaly)
    return auc(recall, precision)


def test_restriction_picks_the_200_columns_in_sorted_order() -> None:
    wnids, subset = imagenet1k_wnids(), imagenet_o_wnids()
    logits = np.tile(np.arange(1000.0), (3, 1))  # column j holds j
    restricted = imagenet_o.restrict_logits(logits, wnids, subset)
    assert restricted.shape == (3, 200)
    want = [wnids.index(w) for w in sorted(subset)]
    assert restricted[0].tolist() == want
    assert want == sorted(want)  # sorted wnids keep their order inside the sorted 1k list
    shuffled = list(reversed(subset))  # the subset's own order does not matter
    assert np.array_equal(imagenet_o.restrict_logits(logits, wnids, shuffled), restricted)


def test_restriction_rejects_unknown_classes_and_bad_shapes() -> None:
    with pytest.raises(SpecError, match="subset_wnids"):
        imagenet_o.restrict_logits(np.zeros((1, 2)), ["n00000001", "n00000002"], ["n00000003"])
    with pytest.raises(SpecError, match="logits"):
        imagenet_o.restrict_logits(np.zeros((1, 3)), ["n00000001", "n00000002"], ["n00000001"])


def test_evaluate_1000_class_logits_matches_sklearn() -> None:
    rng = np.random.default_rng(0)
    id_logits = rng.normal(0, 3, (300, 1000))
    id_logits[np.arange(300), rng.integers(0, 1000, 300)] += 6  # confident ID
    ood_logits = rng.normal(0, 3, (60, 1000))
    got = imagenet_o.evaluate_logits(id_logits, ood_logits)
    columns = imagenet_o.subset_columns(imagenet1k_wnids(), imagenet_o_wnids())
    id_200, ood_200 = id_logits[:, columns], ood_logits[:, columns]
    assert got["aupr"] == pytest.approx(_sklearn_aupr(id_200, ood_200), abs=1e-12)
    kappa = np.r_[_softmax(id_200).max(axis=1), _softmax(ood_200).max(axis=1)]
    is_id = np.r_[np.ones(300, bool), np.zeros(60, bool)]
    assert got["auroc"] == pytest.approx(roc_auc_score(is_id, kappa), abs=1e-12)
    assert got["chance"] == pytest.approx(60 / 360)
    assert (got["n_id"], got["n_ood"]) == (300, 60)
    assert 0.0 <= got["fpr95"] <= 1.0
    already = imagenet_o.evaluate_logits(id_200, ood_200)  # (n, 200) input: no restriction
    assert already == pytest.approx(got, abs=1e-12)


def test_chance_level_of_a_random_detector() -> None:
    rng = np.random.default_rng(1)
    got = imagenet_o.evaluate_logits(rng.normal(size=(10_000, 200)), rng.normal(size=(2000, 200)))
    assert got["chance"] == pytest.approx(2000 / 12000)
    assert got["aupr"] == pytest.approx(got["chance"], abs=0.02)
    assert got["auroc"] == pytest.approx(0.5, abs=0.03)


def test_evaluate_rejects_wrong_width() -> None:
    with pytest.raises(SpecError, match="1000"):
        imagenet_o.evaluate_logits(np.zeros((2, 999)), np.zeros((2, 999)))


def test_max_softmax_is_stable_for_huge_logits() -> None:
    logits = np.array([[1000.0, 0.0], [5.0, 5.0]])
    np.testing.assert_allclose(imagenet_o.max_softmax(logits), [1.0, 0.5])


# --------------------------------------------------------------------------- image folders


ROOT = Path(__file__).resolve().parents[1]


def _folder(path: Path, n: int, rng: np.random.Generator) -> None:
    path.mkdir(parents=True)
    for i in range(n):
        size = (int(rng.integers(20, 40)), int(rng.integers(20, 40)))  # sizes vary, like photos
        pixels = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(path / f"img_{i}.jpg" if i % 2 else path / f"img_{i}.png")


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """A few of the 200 ImageNet-O classes as ID folders, one 1k class that is not one of them,
    and an ImageNet-O-like folder of OOD images in wnid sub-folders."""
    rng = np.random.default_rng(0)
    wnids = list(imagenet_o_wnids()[:3])
    other = next(w for w in imagenet1k_wnids() if w not in set(imagenet_o_wnids()))
    for wnid in wnids:
        _folder(tmp_path / "val" / wnid, 4, rng)
    _folder(tmp_path / "val" / other, 5, rng)  # not an ImageNet-O class: ignored
    _folder(tmp_path / "imagenet-o" / wnids[0], 3, rng)
    _folder(tmp_path / "imagenet-o" / imagenet_o_wnids()[10], 3, rng)
    return tmp_path / "val", tmp_path / "imagenet-o", wnids


@pytest.mark.parametrize("model", ["timm:resnet18", "torchvision:resnet18"])
def test_whole_path_from_image_folders(folders, tmp_path, model) -> None:
    id_root, ood_root, wnids = folders
    got = imagenet_o.evaluate_folders(
        id_root, ood_root, model, pretrained=False, image_size=32, save_logits=tmp_path / "logits"
    )
    assert set(got) == {
        "aupr",
        "auroc",
        "fpr95",
        "chance",
        "n_id",
        "n_ood",
        "model",
        "n_id_classes",
        "weights",
    }
    assert (got["n_id"], got["n_ood"], got["n_id_classes"]) == (12, 6, 3)
    assert got["chance"] == pytest.approx(6 / 18)
    assert 0.0 <= got["aupr"] <= 1.0 and 0.0 <= got["auroc"] <= 1.0
    assert got["weights"] == "random init" and got["model"] == f"{model}(random)"
    id_logits = np.load(tmp_path / "logits" / "id_logits.npy")
    assert id_logits.shape == (12, 1000)
    again = imagenet_o.evaluate_logit_files(
        tmp_path / "logits" / "id_logits.npy", tmp_path / "logits" / "ood_logits.npy"
    )
    assert again["aupr"] == pytest.approx(got["aupr"], abs=1e-12)


def test_folder_errors_say_what_is_missing(folders, tmp_path) -> None:
    id_root, ood_root, _ = folders
    with pytest.raises(DataNotFoundError, match="one folder per wnid"):
        imagenet_o.id_files(tmp_path / "missing", imagenet_o_wnids())
    with pytest.raises(DataNotFoundError, match="none of the 200"):
        imagenet_o.id_files(tmp_path, imagenet_o_wnids())
    with pytest.raises(DataNotFoundError, match="no ImageNet-O images"):
        imagenet_o.ood_files(tmp_path / "empty")
    with pytest.raises(SpecError, match="ImageNet-1k classifier"):
        imagenet_o.evaluate_folders(
            id_root,
            ood_root,
            imagenet_o.ModelRef(name="timm:test_resnet", pretrained=False, num_classes=5),
        )


def test_cli_command_runs_folders_and_logits(folders, tmp_path, capsys) -> None:
    import argparse
    import json

    from oodsim.cli_severity import add_commands

    main = argparse.ArgumentParser(prog="oodsim")
    add_commands(main.add_subparsers(dest="command", required=True))
    id_root, ood_root, _ = folders
    args = main.parse_args(
        [
            "imagenet-o",
            "--model",
            "timm:test_resnet",
            "--random-weights",
            "--image-size",
            "32",
            "--id-root",
            str(id_root),
            "--ood-root",
            str(ood_root),
            "--save-logits",
            str(tmp_path / "l"),
            "--json",
            str(tmp_path / "r.json"),
        ]
    )
    assert args.func(args) == 0
    assert "chance 33.33 %" in capsys.readouterr().out
    first = json.loads((tmp_path / "r.json").read_text())
    args = main.parse_args(
        [
            "imagenet-o",
            "--id-logits",
            str(tmp_path / "l" / "id_logits.npy"),
            "--ood-logits",
            str(tmp_path / "l" / "ood_logits.npy"),
        ]
    )
    assert args.func(args) == 0
    assert f"AUPR {100 * first['aupr']:.2f} %" in capsys.readouterr().out


def test_real_use_spec_loads_and_validates_without_data() -> None:
    spec = imagenet_o.load_imagenet_o_spec(ROOT / "specs" / "imagenet_o.toml", check_roots=False)
    assert len(spec.models) >= 3
    assert {m.prefix for m in spec.models} == {"timm", "torchvision"}
    with pytest.raises(DataNotFoundError, match="id_root"):
        imagenet_o.load_imagenet_o_spec(ROOT / "specs" / "imagenet_o.toml")


def test_run_imagenet_o_spec_on_folders(folders, tmp_path) -> None:
    id_root, ood_root, _ = folders
    text = (
        f'id_root = "{id_root}"\nood_root = "{ood_root}"\nbatch_size = 8\n'
        'models = [{ name = "timm:test_resnet", pretrained = false, image_size = 32 }]\n'
    )
    (tmp_path / "o.toml").write_text(text)
    table = imagenet_o.run_imagenet_o(imagenet_o.load_imagenet_o_spec(tmp_path / "o.toml"))
    assert table["score"].dims == ("model", "metric")
    assert table["score"].sel(metric="chance").item() == pytest.approx(1 / 3)
