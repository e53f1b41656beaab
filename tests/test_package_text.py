"""The package's text states contracts: docstrings, comments and messages say what holds, not
what once went wrong (the history lives in commits and tests)."""

from __future__ import annotations

import re

from tests.conftest import ROOT

PACKAGE = ROOT / "oodsim"

#: an incident told in the past ("a run used to wait forever"), not a purpose ("a name used
#: to group seeds", "is used to compute")
NARRATED = re.compile(r"(?<!\bis )(?<!\bare )(?<!\bbe )(?<!\bbeing )(?<!, )\bused to [a-z]+")


def narrations(text: str) -> list[str]:
    """The incident narrations in ``text`` (see :data:`NARRATED`), with their line numbers."""
    found = []
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        following = lines[number].lstrip(" #") if number < len(lines) else ""
        joined = f"{line} {following}"  # a narration may wrap onto the next line
        found += [
            f"{number}: {m.group(0)}"
            for m in NARRATED.finditer(joined)
            if m.start() < len(line)  # told where it starts, once
        ]
    return found


def test_no_text_of_the_package_narrates_an_incident() -> None:
    found = {
        path.relative_to(ROOT).as_posix(): hits
        for path in sorted(PACKAGE.rglob("*.py"))
        if (hits := narrations(path.read_text(encoding="utf-8")))
    }
    assert found == {}, "state the contract instead (the history lives in commits and tests)"


def test_narrations_are_told_from_purposes() -> None:
    assert narrations("a run waiting on another used to print nothing") == ["1: used to print"]
    assert narrations("a short name, used to group seeds\nit is used to compute") == []
    assert narrations("the names are used to key entries") == []
    assert narrations("a report used to\n    # overwrite it") == ["1: used to overwrite"]
