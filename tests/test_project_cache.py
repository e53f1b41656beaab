"""One cache per project: the default store and results folder follow the spec's project, not
the current folder (docs/caching.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
from pathlib import Path

import pytest

from oodsim.store import (
    PROJECT_DEFAULTS_ENV,
    Store,
    default_results,
    default_root,
    project_folder,
    user_cache,
)
from tests.conftest import digits_toml


def test_the_store_is_the_spec_projects_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OODSIM_CACHE", raising=False)
    monkeypatch.delenv("OODSIM_RESULTS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    project = tmp_path / "project"
    (project / "specs" / "deep").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert project_folder(project / "specs" / "deep") == project
    assert default_root(project / "specs" / "deep") == project / "cache"
    assert default_results("digits", project / "specs") == project / "results" / "digits.zarr"
    # A folder whose cache/ oodsim made is a project too (no pyproject.toml needed).
    loose = tmp_path / "loose"
    (loose / "sub").mkdir(parents=True)
    Store(loose / "cache").ensure_writable()
    assert default_root(loose / "sub") == loose / "cache"
    # A cache/ folder that oodsim did not make does not count; outside any project the
    # user's cache folder is used.
    other = tmp_path / "other"
    (other / "cache").mkdir(parents=True)
    (other / "cache" / ".gitignore").write_text("*.log\n")
    assert project_folder(other) is None
    assert default_root(other) == user_cache() == tmp_path / "xdg" / "oodsim"
    monkeypatch.setenv("OODSIM_CACHE", str(tmp_path / "env"))
    assert default_root(project) == tmp_path / "env"  # the environment wins
    monkeypatch.setenv("OODSIM_RESULTS", str(tmp_path / "out"))
    assert default_results("digits", project) == tmp_path / "out" / "digits.zarr"


def test_the_same_spec_from_another_folder_reuses_the_cache(tmp_path: Path) -> None:
    """``oodsim run`` from the project root, then from a subfolder: the second run says which
    cache it uses first, and computes nothing."""
    project = tmp_path / "project"
    (project / "specs").mkdir(parents=True)
    (project / "notebooks").mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    digits_toml(project / "specs" / "tiny.toml", 1)
    env = {k: v for k, v in os.environ.items() if k not in PROJECT_DEFAULTS_ENV}
    oodsim = str(Path(sysconfig.get_path("scripts")) / "oodsim")
    runs = []
    for folder, path in (
        (project, "specs/tiny.toml"),
        (project / "notebooks", "../specs/tiny.toml"),
    ):
        done = subprocess.run(
            [oodsim, "run", path, "--workers", "1", "--overwrite"],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        runs.append(done)
    first_line = runs[1].stdout.splitlines()[0]
    assert first_line.startswith("oodsim: ") and f"cache {project / 'cache'} (" in first_line
    assert "entries)" in first_line and f"results to {project / 'results'}" in first_line
    store = json.loads(runs[1].stdout.rsplit("(store ", 1)[1].split(": ", 1)[1].split(");")[0])
    assert store["computed"] == {}
    assert (project / "results" / "digits.zarr").is_dir()
    assert not (project / "notebooks" / "cache").exists()
    assert not (project / "notebooks" / "results").exists()
