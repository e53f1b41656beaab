"""Spec files: their text (a bounded, regular UTF-8 file), their TOML, and errors that name
the file and the line of each problem (:func:`read_spec`), for every protocol's specs."""

from __future__ import annotations

import contextlib
import re
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from oodsim.errors import SpecError, SpecFileNotFound, raise_alone, spec_problems
from oodsim.specs.toml_lines import line_of
from oodsim.store.fs import NotARegularFile, TooLarge, read_limited

#: The largest spec file read (a spec is a page of TOML; this is far beyond any).
SPEC_LIMIT = 4 << 20

_T = TypeVar("_T")


def read_spec(path: str | Path, build: Callable[[dict[str, Any]], _T], shown: str = "") -> _T:
    """``build`` (a spec from TOML data) applied to the spec file at ``path``: a missing or
    unreadable file, a syntax error and every problem ``build`` finds name the file (as
    ``shown``, default ``path`` as given) and the line (:func:`errors_in_file`)."""
    shown = shown or str(path)
    text = spec_text(path)
    data = parse_toml(text, shown)
    with errors_in_file(shown, text):
        return build(data)


def spec_text(path: str | Path) -> str:
    """The text of a spec file. A missing file is :class:`~oodsim.errors.SpecFileNotFound`;
    anything that is not a regular UTF-8 file of at most :data:`SPEC_LIMIT` bytes is a
    :class:`SpecError` (a FIFO or a device would block or never end)."""
    path = Path(path)
    try:
        return _spec_text(path)
    except FileNotFoundError:
        raise SpecFileNotFound(str(path), str(path.absolute().parent)) from None
    except IsADirectoryError:
        raise SpecError("spec file", str(path), "a TOML file, not a folder") from None
    except UnicodeDecodeError as error:
        raise SpecError(
            "spec file", str(path), f"a UTF-8 text file (byte {error.start} is not UTF-8)"
        ) from None
    except OSError as error:
        raise SpecError(
            "spec file", str(path), f"a readable TOML file ({error.strerror or error})"
        ) from None


class TomlSyntaxError(SpecError):
    """A spec file that is not valid TOML: ``x.toml:2:14: invalid TOML: <tomllib's reason>``."""

    def __init__(self, shown: str, reason: str) -> None:
        self.reason = reason
        super().__init__("spec file", shown, "valid TOML", reason)

    def _message(self) -> str:
        return f"{self.location or self.value}: invalid TOML: {self.reason}"


_TOML_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def parse_toml(text: str, shown: str) -> dict[str, Any]:
    """``text`` (of the spec file ``shown``) as plain data; a syntax error names the file, line
    and column (:class:`TomlSyntaxError`)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        reason = str(error)
        at = _TOML_AT.search(reason)
        if at is None:
            raise TomlSyntaxError(shown, reason) from None
        syntax = TomlSyntaxError(shown, reason[: at.start()])
        raise syntax.moved(location=f"{shown}:{at[1]}:{at[2]}") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise SpecError("spec file", shown, "TOML nested a few hundred levels at most") from None


@contextlib.contextmanager
def errors_in_file(shown: str, text: str) -> Iterator[None]:
    """Spec errors raised in the block, from data read from the TOML ``text`` of the file
    ``shown``, name the file and the line of each problem (``specs/x.toml:12: training.lr:
    ...``), in the order of their lines; a problem whose field is not written in the file
    (a required table left out) names the file alone. Problems that already name a place (of
    another file the spec reads) keep it."""
    try:
        yield
    except SpecError as error:
        lines = {}  # what is missing (no line) comes first
        for problem in error.problems:
            line = 0
            if not problem.location:
                line = line_of(text, problem.field) or line_of(
                    text, getattr(problem, "data_path", ())
                )
                problem.moved(location=f"{shown}:{line}" if line else shown)
            lines[id(problem)] = line or 0
        in_order = sorted(error.problems, key=lambda problem: lines[id(problem)])
        raise_alone(spec_problems(in_order, shown))


def _spec_text(path: Path) -> str:
    """The text of a spec file: a regular file (a link to one is fine) of at most
    :data:`SPEC_LIMIT` bytes, opened without blocking."""
    try:
        data = read_limited(path, SPEC_LIMIT, follow_links=True)
    except NotARegularFile as error:
        if error.found == "folder":
            raise IsADirectoryError(path) from None
        raise SpecError(
            "spec file", str(path), "a regular TOML file, not a pipe or device"
        ) from None
    except TooLarge:
        raise SpecError(
            "spec file", str(path), f"a TOML file of at most {SPEC_LIMIT >> 20} MiB"
        ) from None
    # utf-8-sig: a byte order mark, which some Windows editors write, was a syntax error
    # ("Invalid statement (at line 1, column 1)"); TOML files are UTF-8 either way
    return data.decode("utf-8-sig")
