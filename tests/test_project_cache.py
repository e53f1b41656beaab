"""One cache per project: the default store and results folder follow the spec's project, not
the current folder (docs/caching.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from oodsim.store import (
    PROJECT_DEFAULTS_ENV,
    CacheRoot,
    Store,
    cache_root,
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
    first_line = runs[1].stderr.splitlines()[0]
    assert first_line.startswith("oodsim: ") and f"cache {project / 'cache'} (" in first_line
    assert f"the project of the spec file {project / 'specs' / 'tiny.toml'}; " in first_line
    assert "entries)" in first_line and f"results to {project / 'results'}" in first_line
    last_line = runs[1].stdout.splitlines()[-1]
    assert ": 0 computed, 1 reused from the cache; nothing computed." in last_line
    assert last_line.endswith(f"Results in {project / 'results' / 'digits.zarr'}")
    assert (project / "results" / "digits.zarr").is_dir()
    assert not (project / "notebooks" / "cache").exists()
    assert not (project / "notebooks" / "results").exists()


def test_a_run_finds_its_cache_from_its_spec_file_else_its_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table of docs/caching.md: a spec file's project; else (a spec built in Python, a
    shipped spec by name) the running script's project, or the working folder's for the
    command line; else the user cache. $OODSIM_CACHE wins over all."""
    monkeypatch.delenv("OODSIM_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    project, loose = tmp_path / "project", tmp_path / "loose"
    for folder in (project / "specs", project / "scripts", loose):
        folder.mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    spec_file, script = project / "specs" / "s.toml", project / "scripts" / "run.py"
    monkeypatch.chdir(loose)
    assert cache_root(spec_file, script=None) == CacheRoot(
        project / "cache", f"the project of the spec file {spec_file}"
    )
    assert cache_root(spec_file, script=loose / "x.py").location == project / "cache"
    assert cache_root(None, script=script) == CacheRoot(
        project / "cache", f"the project of the script {script}"
    )
    assert cache_root(None, script=None) == CacheRoot(
        user_cache(), "the user cache: the working folder is in no project"
    )
    monkeypatch.chdir(project / "scripts")
    assert cache_root(None, script=None).location == project / "cache"
    assert cache_root(None, script=loose / "x.py").why.startswith("the user cache")
    monkeypatch.setenv("OODSIM_CACHE", str(tmp_path / "env"))
    assert cache_root(spec_file, script=script) == CacheRoot(tmp_path / "env", "$OODSIM_CACHE")


SCRIPT = """\
import attrs
import oodsim
from oodsim.results import store_counts

if __name__ == "__main__":
    spec = oodsim.load({spec!r})
    spec = attrs.evolve(spec, seeds=attrs.evolve(spec.seeds, n=1))  # evolve keeps its file
    results = oodsim.run(spec, n_workers=1)
    print("computed", store_counts(results)["computed"])
"""


def test_the_command_line_and_a_script_elsewhere_share_one_cache(tmp_path: Path) -> None:
    """``oodsim run specs/tiny.toml`` in a project, then a script in another folder that
    loads the same file: the script's run says which cache it uses and why, and computes
    nothing (it retrained every model when the API looked for the working folder's project)."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / "specs").mkdir(parents=True)
    elsewhere.mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    spec_file = digits_toml(project / "specs" / "tiny.toml", 1)
    env = {k: v for k, v in os.environ.items() if k not in PROJECT_DEFAULTS_ENV}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    oodsim = str(Path(sysconfig.get_path("scripts")) / "oodsim")
    first = subprocess.run(
        [oodsim, "run", "specs/tiny.toml", "--workers", "1", "--quiet"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert first.returncode == 0, first.stderr
    (elsewhere / "read.py").write_text(SCRIPT.format(spec=str(spec_file)))
    done = subprocess.run(
        [sys.executable, "read.py"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "computed {}"
    opening = done.stderr.splitlines()[0]
    why = f"the project of the spec file {spec_file}"
    assert f"cache {project / 'cache'} ({why}; " in opening, opening
    assert opening.endswith("results returned, not saved (no out=)")
    assert not (tmp_path / "xdg" / "oodsim").exists() and not (elsewhere / "cache").exists()


def test_a_spec_edited_in_place_reruns_with_the_same_command(tmp_path: Path) -> None:
    """Add a detector to the spec file and run the same command: exit 0, no model trained, a
    line naming the change, and the earlier results kept and listed."""
    project = tmp_path / "project"
    (project / "specs").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    spec_file = digits_toml(project / "specs" / "tiny.toml", 1)
    env = {k: v for k, v in os.environ.items() if k not in PROJECT_DEFAULTS_ENV}
    oodsim = str(Path(sysconfig.get_path("scripts")) / "oodsim")

    def command(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [oodsim, *args], cwd=project, env=env, capture_output=True, text=True, timeout=300
        )

    assert command("run", "specs/tiny.toml", "--workers", "1").returncode == 0
    before = oodsim_key(project / "results" / "digits.zarr")
    spec_file.write_text(spec_file.read_text().replace('["msp"]', '["msp", "energy"]'))
    again = command("run", "specs/tiny.toml", "--workers", "1")
    assert again.returncode == 0, again.stderr
    assert "digits changed since results/digits.zarr was written (detectors + energy); " in (
        again.stderr
    )
    last = again.stdout.splitlines()[-1]
    assert ": 0 computed, 1 reused from the cache; nothing computed. " in last, last
    assert last.endswith("(1 earlier result of digits.zarr: oodsim results ls results/digits.zarr)")
    listed = command("results", "ls")
    assert listed.returncode == 0, listed.stderr
    latest, earlier = listed.stdout.splitlines()
    assert latest.startswith("results/digits.zarr ") and " 1 seed  " in latest
    assert latest.endswith(" 2 methods")
    assert earlier.startswith(f"  earlier: results/digits.history/{before[:12]}.zarr  ")
    assert earlier.endswith(" 1 method")


def oodsim_key(path: Path) -> str:
    """The spec key of the results at ``path``, read as `oodsim results ls` reads it."""
    from oodsim.results.history import read_saved

    saved = read_saved(path)
    assert saved is not None
    return saved.key
