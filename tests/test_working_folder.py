"""Runs start from any folder: a folder named ``oodsim`` in the working folder (the clone of
the project, run from the folder that holds it; or anything else of that name) never shadows
the installed package in the local cluster's fork server and workers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import digits_toml

#: the installed ``oodsim`` command, as pip writes it: a script whose own folder, not the
#: working folder, is first on ``sys.path``
CONSOLE_SCRIPT = """import sys
from oodsim.cli import main
if __name__ == "__main__":
    sys.exit(main())
"""


def _clone_like(folder: Path) -> None:
    """What a clone of the project holds at its top: no ``__init__.py``, a ``specs`` folder."""
    (folder / "oodsim" / "specs").mkdir(parents=True)
    (folder / "oodsim" / "specs" / "digits.toml").write_text("name = 'digits'\n")
    (folder / "oodsim" / "README.md").write_text("a clone\n")


def _unrelated(folder: Path) -> None:
    (folder / "oodsim").mkdir()
    (folder / "oodsim" / "notes.txt").write_text("nothing to do with the package\n")


@pytest.mark.parametrize("layout", [_clone_like, _unrelated], ids=["clone", "unrelated"])
def test_a_run_from_a_folder_holding_an_oodsim_folder_uses_the_installed_package(
    tmp_path: Path, layout
) -> None:
    layout(tmp_path)
    (tmp_path / "bin").mkdir()
    command = tmp_path / "bin" / "oodsim"
    command.write_text(CONSOLE_SCRIPT)
    spec = digits_toml(tmp_path / "spec.toml", 2)
    out = ["--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "r.zarr"), "--quiet"]
    done = subprocess.run(
        [sys.executable, str(command), "run", str(spec), "--workers", "2", *out],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ModuleNotFoundError" not in done.stderr and "Traceback" not in done.stderr
    assert (tmp_path / "r.zarr").is_dir()
