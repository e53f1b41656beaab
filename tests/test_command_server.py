"""The tests' ``python -m oodsim.cli`` processes forked from one server answer as spawned ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import command_server
from tests.conftest import ROOT

OODSIM = [sys.executable, "-m", "oodsim.cli"]


@pytest.mark.parametrize(
    "args",
    [["--version"], ["runn"], ["run", "nosuch.toml"], ["run", str(ROOT / "specs" / "digits.toml")]],
    ids=["version", "typo", "missing-file", "bad-limits"],
)
def test_a_forked_command_answers_as_a_spawned_one(args: list[str], tmp_path: Path) -> None:
    """Exit code, output and errors, from the caller's folder and environment (a malformed
    ``$OODSIM_LIMITS`` fails the last one before any compute)."""
    env = {**os.environ, "OODSIM_LIMITS": "bad"}
    options = {"capture_output": True, "text": True, "timeout": 120, "cwd": tmp_path, "env": env}
    spawned = subprocess.run([*OODSIM, *args], **options)
    forked = command_server.run([*OODSIM, *args], **options)
    assert forked.returncode == spawned.returncode
    assert (forked.stdout, forked.stderr) == (spawned.stdout, spawned.stderr)
    if args[0] == "run":
        assert spawned.returncode == 2 and "oodsim: error:" in spawned.stderr


def test_other_commands_and_options_are_spawned() -> None:
    assert isinstance(command_server.popen(["true"]), subprocess.Popen)
    assert not command_server.forked([*OODSIM, "run"], {"preexec_fn"})
    assert command_server.forked([*OODSIM, "run"], {"cwd", "env", "start_new_session"})
    done = command_server.run([sys.executable, "-c", "print(1)"], capture_output=True, text=True)
    assert done.stdout == "1\n"
