"""A script that forgets ``if __name__ == "__main__":`` gets one clear error before any worker
process starts, instead of every spawned worker re-running it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from oodsim.clusters.guard import guarded_lines
from tests.conftest import ROOT


def _run_script(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source), encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_guarded_lines_finds_main_blocks() -> None:
    source = textwrap.dedent(
        """\
        import x
        if __name__ == "__main__":
            a = 1
            b = 2
        if "__main__" == __name__ and True:
            c = 3
        else:
            d = 4
        if __name__ != "__main__":
            e = 5
        """
    )
    assert guarded_lines(source) == [(3, 4), (6, 6)]


def test_unguarded_script_fails_with_one_clear_message(tmp_path: Path) -> None:
    done = _run_script(
        tmp_path,
        f"""\
        import oodsim

        spec = oodsim.load({str(ROOT / "specs" / "digits.toml")!r})
        oodsim.run(spec, n_workers=2, cache="cache")
        """,
    )
    assert done.returncode == 1
    assert "UnguardedScript" in done.stderr and "script.py, line 4" in done.stderr
    assert 'if __name__ == "__main__":' in done.stderr
    assert "bootstrapping" not in done.stderr and done.stderr.count("Traceback") == 1
    assert not (tmp_path / "cache").exists()  # stopped before anything was written


def test_where_the_call_comes_from(tmp_path: Path) -> None:
    """Top level and functions called from it are flagged; code under the guard is not."""
    done = _run_script(
        tmp_path,
        """\
        from oodsim.clusters.guard import unguarded_call

        def main():
            return unguarded_call()

        print("top", unguarded_call() is not None)
        print("function", main() is not None)
        if __name__ == "__main__":
            print("guarded", unguarded_call() is not None)
            print("guarded function", main() is not None)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:4] == [
        "top True",
        "function True",
        "guarded False",
        "guarded function False",
    ]


def test_a_package_main_run_with_dash_m_is_not_flagged(tmp_path: Path) -> None:
    """``python -m package`` runs ``package/__main__.py``, which spawned workers never re-run
    (as ``python -m oodsim.cli`` does)."""
    package = tmp_path / "tool"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(
        "from oodsim.clusters.guard import unguarded_call\nprint(unguarded_call())\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "tool"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"


def test_a_script_from_stdin_that_starts_a_local_cluster_gets_one_clear_error(
    tmp_path: Path,
) -> None:
    """``python - <<EOF``: spawned workers used to crash trying to run ``<stdin>`` again."""
    source = (
        "import oodsim\n\n"
        'if __name__ == "__main__":\n'
        f"    spec = oodsim.load({str(ROOT / 'specs' / 'digits.toml')!r})\n"
        '    oodsim.run(spec, n_workers=2, cache="cache")\n'
    )
    done = subprocess.run(
        [sys.executable, "-"],
        input=source,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1
    assert "UnreadableScript" in done.stderr and "(<stdin>)" in done.stderr
    assert "Save it to a file" in done.stderr and 'cluster="in-process"' in done.stderr
    assert done.stderr.count("Traceback") == 1 and "FileNotFoundError" not in done.stderr
    assert not (tmp_path / "cache").exists()  # stopped before anything was written
