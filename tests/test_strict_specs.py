"""Strict specs (issue 11, part 2): no type coercion, finite floats, detector parameters checked
at construction, distinct int64 seeds generated lazily, spec names that are safe file names.

Every refusal is a :class:`SpecError` whose message names the field path, the value (its
``repr``) and the expected type, for all three protocols (one strict converter) and for specs
built in Python. Spec construction only: nothing here trains or starts a cluster.
"""

from __future__ import annotations

import itertools
import math
import pickle
import tomllib
import tracemalloc
from pathlib import Path
from typing import Any

import attrs
import pytest
import tblib.pickling_support

import oodsim
from oodsim.cli import main as cli_main
from oodsim.engine import window
from oodsim.errors import SpecError, UnknownNameError
from oodsim.protocols.imagenet_o import PROTOCOL as IMAGENET_O_PROTOCOL
from oodsim.protocols.severity.reading import severity_spec_from_dict
from oodsim.seeds import SeedRange
from oodsim.specs import (
    DatasetSpec,
    DetectorSpec,
    ExperimentSpec,
    SeedsSpec,
    StoppingSpec,
    TrainingSpec,
    spec_from_dict,
)
from oodsim.specs.toml_lines import path_parts
from tests.conftest import ROOT

BASE = (ROOT / "specs" / "digits.toml").read_text()
SEVERITY = (ROOT / "specs" / "severity_fashion_mnist.toml").read_text()
METRICS_LINE = 'metrics = ["auroc", "aupr_in", "aupr_out", "fpr95", "accuracy"]'
IMAGENET_O = """protocol = "imagenet_o"
id_root = "val"
ood_root = "o"
models = ["timm:test_resnet"]
"""


def assert_names(error: SpecError, field: str, value: Any, expected: str) -> None:
    """The message is ``<field>: <repr(value)> is not allowed; expected <expected>...``, after
    ``<file>:<line>: `` for a spec file: the line that holds the field (or the bad name)."""
    assert error.field == field, str(error)
    prefix = f"{error.location}: " if error.location else ""
    assert str(error).startswith(
        f"{prefix}{field}: {value!r} is not allowed; expected {expected}"
    ), str(error)
    if error.location:
        file, _, line = error.location.rpartition(":")
        written = Path(file).read_text().splitlines()[int(line) - 1]
        key = str(path_parts(field)[-1])
        assert key in written or str(value) in written, (str(error), written)


def load_text(tmp_path: Path, text: str) -> Any:
    """A spec file of any protocol through the front door, ``oodsim.load``."""
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return oodsim.load(path)


def replaced(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def top(text: str, line: str) -> str:
    """``line`` as a top-level key (before the first table)."""
    return line + "\n" + text


# --------------------------------------------------------------------------- the issue's rows

ISSUE_ROWS = [
    # (id, spec text, field, value, expected)
    ("n-string", replaced(BASE, "n = 50", 'n = "5"'), "seeds.n", "5", "an integer"),
    ("n-float", replaced(BASE, "n = 50", "n = 2.7"), "seeds.n", 2.7, "an integer"),
    ("n-bool", replaced(BASE, "n = 50", "n = true"), "seeds.n", True, "an integer"),
    (
        "augment-enabled-string",
        replaced(BASE, "[training.augment]", '[training.augment]\nenabled = "false"'),
        "training.augment.enabled",
        "false",
        "true or false",
    ),
    (
        "download-string",
        replaced(BASE, 'name = "digits"\n\n[split]', 'name = "digits"\ndownload = "no"\n[split]'),
        "dataset.download",
        "no",
        "true or false",
    ),
    ("lr-inf", replaced(BASE, "lr = 0.05", "lr = inf"), "training.lr", math.inf, "a finite number"),
    (
        "temperature-nan",
        replaced(
            BASE, '"msp", "temperature"', '"msp", { name = "temperature", temperature = nan }'
        ),
        "detectors[1].temperature",
        math.nan,
        "a finite number",
    ),
    (
        "detector-parameter-type",
        replaced(BASE, '"msp", "temperature"', '"msp", { name = "knn", k = 2.5 }'),
        "detectors[1].k",
        2.5,
        "an integer",
    ),
    (
        "name-outside-results",
        replaced(BASE, 'name = "digits"', 'name = "../../x"'),
        "name",
        "../../x",
        "a file name",
    ),
    (
        "duplicate-seeds",
        replaced(BASE, "n = 50", "values = [3, 1, 3]"),
        "seeds.values",
        [3],
        "distinct seeds",
    ),
    (  # the permutation test's p never gets below 1e-4: every decided seed was excluded
        "degenerate-alpha-unreachable",
        BASE + "\n[degenerate]\nalpha = 5e-5\n",
        "degenerate.alpha",
        5e-5,
        "a number in (0.0001, 1)",
    ),
    (  # accepted, then the rule failed after a batch had trained
        "ranking-alpha-zero",
        BASE + '\n[stopping]\nrule = "ranking"\nalpha = 0.0\n',
        "stopping.alpha",
        0.0,
        "a number in (0, 1)",
    ),
    (  # an infinite angle: reported as "training diverged: loss became nan in epoch 0"
        "rotation-overflows",
        replaced(BASE, "rotation = 10.0", "rotation = 1e300"),
        "training.augment.rotation",
        1e300,
        "degrees in [0, 180]",
    ),
    (  # ignored by the builder, yet a key of its own: an identical model trained again
        "width-of-a-fixed-architecture",
        replaced(BASE, 'arch = "small_cnn"', 'arch = "resnet18"'),
        "model.width",
        16,
        "no width for arch 'resnet18'",
    ),
    (  # it ran the default 50 seeds
        "no-seeds",
        replaced(BASE, "n = 50", "values = []"),
        "seeds.values",
        [],
        "a list of at least one seed",
    ),
    (  # values silently replaced n
        "values-and-n",
        replaced(BASE, "n = 50", "n = 5\nvalues = [1]"),
        "seeds.n",
        5,
        "no n beside values",
    ),
    (  # ... and start
        "values-and-start",
        replaced(BASE, "n = 50", "start = 7\nvalues = [1]"),
        "seeds.start",
        7,
        "no start beside values",
    ),
]


@pytest.mark.parametrize(
    ("text", "field", "value", "expected"),
    [row[1:] for row in ISSUE_ROWS],
    ids=[row[0] for row in ISSUE_ROWS],
)
def test_the_issue_scenarios_are_refused_naming_path_value_and_type(
    tmp_path: Path, text: str, field: str, value: Any, expected: str
) -> None:
    with pytest.raises(SpecError) as caught:
        load_text(tmp_path, text)
    assert_names(caught.value, field, value, expected)


def test_unknown_detector_parameter_is_refused_at_construction(tmp_path: Path) -> None:
    text = replaced(BASE, '"msp", "temperature"', '"msp", { name = "energy", temprature = 2.0 }')
    with pytest.raises(UnknownNameError) as caught:
        load_text(tmp_path, text)
    assert_names(caught.value, "detector 'energy' parameter", "temprature", "one of 'temperature'")
    assert "Did you mean 'temperature'?" in str(caught.value)


def test_a_bad_spec_name_writes_nothing_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``oodsim run`` without ``--out`` writes ``results/<name>.zarr``: a name that climbs out
    is refused before any compute, and nothing is written (neither results nor cache)."""
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    (work / "spec.toml").write_text(replaced(BASE, 'name = "digits"', 'name = "../../x"'))
    monkeypatch.chdir(work)
    code = cli_main(["run", "spec.toml", "--cache", "cache", "--workers", "1", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "name: '../../x' is not allowed" in err[0]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "b", "spec.toml"]


def test_a_billion_seeds_with_a_stopping_rule_start_in_constant_memory() -> None:
    data = {
        "dataset": {"name": "digits"},
        "seeds": {"n": 10**9},
        "stopping": {"rule": "ci_width"},
    }
    spec_from_dict(data)  # imports and registries load outside the measurement
    tracemalloc.start()
    try:
        spec = spec_from_dict(data)
        seeds = spec.seeds.all()[: spec.max_seeds]
        first = list(itertools.islice(seeds, 5))
        batch = seeds[10:20]
        batches = window.batches(seeds, lambda: spec.stopping.batch_size)
        ahead = [next(batches), next(batches)]  # what the engine submits: this batch, the next
        key = spec.key
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert first == [0, 1, 2, 3, 4] and batch == tuple(range(10, 20))
    assert isinstance(seeds, SeedRange) and len(seeds) == spec.max_seeds == 10**9
    assert seeds[-1] == 10**9 - 1 and len(key) == 64
    assert ahead == [tuple(range(10)), tuple(range(10, 20))]
    assert peak < 20 * 2**20  # a list of 10**9 seeds takes more than 8 GB


# --------------------------------------------------------------------------- adversarial cases

ADVERSARIAL = [
    # (id, build, error type, field, value, expected)
    (
        "nested-list-item",
        lambda p: load_text(
            p,
            replaced(
                BASE, "n_known = 6\n", 'n_known = 6\nknown_classes = [[0, 1, "2", 3, 4, 5]]\n'
            ),
        ),
        SpecError,
        "split.known_classes[0][2]",
        "2",
        "an integer",
    ),
    (
        "string-for-a-list",
        lambda p: load_text(p, replaced(BASE, METRICS_LINE, 'metrics = "auroc"')),
        SpecError,
        "metrics",
        "auroc",
        "a list of strings",
    ),
    (
        "float-for-an-int",
        lambda p: load_text(p, replaced(BASE, "max_epochs = 30", "max_epochs = 30.0")),
        SpecError,
        "training.max_epochs",
        30.0,
        "an integer",
    ),
    (
        "bool-for-a-float",
        lambda p: load_text(p, replaced(BASE, "lr = 0.05", "lr = true")),
        SpecError,
        "training.lr",
        True,
        "a finite number",
    ),
    (
        "int-for-a-bool",
        lambda p: load_text(
            p, replaced(BASE, "[training.augment]", "[training.augment]\nenabled = 1")
        ),
        SpecError,
        "training.augment.enabled",
        1,
        "true or false",
    ),
    (
        "string-in-a-float-pair",
        lambda p: load_text(p, replaced(BASE, "scale = [0.9, 1.1]", 'scale = [0.9, "1.1"]')),
        SpecError,
        "training.augment.scale[1]",
        "1.1",
        "a finite number",
    ),
    (
        "huge-int",
        lambda p: spec_from_dict({"dataset": {"name": "digits"}, "seeds": {"n": 2**64}}),
        SpecError,
        "seeds.n",
        2**64,
        "an integer that fits in 64 bits",
    ),
    (
        "seeds-past-int64",
        lambda p: load_text(p, replaced(BASE, "n = 50", "n = 9223372036854775807\nstart = 2")),
        SpecError,
        "seeds.n",
        2**63 - 1,
        "at most 9223372036854775806 seeds from start = 2",
    ),
    (
        "negative-seed",
        lambda p: load_text(p, replaced(BASE, "n = 50", "values = [1, -2]")),
        SpecError,
        "seeds.values[1]",
        -2,
        "a seed >= 0",
    ),
    (
        "negative-start",
        lambda p: load_text(p, replaced(BASE, "n = 50", "n = 5\nstart = -1")),
        SpecError,
        "seeds.start",
        -1,
        "a number >= 0",
    ),
    (
        "bool-pinned-stream",
        lambda p: load_text(p, replaced(BASE, "n = 50", "n = 5\npinned = { class_split = true }")),
        SpecError,
        "seeds.pinned.class_split",
        True,
        "an integer in 0 .. 2**63 - 1",
    ),
    (
        "nan-in-a-parameter-grid",
        lambda p: load_text(
            p,
            replaced(
                BASE, '"msp", "temperature"', '"msp", { name = "odin", temperature = [1.0, nan] }'
            ),
        ),
        SpecError,
        "detectors[1].temperature[1]",
        math.nan,
        "a finite number",
    ),
    (
        "nested-parameter-grid",
        lambda p: load_text(
            p,
            replaced(
                BASE, '"msp", "temperature"', '"msp", { name = "odin", epsilon = [0.0, [0.1]] }'
            ),
        ),
        SpecError,
        "detectors[1].epsilon[1]",
        [0.1],
        "one value (a grid is a flat list)",
    ),
    (
        "string-parameter-for-a-number",
        lambda p: spec_from_dict(
            {"dataset": {"name": "digits"}, "detectors": [{"name": "energy", "temperature": "1"}]}
        ),
        SpecError,
        "detectors[0].temperature",
        "1",
        "a finite number",
    ),
    (
        "int-for-a-level-label",
        lambda p: load_text(p, BASE + "\n[stopping]\nseverity = 5\n"),
        SpecError,
        "stopping.severity",
        5,
        "a string",
    ),
    (
        "nested-ood-dataset",
        lambda p: load_text(
            p,
            top(
                BASE,
                'ood = ["held_out", { kind = "dataset", '
                'dataset = { name = "fashion_mnist", max_per_class = "50" } }]',
            ),
        ),
        SpecError,
        "ood[1].dataset.max_per_class",
        "50",
        "an integer",
    ),
    (
        "number-for-a-table",
        lambda p: spec_from_dict({"dataset": {"name": "digits"}, "seeds": 5}),
        SpecError,
        "seeds",
        5,
        "a seeds table",
    ),
    (
        "severity-string-for-an-int",
        lambda p: load_text(p, replaced(SEVERITY, "\nn_est = 60", '\nn_est = "60"')),
        SpecError,
        "n_est",
        "60",
        "an integer",
    ),
    (
        "severity-ood-source",
        lambda p: load_text(p, replaced(SEVERITY, "n_samples = 100", 'n_samples = "100"')),
        SpecError,
        "ood[2].n_samples",
        "100",
        "an integer",
    ),
    (
        "severity-nested-experiment",
        lambda p: load_text(p, replaced(SEVERITY, "lr = 0.05", "lr = nan")),
        SpecError,
        "models[0].experiment.training.lr",
        math.nan,
        "a finite number",
    ),
    (
        "severity-zoo-model-bool",
        lambda p: severity_spec_from_dict(
            {
                "models": [{"name": "timm:test_resnet", "pretrained": "no"}],
                "id": {"kind": "dataset", "name": "digits"},
                "ood": [{"kind": "uniform_noise"}],
            }
        ),
        SpecError,
        "models[0].pretrained",
        "no",
        "true or false",
    ),
    (
        "severity-suite-source",
        lambda p: severity_spec_from_dict(
            {
                "models": ["timm:test_resnet"],
                "datasets": [
                    {
                        "label": "a",
                        "id": {"kind": "dataset", "name": "digits"},
                        "ood": [{"kind": "gaussian_noise", "std": math.inf}],
                    }
                ],
            }
        ),
        SpecError,
        "datasets[0].ood[0].std",
        math.inf,
        "a finite number",
    ),
    (
        "severity-bad-name",
        lambda p: load_text(
            p, replaced(SEVERITY, 'name = "severity_fashion_mnist"', 'name = "a/b"')
        ),
        SpecError,
        "name",
        "a/b",
        "a file name",
    ),
    (
        "imagenet-o-string-for-a-bool",
        lambda p: load_text(p, IMAGENET_O + 'bootstrap = "yes"\n'),
        SpecError,
        "bootstrap",
        "yes",
        "true or false",
    ),
    (
        "imagenet-o-float-for-an-int",
        lambda p: load_text(p, IMAGENET_O + "batch_size = 2.0\n"),
        SpecError,
        "batch_size",
        2.0,
        "an integer",
    ),
    (
        "imagenet-o-seeds",
        lambda p: imagenet_o_data(seeds={"n": True}),
        SpecError,
        "seeds.n",
        True,
        "an integer",
    ),
    (
        "python-bool-for-an-int",
        lambda p: SeedsSpec(n=True),
        SpecError,
        "seeds.n",
        True,
        "an integer",
    ),
    (
        "python-evolve-nan",
        lambda p: attrs.evolve(TrainingSpec(), lr=math.nan),
        SpecError,
        "training.lr",
        math.nan,
        "a finite number",
    ),
    (
        "python-detector-parameter",
        lambda p: DetectorSpec(name="temperature", params={"temperature": math.inf}),
        SpecError,
        "detector 'temperature' parameter temperature",
        math.inf,
        "a finite number",
    ),
    (
        "python-string-for-a-list",
        lambda p: ExperimentSpec(dataset=DatasetSpec(name="digits"), detectors="msp"),
        SpecError,
        "detectors",
        "msp",
        "a list of detectors",
    ),
    (
        "python-duplicate-values",
        lambda p: SeedsSpec(values=(5, 6, 5, 6)),
        SpecError,
        "seeds.values",
        [5, 6],
        "distinct seeds",
    ),
]


def imagenet_o_data(**changes: Any) -> Any:
    """The small ImageNet-O spec with ``changes``, built from data by its protocol."""
    data = tomllib.loads(IMAGENET_O)
    data.pop("protocol")
    return IMAGENET_O_PROTOCOL.from_data({**data, **changes}, None)


@pytest.mark.parametrize(
    ("build", "error", "field", "value", "expected"),
    [row[1:] for row in ADVERSARIAL],
    ids=[row[0] for row in ADVERSARIAL],
)
def test_adversarial_specs_are_refused_naming_path_value_and_type(
    tmp_path: Path, build: Any, error: type, field: str, value: Any, expected: str
) -> None:
    with pytest.raises(error) as caught:
        build(tmp_path)
    assert_names(caught.value, field, value, expected)


@pytest.mark.parametrize(
    "name", ["", ".hidden", "a/b", "..", "a\\b", "x" * 101, "tab\tname", "/abs", "é"]
)
def test_names_that_are_not_safe_file_names_are_refused(name: str) -> None:
    with pytest.raises(SpecError) as caught:
        ExperimentSpec(name=name, dataset=DatasetSpec(name="digits"))
    assert_names(caught.value, "name", name, "a file name of 1 to 100 letters")


@pytest.mark.parametrize("name", ["digits", "run-1.v2", "A_b", "x" * 100, "_x"])
def test_safe_names_are_kept(name: str) -> None:
    assert ExperimentSpec(name=name, dataset=DatasetSpec(name="digits")).name == name


def test_an_int_where_a_float_is_expected_is_that_float_with_the_same_key() -> None:
    by_int = TrainingSpec(lr=1, augment=attrs.evolve(TrainingSpec().augment, scale=[1, 2]))
    by_float = TrainingSpec(lr=1.0, augment=attrs.evolve(TrainingSpec().augment, scale=(1.0, 2.0)))
    assert type(by_int.lr) is float and by_int.augment.scale == (1.0, 2.0)
    assert by_int == by_float and by_int.key == by_float.key
    from_toml = spec_from_dict({"dataset": {"name": "digits"}, "training": {"lr": 1}})
    assert from_toml.training.key == TrainingSpec(lr=1.0).key


def test_seed_values_keep_their_order_and_a_range_compares_like_its_tuple() -> None:
    assert SeedsSpec(values=[7, 2, 9]).all() == (7, 2, 9)
    assert SeedsSpec(n=3, start=4).all() == (4, 5, 6) and SeedsSpec(n=3).count == 3
    assert SeedsSpec(n=2**63 - 1).all()[-1] == 2**63 - 2  # the largest int64 range is fine
    with pytest.raises(SpecError, match=r"stopping\.max_seeds: 4 .*at most the 3 seeds"):
        ExperimentSpec(
            dataset=DatasetSpec(name="digits"),
            seeds=SeedsSpec(n=3),
            stopping=StoppingSpec(rule="ci_width", max_seeds=4),
        )


def test_a_spec_file_with_a_byte_order_mark_reads_as_without(tmp_path: Path) -> None:
    """Some Windows editors save UTF-8 with a byte order mark: it was refused as
    "Invalid statement (at line 1, column 1)"."""
    text = (ROOT / "specs" / "digits.toml").read_text()
    marked = tmp_path / "marked.toml"
    marked.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert oodsim.load(marked) == oodsim.load(ROOT / "specs" / "digits.toml")


# --------------------------------------------------------------------------- every problem at once


def problems(error: SpecError) -> list[tuple[str, str]]:
    """(location, field) of each problem one error reports, in its order."""
    return [(problem.location, problem.field) for problem in error.problems]


def line(text: str, written: str) -> int:
    """The line of ``text`` that holds ``written`` (only one may)."""
    found = [i for i, row in enumerate(text.splitlines(), 1) if written in row]
    assert len(found) == 1, (written, found)
    return found[0]


def test_every_problem_of_a_spec_file_is_one_error_naming_each_line(tmp_path: Path) -> None:
    """Before, a file with several mistakes was refused for the first one alone (the next run
    for the next), and the message named neither the file nor the line: now every bad value
    and unknown key, across tables and within one table, in the order of the file."""
    text = BASE
    for old, new in [
        ('name = "digits"\n\n#', 'name = "../x"\n\n#'),  # a top-level value
        ('"msp", "temperature"', '"msp", "temprature"'),  # an item of a list
        ("lr = 0.05", 'lr = "fast"'),  # a value in a table ...
        ("max_epochs = 30", "max_epoch = 30"),  # ... an unknown key in it ...
        ("patience = 4", "patience = -1"),  # ... and a second bad value of that table
        ("n = 50", "n = 0"),  # another table
    ]:
        text = replaced(text, old, new)
    with pytest.raises(SpecError) as caught:
        load_text(tmp_path, text)
    file = str(tmp_path / "spec.toml")
    assert problems(caught.value) == [
        (f"{file}:{line(text, '../x')}", "name"),
        (f"{file}:{line(text, 'temprature')}", "detector"),
        (f"{file}:{line(text, 'lr = ')}", "training.lr"),
        (f"{file}:{line(text, 'max_epoch = ')}", "training.max_epoch"),
        (f"{file}:{line(text, 'patience = ')}", "training.patience"),
        (f"{file}:{line(text, 'n = 0')}", "seeds.n"),
    ]
    message = str(caught.value).splitlines()
    assert message[0] == f"6 problems in {file}:"
    assert message[4] == (
        f"  {file}:{line(text, 'max_epoch = ')}: training.max_epoch: 'max_epoch' is not allowed; "
        "expected one of 'augment', 'batch_size', 'lr', 'max_epochs', 'momentum', 'patience', "
        "'weight_decay'. Did you mean 'max_epochs'?"
    )
    assert [row.strip() for row in message[1:]] == [str(p) for p in caught.value.problems]


@pytest.mark.parametrize("protocol", ["severity", "imagenet_o"])
def test_every_problem_of_the_other_protocols_spec_files_too(tmp_path: Path, protocol: str):
    if protocol == "severity":
        text = replaced(SEVERITY, "\nn_est = 60", '\nn_est = "60"')
        text = replaced(text, "n_samples = 100", 'n_samples = "100"\ncolour = 1')
        expected = [('n_est = "', "n_est"), ('n_samples = "', "ood[2].n_samples")]
    else:
        text = IMAGENET_O + 'bootstrap = "yes"\nbatch_size = 2.0\ncolour = 1\n'
        expected = [("bootstrap = ", "bootstrap"), ("batch_size = ", "batch_size")]
    expected.append(("colour = ", "ood[2].colour" if protocol == "severity" else "colour"))
    with pytest.raises(SpecError) as caught:
        load_text(tmp_path, text)
    file = str(tmp_path / "spec.toml")
    assert problems(caught.value) == [(f"{file}:{line(text, w)}", f) for w, f in expected]


def test_a_table_that_cannot_be_built_hides_no_other_problem(tmp_path: Path) -> None:
    """A required table with a bad key ([dataset]) cannot be built, so neither can the spec:
    the top-level values are checked alone, and a key missing from the file names the file
    alone (it has no line)."""
    text = replaced(BASE, '[dataset]\nname = "digits"', '[dataset]\nname = "digits"\nnme = 1')
    text = 'on_failure = "retry"\n' + replaced(text, 'name = "digits"\n\n#', 'name = "../x"\n\n#')
    with pytest.raises(SpecError) as caught:
        load_text(tmp_path, text)
    file = str(tmp_path / "spec.toml")
    assert problems(caught.value) == [
        (f"{file}:{line(text, 'on_failure')}", "on_failure"),
        (f"{file}:{line(text, '../x')}", "name"),
        (f"{file}:{line(text, 'nme = ')}", "dataset.nme"),
    ]
    without_dataset = "\n".join(t for t in text.splitlines() if "nme" not in t)
    without_dataset = without_dataset.replace('[dataset]\nname = "digits"\n', "")
    with pytest.raises(SpecError) as caught:
        load_text(tmp_path, without_dataset)
    assert problems(caught.value)[0] == (file, "dataset")  # what is missing comes first


def test_a_check_across_fields_is_not_made_against_a_default_put_in_for_a_bad_key(
    tmp_path: Path,
) -> None:
    """A severity model's bad ``experiment`` table is one problem: the model is not also
    refused for having no experiment (the default the retry puts in for the bad key), nor is
    the spec for what its checks across tables would find."""
    with pytest.raises(SpecError) as caught:
        load_text(tmp_path, replaced(SEVERITY, "lr = 0.05", "lr = nan"))
    assert [field for _, field in problems(caught.value)] == ["models[0].experiment.training.lr"]
    text = replaced(BASE, "n_known = 6", 'n_known = "six"')  # the split fits digits: unchecked
    with pytest.raises(SpecError) as caught:
        load_text(tmp_path, text)
    assert [field for _, field in problems(caught.value)] == ["split.n_known"]


def test_several_problems_of_data_built_in_python_name_their_fields_alone() -> None:
    data = {"dataset": {"name": "digits"}, "training": {"lr": "x", "max_epochs": 0}, "seeds": 5}
    with pytest.raises(SpecError) as caught:
        spec_from_dict(data)
    assert problems(caught.value) == [  # in the order of the spec's fields
        ("", "seeds"),
        ("", "training.lr"),
        ("", "training.max_epochs"),
    ]
    assert str(caught.value).splitlines()[0] == "3 problems in the spec:"


def test_an_error_of_several_problems_survives_pickling(tmp_path: Path) -> None:
    """Spec errors raised on a worker travel back to the driver whole, with distributed's
    pickling of exceptions (tblib's, which carries an error's context: the converter's own
    errors, which cannot be unpickled, were in it)."""
    tblib.pickling_support.install()  # what importing distributed does, for every error class
    with pytest.raises(SpecError) as caught:
        load_text(tmp_path, replaced(replaced(BASE, "n = 50", "n = 0"), "lr = 0.05", "lr = -1.0"))
    again = pickle.loads(pickle.dumps(caught.value))
    assert type(again) is type(caught.value) and str(again) == str(caught.value)
    assert problems(again) == problems(caught.value) and len(problems(again)) == 2
