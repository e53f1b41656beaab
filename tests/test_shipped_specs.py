"""The specs shipped in the package: read by name from any folder (``oodsim run digits``,
``oodsim.load("digits")``), listed with their descriptions (``oodsim specs``) and copied into
a folder to edit (``oodsim specs copy``); the wheel holds them."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import oodsim
from oodsim.cli import main as cli_main
from oodsim.errors import SpecFileNotFound, UnknownNameError
from oodsim.protocols import (
    BUILTINS,
    DEFAULT_PROTOCOL,
    SPEC_READERS,
    bind,
    get_protocol,
    spec_reader,
)
from oodsim.specs import shipped
from tests.conftest import ROOT
from tests.readme_sample import copy_checkout

NAMES = sorted(path.stem for path in (ROOT / "specs").glob("*.toml"))


def test_the_shipped_specs_are_the_checkouts_specs_folder() -> None:
    """One copy of each spec in git: the package's examples are a link to specs/."""
    assert shipped.names() == NAMES and "digits" in NAMES
    assert shipped.folder().resolve() == (ROOT / "specs").resolve()


@pytest.mark.parametrize("name", NAMES)
def test_a_shipped_spec_loads_by_name_from_any_folder_without_a_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """By name it is the spec of the file, with no ``source``: its run finds the cache from
    the working folder, like a spec built in Python; by path, ``source`` is the file."""
    monkeypatch.chdir(tmp_path)
    by_name, by_path = oodsim.load(name), oodsim.load(ROOT / "specs" / f"{name}.toml")
    assert by_name == by_path and by_name.key == by_path.key
    assert by_name.source is None and by_path.source == str(ROOT / "specs" / f"{name}.toml")
    assert bind(name).spec == by_name


def test_each_built_in_reader_reads_a_spec_as_its_protocol_does() -> None:
    """A spec is read by its protocol's reader alone (``SPEC_READERS``: no engine, no torch
    for an open set spec); that reader builds what the protocol's ``from_data`` builds."""
    for name in NAMES:
        data = tomllib.loads(shipped.path(name).read_text())
        protocol = data.pop("protocol", DEFAULT_PROTOCOL)
        by_reader = spec_reader(protocol)(dict(data), shipped.folder())
        assert by_reader == get_protocol(protocol).from_data(dict(data), shipped.folder()), name
    assert set(SPEC_READERS) == set(BUILTINS)


def test_a_file_of_that_name_in_the_working_folder_comes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "specs" / "digits.toml").read_text().replace("n = 50", "n = 3")
    (tmp_path / "digits").write_text(text)
    spec = oodsim.load("digits")
    assert spec.seeds.n == 3 and spec.source == str(tmp_path / "digits")
    (tmp_path / "digits").unlink()
    (tmp_path / "digits").mkdir()  # a folder of that name is no spec file: the shipped spec
    assert oodsim.load("digits").seeds.n == 50


def test_a_name_that_is_no_file_nor_shipped_spec_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecFileNotFound) as caught:
        oodsim.load("digts")
    assert str(caught.value) == (
        f"no such file: digts (looked in {tmp_path} and the shipped specs: "
        f"{', '.join(NAMES)}). Did you mean 'digits'?"
    )
    assert isinstance(caught.value, FileNotFoundError)
    with pytest.raises(SpecFileNotFound) as caught:  # a path is a path: no shipped spec
        oodsim.load("specs/digits.toml")
    assert str(caught.value) == (
        f"no such file: specs/digits.toml (looked in {tmp_path / 'specs'}). 'digits' names a "
        "shipped spec: give the name alone to read it"
    )


def test_each_shipped_spec_opens_with_a_one_line_description() -> None:
    for name in NAMES:
        description = shipped.describe(shipped.path(name).read_text())
        assert 20 <= len(description) <= 100 and "\n" not in description, name
    assert shipped.describe("# Digits, small.\nname = 'x'\n") == "Digits, small"
    assert shipped.describe("name = 'x'\n") == ""


def test_oodsim_specs_lists_every_shipped_spec_with_its_description(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_main(["specs"]) == 0
    out = capsys.readouterr().out.splitlines()
    width = max(map(len, NAMES))
    described = {name: shipped.describe(shipped.path(name).read_text()) for name in NAMES}
    assert out[: len(NAMES)] == [f"{n:{width}}  {described[n]}" for n in NAMES]
    assert "oodsim specs copy" in out[-1] and "oodsim run digits" in out[-1]


def test_oodsim_specs_copy_copies_them_to_edit_and_never_overwrites_an_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli_main(["specs", "copy"]) == 0  # all of them, into ./specs
    assert sorted(p.name for p in (tmp_path / "specs").iterdir()) == [f"{n}.toml" for n in NAMES]
    assert (tmp_path / "specs" / "digits.toml").read_bytes() == shipped.path("digits").read_bytes()
    assert "run one: oodsim run specs/digits.toml" in capsys.readouterr().out
    assert oodsim.load("specs/digits.toml") == oodsim.load("digits")

    edited = (tmp_path / "specs" / "digits.toml").read_text().replace("n = 50", "n = 7")
    (tmp_path / "specs" / "digits.toml").write_text(edited)
    (tmp_path / "specs" / "fashion_mnist.toml").unlink()
    assert cli_main(["specs", "copy"]) == 2  # refused: nothing is copied
    err = capsys.readouterr().err.strip()
    assert err == (
        "oodsim: error: specs/digits.toml: already there and different from the shipped spec; "
        "nothing was copied (pass --overwrite to replace)"
    )
    assert (tmp_path / "specs" / "digits.toml").read_text() == edited
    assert not (tmp_path / "specs" / "fashion_mnist.toml").exists()

    assert cli_main(["specs", "copy", "fashion_mnist", "--to", "mine"]) == 0  # some, elsewhere
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["fashion_mnist.toml"]
    assert cli_main(["specs", "copy", "digits", "--overwrite"]) == 0
    assert (tmp_path / "specs" / "digits.toml").read_bytes() == shipped.path("digits").read_bytes()
    capsys.readouterr()
    assert cli_main(["specs", "copy", "digits"]) == 0  # the same file: nothing to do
    assert capsys.readouterr().out.startswith("already in specs, unchanged: digits.toml")


def test_oodsim_specs_copy_of_an_unknown_name_suggests_one(tmp_path: Path) -> None:
    from oodsim.cli.main import parser
    from oodsim.cli.specs import cmd_copy

    args = parser().parse_args(["specs", "copy", "fashion", "--to", str(tmp_path / "s")])
    with pytest.raises(UnknownNameError, match="'fashion' .*Did you mean 'fashion_mnist'"):
        cmd_copy(args)
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_the_wheel_holds_the_shipped_specs(tmp_path: Path) -> None:
    """``pip install`` (not editable) installs a wheel: built from a clone, it holds each spec
    of specs/ as oodsim/examples/<name>.toml, the same bytes (the link is followed)."""
    clone = copy_checkout(tmp_path / "clone")  # what git holds: the link, not a copy
    assert os.readlink(clone / "oodsim" / "examples") == "../specs"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(tmp_path / "dist"), str(clone)],
        check=True,
        capture_output=True,
        timeout=300,
        cwd=tmp_path,
    )
    (wheel,) = (tmp_path / "dist").glob("oodsim-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        held = {n: archive.read(n) for n in archive.namelist() if n.startswith("oodsim/examples/")}
    assert held == {f"oodsim/examples/{n}.toml": shipped.path(n).read_bytes() for n in NAMES}
