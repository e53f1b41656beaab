"""Where a field of a TOML document is written: :func:`line_of` maps a field path
(``training.augment.rotation``, ``detectors[2].name``, ``ood[1].kind``) to its line.

``tomllib`` gives values, not positions, so spec errors could name a field but not the line a
user must edit. :func:`key_lines` scans a document that ``tomllib`` has already accepted and
notes the line of every key, table header, ``[[array]]`` table and array item: dotted keys,
quoted keys, inline tables, multi-line arrays and strings (whose brackets, ``#`` and ``=`` are
text, not syntax) included. It knows only positions: values are ``tomllib``'s to read.
"""

from __future__ import annotations

import bisect
import re
import tomllib
from collections.abc import Sequence

#: A part of a field path: a key, or an index into an array.
Part = str | int

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# a date-time may hold one space ("1979-05-27 07:32:00"); every other value ends at a blank
_SCALAR = re.compile(r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d[^\s,\]}#]*|[^\s,\]}#]+")
_PATH_PART = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def path_parts(path: str) -> tuple[Part, ...]:
    """``"detectors[2].name"`` → ``("detectors", 2, "name")``; ``"a.b[0][1]"`` →
    ``("a", "b", 0, 1)``."""
    return tuple(int(index) if index else key for index, key in _PATH_PART.findall(path))


def line_of(text: str, path: str | Sequence[Part]) -> int | None:
    """The line (from 1) where ``path`` is written in the TOML ``text``; where the path goes
    deeper than the text (a field left out, a parameter of an inline table), the line of the
    deepest part that is written; None if not even its first part is (a required table left
    out, a path that names no key)."""
    parts = path_parts(path) if isinstance(path, str) else tuple(path)
    lines = key_lines(text)
    for end in range(len(parts), 0, -1):
        if parts[:end] in lines:
            return lines[parts[:end]]
    return None


def key_lines(text: str) -> dict[tuple[Part, ...], int]:
    """The line (from 1) of every path written in the TOML ``text``: each key and table (and
    each table a dotted key or header implies, at its first mention), each ``[[array]]`` table
    and array item (by index). ``text`` must be valid TOML (``tomllib`` read it first)."""
    return _Scanner(text).scan()


class _Scanner:
    """One pass over a valid TOML document, noting the line of every path."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0
        self.newlines = [i for i, char in enumerate(text) if char == "\n"]
        self.lines: dict[tuple[Part, ...], int] = {}
        self.arrays: dict[tuple[Part, ...], int] = {}  # [[array]] tables: how many so far

    def scan(self) -> dict[tuple[Part, ...], int]:
        table: tuple[Part, ...] = ()
        while True:
            self._blank()
            if self.at >= len(self.text):
                return self.lines
            start = self.at
            if self.text.startswith("[[", self.at):
                self.at += 2
                table = self._header(self._key(), array=True)
                self._expect("]]")
            elif self.text.startswith("[", self.at):
                self.at += 1
                table = self._header(self._key(), array=False)
                self._expect("]")
            else:
                path = table + self._key()
                self._note(path, start)
                self._spaces()
                self._expect("=")
                self._value(path)
                continue
            self._note(table, start)

    # -- positions

    def _line(self, at: int) -> int:
        return bisect.bisect_left(self.newlines, at) + 1

    def _note(self, path: tuple[Part, ...], at: int) -> None:
        """``path`` is written at ``at``; a table it implies is noted at its first mention."""
        line = self._line(at)
        for end in range(1, len(path)):
            self.lines.setdefault(path[:end], line)
        self.lines[path] = line

    def _header(self, keys: tuple[str, ...], *, array: bool) -> tuple[Part, ...]:
        """The path of a ``[table]`` or ``[[array]]`` header: a key naming an array of tables
        means its latest table, and an ``[[array]]`` header adds a table to its array."""
        path: tuple[Part, ...] = ()
        for i, key in enumerate(keys):
            path += (key,)
            if array and i == len(keys) - 1:
                count = self.arrays.get(path, 0)
                self.arrays[path] = count + 1
                path += (count,)
            elif path in self.arrays:
                path += (self.arrays[path] - 1,)
        return path

    # -- syntax

    def _spaces(self) -> None:
        while self.at < len(self.text) and self.text[self.at] in " \t":
            self.at += 1

    def _blank(self) -> None:
        """Skip spaces, line breaks and comments."""
        while self.at < len(self.text):
            char = self.text[self.at]
            if char in " \t\r\n":
                self.at += 1
            elif char == "#":
                end = self.text.find("\n", self.at)
                self.at = len(self.text) if end < 0 else end
            else:
                return

    def _expect(self, token: str) -> None:
        self._spaces()
        if not self.text.startswith(token, self.at):  # tomllib accepted the text: a bug here
            raise ValueError(f"expected {token!r} at line {self._line(self.at)}")
        self.at += len(token)

    def _key(self) -> tuple[str, ...]:
        """A dotted key: ``a``, ``a.b``, ``"a.b".c``, ``'x' . y``."""
        keys = []
        while True:
            self._spaces()
            keys.append(self._simple_key())
            self._spaces()
            if not self.text.startswith(".", self.at):
                return tuple(keys)
            self.at += 1

    def _simple_key(self) -> str:
        char = self.text[self.at]
        if char in "\"'":
            start = self.at
            self._string()
            return tomllib.loads("k = " + self.text[start : self.at])["k"]
        match = _BARE_KEY.match(self.text, self.at)
        if match is None:
            raise ValueError(f"expected a key at line {self._line(self.at)}")
        self.at = match.end()
        return match.group()

    def _value(self, path: tuple[Part, ...]) -> None:
        self._spaces()
        char = self.text[self.at]
        if char == "[":
            self._array(path)
        elif char == "{":
            self._inline_table(path)
        elif char in "\"'":
            self._string()
        else:
            match = _SCALAR.match(self.text, self.at)
            self.at = match.end() if match else self.at + 1

    def _array(self, path: tuple[Part, ...]) -> None:
        self.at += 1
        index = 0
        while True:
            self._blank()
            if self.text.startswith("]", self.at):
                self.at += 1
                return
            self._note((*path, index), self.at)
            self._value((*path, index))
            self._blank()
            if self.text.startswith(",", self.at):
                self.at += 1
                index += 1

    def _inline_table(self, path: tuple[Part, ...]) -> None:
        self.at += 1
        while True:
            self._spaces()
            if self.text.startswith("}", self.at):
                self.at += 1
                return
            start = self.at
            inner = path + self._key()
            self._note(inner, start)
            self._expect("=")
            self._value(inner)
            self._spaces()
            if self.text.startswith(",", self.at):
                self.at += 1

    def _string(self) -> None:
        """Skip a string of any of TOML's four kinds."""
        quote = self.text[self.at]
        multi = self.text.startswith(quote * 3, self.at)
        self.at += 3 if multi else 1
        escapes = quote == '"'
        while True:
            char = self.text[self.at]
            if escapes and char == "\\":
                self.at += 2
            elif multi and self.text.startswith(quote * 3, self.at):
                self.at += 3
                while self.text.startswith(quote, self.at):  # up to two quotes end the text
                    self.at += 1
                return
            elif not multi and char == quote:
                self.at += 1
                return
            else:
                self.at += 1
