"""The project's contract with a new user: the README's two commands and CI stay in sync."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def _commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section)


def test_readme_has_the_two_commands() -> None:
    main, tests = _commands()
    assert "pip install -e ." in main and "oodsim run specs/digits.toml" in main
    assert 'pip install -e ".[test]"' in tests and "pytest" in tests


def test_ci_runs_exactly_the_readme_test_command() -> None:
    _, tests = _commands()
    script = (ROOT / ".ci" / "run").read_text()
    executable = [line for line in script.splitlines() if line and not line.startswith("#")]
    assert executable[-1] == tests


def test_shipped_open_set_specs_load() -> None:
    import oodsim

    for name in ("digits", "fashion_mnist", "digits_five_splits"):
        spec = oodsim.load_spec(ROOT / "specs" / f"{name}.toml")
        assert spec.name == name and len(spec.key) == 64
