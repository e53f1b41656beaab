"""Bad input: one clear error, before any compute where it can be known, cache untouched.

Each row of the bad-input table in docs/reliability.md is a test here. Spec and data errors go
through ``oodsim run`` (the CLI's ``main``, in this process: no cluster may start) and must
leave the cache directory uncreated.
"""

from __future__ import annotations

import gzip
import importlib
import importlib.metadata
import json
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import oodsim
from oodsim.cli import main as cli_main
from oodsim.data.builtin import read_image_folder
from oodsim.detectors import confidence
from oodsim.detectors._checks import DetectorInputError
from oodsim.engine import ClusterError
from oodsim.errors import DataNotFoundError, SpecError
from oodsim.metrics import accuracy, auroc
from oodsim.outputs import Outputs
from oodsim.specs import DatasetSpec, ExperimentSpec
from oodsim.store import CorruptEntryWarning, Store, StoreError
from oodsim.zoo.known import RECORD_FORMAT
from tests.conftest import ROOT, digits_toml, small_digits

BASE = (ROOT / "specs" / "digits.toml").read_text()


def run_cli(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str, Path]:
    """``oodsim run`` on a spec text; returns (exit code, stderr, cache dir)."""
    spec = tmp_path / "spec.toml"
    spec.write_text(text)
    cache = tmp_path / "cache"
    args = ["run", str(spec), "--cache", str(cache), "--out", str(tmp_path / "r.zarr")]
    started = time.monotonic()
    code = cli_main([*args, "--workers", "1", "--quiet", *extra])
    assert time.monotonic() - started < 30  # failed before starting a cluster or training
    return code, capsys.readouterr().err, cache


def assert_rejected(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str], *patterns: str
) -> str:
    """The spec is refused with one ``oodsim: error:`` line matching every pattern, no cache
    directory and no results are written."""
    code, err, cache = run_cli(tmp_path, text, capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("oodsim: error: "), err
    for pattern in patterns:
        assert re.search(pattern, lines[0]), (pattern, lines[0])
    assert not cache.exists() and not (tmp_path / "r.zarr").exists()
    return lines[0]


def with_dataset(text: str, body: str) -> str:
    """The digits spec with its ``[dataset]`` table replaced."""
    return text.replace('[dataset]\nname = "digits"', f"[dataset]\n{body}")


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("old", "new", "patterns"),
    [
        (
            'name = "digits"\n\n[split]',
            'name = "fashion_mnst"\n\n[split]',
            ["'fashion_mnst'", "Did you mean 'fashion_mnist'"],
        ),
        (
            'arch = "small_cnn"',
            'arch = "resnet19"',
            ["arch: 'resnet19'", "Did you mean 'resnet18'"],
        ),
        (
            '"msp", "temperature"',
            '"msp", "temprature"',
            ["detector: 'temprature'", "Did you mean 'temperature'"],
        ),
        ('metrics = ["auroc"', 'metrics = ["aroc"', ["metrics: 'aroc'", "Did you mean 'auroc'"]),
        (
            "[seeds]\nn = 50",
            "[seeds]\nn = 50\npinned = { clas_split = 1 }",
            ["'clas_split'", "Did you mean 'class_split'"],
        ),
        (
            "[seeds]",
            'ood = ["held_out", "uniform_nosie"]\n[seeds]',
            ["'uniform_nosie'", "Did you mean 'uniform_noise'"],
        ),
    ],
    ids=["dataset", "model", "detector", "metric", "stream", "ood-kind"],
)
def test_unknown_names_suggest_a_close_match(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, patterns: list[str]
) -> None:
    if new.startswith("ood = "):  # top-level key: must come before the first table
        text = new.split("\n")[0] + "\n" + BASE
    else:
        assert old in BASE
        text = BASE.replace(old, new, 1)
    assert_rejected(tmp_path, text, capsys, *patterns)


def test_the_id_dataset_as_an_ood_set_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Used to run: the "OOD" set held known-class images, AUROC 0.63, no word."""
    text = 'ood = ["held_out", {kind = "dataset", dataset = "digits"}]\n' + BASE
    assert_rejected(
        tmp_path, text, capsys, r"ood\[1\]\.dataset: 'digits'", "is the ID dataset", "held_out"
    )


@pytest.mark.parametrize(
    "label",
    ['""', '"   "', '"msp\\nline two"', '"tab\\there"'],
    ids=["empty", "blank", "newline", "tab"],
)
def test_a_label_that_breaks_tables_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], label: str
) -> None:
    """Empty labels and labels holding a newline used to be accepted and break tables."""
    text = BASE.replace('"msp", "temperature"', f'{{name = "msp", label = {label}}}, "temperature"')
    assert_rejected(
        tmp_path, text, capsys, r"detectors\[0\]\.label: ", "one line of printable text"
    )


@pytest.mark.parametrize("name", ["", "../x", "a b", "9lives", "x" * 65, "naïve"])
@pytest.mark.parametrize("kind", ["detector", "architecture", "dataset"])
def test_a_registry_name_must_be_an_identifier(kind: str, name: str) -> None:
    """``register_architecture("")``, ``("../x")``, ``("a b")`` used to be accepted."""
    from oodsim.data import register_dataset
    from oodsim.models.registry import register_architecture

    registrar = {
        "detector": lambda: oodsim.detectors.register(name, needs={"logits"}, replace=True),
        "architecture": lambda: register_architecture(name, replace=True),
        "dataset": lambda: register_dataset(
            name, n_classes=None, hflip=False, description="x", replace=True
        ),
    }[kind]
    with pytest.raises(ValueError, match=f"{kind} name .* cannot be registered: use a Python"):
        registrar()(lambda *args, **kwargs: None)


@pytest.mark.parametrize(
    ("module", "registration"),
    [
        ("oodsim.models.registry", 'register_architecture("small_cnn")(lambda **kw: None)'),
        (
            "oodsim.data.registry",
            'register_dataset("digits", n_classes=10, hflip=False, description="x")'
            "(lambda **kw: None)",
        ),
        ("oodsim.detectors", 'register("msp", needs={"logits"})(lambda o, *, fit=None: o)'),
    ],
    ids=["architecture", "dataset", "detector"],
)
def test_a_script_taking_a_builtin_name_first_never_breaks_oodsims_import(
    module: str, registration: str
) -> None:
    """The probe: registering `small_cnn` before oodsim's built-ins loaded broke oodsim's own
    import. In a fresh interpreter, the script's registration is refused and oodsim works."""
    name = registration.split("(")[0]
    code = (
        f"from {module} import {name}\n"
        "try:\n"
        f"    {registration}\n"
        "except ValueError as error:\n"
        "    print('refused:', error)\n"
        "import oodsim, oodsim.models.architectures, oodsim.data, oodsim.detectors\n"
        "spec = oodsim.load('specs/digits.toml')\n"
        "print('oodsim works:', spec.model.arch, spec.dataset.name)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "refused:" in done.stdout and "is already registered" in done.stdout, done.stdout
    assert "oodsim works: small_cnn digits" in done.stdout


def test_the_builtin_architecture_names_are_those_registered() -> None:
    import oodsim.models.architectures  # noqa: F401 - registers the built-ins
    from oodsim.models.registry import BUILTIN_NAMES, BUILTINS

    assert sorted(BUILTINS) == sorted(BUILTIN_NAMES)


# --------------------------------------------------------------------------- splits and sizes


@pytest.mark.parametrize(
    ("split", "patterns"),
    [
        ("n_known = 10", [r"at most 10 classes", "at least one OOD test class"]),
        ("n_known = 6\nn_ood_val = 3\nn_ood_test = 2", [r"at most 10 classes"]),
        ("n_known = 3\nknown_classes = [[0, 1]]", [r"known_classes: \(0, 1\)", "n_known=3"]),
        ("n_known = 2\nknown_classes = [[0, 12]]", [r"class ids in 0\.\.9"]),
        ("fractions = [0.5, 0.3, 0.3]", ["summing to 1"]),
        ("fractions = [0.8, 0.2, 0.0]", [r"fractions: \(0\.8, 0\.2, 0\.0\)", "> 0"]),
        # one known class used to train, then fail after 107 s
        ("n_known = 1", [r"n_known: 1 ", "at least 2 known classes"]),
        ("n_known = 0", [r"n_known: 0 ", "at least 2 known classes"]),
        ("known_classes = [[3]]", [r"known_classes: \(3,\) ", "at least 2 distinct class ids"]),
    ],
    ids=[
        "all-known",
        "too-many-classes",
        "known-list-size",
        "class-id",
        "sum",
        "zero",
        "one-known",
        "no-known",
        "one-known-list",
    ],
)
def test_impossible_class_splits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], split: str, patterns: list[str]
) -> None:
    text = BASE.replace("n_known = 6\nfractions = [0.6, 0.2, 0.2]", split)
    assert_rejected(tmp_path, text, capsys, *patterns)


def test_a_one_class_split_written_twice_is_refused_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``known_classes = [[3]]`` and ``n_known = 1``: both fields are refused in one error, each
    on its own line with its line in the file."""
    text = BASE.replace(
        "n_known = 6\nfractions = [0.6, 0.2, 0.2]", "known_classes = [[3]]\nn_known = 1"
    )
    code, err, cache = run_cli(tmp_path, text, capsys)
    lines = text.splitlines()
    first, second = lines.index("known_classes = [[3]]") + 1, lines.index("n_known = 1") + 1
    spec = tmp_path / "spec.toml"
    assert code == 2 and not cache.exists(), err
    assert err.splitlines() == [
        f"oodsim: error: 2 problems in {spec}:",
        f"  {spec}:{first}: split.known_classes: (3,) is not allowed; expected lists of at least "
        "2 distinct class ids",
        f"  {spec}:{second}: split.n_known: 1 is not allowed; expected at least 2 known classes. "
        "A classifier of one class is sure of every input: no detector can separate anything, "
        "and the training would be wasted",
    ]


def test_impossible_sample_split_fails_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One sample per class cannot fill train, val and test: the driver builds the first seed's
    split before any compute (instead of every seed failing on the cluster)."""
    text = with_dataset(BASE, 'name = "digits"\nmax_per_class = 1')
    assert_rejected(
        tmp_path, text, capsys, "max_per_class=1", "Seed 0 gets no samples in in_val, in_test"
    )


def test_image_folder_with_fewer_classes_than_the_split(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = image_folder(tmp_path / "images", classes=3, per_class=2)
    text = with_dataset(BASE, f'name = "image_folder"\nroot = "{root}"')
    assert_rejected(tmp_path, text, capsys, r"split: 7 .*at most 3 classes")


@pytest.mark.parametrize(
    ("old", "new", "pattern"),
    [
        ("[seeds]\nn = 50", "[seeds]\nn = 0", r"n: 0 .*> 0"),
        ("[seeds]\nn = 50", "[seeds]\nn = -3", r"n: -3 .*> 0"),
        (
            'name = "digits"\n\n[split]',
            'name = "digits"\nmax_per_class = -5\n\n[split]',
            r"max_per_class: -5 .*> 0",
        ),
        ("batch_size = 64", "batch_size = 0", r"batch_size: 0 .*> 0"),
        ("max_epochs = 30", "max_epochs = 0", r"max_epochs: 0 .*> 0"),
        ("width = 16", "width = -8", r"width: -8 .*> 0"),
        ("lr = 0.05", "lr = 0.0", r"lr: 0\.0 .*> 0"),
        (
            "[seeds]",
            'ood = [{ kind = "uniform_noise", n_samples = 0 }]\n[seeds]',
            r"n_samples: 0 .*> 0",
        ),
    ],
    ids=["seeds-0", "seeds-neg", "max-per-class", "batch", "epochs", "width", "lr", "ood-size"],
)
def test_negative_or_zero_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, pattern: str
) -> None:
    if new.startswith("ood = "):
        text = new.split("\n")[0] + "\n" + BASE
    else:
        assert old in BASE
        text = BASE.replace(old, new, 1)
    assert_rejected(tmp_path, text, capsys, pattern)


SEVERITY = (ROOT / "specs" / "severity_fashion_mnist.toml").read_text()
TEMPERATURES = ", ".join(str(float(t)) for t in range(1, 20002))
GRID_OF_20001 = f'{{ name = "temperature", temperature = [{TEMPERATURES}] }}'


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        (
            BASE.replace('"msp", "temperature",', f'"msp", {GRID_OF_20001},', 1),
            r"detectors\[1\]\.params: 'a grid of 20,001 points' .*at most 10,000 .*"
            r"OODSIM_LIMITS=grid_points=20001",
        ),
        (BASE.replace("width = 16", "width = 100000"), r"model\.width: 100000 .*at most 4,096"),
        (
            BASE.replace("width = 16\n", "").replace(  # wrn40_2 takes no width
                'arch = "small_cnn"', 'arch = "wrn40_2"\nparams = { depth = 600004 }'
            ),
            r"model\.params\.depth: 600004 .*at most 1,000 layers",
        ),
        (
            'ood = [{ kind = "uniform_noise", n_samples = 2000000000 }]\n' + BASE,
            r"ood\[0\]\.n_samples: 2000000000 .*at most 1,000,000 images",
        ),
        (SEVERITY.replace("n_levels = 11", "n_levels = 1000000000"), r"n_levels: 1000000000 .*"),
    ],
    ids=["grid", "width", "depth", "noise", "n-levels"],
)
def test_absurd_sizes_are_refused_with_the_limit_and_how_to_lift_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, pattern: str
) -> None:
    """The probe: a grid of 200,000 temperatures ran silently for minutes, `depth = 600004`
    hung in preflight, `width = 100000` failed after 131 s, noise `n_samples = 2e9` raised
    MemoryError after training, `n_levels = 1e9` allocated ~22 GB at spec load."""
    line = assert_rejected(tmp_path, text, capsys, pattern)
    assert "to run it anyway, lift the limit: OODSIM_LIMITS=" in line


@pytest.mark.parametrize(
    ("detector", "pattern"),
    [
        (
            '{ name = "pytorch_ood:DICE", p = 2.0 }',
            r"detectors\[1\]\.p: 2\.0 is not allowed; expected a number in \[0, 1\]",
        ),
        (
            '{ name = "pytorch_ood:OpenMax", alpha = 100 }',
            r"detectors\[1\]\.alpha: 100 .*at most 6, the number of known classes",
        ),
        ('{ name = "openmax", alpha = [2, 7] }', r"detectors\[1\]\.alpha: 7 .*at most 6"),
    ],
    ids=["dice-p", "pytorch-ood-openmax-alpha", "openmax-alpha-grid"],
)
def test_detector_parameters_bounded_by_the_data_are_checked_in_the_driver(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], detector: str, pattern: str
) -> None:
    """The probe: `pytorch_ood:DICE p = 2.0` failed only after training; `pytorch_ood:OpenMax
    alpha = 100` ran, silently identical to alpha = 6 and labelled 100."""
    text = BASE.replace('"msp", "temperature",', f'"msp", {detector},', 1)
    text = text.replace("[split]\nn_known = 6", "[split]\nn_known = 6\nn_ood_val = 1", 1)
    assert_rejected(tmp_path, text, capsys, pattern)


def test_a_lifted_limit_lets_the_spec_through(monkeypatch: pytest.MonkeyPatch) -> None:
    from oodsim import limits
    from oodsim.specs import ModelSpec

    with pytest.raises(SpecError, match="at most 4,096"):
        ModelSpec(width=5000)
    monkeypatch.setenv(limits.ENV, "model_width=8000")
    assert ModelSpec(width=5000).width == 5000
    monkeypatch.setenv(limits.ENV, "model_wdth=8000")
    with pytest.raises(SpecError, match="OODSIM_LIMITS: 'model_wdth=8000'"):
        ModelSpec(width=5000)
    monkeypatch.setenv(limits.ENV, "model_width=-5")  # was taken: "at most -5 channels"
    with pytest.raises(SpecError, match="'model_width=-5' .* each value an integer >= 1"):
        ModelSpec(width=8)
    monkeypatch.delenv(limits.ENV)
    monkeypatch.setitem(limits.LIMITS, "model_width", 6000)
    assert ModelSpec(width=5000).width == 5000


# --------------------------------------------------------------------------- TOML


def test_toml_syntax_error_names_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = BASE.replace("n_known = 6", "n_known = = 6")
    line = text.splitlines().index("n_known = = 6") + 1
    assert_rejected(tmp_path, text, capsys, rf"spec\.toml:{line}:11: invalid TOML: Invalid value")


@pytest.mark.parametrize(
    ("old", "new", "pattern"),
    [
        ("[seeds]\nn = 50", '[seeds]\nn = "many"', r"seeds\.n"),
        ("lr = 0.05", 'lr = "fast"', r"training\.lr"),
        ("fractions = [0.6, 0.2, 0.2]", 'fractions = "60/20/20"', r"fractions"),
        ("dropout = 0.2", "dropout = [0.2]", r"model\.dropout"),
        ("[training.augment]", "[training.augment]\ncolour = true", r"colour"),
    ],
    ids=["int", "float", "tuple", "list-for-float", "extra-key"],
)
def test_wrong_type_in_a_toml_field_names_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, pattern: str
) -> None:
    assert old in BASE
    assert_rejected(tmp_path, BASE.replace(old, new, 1), capsys, pattern)


@pytest.mark.parametrize(
    ("detector", "pattern"),
    [
        (
            '{ name = "temperature", temperature = -1.0 }',
            r"temperature: -1\.0 .*expected a number > 0",
        ),
        (
            '{ name = "odin", epsilon = [0.0, -0.1] }',
            r"epsilon\[1\]: -0\.1 .*expected a number >= 0",
        ),
        ('{ name = "knn", k = 0 }', r"detectors\[1\]\.k: 0 .*expected a number >= 1"),
        ('{ name = "openmax", distance = "cosine" }', r"distance: 'cosine' .*one of 'euclidean'"),
    ],
    ids=["temperature", "odin-grid", "knn", "openmax"],
)
def test_detector_parameter_outside_its_limits_fails_in_the_driver(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], detector: str, pattern: str
) -> None:
    """Checked where the spec is built, not on a worker after all training."""
    text = BASE.replace('"msp", "temperature"', f'"msp", {detector}', 1)
    assert_rejected(tmp_path, text, capsys, pattern)


# --------------------------------------------------------------------------- data


def test_missing_data_root_says_where_it_looked_and_how_to_get_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere"
    text = with_dataset(BASE, f'name = "fashion_mnist"\nroot = "{missing}"')
    assert_rejected(
        tmp_path,
        text,
        capsys,
        f"looked in {missing}, {missing}/fashion-mnist",
        "apt-get install dataset-fashion-mnist",
        r"root= / set \$OODSIM_DATA",
    )


def test_torchvision_dataset_without_root_or_files(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match="needs root= pointing at its torchvision folder"):
        oodsim.run(spec_on(DatasetSpec(name="mnist")), cache=tmp_path / "c", progress=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataNotFoundError, match=rf"cifar10 not found under '{empty}'.*download"):
        oodsim.run(
            spec_on(DatasetSpec(name="cifar10", root=str(empty))),
            cache=tmp_path / "c",
            progress=False,
        )
    assert not (tmp_path / "c").exists()


def spec_on(dataset: DatasetSpec) -> ExperimentSpec:
    return ExperimentSpec(dataset=dataset)


def image_folder(root: Path, classes: int, per_class: int) -> Path:
    from PIL import Image

    for c in range(classes):
        (root / f"class{c}").mkdir(parents=True)
        for i in range(per_class):
            pixels = np.full((8, 8, 3), 20 * c + i, dtype=np.uint8)
            Image.fromarray(pixels).save(root / f"class{c}" / f"{i}.png")
    return root


def test_image_folder_without_images(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = image_folder(tmp_path / "images", classes=10, per_class=1)
    for path in (root / "class4").iterdir():
        path.rename(path.with_suffix(".txt"))  # only non-image files left in one class
    text = with_dataset(BASE, f'name = "image_folder"\nroot = "{root}"')
    assert_rejected(tmp_path, text, capsys, f"class folder {root}/class4 holds no images")
    empty = tmp_path / "no_classes"
    empty.mkdir()
    with pytest.raises(DataNotFoundError, match="has no class sub-folders"):
        read_image_folder(empty)


def test_image_folder_with_an_unreadable_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = image_folder(tmp_path / "images", classes=10, per_class=2)
    broken = root / "class7" / "1.png"
    broken.write_bytes(b"this is not a PNG")
    text = with_dataset(BASE, f'name = "image_folder"\nroot = "{root}"')
    assert_rejected(tmp_path, text, capsys, f"cannot read image {broken}")


def test_an_image_size_the_loader_does_not_apply_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """digits with image_size = 16 trained on 8x8 images under a key of its own, and the
    results said 16 (probe of 2026-12-05); image folders do resize."""
    text = with_dataset(BASE, 'name = "digits"\nimage_size = 16')
    assert_rejected(
        tmp_path, text, capsys, "dataset 'digits' returned 8x8 images for image_size=16"
    )
    root = image_folder(tmp_path / "images", classes=10, per_class=1)
    resized = DatasetSpec(name="image_folder", root=str(root), image_size=12).load()
    assert resized.images.shape[1:3] == (12, 12)


def test_image_folder_with_a_fifo_named_like_an_image(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pillow's open waited forever for a writer: the run hung in its checks, with no
    output (probe of 2026-12-05, killed after 60 s)."""
    root = image_folder(tmp_path / "images", classes=10, per_class=2)
    fifo = root / "class1" / "005.png"
    os.mkfifo(fifo)
    text = with_dataset(BASE, f'name = "image_folder"\nroot = "{root}"')
    assert_rejected(tmp_path, text, capsys, f"cannot read image {fifo}: not a regular file")


def write_idx(path: Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as handle:
        handle.write(header + array.astype(np.uint8).tobytes())


def fake_idx_root(root: Path, size: int, n_classes: int) -> Path:
    """The four Fashion-MNIST file names, holding another dataset (``size``², ``n_classes``)."""
    root.mkdir()
    rng = np.random.default_rng(0)
    for part, n in (("train", 50), ("t10k", 20)):
        write_idx(root / f"{part}-images-idx3-ubyte.gz", rng.integers(0, 255, (n, size, size)))
        write_idx(root / f"{part}-labels-idx1-ubyte.gz", np.arange(n) % n_classes)
    return root


@pytest.mark.parametrize(
    ("size", "n_classes", "pattern"),
    [
        (32, 10, r"images of shape \(32, 32\), not \(28, 28\)"),  # e.g. another 32x32 set
        (28, 47, r"labels up to 46, not 0\.\.9"),  # e.g. EMNIST balanced
    ],
    ids=["image-size", "classes"],
)
def test_root_with_another_datasets_idx_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], size: int, n_classes: int, pattern: str
) -> None:
    root = fake_idx_root(tmp_path / "data", size, n_classes)
    text = with_dataset(BASE, f'name = "fashion_mnist"\nroot = "{root}"')
    assert_rejected(tmp_path, text, capsys, f"{root} does not hold Fashion-MNIST IDX", pattern)


def test_root_with_files_that_are_not_idx(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "data"
    root.mkdir()
    for stem in ("train-images-idx3", "train-labels-idx1", "t10k-images-idx3", "t10k-labels-idx1"):
        with gzip.open(root / f"{stem}-ubyte.gz", "wb") as handle:
            handle.write(b"a CSV file, say\n1,2,3\n")
    text = with_dataset(BASE, f'name = "fashion_mnist"\nroot = "{root}"')
    assert_rejected(tmp_path, text, capsys, "is not an unsigned-byte IDX file")


def test_torchvision_root_with_wrong_files(tmp_path: Path) -> None:
    """A CIFAR-10 root whose batch files are not CIFAR-10's: torchvision's checksums fail."""
    folder = tmp_path / "cifar" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in (
        "data_batch_1",
        "data_batch_2",
        "data_batch_3",
        "data_batch_4",
        "data_batch_5",
        "test_batch",
        "batches.meta",
    ):
        (folder / name).write_bytes(b"not a pickle")
    with pytest.raises(DataNotFoundError, match="not found or corrupted"):
        oodsim.run(
            spec_on(DatasetSpec(name="cifar10", root=str(tmp_path / "cifar"))),
            cache=tmp_path / "c",
            progress=False,
        )
    assert not (tmp_path / "c").exists()


# --------------------------------------------------------------------------- arrays


def test_logits_with_fewer_classes_than_the_labels() -> None:
    rng = np.random.default_rng(0)
    fit = Outputs(
        logits=rng.normal(size=(60, 3)),
        features=rng.normal(size=(60, 4)),
        labels=np.arange(60) % 6,  # six classes, three logit columns
    )
    scored = Outputs(logits=rng.normal(size=(10, 3)), features=rng.normal(size=(10, 4)))
    for name in ("temperature", "openmax", "mahalanobis"):
        with pytest.raises(
            DetectorInputError,
            match=rf"detector '{name}': fit\.labels go up to 5 but fit\.logits have 3 classes",
        ):
            confidence(name, scored, fit=fit)
    with pytest.raises(ValueError, match="labels has 9 rows but logits have 10"):
        Outputs(logits=np.zeros((10, 3)), labels=np.zeros(9, dtype=int))
    with pytest.raises(ValueError, match=r"logits must have shape \(n, classes\)"):
        Outputs(logits=np.zeros(10))


def test_metric_inputs_that_do_not_match() -> None:
    with pytest.raises(ValueError, match="is_ood"):
        auroc(np.zeros(5), np.array([True, False]))
    with pytest.raises(ValueError, match="do not match"):
        accuracy(np.zeros(5, dtype=int), np.zeros(4, dtype=int))


# --------------------------------------------------------------------------- cluster


def test_dask_address_that_does_not_answer_fails_after_a_bounded_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port that accepts connections but never speaks (a hung or foreign server): without a
    bound, distributed's client would wait for its handshake forever."""
    import oodsim.clusters.address

    monkeypatch.setattr(oodsim.clusters.address, "CONNECT_TIMEOUT", 3.0)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(
            ClusterError, match=rf"no Dask scheduler answered at '{address}' within 3 s \(Timeout"
        ):
            oodsim.run(small_digits(1), address=address, cache=tmp_path / "c", progress=False)
        assert time.monotonic() - started < 15
    assert not (tmp_path / "c").exists()  # checked before the store is made: no folder


def _answer_like_a_web_server(server: socket.socket) -> None:
    """Answer every connection's first bytes at once with an HTTP error, as web servers and
    proxies do (a proxy of this machine answered Dask's handshake so)."""
    while True:
        try:
            connection, _ = server.accept()
        except OSError:  # the test closed the server
            return
        with connection:
            connection.recv(1024)
            connection.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")


def test_a_web_server_at_the_dask_address_is_named_as_such(tmp_path: Path) -> None:
    """Its reply read as a Dask frame of 3.5e18 bytes: `error: MemoryError: out of memory
    ... lower the sizes of the spec`, a wrong lead."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        threading.Thread(target=_answer_like_a_web_server, args=(server,), daemon=True).start()
        address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
        with pytest.raises(ClusterError) as caught:
            oodsim.run(small_digits(1), address=address, cache=tmp_path / "c", progress=False)
    assert str(caught.value).startswith(
        f"what answers at '{address}' is not a Dask scheduler: its reply is not Dask's protocol"
    )
    assert "port 8786 by default" in str(caught.value)
    assert not (tmp_path / "c").exists()  # checked before the store is made


def test_malformed_dask_address(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"'nonsense' is not a Dask scheduler address"):
        oodsim.run(small_digits(1), address="nonsense", cache=tmp_path / "c", progress=False)


def test_download_without_network_fails_clearly(tmp_path: Path) -> None:
    """download=true on a machine without internet: one clear error, not a deep traceback.
    The network is cut off by a proxy on a closed loopback port (no traffic leaves the host)."""
    proxy = "http://127.0.0.1:9"
    env = {
        **os.environ,
        **{k: proxy for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")},
    }
    env.pop("NO_PROXY", None)
    env.pop("no_proxy", None)
    code = (
        "from oodsim.data.registry import load_dataset\n"
        f"load_dataset('cifar10', {str(tmp_path / 'cifar')!r}, True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("oodsim.errors.DataNotFoundError: could not download cifar10")
    assert "no internet access" in last and "root=" in last


@pytest.mark.parametrize("target", ["missing", "spec file", "empty folder"])
def test_report_of_anything_but_results_is_one_error_line(tmp_path, capsys, target) -> None:
    path = {
        "missing": tmp_path / "missing.zarr",
        "spec file": ROOT / "specs" / "digits.toml",
        "empty folder": tmp_path,
    }[target]
    assert cli_main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("oodsim: error: ") and err.count("\n") == 1, err
    assert "no results at" in err or "is not a results store written by oodsim" in err


@pytest.mark.parametrize("message", ["", "Unable to allocate 119. GiB for an array"])
def test_a_memory_error_says_what_ran_out_and_what_to_lower(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], message: str
) -> None:
    """The probe: a `MemoryError` with an empty message gave `oodsim: error: MemoryError: `."""
    cli_module = importlib.import_module("oodsim.cli.main")

    def out_of_memory(args):
        raise MemoryError(message) if message else MemoryError

    monkeypatch.setattr(cli_module, "cmd_report", out_of_memory)
    line = one_error_line(capsys, ["report", "anything.zarr"])
    assert line.startswith("oodsim: error: MemoryError: out of memory")
    assert "dataset.max_per_class" in line and "what finished is cached" in line
    assert (message in line) if message else "()" not in line


def test_debug_shows_the_traceback_instead(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="no results at"):
        cli_main(["--debug", "report", str(tmp_path / "missing.zarr")])


# --------------------------------------------------------------------------- the command line


def one_error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """``oodsim ARGV`` exits with code 2 and prints exactly one ``oodsim: error:`` line."""
    code = cli_main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("oodsim: error: "), err
    return lines[0]


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        (lambda p: p.mkdir(), r"spec file: '.*spec\.toml' .*expected a TOML file, not a folder"),
        (
            lambda p: p.write_bytes(b'name = "x"\n\xff\xfe'),
            r"expected a UTF-8 text file \(byte 11 is not UTF-8\)",
        ),
        # used to block forever (a FIFO) or grow to 17 GB in 43 s (/dev/zero)
        (lambda p: os.mkfifo(p), r"expected a regular TOML file, not a pipe or device"),
        (
            lambda p: p.symlink_to("/dev/zero"),
            r"expected a regular TOML file, not a pipe or device",
        ),
        (
            lambda p: p.write_bytes(b"# padding\n" * (1 << 19)),
            r"expected a TOML file of at most 4 MiB",
        ),
        (
            lambda p: p.write_bytes(b"a = " + b"[" * 100_000 + b"]" * 100_000),
            r"expected TOML nested a few hundred levels at most",
        ),
    ],
    ids=["folder", "not-utf8", "fifo", "dev-zero", "too-large", "nested-deep"],
)
def test_a_spec_path_that_is_not_a_toml_text_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any, pattern: str
) -> None:
    make(tmp_path / "spec.toml")
    line = one_error_line(capsys, ["run", str(tmp_path / "spec.toml"), "--cache", "c"])
    assert re.search(pattern, line), line


@pytest.mark.parametrize(
    ("given", "looked_in"),
    [
        ("nosuch.toml", ""),
        ("specs/nosuch.toml", "specs"),
        ("digts", " and the shipped specs: {shipped}). Did you mean 'digits'?"),
    ],
    ids=["file", "in-a-folder", "bare-name"],
)
def test_a_missing_spec_says_where_it_looked(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    given: str,
    looked_in: str,
) -> None:
    """It read "spec file: 'nosuch.toml' is not allowed; expected an existing TOML file"."""
    monkeypatch.chdir(tmp_path)
    line = one_error_line(capsys, ["run", given, "--cache", "c"])
    shipped = ", ".join(sorted(p.stem for p in (ROOT / "specs").glob("*.toml")))
    folder = tmp_path / looked_in if looked_in == "specs" else tmp_path
    rest = looked_in.format(shipped=shipped) if looked_in != "specs" else ""
    rest = rest if rest.startswith(" and") else rest + ")"
    assert line == f"oodsim: error: no such file: {given} (looked in {folder}{rest}"
    assert sorted(tmp_path.iterdir()) == []


#: what reading and checking a spec must not import (each takes from 0.1 s to seconds)
HEAVY_MODULES = (
    "torch",
    "torchvision",
    "timm",
    "dask",
    "distributed",
    "xarray",
    "matplotlib",
    "pandas",
    "scipy",
    "sklearn",
)


def read_in_a_fresh_interpreter(
    folder: Path, bad: list[str], good: list[str], env: dict[str, str] | None = None
) -> dict[str, Any]:
    """``oodsim run`` each of ``bad`` (files in ``folder``), then ``oodsim.load`` each of
    ``good``, in a fresh interpreter: the exit codes, the good specs' names, which of
    :data:`HEAVY_MODULES` got imported, and the error lines."""
    code = f"""
import contextlib, io, json, sys
from oodsim.cli import main
import oodsim
err = io.StringIO()
with contextlib.redirect_stderr(err):
    codes = [main(["run", p, "--cache", "c"]) for p in {bad!r}]
names = [oodsim.load(p).name for p in {good!r}]
imported = {{m.partition(".")[0] for m in sys.modules}}
heavy = [m for m in {HEAVY_MODULES!r} if m in imported]
print(json.dumps({{"codes": codes, "names": names, "heavy": heavy, "err": err.getvalue()}}))
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout.splitlines()[-1])
    read["err"] = read["err"].splitlines()
    return read


def line_of(path: Path, text: str) -> int:
    """The line of ``path`` that is ``text``."""
    return path.read_text().splitlines().index(text) + 1


def test_spec_and_file_errors_come_before_anything_heavy_is_imported(tmp_path: Path) -> None:
    """``oodsim run`` reads and checks the spec before the engine loads: in a fresh
    interpreter, refusing a missing file, a bad TOML, a bad open set spec (several problems)
    and a bad severity spec, and reading the good digits and severity specs, import none of
    :data:`HEAVY_MODULES`, so every such error comes at once."""
    bad = tmp_path / "bad.toml"
    bad.write_text(BASE.replace("lr = 0.05", 'lr = "fast"').replace("n = 50", "n = 0"))
    (tmp_path / "broken.toml").write_text("name = = 1\n")
    bad_severity = tmp_path / "bad_severity.toml"
    bad_severity.write_text(SEVERITY.replace("n_est = 60", "n_est = 0"))
    read = read_in_a_fresh_interpreter(
        tmp_path,
        ["nosuch.toml", "broken.toml", "bad.toml", "bad_severity.toml"],
        ["digits", "severity_fashion_mnist"],
    )
    assert (read["codes"], read["names"]) == ([2] * 4, ["digits", "severity_fashion_mnist"])
    assert read["heavy"] == []
    errors = read["err"]
    assert errors[0].startswith("oodsim: error: no such file: nosuch.toml")
    assert errors[1].startswith("oodsim: error: broken.toml:1:8: invalid TOML")
    lr, n = line_of(bad, 'lr = "fast"'), line_of(bad, "n = 0")
    assert errors[2:] == [
        "oodsim: error: 2 problems in bad.toml:",
        f"  bad.toml:{lr}: training.lr: 'fast' is not allowed; expected a finite number",
        f"  bad.toml:{n}: seeds.n: 0 is not allowed; expected a number > 0",
        f"oodsim: error: bad_severity.toml:{line_of(bad_severity, 'n_est = 0')}: n_est: 0 is "
        "not allowed; expected a number > 0",
    ]


@pytest.mark.slow  # the first interpreter imports torch, timm and torchvision (seconds)
def test_zoo_model_specs_are_checked_without_torch_once_the_names_are_recorded(
    tmp_path: Path,
) -> None:
    """Severity and ImageNet-O specs name timm and torchvision models, checked against the
    names those libraries know. The first check asks the libraries (importing torch) and
    records their names per installed version; in a fresh interpreter after it, the good and
    the bad specs are read and refused from the record, importing none of
    :data:`HEAVY_MODULES`, with the very messages the libraries' own answers gave. A library
    a script imported is asked itself: a model the script registered is known."""
    cood = (ROOT / "specs" / "cood_severity.toml").read_text()
    bad_cood = tmp_path / "bad_cood.toml"
    bad_cood.write_text(
        cood.replace("n_test = 50", "n_test = -5")
        .replace('"timm:resnet50.a1_in1k"', '"timm:resnet5O.a1_in1k"')
        .replace('"torchvision:efficientnet_b0"', '"torchvision:efficientnet_b0.IMAGENET1K_V9"')
    )
    imagenet_o = (ROOT / "specs" / "imagenet_o.toml").read_text()
    bad_imagenet_o = tmp_path / "bad_imagenet_o.toml"
    bad_imagenet_o.write_text(
        imagenet_o.replace("batch_size = 64 ", "batch_size = 0 ").replace(
            '"timm:resnet50.a1_in1k"', '"timm:resnet50.a1_in1x"'
        )
    )
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    files, shipped = ["bad_cood.toml", "bad_imagenet_o.toml"], ["cood_severity", "imagenet_o"]

    asked = read_in_a_fresh_interpreter(tmp_path, files, shipped, env)
    assert {"torch", "timm", "torchvision"} <= set(asked["heavy"])
    records = tmp_path / "xdg" / "oodsim-model-names"
    assert sorted(p.name for p in records.iterdir()) == [
        f"{library}-{importlib.metadata.version(library)}-v{RECORD_FORMAT}.json"
        for library in ("timm", "torchvision")
    ]

    recorded = read_in_a_fresh_interpreter(tmp_path, files, shipped, env)
    assert (recorded["codes"], recorded["names"]) == ([2, 2], shipped)
    assert recorded["heavy"] == []
    assert recorded["err"] == asked["err"]
    n_test = line_of(bad_cood, "n_test = -5")
    weights = line_of(bad_cood, '  "torchvision:efficientnet_b0.IMAGENET1K_V9",')
    model = line_of(bad_cood, '  "timm:resnet5O.a1_in1k",')
    tag = line_of(bad_imagenet_o, '  "timm:resnet50.a1_in1x",')
    errors = recorded["err"]
    assert errors[:3] == [
        "oodsim: error: 3 problems in bad_cood.toml:",
        f"  bad_cood.toml:{n_test}: n_test: -5 is not allowed; expected a number > 0",
        f"  bad_cood.toml:{weights}: torchvision "
        "efficientnet_b0 weights: 'IMAGENET1K_V9' is not allowed; expected one of 'DEFAULT', "
        "'IMAGENET1K_V1'. Did you mean 'IMAGENET1K_V1'?",
    ]
    assert errors[3].startswith(
        f"  bad_cood.toml:{model}: timm model: 'resnet5O' is not allowed; expected one of the "
    )
    assert "names of timm.list_models(). Did you mean 'resnet50'" in errors[3]
    assert errors[4] == "oodsim: error: 2 problems in bad_imagenet_o.toml:"
    assert errors[6].startswith(
        f"  bad_imagenet_o.toml:{tag}: timm resnet50 tag: "
        "'a1_in1x' is not allowed; expected one of 'a1_in1k', "
    )

    # timm imported already (a script may register a model): asked itself, record untouched
    registers = """
from timm.models import register_model
@register_model
def oodsim_probe_net(pretrained=False, **kwargs):
    raise NotImplementedError
from oodsim.zoo import ModelRef
print(ModelRef(name="timm:oodsim_probe_net").label)
"""
    timm_record = records / f"timm-{importlib.metadata.version('timm')}-v{RECORD_FORMAT}.json"
    before = timm_record.read_bytes()
    done = subprocess.run(
        [sys.executable, "-c", registers], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.stdout.split() == ["timm:oodsim_probe_net"], done.stderr
    assert timm_record.read_bytes() == before


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["rnu", "x.toml"], "no command 'rnu'; did you mean 'run'? (commands: run, severity,"),
        (["cache", "lss"], "no command 'lss'; did you mean 'ls'? (commands: ls, verify, gc"),
        (["reprot"], "no command 'reprot'; did you mean 'report'?"),
        (["run", "x.toml", "--wokers", "2"], "unrecognized arguments: --wokers 2; did you mean"),
        (["run", "x.toml", "--overwirte"], "did you mean '--overwrite'?"),
    ],
    ids=["command", "cache-action", "report", "option", "flag"],
)
def test_a_misspelled_command_or_option_gets_a_close_match(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli_main(argv)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_.value.code == 2 and message in last, last
    assert last.startswith("oodsim: error: ") or last.startswith("oodsim cache: error: ")


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (["--worker-timeout", "-1"], r"worker_timeout: -1\.0 .*finite number of seconds > 0"),
        (["--worker-timeout", "nan"], r"worker_timeout: nan .*finite number of seconds > 0"),
        (["--metric", "aurco"], r"--metric: 'aurco' .*Did you mean 'auroc'\?"),
        (["--metric", "aupr"], r"--metric: 'aupr' .*expected one of 'accuracy', 'aupr_in'"),
    ],
    ids=["timeout-negative", "timeout-nan", "metric-typo", "metric-not-in-spec"],
)
def test_bad_run_options_fail_before_compute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], pattern: str
) -> None:
    code, err, cache = run_cli(tmp_path, BASE, capsys, *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and re.search(pattern, lines[0]), err
    assert not cache.exists() and not (tmp_path / "r.zarr").exists()


@pytest.mark.parametrize("action", ["ls", "verify", "gc"])
@pytest.mark.parametrize("where", ["missing", "file"])
def test_cache_commands_refuse_a_path_that_is_not_a_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: str, where: str
) -> None:
    """A mistyped ``--cache`` must not read as an empty, healthy cache (``0 corrupt``)."""
    root = tmp_path / "cahce"
    if where == "file":
        root.write_text("notes")
    line = one_error_line(capsys, ["cache", action, "--cache", str(root)])
    expected = "no cache at" if where == "missing" else "is a file, not a folder"
    assert expected in line and "--cache" in line, line
    assert (root.read_text() == "notes") if where == "file" else not root.exists()


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with a file's bytes (None for a folder)."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("action", ["ls", "verify", "verify --repair", "gc", "migrate"])
def test_cache_commands_change_nothing_in_a_folder_that_is_not_a_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: str
) -> None:
    """The probe: ``oodsim cache verify --repair --cache .`` in a folder of one's own took
    ``results/ab/ab_run/`` for a corrupt entry and deleted it; ``gc`` deleted an hour-old
    ``.tmp-mine`` and the files of a ``locks/`` folder. Every action now refuses a folder
    without oodsim's ``.gitignore`` in one line, and reads and changes nothing there."""
    root = tmp_path / "project"
    (root / "results" / "ab" / "ab_run").mkdir(parents=True)
    (root / "results" / "ab" / "ab_run" / "model.pt").write_bytes(b"weights")
    (root / "locks").mkdir()
    (root / "locks" / "mine").write_text("not a lock")
    (root / ".tmp-mine").write_text("an old file of mine")
    (root / "notes.txt").write_text("notes")
    for path in [root / ".tmp-mine", root / "locks" / "mine"]:
        os.utime(path, (time.time() - 7200,) * 2)
    before = _tree(root)
    line = one_error_line(capsys, ["cache", *action.split(), "--cache", str(root)])
    assert f"{root} is not an oodsim cache" in line and "nothing there was" in line, line
    assert _tree(root) == before


def test_only_a_new_or_empty_cache_folder_is_marked_as_oodsim_s(tmp_path: Path) -> None:
    """A run's cache check (``Store.ensure_writable``) wrote ``.gitignore`` (``*``) into any
    folder given as ``--cache``: ``--cache ~`` hid every file of a home under git. Now a
    new or empty folder is marked, and a folder of other things is used unmarked."""
    from oodsim.store.layout import is_cache

    for new in (tmp_path / "new", tmp_path / "empty"):
        if new.name == "empty":
            new.mkdir()
        Store(new).ensure_writable()
        assert is_cache(new)
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("notes")
    Store(home).ensure_writable()
    assert sorted(p.name for p in home.iterdir()) == ["notes.txt"] and not is_cache(home)


def test_a_run_says_when_its_cache_is_a_folder_of_other_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Such a folder is used, not marked, and ``oodsim cache`` then refuses it: the run's
    opening line says so, so that the refusal is no surprise."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("notes")
    spec = digits_toml(tmp_path / "spec.toml", 1)
    args = ["run", str(spec), "--cache", str(home), "--out", str(tmp_path / "r.zarr")]
    assert cli_main([*args, "--workers", "1"]) == 0
    assert "a folder of other files, used but not marked" in capsys.readouterr().err
    assert (home / "notes.txt").read_text() == "notes" and not (home / ".gitignore").exists()


def _a_folder_of_other_files(home: Path, name: str) -> dict[str, bytes]:
    """``home`` holding a user's notes and a file, a link or a FIFO named ``name``, where the
    store keeps a kind folder or its locks; what each file held."""
    home.mkdir()
    (home / "notes.txt").write_text("notes")
    if name == "outputs":  # a link to a folder of one's own (a disk elsewhere, say)
        (home.parent / "elsewhere").mkdir()
        (home / name).symlink_to(home.parent / "elsewhere")
    else:  # TensorFlow writes a file named `checkpoint` beside its weights
        (home / name).write_text('model_checkpoint_path: "model.ckpt-1"\n')
    return {p.name: p.read_bytes() for p in home.iterdir() if p.is_file() and not p.is_symlink()}


@pytest.mark.parametrize("name", ["checkpoint", "locks", "outputs"])
def test_a_run_moves_nothing_of_a_folder_of_other_files(tmp_path: Path, name: str) -> None:
    """A run given such a folder as its cache moved aside (and so deleted) a file of the
    user's named like a kind folder or ``locks``, as if it were a damaged cache. Now it stops
    before any compute and names the file; everything there stays as it was."""
    home = tmp_path / "home"
    held = _a_folder_of_other_files(home, name)
    with pytest.raises(StoreError, match=rf"{name} \(.*\) is where the cache needs its folder "):
        oodsim.run(small_digits(1), cache=home, progress=False)
    assert sorted(p.name for p in home.iterdir()) == sorted({"notes.txt", name})
    assert {p.name: p.read_bytes() for p in home.iterdir() if p.is_file()} == held
    if name == "outputs":  # the link stays, and nothing was written where it points
        assert (home / name).is_symlink() and not list((tmp_path / "elsewhere").iterdir())


def test_the_command_line_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    held = _a_folder_of_other_files(home, "checkpoint")
    spec = digits_toml(tmp_path / "spec.toml", 2)
    line = one_error_line(capsys, ["run", str(spec), "--cache", str(home), "--workers", "1"])
    assert "it may be yours" in line and f"--cache {home / 'oodsim-cache'}" in line, line
    assert {p.name: p.read_bytes() for p in home.iterdir()} == held


def test_the_store_moves_only_its_own_entries_in_a_folder_of_other_files(tmp_path: Path) -> None:
    """In a root oodsim did not make, a key-prefix folder's name may be a file of the user's
    too (seen by no plan before compute): a read stops there; an entry folder is the store's
    own, and a damaged one is still moved aside. In oodsim's own cache, both are moved."""
    key = "ab" * 32
    home = tmp_path / "home"
    (home / "checkpoint").mkdir(parents=True)
    (home / "checkpoint" / "ab").write_text("mine")
    with pytest.raises(StoreError, match=r"it may be yours"):
        Store(home).has("checkpoint", key)
    assert (home / "checkpoint" / "ab").read_text() == "mine"
    (home / "checkpoint" / "ab").unlink()
    (home / "checkpoint" / "ab").mkdir()
    (home / "checkpoint" / "ab" / key).write_text("a damaged entry")
    with pytest.warns(CorruptEntryWarning):
        assert not Store(home).has("checkpoint", key)
    assert not (home / "checkpoint" / "ab" / key).exists()
    cache = tmp_path / "cache"
    Store(cache).ensure_writable()  # a new folder: marked as oodsim's
    (cache / "checkpoint").mkdir()
    (cache / "checkpoint" / "ab").write_text("in the way")
    with pytest.warns(CorruptEntryWarning):
        assert not Store(cache).has("checkpoint", key)
    assert not (cache / "checkpoint" / "ab").exists()


@pytest.mark.parametrize("older_than", ["-1", "nan", "inf"])
def test_gc_refuses_an_age_that_is_not_a_number_of_seconds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], older_than: str
) -> None:
    (tmp_path / "cache").mkdir()
    line = one_error_line(
        capsys, ["cache", "gc", "--cache", str(tmp_path / "cache"), "--older-than", older_than]
    )
    assert "--older-than" in line and "finite number of seconds >= 0" in line, line


@pytest.mark.parametrize("target", ["folder", "below-a-file", "proc"])
def test_class_table_output_is_checked_before_wordnet_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    (tmp_path / "notes.txt").write_text("x")
    out = {
        "folder": tmp_path,
        "below-a-file": tmp_path / "notes.txt" / "classes.csv",
        "proc": Path("/proc/classes.csv"),
    }[target]
    missing_wordnet = str(tmp_path / "no-wordnet")  # read after the check: never reached
    line = one_error_line(
        capsys, ["imagenet21k-classes", "--out", str(out), "--wordnet-root", missing_wordnet]
    )
    assert line.startswith(f"oodsim: error: cannot write the class table to {out}"), line
    assert (tmp_path / "notes.txt").read_text() == "x"
