"""ImageNet-O: the recipe (restriction to 200 classes, the paper's AUPR), the single-model paths,
and the protocol as a plug-in of the engine (``oodsim.run`` on generated wnid folders)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import warnings
from pathlib import Path

import attrs
import numpy as np
import pytest
from PIL import Image
from sklearn.metrics import auc, average_precision_score, precision_recall_curve, roc_auc_score

import oodsim
from oodsim.artifacts.outputs import OUTPUTS, LegacyOutputsWarning
from oodsim.cli.main import main
from oodsim.data.imagenet_classes import imagenet1k_wnids, imagenet_o_wnids
from oodsim.errors import DataNotFoundError, SpecError, UnknownNameError
from oodsim.protocols import imagenet_o
from oodsim.protocols.imagenet_o import PROTOCOL, ImageNetOSpec
from oodsim.protocols.imagenet_o import scoring as imagenet_o_scoring
from oodsim.protocols.imagenet_o.folders import save_logit_files
from oodsim.report import write_report
from oodsim.results import save_results, store_counts
from oodsim.seeds import SeedStreams
from oodsim.specs import SeedsSpec, StoppingSpec
from oodsim.store import Store
from oodsim.zoo import ModelRef

ROOT = Path(__file__).resolve().parents[1]


def _softmax(logits: np.ndarray) -> np.ndarray:
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


def _sklearn_aupr(id_logits: np.ndarray, ood_logits: np.ndarray) -> float:
    """The recipe verbatim: anomaly = -max softmax; auc(recall, precision)."""
    anomaly = -np.r_[_softmax(id_logits).max(axis=1), _softmax(ood_logits).max(axis=1)]
    gold = np.r_[np.zeros(len(id_logits)), np.ones(len(ood_logits))]
    precision, recall, _ = precision_recall_curve(gold, anomaly)
    return auc(recall, precision)


# --------------------------------------------------------------------------- the recipe


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


def test_ap_is_sklearns_average_precision_and_aupr_is_the_trapezoid() -> None:
    """``ap`` (the authors' code) and ``aupr`` (the card) on the same inputs, with ties."""
    rng = np.random.default_rng(3)
    id_kappa = np.round(rng.normal(1.0, 1.0, (2, 400)), 1)  # rounded: tied scores
    ood_kappa = np.round(rng.normal(0.0, 1.0, (2, 80)), 1)
    got = imagenet_o.ood_metrics(id_kappa, ood_kappa, ["aupr", "ap", "auroc"])
    is_ood = np.r_[np.zeros(400), np.ones(80)]
    for row in range(2):
        anomaly = -np.r_[id_kappa[row], ood_kappa[row]]
        precision, recall, _ = precision_recall_curve(is_ood, anomaly)
        assert got["aupr"][row] == pytest.approx(auc(recall, precision), abs=1e-12)
        assert got["ap"][row] == pytest.approx(average_precision_score(is_ood, anomaly), abs=1e-12)
        assert got["ap"][row] != pytest.approx(got["aupr"][row], abs=1e-6)  # two conventions
    # evaluate_logits returns both, from −max softmax as in the recipe and the authors' code
    id_logits, ood_logits = rng.normal(0, 3, (300, 200)), rng.normal(0, 3, (60, 200))
    result = imagenet_o.evaluate_logits(id_logits, ood_logits)
    anomaly = -np.r_[_softmax(id_logits).max(axis=1), _softmax(ood_logits).max(axis=1)]
    gold = np.r_[np.zeros(300), np.ones(60)]
    assert result["ap"] == pytest.approx(average_precision_score(gold, anomaly), abs=1e-12)
    assert result["aupr"] == pytest.approx(_sklearn_aupr(id_logits, ood_logits), abs=1e-12)


def test_bootstrap_interval_of_evaluate_logits_is_the_percentile_of_the_replicates() -> None:
    rng = np.random.default_rng(4)
    id_logits, ood_logits = rng.normal(0, 3, (200, 200)), rng.normal(0, 3, (40, 200))
    plain = imagenet_o.evaluate_logits(id_logits, ood_logits)
    got = imagenet_o.evaluate_logits(id_logits, ood_logits, n_bootstrap=300, seed=7)
    assert {k: got[k] for k in plain} == plain  # the numbers stay those of the full test set
    assert got["interval"] == "95% bootstrap interval (test-set sampling)"
    assert got["seed_meaning"] == "bootstrap replicate of the fixed test set"
    assert (got["n_bootstrap"], got["confidence"]) == (300, 0.95)
    # by hand: replicate s resamples ID and OOD with the bootstrap stream of seed s
    id_k, ood_k = imagenet_o.max_softmax(id_logits), imagenet_o.max_softmax(ood_logits)
    replicates = []
    for s in range(7, 307):
        id_index, ood_index = imagenet_o.bootstrap_indices(SeedStreams(s), 200, 40)
        replicates.append(imagenet_o.ood_metrics(id_k[id_index], ood_k[ood_index], ["ap"])["ap"])
    want = np.quantile(replicates, [0.025, 0.975])
    assert got["intervals"]["ap"] == pytest.approx(want.tolist(), abs=1e-12)
    for name, (lower, upper) in got["intervals"].items():
        assert lower <= upper and name in plain
    with pytest.raises(SpecError, match="n_bootstrap"):
        imagenet_o.evaluate_logits(id_logits, ood_logits, n_bootstrap=1)
    with pytest.raises(SpecError, match="confidence"):
        imagenet_o.evaluate_logits(id_logits, ood_logits, n_bootstrap=5, confidence=95)


def test_evaluate_rejects_wrong_width() -> None:
    with pytest.raises(SpecError, match="1000"):
        imagenet_o.evaluate_logits(np.zeros((2, 999)), np.zeros((2, 999)))


def test_max_softmax_is_stable_and_is_the_msp_detector() -> None:
    from oodsim.detectors import confidence
    from oodsim.outputs import Outputs

    logits = np.array([[1000.0, 0.0], [5.0, 5.0]])
    # the msp κ: log-odds of the max softmax p (p = 1 − e^−1000 and 1/2), never rounded to 1
    np.testing.assert_allclose(imagenet_o.max_softmax(logits), [1000.0, 0.0])
    z = np.random.default_rng(2).normal(0, 4, (50, 200)).astype(np.float32)
    assert np.array_equal(imagenet_o.max_softmax(z), confidence("msp", Outputs(logits=z)))


# --------------------------------------------------------------------------- image folders


def _folder(path: Path, n: int, rng: np.random.Generator) -> None:
    path.mkdir(parents=True)
    for i in range(n):
        size = (int(rng.integers(20, 40)), int(rng.integers(20, 40)))  # sizes vary, like photos
        pixels = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(path / f"img_{i}.jpg" if i % 2 else path / f"img_{i}.png")


def make_folders(root: Path) -> tuple[Path, Path, list[str]]:
    """A few of the 200 ImageNet-O classes as ID folders (4 images each), one 1k class that is
    not one of them, and an ImageNet-O-like folder of 6 OOD images in wnid sub-folders."""
    rng = np.random.default_rng(0)
    wnids = list(imagenet_o_wnids()[:3])
    other = next(w for w in imagenet1k_wnids() if w not in set(imagenet_o_wnids()))
    for wnid in wnids:
        _folder(root / "val" / wnid, 4, rng)
    _folder(root / "val" / other, 5, rng)  # not an ImageNet-O class: ignored
    _folder(root / "imagenet-o" / wnids[0], 3, rng)
    _folder(root / "imagenet-o" / imagenet_o_wnids()[10], 3, rng)
    return root / "val", root / "imagenet-o", wnids


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    return make_folders(tmp_path)


@pytest.mark.parametrize("model", ["timm:resnet18", "torchvision:resnet18"])
def test_whole_path_from_image_folders(folders, tmp_path, model) -> None:
    id_root, ood_root, wnids = folders
    got = imagenet_o.evaluate_folders(
        id_root, ood_root, model, pretrained=False, image_size=32, save_logits=tmp_path / "logits"
    )
    assert set(got) == {
        "aupr",
        "ap",
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
            ModelRef(name="timm:test_resnet", pretrained=False, num_classes=5),
        )


def _cli() -> argparse.ArgumentParser:
    from oodsim.cli.imagenet_o import add_command

    main = argparse.ArgumentParser(prog="oodsim")
    add_command(main.add_subparsers(dest="command", required=True))
    return main


def test_cli_command_runs_folders_and_logits(folders, tmp_path, capsys) -> None:
    id_root, ood_root, _ = folders
    main = _cli()
    args = main.parse_args(
        [
            *_tiny_model(id_root, ood_root),
            "--save-logits",
            str(tmp_path / "l"),
            "--json",
            str(tmp_path / "r.json"),
        ]
    )
    assert args.func(args) == 0
    assert "chance 33.33 %" in capsys.readouterr().out
    first = json.loads((tmp_path / "r.json").read_text())
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    (tmp_path / "linked.json").symlink_to(outside)  # replaced, never written through
    args = main.parse_args(
        [
            "imagenet-o",
            "--id-logits",
            str(tmp_path / "l" / "id_logits.npy"),
            "--ood-logits",
            str(tmp_path / "l" / "ood_logits.npy"),
            "--json",
            str(tmp_path / "linked.json"),
        ]
    )
    assert args.func(args) == 0
    assert f"AUPR {100 * first['aupr']:.2f} %" in capsys.readouterr().out
    assert outside.read_text() == "{}" and not (tmp_path / "linked.json").is_symlink()
    assert json.loads((tmp_path / "linked.json").read_text())["aupr"] == first["aupr"]
    args = main.parse_args(
        [
            "imagenet-o",
            "--id-logits",
            str(tmp_path / "l" / "id_logits.npy"),
            "--ood-logits",
            str(tmp_path / "l" / "ood_logits.npy"),
            "--bootstrap",
            "50",
        ]
    )
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert f"AUPR {100 * first['aupr']:.2f} % [" in out  # full test set, then the interval
    assert "95% bootstrap interval (test-set sampling) over 50 bootstrap replicates" in out


def _tiny_model(id_root: Path, ood_root: Path) -> list[str]:
    """``oodsim imagenet-o`` arguments of a tiny random 1,000-class model on the folders."""
    return [
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
    ]


def test_saved_logits_replace_links_and_never_write_through_them(folders, tmp_path) -> None:
    """``--save-logits DIR`` with links at ``DIR/id_logits.npy`` and ``DIR/ood_logits.npy``:
    the links are replaced by the logits files, the files they pointed to stay as they were
    (they used to be overwritten)."""
    id_root, ood_root, _ = folders
    saved = tmp_path / "saved"
    saved.mkdir()
    victims = {}
    for name in ("id_logits.npy", "ood_logits.npy"):
        victims[name] = tmp_path / f"victim-{name}.txt"
        victims[name].write_text(f"not {name}")
        (saved / name).symlink_to(victims[name])
    assert main([*_tiny_model(id_root, ood_root), "--save-logits", str(saved)]) == 0
    for name, victim in victims.items():
        assert victim.read_text() == f"not {name}"
        assert not (saved / name).is_symlink() and (saved / name).is_file()
    assert np.load(saved / "id_logits.npy").shape == (12, 1000)
    assert np.load(saved / "ood_logits.npy").shape == (6, 1000)
    assert sorted(p.name for p in saved.iterdir()) == ["id_logits.npy", "ood_logits.npy"]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        (
            "--json",
            "notes.txt/r.json",
            "cannot write the numbers of --json to {v}: {t}/notes.txt "
            "is a file, not a folder; choose another output path",
        ),
        ("--json", "out", "cannot write the numbers of --json to {v}: it is a folder"),
        (
            "--save-logits",
            "notes.txt",
            "cannot write the logits of --save-logits to {v}: it is "
            "a file, not a folder; choose another folder",
        ),
        (
            "--save-logits",
            "out",
            "cannot write the logits of --save-logits to {v}/id_logits.npy: it is a folder",
        ),
        ("--batch-size", "0", "--batch-size: 0 is not allowed; expected a number of images >= 1"),
        ("--batch-size", "-1", "--batch-size: -1 is not allowed; expected a number of images >= 1"),
    ],
    ids=[
        "json-below-a-file",
        "json-folder",
        "logits-a-file",
        "logits-folder-in-the-way",
        "batch-0",
        "batch-negative",
    ],
)
def test_bad_options_are_one_line_before_the_model_runs(
    folders, tmp_path, capsys, option, value, message
) -> None:
    """Each is one ``oodsim: error:`` line naming the option and nothing is computed: before,
    ``--json`` printed the numbers and then failed (NotADirectoryError), ``--save-logits``
    failed after inference (FileExistsError), ``--batch-size 0`` said ``range() arg 3 must not
    be zero`` and ``-1`` ``id_logits: (0, 0) is not allowed``."""
    id_root, ood_root, _ = folders
    (tmp_path / "notes.txt").write_text("notes")
    (tmp_path / "out" / "id_logits.npy").mkdir(parents=True)
    if option != "--batch-size":
        value = str(tmp_path / value)
    code = main([*_tiny_model(id_root, ood_root), option, value])
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), (out, err)
    assert err == f"oodsim: error: {message.format(v=value, t=tmp_path)}\n", err
    assert (tmp_path / "notes.txt").read_text() == "notes"
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["id_logits.npy"]


def _logit_files(folder: Path) -> list[str]:
    """``--id-logits`` / ``--ood-logits`` of random (20, 200) / (10, 200) logits saved in
    ``folder`` as ``--save-logits`` saves them."""
    rng = np.random.default_rng(5)
    save_logit_files(folder, rng.normal(size=(20, 200)), rng.normal(size=(10, 200)))
    return [
        "--id-logits",
        str(folder / "id_logits.npy"),
        "--ood-logits",
        str(folder / "ood_logits.npy"),
    ]


def test_an_absurd_bootstrap_is_refused_with_the_limit_and_how_to_lift_it(
    tmp_path, capsys, monkeypatch
) -> None:
    """``--bootstrap`` is bounded by the limit ``bootstrap_replicates``, before any logits are
    read (``--bootstrap 1000000000`` used to grow to 23 GB in 10 s and be killed)."""
    files = _logit_files(tmp_path)
    monkeypatch.setenv("OODSIM_LIMITS", "bootstrap_replicates=50")  # lowered: cheap to cross
    assert main(["imagenet-o", *files, "--bootstrap", "51"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith(
        "oodsim: error: --bootstrap: 51 is not allowed; expected at most 50 bootstrap "
        "replicates of one evaluation (limit 'bootstrap_replicates'). A size this large is "
        "most likely a typo; to run it anyway, lift the limit: "
        "OODSIM_LIMITS=bootstrap_replicates=51 in the environment"
    ), err
    assert main(["imagenet-o", *files, "--bootstrap", "50"]) == 0  # within the limit: runs
    assert "over 50 bootstrap replicates" in capsys.readouterr().out
    monkeypatch.delenv("OODSIM_LIMITS")
    (tmp_path / "id_logits.npy").unlink()  # the default limit refuses before reading logits
    assert main(["imagenet-o", *files, "--bootstrap", "1000000000"]) == 2
    err = capsys.readouterr().err
    assert "--bootstrap: 1000000000 is not allowed; expected at most 100,000" in err, err
    with pytest.raises(SpecError, match=r"n_bootstrap: 1000000000 .*'bootstrap_replicates'"):
        imagenet_o.evaluate_folders(tmp_path / "no", tmp_path / "no", "x", n_bootstrap=10**9)
    with pytest.raises(SpecError, match=r"n_bootstrap: 1000000000 .*'bootstrap_replicates'"):
        imagenet_o.evaluate_logits(np.zeros((2, 200)), np.zeros((2, 200)), n_bootstrap=10**9)


def _complex_logits(folder: Path) -> None:
    rng = np.random.default_rng(6)
    save_logit_files(folder, rng.normal(size=(20, 200)) * (1 + 1j), rng.normal(size=(10, 200)))


def _object_logits(folder: Path) -> None:
    save_logit_files(folder, np.array([{"a": 1}, None], dtype=object), np.zeros((10, 200)))


def _text_file(folder: Path) -> None:
    save_logit_files(folder, np.zeros((20, 200)), np.zeros((10, 200)))
    (folder / "id_logits.npy").write_text('[dataset]\nname = "digits"\n')


def _fifo(folder: Path) -> None:
    """A named pipe in place of the ID logits (``--id-logits <(...)`` in a shell)."""
    (folder / "id_logits.npy").unlink()
    os.mkfifo(folder / "id_logits.npy")


@pytest.mark.parametrize(
    ("make", "extra", "message"),
    [
        (
            None,
            ["--seed", "-1", "--bootstrap", "10"],
            "--seed: -1 is not allowed; expected an integer >= 0 with SEED + N - 1 <= 2**63 - 1 "
            "(replicate k of --bootstrap N is seed SEED + k, as in a spec)",
        ),
        (
            _complex_logits,
            [],
            "id_logits: 'an array of complex128' is not allowed; expected real-valued logits "
            "(floats or integers). Complex logits have no order: oodsim never drops their "
            "imaginary part",
        ),
        (
            _text_file,
            [],
            "id_logits: '{id}' is not allowed; expected a .npy array file (numpy.save). It is "
            "not one: it does not start with the .npy header",
        ),
        (
            _object_logits,
            [],
            "id_logits: '{id}' is not allowed; expected a .npy array of numbers. It holds Python "
            "objects, which oodsim never unpickles",
        ),
        (
            _fifo,
            [],
            "id_logits: '{id}' is not allowed; expected a .npy array file (numpy.save). It is "
            "a FIFO",
        ),
    ],
    ids=["negative-seed", "complex-logits", "text-file", "object-array", "fifo"],
)
def test_a_seed_or_logits_that_cannot_work_are_one_line(
    tmp_path, capsys, make, extra, message
) -> None:
    """Before: ``ValueError: expected non-negative integer`` (which option?), a ComplexWarning
    and numbers of the real parts, ``This file contains pickled (object) data``, and for a
    FIFO ``logits file ... does not exist`` (it is there: it is not a regular file)."""
    files = _logit_files(tmp_path)
    if make is not None:
        make(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a ComplexWarning (or any other) is a failure
        code = main(["imagenet-o", *files, *extra])
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), (out, err)
    assert err == f"oodsim: error: {message.format(id=files[1])}\n", err


def test_cli_names_the_inputs_it_needs() -> None:
    main = _cli()
    args = main.parse_args(["imagenet-o", "--model", "timm:test_resnet"])
    with pytest.raises(SpecError, match="oodsim run specs/imagenet_o.toml"):
        args.func(args)
    args = main.parse_args(["imagenet-o", "--id-logits", "a.npy"])
    with pytest.raises(SpecError, match="both .npy files"):
        args.func(args)
    with pytest.raises(SystemExit):  # spec files run with `oodsim run SPEC`
        main.parse_args(["imagenet-o", "--spec", "specs/imagenet_o.toml"])


# --------------------------------------------------------------------------- the spec


def test_shipped_spec_loads_without_the_data_and_preflight_says_where_it_looked(
    tmp_path,
) -> None:
    spec = oodsim.load(ROOT / "specs" / "imagenet_o.toml")
    assert isinstance(spec, ImageNetOSpec)
    assert len(spec.models) >= 3
    assert {m.prefix for m in spec.models} == {"timm", "torchvision"}
    assert [d.label for d in spec.detectors] == ["msp"]
    assert spec.metrics == ("aupr", "ap", "auroc", "fpr95")
    assert spec.bootstrap and len(spec.seeds.all()) >= 1000
    assert spec.stopping.rule == "fixed"  # a fixed number of bootstrap replicates
    assert PROTOCOL.from_data(json.loads(spec.to_json()), None) == spec  # round trip
    with pytest.raises(DataNotFoundError, match="/data/imagenet/val"):
        PROTOCOL(spec).preflight(Store(tmp_path / "cache"))
    assert not (tmp_path / "cache").exists()  # nothing written before the data check


def _data(**changes) -> dict:
    return {"id_root": "val", "ood_root": "o", "models": ["timm:test_resnet"], **changes}


def test_spec_defaults_and_relative_roots(tmp_path) -> None:
    spec = PROTOCOL.from_data(_data(), tmp_path)
    assert (spec.id_root, spec.ood_root) == (str(tmp_path / "val"), str(tmp_path / "o"))
    assert spec.seeds.all() == (0,)  # one seed unless [seeds] says more
    assert PROTOCOL.from_data(_data(seeds={"start": 5}), None).seeds.all() == (5,)
    assert PROTOCOL.from_data(_data(seeds={"n": 3}), None).seeds.all() == (0, 1, 2)
    assert not spec.bootstrap and spec.batch_size == 64
    assert spec.metrics == ("aupr", "auroc", "fpr95")


def test_key_is_the_content_not_the_paths_or_the_batch_size(tmp_path) -> None:
    spec = PROTOCOL.from_data(_data(), tmp_path)
    same = [
        attrs.evolve(spec, id_root="/elsewhere/val", ood_root="/elsewhere/o"),
        attrs.evolve(spec, batch_size=3, name="renamed"),
    ]
    assert {s.key for s in same} == {spec.key}
    other = [
        attrs.evolve(spec, bootstrap=True),
        attrs.evolve(spec, detectors=("energy",)),
        attrs.evolve(spec, models=("timm:resnet18",)),
        attrs.evolve(spec, metrics=("aupr",)),
    ]
    assert len({s.key for s in other} | {spec.key}) == len(other) + 1


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"modles": ["timm:resnet18"]}, UnknownNameError, "'models'"),
        ({"models": [{"name": "timm:resnet18", "weigths": "x"}]}, UnknownNameError, "weights"),
        ({"models": ["trained"]}, SpecError, "ImageNet-1k"),
        ({"models": [{"name": "timm:resnet18", "num_classes": 10}]}, SpecError, "1,000"),
        ({"models": []}, SpecError, "non-empty"),
        ({"detectors": ["mahalanobis"]}, SpecError, "logits alone"),
        ({"detectors": [{"name": "energy", "temperature": [1, 2]}]}, SpecError, "grid"),
        ({"metrics": ["accuracy"]}, UnknownNameError, "aupr"),
        ({"metrics": ["oscr"]}, UnknownNameError, "'ap'"),  # needs per-image correctness
        ({"metrics": "aupr"}, SpecError, "a list"),
        ({"detectors": "msp"}, SpecError, "a list"),
        ({"metrics": ["aupr", "aupr"]}, SpecError, "distinct"),
        ({"bootstrap": "yes"}, SpecError, "true or false"),
        ({"batch_size": 0}, SpecError, "batch_size"),
        ({"on_failure": "skip"}, UnknownNameError, "abort"),
        ({"seeds": {"m": 3}}, UnknownNameError, "'n'"),
        ({"stopping": {"rule": "fixed", "severity": "0"}}, SpecError, "stopping.severity"),
        ({"stopping": {"rule": "ci_width", "metric": "aupr"}}, SpecError, "stopping.rule"),
        ({"id_root": 3}, SpecError, "id_root"),
    ],
)
def test_bad_specs_fail_naming_the_field(changes, error, match) -> None:
    with pytest.raises(error, match=match):
        PROTOCOL.from_data(_data(**changes), None)


def test_missing_roots_and_weights_fail_before_any_compute(folders, tmp_path) -> None:
    id_root, ood_root, _ = folders
    with pytest.raises(SpecError, match="ood_root"):
        PROTOCOL.from_data({"id_root": "val", "models": ["timm:test_resnet"]}, tmp_path)
    spec = ImageNetOSpec(id_root=id_root, ood_root=ood_root, models=["timm:resnet18.a1_in1k"])
    with pytest.raises(DataNotFoundError, match="no local pretrained weights"):
        oodsim.run(spec, cache=tmp_path / "cache", progress=False)
    empty = attrs.evolve(spec, ood_root=str(tmp_path / "nothing"))
    with pytest.raises(DataNotFoundError, match="no ImageNet-O images"):
        oodsim.run(empty, cache=tmp_path / "cache", progress=False)
    assert not (tmp_path / "cache").exists()


# --------------------------------------------------------------------------- on the engine

MODELS = (
    ModelRef(name="timm:test_resnet", pretrained=False, image_size=32),
    ModelRef(name="torchvision:resnet18", pretrained=False, image_size=32, init_seed=1),
)


@pytest.fixture(scope="module")
def engine_run(tmp_path_factory, cluster_address):
    """Two random-init 1000-class models on generated wnid folders, run by ``oodsim.run`` on
    a real LocalCluster (2 seeds, no bootstrap): the spec, its results and the cache."""
    root = tmp_path_factory.mktemp("imagenet_o")
    id_root, ood_root, _ = make_folders(root)
    spec = ImageNetOSpec(
        id_root=id_root,
        ood_root=ood_root,
        models=MODELS,
        detectors=("msp", "energy"),
        metrics=("aupr", "auroc", "fpr95", "aupr_in"),
        batch_size=5,
        seeds=SeedsSpec(n=2),
    )
    cache = root / "cache"
    results = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    return spec, results, cache


def _stored(spec: ImageNetOSpec, cache: Path, ref: ModelRef) -> list[np.ndarray]:
    store = Store(cache)
    return [
        store.get(OUTPUTS, imagenet_o.logits_key(ref, files)).arrays["logits"]
        for files in imagenet_o.file_sets(spec)
    ]


def test_spec_runs_on_the_engine_and_aupr_equals_evaluate_logits(engine_run) -> None:
    spec, results, cache = engine_run
    assert results.attrs["protocol"] == "imagenet_o"
    assert results["score"].dims == ("seed", "method", "metric", "severity", "model")
    assert results.sizes == {"seed": 2, "method": 2, "metric": 4, "severity": 1, "model": 2}
    assert list(results["model"].values) == [m.label for m in MODELS]
    assert list(results["failure"].values) == ["", ""]
    assert results["n_id"].values.tolist() == [12, 12]
    assert results["n_ood"].values.tolist() == [6, 6]
    assert results["n_id_classes"].values.tolist() == [3, 3]
    assert results["chance"].values.tolist() == [1 / 3, 1 / 3]
    # one logits entry per (model, ID/OOD file set), computed once for both seeds
    assert store_counts(results)["computed"] == {OUTPUTS: 4}
    for ref in MODELS:
        id_logits, ood_logits = _stored(spec, cache, ref)
        assert id_logits.shape == (12, 1000) and ood_logits.shape == (6, 1000)
        want = imagenet_o.evaluate_logits(id_logits, ood_logits)
        got = results["score"].sel({"method": "msp", "severity": "all", "model": ref.label})
        for metric in ("aupr", "auroc", "fpr95"):
            assert got.sel(metric=metric).values.tolist() == [want[metric]] * 2
        assert got.sel(metric="aupr").values[0] != pytest.approx(1 / 3, abs=1e-9)
    # without bootstrap every seed is the full test set: the score is the point estimate
    assert results["full_score"].equals(results["score"])
    assert results["seed_meaning"].item() == imagenet_o.SEED_MEANING[False]
    table = imagenet_o.bootstrap_interval(results)
    assert np.isnan(table["lower"]).all() and table.attrs["interval"].startswith("none")


def test_engine_logits_match_the_single_model_path(engine_run, tmp_path) -> None:
    spec, results, _ = engine_run
    ref = MODELS[0]
    direct = imagenet_o.evaluate_folders(spec.id_root, spec.ood_root, ref, batch_size=5)
    got = results["score"].sel({"method": "msp", "severity": "all", "model": ref.label, "seed": 0})
    assert got.sel(metric="aupr").item() == pytest.approx(direct["aupr"], abs=1e-6)


def test_a_second_run_computes_nothing(engine_run, cluster_address) -> None:
    spec, first, cache = engine_run
    again = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    assert store_counts(again)["computed"] == {}
    # at most 2 seeds x 2 models x 2 sets: a process reads a run's logits once for all seeds
    assert store_counts(again)["loaded"].get(OUTPUTS, 0) <= 8
    assert again["score"].equals(first["score"])


def test_bootstrap_seeds_differ_and_draw_from_the_bootstrap_stream(engine_run) -> None:
    spec, plain, cache = engine_run
    boot = attrs.evolve(spec, bootstrap=True, seeds=attrs.evolve(spec.seeds, n=4))
    results = oodsim.run(boot, cache=cache, progress=False)  # logits cached: no cluster
    assert store_counts(results)["computed"] == {}
    aupr = results["score"].sel(metric="aupr", severity="all")
    assert len({float(v) for v in aupr.sel({"method": "msp", "model": MODELS[0].label}).values}) > 1
    assert results["n_id"].values.tolist() == [12] * 4  # same sizes as the full sets
    # seed 3 by hand: resample κ of the stored logits with the seed's bootstrap stream
    id_logits, ood_logits = _stored(spec, cache, MODELS[1])
    columns = imagenet_o.subset_columns(imagenet1k_wnids(), imagenet_o_wnids())
    id_k = imagenet_o.max_softmax(id_logits[:, columns])
    ood_k = imagenet_o.max_softmax(ood_logits[:, columns])
    id_index, ood_index = imagenet_o.bootstrap_indices(SeedStreams(3), 12, 6)
    want = imagenet_o.ood_metrics(id_k[id_index], ood_k[ood_index], ["aupr"])["aupr"]
    assert aupr.sel({"seed": 3, "method": "msp", "model": MODELS[1].label}).item() == float(want)
    # without bootstrap every seed scores the full sets; pinning the stream fixes the resample
    full = plain["score"].sel(metric="aupr", severity="all")
    assert (full.sel(seed=0) == full.sel(seed=1)).all()
    pinned = attrs.evolve(boot, seeds=attrs.evolve(boot.seeds, pinned={"bootstrap": 7}))
    fixed = oodsim.run(pinned, cache=cache, progress=False)["score"]
    assert (fixed.isel(seed=0) == fixed.isel(seed=3)).all()


def test_bootstrap_seeds_give_a_test_set_sampling_interval(engine_run, tmp_path, capsys) -> None:
    spec, _, cache = engine_run
    boot = attrs.evolve(spec, bootstrap=True, seeds=SeedsSpec(n=8))
    results = oodsim.run(boot, cache=cache, progress=False)  # logits cached: no cluster
    assert results["seed_meaning"].item() == "bootstrap replicate of the fixed test set"
    table = imagenet_o.bootstrap_interval(results)
    assert table.attrs["interval"] == "95% bootstrap interval (test-set sampling)"
    assert table.attrs["seed_meaning"] == "bootstrap replicate of the fixed test set"
    assert table.attrs == {
        **PROTOCOL(boot).layout().attrs,
        "confidence": 0.95,
    }
    score = results["score"].sel(severity="all")
    for ref in MODELS:
        where = {"method": "msp", "model": ref.label}
        # the point estimate is the full test set (not the mean of the replicates) ...
        want = imagenet_o.evaluate_logits(*_stored(spec, cache, ref), n_bootstrap=8, seed=0)
        cell = table.sel({**where, "severity": "all"})
        for metric in ("aupr", "auroc", "fpr95"):
            assert cell["estimate"].sel(metric=metric).item() == want[metric]
            # ... and the interval the percentiles of the seeds' replicates, which are the
            # same resamples evaluate_logits draws for seeds 0 ... 7
            values = score.sel({**where, "metric": metric}).values
            lower, upper = np.quantile(values, [0.025, 0.975])
            assert cell["lower"].sel(metric=metric).item() == pytest.approx(lower, abs=1e-12)
            assert cell["upper"].sel(metric=metric).item() == pytest.approx(upper, abs=1e-12)
            assert [lower, upper] == pytest.approx(want["intervals"][metric], abs=1e-12)
        assert int(cell["n"].sel(metric="aupr")) == 8
    # saved and printed by `oodsim imagenet-o --results`: point estimate [interval], labelled
    save_results(results, tmp_path / "r.zarr")
    main = _cli()
    args = main.parse_args(["imagenet-o", "--results", str(tmp_path / "r.zarr")])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "ImageNet-O: point estimate on the full test set [95% bootstrap interval "
        "(test-set sampling) over 8 seeds, each a bootstrap replicate of the fixed test set]"
    )
    first = table.sel({"method": "msp", "model": MODELS[0].label, "severity": "all"})
    aupr = first.sel(metric="aupr")
    assert (
        f"{aupr['estimate'].item():.3f} [{aupr['lower'].item():.3f}, {aupr['upper'].item():.3f}]"
        in out
    )
    # the report says the same, and shows nothing that treats replicates as simulations
    folder = tmp_path / "report"
    summary = write_report(results, folder).read_text()  # the path of summary.md
    assert "bootstrap interval (test-set sampling)" in summary
    assert (
        f"{aupr['estimate'].item():.4f} [{aupr['lower'].item():.4f}, "
        f"{aupr['upper'].item():.4f}]" in summary
    )
    assert "## Win probability" not in summary and "## Paired comparisons" not in summary
    assert sorted(p.name for p in folder.glob("*.png")) == ["distributions.png"]


STOPPING_LINE = (
    "oodsim: error: {spec}:{line}: stopping.rule: 'ranking' is not allowed; expected 'fixed' "
    "with bootstrap = true. A stopping rule over bootstrap replicates measures the resampling "
    "error of one fixed test set, not uncertainty about the population; run a fixed number of "
    "replicates instead (e.g. [seeds] n = 1000 and no [stopping] table)"
)


def test_a_stopping_rule_on_bootstrap_seeds_is_refused_before_any_compute(
    folders, tmp_path, capsys
) -> None:
    """The bad-input style of tests/test_bad_input.py: `oodsim run` on the spec prints one
    error line saying why and writes nothing, before the data or any model is looked at."""
    from oodsim.cli.main import main as cli_main

    id_root, ood_root, _ = folders
    text = (
        'protocol = "imagenet_o"\n'
        f'id_root = "{id_root}"\nood_root = "{ood_root}"\n'
        'models = ["timm:test_resnet"]\nmetrics = ["aupr", "ap"]\nbootstrap = true\n'
        "[seeds]\nn = 40\n"
        '[stopping]\nrule = "ranking"\nmetric = "aupr"\n'
    )
    (tmp_path / "spec.toml").write_text(text)
    cache = tmp_path / "cache"
    code = cli_main(
        ["run", str(tmp_path / "spec.toml"), "--cache", str(cache), "--out", str(tmp_path / "r")]
        + ["--workers", "1", "--quiet"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    line = text.splitlines().index('rule = "ranking"') + 1  # the line that sets the rule
    assert code == 2 and err == [STOPPING_LINE.format(spec=tmp_path / "spec.toml", line=line)]
    assert not cache.exists() and not (tmp_path / "r").exists()
    # the same refusal wherever a spec is made: load, the constructor, attrs.evolve
    with pytest.raises(SpecError, match="resampling error of one fixed test set"):
        oodsim.load(tmp_path / "spec.toml")
    spec = ImageNetOSpec(id_root=id_root, ood_root=ood_root, models=MODELS, bootstrap=True)
    rule = StoppingSpec(rule="ci_width", metric="aupr")
    with pytest.raises(SpecError, match="^stopping.rule: 'ci_width' .* with bootstrap = true"):
        attrs.evolve(spec, stopping=rule)
    # without bootstrap every seed is the same test set: nothing for a rule to watch either
    with pytest.raises(SpecError, match="same fixed test set"):
        attrs.evolve(spec, bootstrap=False, stopping=rule)
    assert attrs.evolve(spec, stopping=StoppingSpec()).stopping.rule == "fixed"


def test_bootstrap_seeds_read_the_logits_once_per_process(engine_run, tmp_path) -> None:
    """Every bootstrap seed resamples the same κ: scoring 6 seeds in one process reads each
    logits entry once, and gives the same scores as a process that read them afresh."""
    spec, _, cache = engine_run
    boot = attrs.evolve(spec, bootstrap=True, seeds=SeedsSpec(n=6))
    imagenet_o_scoring._FULL_SETS.clear()
    store = Store(cache)
    first = [PROTOCOL(boot).score(seed, store).variables["score"] for seed in range(6)]
    loads = [kind for action, kind, _ in store.events if action == "loaded"]
    assert loads.count(OUTPUTS) == 4  # 2 models x (ID, OOD), not 6 x 4
    imagenet_o_scoring._FULL_SETS.clear()
    again = [PROTOCOL(boot).score(seed, Store(cache)).variables["score"] for seed in range(6)]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(first[0], f) for f in first[1:])  # seeds do resample


def test_logits_an_older_version_stored_are_migrated_and_read_again(
    engine_run, cluster_address, tmp_path, capsys
) -> None:
    """Older versions stored these logits under a kind of their own, ``imagenet_o_logits``
    (with ``Store.put``, same keys): a run warns that it cannot read them, ``oodsim cache
    migrate`` moves them to ``outputs``, and the rerun computes nothing and scores the same."""
    spec, first, cache = engine_run
    old = tmp_path / "cache"
    shutil.copytree(cache, old)
    store = Store(old)
    sets = imagenet_o.file_sets(spec)
    keys = [imagenet_o.logits_key(ref, files) for ref in MODELS for files in sets]
    for key in keys:  # the layout of an older version: the same entries under the old kind
        entry = store.get(OUTPUTS, key)
        store.put(imagenet_o.LOGITS, key, entry.arrays, {"describe": entry.meta["describe"]})
        shutil.rmtree(store.place(OUTPUTS, key))
    with pytest.warns(LegacyOutputsWarning, match="oodsim cache migrate"):
        PROTOCOL(spec).preflight(store)

    assert main(["cache", "migrate", "--cache", str(old)]) == 0
    said = capsys.readouterr().out
    assert "imagenet_o_logits: 4 entries moved to outputs" in said, said
    assert not (old / imagenet_o.LOGITS).exists()
    assert Store(old).verify() == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", LegacyOutputsWarning)
        again = oodsim.run(spec, address=cluster_address, cache=old, progress=False)
    assert store_counts(again)["computed"] == {}
    assert again["score"].equals(first["score"])
